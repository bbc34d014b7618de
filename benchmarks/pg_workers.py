"""Steps per second on PostgreSQL with 1 and with 4 ``plait worker`` processes.

    .venv/bin/python benchmarks/pg_workers.py            # 5 repetitions, about a minute
    .venv/bin/python benchmarks/pg_workers.py --reps 1 --workers 1,2,4

A throwaway PostgreSQL cluster (``TemporaryCluster(fsync=True)``: fsync and
synchronous_commit on, so every commit waits for the disk) gets a fresh database for each
measurement. ``N`` real ``plait worker pg_workers:app`` processes are started on it and
waited for until each has logged that it is working; then an engine in this process with
``workers=False`` (it runs nothing) starts all the runs at once, ``--runs`` workflows of
``--steps`` trivial sequential steps each, and waits (LISTEN/NOTIFY) until every one has
completed. The figure is steps / seconds from the first start call to the last completion.
Worker counts alternate in order from one repetition to the next, so a noisy phase of a
shared machine does not land on one of them only; the table gives the median and the
min-max spread.

Besides steps per second the table gives, per 1,000 steps, the CPU seconds the worker
processes and the PostgreSQL server spent (from ``/proc``: the postmaster, its live
processes and the backends it reaped); how busy the machine's CPUs were with the workers,
the server and this process together; and the WAL flushes per step
(``pg_stat_wal.wal_sync`` of the cluster, read before and after, with the workers stopped):
below 1 means several steps shared one fsync (group commit across connections and
processes). The server's CPU is read until its backends for the database have exited, so
it includes their disconnection, and "CPUs busy" can read slightly above 100%.

This file is also the app the workers load (``pg_workers:app``), so importing it must not
do anything but define the app.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import platform
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import plait

HERE = Path(__file__).resolve().parent

app = plait.App("pg_workers")


@app.function
async def noop(data: Any) -> Any:
    """A step that does nothing: what is measured is the engine, the store and PostgreSQL."""
    return data


@app.workflow
async def chain(wf: plait.Workflow, data: dict[str, int]) -> int:
    """``data["n"]`` trivial steps one after the other (names repeat: ordinals apply)."""
    for i in range(data["n"]):
        await wf.do("s", noop, i)
    return data["n"]


# -- measuring ----------------------------------------------------------------------------------


def log(message: str) -> None:
    print(f"[pg_workers {time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


def _stat(pid: int) -> list[str] | None:
    """The fields of /proc/PID/stat after the command name (field 3 is index 0)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None


def cpu_seconds(pid: int, *, children: bool = False) -> float:
    """utime + stime of a live process (plus its reaped children's), from /proc."""
    fields = _stat(pid)
    if fields is None:
        return 0.0
    ticks = int(fields[11]) + int(fields[12])
    if children:
        ticks += int(fields[13]) + int(fields[14])
    return ticks / os.sysconf("SC_CLK_TCK")


def server_cpu(postmaster: int) -> float:
    """CPU seconds of the whole server: the postmaster, the backends it has reaped (its
    children's times) and the processes still alive under it (their own and theirs)."""
    total = cpu_seconds(postmaster, children=True)
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            fields = _stat(int(entry.name))
            if fields is not None and int(fields[1]) == postmaster:
                total += cpu_seconds(int(entry.name), children=True)
    return total


def backends_of(postmaster: int, database: str) -> int:
    """Live backends connected to ``database`` (their title names it)."""
    count = 0
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        fields = _stat(int(entry.name))
        if fields is None or int(fields[1]) != postmaster:
            continue
        try:
            title = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if f" {database} " in title:
            count += 1
    return count


def postmaster_pid(cluster: Any) -> int | None:
    try:
        return int((cluster.data_dir / "postmaster.pid").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return None


class Worker:
    """One ``plait worker`` subprocess, its output in a log file."""

    def __init__(self, url: str, log_path: Path, worker_id: str, args: argparse.Namespace) -> None:
        self.worker_id = worker_id
        self.log_path = log_path
        self._log = log_path.open("ab")
        cmd = [
            sys.executable,
            "-m",
            "plait.cli",
            "worker",
            "pg_workers:app",
            "--database",
            url,
            "--worker-id",
            worker_id,
            "--concurrency",
            str(args.concurrency),
            "--lease",
            str(args.lease),
        ]
        env = {**os.environ, "PYTHONUNBUFFERED": "1"}
        self.proc = subprocess.Popen(
            cmd, cwd=HERE, env=env, stdout=self._log, stderr=subprocess.STDOUT
        )

    def tail(self, lines: int = 20) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return ""

    def ready(self) -> bool:
        if self.proc.poll() is not None:
            raise RuntimeError(f"worker {self.worker_id} exited:\n{self.tail()}")
        try:
            return f"worker {self.worker_id}" in self.log_path.read_text(errors="replace")
        except OSError:
            return False

    def stop(self, timeout: float = 30.0) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self._log.close()


async def until(check: Any, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise RuntimeError(f"timed out after {timeout}s waiting for {what}")
        await asyncio.sleep(0.02)


async def wal_syncs(dsn: str) -> int | None:
    import asyncpg

    conn = await asyncpg.connect(dsn)
    try:
        return int(await conn.fetchval("SELECT wal_sync FROM pg_stat_wal"))
    except Exception:  # older servers have no pg_stat_wal
        return None
    finally:
        await conn.close()


async def server_settings(dsn: str) -> dict[str, str]:
    import asyncpg

    conn = await asyncpg.connect(dsn)
    try:
        names = (
            "server_version",
            "fsync",
            "synchronous_commit",
            "wal_sync_method",
            "full_page_writes",
            "shared_buffers",
            "max_connections",
        )
        return {n: str(await conn.fetchval(f"SHOW {n}")) for n in names}
    finally:
        await conn.close()


@dataclass
class Sample:
    workers: int
    seconds: float
    steps: int
    worker_cpu: float
    server_cpu: float | None
    own_cpu: float
    wal_syncs: int | None

    @property
    def steps_per_second(self) -> float:
        return self.steps / self.seconds


@dataclass
class Results:
    samples: dict[int, list[Sample]] = field(default_factory=dict)

    def add(self, sample: Sample) -> None:
        self.samples.setdefault(sample.workers, []).append(sample)


async def measure(
    cluster: Any, n_workers: int, rep: int, args: argparse.Namespace, logs: Path
) -> Sample:
    database = f"bench_w{n_workers}_r{rep}"
    url = cluster.create_database(database)
    postmaster = postmaster_pid(cluster)
    async with plait.Engine(app, url, workers=False, poll_interval=1.0) as engine:
        store = engine.store
        args.pool = (
            f"min_size={getattr(store, 'min_size', '?')} max_size={getattr(store, 'max_size', '?')}"
        )
        # the engine created the schema: the workers find it there and run no DDL
        workers = [
            Worker(url, logs / f"w{n_workers}-r{rep}-{i}.log", f"bench-{n_workers}-{i}", args)
            for i in range(n_workers)
        ]
        try:
            for w in workers:
                await until(w.ready, 60, f"{w.worker_id} to start")
            before_wal = await wal_syncs(cluster.dsn)
            cpu_before = sum(cpu_seconds(w.proc.pid) for w in workers)
            server_before = server_cpu(postmaster) if postmaster else None
            own_before = time.process_time()
            began = time.monotonic()
            ids = await asyncio.gather(
                *(
                    engine.start("chain", {"n": args.steps}, run_id=f"r{i:05d}")
                    for i in range(args.runs)
                )
            )
            runs = await asyncio.gather(*(engine.wait(rid, timeout=args.timeout) for rid in ids))
            seconds = time.monotonic() - began
            worker_cpu = sum(cpu_seconds(w.proc.pid) for w in workers) - cpu_before
            own_cpu = time.process_time() - own_before
            bad = [r for r in runs if r.status != "completed" or r.output != args.steps]
            if bad:
                raise RuntimeError(f"{len(bad)} runs did not complete as expected: {bad[:3]}")
        finally:
            for w in workers:
                w.stop()
    server = None
    if postmaster is not None and server_before is not None:
        # once the database's backends are gone their CPU time is in the postmaster's
        # children's times, and their statistics are flushed
        await until(lambda: backends_of(postmaster, database) == 0, 30, "the backends to exit")
        server = server_cpu(postmaster) - server_before
    after_wal = await wal_syncs(cluster.dsn)
    syncs = None if before_wal is None or after_wal is None else after_wal - before_wal
    return Sample(n_workers, seconds, args.runs * args.steps, worker_cpu, server, own_cpu, syncs)


def spread(values: list[float], fmt: str) -> str:
    mid = statistics.median(values)
    if len(values) == 1:
        return format(mid, fmt)
    return f"{format(mid, fmt)} ({format(min(values), fmt)}-{format(max(values), fmt)})"


def print_table(results: Results, args: argparse.Namespace) -> None:
    base = statistics.median(s.steps_per_second for s in results.samples[min(results.samples)])
    cpus = os.cpu_count() or 1
    head = (
        "| workers | steps/s | seconds | runs/s | CPU s per 1,000 steps: workers "
        "| PostgreSQL | CPUs busy | WAL flushes per step | vs 1 worker |"
    )
    print(head)
    print("|---|---|---|---|---|---|---|---|---|")
    for n in sorted(results.samples):
        ss = results.samples[n]
        rates = [s.steps_per_second for s in ss]
        syncs = [s.wal_syncs / s.steps for s in ss if s.wal_syncs is not None]
        server = [1000 * s.server_cpu / s.steps for s in ss if s.server_cpu is not None]
        busy = [
            (s.worker_cpu + s.server_cpu + s.own_cpu) / (s.seconds * cpus)
            for s in ss
            if s.server_cpu is not None
        ]
        print(
            f"| {n} | {spread(rates, ',.0f')} | {spread([s.seconds for s in ss], '.2f')} "
            f"| {spread([args.runs / s.seconds for s in ss], '.1f')} "
            f"| {spread([1000 * s.worker_cpu / s.steps for s in ss], '.2f')} "
            f"| {spread(server, '.2f') if server else '-'} "
            f"| {spread(busy, '.0%') if busy else '-'} of {cpus} "
            f"| {spread(syncs, '.3f') if syncs else '-'} "
            f"| {statistics.median(rates) / base:.2f}x |"
        )


async def main_async(args: argparse.Namespace, base: Path, logs: Path) -> int:
    from plait.testing.postgres import TemporaryCluster, find_pg_bin

    if find_pg_bin() is None:
        log("no PostgreSQL server binaries (initdb, pg_ctl, postgres) found")
        return 2
    counts = [int(x) for x in args.workers.split(",")]
    load_before = os.getloadavg()
    results = Results()
    with TemporaryCluster(fsync=True, base_dir=str(base)) as cluster:
        settings = await server_settings(cluster.dsn)
        log(f"PostgreSQL {settings['server_version']} in {cluster.directory}")
        for rep in range(args.reps):
            order = counts if rep % 2 == 0 else list(reversed(counts))
            for n in order:
                sample = await measure(cluster, n, rep, args, logs)
                results.add(sample)
                log(
                    f"rep {rep + 1}/{args.reps}, {n} worker(s): {sample.steps_per_second:,.0f} "
                    f"steps/s ({sample.seconds:.2f}s)"
                )
    load_after = os.getloadavg()
    print()
    print(
        f"## plait workers on PostgreSQL: {args.runs} runs x {args.steps} trivial sequential "
        f"steps, started at once ({args.runs * args.steps:,} steps), {args.reps} repetitions"
    )
    print()
    print_table(results, args)
    print()
    print("Settings:")
    print(
        f"* PostgreSQL {settings['server_version']}: TemporaryCluster(fsync=True), fsync="
        f"{settings['fsync']}, synchronous_commit={settings['synchronous_commit']}, "
        f"wal_sync_method={settings['wal_sync_method']}, full_page_writes="
        f"{settings['full_page_writes']}, shared_buffers={settings['shared_buffers']}, "
        f"max_connections={settings['max_connections']}; data directory on a disk under {base}"
    )
    print(
        f"* each worker: `plait worker pg_workers:app --concurrency {args.concurrency} "
        f"--lease {args.lease}`, pool {args.pool} "
        "(the store's defaults) plus one LISTEN connection; a fresh database and fresh "
        "worker processes per measurement, timed once every worker is up"
    )
    print(
        "* runs started by one engine with workers=False in the measuring process "
        "(`asyncio.gather` of engine.start), completion awaited with engine.wait"
    )
    print(
        f"* machine: {os.cpu_count()} CPUs, {platform.python_implementation()} "
        f"{platform.python_version()}, {platform.system()} {platform.release()}; load average "
        f"{load_before[0]:.2f} before, {load_after[0]:.2f} after (the workers, PostgreSQL and "
        "this process share the CPUs)"
    )
    if args.keep:
        print(f"* worker logs in {logs}")
    else:
        shutil.rmtree(logs, ignore_errors=True)
    return 0


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n", 1)[0])
    ap.add_argument("--runs", type=int, default=200, help="runs started at once (200)")
    ap.add_argument("--steps", type=int, default=20, help="sequential steps per run (20)")
    ap.add_argument("--workers", default="1,4", help="worker counts to compare (1,4)")
    ap.add_argument("--reps", type=int, default=5, help="repetitions of each (5)")
    ap.add_argument("--concurrency", type=int, default=64, help="--concurrency per worker (64)")
    ap.add_argument("--lease", type=float, default=2.0, help="--lease per worker (2.0)")
    ap.add_argument("--timeout", type=float, default=300.0, help="seconds a measurement may take")
    ap.add_argument("--tmpdir", help="where the cluster and logs go (a real disk)")
    ap.add_argument("--keep", action="store_true", help="keep the worker logs")
    return ap.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    base = Path(args.tmpdir or tempfile.gettempdir()).resolve()
    logs = Path(tempfile.mkdtemp(prefix="pg-workers-logs-", dir=base))
    return asyncio.run(main_async(args, base, logs))


if __name__ == "__main__":
    raise SystemExit(main())
