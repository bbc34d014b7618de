"""plait against an earlier commit of itself, workload by workload.

    python benchmarks/compare.py 48d2a2b                        # every SQLite workload
    python benchmarks/compare.py 48d2a2b --postgres --reps 7 sqlite/throughput

Each of the two trees runs its own ``benchmarks/run.py`` workloads, plait's side only, in
a fresh process on a fresh database; the trees take turns in an order that alternates
between repetitions and workloads, so a drift of the machine falls on both. The earlier
commit is checked out in a temporary worktree. Both trees are compiled to bytecode first
(see ``run.compile_bytecode``). Prints each figure's median and min-max per tree and the
change; a spread wider than the change wants more repetitions.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
_MARK = "COMPARE-RESULT "

# Runs in a tree's interpreter environment: that tree's run.py plans the job and runs it.
_DRIVER = """
import asyncio, json, sys, uuid
from pathlib import Path
import run
key, root, dsn = sys.argv[1], Path(sys.argv[2]), sys.argv[3] or None
class Databases:
    def create_database(self, name):
        import asyncpg
        async def go():
            conn = await asyncpg.connect(dsn)
            try:
                await conn.execute(f'CREATE DATABASE "{name}"')
            finally:
                await conn.close()
        asyncio.run(go())
        return dsn.rsplit("/", 1)[0] + "/" + name
_ns, cfg = run.parse_args(["--postgres"] if dsn else [])
env = run.Env(root=root, plait_python=sys.executable, dbos_python="")
env.counter = uuid.uuid4().int % 100000 * 10
if dsn:
    env.pg = Databases()
jobs = {job.key: job for job in run.plan(env, cfg)}
print("COMPARE-RESULT " + json.dumps(jobs[key].run("plait")))
"""

SQLITE_JOBS = [
    "sqlite/sequential",
    "sqlite/throughput",
    "sqlite/concurrency-100",
    "sqlite/concurrency-1000",
    "sqlite/recovery-restart",
    "sqlite/recovery-peer",
    "sqlite/idle",
]
POSTGRES_JOBS = [
    "postgres/sequential",
    "postgres/throughput",
    "postgres/concurrency-100",
    "postgres/concurrency-1000",
]


def measure(tree: Path, job: str, dsn: str) -> dict[str, Any]:
    """One measurement of ``job`` by ``tree``'s own code."""
    with tempfile.TemporaryDirectory(prefix="plait-compare-") as root:
        env = {"PYTHONPATH": f"{tree / 'src'}:{tree / 'benchmarks'}"}
        proc = subprocess.run(
            [sys.executable, "-c", _DRIVER, job, root, dsn],
            capture_output=True,
            text=True,
            env={**os.environ, **env},
            timeout=1200,
            check=False,
        )
    line = next((x for x in proc.stdout.splitlines() if x.startswith(_MARK)), None)
    if line is None:
        raise SystemExit(f"{job} failed in {tree}:\n{proc.stdout[-2000:]}\n{proc.stderr[-3000:]}")
    result: dict[str, Any] = json.loads(line[len(_MARK) :])
    return result


def report(job: str, old: list[dict[str, Any]], new: list[dict[str, Any]]) -> None:
    for name, first in old[0].items():
        if isinstance(first, bool) or not isinstance(first, int | float) or name == "pid":
            continue
        a = [r[name] for r in old if name in r]
        b = [r[name] for r in new if name in r]
        if not a or not b:
            continue
        ma, mb = statistics.median(a), statistics.median(b)
        change = f"{(mb / ma - 1) * 100:+.1f}%" if ma else "n/a"
        print(
            f"{job:26} {name:20} {ma:10.4g} ({min(a):.4g}-{max(a):.4g})"
            f"  {mb:10.4g} ({min(b):.4g}-{max(b):.4g})  {change}"
        )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("rev", help="the earlier commit")
    parser.add_argument("jobs", nargs="*", help="workloads (default: every SQLite one)")
    parser.add_argument("--reps", type=int, default=5, help="repetitions (default 5)")
    parser.add_argument("--postgres", action="store_true", help="the PostgreSQL ones too")
    args = parser.parse_intermixed_args(argv)
    if args.reps < 1:
        parser.error(f"--reps must be 1 or more, got {args.reps}")
    jobs = args.jobs or SQLITE_JOBS + (POSTGRES_JOBS if args.postgres else [])
    unknown = [j for j in jobs if j not in SQLITE_JOBS + POSTGRES_JOBS]
    if unknown:
        parser.error(f"unknown workload(s): {', '.join(unknown)}")
    sys.path.insert(0, str(ROOT / "src"))
    sys.path.insert(0, str(HERE))
    import run

    with contextlib.ExitStack() as stack:
        earlier = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="plait-rev-")))
        tree = earlier / "tree"
        subprocess.run(
            ["git", "-C", str(ROOT), "worktree", "add", "--detach", str(tree), args.rev],
            check=True,
            capture_output=True,
        )
        stack.callback(
            subprocess.run,
            ["git", "-C", str(ROOT), "worktree", "remove", "--force", str(tree)],
            check=False,
        )
        for path in (tree, ROOT):
            subprocess.run(
                [
                    sys.executable,
                    "-m",
                    "compileall",
                    "-q",
                    str(path / "src"),
                    str(path / "benchmarks"),
                ],
                check=True,
            )
        cluster = stack.enter_context(
            run.postgres_cluster(any(j.startswith("postgres/") for j in jobs))
        )
        dsn = cluster.dsn if cluster is not None else ""
        trees = {"old": tree, "new": ROOT}
        got: dict[str, dict[str, list[dict[str, Any]]]] = {j: {"old": [], "new": []} for j in jobs}
        for rep in range(args.reps):
            for i, job in enumerate(jobs):
                order = ["old", "new"] if (rep + i) % 2 == 0 else ["new", "old"]
                for side in order:
                    got[job][side].append(measure(trees[side], job, dsn))
                print(f"repetition {rep + 1}/{args.reps}: {job} done", file=sys.stderr)
    print(f"{'workload':26} {'figure':20} {args.rev:>10} {'':17}  {'now':>10}")
    for job in jobs:
        report(job, got[job]["old"], got[job]["new"])
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
