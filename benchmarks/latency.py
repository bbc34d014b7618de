"""Latency across processes, and starting many runs, for plait and DBOS side by side.

    .venv/bin/python benchmarks/latency.py               # SQLite (a few minutes)
    .venv/bin/python benchmarks/latency.py --postgres    # also a throwaway PostgreSQL
    .venv/bin/python benchmarks/latency.py --no-dbos     # plait only

1. **Start to first step.** One process starts a run (plait: an engine with
   ``workers=False``; DBOS: ``DBOSClient.enqueue`` to its queue); another process (plait:
   ``plait worker``; DBOS: a launched DBOS serving that queue) runs it. The figure is the
   time from just before the start call to the moment the run's first step body begins,
   read from the machine's monotonic clock, which both processes share (the body returns
   it). ``--samples`` (30) one after another, or as many as ``--budget`` (90 s) allows;
   p50 and p99 (nearest rank: with fewer than 100 samples, p99 is the largest).
2. **Event to next step.** A run waits for an event (plait: ``wf.wait_for_event``; DBOS:
   ``DBOS.recv``); once it waits, the first process sends it (``engine.send_event``;
   ``DBOSClient.send``). The figure is the time from just before the send to the moment
   the step after the wait begins.
3. Both **at rest** (nothing else in the database) and **under load**: ``--load`` (1,000)
   runs started just before the samples, each a chain of steps that sleep
   ``--load-step-seconds`` (1 s, 100 of them) in the same worker, all in flight at once (the
   workers' concurrency is above the load; the load outlives the samples and how many are
   still live at the end is printed).
4. **Starting many runs** (plait, in one process, no worker): ``engine.start_many`` of
   ``--bulk`` (1,000) runs, and as many concurrent ``engine.start`` calls, each against
   the time of the same runs started as one commit per 100 runs (ten ``start_many`` of
   100). The median of three fresh databases.

DBOS runs under ``benchmarks/.venv-dbos`` (made on first use, as ``run.py`` makes it) and
its queue polls at its default interval (1 s) unless ``--dbos-poll`` says otherwise.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import math
import os
import signal
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import plait

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import _common  # noqa: E402  (the benchmarks folder is not a package)

app = plait.App("bench-latency")


@app.function
async def mark(label: str) -> float:
    return time.monotonic()


@app.function
async def tick(data: dict[str, Any]) -> int:
    await asyncio.sleep(data["seconds"])
    return int(data["i"])


@app.workflow
async def first_step(wf: plait.Workflow) -> float:
    return await wf.do("mark", mark, "first")


@app.workflow
async def after_event(wf: plait.Workflow) -> float:
    await wf.do("ready", mark, "ready")
    await wf.wait_for_event("go")
    return await wf.do("mark", mark, "after")


@app.workflow
async def busy(wf: plait.Workflow, data: dict[str, Any]) -> int:
    for i in range(data["steps"]):
        await wf.do(f"t{i}", tick, {"i": i, "seconds": data["seconds"]})
    return int(data["steps"])


@app.workflow
async def echo(wf: plait.Workflow, data: Any) -> Any:
    return data


#: the worker takes the load and every sample at once: no sample waits for a slot
WORKER_CONCURRENCY = 4000


def percentile(values: list[float], q: float) -> float:
    """Nearest rank: the smallest value with at least ``q`` of the values at or below."""
    ordered = sorted(values)
    return ordered[max(0, math.ceil(q * len(ordered)) - 1)]


# -- plait ------------------------------------------------------------------------------------


@contextlib.asynccontextmanager
async def plait_worker(url: str, folder: Path, name: str) -> AsyncIterator[subprocess.Popen[bytes]]:
    """One ``plait worker`` process on ``url``, killed afterwards (the database is
    thrown away: the load it still holds needs no drain)."""
    log_path = folder / f"{name}.log"
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(HERE), os.environ.get("PYTHONPATH", "")]),
    }
    cmd = [sys.executable, "-m", "plait.cli", "worker", "latency:app", "--database", url]
    cmd += ["--concurrency", str(WORKER_CONCURRENCY)]
    with log_path.open("wb") as log:
        proc = await asyncio.to_thread(
            subprocess.Popen, cmd, env=env, stdout=log, stderr=subprocess.STDOUT
        )
    try:
        deadline = time.monotonic() + 60
        while b"working" not in log_path.read_bytes():
            if time.monotonic() > deadline or proc.poll() is not None:
                raise RuntimeError(f"the plait worker did not start:\n{log_path.read_text()}")
            await asyncio.sleep(0.05)
        yield proc
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=30)


async def plait_latency(
    url: str, folder: Path, samples: int, budget: float, load: dict[str, Any]
) -> dict[str, Any]:
    async with plait_worker(url, folder, "worker"), plait.Engine(app, url, workers=False) as engine:
        if load["runs"]:
            await engine.start_many(
                busy, [{"steps": load["steps"], "seconds": load["seconds"]}] * load["runs"]
            )
        await engine.wait(await engine.start(first_step), timeout=60)  # unmeasured
        start: list[float] = []
        ends = time.monotonic() + budget
        for _ in range(samples):
            if start and time.monotonic() > ends:
                break  # a contender that falls this far behind is shown with fewer samples
            began = time.monotonic()
            run_id = await engine.start(first_step)
            run = await engine.wait(run_id, timeout=120)
            start.append((run.output - began) * 1000)
        event: list[float] = []
        ends = time.monotonic() + budget
        for _ in range(samples):
            if event and time.monotonic() > ends:
                break
            run_id = await engine.start(after_event)
            await _until(lambda run_id=run_id: _waits_for_event(engine, run_id))
            began = time.monotonic()
            await engine.send_event(run_id, "go")
            run = await engine.wait(run_id, timeout=120)
            event.append((run.output - began) * 1000)
        live = 0
        if load["runs"]:
            _runs, live = await engine.count_runs(workflow="busy", status="running", limit=1)
        return {"start_ms": start, "event_ms": event, "load_live": live}


async def _waits_for_event(engine: plait.Engine, run_id: str) -> bool:
    steps = await engine.get_steps(run_id)
    return any(s.kind == "event" and s.status == "scheduled" for s in steps)


async def _until(check: Callable[[], Awaitable[bool]], timeout: float = 120.0) -> None:
    deadline = time.monotonic() + timeout
    while not await check():
        if time.monotonic() > deadline:
            raise TimeoutError("the run did not reach its wait")
        await asyncio.sleep(0.002)


async def commit_floor(url: str, samples: int) -> list[float]:
    """Milliseconds of one durable commit (one row inserted) on the store, ``samples``
    times: what a latency made of a few commits is to be read against on this machine."""
    taken: list[float] = []
    if url.startswith("sqlite"):
        conn = sqlite3.connect(url.split("sqlite:///", 1)[1], isolation_level=None)
        try:
            conn.execute("PRAGMA journal_mode = WAL")
            conn.execute("PRAGMA synchronous = FULL")
            conn.execute("CREATE TABLE floor (id INTEGER PRIMARY KEY, at REAL NOT NULL)")
            for _ in range(samples):
                began = time.perf_counter()
                conn.execute("BEGIN IMMEDIATE")
                conn.execute("INSERT INTO floor (at) VALUES (?)", (time.time(),))
                conn.execute("COMMIT")
                taken.append((time.perf_counter() - began) * 1000)
        finally:
            conn.close()
        return taken
    import asyncpg

    pg = await asyncpg.connect(url)
    try:
        await pg.execute("CREATE TABLE floor (id bigserial PRIMARY KEY, at float8 NOT NULL)")
        for _ in range(samples):
            began = time.perf_counter()
            await pg.execute("INSERT INTO floor (at) VALUES ($1)", time.time())
            taken.append((time.perf_counter() - began) * 1000)
    finally:
        await pg.close()
    return taken


async def bulk_starts(url: str, runs: int) -> dict[str, float]:
    """Seconds for ``runs`` runs: one ``start_many``, concurrent ``start`` calls, and
    one commit per 100 runs (the reference)."""
    async with plait.Engine(app, url, workers=False) as engine:
        await engine.start_many(echo, list(range(100)))  # warm: statements prepared
        began = time.perf_counter()
        for chunk in range(0, runs, 100):
            await engine.start_many(echo, list(range(chunk, min(runs, chunk + 100))))
        per_100 = time.perf_counter() - began
        began = time.perf_counter()
        await engine.start_many(echo, list(range(runs)))
        many = time.perf_counter() - began
        began = time.perf_counter()
        await asyncio.gather(*(engine.start(echo, n) for n in range(runs)))
        concurrent = time.perf_counter() - began
    return {"per_100": per_100, "start_many": many, "concurrent": concurrent}


# -- DBOS ------------------------------------------------------------------------------------


async def dbos_latency(
    python: Path, url: str, samples: int, budget: float, load: dict[str, Any], poll: float
) -> dict[str, Any]:
    """DBOS's worker process and its driver (``latency_dbos.py``) on ``url``."""
    script = str(HERE / "latency_dbos.py")
    worker = await asyncio.to_thread(
        subprocess.Popen,
        [str(python), script, json.dumps({"role": "worker", "db": url, "poll": poll})],
        cwd=HERE,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
    )
    try:
        assert worker.stdout is not None
        seen: list[bytes] = []
        while True:
            line = await asyncio.to_thread(worker.stdout.readline)
            if not line:
                raise RuntimeError(f"the DBOS worker exited:\n{b''.join(seen).decode()}")
            seen.append(line)
            if line.startswith(_common.READY.encode()):
                break
        params = {
            "role": "drive",
            "db": url,
            "samples": samples,
            "budget": budget,
            "load": load["runs"],
            "load_steps": load["steps"],
            "load_step_seconds": load["seconds"],
        }
        driver = await asyncio.to_thread(
            subprocess.run,
            [str(python), script, json.dumps(params)],
            cwd=HERE,
            capture_output=True,
            timeout=1800,
        )
        for out in driver.stdout.decode().splitlines():
            if out.startswith(_common.RESULT):
                return dict(json.loads(out[len(_common.RESULT) :]))
        raise RuntimeError(
            f"the DBOS driver gave no result:\n{driver.stdout.decode()}{driver.stderr.decode()}"
        )
    finally:
        with contextlib.suppress(OSError):
            assert worker.stdin is not None
            worker.stdin.close()
        try:
            worker.wait(timeout=10)
        except subprocess.TimeoutExpired:
            worker.kill()
            worker.wait()


# -- the run ---------------------------------------------------------------------------------


def _row(store: str, who: str, when: str, result: dict[str, Any] | str) -> str:
    if isinstance(result, str):
        return f"| {store} | {who} | {when} | {result} | | | | | |"
    s, e = result["start_ms"], result["event_ms"]
    live = f"{result['load_live']:,}" if when != "at rest" else "-"
    return (
        f"| {store} | {who} | {when} | {percentile(s, 0.5):.1f} | {percentile(s, 0.99):.1f}"
        f" | {percentile(e, 0.5):.1f} | {percentile(e, 0.99):.1f} | {len(s)} / {len(e)}"
        f" | {live} |"
    )


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--samples", type=int, default=30)
    parser.add_argument("--load", type=int, default=1000, help="runs in flight under load")
    parser.add_argument("--load-steps", type=int, default=100)
    parser.add_argument("--load-step-seconds", type=float, default=1.0)
    parser.add_argument(
        "--budget", type=float, default=90.0, help="seconds at most for each kind of sample"
    )
    parser.add_argument("--bulk", type=int, default=1000, help="runs per bulk start")
    parser.add_argument("--markdown", help="also write the tables as Markdown here")
    parser.add_argument("--postgres", action="store_true", help="also PostgreSQL")
    parser.add_argument("--postgres-only", action="store_true")
    parser.add_argument("--no-dbos", action="store_true", help="plait only")
    parser.add_argument("--dbos-spec", default="dbos", help="pip requirement for the DBOS venv")
    parser.add_argument("--dbos-poll", type=float, default=1.0, help="DBOS queue poll (s)")
    args = parser.parse_args()
    if args.samples < 1 or args.bulk < 100 or args.load < 0:
        parser.error("--samples must be at least 1, --bulk at least 100, --load not negative")
    stores = ([] if args.postgres_only else ["sqlite"]) + (
        ["postgres"] if args.postgres or args.postgres_only else []
    )
    dbos: Path | str | None = None
    if not args.no_dbos:
        import run as bench_run

        try:
            dbos = bench_run.ensure_dbos(args.dbos_spec)
        except Exception as exc:  # no network, no wheel: plait alone, saying why
            dbos = f"DBOS could not be installed ({exc})"
    cluster = None
    if "postgres" in stores:
        from plait.testing.postgres import TemporaryCluster

        cluster = TemporaryCluster(fsync=True)
        cluster.start()
    loads = {
        "at rest": {"runs": 0, "steps": 0, "seconds": 0.0},
        f"{args.load:,} runs": {
            "runs": args.load,
            "steps": args.load_steps,
            "seconds": args.load_step_seconds,
        },
    }
    latency_rows: list[str] = []
    bulk_rows: list[str] = []
    floor_rows: list[str] = []
    counter = 0
    try:
        for store in stores:
            with tempfile.TemporaryDirectory(dir=HERE) as tmp:
                folder = Path(tmp)

                def url(store: str = store, folder: Path = folder) -> str:
                    nonlocal counter
                    counter += 1
                    if store == "sqlite":
                        return f"sqlite:///{folder / f'latency{counter}.db'}"
                    assert cluster is not None
                    return str(cluster.create_database(f"latency_{counter}"))

                floor = await commit_floor(url(), args.samples)
                floor_rows.append(
                    f"| {store} | {percentile(floor, 0.5):.2f} | {percentile(floor, 0.99):.2f} |"
                )
                print(floor_rows[-1], flush=True)
                for when, load in loads.items():
                    result = await plait_latency(url(), folder, args.samples, args.budget, load)
                    latency_rows.append(_row(store, "plait", when, result))
                    print(latency_rows[-1], flush=True)
                    if dbos is None:
                        continue
                    if isinstance(dbos, str):
                        latency_rows.append(_row(store, "DBOS", when, dbos))
                    else:
                        try:
                            found = await dbos_latency(
                                dbos, url(), args.samples, args.budget, load, args.dbos_poll
                            )
                            latency_rows.append(_row(store, "DBOS", when, found))
                        except Exception as exc:
                            latency_rows.append(_row(store, "DBOS", when, f"failed: {exc}"))
                    print(latency_rows[-1], flush=True)
                reps = [await bulk_starts(url(), args.bulk) for _ in range(3)]
                med = {k: statistics.median(r[k] for r in reps) for k in reps[0]}
                bulk_rows.append(
                    f"| {store} | {med['per_100'] * 1000:.0f} | {med['start_many'] * 1000:.0f}"
                    f" ({med['start_many'] / med['per_100']:.2f}x) | {med['concurrent'] * 1000:.0f}"
                    f" ({med['concurrent'] / med['per_100']:.2f}x) |"
                )
                print(bulk_rows[-1], flush=True)
    finally:
        if cluster is not None:
            cluster.cleanup()
    tables = [
        f"Cross-process latency, ms ({args.samples} samples each; DBOS queue poll"
        f" {args.dbos_poll:g} s)",
        "",
        "| store | engine | load | start to first step p50 | p99 | event to next step p50"
        " | p99 | samples | load runs live at the end |",
        "|---|---|---|---|---|---|---|---|---|",
        *latency_rows,
        "",
        "One durable commit on this machine in the same run, ms (the latencies are a few)",
        "",
        "| store | commit p50 | p99 |",
        "|---|---|---|",
        *floor_rows,
        "",
        f"Starting {args.bulk:,} runs, ms (median of 3; ratio to one commit per 100 runs)",
        "",
        "| store | one commit per 100 runs | start_many | concurrent start calls |",
        "|---|---|---|---|",
        *bulk_rows,
    ]
    print()
    print("\n".join(tables))
    if args.markdown is not None:
        await asyncio.to_thread(Path(args.markdown).write_text, "\n".join(tables) + "\n")


if __name__ == "__main__":
    asyncio.run(main())
