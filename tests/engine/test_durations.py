"""Every duration plait takes accepts seconds, strings like "500ms" and ``timedelta``; a
bad one is refused naming the value."""

from __future__ import annotations

import time
from datetime import timedelta

import pytest

import plait
from plait.durations import parse_duration
from plait.graph import GraphBuilder


@pytest.mark.parametrize(
    ("value", "seconds"),
    [
        (2, 2.0),
        (0.5, 0.5),
        ("500ms", 0.5),
        ("1m30s", 90.0),
        (timedelta(milliseconds=250), 0.25),
        (timedelta(days=1, hours=2), 93600.0),
    ],
)
def test_seconds_strings_and_timedeltas(value: object, seconds: float) -> None:
    assert parse_duration(value) == seconds


@pytest.mark.parametrize(
    ("value", "shown"),
    [
        ("soon", "'soon'"),
        (timedelta(seconds=-1), "timedelta(days=-1, seconds=86399)"),
        (float("nan"), "nan"),
        (True, "True"),
        ([1], "[1]"),
        ("5 fortnights", "'5 fortnights'"),
        (1e12, "1000000000000.0"),
        ("36600d", "'36600d'"),
        (timedelta(days=36600), "timedelta(days=36600)"),
    ],
)
def test_a_bad_duration_names_what_and_the_value(value: object, shown: str) -> None:
    with pytest.raises(ValueError, match="invalid duration of sleep 'nap'") as info:
        parse_duration(value, what="duration of sleep 'nap'")
    assert shown in str(info.value)


def test_registration_and_builders_take_timedeltas() -> None:
    app = plait.App()

    @app.function(retry_delay=timedelta(milliseconds=200), timeout=timedelta(minutes=1))
    async def f(data: None) -> None: ...

    assert app.functions["f"].timeout == 60.0
    assert app.functions["f"].policy.delay == 0.2
    spec = app.schedule(
        "tick", workflow="w", every=timedelta(hours=1), catchup=timedelta(minutes=5)
    )
    assert (spec.every, spec.catchup) == (3600.0, 300.0)
    graph = GraphBuilder("g").node("a", "f", retry_delay=timedelta(seconds=2)).build()
    assert graph.nodes["a"].retry_delay == 2.0
    as_dict = plait.App().graph(
        "g", {"nodes": {"a": {"function": "f", "timeout": timedelta(seconds=3)}}}
    )
    assert as_dict.nodes["a"].timeout == 3.0
    with pytest.raises(ValueError, match=r"invalid timeout of function 'g'.*timedelta"):
        app.function(name="g", timeout=timedelta(seconds=-5))(lambda data: data)


async def test_workflows_take_timedeltas_everywhere(engine_factory) -> None:
    app = plait.App()
    attempts: list[float] = []

    @app.function(retries=1, retry_delay=timedelta(milliseconds=50))
    async def flaky(data: None) -> str:
        attempts.append(time.monotonic())
        if len(attempts) == 1:
            raise ConnectionError("first attempt fails")
        return "ok"

    @app.workflow
    async def w(wf: plait.Workflow, data: None) -> dict:
        await wf.sleep("nap", timedelta(milliseconds=20))
        done = await wf.do("flaky", flaky, timeout=timedelta(seconds=30))
        try:
            await wf.wait_for_event("never", timeout=timedelta(milliseconds=30))
        except plait.EventTimeout:
            timed_out = True
        decision = await wf.approval("ok", expires=timedelta(milliseconds=30))
        return {"done": done, "timed_out": timed_out, "expired": decision.expired}

    async with engine_factory(app) as engine:
        output = await engine.run("w", timeout=20)
        assert output == {"done": "ok", "timed_out": True, "expired": True}
        assert attempts[1] - attempts[0] >= 0.05
        run_id = await engine.start("w", delay=timedelta(hours=1))
        assert (await engine.get_run(run_id)).status == "queued"


async def test_a_bad_sleep_fails_the_run_naming_the_value(engine_factory) -> None:
    app = plait.App()

    @app.workflow
    async def w(wf: plait.Workflow, data: None) -> None:
        await wf.sleep("nap", timedelta(seconds=-3))

    async with engine_factory(app) as engine:
        with pytest.raises(plait.WorkflowFailedError, match=r"duration of sleep 'nap'.*-1"):
            await engine.run("w", timeout=10)


def test_the_longest_duration_is_a_hundred_years() -> None:
    assert parse_duration("36500d") == 36500 * 86400.0
    with pytest.raises(ValueError, match="longer than 100 years"):
        parse_duration(100 * 365.25 * 86400.0 + 1)


async def test_a_sleep_too_long_to_store_fails_the_run_and_leaves_it_readable(
    engine_factory,
) -> None:
    """A wake-up time past what a timestamp holds was stored once, and then the run's
    steps could not be read back at all."""
    app = plait.App()

    @app.workflow
    async def w(wf: plait.Workflow, data: None) -> None:
        await wf.do("before", lambda: 1)
        await wf.sleep("forever", 1e12)

    async with engine_factory(app) as engine:
        run_id = await engine.start("w")
        run = await engine.wait(run_id, timeout=10)
        assert run.status == "failed"
        assert "duration of sleep 'forever'" in run.error["message"]
        assert "longer than 100 years" in run.error["message"]
        steps = await engine.get_steps(run_id)
        assert [(s.name, s.status) for s in steps] == [("before", "succeeded")]
