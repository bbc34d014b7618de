"""What the worker's loops share, declared once so each loop can live in a file of its own.

``Worker`` (``worker.py``) is its loops: ``Passes``, ``Jobs``, ``Admission``, ``Ticks``,
``Deadlines``, ``Leases`` and ``Retention``, each a class over ``WorkerState``. The loops share one
process's work in hand (the runs it drives, the jobs it runs, the wake-ups between them)
and call on each other (the admission loop drives what it admits; the step loop waits the
way the pass loop does), so this class names what they share: the attributes
``Worker.__init__`` sets, the ``Host`` the runtime is handed, and the methods one loop
calls on another. It implements nothing.
"""

from __future__ import annotations

import abc
import asyncio
from collections.abc import Awaitable, Collection, Sequence
from typing import Any, Protocol

from plait import serde
from plait.catalog import Catalog
from plait.clock import Clock
from plait.notify import Notifier
from plait.observe import Telemetry
from plait.records import Run
from plait.runtime.streams import StreamWriter
from plait.store.contract import Store
from plait.store.ops import Batch
from plait.store.rows import ClaimScope, QueueLimits, Spend, StoredQueueLimits
from plait.worker.stall_guard import StallGuard


class CommitBatch(Protocol):
    """The store's ``commit``, as the worker hands it to passes (``Host.commit``)."""

    def __call__(self, batch: Batch, /) -> Awaitable[bool]: ...


class WorkerState(abc.ABC):
    """The attributes and methods every loop of a ``Worker`` may use (see ``Worker``)."""

    # -- its parts and settings, given when built
    store: Store
    clock: Clock
    telemetry: Telemetry | None
    catalog: Catalog
    notifier: Notifier
    worker_id: str
    concurrency: int
    poll_interval: float
    take_work: bool
    log_runs: bool
    limits: serde.Limits
    retain: float | None
    owner: str
    lease: float
    commit: CommitBatch
    stall_guard: StallGuard
    streams: StreamWriter

    # -- its work in hand
    driving: dict[str, asyncio.Task[Any]]
    stepping: dict[tuple[str, str], asyncio.Task[Any]]
    attempting: dict[tuple[str, str], asyncio.Task[Any]]
    #: the monotonic deadlines of the run leases held (a run's pass), and of the jobs'
    run_leases: dict[str, float]
    job_leases: dict[tuple[str, str], float]
    tasks: set[asyncio.Task[Any]]
    slots: asyncio.Semaphore
    stopping: bool
    cancelled: set[str]
    loops: list[asyncio.Task[Any]]
    _lease_task: asyncio.Task[Any] | None
    _unknown_schedules: set[str]
    admission_blocked_at: float | None
    deadline_look_at: float | None
    steps_run: int
    pruned: int
    #: ``plait worker --workflows``: the only workflows it works (None: its app's)
    only_workflows: tuple[str, ...] | None
    #: ``plait worker --queues``: the only queues it works (None: every queue)
    only_queues: tuple[str, ...] | None
    #: the paused workflows and queues, (kind, name), as last read, and when that read
    #: began (monotonic)
    brakes: frozenset[tuple[str, str]]
    brakes_read_at: float
    #: when (the clock's time) the first spend budget that holds queued runs may lift,
    #: as the admission loop last found (None: none holds any)
    budget_free_at: float | None
    #: the queue limits stored in the database as last read, and when (monotonic)
    stored_limits: list[StoredQueueLimits]
    limits_read_at: float
    #: when (monotonic) spend past its budgets' windows was last deleted
    spend_pruned_at: float
    #: when it started (the clock's time) and when its next heartbeat is due (monotonic)
    started_at: float
    next_beat: float

    # -- its wake-ups
    wake_passes: asyncio.Event
    #: ``wake`` was called (new work exists somewhere) since the pass loop last claimed:
    #: its next claim goes without the read that asks first whether anything is due
    work_told: bool
    wake_steps: asyncio.Event
    check_leases: asyncio.Event
    wake_admissions: asyncio.Event
    wake_schedules: asyncio.Event
    wake_deadlines: asyncio.Event

    # -- the host of passes and jobs (worker.py)
    @abc.abstractmethod
    def cancelling(self, run_id: str) -> bool: ...

    @abc.abstractmethod
    def ended_elsewhere(self, run_id: str) -> None: ...

    @abc.abstractmethod
    def giving_back(self, run_id: str) -> None: ...

    @abc.abstractmethod
    def published(self, run_id: str) -> None: ...

    @abc.abstractmethod
    def sent_event(self, run_id: str) -> None: ...

    @abc.abstractmethod
    async def read_run(self, run_id: str) -> Run | None: ...

    @abc.abstractmethod
    async def record_spend(self, spend: Sequence[Spend]) -> None: ...

    @abc.abstractmethod
    async def read_state(self, run_id: str) -> dict[str, Any]: ...

    @abc.abstractmethod
    async def lineage_queues(self, run_id: str) -> frozenset[str]: ...

    @abc.abstractmethod
    def run_changed(self, run_id: str, status: str, workflow: str = "") -> None: ...

    # -- lifecycle (worker.py)
    @abc.abstractmethod
    def holding(self) -> list[str]: ...

    @abc.abstractmethod
    def wake(self) -> None: ...

    @abc.abstractmethod
    def spawn(self, coro: Any, name: str | None = None) -> asyncio.Task[Any]: ...

    # -- passes (passes.py)
    @abc.abstractmethod
    def drive(
        self,
        run_id: str,
        *,
        claimed: bool = False,
        follow: bool = False,
        since: float | None = None,
    ) -> None: ...

    @abc.abstractmethod
    async def _due(self, wake: asyncio.Event, functions: list[str] | None) -> bool: ...

    @abc.abstractmethod
    async def _idle(self, wake: asyncio.Event) -> None: ...

    # -- admission (admission.py)
    @abc.abstractmethod
    def queue_limits(self) -> list[QueueLimits]: ...

    @abc.abstractmethod
    async def refresh_limits(self, *, force: bool = False) -> None: ...

    # -- scope and brakes (brakes.py)
    @abc.abstractmethod
    def claim_scope(self) -> ClaimScope: ...

    @abc.abstractmethod
    def job_functions(self) -> list[str]: ...

    @abc.abstractmethod
    def queues_of(self, functions: list[str]) -> list[str]: ...

    @abc.abstractmethod
    def queue_braked(self, queue: str) -> bool: ...

    @abc.abstractmethod
    async def fresh_brakes(self) -> None: ...

    @abc.abstractmethod
    def braked(self, workflow: str, queue: str | None) -> bool: ...

    @abc.abstractmethod
    async def refresh_brakes(self) -> None: ...

    @abc.abstractmethod
    async def park_braked(self) -> None: ...

    @abc.abstractmethod
    async def announce(self) -> None: ...

    # -- registry (registry.py)
    @abc.abstractmethod
    async def beat(self, *, force: bool = False) -> None: ...

    # -- leases (leases.py)
    @abc.abstractmethod
    def cancel_local(self, run_ids: Collection[str]) -> None: ...

    @abc.abstractmethod
    async def keep_lease(self, run_id: str, key: str | None = None) -> bool: ...

    @abc.abstractmethod
    def leased(self, run_ids: list[str] | set[str], since: float) -> None: ...

    @abc.abstractmethod
    def jobs_leased(self, keys: list[tuple[str, str]], since: float) -> None: ...
