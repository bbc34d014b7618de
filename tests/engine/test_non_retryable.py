"""Errors that will not get better: ``plait.NonRetryableError``, and the exception classes
a step's ``no_retry_on`` names (subclasses too), fail the step at its first attempt
whatever retries are left. Its ``on_error`` handler still runs, once, and the stored
error (the step's, the run's, the one the workflow catches) says ``"retryable": false``.
Every path: a function step, a closure step, a graph node, a queued step on the engine's
own step worker and on a ``plait worker`` process.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from typing import Any

import pytest

import plait
from support.counter import Counter
from support.polling import eventually


class Declined(Exception):
    """A payment the bank refused: asking again gives the same answer."""


class HardDeclined(Declined):
    pass


def _attempts(history: list[plait.StepAttempt], key: str) -> list[str]:
    return [a.status for a in history if a.key == key]


def _app(counter: Counter, error: BaseException, *, queued: bool = False, **options: Any):
    """An app whose ``charge`` raises ``error`` on every attempt, with an ``on_error``
    handler; the workflow lets the failure through."""
    app = plait.App()

    @app.function(retries=3, retry_delay=0, on_error="refund", queued=queued, **options)
    def charge(data: dict) -> str:
        counter.hit("charge")
        raise error

    @app.function
    def refund(data: dict) -> None:
        counter.hit("refund", data["error"])

    @app.workflow
    async def checkout(wf: plait.Workflow) -> str:
        return await wf.do("charge", charge, {"amount": 5})

    return app


async def _failed(engine: plait.Engine, workflow: str = "checkout") -> plait.Run:
    run_id = await engine.start(workflow)
    run = await engine.wait(run_id, timeout=15)
    assert run.status == "failed", run
    return run


# -- one attempt, on_error once, retryable false -------------------------------------------


CASES = {
    "NonRetryableError": ({}, plait.NonRetryableError("card declined", code="DECLINED")),
    "a class in no_retry_on": ({"no_retry_on": (Declined,)}, Declined("card declined")),
    "a subclass of one": ({"no_retry_on": [KeyError, Declined]}, HardDeclined("stolen card")),
}


@pytest.mark.parametrize("queued", [False, True], ids=["inline", "queued"])
@pytest.mark.parametrize("case", list(CASES))
async def test_an_error_that_will_not_get_better_fails_the_step_at_once(
    engine_factory, case: str, queued: bool
) -> None:
    options, error = CASES[case]
    counter = Counter()
    app = _app(counter, error, queued=queued, **options)
    async with engine_factory(app) as engine:
        started = time.monotonic()
        run = await _failed(engine)
        history = await engine.get_history(run.id)
        (step,) = [s for s in await engine.get_steps(run.id) if s.key == "charge"]
    assert time.monotonic() - started < 10
    assert counter["charge"] == 1 and counter["refund"] == 1
    assert _attempts(history, "charge") == ["failed"]
    assert _attempts(history, "charge:on_error") == ["succeeded"]
    assert step.status == "failed" and step.attempts == 1 and step.retries == 3
    assert step.error and step.error["retryable"] is False
    assert step.error["type"] == type(error).__name__
    assert run.error and run.error["retryable"] is False and run.error["step"] == "charge"
    (handed,) = [info for name, info in counter.calls if name == "refund"]
    assert handed["retryable"] is False  # the handler gets the same record
    if case == "NonRetryableError":
        assert step.error["code"] == "DECLINED" and step.error["message"] == "card declined"


@pytest.mark.parametrize("queued", [False, True], ids=["inline", "queued"])
async def test_a_class_not_in_no_retry_on_is_retried_as_before(
    engine_factory, queued: bool
) -> None:
    counter = Counter()
    app = _app(counter, RuntimeError("bank is down"), queued=queued, no_retry_on=(Declined,))
    async with engine_factory(app) as engine:
        run = await _failed(engine)
        history = await engine.get_history(run.id)
    assert counter["charge"] == 4 and counter["refund"] == 1
    assert _attempts(history, "charge") == ["failed"] * 4
    assert run.error and "retryable" not in run.error


async def test_the_workflow_catches_the_step_error_with_the_stored_record(engine_factory) -> None:
    counter = Counter()
    app = plait.App()

    @app.function(retries=2, retry_delay=0)
    def charge(data: None) -> str:
        counter.hit("charge")
        raise plait.NonRetryableError("card declined")

    @app.workflow
    async def checkout(wf: plait.Workflow) -> dict:
        try:
            await wf.do("charge", charge)
        except plait.StepError as exc:
            return {"code": exc.code, "error": exc.error}
        return {}

    async with engine_factory(app) as engine:
        run_id = await engine.start("checkout")
        run = await engine.wait(run_id, timeout=10)
        (step,) = await engine.get_steps(run_id)
    assert run.status == "completed" and run.output
    assert run.output["error"] == step.error
    assert run.output["error"]["retryable"] is False and run.output["code"] is None
    assert counter["charge"] == 1


# -- closures, call options, graphs ------------------------------------------------------------


async def test_a_closure_step_takes_no_retry_on(engine_factory) -> None:
    counter = Counter()
    app = plait.App()

    def parse(data: str) -> int:
        counter.hit(data)
        return int(data)

    @app.workflow
    async def parse_both(wf: plait.Workflow) -> list[str]:
        outcomes = []
        for text in ("x", "y"):
            options: dict[str, Any] = {"no_retry_on": (ValueError,)} if text == "x" else {}
            try:
                await wf.do(f"parse {text}", parse, text, retries=2, retry_delay=0, **options)
            except plait.StepError as exc:
                outcomes.append(str(exc.error.get("retryable")))
        return outcomes

    async with engine_factory(app) as engine:
        run_id = await engine.start("parse_both")
        run = await engine.wait(run_id, timeout=10)
    assert run.status == "completed" and run.output == ["False", "None"]
    assert counter.counts == {"x": 1, "y": 3}


async def test_the_calls_no_retry_on_wins_over_the_functions(engine_factory) -> None:
    counter = Counter()
    app = plait.App()

    @app.function(retries=2, retry_delay=0, no_retry_on=(ValueError,))
    def parse(data: str) -> int:
        counter.hit(data)
        return int(data)

    @app.workflow
    async def parse_both(wf: plait.Workflow) -> list[int]:
        attempts = []
        for text, options in (("own", {}), ("none", {"no_retry_on": ()})):
            with contextlib.suppress(plait.StepError):
                await wf.do(text, parse, text, **options)
            attempts.append(counter[text])
        return attempts

    async with engine_factory(app) as engine:
        run_id = await engine.start("parse_both")
        run = await engine.wait(run_id, timeout=10)
    assert run.status == "completed" and run.output == [1, 3]


async def test_a_graph_node_keeps_its_functions_no_retry_on(engine_factory) -> None:
    counter = Counter()
    app = plait.App()

    @app.function(retries=3, retry_delay=0, no_retry_on=(Declined,))
    def charge(data: Any) -> None:
        counter.hit("charge")
        raise Declined("card declined")

    @app.function
    def alert(data: Any) -> str:
        counter.hit("alert")
        return "paged"

    app.graph(
        "pay",
        {
            "nodes": {
                "charge": {"function": "charge", "retries": 2, "on_error": "alert"},
                "alert": {"function": "alert"},
            }
        },
    )
    async with engine_factory(app) as engine:
        run_id = await engine.start("pay")
        run = await engine.wait(run_id, timeout=10)
        steps = {s.key: s for s in await engine.get_steps(run_id)}
    assert run.status == "completed", run
    assert counter.counts == {"charge": 1, "alert": 1}
    assert steps["charge"].attempts == 1
    assert steps["charge"].error and steps["charge"].error["retryable"] is False


# -- bad options ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "named"),
    [
        (ValueError, "the class ValueError alone"),
        ("ValueError", "'ValueError'"),
        ((ValueError, "KeyError"), "'KeyError' is not an exception class"),
        ([ValueError, int], "<class 'int'> is not an exception class"),
        ((ValueError(),), "ValueError() is not an exception class"),
    ],
)
def test_a_bad_no_retry_on_of_a_function_is_a_type_error(value: Any, named: str) -> None:
    app = plait.App()
    with pytest.raises(TypeError) as info:
        app.function(name="charge", no_retry_on=value)(lambda data: data)
    assert "no_retry_on of function 'charge'" in str(info.value)
    assert named in str(info.value)
    assert "charge" not in app.functions  # nothing half registered


async def test_a_bad_no_retry_on_of_a_call_is_a_type_error_at_the_call(engine_factory) -> None:
    app = plait.App()

    @app.function(queued=True)
    def ship(data: Any) -> str:
        return "shipped"

    @app.workflow
    async def bad(wf: plait.Workflow) -> list[str]:
        messages = []
        try:
            wf.do("parse", int, "1", no_retry_on=(ValueError, 3))
        except TypeError as exc:
            messages.append(str(exc))
        try:
            await wf.do("ship", ship, no_retry_on=(ValueError,))
        except TypeError as exc:
            messages.append(str(exc))
        return messages

    async with engine_factory(app) as engine:
        run_id = await engine.start("bad")
        run = await engine.wait(run_id, timeout=10)
        assert await engine.get_steps(run_id) == []  # neither call recorded a step
    assert run.status == "completed" and run.output
    first, second = run.output
    assert "step 'parse': no_retry_on" in first and "3 is not an exception class" in first
    assert "no_retry_on cannot be given to a call of queued function 'ship'" in second


# -- a queued step in a plait worker process -------------------------------------------------


WORKER_APP = """
import os
import plait

app = plait.App()


class Declined(Exception):
    pass


def _note(line):
    with open(os.environ["NORETRY_LEDGER"], "a") as f:
        f.write(line + "\\n")


@app.function(queued=True, retries=3, retry_delay=0, on_error="refund", no_retry_on=(Declined,))
def charge(data):
    _note(f"charge {os.getpid()}")
    raise Declined("card declined")


@app.function
def refund(data):
    _note(f"refund {os.getpid()}")


@app.workflow
async def checkout(wf):
    return await wf.do("charge", charge, {})
"""


def _start_worker(database: str, cwd: Path, ledger: Path, log: Any) -> subprocess.Popen[bytes]:
    """``plait worker noretry_worker_app:app`` on the test's database."""
    command = ["worker", "noretry_worker_app:app", "--database", database, "--lease", "1"]
    return subprocess.Popen(
        [sys.executable, "-m", "plait.cli", *command, "--worker-id", "nrw"],
        cwd=cwd,
        env={**os.environ, "NORETRY_LEDGER": str(ledger), "PYTHONUNBUFFERED": "1"},
        stdout=log,
        stderr=subprocess.STDOUT,
    )


@pytest.mark.slow
@pytest.mark.timeout(120)
async def test_a_worker_process_fails_a_queued_step_at_once(database: str, tmp_path: Path) -> None:
    (tmp_path / "noretry_worker_app.py").write_text(textwrap.dedent(WORKER_APP))
    ledger = tmp_path / "ledger.txt"
    ledger.touch()
    sys.path.insert(0, str(tmp_path))
    try:
        import noretry_worker_app  # the same app in this process, which runs no work
    finally:
        sys.path.remove(str(tmp_path))
    log = (tmp_path / "worker.log").open("wb")
    worker = _start_worker(database, tmp_path, ledger, log)
    try:
        async with plait.Engine(noretry_worker_app.app, database, workers=False) as engine:
            run_id = await engine.start("checkout")

            async def ended() -> plait.Run | None:
                run = await engine.get_run(run_id)
                return run if run.status in ("completed", "failed", "cancelled") else None

            run = await eventually(ended, timeout=60, what="the run to end")
            history = await engine.get_history(run_id)
    finally:
        worker.terminate()
        with contextlib.suppress(subprocess.TimeoutExpired):
            await asyncio.to_thread(worker.wait, 20)
        if worker.poll() is None:
            worker.kill()
        log.close()
        sys.modules.pop("noretry_worker_app", None)
    lines = ledger.read_text().split()
    assert run.status == "failed" and run.error and run.error["retryable"] is False
    assert _attempts(history, "charge") == ["failed"]
    assert lines.count("charge") == 1 and lines.count("refund") == 1
    assert str(worker.pid) in lines  # the body ran in the worker process
