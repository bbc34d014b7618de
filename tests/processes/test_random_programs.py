"""Replay is deterministic: random workflow programs give the same end under plait, with
faults injected, as a plain-asyncio reference without plait.

Each seed gives one program (``programs.Generator``): steps (closures and registered
inline, sync and queued functions; some retried after failures, some failing for good),
tiny ``wf.sleep``s, events (sent before the run reaches them, sent once it waits, or never
sent and timed out), ``asyncio.gather`` of branches that reuse step names (with and
without ``return_exceptions``), ``TaskGroup``s, ``create_task``, ``try/except/finally``
and ``async with`` whose exits take steps, loops, child runs, ``wf.now()``/``wf.uuid()``
and suspends, and slow steps (inline and jobs) that the program cancels with
``task.cancel()`` or as the loser of a deadline in ``asyncio.wait`` (a failing
``TaskGroup`` branch cancels its siblings' steps too). Step bodies sleep random real
times, so branches finish in another order on every run. The test compares status,
output or failing site with the reference, and holds the side-effect ledger the step
bodies write against the promise: a step body that succeeded ran to success once per
site, unless a killed process lost its result.

Faults:

* in process (default test): every program pauses and replays on its own sleeps, events,
  retries, queued steps, child runs and suspends; on top of that the engine running the
  runs is closed at random moments and a new one opened on the same database, so other
  passes replay what the first one started;
* ``-m slow`` (``test_programs_survive_sigkill``): a real ``plait worker`` process is
  SIGKILLed at random moments and restarted (same worker id, then a new one in turn).

Knobs (environment variables):

* ``PLAIT_PROGRAMS`` programs in the default test on each store (300 on SQLite, 120 on
  PostgreSQL, whose commits cost more), ``PLAIT_PROGRAMS_KILL`` programs in the kill test
  (40) and ``PLAIT_PROGRAMS_KILLS`` its kills (25); ``PLAIT_PROGRAMS_SEED`` the first seed
  (1): seeds are consecutive from there, so a failure names the one seed to replay;
* ``PLAIT_PROGRAMS_STORES`` which stores the default test runs on (``sqlite,postgres``,
  the latter on the throwaway PostgreSQL cluster);
* a long run: ``PLAIT_PROGRAMS=3000 PLAIT_PROGRAMS_STORES=sqlite,postgres
  .venv/bin/python -m pytest tests/processes/test_random_programs.py -s -k in_process``;
  replay one program: ``PLAIT_PROGRAMS=1 PLAIT_PROGRAMS_SEED=<seed> ...``.

The figures (programs, faults by kind, mismatches) are printed (``-s``).
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import dataclasses
import json
import os
import random
import re
import subprocess
import sys
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import pytest

import plait
from plait.errors import RunStateError
from plait.runtime.steps import MAX_INTERRUPTIONS
from support import programs
from support.ledger import WorkerProcess
from support.paths import TESTS

#: programs in the in-process test, per store
PROGRAMS = {
    store: int(os.environ.get("PLAIT_PROGRAMS", default))
    for store, default in (("sqlite", "300"), ("postgres", "120"))
}
KILL_PROGRAMS = int(os.environ.get("PLAIT_PROGRAMS_KILL", "40"))
FIRST_SEED = int(os.environ.get("PLAIT_PROGRAMS_SEED", "1"))
STORES = os.environ.get("PLAIT_PROGRAMS_STORES", "sqlite,postgres").split(",")
#: programs in flight at once in the in-process test
BATCH = 60
#: longest a batch of programs may go without a step or a run moving before the test
#: fails listing the stuck runs (a loaded machine slows a batch; it does not stop it)
BATCH_PATIENCE = 60.0
POLL = 0.02
#: kills in the slow test; after the last one the worker finishes every run
MAX_KILLS = int(os.environ.get("PLAIT_PROGRAMS_KILLS", "25"))
_ORDINAL = re.compile(r"#\d+$")


@dataclasses.dataclass
class Case:
    """One program and what it must do."""

    seed: int
    program: dict[str, Any]
    expected: programs.Expected

    @property
    def tag(self) -> str:
        return str(self.program["tag"])

    def describe(self) -> str:
        return (
            f"seed {self.seed} (PLAIT_PROGRAMS=1 PLAIT_PROGRAMS_SEED={self.seed})\n"
            f"program: {json.dumps(self.program)}\nexpected: {self.expected.describe()}"
        )


@dataclasses.dataclass
class Figures:
    """What a run of the suite did, printed at the end."""

    programs: int = 0
    faults: collections.Counter[str] = dataclasses.field(default_factory=collections.Counter)
    mismatches: list[str] = dataclasses.field(default_factory=list)

    def print(self, title: str, elapsed: float) -> None:
        print(f"\n== {title}: {self.programs} programs in {elapsed:.1f}s ==")
        print(
            "faults and pauses by kind: "
            + ", ".join(f"{k} {v}" for k, v in sorted(self.faults.items()))
        )
        print(f"mismatches: {len(self.mismatches)}")


def make_cases(seeds: Iterable[int], prefix: str) -> list[Case]:
    cases = []
    for seed in seeds:
        prog = programs.Generator(seed).program(f"{prefix}{seed}")
        broken = programs.check_rules(prog["body"])
        assert not broken, f"seed {seed}: generator broke its rules at {broken}"
        cases.append(Case(seed, prog, programs.reference(prog, seed)))
    return cases


def count_pauses(cases: Iterable[Case], figures: Figures) -> None:
    """The pauses each program forces on itself (each ends a pass; the next replays)."""
    for case in cases:
        for stmt in statements(case.program["body"]).values():
            if stmt["op"] == "cancel":
                figures.faults["cancel: task.cancel() of a slow step"] += 1
            elif stmt["op"] == "race":
                figures.faults["cancel: asyncio.wait loser"] += 1
            elif stmt["op"] == "taskgroup" and any(map(programs.can_fail, stmt["branches"])):
                figures.faults["cancel: task group that may fail"] += 1
        for r in case.expected.reached:
            if not r.definite:
                continue
            op = r.stmt.get("op")
            if op == "sleep":
                figures.faults["pause: sleep"] += 1
            elif op == "event":
                figures.faults[f"pause: event {r.stmt['mode']}"] += 1
            elif op == "suspend":
                figures.faults["pause: suspend and resume"] += 1
            elif op == "child":
                figures.faults["pause: child run"] += 1
            elif op == "do" and r.stmt.get("kind") == "queued":
                figures.faults["pause: queued step"] += 1
            elif op == "do" and int(r.stmt.get("fail", 0)) > 0:
                figures.faults["pause: retry back-off"] += int(r.stmt["fail"])


# -- driving runs --------------------------------------------------------------------------


class Driver:
    """Sends the events the programs wait for and resumes suspended runs until every
    run has ended. It polls the database: nothing here waits on a fixed sleep."""

    def __init__(self, engine: plait.Engine, cases: list[Case]) -> None:
        self.engine = engine
        self.cases = {c.tag: c for c in cases}
        self.sent: set[tuple[str, str]] = set()

    async def send(self, run_id: str, name: str) -> None:
        if (run_id, name) in self.sent:
            return
        self.sent.add((run_id, name))
        # the run may have ended meanwhile (its wait was in a branch given up on)
        with contextlib.suppress(RunStateError):
            await self.engine.send_event(run_id, name, programs.event_payload(name))

    async def send_early(self, case: Case) -> None:
        """Events the reference saw waited for with mode early: sent before the run is
        likely to get there."""
        for r in case.expected.reached:
            if r.stmt.get("op") == "event" and r.stmt["mode"] == "early":
                await self.send(case.tag, f"ev-{r.site}-early")

    async def until_all_ended(self, patience: float) -> None:
        """Drive every run to its end; fail once nothing moved (no run ended, no step
        changed) for ``patience`` seconds."""
        engine = self.engine
        moved_at = time.monotonic()
        last: tuple[object, ...] = ()
        while True:
            seen: list[object] = []
            running = [
                r
                for r in await engine.list_runs(workflow="program", status="running", limit=100_000)
                if r.id in self.cases
            ]
            suspended = [
                r
                for r in await engine.list_runs(
                    workflow="program", status="suspended", limit=100_000
                )
                if r.id in self.cases
            ]
            for run in suspended:
                with contextlib.suppress(RunStateError):
                    await engine.resume(run.id)
            for run in running:
                steps = await engine.get_steps(run.id)
                seen.append((run.id, tuple((s.key, s.status, s.attempts) for s in steps)))
                for step in steps:
                    if step.kind == "event" and step.status == "scheduled":
                        name = step.key.split(":", 1)[1]
                        if not name.endswith("-timeout"):  # those are never sent
                            await self.send(run.id, name)
            if not running and not suspended:
                return
            now = time.monotonic()
            state = (tuple(seen), tuple(sorted(r.id for r in suspended)))
            if state != last:
                moved_at, last = now, state
            elif now - moved_at > patience:
                raise AssertionError(
                    f"runs made no progress for {patience:.0f} s:\n" + await self.describe(running)
                )
            await asyncio.sleep(POLL)

    async def describe(self, runs: list[plait.Run]) -> str:
        parts = []
        for run in runs[:10]:
            steps = await self.engine.get_steps(run.id)
            open_ = [f"{s.key}:{s.status}" for s in steps if s.status != "succeeded"]
            parts.append(f"{run.id} open steps {open_}\n{self.cases[run.id].describe()}")
        return "\n".join(parts)


# -- checking ------------------------------------------------------------------------------


async def _gave_up(engine: plait.Engine, tag: str) -> bool:
    """Did a step of the run (or of a child run) fail as interrupted too often?"""
    runs = [tag, *[child.id for child in await engine.get_children(tag)]]
    for run_id in runs:
        interrupted = collections.Counter(
            a.key for a in await engine.get_history(run_id) if a.status == "interrupted"
        )
        if any(n >= MAX_INTERRUPTIONS for n in interrupted.values()):
            return True
    return False


async def compare(engine: plait.Engine, case: Case) -> list[str]:
    """The run's end against the reference's."""
    run = await engine.get_run(case.tag)
    exp = case.expected
    if run.status != exp.status:
        err = run.error or {}
        return [
            f"status {run.status} (error {err.get('code')} {err.get('message')!r} at step "
            f"{err.get('step')!r}; output {json.dumps(run.output)}), expected {exp.describe()}"
        ]
    if exp.status == "completed":
        if run.output != exp.output:
            return [f"output {json.dumps(run.output)}, expected {json.dumps(exp.output)}"]
        return []
    err = run.error or {}
    site = programs.failure_site(str(err.get("message")))
    name = _ORDINAL.sub("", str(err.get("step")))
    if (site, name) != (exp.fail_site, exp.fail_name):
        return [
            f"failed at site {site} step {err.get('step')!r} ({err.get('message')!r}), "
            f"expected {exp.describe()}"
        ]
    return []


def check_ledger(
    case: Case, lines: list[dict[str, Any]], *, killed: set[int], interrupted_ok: bool
) -> list[str]:
    """Every step body against the promise (compare ``ledger.check_ledger``).

    Per site of the program (a run tag and a path in the program, unique within a run):
    a body that succeeded ran to success exactly once, except that an extra success in a
    process that was killed afterwards is allowed (its result died with it); a site the
    reference reached for sure ran as the reference says (transient failures exactly
    as planned when nothing was killed); a site the reference never reached never ran;
    a registered function's site always got one step key, and a key one site."""
    problems: list[str] = []
    branch_ids = in_branches(case.program["body"])
    tags = {case.tag}
    sites: dict[tuple[str, str], programs.Reached] = {}
    for r in case.expected.reached:
        sites[(r.tag, r.site)] = r
        tags.add(r.tag)
    by_site: dict[tuple[str, str], list[dict[str, Any]]] = collections.defaultdict(list)
    for line in lines:
        if line["run"] in tags or line["run"].startswith(case.tag + "/"):
            by_site[(line["run"], line["site"])].append(line)
    keys_of: dict[tuple[str, str], set[str]] = collections.defaultdict(set)
    sites_of: dict[tuple[str, str], set[str]] = collections.defaultdict(set)
    for (tag, site), group in sorted(by_site.items()):
        where = f"run {tag} site {site}"
        for line in group:
            if line["key"] is not None:
                keys_of[(tag, site)].add(line["key"])
                sites_of[(tag, line["key"])].add(site)
        reached = sites.get((tag, site))
        if reached is None and _static_id(site) not in branch_ids:
            problems.append(f"{where}: ran, but the program never gets there")
            continue
        wins = [ln for ln in group if ln["event"] == "end" and ln["ok"]]
        fails = [ln for ln in group if ln["event"] == "end" and not ln["ok"]]
        starts = [ln for ln in group if ln["event"] == "start"]
        cancels = [ln for ln in group if ln["event"] == "cancelled"]
        live_wins = [ln for ln in wins if ln["pid"] not in killed]
        if len(live_wins) > 1 or (len(wins) > 1 and len(wins) - len(live_wins) < len(wins) - 1):
            problems.append(
                f"{where}: succeeded {len(wins)} times (pids {[ln['pid'] for ln in wins]}, "
                f"keys {[ln['key'] for ln in wins]}, attempts {[ln['attempt'] for ln in wins]})"
            )
        unended = len(starts) - len(wins) - len(fails) - len(cancels)
        if unended and not interrupted_ok and not any(ln["pid"] in killed for ln in starts):
            problems.append(f"{where}: {unended} bodies started and never ended")
        if reached is None or not reached.definite:
            continue
        fail, retries = int(reached.stmt.get("fail", 0)), int(reached.stmt.get("retries", 0))
        planned = retries + 1 if fail < 0 else fail
        if fail < 0 and wins:
            problems.append(f"{where}: fails for good, yet succeeded")
        if fail >= 0 and not wins:
            problems.append(f"{where}: never succeeded")
        if not killed and len(fails) != planned:
            problems.append(f"{where}: failed {len(fails)} times, expected {planned}")
    for (tag, site), keys in keys_of.items():
        if len(keys) > 1:
            problems.append(f"run {tag} site {site} ran under several keys {sorted(keys)}")
    for (tag, key), where in sites_of.items():
        if len(where) > 1:
            problems.append(f"run {tag} key {key!r} ran for several sites {sorted(where)}")
    for (tag, site), r in sites.items():
        if r.definite and r.stmt.get("op") == "do" and (tag, site) not in by_site:
            problems.append(f"run {tag} site {site}: reached for sure, never ran")
    return problems


def _static_id(site: str) -> int:
    """The statement a site comes from: ``n12.0.1:exit`` -> 12."""
    return int(re.match(r"n(\d+)", site).group(1))  # type: ignore[union-attr]


def statements(stmts: programs.Block) -> dict[int, programs.Stmt]:
    """Every statement of a program by its id."""
    found: dict[int, programs.Stmt] = {}
    for s in stmts:
        found[int(s["id"])] = s
        for key in ("body", "handler", "finally", "between"):
            if s.get(key):
                found.update(statements(s[key]))
        for b in s.get("branches", []):
            found.update(statements(b))
    return found


def in_branches(stmts: programs.Block, inside: bool = False) -> set[int]:
    """Statements inside a concurrent branch (at any depth, child bodies included): a
    branch may be given up on while it runs, so how far it gets depends on timing and
    the reference may not have reached these sites at all."""
    found: set[int] = set()
    for s in stmts:
        if inside:
            found.add(int(s["id"]))
        for key in ("body", "handler", "finally", "between"):
            if s.get(key):
                found |= in_branches(s[key], inside)
        for b in s.get("branches", []):
            found |= in_branches(b, True)
    return found


async def check_all(
    engine: plait.Engine,
    cases: list[Case],
    figures: Figures,
    *,
    killed: set[int],
    interrupted_ok: bool,
) -> None:
    lines = programs.ledger_lines()
    tags = {case.tag for case in cases}
    figures.faults["step bodies that got CancelledError"] += sum(
        1 for ln in lines if ln["event"] == "cancelled" and ln["run"].split("/")[0] in tags
    )
    # the code did not change: a check before a deploy of the same code finds nothing
    # to say about any of them, whatever faults they went through
    checked = {r.run_id: r for r in await engine.check(include_ended=len(cases))}
    for case in cases:
        figures.programs += 1
        result = checked.get(case.tag)
        if result is not None and not result.ok:
            figures.mismatches.append(
                f"{case.describe()}\nengine.check on the same code: {result.reason}"
            )
        if await _gave_up(engine, case.tag):
            # the faults hit one step MAX_INTERRUPTIONS times: plait fails it by design
            # (STEP_INTERRUPTED), which the reference does not model
            figures.faults["step given up after MAX_INTERRUPTIONS interruptions"] += 1
            continue
        problems = await compare(engine, case)
        problems += check_ledger(case, lines, killed=killed, interrupted_ok=interrupted_ok)
        if problems:
            figures.mismatches.append(case.describe() + "\n" + "\n".join(problems))


# -- in process: engines closed and reopened mid-run -----------------------------------------


async def run_batch(url: str, cases: list[Case], rng: random.Random, figures: Figures) -> None:
    """Run ``cases`` on one database; close the engine that runs them at random moments
    and open a new one, so that every pass in flight is cut off and replayed elsewhere."""
    programs.MEMORY_LEDGER.clear()
    observer = plait.Engine(programs.app, url, workers=False, poll_interval=0.05)
    await observer.open()
    holder = {"engine": plait.Engine(programs.app, url, poll_interval=0.05)}
    await holder["engine"].open()
    driver = Driver(observer, cases)
    done = asyncio.Event()

    async def restarts() -> None:
        while not done.is_set():
            # the fault lands at a random moment (this chooses it; it waits for nothing)
            try:
                await asyncio.wait_for(done.wait(), rng.uniform(0.03, 0.35))
                return
            except TimeoutError:
                pass
            in_body = _open_bodies(programs.ledger_lines())
            await holder["engine"].close()
            figures.faults["engine closed and reopened"] += 1
            if in_body:
                figures.faults["engine closed with a step body running"] += 1
            holder["engine"] = plait.Engine(programs.app, url, poll_interval=0.05)
            await holder["engine"].open()
            await _some_progress(done)

    faults = asyncio.create_task(restarts())
    try:
        for case in cases:
            await observer.start("program", case.program, run_id=case.tag)
            await driver.send_early(case)
        await driver.until_all_ended(BATCH_PATIENCE)
    finally:
        done.set()
        await faults
        await holder["engine"].close()
    try:
        await check_all(observer, cases, figures, killed=set(), interrupted_ok=True)
    finally:
        await observer.close()


async def _some_progress(done: asyncio.Event) -> None:
    """Wait (polling, with a deadline) until the engine just opened has done some work (a
    step body started or ended), so that faults never come faster than a loaded machine
    lets a pass get anywhere: cut off every time, the runs would never end. Runs that
    only sleep or wait make no such line: the deadline lets the next fault come anyway."""
    seen = len(programs.MEMORY_LEDGER)
    deadline = time.monotonic() + 2.0
    while len(programs.MEMORY_LEDGER) == seen and time.monotonic() < deadline:
        if done.is_set():
            return
        await asyncio.sleep(POLL)


def _open_bodies(lines: list[dict[str, Any]], pid: int | None = None) -> int:
    """Step bodies started and not ended (in ``pid``, or anywhere)."""
    open_: collections.Counter[tuple[str, str]] = collections.Counter()
    for ln in lines:
        if pid is not None and ln["pid"] != pid:
            continue
        open_[(ln["run"], ln["site"])] += 1 if ln["event"] == "start" else -1
    return sum(1 for v in open_.values() if v > 0)


def _report(figures: Figures, title: str, began: float) -> None:
    figures.print(title, time.monotonic() - began)
    if figures.mismatches:
        shown = "\n\n".join(figures.mismatches[:5])
        raise AssertionError(f"{len(figures.mismatches)} programs did not match:\n\n{shown}")


@pytest.mark.parametrize("store", STORES)
@pytest.mark.timeout(60 + max(PROGRAMS.values()) * 0.5)  # a long run takes its time
async def test_random_programs_in_process(
    store: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    """Hundreds of programs, with engine restarts at random moments, match the reference."""
    if store == "sqlite":
        url = f"sqlite:///{tmp_path / 'programs.db'}"
    else:
        url = request.getfixturevalue("pg_cluster").create_database(f"programs{os.getpid()}")
    began = time.monotonic()
    figures = Figures()
    rng = random.Random(FIRST_SEED)
    seeds = range(FIRST_SEED, FIRST_SEED + PROGRAMS[store])
    cases = await asyncio.to_thread(make_cases, seeds, "p")
    count_pauses(cases, figures)
    for at in range(0, len(cases), BATCH):
        await run_batch(url, cases[at : at + BATCH], rng, figures)
    _report(
        figures,
        f"random programs in process ({store}, seeds {seeds.start}-{seeds.stop - 1})",
        began,
    )


# -- SIGKILL of a real worker ------------------------------------------------------------------


class ProgramWorker(WorkerProcess):
    """A ``plait worker support.programs:app`` process writing the file ledger; killed at will.
    (``WorkerProcess`` starts ``crash_app``; only the command differs.)"""

    def __init__(self, database: str, ledger: Path, log: Path, *, worker_id: str) -> None:
        self.worker_id = worker_id
        self.log = log
        self.killed_at = self.signalled_at = self.exited_at = None
        env = {**os.environ, "PROGRAMS_LEDGER": str(ledger), "PYTHONUNBUFFERED": "1"}
        cmd = [sys.executable, "-m", "plait.cli", "worker", "support.programs:app", "--database",
               database, "--lease", "1.0", "--worker-id", worker_id]  # fmt: skip
        self._log_file = log.open("ab")
        self.started_at = time.time()
        self.proc = subprocess.Popen(
            cmd, cwd=TESTS, env=env, stdout=self._log_file, stderr=subprocess.STDOUT
        )


async def _first_work(worker: ProgramWorker, driving: asyncio.Task[None]) -> None:
    """Wait (polling, with a deadline) until ``worker`` has ended a step body (not a
    slow one, which only waits to be cancelled), so that kills land in work rather than
    in start-up and the runs get somewhere between kills; give up when every run ended or the
    remaining runs have nothing for it to do for a while (they sleep or wait)."""
    deadline = time.monotonic() + 5.0
    while time.monotonic() < deadline and not driving.done():
        if not worker.alive():
            raise AssertionError(f"worker {worker.worker_id} exited:\n{worker.log_tail()}")
        # a body that ended: a slow step's (a replay starts it again at once, and it
        # only waits to be cancelled) is no progress
        lines = programs.ledger_lines()
        if any(
            ln["pid"] == worker.pid and ln["event"] == "end" and not ln.get("slow") for ln in lines
        ):
            return
        await asyncio.sleep(POLL)


@pytest.mark.slow
@pytest.mark.timeout(600)
async def test_programs_survive_sigkill(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A few dozen programs on a worker process that is SIGKILLed at random moments."""
    ledger = tmp_path / "ledger.jsonl"
    monkeypatch.setenv("PROGRAMS_LEDGER", str(ledger))
    url = f"sqlite:///{tmp_path / 'kill.db'}"
    began = time.monotonic()
    figures = Figures()
    rng = random.Random(FIRST_SEED)
    seeds = range(FIRST_SEED, FIRST_SEED + KILL_PROGRAMS)
    cases = await asyncio.to_thread(make_cases, seeds, "k")
    count_pauses(cases, figures)
    killed: set[int] = set()
    workers: list[ProgramWorker] = []
    async with plait.Engine(programs.app, url, workers=False, poll_interval=0.05) as engine:
        driver = Driver(engine, cases)
        for case in cases:
            await engine.start("program", case.program, run_id=case.tag)
            await driver.send_early(case)
        driving = asyncio.create_task(driver.until_all_ended(300))
        try:
            worker = ProgramWorker(url, ledger, tmp_path / "w0.log", worker_id="k0")
            workers.append(worker)
            while not driving.done() and len(killed) < MAX_KILLS:
                await _first_work(worker, driving)
                # the kill lands at a random moment (this chooses it; it waits for nothing)
                await asyncio.wait([driving], timeout=rng.uniform(0.02, 0.4))
                if driving.done():
                    break
                worker.sigkill()
                killed.add(worker.pid)
                figures.faults["SIGKILL"] += 1
                if _open_bodies(programs.ledger_lines(), worker.pid):
                    figures.faults["SIGKILL with a step body running"] += 1
                same = len(killed) % 2 == 1
                worker_id = worker.worker_id if same else f"k{len(killed)}"
                figures.faults[f"restart with {'the same' if same else 'a new'} worker id"] += 1
                worker = ProgramWorker(
                    url, ledger, tmp_path / f"w{len(killed)}.log", worker_id=worker_id
                )
                workers.append(worker)
            await driving
        finally:
            driving.cancel()
            for w in workers:
                w.stop()
        await check_all(engine, cases, figures, killed=killed, interrupted_ok=False)
    _report(figures, f"random programs under SIGKILL (seeds {seeds.start}-{seeds.stop - 1})", began)
