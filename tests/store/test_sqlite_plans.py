"""The statements a worker runs all the time stay cheap however many runs a database holds.

SQLite's planner has no statistics unless ``ANALYZE`` ran, and without them it guesses
that ``status = 'running'`` narrows a search better than a range on ``wake_at``: on a
database of 100,000 sleeping runs that turned each claim into a scan and a sort of every
running run (40 ms, several times a second). The hot statements name the index they must
use; these tests read their plans on a database full of sleeping runs and an empty one.
"""

from __future__ import annotations

import sqlite3
import time
from pathlib import Path

import pytest

import plait
from plait.store.rows import ClaimScope
from plait.store.sqlite.leases import scope_params
from plait.store.sqlite.writer import SQL

RUNS = 20_000
app = plait.App("plans")


async def _schema(path: Path) -> None:
    async with plait.Engine(app, f"sqlite:///{path}", workers=False):
        pass


def _fill(path: Path) -> None:
    """Sleeping runs as a worker leaves them: running, unleased, due in an hour."""
    later = time.time() + 3600
    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute("BEGIN")
    conn.executemany(
        "INSERT INTO plait_runs (id, workflow, kind, status, input, created_at, updated_at,"
        " wake_at, wakeups) VALUES (?, 'nap', 'workflow', 'running', '1', ?, ?, ?, 1)",
        [(f"r{n:06d}", later - 3600, later - 3600, later + n) for n in range(RUNS)],
    )
    conn.execute("COMMIT")
    conn.close()


def _plan(
    conn: sqlite3.Connection, name: str, params: tuple[object, ...] | dict[str, object]
) -> str:
    rows = conn.execute("EXPLAIN QUERY PLAN " + SQL[name], params).fetchall()
    return " | ".join(str(row[3]) for row in rows)


@pytest.mark.parametrize("filled", [True, False], ids=["100k-like", "empty"])
async def test_claims_and_the_next_wake_up_search_an_index(tmp_path: Path, filled: bool) -> None:
    path = tmp_path / "plans.db"
    await _schema(path)
    if filled:
        _fill(path)
    conn = sqlite3.connect(path)
    now = time.time()
    # a worker's claims name its app's workflows
    scope = scope_params(ClaimScope(("nap",), True, None))
    plans = {
        "claim_due_runs": _plan(
            conn,
            "claim_due_runs",
            {"owner": "w", "until": now + 60, "now": now, "limit": 64, **scope},
        ),
        "next_due_runs": _plan(conn, "next_due_runs", scope),
        "sweep_idle": _plan(conn, "sweep_idle", (now, now, 600.0, 30.0, 100)),
    }
    conn.close()
    for name, plan in plans.items():
        assert "TEMP B-TREE" not in plan, f"{name} sorts: {plan}"
        bare = [
            part
            for part in plan.split(" | ")
            if part.startswith(("SCAN plait_", "SCAN r ")) and "INDEX" not in part
        ]
        assert not bare, f"{name} reads a whole table: {plan}"
        assert "plait_runs_status" not in plan, f"{name} walks every running run: {plan}"
    assert "plait_runs_due" in plans["claim_due_runs"], plans["claim_due_runs"]
    assert "plait_runs_idle" in plans["sweep_idle"], plans["sweep_idle"]


async def test_a_filtered_listing_searches_the_index_of_its_filters(tmp_path: Path) -> None:
    """The dashboard's listing (a workflow and a status, newest first) reads the
    ``(workflow, status, created_at)`` index, not every run: the statement holds only the
    filters given, so the planner sees plain equalities."""
    from plait.store.rows import RunFilter
    from plait.store.sqlite.runs import listing
    from plait.store.sqlite.store import SQLiteStore

    path = tmp_path / "plans.db"
    await _schema(path)
    _fill(path)
    conn = sqlite3.connect(path)
    where = RunFilter(workflow="nap", status="running", limit=50)
    for name in ("count_runs", "list_runs", "list_run_summaries"):
        sql, params = listing(name, where)
        plan = " | ".join(
            str(r[3]) for r in conn.execute("EXPLAIN QUERY PLAN " + sql, params).fetchall()
        )
        assert "plait_runs_workflow" in plan, f"{name}: {plan}"
        # (a sort of runs created in the same instant, by id, is fine: it stops at a page)
        assert "TEMP B-TREE FOR ORDER BY" not in plan, f"{name}: {plan}"
    conn.close()
    store = SQLiteStore(f"sqlite:///{path}")
    await store.open()
    try:
        runs, total = await store.list_runs(where)
        assert total == RUNS and len(runs) == 50
        assert [r.id for r in runs] == [f"r{n:06d}" for n in range(RUNS - 1, RUNS - 51, -1)]
        none, zero = await store.list_runs(RunFilter(workflow="nap", status="completed"))
        assert none == [] and zero == 0
    finally:
        await store.close()
