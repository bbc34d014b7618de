"""Runs created in the caller's own transaction on PostgreSQL: an asyncpg connection the
application holds, inside a transaction it opened, on this store's database. The run's
rows (and the NOTIFY that wakes the workers) join that transaction: workers see the run,
and are woken, when it commits; a rollback leaves nothing.
"""

from __future__ import annotations

import datetime
import json
from typing import Any, cast

import asyncpg

from plait.store.postgres.part import Part
from plait.store.rows import NewRun


class CallerTransactions(Part):
    """``create_run_in``: a run written in the caller's transaction."""

    _home: tuple[Any, ...] | None = None
    schema: str

    async def create_run_in(self, connection: object, new: NewRun) -> tuple[str, str, bool]:
        if not isinstance(connection, asyncpg.Connection):
            raise TypeError(
                "connection must be an asyncpg connection to this engine's PostgreSQL"
                f" database, got {type(connection).__module__}.{type(connection).__name__}"
            )
        conn = cast(Any, connection)  # asyncpg's results are not typed
        if not conn.is_in_transaction():
            raise ValueError(
                "connection has no open transaction: start(connection=...) writes the run in"
                " the caller's transaction (async with connection.transaction(): ...)"
            )
        query = self._q["where_am_i"]
        if self._home is None:
            self._home = tuple(await self._call("fetchrow", query, read=True))
        found: Any = await conn.fetchrow(query)
        theirs: tuple[Any, ...] = tuple(found) if found is not None else (None, None, None)
        if theirs != self._home:
            schema = "" if theirs[2] is not None else f", which has no schema {self.schema!r}"
            raise ValueError(
                f"connection is to database {theirs[0]!r} of the server started"
                f" {theirs[1]}{schema}: not to this engine's database {self._home[0]!r}"
                f" (server started {self._home[1]})"
            )
        row: Any = await conn.fetchrow(self._q["create_run_json"], new_run_json(new), self._now())
        assert row is not None  # create_run returns a row, made or found
        return str(row[1]), str(row[2]), bool(row[0])


def _when(seconds: float | None) -> str | None:
    if seconds is None:
        return None
    return datetime.datetime.fromtimestamp(seconds, datetime.UTC).isoformat()


def new_run_json(n: NewRun) -> str:
    """A run to create as JSON for ``json_populate_record`` (no codec of plait's is on the
    caller's connection): times as ISO 8601, the input and tags as their JSON text."""
    fields = {
        "id": n.id,
        "workflow": n.workflow,
        "kind": n.kind,
        "version": n.version,
        "owner": n.owner,
        "parent_run_id": n.parent_run_id,
        "parent_step_key": n.parent_step_key,
        "start_node": n.start_node,
        "lease_owner": n.lease_owner,
        "lease_seconds": float(n.lease_seconds),
        "status": n.status,
        "queue": n.queue,
        "queue_key": n.queue_key,
        "priority": n.priority,
        "dedup": n.dedup,
        "not_before": _when(n.not_before),
        "scheduled_at": _when(n.scheduled_at),
        "trace": n.trace,
        "deadline_at": _when(n.deadline_at),
        "timeout": n.timeout,
    }
    text = json.dumps(fields)[:-1]
    # the input and the tags as they were encoded (their numbers exactly as written)
    return f'{text}, "input": {n.input or "null"}, "tags": {n.tags or "null"}}}'
