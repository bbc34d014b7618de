"""A worker frozen (SIGSTOP) past its lease and woken (SIGCONT) after another worker took
its run over and finished it starts no step body it no longer owns.

The frozen worker stops itself at the worst moment (``pause_app``): right after the commit
that began an attempt, before the body starts. That commit was the last write the lease
fenced; the body is guarded only by the worker's look at its lease's monotonic deadline.
The side-effect ledger on disk is the witness of what started where.
"""

from __future__ import annotations

import os
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

pytestmark = [pytest.mark.timeout(120)]

LEASE = 1.0
#: the frozen worker is woken by then at the latest, whatever the driver is doing (on
#: SQLite the driver could wait on a lock the frozen worker holds)
WAKE_BY = 30.0


def _freeze_line(ledger: Path) -> dict[str, Any] | None:
    return next((ln for ln in read_ledger(ledger) if ln["event"] == "freeze"), None)


#: what a woken worker logs when it leaves the run it lost
STOPPED = (
    "starting nothing more",
    "lease lost to another worker",
    "its lease was taken over",
    "stopping its pass",
)


def _freezing_worker(
    database: str, tmp_path: Path, ledger: Path, monkeypatch: pytest.MonkeyPatch
) -> WorkerProcess:
    """A worker that freezes itself once, right after the commit that began an attempt of
    the step ``second`` (``support.pause_app``)."""
    marker = tmp_path / "freeze-once"
    marker.touch()
    monkeypatch.setenv("PAUSE_BEFORE_BODY", "second")
    monkeypatch.setenv("PAUSE_MARKER", str(marker))
    frozen = WorkerProcess(
        database,
        ledger,
        tmp_path / "frozen.log",
        worker_id="frozen",
        lease=LEASE,
        app="support.pause_app:app",
    )
    monkeypatch.delenv("PAUSE_BEFORE_BODY")
    return frozen


@pytest.mark.parametrize("workflow", ["pair", "pair_queued"], ids=["inline", "job"])
async def test_a_worker_woken_from_a_pause_starts_no_body_it_lost(
    database: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, workflow: str
) -> None:
    ledger = tmp_path / "ledger.jsonl"
    frozen = _freezing_worker(database, tmp_path, ledger, monkeypatch)
    waker: threading.Timer | None = None
    taker: WorkerProcess | None = None
    try:
        async with plait.Engine(pause_app.app, database, workers=False) as engine:
            await eventually(ready(frozen), timeout=30, what="the first worker to start")
            run_id = await engine.start(workflow, {"n": 1})
            line = await eventually(
                lambda: _freeze_line(ledger), timeout=30, what="the worker to freeze"
            )
            assert line["pid"] == frozen.pid
            waker = threading.Timer(WAKE_BY, os.kill, (frozen.pid, signal.SIGCONT))
            waker.start()
            taker = WorkerProcess(
                database,
                ledger,
                tmp_path / "taker.log",
                worker_id="taker",
                lease=LEASE,
                app="support.pause_app:app",
            )
            run = await engine.wait(run_id, timeout=WAKE_BY - 5)
            assert run.status == "completed", run.error
            waker.cancel()
            os.kill(frozen.pid, signal.SIGCONT)
            woke = frozen.proc.pid  # the frozen worker runs again from here

            def decided() -> bool:
                started = [
                    ln
                    for ln in read_ledger(ledger)
                    if ln["event"] == "start" and ln["pid"] == woke and ln["key"] == line["key"]
                ]
                # it refuses the body, or its pass stops first: its flush fenced by the
                # lease it lost, or its renewal finding the lease taken or the run ended
                said = frozen.log.read_text(errors="replace")
                return bool(started) or any(phrase in said for phrase in STOPPED)

            await eventually(decided, timeout=15, what="the woken worker to decide")
            starts = [ln for ln in read_ledger(ledger) if ln["event"] == "start"]
            late = [ln for ln in starts if ln["pid"] == frozen.pid and ln["mono"] > line["mono"]]
            assert late == [], f"the woken worker started bodies it had lost: {late}"
            # the run's second step ran once, on the worker that took it over, and the
            # run's output is that execution's
            second = [ln for ln in starts if ln["key"] == line["key"]]
            assert [ln["pid"] for ln in second] == [taker.pid]
            assert run.output["second"]["pid"] == taker.pid
            assert frozen.alive(), frozen.log_tail()
    finally:
        if waker is not None:
            waker.cancel()
        if frozen.alive():
            os.kill(frozen.pid, signal.SIGCONT)
        frozen.stop()
        if taker is not None:
            taker.stop()


@pytest.mark.parametrize("workflow", ["pair", "pair_queued"], ids=["inline", "job"])
async def test_a_worker_woken_after_its_workflow_was_paused_starts_no_body(
    database: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, workflow: str
) -> None:
    """The only worker freezes right after the commit that began the run's second step
    (inline, or a job step); the workflow is paused meanwhile, and the worker is woken
    more than a lease later. Nobody took its lease, so it keeps it, but its copy of the
    brakes is older than a lease: it reads them again, starts no body, the attempt ends
    ``interrupted`` and the run waits ``paused``. After the resume the step runs once
    (it ran 5 leases after the pause)."""
    ledger = tmp_path / "ledger.jsonl"
    frozen = _freezing_worker(database, tmp_path, ledger, monkeypatch)
    waker: threading.Timer | None = None
    try:
        async with plait.Engine(pause_app.app, database, workers=False) as engine:
            await eventually(ready(frozen), timeout=30, what="the worker to start")
            run_id = await engine.start(workflow, {"n": 1})
            line = await eventually(
                lambda: _freeze_line(ledger), timeout=30, what="the worker to freeze"
            )
            waker = threading.Timer(WAKE_BY, os.kill, (frozen.pid, signal.SIGCONT))
            waker.start()
            await engine.pause_workflow(workflow)
            paused_at = time.monotonic()
            # the worker's copy of the brakes, read before it froze, is a lease old now
            await eventually(lambda: time.monotonic() > paused_at + 1.5 * LEASE, what="a lease")
            waker.cancel()
            os.kill(frozen.pid, signal.SIGCONT)

            async def held() -> bool:
                run = await engine.get_run(run_id)
                ended = [
                    (a.key, a.status) for a in await engine.get_history(run_id) if a.attempt == 1
                ]
                return run.status == "paused" and ("second", "interrupted") in ended

            await eventually(held, timeout=15, what="the second step's attempt given back")
            starts = [ln for ln in read_ledger(ledger) if ln["event"] == "start"]
            assert [ln["key"] for ln in starts] == ["first"], starts
            await engine.resume_workflow(workflow)
            run = await engine.wait(run_id, timeout=20)
        assert run.status == "completed", run.error
        starts = [ln for ln in read_ledger(ledger) if ln["event"] == "start"]
        assert [ln["key"] for ln in starts] == ["first", "second"]
        assert starts[1]["mono"] > line["mono"]
    finally:
        if waker is not None:
            waker.cancel()
        if frozen.alive():
            os.kill(frozen.pid, signal.SIGCONT)
        frozen.stop()
