"""Acting on runs that exist: resume a suspended run, retry a failed one, cancel one,
send it an event, and prune ended runs."""

from __future__ import annotations

import asyncio
from collections.abc import Iterable
from datetime import datetime, timedelta
from typing import Any

from plait import ids, queues, serde
from plait.durations import parse_duration, require_aware
from plait.engine.base import EngineBase, existing_id
from plait.errors import (
    RunNotFoundError,
    RunStateError,
)
from plait.ids import check_name
from plait.records import Run, RunStatus
from plait.runtime import runs
from plait.store.rows import PassSnapshot
from plait.worker import retention

#: reads of a run that ``resume`` and ``retry`` make before giving up on one that
#: keeps changing under them
_REOPEN_TRIES = 20
#: how long a reopen waits for this process's pass of the ended run to end (seconds)
_PASS_ENDING = 10.0


class ActionsMixin(EngineBase):
    """``Engine.resume``, ``retry``, ``cancel``, ``send_event`` and ``prune``."""

    async def resume(self, run_id: str, reason: str | None = None) -> Run:
        """A suspended run continues (status back to ``running``); a run
        ``needs_attention`` is refused (``RunStateError``: ``retry`` it). With ``reason`` only
        ``wf.suspend(reason)`` is released; without, every open suspend. A run suspended
        for a missing function tries it again either way.

        A resume is not a new attempt: a run with a deadline keeps it, unless it has
        passed already (before the deadline loop ended the run), in which case the run
        gets its timeout again from now, as a retry does."""
        if reason is not None and not isinstance(reason, str):
            raise TypeError(f"reason must be a string, got {type(reason).__name__}")

        return await self._reopen(run_id, runs.resume(reason))

    async def retry(self, run_id: str) -> Run:
        """A failed run goes on from the failed step; succeeded steps are kept. So does a
        run ``needs_attention``: its parked step gets a fresh retry budget.

        A failed step gets a fresh retry budget only if the workflow did not go on past
        its failure: one it caught (or gathered with ``return_exceptions=True``) and then
        reached another step after stays failed and replays as the same error, so its
        body never runs twice; the step the run's error names always runs again (the
        rule: ``steps.reopened``). Steps that were still waiting on a timer when the
        run failed (sleeps, event timeouts, retry back-offs, approval deadlines) get
        their timers back.

        A retry is a new attempt of the whole run: a run with a deadline (``timeout=``)
        gets a fresh one, its timeout counted from now, so a run that failed
        ``RUN_TIMEOUT`` has as long again (a child run: never past its live parent's
        deadline)."""

        return await self._reopen(run_id, runs.retry())

    async def _reopen(self, run_id: str, reopen: runs.Reopen) -> Run:
        """Read the run, decide what reopening it writes, and write that if nothing woke
        the run in between (a job step finishing, an event); else read it again."""
        existing_id(run_id)
        await self._ended_here(run_id, reopen.action)
        for _ in range(_REOPEN_TRIES):
            snapshot = await self.store.load_pass(run_id)
            if snapshot is None:
                raise RunNotFoundError(run_id)
            status = snapshot.run.status
            if not reopen.goes_on_from(status):
                raise RunStateError(run_id, status, reopen.action, _hint(status))
            now = self.clock.now()
            ops = reopen.ops(snapshot, now)
            deadline_at = reopen.deadline(snapshot.run, now, await self._parent_deadline(snapshot))
            run = await self.store.reopen_run(
                run_id,
                status,
                reopen.status(snapshot.run),
                deadline_at,
                snapshot.run.wakeups,
                ops,
            )
            if run is not None:
                if deadline_at is not None and deadline_at != snapshot.run.deadline_at:
                    self.worker.deadline_set(deadline_at)
                self._wake(run_id)
                return run
        raise RuntimeError(f"cannot {reopen.action} run {run_id!r}: it kept changing while read")

    async def _ended_here(self, run_id: str, action: str) -> None:
        """Wait for this process's pass of a run that ended (a cancel, a deadline) to end
        too: a step body that ignores cancellation keeps it going, and its last commit,
        under this worker's lease, would land in the reopened run (the step it ran
        cancelled again). ``RunStateError`` if it is still going after ``_PASS_ENDING``."""
        local = self.worker.driving.get(run_id)
        if local is None or not self.worker.cancelling(run_id):
            return
        await asyncio.wait({local}, timeout=_PASS_ENDING)
        if not local.done():
            raise RunStateError(
                run_id,
                "ending",
                action,
                "its last pass in this process is still running a step body that ignores "
                "cancellation; try again once it has returned",
            )

    async def _parent_deadline(self, snapshot: PassSnapshot) -> float | None:
        """The deadline of the live parent of a child run with a timeout, which a reopened
        child's deadline never passes; None for any other run."""
        run = snapshot.run
        if run.parent_run_id is None or run.timeout is None:
            return None
        parent = await self.store.get_run(run.parent_run_id)
        if parent is None or parent.status.is_terminal or parent.deadline_at is None:
            return None
        return parent.deadline_at.timestamp()

    async def cancel(self, run_id: str, reason: str | None = None) -> Run:
        """End the run ``cancelled`` with its children; running steps are cancelled and
        its timers never fire."""
        await self._cancel_one(run_id, reason)
        return await self.get_run(run_id)

    async def _cancel_one(self, run_id: str, reason: str | None) -> list[str]:
        """The cancel itself, shared with ``cancel_runs``: the ids of the runs it ended
        (the run and its children); the store refuses a run that is not live."""
        cut = runs.cancel(reason)
        try:
            moved = await self.store.cancel_run(
                existing_id(run_id), cut.status, cut.error, cut.parent, cut.cut
            )
        except RunStateError as exc:
            if exc.status != RunStatus.CONTINUED:
                raise
            raise RunStateError(
                run_id, exc.status, exc.action, await self._chain_hint(run_id)
            ) from None
        await self._cancelled(moved)
        return moved

    async def _chain_hint(self, run_id: str) -> str:
        """Where a run that continued as new goes on: the run of its chain that is the
        one to act on (followed as ``wait`` follows it)."""
        run = await self.get_run(run_id)
        seen = 0
        while run.status == RunStatus.CONTINUED and run.continued_to is not None and seen < 1000:
            run = await self.get_run(run.continued_to)
            seen += 1
        return f"its chain goes on as run {run.id!r} ({run.status.value}): act on that one"

    async def send_event(
        self, run_id: str, name: str, payload: Any = None, *, dedup: str | None = None
    ) -> bool:
        """Deliver to ``wf.wait_for_event(name)``; kept until the run waits for it.
        Returns whether the run was waiting for it: False means the event is held for a
        wait the run has not reached, or may never reach (its wait timed out already).

        ``dedup`` (a string of 1 to 512 characters) makes a send idempotent: a run takes
        one event of each key, held or consumed, so a webhook delivered twice is consumed
        once. A key the run took already changes nothing and returns False, even once the
        run has ended; two processes sending one key at once store one event. The keys go
        with the run's events when it is pruned (a send to a pruned run finds no run)."""
        if not isinstance(name, str) or not name:
            raise TypeError(f"event name must be a non-empty string, got {name!r}")
        check_name(name, "event name")
        if dedup is not None:
            ids.check_event_dedup(queues.check_text(dedup, "dedup"))
        existing_id(run_id)
        if name.startswith("__"):
            raise ValueError(
                f"event name {name!r} starts with '__', which plait keeps for its own "
                "messages (an approval is decided with engine.approve)"
            )
        payload_text = serde.dumps(payload, what=f"event {name!r}", limits=self.limits)
        waiting = await self.store.send_event(run_id, name, payload_text, dedup)
        self._wake(run_id)
        return waiting

    async def prune(
        self,
        *,
        older_than: float | str | timedelta | datetime,
        statuses: Iterable[retention.EndedStatus] = retention.ENDED,
    ) -> int:
        """Delete ended runs (with their steps, attempts, events, values and child runs)
        last updated before ``older_than`` (a duration back from now, or an aware
        datetime), in short batches; returns how many runs went. Running and suspended
        runs, and runs whose child runs have not all ended, are kept."""
        if isinstance(older_than, datetime):
            cutoff = require_aware(older_than, what="older_than").timestamp()
        else:
            cutoff = self.clock.now() - parse_duration(older_than, what="older_than")
        chosen = retention.check_statuses(tuple(statuses))
        return await retention.prune(self.store, cutoff=cutoff, statuses=chosen)


def _hint(status: str) -> str | None:
    """What to do instead with a run an action refused for its ``status``."""
    if status == runs.NEEDS_ATTENTION:
        return "retry it (a new budget for its parked step) or cancel it"
    return None
