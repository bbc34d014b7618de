"""``TestEngine``: an Engine whose clock is virtual, so a test of a workflow that sleeps
for a month takes milliseconds.

The engine's clock (``plait.clock.VirtualClock``) runs at wall speed and jumps forward.
It jumps only when the database shows nothing in flight: no run or job step under a
lease, no run and no job step due now, no schedule tick due now, no queued run due now
that a free slot would admit, and this process has no pass or step in hand. Then every
live run waits on the outside world or on a timer (a sleep, a retry back-off, an event
timeout, a delayed start, a run's deadline), and the clock moves to the earliest of
those timers or to the next tick of a schedule. Because a jump happens only when nobody
holds a lease, no lease ever looks expired because of one.

Jumps happen while the test awaits the engine for an outcome (``wait``, ``run``) and
inside ``advance``, never between two calls of the test: a test that starts a run and
then sends it an event is never raced by a jump to the event's timeout.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import shutil
import tempfile
import time
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

from plait.app import App
from plait.clock import VirtualClock, micros
from plait.durations import format_duration, parse_duration
from plait.engine import Engine
from plait.records import SETTLED, Run
from plait.store.rows import Pending

log = logging.getLogger("plait.testing")

#: real seconds ``advance`` waits for the engine to finish the work in hand before it
#: gives up and says what is still busy
SETTLE_TIMEOUT = 30.0


class TestEngine(Engine):
    """An ``Engine`` with a virtual clock, for tests.

    ``async with TestEngine(app) as env:`` opens a temporary SQLite file (removed on
    close) unless ``database`` names one; PostgreSQL works too. With ``time_skipping``
    (the default) the clock jumps to the next timer whenever every live run waits only
    on timers while the test awaits ``wait`` or ``run``; ``advance(duration)`` moves it
    by hand either way. The engine works its own runs and job steps in this process:
    no other worker may share its database, since their clocks would disagree.
    """

    __test__ = False  # a class named Test... that pytest must not collect

    def __init__(
        self,
        app: App,
        database: str | None = None,
        *,
        time_skipping: bool = True,
        start: datetime | None = None,
        **options: Any,
    ) -> None:
        if options.get("workers", True) is not True:
            raise ValueError(
                "TestEngine works its runs itself: workers=False is not supported "
                "(use plait.Engine for a database worked by other processes)"
            )
        if "clock" in options or "store" in options:
            raise TypeError("TestEngine makes its own clock and store; pass database=")
        if start is not None and start.tzinfo is None:
            raise ValueError(f"start must be an aware datetime, got {start!r}")
        self._tmpdir: str | None = None
        if database is None:
            self._tmpdir = tempfile.mkdtemp(prefix="plait-test-")
            database = f"sqlite:///{Path(self._tmpdir) / 'plait.db'}"
        self.time_skipping = bool(time_skipping)
        self.virtual_clock = VirtualClock(None if start is None else start.timestamp())
        super().__init__(app, database, clock=self.virtual_clock, **options)

    async def close(self, *, drain: float = 0.0) -> None:
        try:
            await super().close(drain=drain)
        finally:
            if self._tmpdir is not None:
                shutil.rmtree(self._tmpdir, ignore_errors=True)
                self._tmpdir = None

    # -- the virtual clock ---------------------------------------------------------------------
    def now(self) -> datetime:
        """The engine's time (what ``wf.now()`` records in a run reaching it now)."""
        return self.virtual_clock.datetime()

    async def advance(self, duration: float | str | timedelta) -> None:
        """Move the clock forward by ``duration``, firing on the way every timer that
        falls due, in order, each once the work before it has finished; then let the
        work due at the end finish too."""
        try:
            seconds = parse_duration(duration, what="advance duration")
        except ValueError as exc:
            raise ValueError(f"{exc} (advance moves the clock forward only)") from None
        deadline = time.monotonic() + SETTLE_TIMEOUT
        # the work in hand first (a run just started reaches its sleep), so a sleep of
        # ``duration`` that started before this call ends within it
        pending = await self._settle(deadline)
        target = self.virtual_clock.now() + seconds
        while True:
            due = self._next_time(pending)
            # a timer in the target's microsecond is within reach: a sleep of ``duration``
            # begun before this call ends within it, whichever way the float sums rounded
            # (the jump lands on the timer itself, so the clock may end that fraction of a
            # microsecond past the target)
            if due is None or micros(due) > micros(target):
                break
            self._jump(due)
            pending = await self._settle(deadline)
        self._jump(target)
        await self._settle(deadline)

    async def _wait(
        self, run_id: str, seconds: float | None, workflow: str | None, *, fresh: bool = False
    ) -> Run:
        """As ``Engine.wait`` (``timeout`` is in real time); with time skipping on, the
        clock jumps to the next timer whenever every live run waits only on timers."""
        if not self.time_skipping:
            return await super()._wait(run_id, seconds, workflow, fresh=fresh)
        skipper = asyncio.create_task(self._skip(run_id), name="plait-time-skipping")
        try:
            return await super()._wait(run_id, seconds, workflow, fresh=fresh)
        finally:
            skipper.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await skipper

    async def _skip(self, run_id: str) -> None:
        """Jump to the next timer each time the engine is quiet, until ``run_id`` has
        settled (a jump after it ended would run what its waiter never asked for: the
        next tick of a schedule, say) or this is cancelled."""
        while True:
            pending = await self._settle(None)
            run = await self.store.get_run(run_id)
            if run is not None and run.continued_to is not None:
                run_id = run.continued_to  # the wait follows the chain
                continue
            if run is None or run.status in SETTLED:
                return
            due = self._next_time(pending)
            if due is not None:
                self._jump(due)
            else:
                # nothing waits on a time: only the outside world (an event, a resume)
                # can move a run now; look again in a moment
                await asyncio.sleep(0.02)

    def _jump(self, when: float) -> None:
        before = self.virtual_clock.now()
        if self.virtual_clock.move_to(when):
            log.debug("virtual clock jumped %s ahead", format_duration(when - before))
            self.worker.wake()

    async def _settle(self, deadline: float | None) -> Pending:
        """Wait until nothing is in flight or due now; what the store then holds."""
        delay = 0.001
        while True:
            pending = await self._quiet()
            if pending is not None:
                return pending
            if deadline is not None and time.monotonic() > deadline:
                raise TimeoutError(
                    f"the engine did not settle within {SETTLE_TIMEOUT:g}s: runs or queued "
                    "steps are still held or due (a step that never ends? a queued function "
                    "no process here works?)"
                )
            await asyncio.sleep(delay)
            delay = min(0.02, delay * 2)

    async def _quiet(self) -> Pending | None:
        if not self.is_open:
            raise RuntimeError("the engine is not open: use `async with TestEngine(...)`")
        worker = self.worker
        if worker.busy:
            return None
        functions = [name for name, f in self.app.functions.items() if f.queued]
        pending = await self.store.pending(functions)
        if worker.busy or pending.leases:
            return None
        # "due" as the store and the worker decide it: the stored time against the clock,
        # unrounded; a time due by this rule is due on every store (PostgreSQL compares
        # both rounded to the microsecond, and rounding keeps the order)
        now = self.virtual_clock.now()
        if pending.next_due is not None and pending.next_due <= now:
            return None  # due now: a pass or a step is about to start
        if pending.next_tick is not None and pending.next_tick <= now:
            return None  # a schedule's tick: the schedule loop is about to start its run
        if pending.next_deadline is not None and pending.next_deadline <= now:
            return None  # a run's deadline: the deadline loop is about to end it
        if pending.next_start is not None and pending.next_start <= now:
            # a queued run may start: quiet only once the admission loop has looked at
            # this time, with nothing changed since, and left it to a slot or the window
            blocked = worker.admission_blocked_at
            if worker.wake_admissions.is_set() or blocked is None or blocked != now:
                return None
        return pending

    def _next_time(self, pending: Pending) -> float | None:
        """The next time the clock may jump to: a run's or a job's wake-up, a queued run's
        start, a schedule's tick, a run's deadline (a queued run already due waits for a
        slot, not a time). It is the time exactly as the store holds it, so that after the
        jump the store finds it due."""
        now = self.virtual_clock.now()
        times = [
            t for t in (pending.next_due, pending.next_tick, pending.next_deadline) if t is not None
        ]
        if pending.next_start is not None and pending.next_start > now:
            times.append(pending.next_start)
        lifts = self.worker.budget_free_at
        if lifts is not None and lifts > now and pending.next_start is not None:
            times.append(lifts)  # queued runs wait for a spend budget's window to free
        return min(times) if times else None


__all__ = ["TestEngine"]
