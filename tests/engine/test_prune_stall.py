"""How long live work waits while a prune of 100,000 ended runs goes on (SQLite).

A measurement, not a timed assertion: it prints the longest latency of a concurrent
workload (short workflows run one after another) before and during the prune. It writes
and deletes about a gigabyte, so it only runs when asked for: it would disturb the timing of
the tests after it. Run it on a quiet machine with
``PLAIT_PRUNE_STALL=1 pytest -s tests/engine/test_prune_stall.py``; ``PLAIT_PRUNE_RUNS`` changes
the count and ``PLAIT_PRUNE_BATCH`` the runs per batch.
"""

from __future__ import annotations

import asyncio
import os
import statistics
import time
from pathlib import Path
from typing import Any

import pytest

import plait

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(
        not os.environ.get("PLAIT_PRUNE_STALL"),
        reason="a measurement; set PLAIT_PRUNE_STALL=1 to run it",
    ),
]

RUNS = int(os.environ.get("PLAIT_PRUNE_RUNS", "100000"))
BATCH = os.environ.get("PLAIT_PRUNE_BATCH")
app = plait.App("prune-stall")


@app.function
async def add(data: dict[str, int]) -> int:
    return data["a"] + data["b"]


@app.workflow
async def tiny(wf: plait.Workflow, data: int) -> int:
    first = await wf.do("first", add, {"a": data, "b": 1})
    return await wf.do("second", add, {"a": first, "b": 1})


def _fill(path: Path, runs: int) -> None:
    """Ended runs as a busy deployment leaves them: three steps, an event, a value."""
    import sqlite3

    old = time.time() - 90 * 86400
    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute("BEGIN")
    for start in range(0, runs, 10_000):
        ids = [f"old-{n:07d}" for n in range(start, min(runs, start + 10_000))]
        conn.executemany(
            "INSERT INTO plait_runs (id, workflow, kind, status, input, output, created_at,"
            " updated_at, wakeups) VALUES (?, 'tiny', 'workflow', 'completed', '1', '3', ?, ?, 1)",
            [(i, old, old + n * 0.001) for n, i in enumerate(ids)],
        )
        conn.executemany(
            "INSERT INTO plait_steps (run_id, key, seq, name, kind, function, status, input,"
            " output, attempts, invocation_id, created_at, updated_at, attempt_status,"
            " attempt_started, attempt_finished) VALUES (?, ?, ?, ?, 'do', 'add', 'succeeded',"
            " '{}', '2', 1, ?, ?, ?, 'succeeded', ?, ?)",
            [
                (i, k, s, k, f"{i}:{k}", old, old, old, old)
                for i in ids
                for s, k in enumerate("abc")
            ],
        )
        conn.executemany(
            "INSERT INTO plait_events (run_id, name, payload, created_at, consumed_by)"
            " VALUES (?, 'go', '1', ?, '__event:go')",
            [(i, old) for i in ids],
        )
        conn.executemany(
            "INSERT INTO plait_values (run_id, key, value, updated_at) VALUES (?, 'p', '1', ?)",
            [(i, old) for i in ids],
        )
    conn.execute("COMMIT")
    conn.close()


async def _workload(engine: plait.Engine, stop: asyncio.Event, latencies: list[float]) -> None:
    n = 0
    while not stop.is_set():
        started = time.perf_counter()
        assert await engine.run("tiny", n, inline=True, timeout=60) == n + 2
        latencies.append(time.perf_counter() - started)
        n += 1


async def test_prune_of_100000_runs_does_not_stall_live_work(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from plait.worker import retention

    if BATCH:
        monkeypatch.setattr(retention, "BATCH", int(BATCH))
    url = f"sqlite:///{tmp_path / 'stall.db'}"
    async with plait.Engine(app, url, workers=False):
        pass  # the schema
    _fill(tmp_path / "stall.db", RUNS)
    async with plait.Engine(app, url, workers=False) as engine:
        stop = asyncio.Event()
        baseline: list[float] = []
        work = asyncio.ensure_future(_workload(engine, stop, baseline))
        await asyncio.sleep(2.0)  # a baseline of the workload alone, for comparison
        stop.set()
        await work

        stop = asyncio.Event()
        during: list[float] = []
        work = asyncio.ensure_future(_workload(engine, stop, during))
        started = time.perf_counter()
        pruned = await engine.prune(older_than="30d")
        took = time.perf_counter() - started
        stop.set()
        await work
    assert pruned == RUNS
    report: dict[str, Any] = {
        "runs pruned": pruned,
        "batch": retention.BATCH,
        "prune took (s)": round(took, 2),
        "workload runs alone / during": (len(baseline), len(during)),
        "median run latency alone / during (ms)": (
            round(statistics.median(baseline) * 1000, 2),
            round(statistics.median(during) * 1000, 2),
        ),
        "longest run latency alone / during (ms)": (
            round(max(baseline) * 1000, 2),
            round(max(during) * 1000, 2),
        ),
    }
    print("\nprune stall on SQLite:", report)
