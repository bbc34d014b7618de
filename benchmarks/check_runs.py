"""How fast ``engine.check`` replays live runs: 10,000 suspended runs of a 20-step
workflow on SQLite, checked against the code they ran on.

    .venv/bin/python benchmarks/check_runs.py
    .venv/bin/python benchmarks/check_runs.py --runs 1000 --steps 50

One run is made for real (its steps, then ``wf.suspend``); its rows are then copied, each
copy under a run id of its own, in one transaction, so the database holds ``--runs`` runs
exactly as a worker leaves them. The check is timed from a fresh engine (no worker) on
that file; it prints the runs checked per second and the total time. The goal: 10,000
runs of 20 steps in under a minute.
"""

from __future__ import annotations

import argparse
import asyncio
import sqlite3
import tempfile
import time
from pathlib import Path

import plait
from plait.ids import invocation_id

app = plait.App("bench-check")
STEPS = {"count": 20}


@app.function
async def add(data: int) -> int:
    return data + 1


@app.workflow
async def steps(wf: plait.Workflow, data: int) -> int:
    total = data
    for n in range(STEPS["count"]):
        total = await wf.do(f"step {n}", add, total)
    await wf.suspend("review")
    return total


async def template(url: str) -> str:
    """One run made for real, suspended after its steps."""
    async with plait.Engine(app, url) as engine:
        run_id = await engine.start("steps", 0)
        run = await engine.wait(run_id, timeout=60)
        assert run.status == "suspended", run
        return run_id


def copy_runs(path: Path, source: str, runs: int) -> None:
    """``runs - 1`` copies of run ``source`` (its run row and its step rows)."""
    conn = sqlite3.connect(path, isolation_level=None)
    try:
        run_cols = [r[1] for r in conn.execute("PRAGMA table_info(plait_runs)")]
        step_cols = [r[1] for r in conn.execute("PRAGMA table_info(plait_steps)")]
        run_row = conn.execute("SELECT * FROM plait_runs WHERE id = ?", (source,)).fetchone()
        step_rows = conn.execute("SELECT * FROM plait_steps WHERE run_id = ?", (source,)).fetchall()
        rid, sid = run_cols.index("id"), step_cols.index("run_id")
        key, inv = step_cols.index("key"), step_cols.index("invocation_id")
        new_runs, new_steps = [], []
        for n in range(1, runs):
            run_id = f"{source[:-8]}{n:08d}"
            row = list(run_row)
            row[rid] = run_id
            new_runs.append(row)
            for step in step_rows:
                copy = list(step)
                copy[sid], copy[inv] = run_id, invocation_id(run_id, step[key])
                new_steps.append(copy)
        conn.execute("BEGIN")
        conn.executemany(
            f"INSERT INTO plait_runs ({', '.join(run_cols)}) VALUES"
            f" ({', '.join('?' * len(run_cols))})",
            new_runs,
        )
        conn.executemany(
            f"INSERT INTO plait_steps ({', '.join(step_cols)}) VALUES"
            f" ({', '.join('?' * len(step_cols))})",
            new_steps,
        )
        conn.execute("COMMIT")
    finally:
        conn.close()


async def measure(folder: Path, runs: int) -> None:
    path = folder / "check.db"
    url = f"sqlite:///{path}"
    made = time.perf_counter()
    source = await template(url)
    copy_runs(path, source, runs)
    print(
        f"{runs:,} suspended runs of {STEPS['count']} steps made in "
        f"{time.perf_counter() - made:.1f} s"
    )
    async with plait.Engine(app, url, workers=False) as engine:
        began = time.perf_counter()
        results = await engine.check()
        took = time.perf_counter() - began
    assert len(results) == runs and all(r.ok for r in results), results[:3]
    print(f"checked {runs:,} runs in {took:.1f} s: {runs / took:,.0f} runs/s")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=10_000)
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--tmpdir", default=None, help="where the database goes")
    args = parser.parse_args()
    STEPS["count"] = args.steps
    with tempfile.TemporaryDirectory(dir=args.tmpdir) as folder:
        asyncio.run(measure(Path(folder), args.runs))


if __name__ == "__main__":
    main()
