"""Two ``plait worker`` processes on one SQLite file: every run completes, nothing runs twice.

Both workers claim orchestrator passes and queued steps from the same tables, so every
claim race the engine has is exercised here: two passes of one run, two deliveries of one
job, a pass and a job of one run at once. The ledger written by the step bodies (see
``crash_app``) is the witness that no step body ever ran twice, let alone at the same time.
"""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from collections.abc import Awaitable, Callable
from pathlib import Path

import pytest

import plait
from support import crash_app
from support.ledger import WorkerProcess, check_ledger, read_ledger
from support.polling import eventually

pytestmark = [pytest.mark.slow, pytest.mark.timeout(240)]

RUNS = 200
LEASE = 2.0  # the CLI's default


def _ready(worker: WorkerProcess) -> Callable[[], Awaitable[bool]]:
    async def check() -> bool:
        if not worker.alive():
            raise AssertionError(f"worker {worker.worker_id} exited:\n{worker.log_tail()}")
        return worker.ready()

    return check


async def test_two_workers_share_one_sqlite_file(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'multi.db'}"
    ledger = tmp_path / "ledger.jsonl"
    workers: list[WorkerProcess] = []
    async with plait.Engine(crash_app.app, url, workers=False) as engine:
        try:
            for n in range(2):
                w = WorkerProcess(
                    url, ledger, tmp_path / f"worker-{n}.log", worker_id=f"multi-{n}", lease=LEASE
                )
                workers.append(w)
            for w in workers:
                await eventually(_ready(w), timeout=15, what=f"{w.worker_id} to be ready")
            began = time.monotonic()
            ids = await asyncio.gather(
                *(
                    engine.start("mixed_flow", {"n": n}, run_id=f"multi-{n:03d}")
                    for n in range(RUNS)
                )
            )
            created = time.monotonic() - began

            async def all_done() -> bool:
                for w in workers:
                    if not w.alive():
                        raise AssertionError(f"{w.worker_id} exited:\n{w.log_tail()}")
                running = await engine.list_runs(status="running", limit=1)
                return not running

            try:
                await eventually(all_done, timeout=150, what="every run to complete")
            except AssertionError:
                stuck = await engine.list_runs(status="running", limit=10)
                for run in stuck:
                    steps = await engine.get_steps(run.id)
                    print(run.id, [(s.key, s.status, s.attempts) for s in steps])
                for w in workers:
                    print(f"--- {w.worker_id}\n{w.log_tail(15)}")
                raise
            elapsed = time.monotonic() - began
            for w in workers:
                w.sigterm()
            for w in workers:
                code = w.wait_exit(15)
                assert code == 0, f"{w.worker_id} exit code {code}:\n{w.log_tail()}"
        finally:
            for w in workers:
                w.stop()

        lines = read_ledger(ledger)
        wrong = []
        retried = []
        for n, run_id in enumerate(ids):
            run = await engine.get_run(run_id)
            if run.status != "completed" or run.output != crash_app.mixed_flow_output(n):
                wrong.append(f"{run_id}: {run.status} {run.output} {run.error}")
            for step in await engine.get_steps(run_id):
                if step.attempts != (2 if step.key in crash_app.FLAKY_KEYS else 1):
                    retried.append(f"{run_id} {step.key}: {step.attempts} attempts")
        report = await check_ledger(engine, lines, {}, flaky_keys=crash_app.FLAKY_KEYS)

    # exactly one successful end per step, plus the planned failure of each flaky step
    ends = Counter((ln["run_id"], ln["key"]) for ln in lines if ln["event"] == "end")
    twice = sorted(k for k, c in ends.items() if c != (2 if k[1] in crash_app.FLAKY_KEYS else 1))
    by_pid = Counter(ln["pid"] for ln in lines if ln["event"] == "end")
    queued = sum(1 for r, k in ends if k in crash_app.MIXED_QUEUED_KEYS)
    flaky_moved = sum(
        1
        for r, k in ends
        if k in crash_app.FLAKY_KEYS
        and len({ln["pid"] for ln in lines if ln["run_id"] == r and ln["key"] == k}) > 1
    )
    print(
        f"\n== two workers, one SQLite file: {RUNS} runs created in {created:.1f}s, all "
        f"completed in {elapsed:.1f}s ({RUNS / elapsed:.1f} runs/s) ==\n"
        f"steps {report.steps} ({queued} queued, {report.steps - queued} inline), step "
        f"executions {report.executions} ({report.planned_failures} planned failures, "
        f"{flaky_moved} retries ran on the other worker), per worker "
        + ", ".join(f"{w.worker_id}: {by_pid.get(w.pid, 0)}" for w in workers)
    )
    assert not wrong, "runs that did not complete as expected:\n" + "\n".join(wrong[:20])
    assert not report.problems, f"{len(report.problems)} ledger problems:\n" + "\n".join(
        report.problems[:40]
    )
    assert not twice, f"steps that ended more than once (or never): {twice[:20]}"
    assert report.steps == RUNS * len(crash_app.MIXED_FLOW_KEYS)
    assert report.executions == report.steps + report.planned_failures, "a step ran twice"
    assert report.planned_failures == RUNS * len(crash_app.FLAKY_KEYS)
    assert not retried, "steps with more than one attempt:\n" + "\n".join(retried[:20])


async def test_a_step_that_blocks_the_loop_is_not_taken_for_a_dead_worker(
    tmp_path: Path, database: str
) -> None:
    """The body blocks its worker's loop for six leases while a second worker waits for
    work. The stall guard keeps the leases, so the step runs once, in one attempt."""
    url = database
    ledger = tmp_path / "ledger.jsonl"
    lease = 0.5
    async with plait.Engine(crash_app.app, url, workers=False) as engine:
        workers = [
            WorkerProcess(url, ledger, tmp_path / f"w{n}.log", worker_id=f"w{n}", lease=lease)
            for n in range(2)
        ]
        try:
            for w in workers:
                await eventually(_ready(w), timeout=15, what=f"{w.worker_id} to be ready")
            run_id = await engine.start("blocking_flow", {"seconds": 6 * lease})
            run = await engine.wait(run_id, timeout=60)
            history = await engine.get_history(run_id)
        finally:
            for w in workers:
                w.stop()
    starts = [line for line in read_ledger(ledger) if line["event"] == "start"]
    assert run.status == "completed" and run.output == 1, run.error
    assert [(a.attempt, a.status) for a in history] == [(1, "succeeded")]
    assert len(starts) == 1
    logs = "".join(w.log.read_text() for w in workers)
    assert "has been blocked for" in logs
