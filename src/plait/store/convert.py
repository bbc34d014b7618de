"""Row <-> record conversions shared by every store."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

from plait import serde
from plait.records import Run, RunStatus, Step, StepAttempt, StepStatus
from plait.store.base import RunRow, StepRow, Version


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
    )


def attempt_record(row: Any) -> StepAttempt:
    run_id, key, attempt, status, output, error, started_at, finished_at = row
    return StepAttempt(
        run_id=run_id,
        key=key,
        attempt=attempt,
        status=status,
        output=_json(output),
        error=_json(error),
        started_at=ts(started_at),
        finished_at=ts_or_none(finished_at),
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
    )


def version_record(row: Any) -> Version:
    """A stored version from its columns (workflow, version, kind, definition, status,
    created_at, updated_at)."""
    workflow, version, kind, definition, status, created_at, updated_at = row
    return Version(
        workflow, version, kind, _json(definition), status, ts(created_at), ts(updated_at)
    )
