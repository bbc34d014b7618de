"""Flow control: admission throughput of a limited queue, and what an idle schedule table
costs a worker.

    .venv/bin/python benchmarks/flow_control.py                 # SQLite, about a minute
    .venv/bin/python benchmarks/flow_control.py --postgres      # also a throwaway cluster

1. **Admission throughput.** One engine with workers (``concurrency=64``) on a fresh
   database; a queue with ``concurrency=10``; ``--runs`` (1,000) runs of a one-step
   workflow started at once through it. The figure is runs per second from the first start
   call to the last completion: every run waits as ``queued``, is admitted within the
   limit by the claim that leases it, and frees its slot when it ends. ``--reps`` (3)
   fresh databases; the median, with the range.
2. **Idle schedules.** ``--schedules`` (10,000) schedules that fire once a year are stored,
   then one ``plait worker`` process runs for ``--idle`` (30) seconds with nothing due. The
   figures are the worker's CPU seconds over that time (from ``/proc``) and its resident
   memory at the end, beside the same worker on a database without schedules.

Each measurement is a fresh database in a new temporary folder on a real disk.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import plait

HERE = Path(__file__).resolve().parent

app = plait.App("bench-flow")
app.queue("limited", concurrency=10)


@app.function
async def touch(data: Any) -> Any:
    return data


@app.workflow(queue="limited")
async def admitted(wf: plait.Workflow, data: Any) -> Any:
    return await wf.do("touch", touch, data)


@app.workflow
async def yearly(wf: plait.Workflow, data: Any) -> Any:
    return data


async def admission(url: str, runs: int) -> float:
    """Runs per second through a queue with concurrency=10."""
    async with plait.Engine(app, url, concurrency=64) as engine:
        began = time.perf_counter()
        ids = await asyncio.gather(*(engine.start("admitted", n) for n in range(runs)))
        for run_id in ids:
            await engine.wait(run_id, timeout=600)
        return runs / (time.perf_counter() - began)


def _cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


async def idle_worker(
    url: str, schedules: int, seconds: float, folder: Path
) -> tuple[float, float]:
    """(CPU seconds, RSS MiB) of one worker idling beside ``schedules`` schedules."""
    async with plait.Engine(app, url, workers=False) as engine:
        for n in range(schedules):
            await engine.create_schedule(f"s{n}", workflow="yearly", cron=f"{n % 60} 0 1 1 *")
    log = (folder / f"worker-{schedules}.log").open("wb")
    env = {**os.environ, "PYTHONPATH": f"{HERE}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
    proc = await asyncio.to_thread(
        subprocess.Popen,
        [sys.executable, "-m", "plait.cli", "worker", "flow_control:app", "--database", url],
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    try:
        deadline = time.monotonic() + 60
        while b"working" not in (folder / f"worker-{schedules}.log").read_bytes():
            if time.monotonic() > deadline or proc.poll() is not None:
                raise RuntimeError("the worker did not start")
            await asyncio.sleep(0.1)
        before = _cpu_seconds(proc.pid)
        await asyncio.sleep(seconds)
        return _cpu_seconds(proc.pid) - before, _rss_mib(proc.pid)
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=30)
        log.close()


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=1000)
    parser.add_argument("--reps", type=int, default=3, help="admission measurements (3)")
    parser.add_argument("--schedules", type=int, default=10_000)
    parser.add_argument("--idle", type=float, default=30.0)
    parser.add_argument("--postgres", action="store_true")
    args = parser.parse_args()
    if args.reps < 1 or args.runs < 1:
        parser.error("--reps and --runs must be at least 1")
    stores = ["sqlite"] + (["postgres"] if args.postgres else [])
    cluster = None
    if args.postgres:
        from plait.testing.postgres import TemporaryCluster

        cluster = TemporaryCluster(fsync=True)
        cluster.start()
    try:
        print(
            "| store | admitted runs/s (concurrency=10) | idle worker CPU s / RSS MiB:"
            f" 0 schedules | {args.schedules:,} schedules |"
        )
        print("|---|---|---|---|")
        for store in stores:
            with tempfile.TemporaryDirectory(dir=HERE) as tmp:
                folder = Path(tmp)

                def url(name: str, store: str = store, folder: Path = folder) -> str:
                    if store == "sqlite":
                        return f"sqlite:///{folder / name}.db"
                    assert cluster is not None
                    return str(cluster.create_database(f"flow_{name}"))

                rates = [await admission(url(f"admission{n}"), args.runs) for n in range(args.reps)]
                empty = await idle_worker(url("idle0"), 0, args.idle, folder)
                full = await idle_worker(url("idle"), args.schedules, args.idle, folder)
                print(
                    f"| {store} | {statistics.median(rates):,.0f} ({min(rates):,.0f}-"
                    f"{max(rates):,.0f}) | {empty[0]:.2f} / {empty[1]:.0f}"
                    f" | {full[0]:.2f} / {full[1]:.0f} |"
                )
    finally:
        if cluster is not None:
            cluster.cleanup()


if __name__ == "__main__":
    asyncio.run(main())
