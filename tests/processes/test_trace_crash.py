"""One trace from ``engine.start`` through a queued step worked in another process, with
that process SIGKILLed in the middle of the step and a new worker process finishing it;
the step shows in the queue depth once the dead worker's lease has run out, and the new
worker counts and logs the takeover.

The starting process traces into the SDK's in-memory exporter; each worker process
(``plait worker --tracing --log-format json --metrics-port PORT``) appends its finished
spans to a file (``trace_app``) and writes its log to another.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

import plait
from support.paths import ROOT
from support.ports import free_port

pytestmark = pytest.mark.slow

LEASE = "0.5"


def _worker(database: str, tmp_path: Path, name: str, metrics_port: int) -> subprocess.Popen:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(
        [str(ROOT / "src"), str(ROOT / "tests"), env.get("PYTHONPATH", "")]
    )
    env["TRACE_SPANS"] = str(tmp_path / f"spans-{name}.jsonl")
    env["TRACE_FLAG"] = str(tmp_path / "pack-started")
    log = (tmp_path / f"worker-{name}.log").open("w")
    return subprocess.Popen(
        [
            sys.executable,
            "-m",
            "plait.cli",
            "worker",
            "support.trace_app:app",
            "--database",
            database,
            "--lease",
            LEASE,
            "--tracing",
            "--worker-id",
            name,
            "--log-format",
            "json",
            "--metrics-port",
            str(metrics_port),
        ],
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
    )


def _read_spans(path: Path) -> list[dict]:
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


async def _scrape(port: int, timeout: float = 20.0) -> dict[str, float]:
    """The unlabelled samples a worker serves at ``/metrics``, once it answers."""
    deadline = time.monotonic() + timeout
    async with httpx.AsyncClient() as client:
        while True:
            try:
                response = await client.get(f"http://127.0.0.1:{port}/metrics")
                break
            except httpx.TransportError:
                if time.monotonic() > deadline:
                    raise
                await asyncio.sleep(0.05)
    return {
        sample.name: sample.value
        for family in text_string_to_metric_families(response.text)
        for sample in family.samples
        if not sample.labels
    }


async def _queue_depth(engine: plait.Engine, queue: str) -> float:
    """``plait_queue_depth{queue}`` as the engine's metrics read it now."""
    text = await engine.metrics_text()
    assert text is not None
    for family in text_string_to_metric_families(text.decode()):
        for sample in family.samples:
            if sample.name == "plait_queue_depth" and sample.labels == {"queue": queue}:
                return sample.value
    return 0.0


async def _until(check, what: str, timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        await asyncio.sleep(0.02)


async def test_one_trace_across_a_sigkilled_worker_and_its_replacement(
    database: str, tmp_path: Path
) -> None:
    from opentelemetry import trace

    from support.otel_setup import memory_exporter
    from support.trace_app import app

    exporter = memory_exporter()
    flag = tmp_path / "pack-started"
    first = _worker(database, tmp_path, "first", free_port())
    second = None
    second_port = free_port()
    try:
        async with plait.Engine(app, database, workers=False, tracing=True, metrics=True) as engine:
            with trace.get_tracer("test").start_as_current_span("checkout request") as root:
                run_id = await engine.start("order", {"item": "book"})
            await _until(flag.exists, "the queued step to start in the first worker")
            assert int(flag.read_text()) == first.pid
            first.send_signal(signal.SIGKILL)
            first.wait(timeout=10)
            # once the dead worker's lease has run out, the step is backlog again: it
            # waits for a worker to take it over
            deadline = time.monotonic() + 20
            while await _queue_depth(engine, "pack") != 1:
                assert time.monotonic() < deadline, "the step never waited for a worker"
                await asyncio.sleep(0.02)
            second = _worker(database, tmp_path, "second", second_port)
            run = await engine.wait(run_id, timeout=60)
            assert run.status == "completed", run.error
            assert run.output == ["in stock", "packed book on attempt 2", "label book"]
        # the worker that took the step over counted it, once
        assert (await _scrape(second_port))["plait_lease_takeovers_total"] == 1
    finally:
        for proc in (first, second):
            if proc is not None and proc.poll() is None:
                proc.terminate()
                proc.wait(timeout=20)

    here = [
        {
            "name": s.name,
            "trace_id": s.context.trace_id,
            "span_id": s.context.span_id,
            "parent_id": s.parent.span_id if s.parent else None,
            "attributes": dict(s.attributes or {}),
            "status": s.status.status_code.name,
            "pid": os.getpid(),
        }
        for s in exporter.get_finished_spans()
    ]
    first_spans = _read_spans(tmp_path / "spans-first.jsonl")
    second_spans = _read_spans(tmp_path / "spans-second.jsonl")
    spans = here + first_spans + second_spans
    trace_id = root.get_span_context().trace_id
    assert {s["trace_id"] for s in spans} == {trace_id}, "more than one trace"
    ids = {s["span_id"] for s in spans}
    orphans = [s for s in spans if s["name"] != "checkout request" and s["parent_id"] not in ids]
    assert not orphans, orphans

    assert [s["name"] for s in here] == ["plait.run", "checkout request"]
    assert any(s["name"] == "plait.pass" for s in first_spans), "no pass in the first worker"
    steps = [s for s in spans if s["name"] == "plait.step"]
    packs = [s for s in steps if s["attributes"]["plait.step_key"] == "pack"]
    # the killed attempt never ended, so its span was never exported; the second worker's is
    assert [(s["pid"], s["attributes"]["plait.attempt"]) for s in packs] == [(second.pid, 2)]
    assert packs[0]["attributes"]["plait.run_id"] == run_id
    passes_after = [s for s in second_spans if s["name"] == "plait.pass"]
    assert passes_after, "no pass in the worker that took over"
    child = [s for s in steps if s["attributes"]["plait.workflow"] == "ship"]
    assert [s["attributes"]["plait.step_key"] for s in child] == ["label"]

    # ...and logged it at INFO, naming the run, the step and the attempt that was lost
    log = (tmp_path / "worker-second.log").read_text().splitlines()
    lines = [json.loads(line) for line in log if line.startswith("{")]
    takeovers = [ln for ln in lines if "took over" in ln["message"]]
    assert [(ln["level"], ln["run_id"], ln["step"], ln["attempt"]) for ln in takeovers] == [
        ("INFO", run_id, "pack", 1)
    ], takeovers
    assert takeovers[0]["message"] == (
        f"run {run_id}: took over step pack after attempt 1 was lost with its worker"
    )
