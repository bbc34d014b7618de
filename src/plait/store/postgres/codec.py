"""Values between Python and PostgreSQL: what the store sends (runs to create, steps,
filters, queue limits, a child's end as the schema's row and composite types) and what
comes back (records as rows), the ``timestamptz`` codec every connection uses, and the
SQLSTATEs the schema's functions raise.

JSON arrives as encoded text, is stored as ``json`` (the text as plait wrote it: ``jsonb``
would change numbers) and comes back as that text, so ``store.convert`` works unchanged.
Times cross the store boundary as unix seconds (floats), like the SQLite store, and are
``timestamptz`` in the database.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Sequence
from datetime import datetime
from typing import Any

import asyncpg

from plait.records import Run
from plait.store import convert
from plait.store.ops import CancelCut, StepEnd
from plait.store.rows import (
    EventRow,
    NewRun,
    PassSnapshot,
    QueueLimits,
    RequestRow,
    RunFilter,
    RunRow,
    ScheduleRow,
    StepJob,
    StepRow,
)

# timestamptz travels as microseconds since 2000-01-01 UTC; plait speaks unix seconds
_PG_EPOCH_US = 946_684_800_000_000
_PG_INFINITY = 2**63 - 1


def encode_timestamp(value: float | datetime) -> tuple[int]:
    """Unix seconds (or a datetime) as ``timestamptz``'s microseconds since 2000."""
    if isinstance(value, datetime):
        value = value.timestamp()
    return (round(value * 1_000_000) - _PG_EPOCH_US,)


def decode_timestamp(value: tuple[int]) -> float:
    """``timestamptz`` as unix seconds; infinities as float infinities."""
    micros = value[0]
    if micros >= _PG_INFINITY:
        return float("inf")
    if micros <= -_PG_INFINITY:
        return float("-inf")
    # one integer addition, then one rounding: the nearest float to the stored microsecond
    return (micros + _PG_EPOCH_US) / 1_000_000


async def set_codecs(conn: asyncpg.Connection) -> None:
    """Timestamps as float seconds, as the rest of plait counts them; for every
    connection, the pool's and any opened beside it."""
    await conn.set_type_codec(
        "timestamptz",
        schema="pg_catalog",
        encoder=encode_timestamp,
        decoder=decode_timestamp,
        format="tuple",
    )


# SQLSTATEs raised by the schema's functions
LEASE_LOST = "PLT01"
RUN_NOT_FOUND = "PLT02"
RUN_STATE = "PLT03"
GATE_CLOSED = "PLT05"
RUN_EXISTS = "PLT06"
EVENT_NOT_STORED = "PLT07"

#: the columns of RunRow read by position (those of schema version 1, idle_sweeps aside)
_RUN_BASE_FIELDS = 18
#: the columns migrations added to runs since, in RunRow's order
_RUN_ADDED_FIELDS = (
    "queue",
    "queue_key",
    "priority",
    "dedup",
    "scheduled_at",
    "admitted_at",
    "forked_from",
    "trace",
    "continued_from",
    "continued_to",
    "deadline_at",
    "timeout",
    "tags",
)
_STEP_FIELDS = len(dataclasses.fields(StepRow))


#: the steps row type's columns after StepRow's fields (the attempt on the row, schema
#: version 13), which the store sends empty: the schema's functions write them
STEP_ATTEMPT_COLUMNS = (None,) * 5


def step_value(s: StepRow) -> tuple[Any, ...]:
    """A step as the steps table's row type (columns in StepRow's field order)."""
    return (*convert.step_params(s, flag=bool), *STEP_ATTEMPT_COLUMNS)


def new_run_value(n: NewRun) -> tuple[Any, ...]:
    """A run to create as the schema's ``new_run`` type."""
    return (
        n.id,
        n.workflow,
        n.kind,
        n.version,
        n.input,
        n.owner,
        n.parent_run_id,
        n.parent_step_key,
        n.start_node,
        n.lease_owner,
        float(n.lease_seconds),
        n.status,
        n.queue,
        n.queue_key,
        n.priority,
        n.dedup,
        n.not_before,
        n.scheduled_at,
        n.trace,
        n.deadline_at,
        n.timeout,
        n.tags,
        n.debounce_key,
        n.debounce_until,
    )


def step_end_value(end: StepEnd | None) -> tuple[Any, ...] | None:
    """How a child's parent step ends, as the schema's ``step_end`` type."""
    return None if end is None else (end.status, end.output, end.error, end.failures)


def cut_value(cut: CancelCut | None) -> tuple[str, str, str] | None:
    """How a cancel ends the steps in flight, as the schema's ``cancel_cut`` type."""
    return None if cut is None else (cut.step, cut.attempt, cut.open_attempt)


def filter_args(where: RunFilter) -> tuple[Any, ...]:
    """A run filter as the parameters of list_runs and list_run_summaries, in order (with
    tags, their keys and values last, as ``tag_filter`` takes them)."""
    return (
        where.workflow,
        where.status,
        where.version,
        where.owner,
        where.parent_run_id,
        where.visible_to,
        where.limit,
        where.offset,
        where.id_contains,
        where.created_after,
        where.created_before,
        where.top_level,
        where.hide_continued,
        where.queue,
        where.visible_schedule_runs,
        *(() if not where.tags else ([k for k, _ in where.tags], [v for _, v in where.tags])),
    )


@functools.cache
def with_filters(listing: str, filters: str, tags: str | None) -> str:
    """A listing statement (``list_runs``, ``list_run_summaries``) with the conditions of
    a run filter (``run_filter``, and ``tag_filter`` for a filter with tags) in place of
    each ``/*filters*/``: the conditions are written once, whichever statement holds
    them. Cached: a store builds each combination once."""
    conditions = filters if tags is None else f"{filters}\n    AND {tags}"
    return listing.replace("/*filters*/", conditions)


def run_row(rec: Any) -> RunRow:
    """A runs row (a composite record) as a RunRow: the columns every version had by
    position, the ones added later by name (migrations append columns in their order)."""
    values = tuple(rec)
    return RunRow(*values[:_RUN_BASE_FIELDS], *[rec[name] for name in _RUN_ADDED_FIELDS])


def schedule_row(rec: Any) -> ScheduleRow:
    """A schedules record (with its last run's status) as a ScheduleRow."""
    return ScheduleRow(
        rec["name"],
        rec["workflow"],
        rec["definition"],
        rec["status"],
        rec["source"],
        rec["owner"],
        rec["next_tick"],
        rec["last_tick"],
        rec["last_run_id"],
        rec["created_at"],
        rec["updated_at"],
        rec["last_run_status"],
    )


def queue_arrays(queues: Sequence[QueueLimits]) -> tuple[list[Any], ...]:
    """Queue limits as parallel arrays (names, concurrency, per key, rate, window), one
    parameter each."""
    return (
        [q.name for q in queues],
        [q.concurrency for q in queues],
        [q.per_key for q in queues],
        [q.rate for q in queues],
        [q.window for q in queues],
    )


def fair_arrays(queues: Sequence[QueueLimits]) -> tuple[list[Any], ...]:
    """The turns of fair queues as parallel arrays: each queue's cost of one admission
    (None: not fair), then the weighted keys' queues, keys and costs."""
    weighted = [
        (q.name, key, cost) for q in queues if q.turn is not None for key, cost in q.key_costs
    ]
    return (
        [q.turn for q in queues],
        [name for name, _key, _cost in weighted],
        [key for _name, key, _cost in weighted],
        [cost for _name, _key, cost in weighted],
    )


def step_row(rec: Any) -> StepRow:
    """A steps record as a StepRow (the attempt columns after its fields left out)."""
    return convert.step_row(tuple(rec)[:_STEP_FIELDS])


def request_row(rec: Any) -> RequestRow:
    """A requests record (a row or a composite) as a RequestRow."""
    return RequestRow(
        rec["id"],
        rec["run_id"],
        rec["name"],
        rec["data"],
        rec["status"],
        rec["taken_by"],
        rec["reply"],
        rec["refusal"],
        rec["created_at"],
        rec["deadline"],
    )


def run_record(rec: Any) -> Run:
    """A runs record as the ``Run`` callers see."""
    return convert.run_record(run_row(rec))


def step_job(r: Any) -> StepJob:
    """A claimed job as a claim statement returns it, with its step's row (``s``)."""
    return StepJob(
        r["run_id"],
        r["step_key"],
        r["function"],
        r["deliveries"],
        None if r["s"] is None else step_row(r["s"]),
        r["workflow"] or "",
        r["trace"],
        r["queue"],
    )


def pass_snapshot(row: Any) -> PassSnapshot:
    """A pass's snapshot from a row of ``load_passes``, ``list_passes`` or
    ``claim_due_passes``."""
    steps: dict[str, StepRow] = {}
    for rec in row["steps"]:
        step = step_row(rec)
        steps[step.key] = step
    events = [EventRow(e["id"], e["name"], e["payload"], e["created_at"]) for e in row["events"]]
    state = {s["name"]: s["value"] for s in row["state"]}
    # a page of ``list_passes`` (a dry check) reads no requests
    requests = [request_row(q) for q in row.get("requests") or ()]
    return PassSnapshot(run_row(row["r"]), steps, events, state, requests)
