"""Row <-> record conversions shared by every store."""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from typing import Any

from plait import serde, tags
from plait.records import (
    Run,
    RunStatus,
    RunSummary,
    Schedule,
    Step,
    StepAttempt,
    StepStatus,
    StreamEntry,
)
from plait.store.rows import (
    QueueLimits,
    RunRow,
    ScheduleRow,
    StepRow,
    StoredQueueLimits,
    Version,
)


def ts(value: Any) -> datetime:
    if isinstance(value, datetime):
        return value if value.tzinfo else value.replace(tzinfo=UTC)
    return datetime.fromtimestamp(float(value), tz=UTC)


def ts_or_none(value: Any) -> datetime | None:
    return None if value is None else ts(value)


def _json(value: Any) -> Any:
    if value is None or not isinstance(value, str | bytes):
        return value
    return serde.loads(value)


def run_row(row: Any) -> RunRow:
    return RunRow(*row)


def step_row(row: Any) -> StepRow:
    values = list(row)
    values[19] = bool(values[19])
    return StepRow(*values)


def run_record(row: RunRow) -> Run:
    return Run(
        id=row.id,
        workflow=row.workflow,
        status=RunStatus(row.status),
        input=_json(row.input),
        output=_json(row.output),
        error=_json(row.error),
        created_at=ts(row.created_at),
        updated_at=ts(row.updated_at),
        parent_run_id=row.parent_run_id,
        owner=row.owner,
        version=row.version,
        kind=row.kind,
        queue=row.queue,
        key=row.queue_key,
        priority=row.priority or 0,
        dedup=row.dedup,
        scheduled_at=ts_or_none(row.scheduled_at),
        admitted_at=ts_or_none(row.admitted_at),
        start_at=ts_or_none(row.wake_at) if row.status == "queued" else None,
        forked_from=row.forked_from,
        continued_from=row.continued_from,
        continued_to=row.continued_to,
        deadline_at=ts_or_none(row.deadline_at),
        timeout=row.timeout,
        tags=tags.loads(row.tags),
    )


def step_record(row: StepRow) -> Step:
    return Step(
        run_id=row.run_id,
        key=row.key,
        name=row.name,
        function=row.function,
        status=StepStatus(row.status),
        input=_json(row.input),
        output=_json(row.output),
        error=_json(row.error),
        attempts=row.attempts,
        retries=row.retries,
        invocation_id=row.invocation_id,
        child_run_id=row.child_run_id,
        created_at=ts(row.created_at),
        updated_at=ts(row.updated_at),
        kind=row.kind,
        wake_at=ts_or_none(row.wake_at),
        reached_after=_json(row.reached_after),
    )


def attempt_record(row: Any) -> StepAttempt:
    run_id, key, attempt, status, output, error, started_at, finished_at, worker = row
    return StepAttempt(
        run_id=run_id,
        key=key,
        attempt=attempt,
        status=status,
        output=_json(output),
        error=_json(error),
        started_at=ts(started_at),
        finished_at=ts_or_none(finished_at),
        worker=worker,
    )


def step_params(s: StepRow, *, flag: Callable[[bool], Any] = int) -> tuple[Any, ...]:
    """A step's column values in StepRow's field order, the column order of both stores'
    step tables and statements; ``flag`` encodes booleans for the driver (SQLite stores
    integers, PostgreSQL booleans)."""
    return (
        s.run_id,
        s.key,
        s.seq,
        s.name,
        s.kind,
        s.function,
        s.status,
        s.input,
        s.output,
        s.error,
        s.attempts,
        s.failures,
        s.retries,
        s.retry_delay,
        s.timeout,
        s.invocation_id,
        s.child_run_id,
        s.branch,
        s.from_key,
        flag(s.queued),
        s.wake_at,
        s.created_at,
        s.updated_at,
        s.delivered,
        s.retried_failures,
        s.reached_after,
    )


def schedule_record(row: ScheduleRow) -> Schedule:
    spec = serde.loads(row.definition) if isinstance(row.definition, str) else row.definition
    return Schedule(
        name=row.name,
        workflow=row.workflow,
        input=spec.get("input"),
        cron=spec.get("cron"),
        every=spec.get("every"),
        timezone=spec.get("timezone", "UTC"),
        overlap=spec.get("overlap", "skip"),
        catchup=float(spec.get("catchup", 0.0)),
        status=row.status,
        source=row.source,
        owner=row.owner,
        next_tick=ts_or_none(row.next_tick) if row.status == "active" else None,
        last_tick=ts_or_none(row.last_tick),
        last_run_id=row.last_run_id,
        last_run_status=row.last_run_status,
        created_at=ts(row.created_at),
        updated_at=ts(row.updated_at),
    )


def version_record(row: Any) -> Version:
    """A stored version from its columns (workflow, version, kind, definition, status,
    created_at, updated_at, registered_by)."""
    workflow, version, kind, definition, status, created_at, updated_at, registered_by = row
    return Version(
        workflow,
        version,
        kind,
        _json(definition),
        status,
        ts(created_at),
        ts(updated_at),
        registered_by,
    )


def run_summary(row: Any) -> RunSummary:
    """A run summary from its columns: ``RunSummary``'s fields up to ``updated_at``, then
    queue, queue key, priority, scheduled_at, admitted_at, wake_at and the number of
    children, then its tags."""
    (run_id, workflow, kind, status, version, owner, parent, created_at, updated_at) = row[:9]
    queue, key, priority, scheduled_at, admitted_at, wake_at = row[9:15]
    stored_tags = row[16] if len(row) > 16 else None
    return RunSummary(
        id=run_id,
        workflow=workflow,
        kind=kind,
        status=RunStatus(status),
        version=version,
        owner=owner,
        parent_run_id=parent,
        created_at=ts(created_at),
        updated_at=ts(updated_at),
        queue=queue,
        key=key,
        priority=priority or 0,
        scheduled_at=ts_or_none(scheduled_at),
        admitted_at=ts_or_none(admitted_at),
        start_at=ts_or_none(wake_at) if status == "queued" else None,
        children=int(row[15]) if len(row) > 15 else 0,
        tags=tags.loads(stored_tags),
    )


def stream_entry(row: Any) -> StreamEntry:
    """A stored stream entry: ("offset", kind, value, step_key, attempt, at)."""
    offset, kind, value, step_key, attempt, at = row
    return StreamEntry(int(offset), kind, _json(value), attempt, ts(at), step_key)


def limits_params(q: QueueLimits, app: str, now: float) -> tuple[object, ...]:
    """A queue's limits as ``put_queue_limits`` binds them."""
    budget = json.dumps([list(b) for b in q.budget])
    return (
        q.name,
        q.concurrency,
        q.per_key,
        q.rate,
        q.window,
        budget,
        q.budget_per_key,
        # [turn, costs] only: a plait that reads exactly two elements may share the database
        None if q.turn is None else json.dumps([q.turn, [list(c) for c in q.key_costs]]),
        app,
        now,
    )


def stored_limits(row: Sequence[object]) -> StoredQueueLimits:
    """A row of ``list_queue_limits`` (either store) as ``StoredQueueLimits``."""
    name, concurrency, per_key, rate, window, budget, per_key_budget, fair, app, updated = row
    budgets = tuple((str(u), float(a), float(w)) for u, a, w in json.loads(str(budget)))
    turn: Any = None
    key_costs: list[tuple[Any, Any]] = []
    weights: list[tuple[Any, Any]] = []
    if fair is not None:
        # [turn, costs]; a third element (weights) was written by some versions
        turn, key_costs, *kept = json.loads(str(fair))
        weights = kept[0] if kept else []
    limits = QueueLimits(
        str(name),
        None if concurrency is None else int(str(concurrency)),
        None if per_key is None else int(str(per_key)),
        None if rate is None else int(str(rate)),
        None if window is None else float(str(window)),
        (),
        turn=None if turn is None else int(turn),
        key_costs=tuple((str(k), int(c)) for k, c in key_costs),
        weights=tuple((str(k), int(w)) for k, w in weights),
        budget=budgets,
        budget_per_key=bool(per_key_budget),
    )
    return StoredQueueLimits(limits, str(app), float(str(updated)))
