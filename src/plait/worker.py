"""The loops that do the work: orchestrator passes, queued steps, lease renewal.

Every engine with ``workers=True`` and every ``plait worker`` process runs these. They share
nothing but the database: a run is taken by a conditional write on its row (its lease),
a queued step by one on its job row. A lease is renewed while work is held and expires
when the process dies, so another worker can take over.

The worker receives its parts (store, catalog, notifier, settings) when built and is the
``Host`` of every pass and queued attempt it runs; it never sees the Engine.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import socket
import time
import uuid
from collections.abc import Awaitable, Callable
from typing import Any

from plait import retention, schedules, serde
from plait.cancel_guard import guarded_task, uncancelled
from plait.catalog import Catalog
from plait.clock import SYSTEM_CLOCK, Clock
from plait.errors import LeaseLostError, StepFunctionMismatchError
from plait.lease_keeper import StallGuard
from plait.notify import Notifier
from plait.observe import Telemetry
from plait.records import SETTLED, TERMINAL, RunStatus
from plait.runtime import steps
from plait.runtime.control_flow import PassAborted
from plait.runtime.job import run_job as run_queued
from plait.runtime.orchestrator import execute_pass
from plait.store.base import (
    Batch,
    NewRun,
    Op,
    QueueLimits,
    ScheduleRow,
    StepJob,
    StepRow,
    Store,
)

log = logging.getLogger("plait.worker")
_HOST = socket.gethostname()
#: the least time between two looks of the admission loop for queued runs to admit
ADMIT_GAP = 0.05


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


def spec_of(row: ScheduleRow) -> schedules.ScheduleSpec:
    """A stored schedule's definition as a ``ScheduleSpec``."""
    data = serde.loads(row.definition) if isinstance(row.definition, str) else row.definition
    return schedules.ScheduleSpec(
        name=row.name,
        workflow=row.workflow,
        input=data.get("input"),
        cron=data.get("cron"),
        every=data.get("every"),
        timezone=data.get("timezone", "UTC"),
        overlap=data.get("overlap", "skip"),
        catchup=float(data.get("catchup", 0.0)),
        queue=data.get("queue"),
    )


def held_of(limited: list[QueueLimits]) -> set[str]:
    """The queued functions whose jobs are claimed through limited queues."""
    return {fn for q in limited for fn in q.functions}


class Worker:
    """Drives runs and queued steps of one database. ``owner`` is this process's lease
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
        self.tasks: set[asyncio.Task[Any]] = set()
        self.wake_passes = asyncio.Event()
        self.wake_steps = asyncio.Event()
        #: look at the leases now, not at the next renewal: a commit of this process
        #: ended runs whose work may run here too
        self.check_leases = asyncio.Event()
        self.wake_admissions = asyncio.Event()
        #: set when this process changes a schedule; other processes' changes are read at
        #: the next poll (a kick for every start would cost each start two reads here)
        self.wake_schedules = asyncio.Event()
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
        #: keeps the leases while a step blocks the event loop
        self.stall_guard = StallGuard(store, self.owner, lease_seconds, self.holding)

    def holding(self) -> list[str]:
        """The runs whose leases this worker keeps: those it drives (no index holds a
        run's lease, so the store renews them by id). Read by the lease loop and by the
        stall guard's thread."""
        return list(self.driving)

    # -- the host of passes and queued attempts -------------------------------------------
    def cancelling(self, run_id: str) -> bool:
        return run_id in self.cancelled

    def ended_elsewhere(self, run_id: str) -> None:
        self.cancel_local([run_id])

    def published(self, run_id: str) -> None:
        # a value committed mid-pass: the run goes on, so waiters for its end sleep on
        self.notifier.local_run_changed(run_id, settled=False)

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
        yet: a pass, a queued step, a claim about to be made."""
        return bool(self.tasks) or self.wake_passes.is_set() or self.wake_steps.is_set()

    # -- lifecycle ----------------------------------------------------------------------------
    async def reclaim(self) -> None:
        """Take back at once what an earlier life of this worker id held. A lease that its
        holder renews within one renewal interval belongs to a live twin and is left alone."""
        held = await self.store.leases_of(self.worker_id, self.owner)
        # A holder on this machine whose process is gone is certainly dead: no need to
        # wait for it to miss a renewal.
        dead = [lease for lease in held if _dead_here(lease.owner)]
        if dead and await self.store.expire_leases(dead):
            self.kick()
        rest = [lease for lease in held if lease not in dead]
        if not rest:
            return
        await asyncio.sleep(max(0.05, self.lease / 4) * 1.2 + 0.05)
        if await self.store.expire_leases(rest):
            self.kick()

    async def run_until_signal(
        self, close: Callable[[float], Awaitable[None]], *, drain: float, grace: float = 2.0
    ) -> None:
        """Work until SIGTERM or SIGINT, then stop: work in hand gets ``drain`` seconds to
        finish. ``close`` (given the drain) stops this worker and what it was given."""
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stop.set)
        try:
            await stop.wait()
            log.info("stopping: finishing work in hand (up to %gs)", drain)
        finally:
            closing = asyncio.ensure_future(close(drain))
            # wait without cancelling: a cancelled close would give up leases early
            done, _ = await asyncio.wait({closing}, timeout=drain + grace)
            if not done:
                # A sync step body runs in a thread that cannot be cancelled. Its lease is
                # still held, so nobody else runs that step; exiting ends the thread, and
                # the lease expires so another worker runs the next attempt.
                log.warning("a step body is still running in a thread; exiting without it")
                logging.shutdown()
                os._exit(0)

    def start_loops(self, *, passes: bool = True, steps: bool = True) -> None:
        if passes:
            self.loops.append(asyncio.create_task(self._pass_loop(), name="plait-passes"))
            self.loops.append(asyncio.create_task(self._admit_loop(), name="plait-admissions"))
            self.loops.append(asyncio.create_task(self._schedule_loop(), name="plait-schedules"))
        if steps:
            self.loops.append(asyncio.create_task(self._step_loop(), name="plait-steps"))
        if self.retain is not None:
            self.loops.append(asyncio.create_task(self._retention_loop(), name="plait-retain"))
        self._lease_task = asyncio.create_task(self._lease_loop(), name="plait-leases")
        self.stall_guard.start()
        self.spawn(self.reclaim(), name="plait-reclaim")
        self.loops.append(self._lease_task)

    def kick(self) -> None:
        """Something new may be due: wake the loops now instead of at their next poll."""
        self.wake_passes.set()
        self.wake_steps.set()
        self.wake_admissions.set()

    async def stop(self, *, drain: float = 0.0) -> None:
        """Stop taking work; give what is held ``drain`` seconds, then cancel it. Leases of
        cancelled work are released so another worker can take it at once."""
        self.stopping = True
        self.kick()
        # Leases keep being renewed while work in hand drains; only then do they stop.
        taking = [t for t in self.loops if t is not self._lease_task]
        for task in taking:
            task.cancel()
        for task in taking:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        held = [t for t in self.tasks if not t.done()]
        if held and drain > 0:
            await asyncio.wait(held, timeout=drain)
        for task in list(self.tasks):
            task.cancel()
        for task in list(self.tasks):
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        if self._lease_task is not None:
            self._lease_task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._lease_task
        await asyncio.to_thread(self.stall_guard.stop)
        self.loops.clear()

    def spawn(self, coro: Any, name: str | None = None) -> asyncio.Task[Any]:
        task = guarded_task(coro, name=name)  # its writes can go from the task itself
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)
        return task

    # -- orchestrator passes ------------------------------------------------------------------
    def drive(self, run_id: str, *, claimed: bool = False, follow: bool = False) -> None:
        """Run passes of ``run_id`` in this process until it pauses (or ends, if
        ``follow``: an inline run on an engine without worker loops keeps its driver)."""
        if self.stopping:
            return
        existing = self.driving.get(run_id)
        if existing is not None:
            if claimed:
                # We hold a fresh claim while an earlier driver is finishing: drive again
                # once it is done, or the claimed run would sit leased and idle.
                self.spawn(self._drive_after(existing, run_id))
            return
        task = self.spawn(self._drive(run_id, claimed, follow), name=f"plait-run-{run_id}")
        self.driving[run_id] = task
        task.add_done_callback(lambda _t: self._done_driving(run_id))

    async def _drive_after(self, earlier: asyncio.Task[Any], run_id: str) -> None:
        with contextlib.suppress(BaseException):
            await asyncio.shield(earlier)
        await asyncio.sleep(0)  # let the earlier driver's done-callback run
        if self.driving.get(run_id) is None:
            self.drive(run_id, claimed=True)

    def _done_driving(self, run_id: str) -> None:
        if self.driving.pop(run_id, None) is not None and len(self.driving) == self.concurrency - 1:
            # a full worker has a slot again: the pass loop, which found none, may claim
            self.wake_passes.set()
        self.cancelled.discard(run_id)

    async def _drive(self, run_id: str, claimed: bool, follow: bool) -> None:
        """Passes of ``run_id`` while it is due. A slot is held for each pass only, not
        while a followed run waits: a parent waiting for its child must not hold the slot
        the child needs."""
        while not self.stopping:
            again = False
            async with self.slots:
                try:
                    got = claimed or await self.store.claim_run(run_id, self.owner, self.lease)
                except Exception:
                    log.warning("run %s: claiming failed; retrying", run_id)
                    got = False
                if got:
                    claimed = False
                    again = await self._one_pass(run_id)
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

    async def _one_pass(self, run_id: str) -> bool:
        """One pass under the lease we hold; True if another is due right away."""
        try:
            snapshot = await self.store.load_pass(run_id)
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
                return False
            log.warning("run %s: pass stopped by a store error (%s); retrying", run_id, cause)
            await self._release_after_error(run_id)
            return False
        except Exception:
            log.exception("run %s: orchestrator pass crashed; it will be retried", run_id)
            await self._release_after_error(run_id)
            return False
        self.run_changed(run_id, result.status, snapshot.run.workflow)
        if self.telemetry is not None and result.status != "running":
            self.telemetry.run_ended(run_id, snapshot.run.workflow, result.status)
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
        if result.admit or (snapshot.run.queue is not None and result.status in TERMINAL):
            # a child waits for its queue, or a queue slot is free: every process may
            # admit the next run
            self.notifier.publish_work()
        elif not again and (
            result.status not in SETTLED or snapshot.run.parent_run_id is not None or result.queued
        ):
            # let the loops see new timers, queued steps and woken parents; a run that
            # ended with no parent left them nothing new (and a process running runs
            # back to back would pay a read of the queue after every run). The slot it
            # frees is told when its driver ends (``_done_driving``)
            self.wake_passes.set()
            self.wake_steps.set()
        return again

    async def _pass_loop(self) -> None:
        # the last claim took as many runs as it asked for, so more may be due: the next
        # claim goes without the read that asks first (a busy worker would otherwise pay
        # two round trips for every claim)
        more = False
        while not self.stopping:
            self.wake_passes.clear()
            free = max(0, self.concurrency - len(self.driving))
            claimed: list[str] = []
            if free and (more or await self._due(self.wake_passes, None)):
                try:
                    claimed = await self.store.claim_due_runs(self.owner, self.lease, free)
                except Exception:
                    log.exception("claiming due runs failed; retrying")
                more = len(claimed) == free
                for run_id in claimed:
                    self.drive(run_id, claimed=True)
            if not (claimed and len(claimed) == free):
                await self._idle(self.wake_passes)

    async def _due(self, wake: asyncio.Event, functions: list[str] | None) -> bool:
        """Whether anything is due now (runs, or jobs for ``functions``); a cheap read
        that spares the claim's write when there is nothing to take."""
        try:
            due = await self.store.next_due(functions)
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

    # -- queues -------------------------------------------------------------------------------
    def queue_limits(self) -> list[QueueLimits]:
        """The limits of the app's queues that have any, with the queued functions each
        admits; read each time, like the functions."""
        app = self.catalog.app
        limits: list[QueueLimits] = []
        for queue in sorted(app.queues.values(), key=lambda q: q.name):
            if not queue.limited:
                continue
            functions = tuple(
                sorted(n for n, f in app.functions.items() if f.queued and f.queue == queue.name)
            )
            limits.append(
                QueueLimits(
                    queue.name,
                    queue.concurrency,
                    queue.per_key,
                    None if queue.rate is None else queue.rate.count,
                    None if queue.rate is None else queue.rate.window,
                    functions,
                )
            )
        return limits

    async def _admit_loop(self) -> None:
        """Admit queued runs whose start time has come, as the queues' limits allow. The
        admission leases each run to this worker in the same write, so an admitted run
        costs no more writes than a run started without a queue."""
        while not self.stopping:
            self.wake_admissions.clear()
            wait = self.poll_interval
            admitted: list[str] = []
            free = max(0, self.concurrency - len(self.driving))
            blocked = None
            try:
                due = await self.store.next_queued()
                now = self.clock.now()
                if due is not None and due <= now and free:
                    admitted = await self.store.admit_runs(
                        self.owner, self.lease, free, self.queue_limits()
                    )
                    if len(admitted) < free:
                        # what is still due waits for a slot or the rate window
                        blocked = now
                elif due is not None:
                    wait = max(0.001, min(wait, due - now + 0.001))
            except Exception:
                log.exception("admitting queued runs failed; retrying")
            self.admission_blocked_at = blocked
            for run_id in admitted:
                self.notifier.run_changed(run_id, settled=False)
                self.drive(run_id, claimed=True)
            if admitted and len(admitted) == free:
                await asyncio.sleep(0)
                continue
            looked = time.monotonic()
            await self.clock.wait(self.wake_admissions, wait)
            # wake-ups come with every start and every finished job of the database; one
            # look per ADMIT_GAP is enough, and keeps the pool free for passes and leases
            await asyncio.sleep(max(0.0, looked + ADMIT_GAP - time.monotonic()))

    # -- schedules ----------------------------------------------------------------------------
    async def _schedule_loop(self) -> None:
        """Start the runs of due schedule ticks. Every worker runs this loop; a tick's run
        id is the same in all of them and the schedule's next tick moves by a compare and
        set, so each tick starts one run however many workers look at it."""
        batch = 100
        while not self.stopping:
            self.wake_schedules.clear()
            wait = self.poll_interval
            try:
                now = self.clock.now()
                due = await self.store.due_schedules(now, batch)
                fired = 0
                for row in due:
                    fired += await self._fire(row, now)
                upcoming = await self.store.next_schedule_tick()
                if upcoming is not None:
                    wait = max(0.0, min(wait, upcoming - self.clock.now() + 0.001))
                if fired and len(due) == batch:
                    wait = 0.0
                elif due and not fired:
                    # due, but not startable here: leave it to a process that can
                    wait = self.poll_interval
            except Exception:
                log.exception("starting scheduled runs failed; retrying")
            if wait > 0:
                await self.clock.wait(self.wake_schedules, wait)
            else:
                await asyncio.sleep(0)

    async def _fire(self, row: ScheduleRow, now: float) -> int:
        """Start the due ticks of one schedule; how many looks it took (0: none here)."""
        if row.next_tick is None:
            return 0
        spec = spec_of(row)
        try:
            kind, version = await self.catalog.resolve(spec.workflow)
        except Exception:
            if row.name not in self._unknown_schedules:
                self._unknown_schedules.add(row.name)
                log.warning(
                    "schedule %s: workflow %r is not in this app; another worker may start it",
                    row.name,
                    spec.workflow,
                )
            return 0
        ticks, next_tick = schedules.due_ticks(spec, row.next_tick, now)
        runs = [
            self.scheduled_run(
                spec.name,
                spec.workflow,
                spec.input,
                kind,
                version,
                tick,
                row.owner,
                stored_queue=spec.queue,
            )
            for tick in ticks
        ]
        started = await self.store.fire_schedule(
            row.name, row.next_tick, next_tick, runs, spec.overlap == "skip"
        )
        log_starts = self.log_runs or (self.telemetry is not None and self.telemetry.log_work)
        for run_id in started or ():
            if log_starts:
                log.info("schedule %s started run %s", row.name, run_id)
            self.notifier.run_changed(run_id, settled=False)
        if started:
            self.kick()
        return 1

    def scheduled_run(
        self,
        name: str,
        workflow: str,
        data: Any,
        kind: str,
        version: str | None,
        tick: float,
        owner: str | None,
        *,
        stored_queue: str | None = None,
    ) -> NewRun:
        """The run of one tick of schedule ``name``: its id names the schedule and the
        tick; a workflow declared with a queue is admitted through it.

        The queue is the workflow's as this process registers it; a process that does
        not register the workflow (the command line, an engine of another app) uses
        ``stored_queue``, the queue the schedule recorded when it was stored
        (``ScheduleSpec.queue``), so the run never skips its queue for want of code."""
        wdef = self.catalog.app.workflows.get(workflow)
        queue = wdef.queue if wdef is not None else stored_queue
        return NewRun(
            id=schedules.run_id_for(name, tick),
            workflow=workflow,
            kind=kind,
            version=version,
            # not held to this process's limits again: they held when the schedule was
            # made, and PostgreSQL's jsonb may spell a stored number longer than it came
            # (1e300 as 301 digits), so a second measure could refuse what was accepted
            input=serde.dumps(data, what=f"the input of schedule {name!r}"),
            owner=owner,
            status="queued" if queue is not None else "running",
            queue=queue,
            scheduled_at=tick,
        )

    # -- queued steps -------------------------------------------------------------------------
    async def _step_loop(self) -> None:
        #: a limited queue came back with fewer jobs than asked: its functions are left
        #: out of the look for due work until something changes (a kick) or a poll passes,
        #: so a full queue is not claimed from in a loop
        full_until = 0.0
        # as in the pass loop: a claim that filled every free slot is followed by a claim,
        # not by a read of when work is due
        more = False
        while not self.stopping:
            if self.wake_steps.is_set():
                full_until = 0.0
            self.wake_steps.clear()
            # read each time: a function registered after start-up is worked too
            functions = [name for name, f in self.catalog.app.functions.items() if f.queued]
            if not functions:
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self.wake_steps.wait(), self.poll_interval)
                continue
            limited = [q for q in self.queue_limits() if q.functions]
            held = held_of(limited)
            functions = [name for name in functions if name not in held]
            try_limited = bool(limited) and time.monotonic() >= full_until
            free = max(0, self.concurrency - len(self.stepping))
            jobs: list[StepJob] = []
            looking = functions + (sorted(held) if try_limited else [])
            if free and looking and (more or await self._due(self.wake_steps, looking)):
                try:
                    if functions:
                        jobs = await self.store.claim_step_jobs(
                            self.owner, self.lease, free, functions
                        )
                    if try_limited and len(jobs) < free:
                        wanted = free - len(jobs)
                        got = await self.store.claim_queue_jobs(
                            self.owner, self.lease, wanted, limited
                        )
                        if len(got) < wanted:
                            full_until = time.monotonic() + self.poll_interval
                        jobs += got
                except Exception:
                    log.exception("claiming step jobs failed; retrying")
                more = len(jobs) == free
                for job in jobs:
                    key = (job.run_id, job.step_key)
                    task = self.spawn(self._run_job(job), name=f"plait-step-{job.step_key}")
                    self.stepping[key] = task

                    def forget(_task: asyncio.Task[Any], key: tuple[str, str] = key) -> None:
                        self.stepping.pop(key, None)

                    task.add_done_callback(forget)
            elif free and not looking:
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self.wake_steps.wait(), self.poll_interval)
                continue
            if not (jobs and len(jobs) == free):
                await self._idle(self.wake_steps)

    async def _run_job(self, job: StepJob) -> None:
        async with self.slots:
            try:
                await self.run_job(job)
            except asyncio.CancelledError:
                raise
            except StepFunctionMismatchError:
                pass  # logged and dropped in run_job
            except Exception:
                log.exception(
                    "step %s of run %s: job failed; it will be redelivered",
                    job.step_key,
                    job.run_id,
                )

    async def begin_job(self, job: StepJob, owner: str | None = None) -> StepRow | None:
        """Begin the attempt a claimed job delivers, or say why not (None): the job is
        stale, the run is not running, the step gave up after too many interruptions
        (``runtime.steps.begin`` decides), or the job is no longer ``owner``'s."""
        owner = owner or self.owner
        step = job.step
        if step is not None and step.function != job.function:
            # Rejected without running anything: the job goes back under the function the
            # step was created with.
            await self.store.repair_job(job, owner, step.function or "")
            raise StepFunctionMismatchError(
                f"job for step {job.step_key!r} of run {job.run_id} names function "
                f"{job.function!r}, but the step was created with {step.function!r}"
            )
        if step is None or step.status not in ("scheduled", "running"):
            await self.store.drop_job(job, owner)  # its step no longer waits for it
            return None
        if self.telemetry is not None and step.status == "running":
            self.telemetry.taken_over(job.run_id, step)
        ops, go = steps.begin(step, owner, self.clock.now())
        if not go:
            await self.store.finish_queued_step(job, owner, ops)
            return None
        return step if await self.store.begin_queued_step(job, owner, ops) else None

    async def run_job(self, job: StepJob) -> None:
        """Execute one delivery of a queued step. Duplicate deliveries are harmless: the
        attempt begins by a conditional write on the job, so only one of them runs it."""
        fdef = self.catalog.app.functions.get(job.function)
        try:
            step = await self.begin_job(job)
        except StepFunctionMismatchError as exc:
            log.error("rejected a step job: %s", exc)
            raise
        if step is None:
            return
        if fdef is None:  # pragma: no cover - claim filters on the functions we have
            return

        async def finish(ops: list[Op]) -> bool:
            return await self.store.finish_queued_step(job, self.owner, ops)

        finished = await run_queued(self, step, fdef, finish, job.workflow, job.trace)
        self.steps_run += 1
        if not finished:
            log.warning(
                "step %s of run %s: its job is no longer held (the run ended, or the job's "
                "lease ran out and another worker took it); result dropped",
                job.step_key,
                job.run_id,
            )
            return
        self.notifier.publish_work()
        self.kick()

    # -- leases -------------------------------------------------------------------------------
    async def _retention_loop(self) -> None:
        """Prune ended runs older than ``retain`` now and then: at start, then every tenth
        of the retention (at least a second, at most an hour). Batches are short, so live
        runs never wait for a prune; with several workers, each prunes what it finds."""
        assert self.retain is not None
        every = min(3600.0, max(1.0, self.retain / 10))
        while not self.stopping:
            try:
                pruned = await retention.prune(self.store, cutoff=self.clock.now() - self.retain)
                self.pruned += pruned
                if pruned:
                    log.info("pruned %d ended runs older than %gs", pruned, self.retain)
            except Exception:
                log.exception("pruning ended runs failed; trying again later")
            await asyncio.sleep(every)

    async def _lease_loop(self) -> None:
        every = max(0.05, self.lease / 4)
        next_sweep = time.monotonic() + 5.0
        while True:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.check_leases.wait(), every)
            self.check_leases.clear()
            self.stall_guard.beat()
            if self.take_work and not self.stopping and time.monotonic() >= next_sweep:
                next_sweep = time.monotonic() + 5.0
                try:
                    if await self.store.sweep_idle():
                        self.kick()
                except Exception:
                    log.exception("sweeping idle runs failed")
            if not self.driving and not self.stepping:
                continue
            try:
                stepping = sorted({run_id for run_id, _key in self.stepping})
                gone = await self.store.renew_leases(
                    self.owner, self.lease, self.holding(), stepping
                )
            except Exception:
                log.exception("renewing leases failed")
                continue
            if gone:
                self.cancel_local(gone)

    def cancel_local(self, run_ids: list[str] | set[str]) -> None:
        """Stop in-process work of cancelled runs right away."""
        self.cancelled.update(run_ids)
        for run_id in run_ids:
            task = self.driving.get(run_id)
            if task is not None:
                task.cancel()
            for (rid, _key), step_task in list(self.stepping.items()):
                if rid == run_id:
                    step_task.cancel()
