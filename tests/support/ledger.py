"""Helpers for the crash and multi-worker suites: worker processes and the side-effect ledger.

The ledger (written by the step bodies in ``crash_app``) is the independent witness: it
records what really ran, in which process, with which attempt number. ``check_ledger``
holds it against what the database says happened and returns every broken promise as a
readable line, so a failing test lists all problems at once instead of the first one.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import signal
import subprocess
import sys
import time
from collections import defaultdict
from collections.abc import Awaitable, Callable, Iterable
from pathlib import Path
from typing import Any

import plait
from support.paths import TESTS

# -- worker processes -------------------------------------------------------------------------


class WorkerProcess:
    """One ``plait worker APP`` subprocess (``support.crash_app:app`` unless told) with its
    stderr in a log file.

    Process control is synchronous on purpose: a SIGKILL must land at the moment the test
    chose, not when an event loop gets round to it.
    """

    def __init__(
        self,
        database: str,
        ledger: Path,
        log: Path,
        *,
        worker_id: str,
        lease: float = 1.0,
        drain: float = 10.0,
        concurrency: int = 64,
        app: str = "support.crash_app:app",
        extra: Iterable[str] = (),
    ) -> None:
        self.worker_id = worker_id
        self.log = log
        self.killed_at: float | None = None
        self.signalled_at: float | None = None
        self.exited_at: float | None = None
        # PLAIT_DEBUG: a worker that dies leaves its traceback in its log
        env = {
            **os.environ,
            "CRASH_LEDGER": str(ledger),
            "PYTHONUNBUFFERED": "1",
            "PLAIT_DEBUG": "1",
        }
        cmd = [
            sys.executable,
            "-m",
            "plait.cli",
            "worker",
            app,
            "--database",
            database,
            "--lease",
            str(lease),
            "--worker-id",
            worker_id,
            "--drain",
            str(drain),
            "--concurrency",
            str(concurrency),
            *extra,
        ]
        self._log_file = log.open("ab")
        self.started_at = time.time()
        self.proc = subprocess.Popen(
            cmd, cwd=TESTS, env=env, stdout=self._log_file, stderr=subprocess.STDOUT
        )

    @property
    def pid(self) -> int:
        return self.proc.pid

    def alive(self) -> bool:
        return self.proc.poll() is None

    def ready(self) -> bool:
        """True once start-up is over: the worker logged its id (its signal handlers are in
        place from then on, so a SIGTERM is a clean stop rather than a default death)."""
        with contextlib.suppress(OSError):
            return self.worker_id in self.log.read_text(errors="replace")
        return False

    def sigkill(self) -> float:
        """SIGKILL now; returns the wall-clock time of the kill once the process is gone."""
        self.killed_at = time.time()
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait()
        self.exited_at = time.time()
        self._log_file.close()
        return self.killed_at

    def sigterm(self) -> None:
        self.signalled_at = time.time()
        self.proc.send_signal(signal.SIGTERM)

    def wait_exit(self, timeout: float) -> int | None:
        """The exit code, or None if the process is still running after ``timeout``."""
        try:
            code = self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            return None
        self.exited_at = time.time()
        self._log_file.close()
        return code

    def stop(self) -> None:
        """Make sure the process is gone (for ``finally`` blocks)."""
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
            if self.exited_at is None:
                self.exited_at = time.time()
        self._log_file.close()

    def log_tail(self, lines: int = 30) -> str:
        with contextlib.suppress(OSError):
            return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:])
        return ""


# -- the ledger -------------------------------------------------------------------------------


def append_line(path: str, line: dict[str, Any]) -> None:
    """Append one ledger line durably: one ``os.write`` on an ``O_APPEND`` descriptor, so
    lines of concurrent processes never interleave, then ``fsync``, so a line that was
    written survives the SIGKILL that follows it. A SIGKILL during the write may cut it
    short (the kernel stops between pages): the readers drop such a torn line
    (``parse_lines``), as if the kill had come just before it."""
    data = (json.dumps(line, separators=(",", ":")) + "\n").encode()
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, data)
        os.fsync(fd)
    finally:
        os.close(fd)


def read_ledger(path: Path) -> list[dict[str, Any]]:
    """Every whole line of the ledger, a line a killed writer left torn dropped."""
    if not path.exists():
        return []
    return parse_lines(path.read_bytes())


#: how every ledger line begins (``append_line`` writes ``event`` first)
_LINE_START = b'{"event":'


def parse_lines(text: bytes) -> list[dict[str, Any]]:
    """The lines of ``text``, less the torn ones: a writer killed mid-write leaves part
    of its line with no newline, and the next process's line goes on right after it."""
    lines: list[dict[str, Any]] = []
    for line in text.splitlines():
        start = line.rfind(_LINE_START)
        if start < 0:
            continue  # all torn
        try:
            lines.append(json.loads(line[start:]))
        except json.JSONDecodeError:
            continue  # a torn last line, with no line after it
    return lines


@dataclasses.dataclass
class Attempt:
    """One execution of a step body as the ledger saw it."""

    run_id: str
    key: str
    attempt: int
    pid: int
    invocation_id: str
    start: float
    end: float | None = None
    ok: bool | None = None
    #: set when the step's process died before the body ended
    died_at: float | None = None

    @property
    def finished(self) -> bool:
        return self.end is not None

    @property
    def until(self) -> float:
        """When this execution stopped touching the world: its end, or its process's death."""
        if self.end is not None:
            return self.end
        return self.died_at if self.died_at is not None else float("inf")


def attempts_by_step(lines: Iterable[dict[str, Any]]) -> dict[tuple[str, str], list[Attempt]]:
    """Pair start and end lines into executions, grouped by (run_id, key), oldest first."""
    found: dict[tuple[str, str, int, int], Attempt] = {}
    orphans: list[dict[str, Any]] = []
    for line in lines:
        ident = (line["run_id"], line["key"], line["pid"], line["attempt"])
        if line["event"] == "start":
            if ident in found:
                orphans.append(line)  # the same process started one attempt twice
                continue
            found[ident] = Attempt(
                line["run_id"],
                line["key"],
                line["attempt"],
                line["pid"],
                line["invocation_id"],
                line["t"],
            )
        else:
            a = found.get(ident)
            if a is None or a.end is not None:
                orphans.append(line)
                continue
            a.end, a.ok = line["t"], bool(line.get("ok", True))
    grouped: dict[tuple[str, str], list[Attempt]] = defaultdict(list)
    for a in found.values():
        grouped[(a.run_id, a.key)].append(a)
    for items in grouped.values():
        items.sort(key=lambda a: a.start)
    if orphans:
        grouped[("?", "?")] = [
            Attempt(o["run_id"], o["key"], o["attempt"], o["pid"], "orphan", o["t"])
            for o in orphans
        ]
    return grouped


@dataclasses.dataclass
class LedgerReport:
    steps: int = 0
    executions: int = 0
    #: executions cut short by a dead (or drained) process, then run again
    interrupted: int = 0
    #: executions that ended but whose success the database never recorded (process died
    #: between the body's end and the commit), so the step ran again: allowed, counted
    lost_results: int = 0
    #: failures on purpose (the flaky steps' first attempts)
    planned_failures: int = 0
    #: attempts the database recorded whose body never began: the process died between
    #: committing the attempt's start and the body's first line (allowed after a kill)
    unstarted: int = 0
    problems: list[str] = dataclasses.field(default_factory=list)


async def check_ledger(
    engine: plait.Engine,
    lines: list[dict[str, Any]],
    deaths: dict[int, float],
    *,
    flaky_keys: Iterable[str] = (),
) -> LedgerReport:
    """Hold the ledger against the database.

    ``deaths`` maps the pid of every worker that was killed or stopped to the time it went
    away; an execution without an "end" line is only acceptable in such a process. Checks,
    for every (run, key) in the ledger:

    * the database has the step, succeeded, and its history has exactly one succeeded
      attempt, which the ledger saw end (ok) exactly once;
    * nothing started after the succeeded attempt (no succeeded step ran again);
    * every execution carries the step's invocation id, attempt numbers strictly increase
      in time order and no attempt number was started twice;
    * an execution without an end belongs to a dead process and was followed by a higher
      attempt (same invocation id);
    * no two executions overlap in time (an unfinished one lasts until its process died).
    """
    report = LedgerReport()
    flaky = set(flaky_keys)
    grouped = attempts_by_step(lines)
    orphans = grouped.pop(("?", "?"), [])
    for o in orphans:
        report.problems.append(
            f"ledger line without a matching start, or a start repeated: run {o.run_id} "
            f"key {o.key!r} attempt {o.attempt} pid {o.pid}"
        )
    steps_of: dict[str, dict[str, plait.Step]] = {}
    history_of: dict[str, list[plait.StepAttempt]] = {}
    for run_id, _key in grouped:
        if run_id not in steps_of:
            steps_of[run_id] = {s.key: s for s in await engine.get_steps(run_id)}
            history_of[run_id] = await engine.get_history(run_id)
    for (run_id, key), execs in sorted(grouped.items()):
        report.steps += 1
        report.executions += len(execs)
        where = f"run {run_id} step {key!r}"
        for a in execs:
            if a.end is None and a.pid in deaths:
                a.died_at = deaths[a.pid]
        step = steps_of[run_id].get(key)
        if step is None:
            report.problems.append(f"{where}: in the ledger but not in the database")
            continue
        history = [h for h in history_of[run_id] if h.key == key]
        won = [h.attempt for h in history if h.status == "succeeded"]
        if step.status != "succeeded" or len(won) != 1:
            report.problems.append(
                f"{where}: database says status {step.status}, succeeded attempts {won}"
            )
            continue
        winner = won[0]
        recorded = {h.attempt: h.status for h in history}
        ran = {a.attempt for a in execs}
        unstarted = sorted(n for n in recorded if n < winner and n not in ran)
        report.unstarted += len(unstarted)
        if unstarted and not deaths:
            report.problems.append(
                f"{where}: attempts {unstarted} are recorded but never ran, and no process "
                "was killed or stopped"
            )
        for a in execs:
            if a.invocation_id != step.invocation_id:
                report.problems.append(
                    f"{where}: attempt {a.attempt} ran with invocation id {a.invocation_id}, "
                    f"the step's is {step.invocation_id}"
                )
            if a.attempt not in recorded:
                report.problems.append(
                    f"{where}: attempt {a.attempt} ran (pid {a.pid}) but the database has no "
                    f"such attempt (it has {sorted(recorded)})"
                )
        numbers = [a.attempt for a in execs]
        if numbers != sorted(numbers) or len(set(numbers)) != len(numbers):
            report.problems.append(
                f"{where}: attempt numbers in start order are {numbers} (pids "
                f"{[a.pid for a in execs]}): an attempt number was reused or went backwards"
            )
        ends = [a for a in execs if a.attempt == winner and a.ok]
        if len(ends) != 1:
            report.problems.append(
                f"{where}: the succeeded attempt {winner} ended {len(ends)} times in the ledger"
            )
        later = [a for a in execs if a.attempt > winner]
        if later:
            report.problems.append(
                f"{where}: succeeded on attempt {winner}, then ran again: "
                + ", ".join(f"attempt {a.attempt} (pid {a.pid})" for a in later)
            )
        for a in execs:
            if a.attempt >= winner:
                continue
            if a.end is None:
                report.interrupted += 1
                if a.pid not in deaths:
                    report.problems.append(
                        f"{where}: attempt {a.attempt} (pid {a.pid}) never ended but its "
                        "process was neither killed nor stopped"
                    )
                if recorded.get(a.attempt) in ("running", "succeeded"):
                    report.problems.append(
                        f"{where}: interrupted attempt {a.attempt} is recorded as "
                        f"{recorded.get(a.attempt)}"
                    )
            elif a.ok is False:
                report.planned_failures += 1
                if key not in flaky or a.attempt != 1:
                    report.problems.append(
                        f"{where}: attempt {a.attempt} failed but only the first attempt of a "
                        "flaky step fails"
                    )
            else:
                report.lost_results += 1
                if a.pid not in deaths:
                    report.problems.append(
                        f"{where}: attempt {a.attempt} (pid {a.pid}) succeeded in a live "
                        f"process, yet the step ran again (succeeded attempt {winner})"
                    )
        # an execution must not start before every earlier one stopped (not only the last)
        busy_until, busy = float("-inf"), None
        for a in sorted(execs, key=lambda a: a.start):
            if busy is not None and a.start < busy_until:
                report.problems.append(
                    f"{where}: attempt {a.attempt} (pid {a.pid}) started at {a.start:.3f} "
                    f"while attempt {busy.attempt} (pid {busy.pid}) was still running (until "
                    f"{busy_until:.3f}): two executions overlapped"
                )
            if a.until > busy_until:
                busy_until, busy = a.until, a
    return report


def summarize(values: list[float]) -> str:
    """min / median / max in seconds, for the printed counts."""
    if not values:
        return "n/a"
    ordered = sorted(values)
    mid = ordered[len(ordered) // 2]
    return f"min {ordered[0]:.2f}s  median {mid:.2f}s  max {ordered[-1]:.2f}s  (n={len(values)})"


def ready(worker: WorkerProcess) -> Callable[[], Awaitable[bool]]:
    """A check for ``eventually``: the worker is up, or the test fails with its log."""

    async def check() -> bool:
        if not worker.alive():
            raise AssertionError(f"worker {worker.worker_id} exited:\n{worker.log_tail()}")
        return worker.ready()

    return check


class LedgerTail:
    """Reads the ledger incrementally, so that polling it stays cheap as it grows."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.offset = 0
        self.lines: list[dict[str, Any]] = []

    def refresh(self) -> list[dict[str, Any]]:
        if not self.path.exists():
            return self.lines
        with self.path.open("rb") as f:
            f.seek(self.offset)
            chunk = f.read()
        whole = chunk[: chunk.rfind(b"\n") + 1]  # a line being written is read next time
        self.offset += len(whole)
        self.lines.extend(parse_lines(whole))
        return self.lines

    def started(self) -> int:
        """How many step bodies have started, in every process."""
        return sum(1 for ln in self.refresh() if ln["event"] == "start")

    def started_by(self, pid: int) -> int:
        """How many step bodies ``pid`` has started."""
        return sum(1 for ln in self.refresh() if ln["pid"] == pid and ln["event"] == "start")

    def open_steps(self, pid: int) -> list[tuple[str, str, int]]:
        """Step bodies that started in ``pid`` and have not ended (yet)."""
        open_: dict[tuple[str, str, int], None] = {}
        for line in self.refresh():
            if line["pid"] != pid:
                continue
            ident = (line["run_id"], line["key"], line["attempt"])
            if line["event"] == "start":
                open_[ident] = None
            else:
                open_.pop(ident, None)
        return list(open_)
