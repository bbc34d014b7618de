"""Steps the workflow cancels, and the timers a pass fires while steps are in flight.

Workflow code cancels a step the asyncio way: it cancels the task that awaits it
(``task.cancel()``, a failing ``TaskGroup`` sibling, the loser of ``asyncio.wait``), and
the step's call sees its future cancelled. The pass then cancels the step wherever it
is (``StepCancels``): one not started never starts, an inline body is cut and recorded
cancelled at once, a job step loses its job. A cancel only matters if the workflow can
make it while a step runs, and the workflow runs only between outcomes: so a timer that
comes due while bodies run in the pass (a deadline) fires in that pass (``PassTimers``),
as it would in plain asyncio.
"""

from __future__ import annotations

import asyncio
import collections
from collections.abc import Callable
from typing import Any

from plait.runtime import steps
from plait.runtime.ledger import Ledger
from plait.runtime.workflow import StepCall
from plait.statuses import STEP_IN_FLIGHT
from plait.store.rows import StepRow

#: the waits a pass fires itself when their time comes while steps are in flight
TIMED_KINDS = frozenset({"sleep", "event"})
#: the kinds of step a workflow's cancel ends: a body's, and a child run's
_CANCELLABLE = frozenset({"do", "child"})


class PassTimers:
    """The waits of a pass with a time of their own (a sleep, an event wait's timeout),
    with that time: while steps are in flight, the pass resolves them again when it
    comes (their pass side then finds its time has come)."""

    def __init__(self) -> None:
        self.timed: list[tuple[float, StepCall[Any]]] = []

    def __bool__(self) -> bool:
        return bool(self.timed)

    def add(self, call: StepCall[Any], until: float | None, step: StepRow | None) -> None:
        """``call`` paused until ``until``: kept if it is a timed wait."""
        if until is not None and step is not None and step.kind in TIMED_KINDS:
            self.timed.append((until, call))

    async def wait(
        self,
        inflight: dict[asyncio.Task[None], StepCall[Any]],
        now: Callable[[], float],
        fire: Callable[[StepCall[Any]], None],
        within: float | None = None,
    ) -> bool:
        """Wait until a step in flight ends (it leaves ``inflight``) or a timed wait's
        time comes (``fire`` resolves it again), for at most ``within`` seconds: whether
        either happened. A timer that comes due while a step's body runs wins the race
        as it would in plain asyncio: the workflow sees it before the step ends and may
        cancel the step (a deadline)."""
        done: set[asyncio.Task[None]] = set()
        fired = False
        if not self.timed:
            done, _ = await asyncio.wait(
                inflight, timeout=within, return_when=asyncio.FIRST_COMPLETED
            )
        else:
            left = min(until for until, _ in self.timed) - now()
            if left > 0:
                timeout = left if within is None else min(left, within)
                done, _ = await asyncio.wait(
                    inflight, timeout=timeout, return_when=asyncio.FIRST_COMPLETED
                )
            for call in self.take_due(now()):
                fire(call)
                fired = True
        for task in done:
            inflight.pop(task)
        return fired or bool(done)

    def take_due(self, now: float) -> list[StepCall[Any]]:
        """The waits whose time has come, taken off the list; a wait the workflow gave
        up is dropped (it is closed at the pass's end)."""
        due: list[StepCall[Any]] = []
        kept: list[tuple[float, StepCall[Any]]] = []
        for until, call in self.timed:
            if call.future.done():
                continue
            if until > now:
                kept.append((until, call))
            else:
                due.append(call)
        self.timed = kept
        return due

    def clear(self) -> None:
        self.timed.clear()


class StepCancels:
    """Cancels the steps of one pass whose awaiting tasks the workflow cancelled."""

    def __init__(self, ledger: Ledger) -> None:
        self.ledger = ledger

    def sweep(
        self,
        new: collections.deque[StepCall[Any]],
        inflight: dict[asyncio.Task[None], StepCall[Any]],
        waiting: list[StepCall[Any]],
    ) -> None:
        """The workflow cancelled tasks in its last turn: each step such a task awaited
        (its call's future is cancelled) is cancelled wherever it is. One not started
        yet (in ``new``) never starts; one whose body runs (inline, in ``inflight``) is
        recorded cancelled now and its body cancelled, and the pass goes on without
        waiting for it; one whose start is being written stops itself once it is
        (``Driver.attempt``); one ``waiting`` (a job step, a retry's back-off) is
        recorded cancelled, and a job step's step worker learns it at its next lease
        check; a child run's step is recorded cancelled and its child run cancelled
        (``steps.cancel_child``). A wait (a sleep, an event, a gate) is closed at the
        pass's end (``abandoned``)."""
        ledger = self.ledger
        if any(call.future.cancelled() for call in new):
            kept = [call for call in new if not call.future.cancelled()]
            for call in new:
                if call.future.cancelled() and not call.late:
                    self._never_started(call)
            new.clear()
            new.extend(kept)
        for task, call in list(inflight.items()):
            if not call.future.cancelled() or call.outcome is not None:
                continue
            ledger.cancelled.add(call.key)
            if ledger.bodies.get(call.key) is task:
                self._cut_body(task, call, inflight)
        for call in [c for c in waiting if c.future.cancelled()]:
            if self.cancellable(call):
                waiting.remove(call)
                self.cancel(call)

    def cancelled_paused(self, call: StepCall[Any]) -> bool:
        """Whether a step that paused (a job step on the job table, a retry's back-off)
        was cancelled meanwhile, as ``sweep`` found: it is recorded cancelled now."""
        if call.key in self.ledger.cancelled and self.cancellable(call):
            self.cancel(call)
            return True
        return False

    def abandoned(self, call: StepCall[Any]) -> bool:
        """A wait the workflow cancelled (a deadline that lost a race, a branch it gave
        up): no work stands behind it and nothing will take its outcome, so the run does
        not wait for it, as a program would not. A step with a body whose task the
        workflow cancelled was cancelled as soon as it did (``sweep``); a step nobody
        awaits still runs, and the run waits for it."""
        if not call.future.cancelled():
            return False
        step = self.ledger.steps.get(call.key)
        return step is not None and step.kind in steps.WAITS

    def close_abandoned(self, abandoned: list[StepCall[Any]]) -> None:
        """The waits the workflow cancelled in this pass end now, cancelled, and their
        timers go. Left open, every replay would resolve them again before the
        workflow cancels them again: an event or a decision sent later for the same
        name would be taken by a wait that throws it away, and never reach the wait of
        that name still open. Replays deliver the cancelled outcome after every outcome
        the workflow saw before, when it has cancelled the wait again."""
        ledger = self.ledger
        for call in abandoned:
            ledger.add(steps.cancel_wait(ledger.steps[call.key], ledger.now()))

    def left_behind(self, waiting: list[StepCall[Any]]) -> None:
        """A run that continues as new leaves the steps it waits on with work behind them
        (a job step on the job table or in a step worker, a retry's back-off): each is
        recorded cancelled, as if the workflow had cancelled it, so that no step of the
        ended run stays in flight in its record; a step worker running one stops it at
        its next lease check. Its child runs are cancelled by the end itself
        (``runs.end_ops``)."""
        for call in waiting:
            step = self.ledger.steps.get(call.key)
            if step is not None and step.kind != "child" and self.cancellable(call):
                self.cancel(call)

    def cancellable(self, call: StepCall[Any]) -> bool:
        """A step with work behind it (``wf.do`` of a function, a closure or a workflow:
        a child run) not ended yet."""
        step = self.ledger.steps.get(call.key)
        return step is not None and step.kind in _CANCELLABLE and step.status in STEP_IN_FLIGHT

    def cancel(self, call: StepCall[Any]) -> None:
        """Record the step of ``call`` cancelled (``steps.cancel_step``; a child run's
        step with its child run, ``steps.cancel_child``) where the workflow cancelled
        it: it takes the next place in the delivery order."""
        ledger = self.ledger
        step = ledger.steps[call.key]
        ledger.cancelled.add(call.key)
        child = step.child_run_id if step.kind == "child" and step.status == "running" else None
        if child is None:
            ledger.add(steps.cancel_step(step, ledger.now()))
        else:
            ledger.add(steps.cancel_child(step, ledger.run.id, ledger.now()))
            # not driven here, and stopped here if it is (the worker's ``cancel_local``)
            if child in ledger.children:
                ledger.children.remove(child)
            ledger.ended_children.append(child)
        ledger.mark_delivered(step)
        ledger.cancelled_jobs = ledger.cancelled_jobs or step.queued
        call.outcome = "cancelled"

    def _never_started(self, call: StepCall[Any]) -> None:
        """A step the workflow cancelled before the pass started it: it never starts,
        and nothing is recorded (a replay cancels it again before it starts). A step
        an earlier pass recorded is reached, and cancelled if it is still in flight."""
        ledger = self.ledger
        ledger.cancelled.add(call.key)
        call.outcome = "cancelled"
        if call.key in ledger.steps:
            ledger.reach(call.key)
            if self.cancellable(call):
                self.cancel(call)

    def _cut_body(
        self,
        task: asyncio.Task[None],
        call: StepCall[Any],
        inflight: dict[asyncio.Task[None], StepCall[Any]],
    ) -> None:
        """Cancel a step whose body runs in ``task``: the cancel is recorded now, the
        body gets ``CancelledError``, and the pass no longer waits for the task (a body
        that ignores the cancel, or a sync one, runs on; what it does is thrown away)."""
        ledger = self.ledger
        del ledger.bodies[call.key]
        self.cancel(call)
        del inflight[task]
        ledger.tasks.remove(task)
        _detach(task)
        task.cancel()


#: tasks of steps the workflow cancelled whose bodies run on after their pass let them
#: go: kept until they end (asyncio keeps only weak references to tasks)
_DETACHED: set[asyncio.Task[Any]] = set()


def _detach(task: asyncio.Task[Any]) -> None:
    _DETACHED.add(task)
    task.add_done_callback(_forget)


def _forget(task: asyncio.Task[Any]) -> None:
    _DETACHED.discard(task)
    if not task.cancelled():
        task.exception()  # retrieved: what a cancelled step did is thrown away
