"""Runs and their records on SQLite: creating and forking runs, reading runs (listings
filtered in SQL built once per combination of filters), steps, attempts, decisions, gates
and values, and what a pass reads.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Sequence
from typing import Any

from plait.clock import micros
from plait.errors import RunIdTakenError
from plait.records import Run, RunSummary, Step, StepAttempt
from plait.store import convert
from plait.store.ops import EndRun, Op
from plait.store.rows import EventRow, GateRow, NewRun, PassSnapshot, RequestRow, RunFilter
from plait.store.sqlite import apply
from plait.store.sqlite.part import Part
from plait.store.sqlite.writer import SQL

#: the most children get_children returns (the newest ones)
MAX_CHILDREN = 10_000

_SELECT_RUN = SQL["select_run"]
#: each filter's condition (a field of RunFilter: a condition on its named parameter)
_RUN_FILTERS = dict(line.split(": ", 1) for line in SQL["run_filters"].splitlines() if ": " in line)
_TAG_FILTER = SQL["tag_filter"].strip()
_LISTING = {
    "count_runs": SQL["count_runs"],
    "count_by_status": SQL["count_by_status"],
    "list_runs": SQL["list_runs"],
    "list_run_summaries": SQL["list_run_summaries"],
    "list_runs_tagged": SQL["list_runs_tagged"],
    "list_run_summaries_tagged": SQL["list_run_summaries_tagged"],
}
#: listing statements by name and the filters they hold, made once per combination
_LISTINGS: dict[tuple[str, tuple[str, ...], int], str] = {}


def listing(name: str, where: RunFilter) -> tuple[str, dict[str, Any]]:
    """A listing statement (``count_runs``, ``list_runs``, ``list_run_summaries``) holding
    the conditions of the filters ``where`` gives, and its parameters."""
    params = dict(vars(where))
    for bound in ("created_after", "created_before"):
        if params[bound] is not None:
            params[bound] = _microsecond_edge(params[bound])
    pairs: tuple[tuple[str, str], ...] = where.tags or ()
    del params["tags"]
    for i, (key, value) in enumerate(pairs):
        params[f"tag_key_{i}"], params[f"tag_value_{i}"] = key, value
    given = tuple(f for f in _RUN_FILTERS if params[f] not in (None, False))
    sql = _LISTINGS.get((name, given, len(pairs)))
    if sql is None:
        # a page of a tag's runs is read through the tag's index in the list's order
        # (``*_tagged``, which holds the first pair); a count counts the tag's runs
        paged = pairs and not name.startswith("count_")
        conditions = "".join(f"{_RUN_FILTERS[f]} AND " for f in given)
        first = 1 if paged else 0
        conditions += "".join(f"{_tag_condition(i)} AND " for i in range(first, len(pairs)))
        template = _LISTING[f"{name}_tagged" if paged else name]
        sql = template.replace("/*filters*/ ", conditions)
        _LISTINGS[(name, given, len(pairs))] = sql
    return sql, params


def _tag_condition(i: int) -> str:
    """The condition of the ``i``th tag pair of a filter (``tag_filter``)."""
    return _TAG_FILTER.replace("_N", f"_{i}")


def _microsecond_edge(when: float) -> float:
    """The stored time at which ``when``'s microsecond begins.

    SQLite keeps a time as the clock's float, a run shows it as a datetime rounded to the
    microsecond (PostgreSQL keeps only microseconds). A bound taken from a run's own
    ``created_at`` must hold that run on the side the user meant, so the store compares
    as PostgreSQL does: at microsecond precision, times that round alike are equal.
    """
    return (micros(when) - 0.5) / 1_000_000


_DECISION_FIELDS = (
    "id",
    "name",
    "payload",
    "decided_by",
    "decided_at",
    "outcome",
    "reason",
    "judged_at",
    "key",
)


class Runs(Part):
    """Creating, forking and reading runs, and loading passes."""

    async def create_run(self, new: NewRun) -> tuple[Run, bool]:
        return await self._write(lambda conn: self._create(conn, new, self._now()))

    async def create_runs(self, news: Sequence[NewRun]) -> list[tuple[Run, bool]]:
        def go(conn: sqlite3.Connection) -> list[tuple[Run, bool]]:
            now = self._now()
            brakes = apply.start_brakes(conn)
            made: list[tuple[Run, bool]] = []
            for new in news:
                run, created = self._create(conn, new, now, brakes)
                if not created and run.id == new.id and run.workflow != new.workflow:
                    raise RunIdTakenError(new.id, run.workflow, new.workflow)  # none written
                made.append((run, created))
            return made

        return await self._write(go)

    def _create(
        self,
        conn: sqlite3.Connection,
        new: NewRun,
        now: float,
        brakes: frozenset[tuple[str, str]] | None = None,
    ) -> tuple[Run, bool]:
        if new.debounce_key is not None:
            joined = apply.debounce(conn, new, now)
            if joined is not None:
                return apply.load_run(conn, joined), False
        written = apply.insert_run(conn, apply.braked_start(conn, new, brakes), now)
        if written is not None:
            # the row as written: a start spares the read of a wide row
            return convert.run_record(written), True
        row = conn.execute(_SELECT_RUN, (new.id,)).fetchone()
        if row is None:
            # the de-duplication key belongs to a live run: that run is the answer
            live = conn.execute(SQL["live_dedup_run"], (new.dedup,)).fetchone()
            row = conn.execute(_SELECT_RUN, (live[0],)).fetchone()
        return convert.run_record(convert.run_row(row)), False

    async def replace_run(self, new: NewRun, end: EndRun) -> tuple[Run, bool, list[str]]:
        def go(conn: sqlite3.Connection) -> tuple[Run, bool, list[str]]:
            now = self._now()
            if conn.execute(_SELECT_RUN, (new.id,)).fetchone() is not None:
                return apply.load_run(conn, new.id), False, []  # the id is an idempotency key
            moved: list[str] = []
            live = conn.execute(SQL["live_dedup_run"], (new.dedup,)).fetchone()
            if live is not None:
                holder = apply.load_run(conn, live[0])
                if holder.owner != new.owner:
                    return holder, False, []  # another owner's run: left as it is
                moved = apply.end_run(conn, holder.id, end, now, from_suspended=True)
            created = apply.insert_run(conn, apply.braked_start(conn, new), now) is not None
            return apply.load_run(conn, new.id), created, moved

        return await self._write(go)

    async def get_run(self, run_id: str) -> Run | None:
        def go(conn: sqlite3.Connection) -> Run | None:
            row = conn.execute(_SELECT_RUN, (run_id,)).fetchone()
            return convert.run_record(convert.run_row(row)) if row else None

        return await self._read_here(go)

    async def run_statuses(self, run_ids: Sequence[str]) -> dict[str, str]:
        ids = json.dumps(list(run_ids))

        def go(conn: sqlite3.Connection) -> dict[str, str]:
            return dict(conn.execute(SQL["run_statuses"], (ids,)).fetchall())

        return await self._read_here(go)

    async def list_runs(self, where: RunFilter) -> tuple[list[Run], int]:
        def go(conn: sqlite3.Connection) -> tuple[list[Run], int]:
            total = conn.execute(*listing("count_runs", where)).fetchone()[0]
            rows = conn.execute(*listing("list_runs", where)).fetchall()
            return [convert.run_record(convert.run_row(r)) for r in rows], total

        return await self._read(go)

    async def list_run_summaries(self, where: RunFilter) -> tuple[list[RunSummary], int]:
        def go(conn: sqlite3.Connection) -> tuple[list[RunSummary], int]:
            total = conn.execute(*listing("count_runs", where)).fetchone()[0]
            rows = conn.execute(*listing("list_run_summaries", where)).fetchall()
            return [convert.run_summary(r) for r in rows], total

        return await self._read(go)

    async def count_by_status(self, where: RunFilter) -> dict[str, int]:
        def go(conn: sqlite3.Connection) -> dict[str, int]:
            return dict(conn.execute(*listing("count_by_status", where)).fetchall())

        return await self._read(go)

    async def waiting_steps(
        self, run_ids: Sequence[str], kinds: Sequence[str], statuses: Sequence[str]
    ) -> list[Step]:
        given = (json.dumps(list(run_ids)), json.dumps(list(kinds)), json.dumps(list(statuses)))

        def go(conn: sqlite3.Connection) -> list[Step]:
            rows = conn.execute(SQL["waiting_steps"], given).fetchall()
            return [convert.step_record(convert.step_row(r)) for r in rows]

        return await self._read(go)

    async def get_children(self, run_id: str) -> list[Run]:
        def go(conn: sqlite3.Connection) -> list[Run]:
            rows = conn.execute(SQL["get_children"], (run_id, MAX_CHILDREN)).fetchall()
            return [convert.run_record(convert.run_row(r)) for r in rows]

        return sorted(await self._read(go), key=lambda r: r.created_at)

    async def get_steps(self, run_id: str) -> list[Step]:
        def go(conn: sqlite3.Connection) -> list[Step]:
            rows = conn.execute(SQL["get_steps"], (run_id,)).fetchall()
            return [convert.step_record(convert.step_row(r)) for r in rows]

        return await self._read(go)

    async def get_history(self, run_id: str) -> list[StepAttempt]:
        def go(conn: sqlite3.Connection) -> list[StepAttempt]:
            rows = conn.execute(SQL["get_history"], (run_id, run_id)).fetchall()
            return [convert.attempt_record(r) for r in rows]

        return await self._read(go)

    # -- orchestrator passes ------------------------------------------------------------------
    async def load_pass(self, run_id: str) -> PassSnapshot | None:
        return await self._read_here(lambda conn: read_pass(conn, run_id))

    async def list_passes(
        self, statuses: Sequence[str], kind: str, workflow: str | None, after: str, limit: int
    ) -> list[PassSnapshot]:
        params = {
            "statuses": json.dumps(list(statuses)),
            "kind": kind,
            "workflow": workflow,
            "after": after,
            "limit": limit,
        }

        def go(conn: sqlite3.Connection) -> list[PassSnapshot]:
            runs = [convert.run_row(r) for r in conn.execute(SQL["list_pass_runs"], params)]
            if not runs:
                return []
            ids = json.dumps([run.id for run in runs])
            snapshots = {run.id: PassSnapshot(run, {}, [], {}) for run in runs}
            for r in conn.execute(SQL["page_steps"], (ids,)):
                snapshots[r[0]].steps[r[1]] = convert.step_row(r)
            for r in conn.execute(SQL["page_events"], (ids,)):
                snapshots[r[0]].events.append(EventRow(*r[1:]))
            for run_id, name, value in conn.execute(SQL["page_state"], (ids,)):
                snapshots[run_id].state[name] = value
            return list(snapshots.values())

        return await self._read(go)

    async def fork_run(
        self,
        new: NewRun,
        forked_from: str,
        ops: Sequence[Op],
        from_statuses: Sequence[str],
        replace: EndRun | None = None,
    ) -> tuple[Run, list[str]]:
        def go(conn: sqlite3.Connection) -> tuple[Run, list[str]]:
            now = self._now()
            apply.require_status(conn, forked_from, tuple(from_statuses), "fork")
            if apply.insert_run(conn, new, now) is None:
                existing = apply.load_run(conn, new.id)
                raise RunIdTakenError(new.id, existing.workflow, new.workflow)
            conn.execute(SQL["set_forked_from"], (forked_from, new.id))
            apply.apply_ops(conn, new.id, ops, now)
            moved: list[str] = []
            if replace is not None:  # a live source ends as a cancel ends it
                moved = apply.end_run(conn, forked_from, replace, now, from_suspended=True)
            return apply.load_run(conn, new.id), moved

        return await self._write(go)

    async def get_decisions(self, run_id: str) -> list[dict[str, Any]]:
        def go(conn: sqlite3.Connection) -> list[dict[str, Any]]:
            rows = conn.execute(SQL["get_decisions"], (run_id,)).fetchall()
            return [dict(zip(_DECISION_FIELDS, r, strict=True)) for r in rows]

        return await self._read(go)

    async def list_gates(self, status: str | None, limit: int) -> list[GateRow]:
        params = {"status": status, "limit": limit}

        def go(conn: sqlite3.Connection) -> list[GateRow]:
            rows = conn.execute(SQL["list_gates"], params).fetchall()
            return [GateRow(convert.step_row(r[:-3]), r[-3], r[-2], r[-1]) for r in rows]

        return await self._read(go)

    async def get_values(self, run_id: str) -> dict[str, str | None]:
        def go(conn: sqlite3.Connection) -> dict[str, str | None]:
            return dict(conn.execute(SQL["get_values"], (run_id,)).fetchall())

        return await self._read_here(go)

    async def run_marks(self, run_id: str) -> tuple[Any, ...] | None:
        def go(conn: sqlite3.Connection) -> tuple[Any, ...] | None:
            row = conn.execute(SQL["run_marks"], (run_id,)).fetchone()
            return None if row is None else tuple(row)

        return await self._read(go)


def read_pass(conn: sqlite3.Connection, run_id: str) -> PassSnapshot | None:
    """What a pass of ``run_id`` reads (``load_pass``), in the transaction ``conn`` is in."""
    row = conn.execute(_SELECT_RUN, (run_id,)).fetchone()
    if row is None:
        return None
    steps = {r[1]: convert.step_row(r) for r in conn.execute(SQL["pass_steps"], (run_id,))}
    events = [EventRow(*r) for r in conn.execute(SQL["pass_events"], (run_id,))]
    state = dict(conn.execute(SQL["pass_state"], (run_id,)))
    requests = [RequestRow(*r) for r in conn.execute(SQL["pass_requests"], (run_id,))]
    return PassSnapshot(convert.run_row(row), steps, events, state, requests)
