"""A ``plait worker`` leaves what it built to start out of later garbage collections: a
full collection walking the whole heap of imports stood its event loop still for
15-20 ms, the worst start-to-first-step latency of a worker at rest."""

from __future__ import annotations

from pathlib import Path

import pytest

import plait
from support import heap_app
from support.ledger import WorkerProcess
from support.polling import eventually

pytestmark = [pytest.mark.timeout(120)]


@pytest.mark.parametrize("database", ["sqlite"], indirect=True)
async def test_a_worker_freezes_its_startup_heap_before_it_works(
    database: str, tmp_path: Path
) -> None:
    worker = WorkerProcess(
        database,
        tmp_path / "ledger.jsonl",
        tmp_path / "worker.log",
        worker_id="heap-worker",
        app="support.heap_app:app",
    )
    try:
        await eventually(worker.ready, timeout=30, what="the worker to start")
        async with plait.Engine(heap_app.app, database, workers=False) as engine:
            run = await engine.wait(await engine.start(heap_app.heap), timeout=30)
        assert run.status == "completed", run.error
        # the frozen part holds the modules, the app and the engine: tens of thousands
        assert run.output > 10_000, run.output
    finally:
        worker.stop()
