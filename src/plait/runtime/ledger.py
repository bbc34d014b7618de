"""A pass's ledger: what it read, what it will write, and the tasks it started.

A pass reads the run, its steps, its unconsumed events, the requests sent to it and not
taken yet, and its state in one round trip
(the snapshot), then collects its writes here as ops and commits them in as few
transactions as the promise allows: an attempt's start before its body runs (so a crash
shows up as an interrupted attempt), everything else with the next commit or the end of
the pass, which also gives the lease back. Both replays (code and graph) keep their
bookkeeping in a ledger; neither knows how the writes reach the database.
"""

from __future__ import annotations

import asyncio
import dataclasses
import math
from collections.abc import Callable, Coroutine, Iterable
from json.encoder import encode_basestring as _json_text
from typing import Any, cast

from plait import errors, ids, serde
from plait.retry import RetryPolicy
from plait.runtime import runs
from plait.runtime.control_flow import PassAborted, PauseSignal, SuspendSignal
from plait.runtime.host import Host
from plait.runtime.steps import MAX_AFTER, NEW_STATUS, PATCH_KIND
from plait.statuses import RunStatusName
from plait.store.ops import Batch, EndRun, Op, PutStep
from plait.store.rows import PassSnapshot, StepRow


@dataclasses.dataclass
class PassResult:
    """How a pass ended, for the worker that drove it."""

    #: running (it waits), completed, failed, cancelled, continued, suspended
    #: (``runs.pass_status``)
    status: RunStatusName
    #: runs this pass started that this process drives at once: child runs, and the run
    #: that continues this one
    children: list[str] = dataclasses.field(default_factory=list)  # pyright: ignore[reportUnknownVariableType]
    #: the pass put a job step on the job table: the step loops should look
    enqueued: bool = False
    #: set once the pass gave its lease back with its last writes: due again at once?
    again: bool | None = None
    #: the pass made child runs that wait for admission through their workflow's queue
    admit: bool = False
    #: live child runs the run's end, or the workflow's cancel of their step, cancelled
    #: (``CancelChildren``): stop their work here
    ended_children: list[str] = dataclasses.field(default_factory=list)  # pyright: ignore[reportUnknownVariableType]
    #: the error the pass ended the run with (its stored JSON), for the worker's log
    error: str | None = None
    #: the pass took job steps off the job table (their workflow cancelled them): a
    #: step worker of this process may be running one, to be stopped
    cancelled_jobs: bool = False


#: how long the ends of steps that finished wait for the next commit while other steps of
#: the pass run on (a long body beside them): then they are committed on their own, so a
#: crash does not run again bodies that ended long before it
ENDS_WAIT = 0.5


class Ledger:
    """The state of one pass; discarded when it ends."""

    #: a dry pass (``runtime.check``): steps are resolved from what is recorded, but no
    #: attempt, job or child run starts, and nothing is committed
    dry = False

    def __init__(self, host: Host, snapshot: PassSnapshot, owner: str) -> None:
        self.host = host
        #: the host clock's ``now``: every time this pass records
        self.now = host.clock.now
        self.owner = owner
        self.run = snapshot.run
        self.steps: dict[str, StepRow] = snapshot.steps
        self.events = list(snapshot.events)
        #: the requests sent to the run and not taken yet, oldest first
        self.requests = list(snapshot.requests)
        self.state: dict[str, Any] = {k: serde.loads(v) for k, v in snapshot.state.items()}
        self.input: Any = serde.loads(self.run.input)
        self.ops: list[Op] = []
        self.counters: dict[str, int] = {}
        self.seq = max((s.seq for s in self.steps.values()), default=-1) + 1
        self.children: list[str] = []
        #: live child runs the run's end cancels (see ``end``), and those of steps the
        #: workflow cancelled (``StepCancels.cancel``)
        self.ended_children: list[str] = []
        #: the error of the run's end, when this pass ends it
        self.end_error: str | None = None
        #: child runs made in this pass wait for their queue's admission
        self.admit = False
        #: a job step of this pass went on the job table (``steps.enqueue``)
        self.enqueued = False
        #: the run is due again as soon as this pass ends (it put back an event that a
        #: wait of this pass may not have seen)
        self.due_again = False
        #: every step started in this pass; the pass ends only when all have ended
        self.tasks: list[asyncio.Task[Any]] = []
        #: the next ordinal of a step outcome handed to the workflow (``mark_delivered``)
        self.next_delivered = (
            max((s.delivered for s in self.steps.values() if s.delivered is not None), default=-1)
            + 1
        )
        self.conflict: str | None = None
        #: the run's end once the workflow continued as new (``continue_as_new``): the
        #: pass stops there
        self.continued: EndRun | None = None
        #: replaying on code that is not the version the run started on
        self.foreign_version = False
        #: a new step must not come before a recorded one (a code replay: see ``check_new``)
        self.ordered = False
        #: the recorded steps this pass has not reached yet; patch markers are left out:
        #: one the code no longer reaches (a deprecated patch removed) changes no path
        self.unreached: set[str] = {k for k, s in self.steps.items() if s.kind != PATCH_KIND}
        #: steps made in this pass that no write has carried yet (see ``_carry_unwritten``)
        self.unwritten: list[StepRow] = []
        self.aborted: PassAborted | None = None
        #: the pass published a value (``wf.set_value``) not yet told to its watchers
        self.published = False
        #: steps the workflow cancelled in this pass (``CodeReplay``): no attempt of
        #: theirs starts, and what an attempt that ran on does is thrown away
        self.cancelled: set[str] = set()
        #: held while a ``wf.send_event`` commits (``send``): a flush waits for it, so no
        #: step made after the send's is written before the store's answer to the send is
        #: known (a refused send's step would be missing from a record that holds later ones)
        self._sending = asyncio.Lock()
        #: per step key, the task running its attempt's body now (``Driver.attempt``)
        self.bodies: dict[str, asyncio.Task[Any]] = {}
        #: a job step was cancelled in this pass (``PassResult.cancelled_jobs``)
        self.cancelled_jobs = False
        #: per step key reached in this pass, the keys of the steps it was reached after
        #: (a code replay fills it in; ``new_step`` records it with the step's first write)
        self.reached: dict[str, tuple[str, ...]] = {}
        #: new steps taken at once and judged later, in the order taken, each with its
        #: writes and whether they publish (``NewStepHold.take_at_once``)
        self.unjudged: dict[str, tuple[StepRow, list[Op], bool]] = {}
        #: the first of those the workflow's task running now comes after, if any (a code
        #: replay's ``ReachedAfter.after_unjudged``)
        self.after_unjudged: Callable[[], str | None] = _none

    # -- writes -------------------------------------------------------------------------------
    def add(self, ops: list[Op]) -> None:
        self.ops.extend(ops)

    def end(self, end: EndRun) -> None:
        """End the run with the next commit, with what that does to its parent's step
        and its live child runs (``runs.end_ops``)."""
        ops, ended = runs.end_ops(self.run, end, self.steps.values())
        self.ops.extend(ops)
        self.end_error = end.error
        if end.status in runs.TAKES_CHILDREN:
            self.ended_children += ended
        successor = end.successor
        if successor is not None:
            # the run that continues this one: driven here at once, as a child run is,
            # unless it waits for its queue's admission
            if successor.status == runs.ADMITTED:
                self.children.append(successor.id)
            else:
                self.admit = True

    def continue_as_new(self, payload: str | None, known: tuple[str, ...] = ()) -> None:
        """The workflow continues as new with ``payload`` (its input as JSON): checked as
        a start checks it (the workflow's input type raises ``InputValidationError``
        where it was called), then the first call decides the run's end: ``continued``,
        with the new run on the code deployed now (``runs.continued``).

        A continue where the run's history goes on (``ahead`` of a branch that received
        the outcomes ``known``) is code that took another path than the recorded one: a
        deploy that continues a loop sooner. Continued, the new run would do again the
        recorded steps' work; the run stops with a ``VERSION_CONFLICT`` instead."""
        workflow = self.run.workflow
        wdef = self.host.catalog.app.workflows.get(workflow)
        if wdef is not None and wdef.input_codec is not None:
            wdef.decode_input(payload)
        if self.continued is not None or self.conflict is not None:
            return
        first = self.ahead(known) if self.ordered and self.unreached else None
        if first is not None:
            self.conflict = (
                f"workflow {workflow!r} continues as new before step {first!r}, which the "
                "run recorded after this point: the code took another path than the "
                "recorded one, and the new run would do that step's work again (guard a "
                "change for new runs with wf.patched(...))"
            )
            self.conflict_at(first)
            return
        _kind, version = self.host.catalog.describe(workflow)
        self.continued = runs.continued(self.run, ids.new_run_id(), payload, version)

    def undecodable(self, step: StepRow, error: Exception) -> None:
        """Told of a recorded result the code's annotation no longer takes (a dry pass
        names its step); the error goes on to the workflow's code."""

    def conflict_at(self, key: str) -> None:
        """Told the key of the step a conflict found with no exception names: the recorded
        step a continue as new came before, a step taken at once and judged later (a dry
        pass notes it)."""

    async def continued_deadline(self, end: EndRun) -> EndRun:
        """``end`` (a continue as new) with its successor's own deadline, counted from
        now (``runs.continued_deadline``); a child's is capped by its live parent's
        deadline, read now (the run's own row does not hold it)."""
        successor, run = end.successor, self.run
        if successor is None or run.timeout is None:
            return end
        parent = None
        if run.parent_run_id is not None:
            found = await self.host.read_run(run.parent_run_id)
            if found is not None and not found.status.is_terminal and found.deadline_at:
                parent = found.deadline_at.timestamp()
        deadline_at = runs.continued_deadline(run, self.now(), parent)
        return dataclasses.replace(
            end, successor=dataclasses.replace(successor, deadline_at=deadline_at)
        )

    def put(self, step: StepRow) -> None:
        """Write the step's current row with the next commit."""
        step.updated_at = self.now()
        self.ops.append(PutStep(step))

    def mark_delivered(self, step: StepRow) -> None:
        """Record that the workflow saw this step's outcome now, after every outcome
        marked before it. The ordinal rides on the step's last write of this pass when
        that is not committed yet (an attempt's end), so it costs no statement of its
        own; an outcome that arrived from elsewhere (a worker, a child run, a resume)
        gets its own write."""
        step.delivered = self.next_delivered
        self.next_delivered += 1
        for op in reversed(self.ops):
            row = getattr(op, "step", None)
            if row is not None and row.key == step.key:
                row.delivered = step.delivered
                return
        self.put(step)

    def _carry_unwritten(self) -> None:
        """Every step made before a step that is written is written with it (pending, if
        nothing else was written for it yet), so a run's record is always a prefix of
        the steps it reached, in order. A step left out (a pass that stopped before
        starting it: a shutdown, a cancel) would otherwise look to the next pass like a
        step inserted before the recorded ones (see ``check_new``)."""
        unwritten = self.unwritten
        if not unwritten:
            return
        if len(unwritten) == 1 and self.ops:
            # the usual case: the one new step is the one the last op writes
            last = getattr(self.ops[-1], "step", None)
            if last is not None and last.key == unwritten[0].key:
                unwritten.clear()
                return
        written = {row.key for op in self.ops if (row := getattr(op, "step", None)) is not None}
        self.ops[:0] = [PutStep(step) for step in unwritten if step.key not in written]
        unwritten.clear()

    async def flush(self) -> None:
        while self._sending.locked():
            async with self._sending:
                pass
        if not self.ops:
            return
        self._carry_unwritten()
        ops, self.ops = self.ops, []
        await self._commit(ops)

    async def send(self, ops: list[Op], run_id: str) -> bool:
        """Commit a send's ops (``steps.send_event``) at once, with the writes waiting
        for the next commit, so the workflow is told what the store did: True once the
        event is stored for ``run_id``. False when that run ended since the pass read it
        (the store took no event and wrote nothing of the batch: the writes that waited
        wait for the next commit again, and the send's ops are dropped)."""
        async with self._sending:
            self.ops.extend(ops)
            self._carry_unwritten()
            batch, self.ops = self.ops, []
            try:
                await self._commit(batch, sending=True)
            except errors.EventNotStoredError:
                self.ops[:0] = [op for op in batch if not any(op is mine for mine in ops)]
                # the caller records the refusal before anything waiting for the lock runs
                return False
        # the commit woke the run in the database: wake this process's loops too
        self.host.sent_event(run_id)
        return True

    async def _commit(self, ops: list[Op], *, sending: bool = False) -> None:
        try:
            await self.host.commit(Batch(self.run.id, ops, fence=self.owner))
        except errors.RunEndedElsewhereError:
            # cancelled elsewhere: the attempt about to start was not, and its body must
            # not run; the pass stops as a cancel here stops it
            self.host.ended_elsewhere(self.run.id)
            raise asyncio.CancelledError from None
        except Exception as exc:
            if sending and isinstance(exc, errors.EventNotStoredError):
                raise  # nothing was written: the send fails (``send``)
            self.aborted = PassAborted(exc)
            raise self.aborted from exc
        if self.published:
            self._tell_published()

    async def finish(self, status: RunStatusName) -> PassResult:
        """The last writes of the pass and the release of its lease, in one commit. A
        pass cut short by a shutdown leaves the run due at once for another worker."""
        seen = -1 if self.host.stopping or self.due_again else self.run.wakeups
        self._carry_unwritten()
        ops, self.ops = self.ops, []
        self.host.giving_back(self.run.id)
        try:
            batch = Batch(self.run.id, ops, fence=self.owner, release_wakeups_seen=seen)
            again = await self.host.commit(batch)
        except Exception as exc:
            raise PassAborted(exc) from exc
        if self.published:
            self._tell_published()
        return PassResult(
            status,
            self.children,
            self.enqueued,
            again,
            admit=self.admit,
            ended_children=self.ended_children,
            error=self.end_error,
            cancelled_jobs=self.cancelled_jobs,
        )

    def _tell_published(self) -> None:
        """Watchers of the run's values hear of a committed ``wf.set_value`` at once,
        not when the pass ends."""
        self.published = False
        self.host.published(self.run.id)

    # -- tasks --------------------------------------------------------------------------------
    def spawn(self, coro: Coroutine[Any, Any, Any]) -> asyncio.Task[Any]:
        """Start a step's work as a task the pass keeps, so it can wait for every one of
        them (even after the workflow stopped waiting) before it records its outcome and
        gives up the lease."""
        task = asyncio.ensure_future(coro)
        self.tasks.append(task)
        return task

    def interrupt_bodies(self) -> None:
        """Cancel the tasks of the step bodies still running: each records its attempt
        interrupted (``Driver.attempt``), as at a shutdown."""
        for task in self.bodies.values():
            task.cancel()

    async def join(self) -> None:
        """Wait until every step this pass started has ended (its task is done)."""
        while True:
            pending = [t for t in self.tasks if not t.done()]
            if not pending:
                break
            await asyncio.wait(pending)
        for task in self.tasks:
            if not task.cancelled():
                task.exception()  # retrieved: a paused branch nobody awaited is not an error

    async def cancel_and_flush(self) -> None:
        """The pass's task was cancelled: stop its steps, let them record how they ended,
        and commit that."""
        for task in self.tasks:
            task.cancel()
        await asyncio.gather(*self.tasks, return_exceptions=True)
        await self.flush()

    # -- keys and steps -----------------------------------------------------------------------
    def next_key(self, name: str) -> str:
        """``name`` the first time a pass reaches it, then ``name#1``, ``name#2``..."""
        n = self.counters.get(name, 0)
        self.counters[name] = n + 1
        return name if n == 0 else f"{name}#{n}"

    def pause(self, key: str, until: float | None = None) -> PauseSignal:
        """The signal of a step that can go no further in this pass."""
        return PauseSignal(key, until)

    def new_step(
        self,
        key: str,
        name: str,
        kind: str,
        *,
        function: str | None = None,
        input: str | None = None,
        policy: RetryPolicy | None = None,
        timeout: float | None = None,
        job: bool = False,
        later: bool = False,
    ) -> StepRow:
        """A step reached for the first time (not written yet: the caller decides how).
        ``later``: its place is judged, and it is written, later
        (``NewStepHold.take_at_once``)."""
        if self.ordered and self.unreached and not later:
            self.check_new(key)
        now = self.now()
        reached = self.reached.get(key)
        after = None
        if reached is not None:
            try:
                (one,) = reached  # the usual case: a chain
                after = f"[{_json_text(one)}]"
            except ValueError:
                after = _keys_json(reached)
        # by position, in StepRow's field order: a step is made for every step reached,
        # and two dozen keywords cost more than the row's other work
        step = StepRow(
            self.run.id,  # run_id
            key,
            self.seq,  # seq
            name,
            kind,
            function,
            NEW_STATUS,  # status
            input,
            None,  # output
            None,  # error
            0,  # attempts
            0,  # failures
            policy.retries if policy else 0,  # retries
            policy.delay if policy else None,  # retry_delay
            timeout,
            ids.invocation_id(self.run.id, key),
            None,  # child_run_id
            None,  # branch
            None,  # from_key
            job,  # queued: a job step
            None,  # wake_at
            now,  # created_at
            now,  # updated_at
            None,  # delivered
            0,  # retried_failures
            after,  # reached_after
        )
        self.seq += 1
        self.steps[key] = step
        if self.ordered and not later:
            self.unwritten.append(step)
        return step

    def check_same(
        self, step: StepRow, kind: str, function: str | None, input: str | bool | None = False
    ) -> None:
        """A recorded step must be what the code asks for now, with the same input when
        ``input`` is given, or the replay has diverged: the code is not deterministic, or
        it is another version. Never hand a step another call's result. A step a fork
        kept from its source (``ids.kept_step``) is compared by kind and function only:
        its input may hold the source's run id."""
        self.reach(step.key)
        if step.kind == kind and step.function == function:
            if input is False or input == step.input or _same_json(input, step.input):
                return
            if ids.kept_step(self.run.id, step.key, step.invocation_id):
                return
            self.conflict = (
                f"step {step.key!r} was recorded with input {_clip(step.input)} but the "
                f"workflow code now passes {_clip(input)}; the code took another path "
                "than the one recorded (is it deterministic?)"
            )
            raise SuspendSignal(self.conflict, errors.VERSION_CONFLICT)
        was = f"{step.kind} {step.function!r}" if step.function else step.kind
        now = f"{kind} {function!r}" if function else kind
        self.conflict = (
            f"step {step.key!r} was recorded as {was} but the workflow code now asks for {now}"
        )
        raise SuspendSignal(self.conflict, errors.VERSION_CONFLICT)

    def reach(self, key: str) -> None:
        """A recorded step the code reached again, checked by its caller."""
        if self.unjudged and key in self.unreached:
            self._reached_after_unjudged(key)
        self.unreached.discard(key)

    def _reached_after_unjudged(self, key: str) -> None:
        """The recorded step ``key`` is reached again after a step taken at once and not
        judged yet (``NewStepHold.take_at_once``): that step was inserted before the run's
        history."""
        taken = self.after_unjudged()
        if taken is not None and self.conflict is None:
            self.conflict = self._inserted(taken, key)
            self.conflict_at(taken)

    def ahead(self, known: tuple[str, ...]) -> str | None:
        """The first recorded step the run has not reached again in this pass that comes,
        in the run's history, after the point where a task that received the outcomes
        ``known`` is: the history goes on past this point (None: it ends here, or before).

        A task is where the outcomes it has received put it (``reached``, see
        ``runtime.order``). A recorded step comes after that point when it was reached
        after one of those outcomes, or after a step that itself comes after it, reached
        again in this pass or not (a sibling task may have replayed it already: what came
        after it is still ahead). A step recorded before the run stored what it was
        reached after counts as ahead of every point. Steps of another branch of a
        gather that started from the same point count as ahead too: the record does not
        tell branches apart, and taking a new step there for one that belongs after the
        recorded ones would run it out of order without a word."""
        unreached = self.unreached
        if not unreached:
            return None
        start = not known
        later = set(known)
        steps = self.steps
        # the first of ``later`` the workflow was handed (by ``delivered``): a full list
        # (a gather wider than it keeps) may have dropped anything handed before its newest
        first = min(_handed(steps, later), default=None)
        for step in sorted(steps.values(), key=_by_seq):
            if step.kind == PATCH_KIND:
                continue
            after = step.reached_after
            if after is None:
                if step.key in unreached:
                    return step.key
                continue
            keys: list[str] = serde.loads(after)
            if (
                (start and not keys)
                or not later.isdisjoint(keys)
                or (
                    len(keys) >= MAX_AFTER
                    and first is not None
                    and first < max(_handed(steps, keys), default=-1)
                )
            ):
                if step.key in unreached:
                    return step.key
                later.add(step.key)
                if step.delivered is not None and (first is None or step.delivered < first):
                    first = step.delivered
        return None

    def would_conflict(self, key: str) -> bool:
        """Whether the step ``key``, which the run never recorded, would stop the run
        with a conflict when it is made (``check_new``), before anything starts it."""
        return (
            self.ordered
            and bool(self.unreached)
            and self.ahead(self.reached.get(key, ())) is not None
        )

    def check_new(self, key: str) -> None:
        """A step the run did not record may come only after everything the run recorded
        on its path: reached before a recorded step, it is code the run's history does
        not have at that point (a step inserted by a deploy, or code that is not
        deterministic), and running it would do out of order what the old code never
        did. The run stops with a ``VERSION_CONFLICT`` naming both steps; ``wf.patched``
        is the way to insert a step that old runs skip."""
        first = self.ahead(self.reached.get(key, ()))
        if first is None:
            return
        self.conflict = self._inserted(key, first)
        raise SuspendSignal(self.conflict, errors.VERSION_CONFLICT)

    def _inserted(self, key: str, first: str) -> str:
        """The conflict of a new step ``key`` reached before the recorded step ``first``."""
        where = "in this version of" if self.foreign_version else "in"
        return (
            f"step {key!r} {where} workflow {self.run.workflow!r} comes before step "
            f"{first!r}, which the run recorded, but the run never reached {key!r} there; "
            "the code took another path than the recorded one (guard a step added for new "
            "runs with wf.patched(...))"
        )


def _none() -> None:
    return None


def _by_seq(step: StepRow) -> int:
    return step.seq


def _handed(steps: dict[str, StepRow], keys: Iterable[str]) -> list[int]:
    """When the workflow was handed the outcomes of ``keys`` (``delivered``), for those
    it was handed.

    A full ``reached_after`` list keeps a wide gather's last outcomes only, so an outcome
    handed before the newest it names may have come before its step too (``ahead``).
    Counting it (as ``steps.reopened`` does) can only stop a new step that belongs where
    it is; not counting it would run one out of order without a word."""
    return [
        d for k in keys if (row := steps.get(k)) is not None and (d := row.delivered) is not None
    ]


def _keys_json(keys: tuple[str, ...]) -> str:
    """Step keys as a JSON list, built without the json module's Python layers (every
    new step pays for it; one key, the usual case, is written out in ``new_step``)."""
    return f"[{','.join(map(_json_text, keys))}]"


def _clip(text: object, limit: int = 200) -> str:
    shown = str(text)
    return shown if len(shown) <= limit else shown[:limit] + "..."


def _same_json(a: object, b: str | None) -> bool:
    """Equal as JSON values (a database may store JSON in its own spelling, an object
    its members in another order)."""
    if not isinstance(a, str) or b is None:
        return False
    return _same_value(serde.loads(a), serde.loads(b))


def _same_value(a: object, b: object) -> bool:
    """JSON equality, not Python's: ``true``, ``1`` and ``1.0`` are three values (a
    step handed ``1`` where it was recorded with ``true`` would get another call's
    result), and so are ``0.0`` and ``-0.0``."""
    if type(a) is not type(b):
        return False
    if isinstance(a, dict):
        da, db = cast("dict[str, object]", a), cast("dict[str, object]", b)
        return da.keys() == db.keys() and all(_same_value(v, db[k]) for k, v in da.items())
    if isinstance(a, list):
        la, lb = cast("list[object]", a), cast("list[object]", b)
        return len(la) == len(lb) and all(map(_same_value, la, lb))
    if isinstance(a, float):
        assert isinstance(b, float)
        return a == b and math.copysign(1.0, a) == math.copysign(1.0, b)
    return a == b
