"""``Worker``: its lifecycle, and the ``Host`` it offers every pass and every job.

Every engine with ``workers=True`` and every ``plait worker`` process runs one. Workers
share nothing but the database: a run is taken by a conditional write on its row (its
lease), a job step by one on its job row. A lease is renewed while its work goes on
and expires when the process dies, so another worker can take over.

The worker receives its parts (store, catalog, notifier, settings) when built and is the
``Host`` of every pass and every job it runs; it never sees the Engine. Its loops
are the classes it is made of, one file each (see ``plait.worker``).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import os
import signal
import socket
import uuid
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

from plait import serde
from plait.cancel_guard import guarded_task
from plait.catalog import Catalog
from plait.clock import SYSTEM_CLOCK, Clock
from plait.notify import DUE, Notifier
from plait.observe import Telemetry
from plait.records import SETTLED, Run, RunStatus
from plait.runtime.streams import StreamWriter
from plait.store.contract import Store
from plait.store.ops import Batch
from plait.store.rows import Spend
from plait.worker.admission import Admission
from plait.worker.brakes import Brakes
from plait.worker.deadlines import Deadlines
from plait.worker.jobs import Jobs
from plait.worker.leases import Leases
from plait.worker.passes import Passes
from plait.worker.registry import Registry
from plait.worker.retention import Retention
from plait.worker.stall_guard import StallGuard
from plait.worker.ticks import Ticks

log = logging.getLogger("plait.worker")
_HOST = socket.gethostname()


def _dead_here(owner: str) -> bool:
    """Whether a lease owner ("worker#host:pid:token") was a process of this machine that
    no longer exists."""
    try:
        host, pid, _token = owner.split("#", 1)[1].rsplit(":", 2)
        if host != _HOST:
            return False
        os.kill(int(pid), 0)
    except ProcessLookupError:
        return True
    except (ValueError, IndexError, PermissionError, OSError):
        return False
    return False


class Worker(Passes, Jobs, Admission, Ticks, Deadlines, Leases, Retention, Brakes, Registry):
    """Drives runs and runs job steps of one database. ``owner`` is this process's lease
    name. With ``take_work`` off it only drives what this process starts inline."""

    def __init__(
        self,
        store: Store,
        catalog: Catalog,
        notifier: Notifier,
        *,
        worker_id: str,
        lease_seconds: float,
        concurrency: int,
        poll_interval: float,
        take_work: bool = True,
        log_runs: bool = False,
        limits: serde.Limits | None = None,
        retain: float | None = None,
        clock: Clock = SYSTEM_CLOCK,
        telemetry: Telemetry | None = None,
        only_workflows: tuple[str, ...] | None = None,
        only_queues: tuple[str, ...] | None = None,
    ) -> None:
        self.store = store
        #: the time of timers and leases (the store's clock: they compare with its rows)
        self.clock = clock
        #: where passes and attempts are reported (None: nowhere, at no cost)
        self.telemetry = telemetry
        self.catalog = catalog
        self.notifier = notifier
        self.worker_id = worker_id
        self.concurrency = concurrency
        self.poll_interval = poll_interval
        self.take_work = take_work
        self.log_runs = log_runs
        self.limits = limits or serde.Limits()
        #: ended runs older than this many seconds are pruned in the background
        self.retain = retain
        #: runs the retention loop deleted so far
        self.pruned = 0
        #: the lease name: the worker id plus a token of this process, so two processes
        #: started with one --worker-id never pass each other's lease checks
        self.owner = f"{worker_id}#{_HOST}:{os.getpid()}:{uuid.uuid4().hex[:8]}"
        self.lease = lease_seconds
        self.driving: dict[str, asyncio.Task[Any]] = {}
        self.stepping: dict[tuple[str, str], asyncio.Task[Any]] = {}
        #: the jobs of ``stepping`` whose bodies run now (begun, not ending yet)
        self.attempting: dict[tuple[str, str], asyncio.Task[Any]] = {}
        self.run_leases: dict[str, float] = {}
        self.job_leases: dict[tuple[str, str], float] = {}
        self.tasks: set[asyncio.Task[Any]] = set()
        self.wake_passes = asyncio.Event()
        self.work_told = False
        self.wake_steps = asyncio.Event()
        #: look at the leases now, not at the next renewal: a commit of this process
        #: ended runs whose work may run here too
        self.check_leases = asyncio.Event()
        self.wake_admissions = asyncio.Event()
        #: set when this process changes a schedule; other processes' changes are read at
        #: the next poll (a wake-up for every start would cost each start two reads here)
        self.wake_schedules = asyncio.Event()
        #: set when this process starts a run whose deadline comes before the deadline
        #: loop's next look (``deadline_look_at``, the clock's time; None: not planned)
        self.wake_deadlines = asyncio.Event()
        self.deadline_look_at: float | None = None
        #: the clock's time of the admission loop's last look when queued runs were due
        #: that the queues' limits kept out (None: its last look left nothing due behind);
        #: a test engine's clock may jump past such runs, since only a finished run or a
        #: later time lets them in
        self.admission_blocked_at: float | None = None
        #: schedules whose workflow this process cannot start (another process may)
        self._unknown_schedules: set[str] = set()
        self.slots = asyncio.Semaphore(concurrency)
        #: set once the worker is stopping: passes start no new attempt
        self.stopping = False
        #: the store's commit itself (the host's ``commit``): a pass commits twice a step
        self.commit: Callable[[Batch], Awaitable[bool]] = store.commit
        #: runs being cancelled by a user, as opposed to work stopped by a shutdown
        self.cancelled: set[str] = set()
        self.loops: list[asyncio.Task[Any]] = []
        self._lease_task: asyncio.Task[Any] | None = None
        self.steps_run = 0
        self.only_workflows = only_workflows
        self.only_queues = only_queues
        self.brakes = frozenset()
        self.brakes_read_at = -math.inf  # never: read before the first body starts
        self.stored_limits = []
        self.budget_free_at = None
        self.limits_read_at = float("-inf")
        self.spend_pruned_at = float("-inf")
        self.started_at = clock.now()
        self.next_beat = 0.0
        #: keeps the leases while a step blocks the event loop
        #: where step bodies' stream entries go, committed in batches
        self.streams = StreamWriter(store.append_stream, self.stream_written, self.limits)
        self.stall_guard = StallGuard(store, self.owner, lease_seconds, self.holding)

    def holding(self) -> list[str]:
        """The runs whose leases this worker keeps: those it drives (no index holds a
        run's lease, so the store renews them by id). Read by the lease loop and by the
        stall guard's thread."""
        return list(self.driving)

    # -- the host of passes and jobs ------------------------------------------------------
    def cancelling(self, run_id: str) -> bool:
        return run_id in self.cancelled

    def ended_elsewhere(self, run_id: str) -> None:
        self.cancel_local([run_id])

    def giving_back(self, run_id: str) -> None:
        # no body starts after the last commit, and a renewal racing it must find no
        # lease here to lose (``Leases._renewed`` skips runs between passes)
        self.run_leases.pop(run_id, None)

    def stream_written(self, run_id: str) -> None:
        # entries of a step committed: their readers here look (other processes hear
        # of them from the store)
        self.notifier.local_run_changed(run_id, settled=False)

    def published(self, run_id: str) -> None:
        # a value committed mid-pass: the run goes on, so waiters for its end sleep on
        self.notifier.local_run_changed(run_id, settled=False)

    def sent_event(self, run_id: str) -> None:
        # the commit woke the run in the database and told the other processes
        self.notifier.local_run_changed(run_id, settled=False)
        self.notifier.local_work(DUE)

    async def read_run(self, run_id: str) -> Run | None:
        return await self.store.get_run(run_id)

    async def record_spend(self, spend: Sequence[Spend]) -> None:
        await self.store.record_spend(spend)

    async def read_state(self, run_id: str) -> dict[str, Any]:
        snapshot = await self.store.load_pass(run_id)
        raw = snapshot.state if snapshot is not None else {}
        return {k: serde.loads(v) for k, v in raw.items()}

    async def lineage_queues(self, run_id: str) -> frozenset[str]:
        queues: set[str] = set()
        seen: set[str] = set()
        next_id: str | None = run_id
        while next_id is not None and next_id not in seen:
            seen.add(next_id)
            run = await self.store.get_run(next_id)
            if run is None or run.status not in (RunStatus.RUNNING, RunStatus.SUSPENDED):
                break  # an ended run holds no slot, and no run above waits through it
            if run.queue is not None:
                queues.add(run.queue)
            next_id = run.parent_run_id
        return frozenset(queues)

    def run_changed(self, run_id: str, status: str, workflow: str = "") -> None:
        if self.log_runs and status != "running":
            log.info("run %s (%s) is now %s", run_id, workflow or "?", status)
        self.notifier.run_changed(run_id, settled=status in SETTLED)

    @property
    def busy(self) -> bool:
        """Whether this process has work in hand or a wake-up its loops have not seen
        yet: a pass, a job step, a claim about to be made."""
        return bool(self.tasks) or self.wake_passes.is_set() or self.wake_steps.is_set()

    # -- lifecycle ----------------------------------------------------------------------------
    async def reclaim(self) -> None:
        """Take back at once what an earlier life of this worker id leased. A lease that its
        holder renews within one renewal interval belongs to a live twin and is left alone."""
        leases = await self.store.leases_of(self.worker_id, self.owner)
        # A holder on this machine whose process is gone is certainly dead: no need to
        # wait for it to miss a renewal.
        dead = [lease for lease in leases if _dead_here(lease.owner)]
        if dead and await self.store.expire_leases(dead):
            self.wake()
        rest = [lease for lease in leases if lease not in dead]
        if not rest:
            return
        await asyncio.sleep(max(0.05, self.lease / 4) * 1.2 + 0.05)
        if await self.store.expire_leases(rest):
            self.wake()

    async def run_until_signal(
        self,
        close: Callable[[float], Awaitable[None]],
        *,
        drain: float,
        grace: float = 2.0,
        ready: Callable[[], None] | None = None,
    ) -> None:
        """Work until SIGTERM or SIGINT, then stop: work in hand gets ``drain`` seconds to
        finish. ``close`` (given the drain) stops this worker and what it was given.
        ``ready`` is called once the signals are handled: what it says (a worker's
        "working" line) is true only then, since a SIGTERM before would kill the process
        without its drain."""
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stop.set)
        if ready is not None:
            ready()
        try:
            await stop.wait()
            log.info("stopping: finishing work in hand (up to %gs)", drain)
        finally:
            closing = asyncio.ensure_future(close(drain))
            # wait without cancelling: a cancelled close would give up leases early
            done, _ = await asyncio.wait({closing}, timeout=drain + grace)
            if not done:
                # A sync step body runs in a thread that cannot be cancelled. Its lease is
                # still this worker's, so nobody else runs that step; exiting ends the thread, and
                # the lease expires so another worker runs the next attempt.
                log.warning("a step body is still running in a thread; exiting without it")
                logging.shutdown()
                os._exit(0)

    def start_loops(self, *, passes: bool = True, steps: bool = True) -> None:
        if passes:
            self.loops.append(asyncio.create_task(self._pass_loop(), name="plait-passes"))
            self.loops.append(asyncio.create_task(self._admit_loop(), name="plait-admissions"))
            self.loops.append(asyncio.create_task(self._schedule_loop(), name="plait-schedules"))
            self.loops.append(asyncio.create_task(self._deadline_loop(), name="plait-deadlines"))
        if steps:
            self.loops.append(asyncio.create_task(self._step_loop(), name="plait-steps"))
        if self.retain is not None:
            self.loops.append(asyncio.create_task(self._retention_loop(), name="plait-retain"))
        self._lease_task = asyncio.create_task(self._lease_loop(), name="plait-leases")
        self.stall_guard.start()
        self.spawn(self.reclaim(), name="plait-reclaim")
        self.loops.append(self._lease_task)

    def wake(self) -> None:
        """Something new may be due: wake the loops now instead of at their next poll."""
        self.told_of_runs()
        self.wake_steps.set()
        self.wake_admissions.set()

    def told_of_runs(self) -> None:
        """A run may be due to claim: the pass loop claims at once, without asking first."""
        self.work_told = True
        self.wake_passes.set()

    async def stop(self, *, drain: float = 0.0) -> None:
        """Stop taking work; give the work in hand ``drain`` seconds, then cancel it. Leases of
        cancelled work are released so another worker can take it at once."""
        self.stopping = True
        self.wake()
        # Leases keep being renewed while work in hand drains; only then do they stop.
        taking = [t for t in self.loops if t is not self._lease_task]
        for task in taking:
            task.cancel()
        for task in taking:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        in_hand = [t for t in self.tasks if not t.done()]
        if in_hand and drain > 0:
            await asyncio.wait(in_hand, timeout=drain)
        held = {*self.driving, *self.run_leases}
        for task in list(self.tasks):
            task.cancel()
        for task in list(self.tasks):
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        await self._give_back(held)
        if self._lease_task is not None:
            self._lease_task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._lease_task
        await asyncio.to_thread(self.stall_guard.stop)
        self.loops.clear()

    async def _give_back(self, held: set[str]) -> None:
        """A task cancelled before it began (a claimed run whose pass never started, a
        job not yet begun) released nothing: give back every lease this process still
        holds, so another worker takes the work now and not when the lease runs out."""
        try:
            await self.store.release_leases(self.owner, sorted(held))
        except Exception:
            log.warning("giving back the leases of a stopping worker failed", exc_info=True)

    def spawn(self, coro: Any, name: str | None = None) -> asyncio.Task[Any]:
        task = guarded_task(coro, name=name)  # its writes can go from the task itself
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)
        return task
