"""What a database of many ended runs costs live work: start, claim and list latencies.

    .venv/bin/python benchmarks/big_database.py              # SQLite and PostgreSQL
    .venv/bin/python benchmarks/big_database.py --runs 100000 --sqlite-only

For each store: a fresh database, empty, and the same with ``--runs`` (1,000,000) ended
runs already in it (each with one step, as old as a retention window would keep them).
On each, three latencies, medians of ``--samples`` (200) calls:

* **start**: ``engine.start`` of a one-step workflow (no worker: the write of the run);
* **claim**: ``store.claim_due_runs`` taking one due run, as a worker's loop does;
* **list**: the first page (50) of ``engine.list_runs`` with a workflow and a status
  filter (the running runs of one workflow, as the dashboard asks);
* **untagged**: the first page (50) of ``engine.list_runs()`` with no filter, and
  **tagged**: the same page of ``engine.list_runs(tags={"customer": "acme"})``, which
  ``--tagged`` (10,000) of the ended runs carry (every hundredth, spread through the
  history): a tag filter is served by the run_tags index, so it should cost no more
  than a list without one (the goal: within 1.2x on the full database).

The figure that matters is the ratio of the full database to the empty one: indexes
must keep each of them where it was, whatever the history behind it.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import sqlite3
import statistics
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import plait
from plait.testing.postgres import TemporaryCluster

app = plait.App("bench-big")


@app.function
async def one(data: int) -> int:
    return data


@app.workflow
async def tiny(wf: plait.Workflow, data: int) -> int:
    return await wf.do("one", one, data)


#: the tag the tagged runs carry, and how often (every TAG_EVERY-th run)
TAG = {"customer": "acme"}
TAG_JSON = '{"customer":"acme"}'


def fill_sqlite(path: Path, runs: int, tagged: int) -> None:
    every = max(1, runs // tagged) if tagged else 0
    old = time.time() - 20 * 86400
    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute("BEGIN")
    for start in range(0, runs, 50_000):
        ids = [f"old-{n:08d}" for n in range(start, min(runs, start + 50_000))]
        numbers = range(start, start + len(ids))
        marked = {n for n in numbers if every and n % every == 0 and n // every < tagged}
        conn.executemany(
            "INSERT INTO plait_runs (id, workflow, kind, status, input, output, created_at,"
            " updated_at, wakeups, tags) VALUES"
            " (?, ?, 'workflow', 'completed', '1', '1', ?, ?, 1, ?)",
            [
                (
                    i,
                    "tiny" if n % 2 else "other",
                    old + n,
                    old + n,
                    TAG_JSON if n in marked else None,
                )
                for n, i in zip(numbers, ids, strict=True)
            ],
        )
        conn.executemany(
            "INSERT INTO plait_run_tags (run_id, key, value, run_created_at)"
            " VALUES (?, 'customer', 'acme', ?)",
            [(f"old-{n:08d}", old + n) for n in sorted(marked)],
        )
        conn.executemany(
            "INSERT INTO plait_steps (run_id, key, seq, name, kind, function, status, input,"
            " output, attempts, invocation_id, created_at, updated_at) VALUES"
            " (?, 'one', 0, 'one', 'do', 'one', 'succeeded', '1', '1', 1, ?, ?, ?)",
            [(i, f"{i}:one", old, old) for i in ids],
        )
    conn.execute("COMMIT")
    conn.close()


async def fill_postgres(url: str, runs: int, tagged: int) -> None:
    import asyncpg

    every = max(1, runs // tagged) if tagged else runs + 1
    conn = await asyncpg.connect(url)
    try:
        await conn.execute(
            """
            INSERT INTO plait.runs (id, workflow, kind, status, input, output, created_at,
                updated_at, wakeups)
            SELECT 'old-' || lpad(g::text, 8, '0'),
                   CASE WHEN g % 2 = 1 THEN 'tiny' ELSE 'other' END, 'workflow',
                   'completed', '1', '1', now() - interval '20 days' + g * interval '1 ms',
                   now() - interval '20 days' + g * interval '1 ms', 1
            FROM generate_series(0, $1 - 1) AS g""",
            runs,
        )
        await conn.execute(
            """
            INSERT INTO plait.steps (run_id, key, seq, name, kind, function, status, input,
                output, attempts, invocation_id, created_at, updated_at)
            SELECT id, 'one', 0, 'one', 'do', 'one', 'succeeded', '1', '1', 1, id || ':one',
                   created_at, created_at
            FROM plait.runs WHERE id LIKE 'old-%'"""
        )
        await conn.execute(
            """
            UPDATE plait.runs SET tags = $3::jsonb
            WHERE id IN (SELECT 'old-' || lpad(g::text, 8, '0')
                         FROM generate_series(0, $1 - 1, $2) AS g LIMIT $4)""",
            runs,
            every,
            TAG_JSON,
            tagged,
        )
        await conn.execute(
            """
            INSERT INTO plait.run_tags (run_id, key, value)
            SELECT id, 'customer', 'acme' FROM plait.runs WHERE tags IS NOT NULL"""
        )
        await conn.execute("VACUUM ANALYZE")
    finally:
        await conn.close()


async def _timed(call: Awaitable[Any]) -> float:
    t0 = time.perf_counter()
    await call
    return time.perf_counter() - t0


async def latencies(urls: dict[str, str], samples: int) -> dict[str, dict[str, float]]:
    """Median milliseconds of each latency on each database. The databases take turns
    call by call, so a noisy moment of the machine lands on both alike."""
    async with contextlib.AsyncExitStack() as stack:
        engines = {
            label: await stack.enter_async_context(plait.Engine(app, url, workers=False))
            for label, url in urls.items()
        }
        for engine in engines.values():
            for n in range(20):  # warm the statements and the caches
                await engine.start("tiny", n)
        calls: dict[str, Callable[[plait.Engine, int], Awaitable[Any]]] = {
            "start": lambda e, n: e.start("tiny", n),
            "claim": lambda e, n: e.store.claim_due_runs(f"bench-{n}", 60.0, 1),
            "list": lambda e, n: e.list_runs(workflow="tiny", status="running"),
            "untagged": lambda e, n: e.list_runs(limit=50),
            "tagged": lambda e, n: e.list_runs(tags=TAG, limit=50),
        }
        took: dict[str, dict[str, list[float]]] = {label: {} for label in engines}
        # call by call, every latency in turn: a noisy moment lands on all of them alike
        for n in range(samples):
            for what, call in calls.items():
                for label, engine in engines.items():
                    took[label].setdefault(what, []).append(await _timed(call(engine, n)))
    return {
        label: {what: statistics.median(t) * 1000 for what, t in got.items()}
        for label, got in took.items()
    }


async def measure(
    store: str, runs: int, tagged: int, samples: int, where: Path, pg: TemporaryCluster | None
) -> dict[str, dict[str, float]]:
    urls = {}
    for label, count in (("empty", 0), ("full", runs)):
        if store == "sqlite":
            path = where / f"{label}.db"
            url = f"sqlite:///{path}"
            async with plait.Engine(app, url, workers=False):
                pass  # the schema
            if count:
                fill_sqlite(path, count, tagged)
        else:
            assert pg is not None
            url = str(pg.create_database(f"big_{label}"))
            async with plait.Engine(app, url, workers=False):
                pass
            if count:
                await fill_postgres(url, count, tagged)
        urls[label] = url
    return await latencies(urls, samples)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=1_000_000, help="ended runs (1,000,000)")
    parser.add_argument(
        "--tagged", type=int, default=10_000, help="ended runs that carry a tag (10,000)"
    )
    parser.add_argument("--samples", type=int, default=200, help="calls per latency (200)")
    parser.add_argument("--sqlite-only", action="store_true", help="skip PostgreSQL")
    args = parser.parse_args(argv)
    if args.runs < 1 or args.samples < 1:
        parser.error("--runs and --samples must be at least 1")
    results = {}
    with tempfile.TemporaryDirectory(prefix="plait-big-") as tmp:
        where = Path(tmp)
        results["SQLite"] = asyncio.run(
            measure("sqlite", args.runs, args.tagged, args.samples, where, None)
        )
        if not args.sqlite_only:
            with TemporaryCluster(fsync=True) as pg:
                results["PostgreSQL"] = asyncio.run(
                    measure("postgres", args.runs, args.tagged, args.samples, where, pg)
                )
    print(f"{args.runs:,} ended runs against an empty database; median ms of {args.samples}")
    print(f"{'store':<11} {'latency':<8} {'empty':>8} {'full':>8} {'full/empty':>11}")
    for store, got in results.items():
        for what in ("start", "claim", "list", "untagged", "tagged"):
            empty, full = got["empty"][what], got["full"][what]
            print(f"{store:<11} {what:<8} {empty:>8.3f} {full:>8.3f} {full / empty:>10.2f}x")
    print(f"list_runs(tags=...) against list_runs() on the full database ({args.tagged:,} tagged)")
    for store, got in results.items():
        tagged, untagged = got["full"]["tagged"], got["full"]["untagged"]
        verdict = "within 1.2x" if tagged <= 1.2 * untagged else "OVER 1.2x"
        print(
            f"{store:<11} tagged {tagged:>8.3f} ms   untagged {untagged:>8.3f} ms"
            f"   {tagged / untagged:>5.2f}x  {verdict}"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
