"""The crash soak's pause mode: worker processes of one shared database are SIGKILLed and
restarted (as in ``test_crash.py``'s shared-database soak) and, as often, frozen with
SIGSTOP for longer than a lease and woken with SIGCONT later, from a timer thread (on
SQLite the driver may itself wait on a lock a frozen worker holds). The runs go through a
queue of three at a time, a schedule starts a run every second, and every step's result
differs on every execution, so a late write of a stale execution would show.

The side-effect ledger (``pause_app``) records each body's start (worker pid, run, step,
attempt, monotonic and wall time) and end (its result's token). The checks:

* nothing is lost: every run completes, its output is its steps' stored results;
* every late write is fenced: each step's stored result is its last attempt's, the one
  the ledger shows that attempt's execution returned;
* no body starts under a lost lease: no execution starts after a later attempt of its
  step has started elsewhere (a takeover), nor after its run has ended.

``PAUSE_SOAK_FAULTS`` sets the kills and pauses per store (default 16, under a minute),
``PAUSE_SOAK_SECONDS`` a time after which no more are made, ``PAUSE_SOAK_SEED`` the seed of
the random choices; the figures are printed (``-s``). A long run::

    PAUSE_SOAK_FAULTS=1000 .venv/bin/python -m pytest tests/processes/test_pause_soak.py -s
"""

from __future__ import annotations

import asyncio
import collections
import dataclasses
import os
import random
import signal
import threading
import time
from pathlib import Path
from typing import Any

import pytest

import plait
from support import pause_app
from support.ledger import WorkerProcess, read_ledger, ready
from support.polling import eventually

FAULTS = int(os.environ.get("PAUSE_SOAK_FAULTS", "16"))
#: stop faulting after this many seconds, however many faults were made (0: no limit)
SECONDS = float(os.environ.get("PAUSE_SOAK_SECONDS", "0"))
pytestmark = [pytest.mark.slow, pytest.mark.timeout(300 + FAULTS * 3)]

LEASE = 1.0
WORKERS = 3
#: soak runs kept unfinished (the queue lets three run at once)
IN_FLIGHT = 6
#: a pause lasts this many leases
PAUSE_LEASES = (1.5, 2.5)
#: share of faults that are pauses (the rest are kills)
PAUSE_SHARE = 0.6
SOAK_KEYS = [key for key, _function in pause_app.SOAK_STEPS]


@dataclasses.dataclass
class Fault:
    kind: str  # "kill" or "pause"
    pid: int
    at: float  # monotonic
    woken: float | None = None  # monotonic, a pause's SIGCONT


class PauseSoak:
    def __init__(self, engine: plait.Engine, url: str, tmp_path: Path, seed: int) -> None:
        self.engine = engine
        self.url = url
        self.tmp_path = tmp_path
        self.rng = random.Random(seed)
        self.ledger = tmp_path / "ledger.jsonl"
        self.workers: list[WorkerProcess] = []
        self.faults: list[Fault] = []
        self.frozen: dict[int, tuple[Fault, threading.Timer]] = {}
        self.lock = threading.Lock()
        self.runs: list[str] = []
        self.ids = 0

    def start_worker(self, worker_id: str | None = None) -> WorkerProcess:
        if worker_id is None:
            worker_id = f"soak-w{self.ids}"
            self.ids += 1
        worker = WorkerProcess(
            self.url,
            self.ledger,
            self.tmp_path / f"worker-{len(self.workers):04d}.log",
            worker_id=worker_id,
            lease=LEASE,
            concurrency=8,
            app="support.pause_app:app",
        )
        self.workers.append(worker)
        return worker

    async def top_up(self) -> None:
        live = 0
        for status in ("queued", "running"):
            live += len(await self.engine.list_runs(workflow="soak_flow", status=status))
        for _ in range(IN_FLIGHT - live):
            self.runs.append(await self.engine.start("soak_flow", {"n": len(self.runs)}))

    def _wake(self, pid: int) -> None:
        """SIGCONT from the timer thread (or at the end), once."""
        with self.lock:
            entry = self.frozen.pop(pid, None)
            if entry is None:
                return
            fault, _timer = entry
            fault.woken = time.monotonic()
        os.kill(pid, signal.SIGCONT)

    def pause(self, worker: WorkerProcess) -> None:
        seconds = self.rng.uniform(*PAUSE_LEASES) * LEASE
        fault = Fault("pause", worker.pid, time.monotonic())
        os.kill(worker.pid, signal.SIGSTOP)
        timer = threading.Timer(seconds, self._wake, (worker.pid,))
        with self.lock:
            self.frozen[worker.pid] = (fault, timer)
        self.faults.append(fault)
        timer.start()

    def kill(self, live: list[WorkerProcess], worker: WorkerProcess) -> None:
        self.faults.append(Fault("kill", worker.pid, time.monotonic()))
        worker.sigkill()
        same = sum(1 for f in self.faults if f.kind == "kill") % 2 == 0
        live[live.index(worker)] = self.start_worker(worker.worker_id if same else None)

    async def run_faults(self, live: list[WorkerProcess]) -> None:
        stop_at = time.monotonic() + SECONDS if SECONDS else float("inf")
        while len(self.faults) < FAULTS and time.monotonic() < stop_at:
            await self.top_up()
            await asyncio.sleep(self.rng.uniform(0.1, 0.5))
            with self.lock:
                awake = [w for w in live if w.pid not in self.frozen and w.alive()]
            if not awake:
                continue
            victim = self.rng.choice(awake)
            if self.rng.random() < PAUSE_SHARE:
                self.pause(victim)
            else:
                self.kill(live, victim)

    def wake_all(self) -> None:
        with self.lock:
            pending = list(self.frozen.items())
        for pid, (_fault, timer) in pending:
            timer.cancel()
            self._wake(pid)

    async def finish(self, live: list[WorkerProcess]) -> None:
        await self.engine.pause_schedule("every-second")

        async def all_ended() -> bool:
            for w in live:
                if not w.alive():
                    raise AssertionError(f"worker {w.worker_id} exited:\n{w.log_tail()}")
            for status in ("queued", "running"):
                if await self.engine.list_runs(status=status, limit=1):
                    return False
            return True

        await eventually(all_ended, timeout=120, what="every run to end")
        for w in live:
            await eventually(ready(w), timeout=15, what="the worker to be ready")
            w.sigterm()
        for w in live:
            assert w.wait_exit(20) == 0, w.log_tail()

    async def check(self, elapsed: float, title: str) -> None:
        lines = read_ledger(self.ledger)
        starts: dict[tuple[str, str], list[dict[str, Any]]] = collections.defaultdict(list)
        ends: dict[tuple[str, str, int, int], dict[str, Any]] = {}
        for ln in lines:
            if ln["event"] == "start":
                starts[(ln["run_id"], ln["key"])].append(ln)
            elif ln["event"] == "end":
                ends[(ln["run_id"], ln["key"], ln["attempt"], ln["pid"])] = ln
        problems: list[str] = []
        stored_tokens: set[str] = set()
        ticked = await self.engine.list_runs(workflow="ticked", limit=100_000)
        soak = await self.engine.list_runs(workflow="soak_flow", limit=100_000)
        assert len(soak) == len(self.runs)
        ended_at: dict[str, float] = {}
        for run in [*soak, *ticked]:
            ended_at[run.id] = run.updated_at.timestamp()
            keys = SOAK_KEYS if run.workflow == "soak_flow" else ["a"]
            if run.status != "completed":
                problems.append(f"run {run.id} ({run.workflow}) {run.status}: {run.error}")
                continue
            steps = {s.key: s for s in await self.engine.get_steps(run.id) if s.kind == "do"}
            if sorted(run.output) != sorted(keys) or sorted(steps) != sorted(keys):
                problems.append(f"run {run.id}: output {sorted(run.output)} steps {sorted(steps)}")
                continue
            for key in keys:
                step, got = steps[key], run.output[key]
                if got != step.output:
                    problems.append(
                        f"{run.id}/{key}: run output {got} != step result {step.output}"
                    )
                if got["attempt"] != step.attempts:
                    problems.append(
                        f"{run.id}/{key}: the stored result is attempt {got['attempt']}'s, "
                        f"the step's last attempt is {step.attempts}: a late write landed"
                    )
                end = ends.get((run.id, key, got["attempt"], got["pid"]))
                if end is None or end["token"] != got["token"]:
                    problems.append(f"{run.id}/{key}: no execution in the ledger returned {got}")
                stored_tokens.add(got["token"])
        late_starts = 0
        for (run_id, key), found in starts.items():
            for x in found:
                later = [
                    y
                    for y in found
                    if y["attempt"] > x["attempt"]
                    and y["mono"] < x["mono"]
                    and y["pid"] != x["pid"]
                ]
                if later:
                    late_starts += 1
                    problems.append(
                        f"{run_id}/{key}: pid {x['pid']} started attempt {x['attempt']} after "
                        f"pid {later[0]['pid']} had started attempt {later[0]['attempt']}"
                    )
                if run_id in ended_at and x["t"] > ended_at[run_id] + 0.05:
                    problems.append(
                        f"{run_id}/{key}: pid {x['pid']} started a body after the run ended"
                    )
        fenced = [e for e in ends.values() if e["token"] not in stored_tokens]
        after_wake = [e for e in fenced if self._after_a_pause(e)]
        logs = "".join(w.log.read_text(errors="replace") for w in self.workers if w.log.exists())
        refused = logs.count("starting nothing more")
        lost_passes = logs.count("its lease was taken over")
        kills = sum(1 for f in self.faults if f.kind == "kill")
        pauses = len(self.faults) - kills
        executions = sum(len(v) for v in starts.values())
        steps_total = len(starts)
        taken_over = sum(1 for v in starts.values() if len({x["pid"] for x in v}) > 1)
        print(f"\n== {title} ({elapsed:.1f}s) ==")
        print(
            f"faults {len(self.faults)}: kills {kills}, pauses {pauses} "
            f"({PAUSE_LEASES[0]}-{PAUSE_LEASES[1]} leases of {LEASE}s); workers started "
            f"{len(self.workers)}"
        )
        print(
            f"runs: soak {len(soak)} (queue of 3), scheduled ticks {len(ticked)}; steps "
            f"{steps_total}, executions {executions}, steps run by more than one worker "
            f"{taken_over}"
        )
        print(
            f"results not stored (fenced or lost with a killed process) {len(fenced)}, of them "
            f"ended after their worker woke from a pause {len(after_wake)}; bodies refused "
            f"by a woken worker {refused}; passes stopped on a lost lease {lost_passes}; "
            f"bodies started under a lost lease {late_starts}"
        )
        assert not problems, f"{len(problems)} problems:\n" + "\n".join(problems[:40])
        assert kills and pauses, "the soak did not both kill and pause"
        assert taken_over, "no step was taken over: the soak proved nothing"
        assert ticked, "the per-second schedule started nothing"

    def _after_a_pause(self, end: dict[str, Any]) -> bool:
        return any(
            f.kind == "pause" and f.pid == end["pid"] and f.woken and f.at < end["mono"]
            for f in self.faults
        )


@pytest.mark.parametrize("store", ["sqlite", "postgres"])
async def test_kills_and_pauses_lose_nothing_and_start_nothing_lost(
    store: str, tmp_path: Path, request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch
) -> None:
    if store == "sqlite":
        url = f"sqlite:///{tmp_path / 'soak.db'}"
    else:
        url = request.getfixturevalue("pg_cluster").create_database(f"soak{os.getpid()}")
    seed = int(os.environ.get("PAUSE_SOAK_SEED", str(random.randrange(1 << 30))))
    monkeypatch.setenv("PAUSE_SCHEDULE", "1")
    began = time.monotonic()
    async with plait.Engine(pause_app.app, url, workers=False) as engine:
        soak = PauseSoak(engine, url, tmp_path, seed)
        live = [soak.start_worker() for _ in range(WORKERS)]
        try:
            for w in live:
                await eventually(ready(w), timeout=30, what="the workers to start")
            await soak.run_faults(live)
            soak.wake_all()
            await soak.finish(live)
        finally:
            soak.wake_all()
            for w in soak.workers:
                w.stop()
        await soak.check(time.monotonic() - began, f"pause soak on {store}, seed {seed}")
