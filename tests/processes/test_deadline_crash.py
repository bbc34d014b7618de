"""A run's deadline is a durable timer: the ``plait worker`` that ran the run (inside a
step that would take an hour) is SIGKILLed, a worker with another id starts, and the run
still fails ``RUN_TIMEOUT`` shortly after its deadline, on every store. The step body
writes a ledger (``deadline_app``): a body the new worker took over gets ``CancelledError``
at the deadline.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import plait
from support import deadline_app
from support.ledger import WorkerProcess, read_ledger
from support.polling import eventually

pytestmark = [pytest.mark.slow, pytest.mark.timeout(120)]

LEASE = 1.0


@pytest.fixture
def workers(tmp_path: Path) -> Iterator[list[WorkerProcess]]:
    made: list[WorkerProcess] = []
    try:
        yield made
    finally:
        for worker in made:
            worker.stop()


def _worker(database: str, tmp_path: Path, worker_id: str) -> WorkerProcess:
    return WorkerProcess(
        database,
        tmp_path / "ledger.jsonl",
        tmp_path / f"{worker_id}.log",
        worker_id=worker_id,
        lease=LEASE,
        drain=1.0,
        app="support.deadline_app:app",
    )


async def _ready(worker: WorkerProcess) -> None:
    def check() -> bool:
        if not worker.alive():
            raise AssertionError(f"worker {worker.worker_id} exited:\n{worker.log_tail()}")
        return worker.ready()

    await eventually(check, timeout=30, what=f"worker {worker.worker_id} ready")


async def test_the_deadline_fires_after_the_runs_worker_was_killed(
    database: str, tmp_path: Path, workers: list[WorkerProcess]
) -> None:
    ledger = tmp_path / "ledger.jsonl"
    first = _worker(database, tmp_path, "first")
    workers.append(first)
    await _ready(first)
    async with plait.Engine(deadline_app.app, database, workers=False) as engine:
        run_id = await engine.start("bounded")

        def started() -> list[dict[str, Any]]:
            return [x for x in read_ledger(ledger) if x["event"] == "start"]

        (line,) = await eventually(started, timeout=30, what="the step body running")
        assert line["pid"] == first.pid
        first.sigkill()
        assert (await engine.get_run(run_id)).status == "running"  # nobody ended it
        second = _worker(database, tmp_path, "second")
        workers.append(second)
        await _ready(second)
        second_ready = time.time()
        run = await engine.wait(run_id, timeout=30)
    assert run.status == "failed", run.error
    assert run.error is not None and run.error["code"] == "RUN_TIMEOUT"
    assert run.deadline_at is not None
    deadline = run.deadline_at.timestamp()
    ended = run.updated_at.timestamp()
    late = ended - max(deadline, second_ready)
    print(
        f"the run ended {ended - deadline:.3f} s after its deadline; the new worker was "
        f"ready {second_ready - deadline:+.3f} s from it"
    )
    assert ended >= deadline
    assert late < LEASE + 1.0
    # a body the second worker took over before the deadline was cancelled by it
    theirs = [x for x in read_ledger(ledger) if x["pid"] == second.pid]
    if any(x["event"] == "start" for x in theirs):
        await eventually(
            lambda: any(
                x["event"] == "cancelled" and x["pid"] == second.pid for x in read_ledger(ledger)
            ),
            what="the second worker's body cancelled",
        )
    steps = await _steps(database, run_id)
    assert [(s.key, s.status) for s in steps] == [("hour", "failed")]


async def _steps(database: str, run_id: str) -> list[plait.Step]:
    async with plait.Engine(deadline_app.app, database, workers=False) as engine:
        return await engine.get_steps(run_id)
