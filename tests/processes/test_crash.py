"""Crash suite: real ``plait worker`` processes killed at random points, checked by a ledger.

The promises under test (API.md, "Durability promises"): a succeeded step never runs
again whatever crashes happen; a step interrupted by a crash runs again with the same
``invocation_id`` and a higher attempt; a run whose worker died is taken over once its
lease expires (or at once by a worker restarted under the same ``--worker-id``); sleeps
and retry back-offs are durable timers that fire after a restart. The step bodies write a
ledger to disk before and after they run (see ``crash_app``), which is the only honest
witness of what ran in a process that was SIGKILLed.

Set ``CRASH_SEED`` to replay one sequence of kill delays, ``CRASH_KILLS`` for more kills.
"""

from __future__ import annotations

import asyncio
import dataclasses
import os
import random
import statistics
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest

import plait
from support import crash_app
from support.ledger import (
    LedgerReport,
    LedgerTail,
    WorkerProcess,
    check_ledger,
    read_ledger,
    ready,
    summarize,
)
from support.polling import eventually

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]

TARGET_KILLS = int(os.environ.get("CRASH_KILLS", "50"))
#: kills of one of two live workers (the survivor must take the dead one's runs over)
PAIR_KILLS = int(os.environ.get("CRASH_PAIR_KILLS", "30"))
#: runs in flight: few enough that a kill sometimes finds no step body running
FIRST_RUNS = 4
TOP_UP_BELOW = 3
TOP_UP_BY = 2
#: a killed worker's runs are taken over by another worker id after this long
LEASE = 1.0
#: longest we wait for a restarted worker to write to the ledger (lease expiry + start-up)
GROWTH_DEADLINE = 20.0


@dataclasses.dataclass
class Kill:
    """One SIGKILL and what the killed worker was doing at that moment."""

    at: float
    pid: int
    worker_id: str
    #: steps whose body had started but not ended in the killed process
    in_step: list[tuple[str, str]]
    sleeping: int
    backing_off: int
    #: how the worker that replaced it was started: same-id or new-id
    restarted_as: str = ""
    restarted_pid: int = 0

    @property
    def where(self) -> str:
        """The kill's main category: inside a step wins, then back-off, sleep, between."""
        if self.in_step:
            return "inside a step"
        if self.backing_off:
            return "during a retry back-off"
        if self.sleeping:
            return "during a sleep"
        return "between steps"


def _ts(value: Any) -> float | None:
    return None if value is None else value.timestamp()


class CrashHarness:
    """Runs, worker processes, kills and the bookkeeping the final checks need."""

    def __init__(self, engine: plait.Engine, tmp_path: Path, url: str, seed: int) -> None:
        self.engine = engine
        self.tmp_path = tmp_path
        self.url = url
        self.rng = random.Random(seed)
        self.ledger = tmp_path / "ledger.jsonl"
        self.tail = LedgerTail(self.ledger)
        self.workers: list[WorkerProcess] = []
        self.kills: list[Kill] = []
        self.deaths: dict[int, float] = {}
        self.runs: dict[str, int] = {}
        self.worker_ids = 0

    async def start_runs(self, count: int) -> None:
        for _ in range(count):
            n = len(self.runs)
            rid = await self.engine.start("crash_flow", {"n": n}, run_id=f"crash-{n:04d}")
            self.runs[rid] = n

    async def unfinished_runs(self) -> int:
        running = await self.engine.list_runs(workflow="crash_flow", status="running", limit=10_000)
        return len(running)

    async def top_up(self) -> None:
        """Keep a few runs in flight so that every restarted worker has work to do."""
        if await self.unfinished_runs() < TOP_UP_BELOW:
            await self.start_runs(TOP_UP_BY)

    def start_worker(self, replacing: WorkerProcess | None = None) -> WorkerProcess:
        if replacing is not None:
            worker_id = replacing.worker_id
        else:
            worker_id = f"crash-w{self.worker_ids}"
            self.worker_ids += 1
        n = len(self.workers)
        w = WorkerProcess(
            self.url,
            self.ledger,
            self.tmp_path / f"worker-{n:03d}.log",
            worker_id=worker_id,
            lease=LEASE,
        )
        self.workers.append(w)
        return w

    async def wait_for_work(self, worker: WorkerProcess) -> None:
        """Wait until ``worker`` has written to the ledger since it started, or fail."""
        deadline = time.monotonic() + GROWTH_DEADLINE
        seen = 0
        next_top_up = time.monotonic() + 0.2
        while True:
            lines = self.tail.refresh()
            if any(ln["pid"] == worker.pid for ln in lines[seen:]):
                return
            seen = len(lines)
            if time.monotonic() > next_top_up:
                # with two workers the other one may have finished everything meanwhile
                await self.top_up()
                next_top_up = time.monotonic() + 0.2
            if not worker.alive():
                raise AssertionError(
                    f"worker {worker.worker_id} exited with {worker.proc.returncode}:\n"
                    + worker.log_tail()
                )
            if time.monotonic() > deadline:
                raise AssertionError(
                    f"worker {worker.worker_id} did no work for {GROWTH_DEADLINE}s; stuck runs:"
                    f"\n{await self.describe_stuck()}\nits log:\n{worker.log_tail()}"
                )
            await asyncio.sleep(0.005)

    async def kill_soon(self, worker: WorkerProcess) -> Kill:
        """SIGKILL ``worker`` 50-400 ms from now and record what it was doing."""
        await asyncio.sleep(self.rng.uniform(0.05, 0.4))
        at = worker.sigkill()
        assert worker.exited_at is not None
        self.deaths[worker.pid] = worker.exited_at
        sleeping, backing_off = await self._timers_at(at)
        open_: dict[tuple[str, str, int], bool] = {}
        for line in self.tail.refresh():
            if line["pid"] == worker.pid:
                ident = (line["run_id"], line["key"], line["attempt"])
                if line["event"] == "start":
                    open_[ident] = True
                else:
                    open_.pop(ident, None)
        kill = Kill(
            at, worker.pid, worker.worker_id, [(r, k) for r, k, _ in open_], sleeping, backing_off
        )
        self.kills.append(kill)
        return kill

    async def _timers_at(self, at: float) -> tuple[int, int]:
        """(sleeps and event timeouts pending, retry back-offs pending) at time ``at``.

        With one worker this is read after the kill, before the restart: nobody writes
        then, so the database shows exactly what the killed worker had committed. With a
        survivor it is a close approximation (read within milliseconds of the kill)."""
        sleeping = backing_off = 0
        for run in await self.engine.list_runs(status="running", limit=10_000):
            for step in await self.engine.get_steps(run.id):
                wake = _ts(step.wake_at)
                if step.status != "scheduled" or wake is None or wake <= at:
                    continue
                if step.kind in ("sleep", "event"):  # an event timeout is a timer too
                    sleeping += 1
                elif step.kind == "do" and step.attempts >= 1:
                    backing_off += 1
        return sleeping, backing_off

    async def finish(self, alive: list[WorkerProcess]) -> None:
        """Let the live workers complete every run, then stop them cleanly."""

        async def all_done() -> bool:
            for w in alive:
                if not w.alive():
                    raise AssertionError(f"worker {w.worker_id} exited:\n{w.log_tail()}")
            return await self.unfinished_runs() == 0

        try:
            await eventually(all_done, timeout=90, what="every run to complete")
        except AssertionError:
            print(await self.describe_stuck())
            raise
        for w in alive:
            await eventually(ready(w), timeout=15, what="the worker to be ready")
            w.sigterm()
        for w in alive:
            code = w.wait_exit(15)
            assert code == 0, f"worker {w.worker_id} exit code {code}:\n{w.log_tail()}"
            assert w.exited_at is not None
            self.deaths[w.pid] = w.exited_at

    def stop_all(self) -> None:
        for w in self.workers:
            w.stop()

    async def describe_stuck(self) -> str:
        parts = []
        for run in await self.engine.list_runs(status="running", limit=20):
            steps = await self.engine.get_steps(run.id)
            open_steps = [f"{s.key}:{s.status}" for s in steps if s.status != "succeeded"]
            parts.append(f"{run.id} {run.workflow} open steps {open_steps}")
        return "\n".join(parts)

    async def verify(self, title: str, seed: int, elapsed: float) -> None:
        """Every run completed with the right output; the ledger agrees with the database."""
        lines = read_ledger(self.ledger)
        report = await check_ledger(
            self.engine, lines, self.deaths, flaky_keys=crash_app.FLAKY_KEYS
        )
        wrong = []
        children = 0
        for run_id, n in self.runs.items():
            run = await self.engine.get_run(run_id)
            if run.status != "completed" or run.output != crash_app.crash_flow_output(n):
                wrong.append(f"{run_id}: {run.status} {run.output} {run.error}")
            keys = {line["key"] for line in lines if line["run_id"] == run_id}
            if keys != set(crash_app.CRASH_FLOW_KEYS):
                wrong.append(f"{run_id}: ledger keys {sorted(keys)}")
            for child in await self.engine.get_children(run_id):
                children += 1
                if child.status != "completed":
                    wrong.append(f"child {child.id} of {run_id}: {child.status}")
        self.print_counts(title, seed, elapsed, children, lines, report)
        assert not wrong, "runs that did not complete as expected:\n" + "\n".join(wrong)
        assert not report.problems, f"{len(report.problems)} ledger problems:\n" + "\n".join(
            report.problems[:40]
        )
        assert report.interrupted > 0, "no kill interrupted a step body: the suite proved nothing"
        kills = self.kills
        labels = {k.where for k in kills}
        assert any(k.in_step for k in kills), f"no kill inside a step: {labels}"
        assert any(not k.in_step for k in kills), f"no kill between steps: {labels}"
        assert any(k.sleeping for k in kills), f"no kill during a sleep: {labels}"
        assert any(k.backing_off for k in kills), f"no kill during a retry back-off: {labels}"

    def print_counts(
        self,
        title: str,
        seed: int,
        elapsed: float,
        children: int,
        lines: list[dict[str, Any]],
        report: LedgerReport,
    ) -> None:
        """The numbers the issue asks for, in the test output (``pytest -s``)."""
        kills = self.kills
        print(f"\n== {title} (seed {seed}, {elapsed:.1f}s) ==")
        print(
            f"kills {len(kills)}, workers started {len(self.workers)}, runs {len(self.runs)} "
            f"(+{children} child runs), steps {report.steps}, step executions "
            f"{report.executions}"
        )
        print(
            f"re-executions of interrupted steps {report.interrupted}, re-runs after a result "
            f"was lost with its process {report.lost_results}, planned failures "
            f"{report.planned_failures}"
        )
        where: dict[str, int] = {}
        for k in kills:
            where[k.where] = where.get(k.where, 0) + 1
        print("kills by where they landed: " + ", ".join(f"{n} {w}" for w, n in where.items()))
        print(
            f"kills that found: a step body running {sum(1 for k in kills if k.in_step)}, "
            f"no step body running {sum(1 for k in kills if not k.in_step)}, "
            f"a sleep or event timeout pending {sum(1 for k in kills if k.sleeping)}, "
            f"a retry back-off pending {sum(1 for k in kills if k.backing_off)}"
        )
        starts = [
            (ln["t"], ln) for ln in sorted(lines, key=lambda ln: ln["t"]) if ln["event"] == "start"
        ]
        ends = sorted(ln["t"] for ln in lines if ln["event"] == "end")
        buckets: dict[str, list[float]] = {}
        for k in kills:
            nxt = next((t for t in ends if t > k.at), None)
            if nxt is not None:
                buckets.setdefault(f"restart {k.restarted_as}: next step completes", []).append(
                    nxt - k.at
                )
            for run_id, key in k.in_step:
                again = next(
                    (
                        (t, ln["pid"])
                        for t, ln in starts
                        if t > k.at and ln["run_id"] == run_id and ln["key"] == key
                    ),
                    None,
                )
                if again is None:
                    continue
                by = "the restarted worker" if again[1] == k.restarted_pid else "another worker"
                label = f"restart {k.restarted_as}: interrupted step runs again on {by}"
                buckets.setdefault(label, []).append(again[0] - k.at)
        for label, values in sorted(buckets.items()):
            print(f"kill -> {label}: {summarize(values)}")
        resumed = [v for label, vs in buckets.items() if "interrupted" in label for v in vs]
        if resumed:
            print(f"kill -> interrupted step runs again, mean {statistics.mean(resumed):.2f}s")


def _seed() -> int:
    return int(os.environ.get("CRASH_SEED", str(random.randrange(1 << 30))))


async def test_sigkill_at_random_points_loses_nothing(tmp_path: Path) -> None:
    """One worker, killed and restarted over and over (same id and new id in turn)."""
    seed = _seed()
    url = f"sqlite:///{tmp_path / 'crash.db'}"
    began = time.monotonic()
    async with plait.Engine(crash_app.app, url, workers=False) as engine:
        h = CrashHarness(engine, tmp_path, url, seed)
        await h.start_runs(FIRST_RUNS)
        try:
            worker = h.start_worker()
            while len(h.kills) < TARGET_KILLS:
                await h.top_up()
                await h.wait_for_work(worker)
                kill = await h.kill_soon(worker)
                # restarts alternate: the same --worker-id (takes its runs back at once)
                # and a new one (waits for the dead worker's leases to expire)
                same = len(h.kills) % 2 == 1
                worker = h.start_worker(worker if same else None)
                kill.restarted_as, kill.restarted_pid = (
                    ("same-id" if same else "new-id"),
                    worker.pid,
                )
            await h.finish([worker])
        finally:
            h.stop_all()
        await h.verify("crash suite, one worker", seed, time.monotonic() - began)
    assert len(h.kills) >= TARGET_KILLS


async def test_sigkill_one_of_two_workers_loses_nothing(tmp_path: Path) -> None:
    """Two workers; one of them is killed at random and restarted while the other keeps
    working, so the survivor takes over the dead worker's runs once their leases expire."""
    seed = _seed()
    url = f"sqlite:///{tmp_path / 'crash.db'}"
    began = time.monotonic()
    async with plait.Engine(crash_app.app, url, workers=False) as engine:
        h = CrashHarness(engine, tmp_path, url, seed)
        await h.start_runs(FIRST_RUNS + 2)
        try:
            pair = [h.start_worker(), h.start_worker()]
            while len(h.kills) < PAIR_KILLS:
                await h.top_up()
                slot = len(h.kills) % 2
                victim = pair[slot]
                await h.wait_for_work(victim)
                kill = await h.kill_soon(victim)
                same = (len(h.kills) // 2) % 2 == 1
                pair[slot] = h.start_worker(victim if same else None)
                kill.restarted_as = "same-id" if same else "new-id"
                kill.restarted_pid = pair[slot].pid
            await h.finish(pair)
        finally:
            h.stop_all()
        await h.verify("crash suite, one of two workers", seed, time.monotonic() - began)
    assert len(h.kills) >= PAIR_KILLS


# -- SIGTERM: a clean stop -------------------------------------------------------------------


async def _step_status(engine: plait.Engine, run_id: str, key: str) -> str | None:
    for step in await engine.get_steps(run_id):
        if step.key == key:
            return str(step.status)
    return None


def _started(ledger: Path, run_id: str, key: str) -> Callable[[], Awaitable[int | None]]:
    """A check for ``eventually``: the pid that started ``key`` of ``run_id``, if any."""

    async def check() -> int | None:
        for line in read_ledger(ledger):
            if line["run_id"] == run_id and line["key"] == key and line["event"] == "start":
                return int(line["pid"])
        return None

    return check


async def _finish_and_check(
    engine: plait.Engine,
    run_id: str,
    ledger: Path,
    deaths: dict[int, float],
    restarted: WorkerProcess,
) -> LedgerReport:
    """Wait for the restarted worker to finish the run; hold the ledger against the DB."""
    try:
        run = await engine.wait(run_id, timeout=20)
    except TimeoutError:
        raise AssertionError(
            f"the restarted worker did not finish the run:\n{restarted.log_tail()}"
        ) from None
    assert run.status == "completed", (run.status, run.error, restarted.log_tail())
    assert run.output == {"v": 2}
    report = await check_ledger(engine, read_ledger(ledger), deaths)
    assert not report.problems, "\n".join(report.problems)
    keys = {line["key"] for line in read_ledger(ledger) if line["run_id"] == run_id}
    assert keys == set(crash_app.TERM_FLOW_KEYS)
    return report


async def test_sigterm_during_a_sleep_then_a_restart_finishes(tmp_path: Path) -> None:
    """The worker holds nothing while a run sleeps, so it stops at once; the timer is
    durable, so the next worker wakes the run on time and nothing runs twice."""
    url = f"sqlite:///{tmp_path / 'term.db'}"
    ledger = tmp_path / "ledger.jsonl"
    drain = 5.0
    workers: list[WorkerProcess] = []
    async with plait.Engine(crash_app.app, url, workers=False) as engine:
        run_id = await engine.start(
            "term_flow", {"step_seconds": 0.05, "sleep_seconds": 2.0, "kind": "inline"}
        )
        try:
            first = WorkerProcess(url, ledger, tmp_path / "w1.log", worker_id="t1", drain=drain)
            workers.append(first)

            async def sleeping() -> bool:
                return await _step_status(engine, run_id, "rest") == "scheduled"

            await eventually(sleeping, timeout=15, what="the run to reach its sleep")
            await eventually(ready(first), timeout=15, what="the worker to be ready")
            first.sigterm()
            code = first.wait_exit(drain + 5)
            assert code == 0, f"exit code {code}:\n{first.log_tail()}"
            assert first.exited_at is not None and first.signalled_at is not None
            took = first.exited_at - first.signalled_at
            assert took < drain, f"took {took:.2f}s to stop while holding nothing"
            assert await _step_status(engine, run_id, "rest") == "scheduled"
            second = WorkerProcess(url, ledger, tmp_path / "w2.log", worker_id="t2")
            workers.append(second)
            await _finish_and_check(engine, run_id, ledger, {first.pid: first.exited_at}, second)
        finally:
            for w in workers:
                w.stop()
        rest = next(s for s in await engine.get_steps(run_id) if s.key == "rest")
        after = next(
            ln for ln in read_ledger(ledger) if ln["key"] == "after" and ln["event"] == "start"
        )
        assert rest.wake_at is not None and after["t"] >= rest.wake_at.timestamp()
    print(f"\nSIGTERM during a sleep: worker stopped in {took:.2f}s (exit 0)")


@pytest.mark.parametrize(
    ("kind", "step_seconds", "drain"),
    [
        ("inline", 1.0, 5.0),  # the step ends within the drain: it is kept, never re-run
        ("queued", 1.0, 5.0),
        ("inline", 4.0, 0.5),  # the drain ends first: the step is interrupted, re-run later
        ("queued", 4.0, 0.5),
        ("sync", 4.0, 0.5),  # a sync body runs in a thread that cannot be cancelled
    ],
)
async def test_sigterm_during_a_step_then_a_restart_finishes(
    tmp_path: Path, kind: str, step_seconds: float, drain: float
) -> None:
    """A stop finishes the step in hand if the drain allows, or interrupts it so that it
    runs again (same invocation id, next attempt); either way the worker exits 0 within
    its drain time, a restarted worker finishes the run and no succeeded step re-runs."""
    url = f"sqlite:///{tmp_path / 'term.db'}"
    ledger = tmp_path / "ledger.jsonl"
    workers: list[WorkerProcess] = []
    async with plait.Engine(crash_app.app, url, workers=False) as engine:
        run_id = await engine.start(
            "term_flow", {"step_seconds": step_seconds, "sleep_seconds": 0.2, "kind": kind}
        )
        try:
            first = WorkerProcess(url, ledger, tmp_path / "w1.log", worker_id="t1", drain=drain)
            workers.append(first)
            await eventually(
                _started(ledger, run_id, "long"), timeout=15, what="the long step to start"
            )
            await eventually(ready(first), timeout=15, what="the worker to be ready")
            first.sigterm()
            code = first.wait_exit(drain + step_seconds + 10)
            assert first.exited_at is not None and first.signalled_at is not None
            took = first.exited_at - first.signalled_at
            assert code == 0, f"exit code {code}:\n{first.log_tail()}"
            # the drain, plus time to commit, release and close the store on a busy machine;
            # a sync body runs in a thread that cannot be stopped: the worker gives it the
            # stop grace (2 s) and then exits without it, keeping its lease until then
            limit = drain + (4.0 if kind == "sync" else 2.0)
            assert took < limit, (
                f"the worker took {took:.2f}s to stop with --drain {drain}:\n{first.log_tail()}"
            )
            second = WorkerProcess(url, ledger, tmp_path / "w2.log", worker_id="t1")
            workers.append(second)
            report = await _finish_and_check(
                engine, run_id, ledger, {first.pid: first.exited_at}, second
            )
        finally:
            for w in workers:
                w.stop()
        long = next(s for s in await engine.get_steps(run_id) if s.key == "long")
    ran = [ln for ln in read_ledger(ledger) if ln["key"] == "long" and ln["event"] == "start"]
    print(
        f"\nSIGTERM during a {kind} step ({step_seconds}s, drain {drain}s): stopped in "
        f"{took:.2f}s, step attempts {long.attempts}, executions {len(ran)}, "
        f"interrupted {report.interrupted}"
    )
    if step_seconds < drain:
        assert [ln["attempt"] for ln in ran] == [1], "the drained step ran again"
    else:
        assert [ln["attempt"] for ln in ran] == [1, 2], ran


@pytest.mark.parametrize(
    ("kind", "step_seconds", "drain"),
    [
        ("inline", 2.5, 5.0),  # the step outlives the lease but not the drain
        ("queued", 2.5, 5.0),
        ("sync", 3.0, 0.5),  # the drain ends while a thread still runs the body
    ],
)
async def test_sigterm_during_a_step_with_another_worker_running(
    tmp_path: Path, kind: str, step_seconds: float, drain: float
) -> None:
    """While a stopping worker still runs a step body, nobody else may run it: it must
    keep the step's lease through the drain, and give it up only once the body has
    really stopped. Otherwise the other worker takes the step over while its body still
    runs here, and the step body runs twice at once."""
    url = f"sqlite:///{tmp_path / 'term.db'}"
    ledger = tmp_path / "ledger.jsonl"
    workers: list[WorkerProcess] = []
    async with plait.Engine(crash_app.app, url, workers=False) as engine:
        try:
            for n in range(2):
                w = WorkerProcess(
                    url, ledger, tmp_path / f"w{n}.log", worker_id=f"t{n}", drain=drain
                )
                workers.append(w)
                await eventually(ready(w), timeout=15, what="the worker to be ready")
            run_id = await engine.start(
                "term_flow", {"step_seconds": step_seconds, "sleep_seconds": 0.2, "kind": kind}
            )
            pid = await eventually(
                _started(ledger, run_id, "long"), timeout=15, what="the long step to start"
            )
            holder = next(w for w in workers if w.pid == pid)
            other = next(w for w in workers if w.pid != pid)
            holder.sigterm()
            code = holder.wait_exit(drain + step_seconds + 5)
            assert code == 0, f"exit code {code}:\n{holder.log_tail()}"
            assert holder.exited_at is not None
            await _finish_and_check(engine, run_id, ledger, {holder.pid: holder.exited_at}, other)
        finally:
            for w in workers:
                w.stop()
    ran = [ln for ln in read_ledger(ledger) if ln["key"] == "long" and ln["event"] == "start"]
    if step_seconds < drain:
        assert len(ran) == 1, f"the drained step ran {len(ran)} times: {ran}"


@pytest.mark.parametrize("kind", ["inline", "queued"])
async def test_a_run_cancelled_after_its_worker_was_killed_leaves_no_step_running(
    tmp_path: Path, kind: str
) -> None:
    """The worker dies inside a step; an operator then cancels the stuck run. Nothing will
    replay an ended run, so the cancel ends the attempt the dead worker left open: the step
    fails with the cancel's error instead of showing as running for ever."""
    url = f"sqlite:///{tmp_path / 'kill.db'}"
    ledger = tmp_path / "ledger.jsonl"
    async with plait.Engine(crash_app.app, url, workers=False) as engine:
        run_id = await engine.start(
            "term_flow", {"step_seconds": 60.0, "sleep_seconds": 0.2, "kind": kind}
        )
        worker = WorkerProcess(url, ledger, tmp_path / "w1.log", worker_id="k1", lease=30.0)
        try:
            await eventually(
                _started(ledger, run_id, "long"), timeout=15, what="the long step to start"
            )
            worker.sigkill()
        finally:
            worker.stop()
        assert await _step_status(engine, run_id, "long") == "running"  # the lease holds
        run = await engine.cancel(run_id, "operator gave up")
        assert run.status == "cancelled"
        (long,) = await engine.get_steps(run_id)
        assert (long.status, long.error and long.error["message"]) == (
            "failed",
            "operator gave up",
        )
        assert [a.status for a in await engine.get_history(run_id)] == ["cancelled"]
