"""A job step running in a ``plait worker`` process loses a deadline race: the run ends
when the deadline does, and the body, in the other process, gets ``CancelledError``
within a lease renewal (the ledger line it writes in ``except CancelledError``)."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

import plait
from plait import errors
from support import cancel_app
from support.ledger import WorkerProcess, read_ledger, ready
from support.polling import eventually

pytestmark = [pytest.mark.slow, pytest.mark.timeout(120)]

LEASE = 1.0
#: room for a loaded machine on top of what the contract promises
SLACK = 0.7


async def test_a_job_step_in_another_process_is_cancelled_by_its_workflow(
    database: str, tmp_path: Path
) -> None:
    ledger = tmp_path / "ledger.jsonl"
    worker = WorkerProcess(
        database,
        ledger,
        tmp_path / "worker.log",
        worker_id="stepper",
        lease=LEASE,
        drain=2.0,
        app="support.cancel_app:app",
    )
    try:
        await eventually(ready(worker), timeout=30, what="the worker ready")
        # this engine drives the runs it starts, and runs no job: the step's body runs
        # in the worker process
        async with plait.Engine(
            cancel_app.app, database, workers=False, lease_seconds=LEASE, poll_interval=0.2
        ) as engine:
            run_id = await engine.start("race")
            started = time.time()

            def lines(event: str) -> list[dict[str, object]]:
                return [
                    line
                    for line in read_ledger(ledger)
                    if line["event"] == event and line["run_id"] == run_id
                ]

            run = await engine.wait(run_id, timeout=30)
            assert (run.status, run.output) == ("completed", "deadline")
            ended = time.time()
            assert ended - started < cancel_app.DEADLINE + LEASE / 4 + SLACK
            (cancelled,) = await eventually(
                lambda: lines("cancelled"), timeout=10, what=worker.log_tail
            )
            assert cancelled["pid"] == worker.pid != os.getpid()
            assert [line["pid"] for line in lines("started")] == [worker.pid]
            assert float(str(cancelled["t"])) - started < cancel_app.DEADLINE + LEASE / 4 + SLACK
            assert lines("finished") == []
            step = next(s for s in await engine.get_steps(run_id) if s.key == "slow")
            assert step.status == "failed"
            assert step.error is not None and step.error["code"] == errors.CANCELLED
            history = [a.status for a in await engine.get_history(run_id) if a.key == "slow"]
            assert history == ["cancelled"]
    finally:
        worker.stop()
