"""The benchmark of plait's statements alone writes the rows a sequential run's steps are,
as plait's store reads them: if the store's statements change, it fails here rather than
measure something else."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from pathlib import Path

import plait
from support.paths import ROOT

SCRIPT = ROOT / "benchmarks" / "bench_plait.py"


def test_the_statements_alone_write_steps_the_store_reads_back(tmp_path: Path) -> None:
    db = f"sqlite:///{tmp_path / 'statements.db'}"
    params = {"workload": "statements", "db": db, "seconds": 0.05, "steps": 5}
    out = subprocess.run(
        [sys.executable, str(SCRIPT), json.dumps(params)],
        capture_output=True,
        text=True,
        check=True,
        cwd=SCRIPT.parent,
        timeout=120,
    )
    line = next(x for x in out.stdout.splitlines() if x.startswith("BENCH-RESULT "))
    result = json.loads(line.removeprefix("BENCH-RESULT "))
    assert result["us_per_step"] > 0
    assert result["settings"] == {"journal_mode": "WAL", "synchronous": "FULL"}
    # 50 warm-up steps in runs of 5: the first run has a full history
    steps = asyncio.run(_steps_of_the_first_run(db))
    assert [s.key for s in steps] == ["s", "s#1", "s#2", "s#3", "s#4"]
    assert [s.status for s in steps] == ["succeeded"] * 4 + ["running"]
    assert all(s.function == "noop" and s.attempts == 1 for s in steps)


async def _steps_of_the_first_run(db: str) -> list[plait.Step]:
    async with plait.Engine(plait.App("bench"), db, workers=False) as engine:
        runs = await engine.list_runs(limit=1000)
        first = min(runs, key=lambda r: r.created_at)
        return await engine.get_steps(first.id)
