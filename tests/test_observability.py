"""Traces, metrics and logs: spans with the run's attributes in one trace, Prometheus
counts that match the records, nothing imported when nothing is on, wf.logger silent on
replay, the worker's INFO lines and JSON format. Both stores where a store is involved."""

from __future__ import annotations

import asyncio
import json
import logging
import os
import subprocess
import sys
from collections import Counter
from pathlib import Path

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families
from typer.testing import CliRunner

import plait
from conftest import eventually
from plait.cli import cli
from plait.http import create_app
from plait.testing import TestEngine

ROOT = Path(__file__).resolve().parent.parent
SRC = str(ROOT / "src")


def _env(**extra: str) -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([SRC, str(ROOT / "tests"), env.get("PYTHONPATH", "")])
    env.update(extra)
    return env


# -- nothing on, nothing imported ------------------------------------------------------------


def test_tracing_and_metrics_off_import_neither_library(tmp_path: Path) -> None:
    script = f"""
import asyncio, sys
import plait

app = plait.App()

@app.function(queued=True)
async def queued(data):
    return 1

@app.workflow
async def flow(wf, data):
    await wf.do("inline", lambda: 1)
    await wf.do("queued", queued)
    wf.logger.info("done")
    return "ok"

async def main():
    async with plait.Engine(app, "sqlite:///{tmp_path / "a.db"}") as engine:
        assert engine.telemetry is None
        assert await engine.run("flow", timeout=10) == "ok"
    from plait.testing import TestEngine
    async with TestEngine(app) as env:
        assert await env.run("flow", timeout=10) == "ok"
    roots = ("opentelemetry", "prometheus_client")
    loaded = sorted(m for m in sys.modules if m.split(".")[0] in roots)
    assert not loaded, loaded
    assert "plait.tracing" not in sys.modules and "plait.metrics" not in sys.modules
    print("clean")

asyncio.run(main())
"""
    done = subprocess.run(
        [sys.executable, "-c", script], env=_env(), capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "clean"


# -- traces --------------------------------------------------------------------------------


def traced_app() -> plait.App:
    app = plait.App()
    tries = {"n": 0}

    @app.function(queued=True)
    async def pack(data: dict) -> str:
        return f"packed {data['item']}"

    @app.function(retries=1, retry_delay=0)
    async def flaky(data: None) -> str:
        tries["n"] += 1
        if tries["n"] == 1:
            raise ConnectionError("first try fails")
        return "ok"

    @app.workflow
    async def ship(wf: plait.Workflow, data: dict) -> str:
        return await wf.do("label", lambda: f"label {data['item']}")

    @app.workflow
    async def doomed(wf: plait.Workflow, data: None) -> None:
        raise ValueError("no stock")

    @app.workflow
    async def order(wf: plait.Workflow, data: dict) -> list[str]:
        return [
            await wf.do("flaky", flaky),
            await wf.do("pack", pack, data),
            await wf.do("ship", "ship", data),
        ]

    return app


async def test_one_trace_from_start_through_passes_steps_and_a_child(database: str) -> None:
    from opentelemetry import trace

    from otel_setup import memory_exporter

    exporter = memory_exporter()
    async with TestEngine(traced_app(), database, tracing=True) as env:
        with trace.get_tracer("test").start_as_current_span("request") as root:
            run_id = await env.start("order", {"item": "book"})
        run = await env.wait(run_id, timeout=10)
        assert run.output == ["ok", "packed book", "label book"]
        with trace.get_tracer("test").start_as_current_span("another request"):
            failed_run = await env.start("doomed")
        assert (await env.wait(failed_run, timeout=10)).status == "failed"
        # the run's record can be read before its pass has finished in this process (a
        # commit is visible before the pass hears back): let the passes end before close
        await eventually(lambda: _idle(env), what="the engine's passes to end")
    # read once the engine is closed: every span has ended by then
    everything = exporter.get_finished_spans()
    doomed = [s for s in everything if s.attributes.get("plait.workflow") == "doomed"]
    spans = [s for s in everything if s not in doomed and s.name != "another request"]
    doomed_passes = [s for s in doomed if s.name == "plait.pass"]
    assert [s.attributes["plait.run_status"] for s in doomed_passes] == ["failed"]
    assert doomed_passes[0].status.status_code.name == "ERROR"
    finals = [
        s for s in spans if s.name == "plait.pass" and s.attributes["plait.workflow"] == "order"
    ]
    assert finals[-1].attributes["plait.run_status"] == "completed"
    trace_id = root.get_span_context().trace_id
    assert {s.context.trace_id for s in spans} == {trace_id}
    ids = {s.context.span_id for s in spans}
    for span in spans:
        if span.name != "request":
            assert span.parent is not None and span.parent.span_id in ids, span.name
    names = Counter(s.name for s in spans)
    assert names["plait.run"] == 1 and names["plait.pass"] >= 3
    steps = [s for s in spans if s.name == "plait.step"]
    by_key = Counter(s.attributes["plait.step_key"] for s in steps)
    assert by_key == {"flaky": 2, "pack": 1, "label": 1}
    failed = [s for s in steps if s.status.status_code.name == "ERROR"]
    assert [(s.attributes["plait.step_key"], s.attributes["plait.attempt"]) for s in failed] == [
        ("flaky", 1)
    ]
    pack = next(s for s in steps if s.attributes["plait.step_key"] == "pack")
    assert pack.attributes["plait.run_id"] == run_id
    assert pack.attributes["plait.workflow"] == "order"
    assert pack.attributes["plait.invocation_id"]
    label = next(s for s in steps if s.attributes["plait.step_key"] == "label")
    assert label.attributes["plait.workflow"] == "ship"  # the child run's step, same trace


async def _idle(env: TestEngine) -> bool:
    return not env.worker.busy


# -- metrics -------------------------------------------------------------------------------


def _samples(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    found = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            found[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return found


async def test_metrics_match_the_records_after_a_mixed_load(database: str) -> None:
    app = plait.App()

    @app.function(queued=True)
    async def remote(data: int) -> int:
        return data * 2

    @app.function(retries=2, retry_delay=0)
    async def shaky(data: int, ctx: plait.StepContext) -> int:
        if ctx.attempt < 2:
            raise ValueError("once")
        return data

    @app.function(retries=0)
    async def broken(data: int) -> int:
        raise RuntimeError("always")

    @app.workflow
    async def good(wf: plait.Workflow, n: int) -> int:
        await wf.sleep("nap", "1h")
        return await wf.do("remote", remote, n) + await wf.do("shaky", shaky, n)

    @app.workflow
    async def bad(wf: plait.Workflow, n: int) -> int:
        return await wf.do("broken", broken, n)

    @app.workflow
    async def gated(wf: plait.Workflow, n: int) -> str:
        await wf.suspend("review")
        return "never"

    async with TestEngine(app, database, metrics=True) as env:
        ids = [await env.start("good", n) for n in range(4)]
        ids += [await env.start("bad", n) for n in range(2)]
        ids += [await env.start("gated", n) for n in range(2)]
        for run_id in ids:
            await env.wait(run_id, timeout=10)
        await env.cancel(ids[-1])
        await eventually(lambda: _idle(env), what="the engine's passes to end")
        async with httpx.AsyncClient(
            transport=httpx.ASGITransport(app=create_app(env, no_auth=True)),
            base_url="http://127.0.0.1",
        ) as client:
            response = await client.get("/metrics")
        assert response.status_code == 200
        assert response.headers["content-type"].startswith("text/plain")
        samples = _samples(response.text)

        runs = await env.list_runs(limit=100)
        for workflow in ("good", "bad", "gated"):
            for status in ("completed", "failed", "cancelled"):
                recorded = sum(1 for r in runs if r.workflow == workflow and r.status == status)
                key = ("plait_runs_total", (("status", status), ("workflow", workflow)))
                assert samples.get(key, 0) == recorded, (workflow, status)
        # a move is counted when it happens: both gated runs were suspended once, one of
        # them is cancelled now
        key = ("plait_runs_total", (("status", "suspended"), ("workflow", "gated")))
        assert samples[key] == 2
        attempts = Counter()
        for run in runs:
            steps = {s.key: s for s in await env.get_steps(run.id)}
            for attempt in await env.get_history(run.id):
                function = steps[attempt.key].function
                if function:
                    attempts[(function, str(attempt.status))] += 1
        counted = {
            (dict(labels)["function"], dict(labels)["status"]): value
            for (name, labels), value in samples.items()
            if name == "plait_steps_total" and value
        }
        assert counted == attempts
        assert attempts[("shaky", "failed")] == 4 and attempts[("remote", "succeeded")] == 4
        assert samples[("plait_step_seconds_count", (("function", "remote"),))] == 4
        assert samples[("plait_runs_active", ())] == 0
        assert samples[("plait_lease_takeovers_total", ())] == 0


def test_step_counts_and_histogram_read_as_prometheus_own_would() -> None:
    """plait counts attempts into plain numbers and builds the families when scraped; what
    a scrape reads must be what ``prometheus_client``'s own Counter and Histogram give."""
    from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest

    from plait.metrics import _STEP_BUCKETS, Metrics

    ours = Metrics()
    registry = CollectorRegistry()
    steps = Counter("plait_steps", "", ["function", "status"], registry=registry)
    seconds = Histogram(
        "plait_step_seconds", "", ["function"], buckets=_STEP_BUCKETS, registry=registry
    )
    observations = [
        ("charge", "succeeded", 0.0004),
        ("charge", "succeeded", 0.001),  # on a bound: counted in it, as Prometheus does
        ("charge", "failed", 0.2),
        ("charge", "interrupted", 7.5),
        ("ship", "succeeded", 301.0),  # past the last bound: only +Inf
        ("ship", "succeeded", 0.05),
    ]
    for function, status, took in observations:
        ours.attempt_ended(function, status, took)
        steps.labels(function, status).inc()
        seconds.labels(function).observe(took)
    for function in ("charge", "ship"):
        for status in ("succeeded", "failed", "interrupted"):
            steps.labels(function, status)  # every status of a seen function is a series

    def wanted(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
        return {
            key: value
            for key, value in _samples(text).items()
            if key[0].startswith(("plait_steps_total", "plait_step_seconds"))
            and not key[0].endswith("_created")  # a timestamp, not a count
        }

    reference = wanted(generate_latest(registry).decode())
    assert reference  # the comparison compares something
    assert wanted(ours.render().decode()) == reference


async def test_metrics_are_404_when_off(tmp_path: Path) -> None:
    async with TestEngine(plait.App()) as env:
        assert await env.metrics_text() is None
        async with httpx.AsyncClient(
            transport=httpx.ASGITransport(app=create_app(env, no_auth=True)),
            base_url="http://127.0.0.1",
        ) as client:
            assert (await client.get("/metrics")).status_code == 404


# -- wf.logger -----------------------------------------------------------------------------


async def test_wf_logger_is_silent_while_replaying(
    database: str, caplog: pytest.LogCaptureFixture
) -> None:
    app = plait.App()

    @app.workflow
    async def chatty(wf: plait.Workflow, data: None) -> str:
        wf.logger.info("starting")
        await wf.do("one", lambda: 1)
        wf.logger.info("after one")
        await wf.sleep("nap", "1d")
        wf.logger.info("after the nap")
        await wf.wait_for_event("go")
        wf.logger.info("after the event")
        return "done"

    caplog.set_level(logging.INFO, logger="plait.workflow")
    async with TestEngine(app, database) as env:
        run_id = await env.start("chatty")
        await env.advance("1d")
        await env.send_event(run_id, "go")
        assert (await env.wait(run_id, timeout=10)).status == "completed"
    lines = [r.getMessage() for r in caplog.records if r.name == "plait.workflow.chatty"]
    assert lines == ["starting", "after one", "after the nap", "after the event"]


# -- the worker's lines ----------------------------------------------------------------------


def test_bad_worker_options_are_named() -> None:
    runner = CliRunner()
    result = runner.invoke(cli, ["worker", "x:app", "--log-format", "xml"])
    assert result.exit_code == 2 and "--log-format" in result.output
    result = runner.invoke(cli, ["worker", "x:app", "--metrics-port", "0"])
    assert result.exit_code == 2 and "--metrics-port" in result.output
    result = runner.invoke(cli, ["worker", "x:app", "--metrics-port", "http"])
    assert result.exit_code == 2 and "--metrics-port" in result.output


WORKER_APP = """
import plait

app = plait.App("logged")

@app.function(queued=True, retries=1, retry_delay=0.05)
async def remote(data: int, ctx: plait.StepContext) -> int:
    if ctx.attempt == 1:
        raise ConnectionError("first try fails")
    return data

@app.workflow
async def flow(wf: plait.Workflow, n: int) -> int:
    await wf.sleep("nap", 0.05)
    return await wf.do("local", lambda: n) + await wf.do("remote", remote, n)
"""


async def _metrics(port: int, deadline: float) -> str:
    async with httpx.AsyncClient() as client:
        while True:
            try:
                response = await client.get(f"http://127.0.0.1:{port}/metrics")
                return response.text
            except httpx.TransportError:
                if asyncio.get_running_loop().time() > deadline:
                    raise
                await asyncio.sleep(0.05)


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _start_worker(database: str, where: Path, port: int, log_path: Path) -> subprocess.Popen:
    """``plait worker`` for ``logged_app`` with JSON lines and metrics, logging to a file."""
    with log_path.open("w") as log_file:
        return subprocess.Popen(
            [
                sys.executable,
                "-m",
                "plait.cli",
                "worker",
                "logged_app:app",
                "--database",
                database,
                "--log-format",
                "json",
                "--metrics-port",
                str(port),
            ],
            env=_env(PYTHONPATH=os.pathsep.join([SRC, str(where)])),
            stdout=log_file,
            stderr=subprocess.STDOUT,
            cwd=where,
        )


async def test_worker_logs_json_lines_and_serves_metrics(database: str, tmp_path: Path) -> None:
    (tmp_path / "logged_app.py").write_text(WORKER_APP)
    port = _free_port()
    log_path = tmp_path / "worker.log"
    proc = _start_worker(database, tmp_path, port, log_path)
    try:
        import importlib

        sys.path.insert(0, str(tmp_path))
        try:
            worker_app = importlib.import_module("logged_app").app
        finally:
            sys.path.remove(str(tmp_path))
        async with plait.Engine(worker_app, database, workers=False) as engine:
            run_id = await engine.start("flow", 21)
            run = await engine.wait(run_id, timeout=30)
            assert run.status == "completed" and run.output == 42
            deadline = asyncio.get_running_loop().time() + 10
            text = await _metrics(port, deadline)
        samples = _samples(text)
        assert samples[("plait_runs_total", (("status", "completed"), ("workflow", "flow")))] == 1
        assert samples[("plait_steps_total", (("function", "remote"), ("status", "failed")))] == 1
        assert (
            samples[("plait_steps_total", (("function", "remote"), ("status", "succeeded")))] == 1
        )
    finally:
        proc.terminate()
        proc.wait(timeout=20)
    lines = [json.loads(line) for line in log_path.read_text().splitlines() if line.strip()]
    assert lines, "the worker wrote nothing"
    for line in lines:
        assert {"time", "level", "logger", "message", "run_id", "step", "attempt"} <= set(line)
    about_run = [ln for ln in lines if ln["run_id"] == run_id]
    messages = [ln["message"] for ln in about_run]
    assert any("nap fired" in m for m in messages), messages
    assert any(m.startswith("step remote attempt 1 started") for m in messages), messages
    assert any("retry 1 of 1" in m for m in messages), messages
    assert any(f"run {run_id} (flow) is now completed" in m for m in messages), messages
    remote = [ln for ln in about_run if ln["step"] == "remote"]
    assert {ln["attempt"] for ln in remote} == {1, 2}
    assert all(ln["level"] == "INFO" for ln in about_run)
