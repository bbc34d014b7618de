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
from collections.abc import Callable
from pathlib import Path

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families
from typer.testing import CliRunner

import plait
from plait.cli import cli
from plait.http import create_app
from plait.testing import TestEngine
from support.paths import ROOT
from support.polling import eventually
from support.ports import free_port

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

    from support.otel_setup import memory_exporter

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


def mixed_app(ran: Counter[str]) -> plait.App:
    """Every kind of step body a pass runs or replays. ``ran`` counts each body that
    really ran, by function (closures as ``(inline)``)."""
    app = plait.App()

    @app.function(queued=True)
    async def remote(data: int) -> int:
        ran["remote"] += 1
        return data * 2

    @app.function(retries=2, retry_delay=0)
    async def shaky(data: int, ctx: plait.StepContext) -> int:
        ran["shaky"] += 1
        if ctx.attempt < 2:
            raise ValueError("once")
        return data

    @app.function(retries=0)
    async def broken(data: int) -> int:
        ran["broken"] += 1
        raise RuntimeError("always")

    @app.function(retries=1, retry_delay=0)
    async def prepare(data: int, ctx: plait.StepContext) -> int:
        ran["prepare"] += 1
        if ctx.attempt == 1:
            raise ConnectionError("first try fails")
        return data + 1

    def closure(value: int) -> Callable[[], int]:
        def body() -> int:
            ran["(inline)"] += 1
            return value

        return body

    @app.workflow
    async def good(wf: plait.Workflow, n: int) -> int:
        # an inline function step and a closure before the sleep: the pass after it
        # replays them, in this engine
        prepared = await wf.do("prepare", prepare, n)
        tagged = await wf.do("tag", closure(n))
        await wf.sleep("nap", "1h")
        remote_and_shaky = await wf.do("remote", remote, n) + await wf.do("shaky", shaky, n)
        return prepared + tagged + remote_and_shaky

    @app.workflow
    async def restarted(wf: plait.Workflow, n: int) -> int:
        # recorded by one engine, replayed by the next one after the sleep
        prepared = await wf.do("prepare", prepare, n)
        tagged = await wf.do("tag", closure(n))
        await wf.sleep("nap", "1h")
        return prepared + tagged + await wf.do("after", closure(10))

    @app.workflow
    async def bad(wf: plait.Workflow, n: int) -> int:
        return await wf.do("broken", broken, n)

    @app.workflow
    async def gated(wf: plait.Workflow, n: int) -> str:
        await wf.suspend("review")
        return "never"

    return app


async def _scrape(env: TestEngine) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """What Prometheus reads from ``plait serve``'s ``/metrics`` for this engine."""
    async with httpx.AsyncClient(
        transport=httpx.ASGITransport(app=create_app(env, no_auth=True)),
        base_url="http://127.0.0.1",
    ) as client:
        response = await client.get("/metrics")
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/plain")
    return _samples(response.text)


async def _napping(env: TestEngine, run_ids: list[str]) -> bool:
    """Every run waits on its ``nap`` and no pass of the engine is still going."""
    for run_id in run_ids:
        steps = {s.key: s for s in await env.get_steps(run_id)}
        if "nap" not in steps or steps["nap"].status != "scheduled":
            return False
    return not env.worker.busy


async def test_metrics_match_the_records_after_a_mixed_load(database: str) -> None:
    """Every attempt counted once, by the engine whose process ran its body: never again
    by a later pass that replays it, nor by another engine that replays it after a
    restart. Closures count under ``(inline)``."""
    ran: Counter[str] = Counter()
    app = mixed_app(ran)

    # the first engine records two steps of each ``restarted`` run, and is closed while
    # the runs sleep
    async with TestEngine(app, database, metrics=True, time_skipping=False) as first:
        restarted = [await first.start("restarted", n) for n in range(3)]
        await eventually(lambda: _napping(first, restarted), what="the runs to sleep")
        before = await _scrape(first)
        stopped_at = first.now()
    ran_before = Counter(ran)
    assert ran_before == {"prepare": 6, "(inline)": 3}

    async with TestEngine(app, database, metrics=True, start=stopped_at) as env:
        ids = [await env.start("good", n) for n in range(4)]
        ids += [await env.start("bad", n) for n in range(2)]
        ids += [await env.start("gated", n) for n in range(2)]
        for run_id in [*restarted, *ids]:
            await env.wait(run_id, timeout=10)
        assert [(await env.get_run(r)).output for r in restarted] == [11, 13, 15]
        await env.cancel(ids[-1])
        await eventually(lambda: _idle(env), what="the engine's passes to end")
        after = await _scrape(env)

        runs = await env.list_runs(limit=100)
        samples = Counter[tuple[str, tuple[tuple[str, str], ...]]]()
        for key, value in [*before.items(), *after.items()]:
            if key[0] in ("plait_runs_total", "plait_steps_total"):
                samples[key] += value
        for workflow in ("good", "restarted", "bad", "gated"):
            for status in ("completed", "failed", "cancelled"):
                recorded = sum(1 for r in runs if r.workflow == workflow and r.status == status)
                key = ("plait_runs_total", (("status", status), ("workflow", workflow)))
                assert samples.get(key, 0) == recorded, (workflow, status)
        # a move is counted when it happens: both gated runs were suspended once, one of
        # them is cancelled now
        key = ("plait_runs_total", (("status", "suspended"), ("workflow", "gated")))
        assert samples[key] == 2
        attempts: Counter[tuple[str, str]] = Counter()
        for run in runs:
            steps = {s.key: s for s in await env.get_steps(run.id)}
            for attempt in await env.get_history(run.id):
                step = steps[attempt.key]
                if step.kind == "do" and step.child_run_id is None:
                    attempts[(step.function or "(inline)", str(attempt.status))] += 1
        counted = {
            (dict(labels)["function"], dict(labels)["status"]): value
            for (name, labels), value in samples.items()
            if name == "plait_steps_total" and value
        }
        assert counted == attempts
        # ...and each attempt is a body that ran once
        by_function: Counter[str] = Counter()
        for (function, _status), n in attempts.items():
            by_function[function] += n
        assert by_function == ran
        assert attempts[("shaky", "failed")] == 4 and attempts[("remote", "succeeded")] == 4
        # 4 good runs and 3 restarted ones, each a failed attempt and a retry
        assert attempts[("prepare", "failed")] == 7 and attempts[("prepare", "succeeded")] == 7
        # a tag in each of the 7, an "after" in each restarted run
        assert attempts[("(inline)", "succeeded")] == 10
        # what the first engine ran, it counted; the second engine counted none of it
        assert before[("plait_steps_total", (("function", "prepare"), ("status", "failed")))] == 3
        assert (
            before[("plait_steps_total", (("function", "(inline)"), ("status", "succeeded")))] == 3
        )
        assert after[("plait_steps_total", (("function", "prepare"), ("status", "failed")))] == 4
        assert (
            after[("plait_steps_total", (("function", "(inline)"), ("status", "succeeded")))] == 7
        )
        assert after[("plait_step_seconds_count", (("function", "remote"),))] == 4
        assert after[("plait_runs_active", ())] == 0
        assert after[("plait_lease_takeovers_total", ())] == 0


def _depths(samples: dict[tuple[str, tuple[tuple[str, str], ...]], float]) -> dict[str, float]:
    return {
        dict(labels)["queue"]: value
        for (name, labels), value in samples.items()
        if name == "plait_queue_depth"
    }


async def test_queue_depth_counts_the_queued_steps_a_worker_could_take_now(
    database: str,
) -> None:
    """``plait_queue_depth`` is the backlog of queued steps per function: due and held by
    no worker, such as steps waiting for a slot of their queue. A step in a retry's
    back-off waits for time, not for a worker, and a run waiting for admission is not a
    queued step (``plait queues`` counts those)."""
    app = plait.App()
    app.queue("emails", concurrency=1)
    app.queue("imports", concurrency=1)
    sending = asyncio.Event()
    release = asyncio.Event()

    @app.function(queue="emails")
    async def send(data: int) -> int:
        sending.set()
        await release.wait()
        return data

    @app.function(queued=True, retries=1, retry_delay="1h")
    async def flaky(data: None, ctx: plait.StepContext) -> int:
        if ctx.attempt == 1:
            raise ConnectionError("first try fails")
        return ctx.attempt

    @app.workflow
    async def mail(wf: plait.Workflow, n: int) -> int:
        return await wf.do("send", send, n)

    @app.workflow
    async def retrying(wf: plait.Workflow, data: None) -> int:
        return await wf.do("flaky", flaky)

    @app.workflow(queue="imports")
    async def load(wf: plait.Workflow, data: None) -> str:
        return str(await wf.wait_for_event("go"))

    async with TestEngine(app, database, metrics=True, time_skipping=False) as env:
        try:
            retry_id = await env.start("retrying")

            async def backing_off() -> bool:
                steps = await env.get_steps(retry_id)
                return [(s.status, s.attempts) for s in steps] == [("scheduled", 1)]

            await eventually(backing_off, what="the first attempt to fail")
            assert _depths(await _scrape(env)).get("flaky", 0) == 0

            mails = [await env.start("mail", n) for n in range(3)]
            loads = [await env.start("load") for _ in range(2)]
            await asyncio.wait_for(sending.wait(), 10)

            async def all_enqueued() -> bool:
                for run_id in mails:
                    steps = await env.get_steps(run_id)
                    if [s.status for s in steps] not in (["scheduled"], ["running"]):
                        return False
                statuses = sorted([(await env.get_run(r)).status for r in loads])
                return statuses == ["queued", "running"]

            await eventually(all_enqueued, what="every mail's step to be enqueued")

            async def two_waiting() -> bool:
                return _depths(await _scrape(env)) == {"send": 2}

            # one send holds the queue's only slot; two wait for it. Polled: the worker's
            # claim of the first may still be on its way
            await eventually(two_waiting, what="two sends waiting for the slot")
            assert _depths(await _scrape(env)) == {"send": 2}
        finally:
            release.set()
        for run_id in mails:
            assert (await env.wait(run_id, timeout=10)).status == "completed"
        for run_id in loads:
            await env.send_event(run_id, "go", 1)
            assert (await env.wait(run_id, timeout=10)).status == "completed"
        await env.advance("1h")
        assert (await env.wait(retry_id, timeout=10)).output == 2
        assert _depths(await _scrape(env)) == {"send": 0}


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


async def test_an_approvals_expiry_is_logged_as_a_timer_fire(
    database: str, caplog: pytest.LogCaptureFixture
) -> None:
    """The deadline of a gate is a durable timer like a sleep's: the worker logs its
    firing, whether the gate expires waiting or right after refusing decisions held for
    it."""
    app = plait.App()

    @app.workflow
    async def gate(wf: plait.Workflow, expires: str) -> bool:
        await wf.sleep("nap", "1h")
        decision = await wf.approval("sign-off", expires=expires, approvers=["dana"])
        return decision.expired

    caplog.set_level(logging.INFO, logger="plait.worker")
    # the engine logs what ``plait worker`` logs (it has log_work on)
    async with TestEngine(app, database, log_work=True) as env:
        waited = await env.start("gate", "2d")
        assert (await env.wait(waited, timeout=10)).output is True
        refused = await env.start("gate", "0s")
        await env.approve(refused, "sign-off", decided_by="eve")  # held, then refused
        assert (await env.wait(refused, timeout=10)).output is True
        (decision,) = await env.get_decisions(refused)
        assert decision.outcome == "refused"
    for run_id in (waited, refused):
        fired = [
            r
            for r in caplog.records
            if r.name == "plait.worker" and getattr(r, "run_id", None) == run_id
        ]
        messages = [r.getMessage() for r in fired]
        assert f"run {run_id}: approval expiry of __approval:sign-off fired" in messages
        assert messages.count(f"run {run_id}: sleep nap fired") == 1, messages
        line = next(r for r in fired if "approval expiry" in r.getMessage())
        assert line.levelno == logging.INFO and getattr(line, "step", None) == "__approval:sign-off"


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
    port = free_port()
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
    assert all(
        ln["level"] == ("WARNING" if "failed" in ln["message"] else "INFO") for ln in about_run
    )
