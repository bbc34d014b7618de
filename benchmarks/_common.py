"""Helpers shared by the benchmark driver and the per-contender workload scripts.

Standard library only: the DBOS workloads run under a separate interpreter (its own
virtual environment, so DBOS and its dependencies never mix with plait's), and they import
this file from the same folder. Every workload script talks to the driver the same way:
its parameters arrive as one JSON argument, and it prints one ``BENCH-RESULT {json}`` line
(or ``BENCH-READY {json}`` when the driver has to act while it is still running). Anything
else on stdout or stderr is log noise the driver keeps only for error reports.
"""

from __future__ import annotations

import json
import os
import sqlite3
import sys
import time
from collections.abc import Awaitable, Callable
from typing import Any

RESULT = "BENCH-RESULT "
READY = "BENCH-READY "

#: One step body of the recovery workload sleeps this long, so that a kill lands mid-run.
RECOVERY_STEP_SECONDS = 0.05
RECOVERY_STEPS = 20


async def back_to_back(
    seconds: float, steps: int, run_once: Callable[[], Awaitable[Any]]
) -> dict[str, Any]:
    """Workload 2, the same loop for every contender: one run after another (each awaited
    to its output) for ``seconds``, turned into rates."""
    done = 0
    t0 = time.perf_counter()
    while time.perf_counter() - t0 < seconds:
        await run_once()
        done += 1
    return _rates(done, steps, time.perf_counter() - t0)


def back_to_back_sync(seconds: float, steps: int, run_once: Callable[[], Any]) -> dict[str, Any]:
    """``back_to_back`` for a contender's synchronous API (no event loop)."""
    done = 0
    t0 = time.perf_counter()
    while time.perf_counter() - t0 < seconds:
        run_once()
        done += 1
    return _rates(done, steps, time.perf_counter() - t0)


def _rates(done: int, steps: int, elapsed: float) -> dict[str, Any]:
    return {
        "workflows_per_s": done / elapsed,
        "steps_per_s": done * steps / elapsed,
        "workflows": done,
    }


def params() -> dict[str, Any]:
    """The JSON parameters the driver passed as the single command-line argument."""
    if len(sys.argv) != 2:
        raise SystemExit(f"usage: {sys.argv[0]} '<json parameters>'")
    value = json.loads(sys.argv[1])
    if not isinstance(value, dict):
        raise SystemExit("parameters must be a JSON object")
    return value


def emit(result: dict[str, Any]) -> None:
    """Hand the result to the driver (the only line it parses besides READY)."""
    sys.stdout.write(RESULT + json.dumps(result) + "\n")
    sys.stdout.flush()


def ready(info: dict[str, Any]) -> None:
    """Tell the driver the workload reached the point where it measures from outside."""
    sys.stdout.write(READY + json.dumps(info) + "\n")
    sys.stdout.flush()


def wait_for_stdin_line() -> str:
    """Block until the driver writes a line (or closes the pipe): its "stop" signal."""
    return sys.stdin.readline()


def prepare_sqlite_wal(path: str) -> None:
    """Create ``path`` in WAL mode before a peer opens it.

    ``journal_mode=WAL`` is stored in the database file itself, so a library that never
    sets a journal mode (DBOS does not) still runs in WAL on this file. ``synchronous``
    is a per-connection setting whose compiled-in default is FULL; :func:`sqlite_settings`
    reads back what a connection actually gets.
    """
    conn = sqlite3.connect(path)
    try:
        mode = conn.execute("PRAGMA journal_mode = WAL").fetchone()[0]
        if str(mode).lower() != "wal":
            raise RuntimeError(f"could not switch {path} to WAL (got {mode})")
    finally:
        conn.close()


_SYNC_NAMES = {0: "OFF", 1: "NORMAL", 2: "FULL", 3: "EXTRA"}


def sqlite_settings(path: str) -> dict[str, str]:
    """journal_mode stored in the file, and the synchronous level a fresh connection gets."""
    conn = sqlite3.connect(path)
    try:
        mode = str(conn.execute("PRAGMA journal_mode").fetchone()[0]).upper()
        sync = int(conn.execute("PRAGMA synchronous").fetchone()[0])
    finally:
        conn.close()
    return {"journal_mode": mode, "synchronous": _SYNC_NAMES.get(sync, str(sync))}


def sync_name(level: int | str) -> str:
    """``PRAGMA synchronous`` answers with a number; the docs speak in names."""
    try:
        return _SYNC_NAMES.get(int(level), str(level))
    except (TypeError, ValueError):
        return str(level).upper()


class SideFile:
    """Append-only record of step bodies starting and ending, readable by the driver.

    The recovery workload needs to know, from outside the killed process, when a step
    ran and in which process. Lines are ``start|end STEP PID UNIXTIME``; each write is
    flushed so the driver sees it at once (no fsync: the reader is on the same machine
    and the page cache is shared, and a kill -9 does not lose written pages).
    """

    def __init__(self, path: str) -> None:
        self.path = path

    def mark(self, what: str, step: int) -> None:
        line = f"{what} {step} {os.getpid()} {time.time():.6f}\n"
        fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            os.write(fd, line.encode())
        finally:
            os.close(fd)


def read_side_file(path: str) -> list[tuple[str, int, int, float]]:
    """Parse a :class:`SideFile`; a torn last line (being written) is skipped."""
    try:
        with open(path, encoding="utf-8") as fh:
            text = fh.read()
    except FileNotFoundError:
        return []
    out = []
    for line in text.splitlines():
        parts = line.split()
        if len(parts) != 4:
            continue
        try:
            out.append((parts[0], int(parts[1]), int(parts[2]), float(parts[3])))
        except ValueError:
            continue
    return out


def poll_until(
    predicate: Callable[[], Any], *, timeout: float, interval: float = 0.002, what: str = ""
) -> Any:
    """Return the first truthy value of ``predicate()``, checking every ``interval`` seconds.

    Used where the thing awaited lives in another process and offers no event to wait on
    (a line in a file, a row in a database). The deadline makes a hung contender fail the
    benchmark instead of stalling it.
    """
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() >= deadline:
            raise TimeoutError(f"timed out after {timeout}s waiting for {what or predicate!r}")
        time.sleep(interval)


def proc_stats(pid: int) -> dict[str, float]:
    """CPU seconds used so far, resident memory and thread count of a live process (Linux)."""
    with open(f"/proc/{pid}/stat", encoding="ascii") as fh:
        stat = fh.read()
    # The command name (field 2) may hold spaces; the fields after its ")" are fixed.
    fields = stat[stat.rindex(")") + 2 :].split()
    ticks = os.sysconf("SC_CLK_TCK")
    cpu = (int(fields[11]) + int(fields[12])) / ticks  # utime + stime
    rss_kib = 0.0
    threads = 0.0
    with open(f"/proc/{pid}/status", encoding="ascii") as fh:
        for line in fh:
            if line.startswith("VmRSS:"):
                rss_kib = float(line.split()[1])
            elif line.startswith("Threads:"):
                threads = float(line.split()[1])
    return {"cpu_seconds": cpu, "rss_mib": rss_kib / 1024.0, "threads": threads}


def self_rss_mib() -> float:
    """Resident memory of this process, for a baseline before the workload loads it."""
    return proc_stats(os.getpid())["rss_mib"]
