"""A bulk retry of many failed runs while live runs go on: does it starve live work?

    .venv/bin/python benchmarks/bulk_retry.py                 # SQLite and PostgreSQL
    .venv/bin/python benchmarks/bulk_retry.py --failed 1000 --sqlite-only

For each store: ``--failed`` (5,000) runs of a one-step workflow fail (their function
raises while the partner is "down"); the partner comes back, ``--live`` (100) runs start,
each taking steps one after another, and while they do ``engine.retry_runs`` retries the
failed ones. Printed: the live runs' step latency (each ``wf.do`` as the workflow sees
it: the attempt's start committed, the body, its end committed) during the bulk retry
(p50, p99; the goal: p99 under 50 ms), how long the bulk retry took, and a check that
every matched run was retried exactly once (its body ran twice: the failure, the retry)
and completed.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import plait
from plait.engine.bulk import DEFAULT_RATE
from plait.testing.postgres import TemporaryCluster

app = plait.App("bench-bulk-retry")
#: bodies of ``partner`` that ran, by input
BODIES: dict[int, int] = {}
STATE: dict[str, Any] = {"down": True, "window": None, "body": 0.0}
#: step latencies of the live runs (seconds) by window: "before" the bulk retry, "during"
#: ``retry_runs`` (the batches of reopen writes), "after" it while the retried runs run
LATENCIES: dict[str, list[float]] = {}


@app.function(retries=0)
def partner(data: int) -> int:
    BODIES[data] = BODIES.get(data, 0) + 1
    if STATE["down"]:
        raise RuntimeError("partner API down")
    return data


@app.function
async def tick(data: int) -> int:
    if STATE["body"]:
        await asyncio.sleep(STATE["body"])  # a partner call of the live work
    return data


@app.workflow
async def sync(wf: plait.Workflow, data: int) -> int:
    return int(await wf.do("call", partner, data))


@app.workflow
async def live(wf: plait.Workflow, data: int) -> int:
    n = 0
    while n < data:
        t0 = time.perf_counter()
        await wf.do(f"tick{n}", tick, n)
        if STATE["window"] is not None:
            took = time.perf_counter() - t0 - STATE["body"]
            LATENCIES.setdefault(STATE["window"], []).append(took)
        n += 1
    return n


async def measure(
    url: str, failed: int, live_runs: int, body: float, rate: float | None
) -> dict[str, Any]:
    BODIES.clear()
    LATENCIES.clear()
    STATE.update(down=True, window=None, body=body)
    # room for the retried runs beside the live ones (a run driven here holds a slot)
    async with plait.Engine(app, url, concurrency=live_runs + 100) as engine:
        ids: list[str] = []
        for start in range(0, failed, 500):
            chunk = range(start, min(failed, start + 500))
            ids += await asyncio.gather(*(engine.start(sync, n, inline=True) for n in chunk))
            await asyncio.gather(*(engine.wait(r, timeout=600) for r in ids[start:]))
        STATE["down"] = False
        lives = [await engine.start(live, 10_000, inline=True) for _ in range(live_runs)]
        await asyncio.sleep(1.0)  # the live runs are under way
        STATE["window"] = "before"
        await asyncio.sleep(3.0)
        STATE["window"] = "during"
        t0 = time.perf_counter()
        retried = await engine.retry_runs(workflow="sync", rate=rate)
        took = time.perf_counter() - t0
        STATE["window"] = "after"
        await _all_completed(engine, failed, deadline=t0 + 600)
        drained = time.perf_counter() - t0
        STATE["window"] = None
        for run_id in lives:
            await engine.cancel(run_id)
        runs = await asyncio.gather(*(engine.wait(r, timeout=60) for r in ids))
        completed = sum(r.status == "completed" for r in runs)
        once = sum(BODIES.get(n, 0) == 2 for n in range(failed))
    result: dict[str, Any] = {
        "retried": retried,
        "completed": completed,
        "once": once,
        "took": took,
        "drained": drained,
    }
    for window in ("before", "during", "after"):
        got = sorted(LATENCIES.get(window, []))
        p99 = got[max(0, int(len(got) * 0.99) - 1)] if got else float("nan")
        p50 = statistics.median(got) if got else float("nan")
        result[window] = (len(got), p50 * 1000, p99 * 1000)
    return result


async def _all_completed(engine: plait.Engine, count: int, deadline: float) -> None:
    """Poll the count of completed ``sync`` runs: 5,000 waiters would load the loop."""
    for _ in range(6000):
        _page, done = await engine.run_summaries(workflow="sync", status="completed", limit=1)
        if done >= count or time.perf_counter() > deadline:
            return
        await asyncio.sleep(0.1)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--failed", type=int, default=5_000, help="failed runs (5,000)")
    parser.add_argument("--live", type=int, default=100, help="live runs (100)")
    parser.add_argument(
        "--body-ms", type=float, default=100.0, help="each live step's partner call (100 ms)"
    )
    parser.add_argument(
        "--rate", type=float, default=DEFAULT_RATE, help="retry_runs' pace, runs a second"
    )
    parser.add_argument("--unpaced", action="store_true", help="retry_runs with rate=None")
    parser.add_argument("--sqlite-only", action="store_true", help="skip PostgreSQL")
    parser.add_argument("--postgres-only", action="store_true", help="skip SQLite")
    args = parser.parse_args(argv)
    results: dict[str, dict[str, Any]] = {}
    shape = (args.failed, args.live, args.body_ms / 1000, None if args.unpaced else args.rate)
    with tempfile.TemporaryDirectory(prefix="plait-bulk-") as tmp:
        if not args.postgres_only:
            url = f"sqlite:///{Path(tmp) / 'bulk.db'}"
            results["SQLite"] = asyncio.run(measure(url, *shape))
        if not args.sqlite_only:
            with TemporaryCluster(fsync=True) as pg:
                pg_url = str(pg.create_database("bulk"))
                results["PostgreSQL"] = asyncio.run(measure(pg_url, *shape))
    print(f"bulk retry of {args.failed:,} failed runs while {args.live} live runs take steps")
    print("live step latency beyond its body (ms): before the bulk retry, during retry_runs,")
    print("and after it until every retried run completed; the goal: p99 during under 50 ms")
    ok = True
    for store, r in results.items():
        exact = r["retried"] == r["once"] == r["completed"] == args.failed
        ok = ok and exact
        print(
            f"{store}: retried {r['retried']}, body ran exactly twice for {r['once']},"
            f" completed {r['completed']}, retry_runs took {r['took']:.2f} s, all retried"
            f" runs completed {r['drained']:.2f} s after it began"
            f"{'' if exact else '  (NOT every run retried exactly once)'}"
        )
        for window in ("before", "during", "after"):
            steps, p50, p99 = r[window]
            goal = ("  goal met" if p99 < 50 else "  goal MISSED") if window == "during" else ""
            print(f"  {window:<7} steps {steps:>6}  p50 {p50:>8.2f}  p99 {p99:>8.2f}{goal}")
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
