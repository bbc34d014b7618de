"""Park on exhausted retries (``on_exhausted="park"``) on both stores: a step whose last
attempt failed leaves its run ``needs_attention`` with the step's error instead of
failing it; ``retry`` gives the step a new budget and the run goes on from there (the
steps before it are not run again), ``cancel`` ends it. A function's own setting wins
over its workflow's; inline, job and graph steps park alike."""

from __future__ import annotations

from typing import Any

import pytest

import plait
from support.counter import Counter

#: the parts of the outside world the tests' functions call, and whether each is down
DOWN: set[str] = set()
CALLS = Counter()


def _call(name: str, value: Any = None) -> Any:
    CALLS.hit(name)
    if name in DOWN:
        raise RuntimeError(f"{name} is down")
    return name if value is None else value


app = plait.App("park-tests")


@app.function(retries=1, retry_delay="0s", on_exhausted="park")
def charge(amount: int) -> int:
    return int(_call("charge", amount))


@app.function(retries=0)
def reserve(item: str) -> str:
    return str(_call("reserve", item))


@app.function(retries=0, on_exhausted="fail")
def notify(who: str) -> str:
    return str(_call("notify", who))


@app.function(retries=0, queued=True, on_exhausted="park")
def ship(item: str) -> str:
    return str(_call("ship", item))


@app.workflow
async def checkout(wf: plait.Workflow, data: int) -> dict[str, Any]:
    item = await wf.do("reserve", reserve, "book")
    paid = await wf.do("charge", charge, data)
    return {"item": item, "paid": paid}


@app.workflow(on_exhausted="park")
async def careful(wf: plait.Workflow, data: Any) -> str:
    await wf.do("reserve", reserve, "book")
    return str(await wf.do("closure", lambda _: _call("closure"), None, retries=0))


@app.workflow(on_exhausted="park")
async def loud(wf: plait.Workflow, data: Any) -> str:
    return str(await wf.do("notify", notify, "ops"))


@app.workflow
async def shipping(wf: plait.Workflow, data: str) -> str:
    await wf.do("reserve", reserve, data)
    return str(await wf.do("ship", ship, data))


@app.workflow
async def catches(wf: plait.Workflow, data: Any) -> str:
    try:
        return str(await wf.do("charge", charge, 5))
    except plait.StepError:
        return "caught"


@pytest.fixture(autouse=True)
def _reset() -> None:
    DOWN.clear()
    CALLS.counts.clear()


async def _parked(engine: plait.Engine, run_id: str) -> plait.Run:
    run = await engine.wait(run_id, timeout=30)
    assert run.status == "needs_attention", run
    return run


async def test_a_parked_step_leaves_the_run_needs_attention_and_a_retry_completes_it(
    engine_factory: Any,
) -> None:
    DOWN.add("charge")
    async with engine_factory(app) as engine:
        run_id = await engine.start(checkout, 42)
        run = await _parked(engine, run_id)
        assert run.error is not None
        assert run.error["step"] == "charge"
        assert run.error["message"] == "charge is down"
        assert CALLS["charge"] == 2  # its whole budget: one try and one retry
        steps = {s.key: s for s in await engine.get_steps(run_id)}
        assert steps["charge"].status == "failed"
        with pytest.raises(plait.WorkflowNeedsAttentionError, match="needs attention"):
            await engine.run(checkout, 1, run_id=run_id)
        DOWN.clear()
        await engine.retry(run_id)
        done = await engine.wait(run_id, timeout=30)
        assert done.status == "completed", done
        assert done.output == {"item": "book", "paid": 42}
        assert CALLS["charge"] == 3  # the body ran again
        assert CALLS["reserve"] == 1  # the step before it did not


async def test_a_parked_run_is_listed_by_its_status_and_a_retry_that_fails_parks_it_again(
    engine_factory: Any,
) -> None:
    DOWN.add("charge")
    async with engine_factory(app) as engine:
        run_id = await engine.start(checkout, 7)
        await _parked(engine, run_id)
        listed = await engine.list_runs(status="needs_attention")
        assert [r.id for r in listed] == [run_id]
        assert await engine.list_runs(status="failed") == []
        await engine.retry(run_id)
        await _parked(engine, run_id)  # still down: a fresh budget, spent again
        assert CALLS["charge"] == 4


async def test_the_workflow_default_parks_its_closures_and_functions_that_do_not_say(
    engine_factory: Any,
) -> None:
    DOWN.update({"closure"})
    async with engine_factory(app) as engine:
        run_id = await engine.start(careful)
        run = await _parked(engine, run_id)
        assert run.error is not None and run.error["step"] == "closure"
        DOWN.clear()
        await engine.retry(run_id)
        assert (await engine.wait(run_id, timeout=30)).output == "closure"
        assert CALLS["reserve"] == 1


async def test_a_function_that_says_fail_fails_the_run_of_a_parking_workflow(
    engine_factory: Any,
) -> None:
    DOWN.add("notify")
    async with engine_factory(app) as engine:
        run_id = await engine.start(loud)
        run = await engine.wait(run_id, timeout=30)
        assert run.status == "failed", run
        assert run.error is not None and run.error["step"] == "notify"


async def test_a_parked_run_is_cancelled_by_a_cancel(engine_factory: Any) -> None:
    DOWN.add("charge")
    async with engine_factory(app) as engine:
        run_id = await engine.start(checkout, 1)
        await _parked(engine, run_id)
        with pytest.raises(plait.RunStateError, match="needs_attention; retry it"):
            await engine.resume(run_id)
        run = await engine.cancel(run_id, "refunded by hand")
        assert run.status == "cancelled"
        with pytest.raises(plait.RunStateError):
            await engine.retry(run_id)


async def test_a_parking_job_step_parks_its_run(engine_factory: Any) -> None:
    DOWN.add("ship")
    async with engine_factory(app) as engine:
        run_id = await engine.start(shipping, "lamp")
        run = await _parked(engine, run_id)
        assert run.error is not None and run.error["step"] == "ship"
        DOWN.clear()
        await engine.retry(run_id)
        assert (await engine.wait(run_id, timeout=30)).output == "lamp"
        assert CALLS["reserve"] == 1
        assert CALLS["ship"] == 2


async def test_the_workflow_never_sees_the_failure_of_a_parked_step(engine_factory: Any) -> None:
    DOWN.add("charge")
    async with engine_factory(app) as engine:
        run_id = await engine.start(catches)
        await _parked(engine, run_id)


async def test_bulk_retry_and_cancel_act_on_parked_runs(engine_factory: Any) -> None:
    DOWN.add("charge")
    async with engine_factory(app) as engine:
        ids = [await engine.start(checkout, n) for n in range(4)]
        for run_id in ids:
            await _parked(engine, run_id)
        assert await engine.cancel_runs(status="needs_attention") == 4
        assert [(await engine.get_run(r)).status for r in ids] == ["cancelled"] * 4

        more = [await engine.start(checkout, n) for n in range(3)]
        for run_id in more:
            await _parked(engine, run_id)
        DOWN.clear()
        assert await engine.retry_runs(status="needs_attention") == 3
        for run_id in more:
            assert (await engine.wait(run_id, timeout=30)).status == "completed"


def test_a_bad_on_exhausted_names_the_value_and_the_function_or_workflow() -> None:
    other = plait.App()

    def f(x: Any) -> Any:
        return x

    async def w(wf: plait.Workflow) -> None:
        return None

    with pytest.raises(ValueError, match=r"on_exhausted of function 'f' .*'stop'"):
        other.function(on_exhausted="stop")(f)  # type: ignore[call-overload]
    with pytest.raises(ValueError, match=r"on_exhausted of workflow 'w' .*'later'"):
        other.workflow(on_exhausted="later")(w)  # type: ignore[call-overload]
    assert other.functions == {} and other.workflows == {}
