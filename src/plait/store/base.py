"""The store seam: what the engine asks of a database, in the engine's own words.

The engine never builds SQL. An orchestrator pass collects the writes it needs as small
operation objects and hands them to ``Store.commit`` as one batch; the store turns the batch
into one transaction (and may group several batches into one commit). Every batch from a
pass is fenced by the run lease, so a worker that lost its lease cannot write over the
worker that took the run over.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any, Protocol

from plait.records import Run, Step, StepAttempt


@dataclasses.dataclass
class NewRun:
    id: str
    workflow: str
    kind: str
    version: str | None
    input: str | None
    owner: str | None = None
    parent_run_id: str | None = None
    parent_step_key: str | None = None
    start_node: str | None = None
    #: set for inline starts: the run is created already leased to this process
    lease_owner: str | None = None
    lease_seconds: float = 0.0


@dataclasses.dataclass
class RunRow:
    """A run as the orchestrator sees it (JSON columns still encoded)."""

    id: str
    workflow: str
    kind: str
    version: str | None
    status: str
    input: str | None
    output: str | None
    error: str | None
    parent_run_id: str | None
    parent_step_key: str | None
    owner: str | None
    start_node: str | None
    created_at: float
    updated_at: float
    wake_at: float | None
    wakeups: int
    lease_owner: str | None
    lease_until: float | None


@dataclasses.dataclass
class StepRow:
    run_id: str
    key: str
    seq: int
    name: str
    kind: str
    function: str | None
    status: str
    input: str | None
    output: str | None
    error: str | None
    attempts: int
    failures: int
    retries: int
    retry_delay: float | None
    timeout: float | None
    invocation_id: str
    child_run_id: str | None
    branch: str | None
    from_key: str | None
    queued: bool
    wake_at: float | None
    created_at: float
    updated_at: float


@dataclasses.dataclass
class EventRow:
    id: int
    name: str
    payload: str | None


@dataclasses.dataclass
class PassSnapshot:
    """Everything one orchestrator pass reads, in one round trip."""

    run: RunRow
    steps: dict[str, StepRow]
    events: list[EventRow]
    state: dict[str, str | None]


# -- the writes of a pass ------------------------------------------------------------------


@dataclasses.dataclass
class PutStep:
    """Insert the step, or update every mutable column of an existing one."""

    step: StepRow


@dataclasses.dataclass
class StartAttempt:
    """Record attempt ``attempt`` of a step as running (step row included)."""

    step: StepRow
    attempt: int
    worker: str | None = None


@dataclasses.dataclass
class FinishAttempt:
    """Close an attempt and write the step's new state in the same transaction."""

    step: StepRow
    attempt: int
    status: str  # succeeded | failed | interrupted | cancelled
    output: str | None = None
    error: str | None = None


@dataclasses.dataclass
class SetTimer:
    key: str
    purpose: str
    wake_at: float


@dataclasses.dataclass
class ClearTimer:
    key: str


@dataclasses.dataclass
class EnqueueJob:
    key: str
    function: str
    available_at: float


@dataclasses.dataclass
class ConsumeEvent:
    event_id: int
    key: str


@dataclasses.dataclass
class CreateChildRun:
    run: NewRun


@dataclasses.dataclass
class SetState:
    name: str
    value: str | None


@dataclasses.dataclass
class EndRun:
    """Move the run to ``status``; only from ``running`` (the terminal guard). A terminal
    end also settles the parent's waiting step and wakes the parent."""

    status: str
    output: str | None = None
    error: str | None = None


Op = (
    PutStep
    | StartAttempt
    | FinishAttempt
    | SetTimer
    | ClearTimer
    | EnqueueJob
    | ConsumeEvent
    | CreateChildRun
    | SetState
    | EndRun
)


@dataclasses.dataclass
class Batch:
    run_id: str
    ops: list[Op]
    #: the lease owner that must still hold the run, or None for unfenced writes
    fence: str | None = None
    #: the last batch of a pass: release the lease in the same transaction; the value is
    #: the run's wake-up count the pass saw (-1: due again at once)
    release: int | None = None


@dataclasses.dataclass
class StepJob:
    run_id: str
    step_key: str
    function: str
    deliveries: int


class Store(Protocol):
    """What every store offers. See ``store.sqlite`` for the reference implementation."""

    url: str

    async def open(self) -> None: ...
    async def close(self) -> None: ...

    # runs and their records
    async def create_run(self, new: NewRun) -> tuple[Run, bool]: ...
    async def get_run(self, run_id: str) -> Run | None: ...
    async def list_runs(
        self,
        *,
        workflow: str | None = None,
        status: str | None = None,
        version: str | None = None,
        owner: str | None = None,
        parent_run_id: str | None = None,
        visible_to: str | None = None,
        limit: int = 50,
        offset: int = 0,
    ) -> tuple[list[Run], int]: ...
    async def get_steps(self, run_id: str) -> list[Step]: ...
    async def get_history(self, run_id: str) -> list[StepAttempt]: ...
    async def get_children(self, run_id: str) -> list[Run]: ...

    # orchestrator passes
    async def load_pass(self, run_id: str) -> PassSnapshot | None: ...
    async def claim_run(self, run_id: str, owner: str, lease_seconds: float) -> bool: ...
    async def claim_due_runs(self, owner: str, lease_seconds: float, limit: int) -> list[str]: ...
    async def commit(self, batch: Batch) -> bool: ...
    async def release_run(self, run_id: str, owner: str, wakeups_seen: int) -> bool: ...
    async def renew_leases(self, owner: str, lease_seconds: float) -> set[str]: ...
    async def leases_of(self, worker_id: str, owner: str) -> list[tuple[Any, ...]]: ...
    async def expire_leases(self, leases: Sequence[tuple[Any, ...]]) -> int: ...
    async def sweep_idle(self, base: float = 30.0, cap: float = 600.0, limit: int = 100) -> int: ...
    async def next_due(self, functions: Sequence[str] | None = None) -> float | None: ...

    # queued steps
    async def claim_step_jobs(
        self, owner: str, lease_seconds: float, limit: int, functions: Sequence[str]
    ) -> list[StepJob]: ...
    async def begin_queued_step(
        self, job: StepJob, owner: str, lease_seconds: float
    ) -> StepRow | None: ...
    async def finish_queued_step(self, job: StepJob, owner: str, ops: Sequence[Op]) -> bool: ...
    async def drop_job(self, job: StepJob) -> None: ...

    # actions from outside a pass
    async def wake(self, run_id: str, at: float | None = None) -> None: ...
    async def cancel_run(self, run_id: str, reason: str | None) -> list[str]: ...
    async def resume_run(self, run_id: str) -> Run: ...
    async def retry_run(self, run_id: str) -> Run: ...
    async def send_event(self, run_id: str, name: str, payload: str | None) -> None: ...

    # workflow versions and run-time graphs
    async def put_version(
        self, workflow: str, version: str, kind: str, definition: str | None, status: str
    ) -> None: ...
    async def get_version(self, workflow: str, version: str) -> dict[str, Any] | None: ...
    async def list_versions(
        self, workflow: str | None = None, status: str | None = None
    ) -> list[dict[str, Any]]: ...
