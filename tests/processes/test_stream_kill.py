"""Streams across a SIGKILL: the workflow's own write made before the kill is not made
again by the replay on the worker that takes the run over, and the killed step attempt's
entries are reset before its next attempt writes its own."""

from __future__ import annotations

from pathlib import Path

import pytest

import plait
from support import stream_app
from support.ledger import LedgerTail, WorkerProcess
from support.polling import eventually

pytestmark = [pytest.mark.slow, pytest.mark.timeout(120)]


async def test_a_workflow_write_before_a_sigkill_appears_once(
    database: str, tmp_path: Path
) -> None:
    ledger = tmp_path / "ledger.jsonl"
    tail = LedgerTail(ledger)
    app = "support.stream_app:app"
    first = WorkerProcess(database, ledger, tmp_path / "w0.log", worker_id="s-w0", app=app)
    second: WorkerProcess | None = None
    async with plait.Engine(stream_app.app, database, workers=False) as engine:
        try:
            run_id = await engine.start("writer")

            async def holding() -> bool:
                if not first.alive():
                    raise AssertionError(f"worker exited:\n{first.log_tail()}")
                started = any(line["pid"] == first.pid for line in tail.refresh())
                return started and len(await engine.read_stream(run_id, "log")) == 2

            await eventually(holding, timeout=30, what="the step to hold after its writes")
            first.sigkill()
            second = WorkerProcess(database, ledger, tmp_path / "w1.log", worker_id="s-w1", app=app)
            run = await engine.wait(run_id, timeout=60)
            assert run.status == "completed" and run.output == 2, second.log_tail()
        finally:
            first.stop()
            if second is not None:
                second.stop()
        entries = await engine.read_stream(run_id, "log")
        assert [(e.kind, e.value, e.attempt) for e in entries] == [
            ("data", "before the kill", None),
            ("data", "step attempt 1", 1),
            ("reset", None, 1),
            ("data", "step attempt 2", 2),
            ("data", "after the takeover", None),
            ("end", None, None),
        ]
        settled = await engine.read_stream(run_id, "log", settled_only=True)
        assert [e.value for e in settled if e.kind == "data"] == [
            "before the kill",
            "step attempt 2",
            "after the takeover",
        ]
