"""The delivery order of a code replay: which step outcome the workflow is handed next,
and what each step was reached after.

Outcomes are handed to the workflow one at a time, in the order the run first saw them;
that order is stored with each step (``delivered``), so concurrent branches take the
same keys and the same results on every replay (``deliverable``). Each step also
records the outcomes its task had received when it reached it (``ReachedAfter``),
which a retry reads to tell a handled failure from one the workflow never went on from
(``steps.reopened``).
"""

from __future__ import annotations

import asyncio
import collections
import functools
import math
from collections.abc import Awaitable, Callable
from typing import Any

from plait import errors, serde
from plait.runtime.control_flow import SuspendSignal
from plait.runtime.gates import Found
from plait.runtime.ledger import Ledger
from plait.runtime.steps import MAX_AFTER, ended_at
from plait.runtime.workflow import StepCall
from plait.runtime.workflow_loop import WorkflowLoop, current_task
from plait.store.ops import Op
from plait.store.rows import EventRow, StepRow


def deliverable(
    finished: list[StepCall[Any]],
    inflight: dict[asyncio.Task[None], StepCall[Any]],
    recorded: dict[str, StepRow],
) -> StepCall[Any] | None:
    """The next outcome the workflow sees, of the ``finished`` calls (``inflight``: the
    calls still being resolved). Outcomes it saw on an earlier pass come in the order
    it saw them then (their ``delivered`` ordinal), so every branch of a gather sees
    the same results in the same order and takes the same keys; an outcome still being
    resolved that comes earlier in that order is waited for. New outcomes come after,
    in the order they came about, and get the next ordinals: a pass that finds several
    over at once (after a restart, a deploy, workers that were down) hands a sleep's
    end at its time and an event when it arrived, as a process that never stopped
    would have, not in the order the workflow called them."""
    if not finished:
        return None
    if not inflight and len(finished) == 1:
        return finished[0]
    first, first_at = _earliest(finished, recorded)
    if inflight:
        running = [c for c in inflight.values() if c.outcome is None]
        _, running_at = _earliest(running, recorded)
        if running_at is not None and (first_at is None or running_at < first_at):
            return None
    if first is not None:
        return first
    # ties (steps that ended in this pass at the same clock reading) in the order they
    # finished: ``min`` keeps the first
    return min(finished, key=lambda call: _came_at(call, recorded.get(call.key)))


def event_order(event: EventRow) -> int:
    """Events wait in the order they arrived."""
    return event.id


def _earliest(
    calls: list[StepCall[Any]], recorded: dict[str, StepRow]
) -> tuple[StepCall[Any] | None, int | None]:
    """The call whose outcome the run saw first on an earlier pass, and when."""
    first: StepCall[Any] | None = None
    first_at: int | None = None
    for call in calls:
        step = recorded.get(call.key)
        at = step.delivered if step is not None else None
        if at is not None and (first_at is None or at < first_at):
            first, first_at = call, at
    return first, first_at


def _came_at(call: StepCall[Any], step: StepRow | None) -> float:
    """When a new outcome came about: what a wait found (an event, a gate's decisions,
    a request) when it arrived, or when the wait was made if it was there before;
    else when its step ended (``steps.ended_at``)."""
    if step is None:
        return math.inf
    found = call.result
    if isinstance(found, Found):
        times = [event.created_at for event in found.events]
        if found.request is not None:
            times.append(found.request.created_at)
        if times:
            return max(min(times), step.created_at)
    return ended_at(step)


class ReachedAfter:
    """What each step was reached after.

    Sequential steps come one after another; steps started together (a gather, a task
    group) come after the same step, and whatever follows the gather after all of them.
    A step's outcome is known to the task that called it once it is handed over; what a
    task made by another learnt goes to that one when it ends. Taken from the order the
    workflow's loop runs in and outcomes are handed over in, it is the same on every
    replay. ``reached`` (the ledger's) gets, per step key reached, the keys it came
    after."""

    def __init__(self, wloop: WorkflowLoop, reached: dict[str, tuple[str, ...]]) -> None:
        self.wloop = wloop
        self.reached = reached
        #: per task of the workflow, the keys of the step outcomes it has received that
        #: no later outcome it received came after: what its next step comes after
        self.known: dict[asyncio.Task[Any] | None, tuple[str, ...]] = {}
        #: per task of the workflow, what it knew when it was made
        self.inherited: dict[asyncio.Task[Any], tuple[str, ...]] = {}
        #: per task of the workflow that comes after a step taken at once and not judged
        #: yet (``NewStepHold.take_at_once``), the first such step: kept whole, where
        #: ``known`` keeps the last ``MAX_AFTER`` keys only (a wide gather drops it)
        self.unjudged_before: dict[asyncio.Task[Any] | None, str] = {}

    def received(self, task: asyncio.Task[Any] | None, key: str, after: tuple[str, ...]) -> None:
        """``task`` was handed ``key``'s outcome (``after``: what ``key`` came after)."""
        if self.known.get(task) is after:
            # the task learnt nothing since it called the step (a chain): the step's
            # outcome replaces all it knew
            self.known[task] = (key,)
        else:
            self.learn(task, key, after)

    def learn(self, task: asyncio.Task[Any] | None, key: str, after: tuple[str, ...]) -> None:
        """``task`` received ``key``'s outcome: it replaces what ``key`` came after. A task
        keeps at most the last ``MAX_AFTER`` keys: after a gather of thousands, every step
        would otherwise record thousands, and keeping them would cost the square."""
        known = self.known.get(task, ())
        if after:
            known = tuple(k for k in known if k not in after)
        if key not in known:
            known += (key,)
            if len(known) > MAX_AFTER:
                known = known[-MAX_AFTER:]
        self.known[task] = known

    def reached_now(self, key: str) -> None:
        """A step that resolves where it is reached (a recorded or published value): it
        comes after what its task knew, and what the task does next comes after it."""
        task = current_task(self.wloop)
        self.reached[key] = self.known.get(task, ())
        self.known[task] = (key,)

    def taken_unjudged(self, key: str) -> None:
        """The task running now took the step ``key`` at once, judged later: what it
        does next comes after it."""
        self.unjudged_before.setdefault(current_task(self.wloop), key)

    def after_unjudged(self) -> str | None:
        """The first step taken at once and not judged yet that the task running now
        comes after (None: none)."""
        before = self.unjudged_before
        return before.get(current_task(self.wloop)) if before else None

    def task_made(self, task: asyncio.Task[Any]) -> None:
        """A task of the workflow starts out knowing what the task that made it knew,
        and hands back what it learnt when it ends."""
        parent = current_task(self.wloop)
        known = self.known.get(parent)
        if known:
            self.known[task] = self.inherited[task] = known
        before = self.unjudged_before
        if before and parent in before:
            before[task] = before[parent]
        task.add_done_callback(functools.partial(self.task_ended, parent))

    def task_ended(self, parent: asyncio.Task[Any] | None, task: asyncio.Task[Any]) -> None:
        before = self.unjudged_before
        if before and task in before:
            before.setdefault(parent, before.pop(task))
        learnt = self.known.pop(task, None)
        inherited = self.inherited.pop(task, ())
        if not learnt or learnt == inherited:
            return
        # what it learnt came after what it started from
        if inherited:
            kept = self.known.get(parent, ())
            self.known[parent] = tuple(k for k in kept if k not in inherited)
        reached = self.reached
        for key in learnt:
            self.learn(parent, key, reached.get(key, ()))

    def clear(self) -> None:
        """Let go of the workflow's tasks (see ``CodeReplay._release``)."""
        self.known.clear()
        self.inherited.clear()
        self.unjudged_before.clear()


class NewStepHold:
    """New steps wait while the workflow is handed outcomes it saw on an earlier pass.

    Code the run's history has is replayed first: until every outcome the workflow was
    handed before is handed again, a step the run never recorded is held, not started,
    and let go once they are back or nothing else can go on. Unchanged code reaches
    such a step only when its last pass stopped between reaching a step and writing it
    (a step is written with the next commit after it is made, and made on its task's
    first turn); that pass made it after the outcomes it was reached before, as the hold
    does. A deploy that changed one branch of a gather so that the run stops with a
    ``VERSION_CONFLICT`` thus stops before a new step of another branch has run: the
    held steps are looked at first (``Ledger.would_conflict``), the conflicting one goes
    alone and stops the pass, and the others never start."""

    def __init__(self, ledger: Ledger, order: ReachedAfter) -> None:
        self.ledger = ledger
        self.order = order
        ledger.after_unjudged = order.after_unjudged
        #: keys of the outcomes the workflow was handed before and not yet again
        self.to_hand: set[str] = {
            key for key, step in ledger.steps.items() if step.delivered is not None
        }
        #: new steps taken at once while those are handed back, judged with the held
        #: steps (the ledger's: a recorded step reached after one shows it out of place)
        self.unjudged = ledger.unjudged
        #: new steps reached while those are handed back, in the order they were reached
        self.held: collections.deque[StepCall[Any]] = collections.deque()
        #: held steps let go while outcomes were still to hand (nothing else could go on:
        #: a step the code no longer reaches keeps its outcome for ever): never held again
        self.let_go: set[str] = set()
        #: per name of a step taken at once, the recorded step of that name reached before
        #: an outcome it came after was handed back, and that outcome (``reached_early``)
        self.early: dict[str, tuple[str, str]] = {}

    def holds(self, call: StepCall[Any]) -> bool:
        """Whether ``call`` waits (a step the run never recorded, reached too soon)."""
        if self.to_hand and call.key not in self.ledger.steps and call.key not in self.let_go:
            self.held.append(call)
            return True
        return False

    async def release(
        self,
        new: collections.deque[StepCall[Any]],
        stuck: bool,
        resolve: Callable[[StepCall[Any]], Awaitable[None]],
    ) -> bool:
        """Once the recorded outcomes are handed back, or when nothing else can go on
        (``stuck``), let the held steps go: put them back at the front of ``new``, in the
        order they were reached. A held step that would stop the run with a conflict goes
        alone and first, resolved here (``resolve``), so that the conflict stops the pass
        before any other held step starts. The steps taken at once meanwhile are judged
        first (``judge_later``): one out of place stops the pass the same way. They are
        written only once no held step stops it either. Whether anything was let go."""
        ledger = self.ledger
        if not (self.held or self.unjudged) or (self.to_hand and not stuck):
            return False
        # the steps reached before the held ones and handed to tasks of their own first
        # reach their records (a task's first turn), as they would have before the held
        # steps were made: one still counted as not reached would look like history
        # ahead of a held step
        await asyncio.sleep(0)
        if self.unjudged and not self.judge_later():
            return True
        for call in self.held:
            if ledger.would_conflict(call.key):
                self.held.remove(call)
                await resolve(call)
                return True
        self.write_judged()
        if self.to_hand:
            self.let_go.update(call.key for call in self.held)
        new.extendleft(reversed(self.held))
        self.held.clear()
        return True

    def take_at_once(
        self,
        key: str,
        kind: str,
        record: Callable[[StepRow], list[Op]],
        *,
        input: str | None = None,
        publishes: bool = False,
        point: bool = True,
    ) -> StepRow:
        """A new step the workflow takes where it is reached, with no await at which it
        could be held: a value, a published value, tags, a stream write, a patch marker.
        ``record`` makes its writes; ``point``: what the task does next comes after it
        (a patch marker is no point of the order: ``runtime.patches``).

        Taken while the outcomes are handed back, beside a branch whose history is not
        replayed yet, it would look like a step inserted before that history (the record
        does not tell branches apart): its place is judged when the held steps' is
        (``judge_later``), and nothing of it is written or published before, as nothing
        of a held step runs before. Should its own task, or one that comes after it,
        reach a recorded step meanwhile, it was inserted before the run's history
        (``Ledger.reach``). While one waits, every step taken at once after it waits
        too, so that the record stays a prefix of the steps reached."""
        ledger = self.ledger
        if self.early:
            self._taken_early(key)
        later = bool(self.to_hand) or bool(self.unjudged)
        step = ledger.new_step(key, key, kind, input=input, later=later)
        ops = record(step)
        if later:
            self.unjudged[key] = (step, ops, publishes)
            if point:
                self.order.taken_unjudged(key)
        else:
            self._write(ops, publishes)
        return step

    def reached_early(self, step: StepRow) -> None:
        """A recorded step taken at once is reached again. Such steps are counted by name
        across the run, not per task: one of the same name that a deploy added to another
        task, ahead of this step's own, reaches its key first and is handed its record
        (another branch's uuid or time; tags, a value or an entry of its own never
        written). Reached before an outcome it was recorded after is handed back, the
        step is noted, and a new step of its name taken later stops the run
        (``_taken_early``): the task it belongs to came for it. Only noted, since a
        deploy that removed the step it came after reaches it early as well (and takes
        nothing new of its name)."""
        to_hand = self.to_hand
        if not to_hand or step.reached_after is None:
            return
        for before in serde.loads(step.reached_after):
            if before in to_hand:
                self.early.setdefault(_name_of(step.key), (step.key, before))
                return

    def _taken_early(self, key: str) -> None:
        """A new step taken at once whose name a recorded one has (see ``reached_early``)."""
        early = self.early.get(_name_of(key))
        if early is None:
            return
        recorded, before = early
        ledger = self.ledger
        ledger.conflict = (
            f"step {recorded!r} was recorded after step {before!r}, but the workflow code "
            f"now reaches it before that, and then takes {key!r}: a step of the same name "
            "was added ahead of the recorded one (in another branch, or before it), and "
            f"would be handed {recorded!r}'s record; the code took another path than the "
            "recorded one (guard a step added for new runs with wf.patched(...))"
        )
        ledger.conflict_at(recorded)
        raise SuspendSignal(ledger.conflict, errors.VERSION_CONFLICT)

    def judge_later(self) -> bool:
        """Judge the steps taken at once that wait for it (``take_at_once``), in the
        order taken: whether all are in their place. The first out of it stops the run
        with a ``VERSION_CONFLICT`` (False), and none is ever written."""
        ledger = self.ledger
        if ledger.ordered and ledger.unreached:
            for key in self.unjudged:
                try:
                    ledger.check_new(key)
                except SuspendSignal:
                    ledger.conflict_at(key)
                    return False
        return True

    def write_judged(self) -> None:
        """Write the steps taken at once and found in place with the next commit."""
        ledger, unjudged = self.ledger, self.unjudged
        for step, ops, publishes in unjudged.values():
            if ledger.ordered:
                ledger.unwritten.append(step)
            self._write(ops, publishes)
        unjudged.clear()
        self.order.unjudged_before.clear()

    def _write(self, ops: list[Op], publishes: bool) -> None:
        """A step taken at once goes with the next commit, which tells the run's
        watchers when it ``publishes``."""
        ledger = self.ledger
        ledger.add(ops)
        ledger.published = ledger.published or publishes


def _name_of(key: str) -> str:
    """The name a step's key counts (``name#2``: ``name``)."""
    name, mark, n = key.rpartition("#")
    return name if mark and n.isdigit() else key
