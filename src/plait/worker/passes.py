"""The pass loop: claiming due runs and driving their passes, one at a time per run.

A run is driven by one task of this process while it is due (``drive``); each pass replays
it once under its lease (``_one_pass``). The pass loop claims due runs as slots free up,
after a cheap read that says whether anything is due (``_due``), and the step loop waits
the same way (``_due``, ``_idle``).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from typing import Any

from plait.cancel_guard import uncancelled
from plait.errors import LeaseLostError
from plait.records import SETTLED, TERMINAL
from plait.runtime import runs
from plait.runtime.control_flow import PassAborted
from plait.runtime.orchestrator import execute_pass
from plait.store.rows import PassSnapshot
from plait.worker.state import WorkerState

log = logging.getLogger("plait.worker")

#: seconds a pass may start after its claim and still use what the claim read of the run
FRESH = 0.05


class Passes(WorkerState):
    """Passes: drive a run, one pass, the pass loop, waiting for due work."""

    def drive(
        self,
        run_id: str,
        *,
        claimed: bool = False,
        follow: bool = False,
        since: float | None = None,
        snapshot: PassSnapshot | None = None,
    ) -> None:
        """Run passes of ``run_id`` in this process until it pauses (or ends, if
        ``follow``: an inline run on an engine without worker loops keeps its driver).
        A ``claimed`` run's lease was taken by a request sent at ``since`` (the monotonic
        clock; None: unknown, and its first step body asks the store first); ``snapshot``
        is what the claim read of it, for the first pass."""
        if claimed and since is not None:
            self.leased([run_id], since)
        if self.stopping:
            return
        existing = self.driving.get(run_id)
        if existing is not None:
            if claimed:
                # We hold a fresh claim while an earlier driver is finishing: drive again
                # once it is done, or the claimed run would sit leased and idle.
                self.spawn(self._drive_after(existing, run_id))
            return
        task = self.spawn(
            self._drive(run_id, claimed, follow, snapshot, time.monotonic()),
            name=f"plait-run-{run_id}",
        )
        self.driving[run_id] = task
        task.add_done_callback(lambda _t: self._done_driving(run_id))

    async def _drive_after(self, earlier: asyncio.Task[Any], run_id: str) -> None:
        with contextlib.suppress(BaseException):
            await asyncio.shield(earlier)
        await asyncio.sleep(0)  # let the earlier driver's done-callback run
        if self.driving.get(run_id) is None:
            self.drive(run_id, claimed=True)

    def _done_driving(self, run_id: str) -> None:
        self.run_leases.pop(run_id, None)
        if self.driving.pop(run_id, None) is not None and len(self.driving) == self.concurrency - 1:
            # a full worker has a slot again: the pass loop, which found none, may claim
            self.wake_passes.set()
        self.cancelled.discard(run_id)

    async def _drive(
        self,
        run_id: str,
        claimed: bool,
        follow: bool,
        snapshot: PassSnapshot | None,
        read_at: float,
    ) -> None:
        """Passes of ``run_id`` while it is due. A slot is taken for each pass only, not
        while a followed run waits: a parent waiting for its child must not hold the slot
        the child needs."""
        while not self.stopping:
            again = False
            if snapshot is not None and (self.slots.locked() or time.monotonic() - read_at > FRESH):
                # what the claim read would be old by the time the pass runs (it waits for a
                # slot, or its task started late), and a pass judges timeouts by the clock:
                # an event sent meanwhile would be missed and its wait timed out
                snapshot = None
            async with self.slots:
                try:
                    since = time.monotonic()
                    got = claimed or await self.store.claim_run(
                        run_id, self.owner, self.lease, self.claim_scope()
                    )
                    if got and not claimed:
                        self.leased([run_id], since)
                except Exception:
                    log.warning("run %s: claiming failed; retrying", run_id)
                    got = False
                if got:
                    claimed = False
                    try:
                        again = await self._one_pass(run_id, snapshot)
                    finally:
                        # the lease is given back (or lost) with the pass, and its deadline
                        # goes with it: a renewal that finds the run released between
                        # passes takes nothing from this process
                        self.run_leases.pop(run_id, None)
                snapshot = None  # later passes read the run again
            if again:
                continue
            if not follow or not await self._wait_for_due(run_id):
                return

    async def _release_after_error(self, run_id: str) -> None:
        with contextlib.suppress(Exception):
            await self.store.release_run(run_id, self.owner, -1)
        await asyncio.sleep(0.05)  # back off a little before the run is claimed again

    async def _wait_for_due(self, run_id: str) -> bool:
        """Sleep until the run is due again; False once it no longer needs this driver."""
        try:
            snapshot = await self.store.load_pass(run_id)
        except Exception:
            log.warning("run %s: cannot read it (%s); waiting", run_id, "store error")
            await asyncio.sleep(0.5)
            return True
        if snapshot is None or snapshot.run.status != "running":
            return False
        wake_at = snapshot.run.wake_at
        if snapshot.run.lease_owner and snapshot.run.lease_until:
            wake_at = max(wake_at or 0.0, snapshot.run.lease_until)
        delay = 1.0 if wake_at is None else max(0.0, min(1.0, wake_at - self.clock.now()))
        event = self.notifier.watch(run_id)
        try:
            await self.clock.wait(event, delay)
        finally:
            self.notifier.unwatch(run_id, event)
        return True

    async def _one_pass(self, run_id: str, snapshot: PassSnapshot | None = None) -> bool:
        """One pass under the lease we hold; True if another is due right away."""
        try:
            if snapshot is None:
                snapshot = await self.store.load_pass(run_id)
            else:
                self.store.starting_pass(run_id)
            if snapshot is None:
                return False
            if snapshot.run.status != "running" or snapshot.run.lease_owner != self.owner:
                await self.store.release_run(run_id, self.owner, snapshot.run.wakeups)
                return False
            if self.telemetry is None:
                result = await execute_pass(self, snapshot, self.owner)
            else:
                with self.telemetry.passing(snapshot.run) as report:
                    result = await execute_pass(self, snapshot, self.owner)
                    report.status = result.status
            self.run_leases.pop(run_id, None)  # no body starts after the pass
            again = result.again
            if again is None:
                seen = -1 if self.stopping else snapshot.run.wakeups
                again = await self.store.release_run(run_id, self.owner, seen)
        except asyncio.CancelledError:
            with contextlib.suppress(Exception):
                await uncancelled(self.store.release_run(run_id, self.owner, -1))
            raise
        except (LeaseLostError, PassAborted) as exc:
            cause = exc.cause if isinstance(exc, PassAborted) else exc
            if isinstance(cause, LeaseLostError):
                log.warning("run %s: lease lost to another worker; leaving it", run_id)
                # given back if it was ours after all (a lease check that could not
                # confirm it in time): due at once, not when the lease runs out
                await self._release_after_error(run_id)
                return False
            log.warning("run %s: pass stopped by a store error (%s); retrying", run_id, cause)
            await self._release_after_error(run_id)
            return False
        except Exception:
            log.exception("run %s: pass crashed; it will be retried", run_id)
            await self._release_after_error(run_id)
            return False
        self.run_changed(run_id, result.status, snapshot.run.workflow)
        if result.status == "running" and self.braked(snapshot.run.workflow, snapshot.run.queue):
            # it stopped for a brake and gave the run back: it waits ``paused`` now
            await self.park_braked()
        if self.telemetry is not None and result.status != "running":
            self.telemetry.run_ended(run_id, snapshot.run.workflow, result.status, result.error)
        for child in result.children:
            self.run_changed(child, "running", f"child of {run_id}")
            self.drive(child, follow=not self.take_work)
        if result.ended_children:
            # the run's end cancelled them: stop their work here at once, as a cancel
            # does, and look for their own children at the lease check
            self.cancel_local(result.ended_children)
            for child in result.ended_children:  # one may have ended on its own first
                self.notifier.run_changed(child, settled=True)
            self.check_leases.set()
        if result.cancelled_jobs and self.attempting:
            # its workflow cancelled job steps: one may run here, stop it now
            self.check_leases.set()
        frees_slot = result.status in TERMINAL or result.status == runs.NEEDS_ATTENTION
        if result.admit or (snapshot.run.queue is not None and frees_slot):
            # a child waits for its queue, or a queue slot is free: every process may
            # admit the next run
            self.notifier.publish_work()
        elif not again and (
            result.status not in SETTLED
            or snapshot.run.parent_run_id is not None
            or result.enqueued
        ):
            # let the loops see new timers, job steps and woken parents; a run that
            # ended with no parent left them nothing new (and a process running runs
            # back to back would pay a read of the queue after every run). The slot it
            # frees is told when its driver ends (``_done_driving``)
            self.wake_passes.set()
            self.wake_steps.set()
        return again

    async def _pass_loop(self) -> None:
        # the last claim took as many runs as it asked for, so more may be due, or the
        # worker was told of new work (a start or an event in another process): the next
        # claim goes without the read that asks first (a busy worker would otherwise pay
        # two round trips for every claim, and a told one a round trip before its first
        # step)
        more = False
        while not self.stopping:
            self.wake_passes.clear()
            told, self.work_told = self.work_told, False
            free = max(0, self.concurrency - len(self.driving))
            claimed: list[PassSnapshot | str] = []
            if free and (more or told or await self._due(self.wake_passes, None)):
                since = time.monotonic()
                try:
                    claimed = await self._claim_due(free)
                except Exception:
                    log.exception("claiming due runs failed; retrying")
                more = len(claimed) == free
                for got in claimed:
                    if isinstance(got, str):
                        self.drive(got, claimed=True, since=since)
                    else:
                        self.drive(got.run.id, claimed=True, since=since, snapshot=got)
            if not (claimed and len(claimed) == free):
                await self._idle(self.wake_passes)

    async def _claim_due(self, free: int) -> list[PassSnapshot | str]:
        """Due runs, with what their passes read when the claim could read it too. A
        claim whose read failed wrote nothing: the runs are claimed again without it, so
        one run that cannot be read (a statement timeout on a huge history) holds up no
        other; its own pass then fails alone, as it would have before."""
        scope = self.claim_scope()
        try:
            passes = await self.store.claim_due_passes(self.owner, self.lease, free, scope)
        except ConnectionError:  # the store is away: claiming alone would fail the same way
            raise
        except Exception as exc:
            log.warning("claiming due runs with their passes failed (%s); claiming only", exc)
            return list(await self.store.claim_due_runs(self.owner, self.lease, free, scope))
        return list(passes)

    async def _due(self, wake: asyncio.Event, functions: list[str] | None) -> bool:
        """Whether anything is due now (runs, or jobs for ``functions``); a cheap read
        that spares the claim's write when there is nothing to take."""
        try:
            due = await self.store.next_due(functions, self.claim_scope())
        except Exception:
            log.exception("reading the queue failed; retrying")
            return False
        now = self.clock.now()
        if due is not None and due <= now:
            return True
        timeout = self.poll_interval
        if due is not None:
            timeout = max(0.001, min(timeout, due - now + 0.001))
        await self.clock.wait(wake, timeout)
        return False

    async def _idle(self, wake: asyncio.Event) -> None:
        if wake.is_set():
            await asyncio.sleep(0)
            return
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(wake.wait(), 0.05 if self.driving else 0.01)
