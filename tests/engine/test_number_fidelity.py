"""Values come back exactly as they went in, on both stores: a float stays a float (``1e300``,
``1e16``, ``-0.0``, ``5e-324``), an int stays an int at any size, text keeps every code
point. PostgreSQL's jsonb gave ``1e300`` back as a 301-digit int and ``-0.0`` as ``0``."""

from __future__ import annotations

import asyncio
import math
from typing import Any

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

import plait
from plait.errors import NotJSONError

#: the numbers that jsonb changed, and ints past what SQLite's integers hold
TRICKY: list[Any] = [
    1e300,
    1e16,
    -0.0,
    5e-324,
    1.0,
    -1e-300,
    1.7976931348623157e308,
    2**63,
    2**64 + 1,
    -(2**63) - 1,
    10**40,
    123456789012345678901234567890.5,
]

_TEXT = st.text(st.characters(exclude_categories=("Cs",), exclude_characters="\x00"), max_size=12)
JSON_VALUES = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.integers(min_value=-(10**60), max_value=10**60)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.sampled_from(TRICKY)
    | _TEXT,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(_TEXT, inner, max_size=4),
    max_leaves=12,
)


def same(got: Any, want: Any) -> bool:
    """Equal, of the same types at every depth, a negative zero still negative."""
    if type(got) is not type(want):
        return False
    if isinstance(want, float):
        return got == want and math.copysign(1.0, got) == math.copysign(1.0, want)
    if isinstance(want, list):
        return len(got) == len(want) and all(same(g, w) for g, w in zip(got, want, strict=True))
    if isinstance(want, dict):
        # an object's keys are a set (a schedule's definition is stored with them sorted)
        return set(got) == set(want) and all(same(got[k], want[k]) for k in want)
    return bool(got == want)


def echo_app() -> plait.App:
    app = plait.App()

    @app.function(name="ident")
    async def ident(data: Any) -> Any:
        return data

    @app.workflow
    async def echo(wf: plait.Workflow, data: Any) -> Any:
        result = await wf.do("ident", "ident", data)
        await wf.set_value("seen", data)
        event = await wf.wait_for_event("back", timeout=30)
        return {"step": result, "event": event, "input": data}

    return app


async def roundtrip(engine: plait.Engine, value: Any) -> None:
    run_id = await engine.start("echo", value)
    await engine.send_event(run_id, "back", value)
    run = await engine.wait(run_id, timeout=20)
    assert run.status == "completed", run.error
    # read back from the store, the run's pass replayed the step after the event came
    assert same(run.input, value), (run.input, value)
    assert same(run.output, {"step": value, "event": value, "input": value}), run.output
    assert same(await engine.get_value(run_id, "seen"), value)
    (step,) = [s for s in await engine.get_steps(run_id) if s.name == "ident"]
    assert same(step.input, value) and same(step.output, value), (step.input, step.output)
    (attempt,) = [a for a in await engine.get_history(run_id) if a.key == step.key]
    assert same(attempt.output, value)


@pytest.mark.parametrize("value", TRICKY, ids=repr)
async def test_a_tricky_number_comes_back_as_it_went_in(engine_factory, value: Any) -> None:
    async with engine_factory(echo_app()) as engine:
        await roundtrip(engine, value)
        await roundtrip(engine, {"n": value, "list": [value, -1, "x"]})


@settings(
    max_examples=40,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(value=JSON_VALUES)
@example(value=TRICKY)
@example(value={"\U0001f600 \u2028 \ufeff": ["\u00e9", "\U0010ffff"]})
def test_any_json_value_round_trips_through_every_kind_of_record(database: str, value: Any) -> None:
    """Through a step's input, result and history, a run's input and output, an event's
    payload and a published value, on a replay too."""
    runner = _runner(database)
    runner.run(roundtrip(_ENGINES[database], value))


_RUNNERS: dict[str, asyncio.Runner] = {}
_ENGINES: dict[str, plait.Engine] = {}


def _runner(database: str) -> asyncio.Runner:
    """One event loop and one engine per database for all of the property's examples (an
    engine per example would spend the test opening pools)."""
    if database not in _RUNNERS:
        for old, runner in list(_RUNNERS.items()):
            runner.run(_ENGINES.pop(old).close())
            runner.close()
            del _RUNNERS[old]
        runner = _RUNNERS[database] = asyncio.Runner()
        engine = _ENGINES[database] = plait.Engine(echo_app(), database, poll_interval=0.2)
        runner.run(engine.open())
    return _RUNNERS[database]


@pytest.fixture(autouse=True)
def _close_engines() -> Any:
    yield
    for database, runner in list(_RUNNERS.items()):
        runner.run(_ENGINES.pop(database).close())
        runner.close()
        del _RUNNERS[database]


async def test_a_lone_surrogate_is_refused_naming_the_value(engine_factory) -> None:
    """Text with half of a surrogate pair cannot be stored as UTF-8 on either store: it is
    refused where it enters, with the thing that carries it named."""
    async with engine_factory(echo_app()) as engine:
        with pytest.raises(NotJSONError, match="surrogate") as info:
            await engine.start("echo", {"text": "broken \ud800 half"})
        assert "input" in str(info.value)


def gates_app() -> plait.App:
    app = plait.App()

    @app.workflow
    async def asks(wf: plait.Workflow, data: Any) -> Any:
        req = await wf.wait_for_request("ask", timeout=30)
        await req.reply({"back": req.data})
        decision = await wf.approval("gate")
        return {"request": req.data, "approval": decision.data, "input": data}

    return app


async def test_request_approval_and_schedule_values_come_back_as_they_went_in(
    engine_factory,
) -> None:
    """The values of requests (data and reply), approval decisions and schedules (their
    input, and the input of the runs they start) keep their numbers too."""
    value = {"n": TRICKY, "zero": -0.0, "big": 2**70}
    async with engine_factory(gates_app()) as engine:
        run_id = await engine.start("asks", value)
        reply = await engine.request(run_id, "ask", value)
        assert same(reply, {"back": value}), reply
        await engine.approve(run_id, "gate", value)
        run = await engine.wait(run_id, timeout=20)
        assert run.status == "completed", run.error
        assert same(run.output, {"request": value, "approval": value, "input": value})
        (decision,) = await engine.get_decisions(run_id)
        assert same(decision.data, value)
        made = await engine.create_schedule("tricky", workflow="asks", every="1h", input=value)
        assert same(made.input, value)
        assert same((await engine.get_schedule("tricky")).input, value)
        started = await engine.trigger_schedule("tricky")
        assert same((await engine.get_run(started)).input, value)
