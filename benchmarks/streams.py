"""Stream entries per second, and commits per entry, on SQLite and PostgreSQL.

A step writes ``--entries`` small entries to its stream (``ctx.stream(...).write``), as a
model streaming its tokens does: yielding to the event loop every ``--every`` entries
(a token arrives between awaits). Entries are queued and committed in batches, so the
commits per entry should be well under one. ``--runs`` such steps run at once in as many
runs, sharing the store's group commit.

    PYTHONPATH=src python benchmarks/streams.py [--entries 1000] [--runs 1] [--every 10]

PostgreSQL runs in a throwaway cluster (``plait.testing.postgres``), skipped when its
server binaries are not installed.
"""

from __future__ import annotations

import argparse
import asyncio
import tempfile
import time
from pathlib import Path
from typing import Any

import plait
from plait.testing.postgres import TemporaryCluster, find_pg_bin

app = plait.App("stream-bench")


@app.function
async def chatty(data: dict[str, int], ctx: plait.StepContext) -> int:
    stream = ctx.stream("tokens")
    for i in range(data["n"]):
        await stream.write(f"t{i} ")
        if i % data["every"] == 0:
            await asyncio.sleep(0)
    return data["n"]


@app.workflow
async def talk(wf: plait.Workflow, data: dict[str, int]) -> int:
    return await wf.do("chatty", chatty, data)


def _commits(engine: plait.Engine) -> int:
    return int(getattr(engine.store, "commits", 0))


async def measure(url: str, entries: int, runs: int, every: int) -> dict[str, Any]:
    async with plait.Engine(app, url) as engine:
        await engine.run("talk", {"n": 10, "every": every}, timeout=60)  # warm-up
        c0 = _commits(engine)
        await engine.run("talk", {"n": 0, "every": every}, timeout=60)
        run_commits = _commits(engine) - c0  # what a run without entries commits
        c0 = _commits(engine)
        t0 = time.perf_counter()
        ids = [await engine.start("talk", {"n": entries, "every": every}) for _ in range(runs)]
        for run_id in ids:
            run = await engine.wait(run_id, timeout=600)
            assert run.output == entries, run
        elapsed = time.perf_counter() - t0
        commits = _commits(engine) - c0  # the runs' own commits included
        written = entries * runs
        for run_id in ids:
            got = await engine.read_stream(run_id, "tokens", limit=entries + 1)
            assert len(got) == entries + 1 and got[-1].kind == "end", len(got)
        return {
            "entries": written,
            "seconds": elapsed,
            "entries_per_s": written / elapsed,
            "commits": commits,
            "commits_of_a_run_without_entries": run_commits,
            "commits_per_entry": commits / written,
        }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--entries", type=int, default=1000)
    parser.add_argument("--runs", type=int, default=1)
    parser.add_argument("--every", type=int, default=10)
    args = parser.parse_args()
    results: dict[str, dict[str, Any]] = {}
    with tempfile.TemporaryDirectory() as folder:
        url = f"sqlite:///{Path(folder) / 'bench.db'}"
        results["sqlite"] = asyncio.run(measure(url, args.entries, args.runs, args.every))
    if find_pg_bin() is not None:
        with TemporaryCluster() as cluster:
            url = cluster.create_database("streams_bench")
            results["postgres"] = asyncio.run(measure(url, args.entries, args.runs, args.every))
    print(f"{args.runs} run(s) x {args.entries} entries, a yield every {args.every}:")
    for store, r in results.items():
        print(
            f"  {store:9} {r['entries_per_s']:10,.0f} entries/s   "
            f"{r['commits_per_entry']:.4f} commits/entry "
            f"({r['commits']} commits for {r['entries']} entries and their runs; a run "
            f"without entries takes {r['commits_of_a_run_without_entries']}; "
            f"{r['seconds']:.3f} s)"
        )


if __name__ == "__main__":
    main()
