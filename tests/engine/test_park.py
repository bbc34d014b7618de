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
from support.polling import eventually

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
        held = await engine.store.load_pass(run_id)
        assert held is not None and held.run.lease_owner is None and held.run.wake_at is None
        # a check of the deployed code replays it as it is, with no body run
        (checked,) = await engine.check(workflow="checkout")
        assert (checked.run_id, checked.ok) == (run_id, True)
        assert CALLS["charge"] == 2
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


# -- queues, de-duplication keys, parents ----------------------------------------------------

queued_app = plait.App("park-queues")
queued_app.queue("partner", concurrency=1)


@queued_app.function(retries=0, on_exhausted="park")
def partner(data: str) -> str:
    return str(_call(data))


@queued_app.workflow(queue="partner")
async def through_queue(wf: plait.Workflow, data: str) -> str:
    return str(await wf.do("call", partner, data))


@queued_app.workflow
async def parent(wf: plait.Workflow, data: str) -> str:
    return str(await wf.do("child", "through_queue", data))


async def test_a_parked_run_gives_its_queue_slot_back_and_keeps_its_dedup_key(
    engine_factory: Any,
) -> None:
    DOWN.add("stuck")
    async with engine_factory(queued_app) as engine:
        stuck = await engine.start(through_queue, "stuck", dedup="order-1")
        await _parked(engine, stuck)
        # the queue admits one run at a time: the parked run holds no slot
        fine = await engine.start(through_queue, "fine")
        assert (await engine.wait(fine, timeout=30)).output == "fine"
        # its key is still taken: a start with it gets the parked run
        assert await engine.start(through_queue, "again", dedup="order-1") == stuck
        DOWN.clear()
        retried = await engine.retry(stuck)
        assert retried.status == "queued"  # it waits for admission again, as it gave its slot
        assert (await engine.wait(stuck, timeout=30)).output == "stuck"
        # ended, it frees the key
        assert await engine.start(through_queue, "next", dedup="order-1") != stuck


async def test_a_parent_keeps_waiting_on_a_parked_child_and_goes_on_after_its_retry(
    engine_factory: Any,
) -> None:
    DOWN.add("kid")
    async with engine_factory(queued_app) as engine:
        run_id = await engine.start(parent, "kid")
        steps = await _eventually_child(engine, run_id)
        child_id = steps["child"].child_run_id
        assert child_id is not None
        await _parked(engine, child_id)
        assert (await engine.get_run(run_id)).status == "running"
        assert steps["child"].status == "running"
        DOWN.clear()
        await engine.retry(child_id)
        done = await engine.wait(run_id, timeout=30)
        assert done.status == "completed" and done.output == "kid"


async def _eventually_child(engine: plait.Engine, run_id: str) -> dict[str, plait.Step]:
    from support.polling import eventually

    async def started() -> dict[str, plait.Step] | None:
        steps = {s.key: s for s in await engine.get_steps(run_id)}
        child = steps.get("child")
        return steps if child is not None and child.child_run_id else None

    return await eventually(started, what="the child run to start")


async def test_a_cancelled_parent_takes_its_parked_child_with_it(engine_factory: Any) -> None:
    DOWN.add("orphan")
    async with engine_factory(queued_app) as engine:
        run_id = await engine.start(parent, "orphan")
        child_id = (await _eventually_child(engine, run_id))["child"].child_run_id
        assert child_id is not None
        await _parked(engine, child_id)
        await engine.cancel(run_id)
        assert (await engine.get_run(child_id)).status == "cancelled"


# -- graphs ---------------------------------------------------------------------------------

graph_app = plait.App("park-graphs")


@graph_app.function(retries=0, on_exhausted="park")
def flaky(data: Any) -> str:
    return str(_call("flaky", "flaky"))


@graph_app.function(retries=0, queued=True, on_exhausted="park")
def flaky_job(data: Any) -> str:
    return str(_call("flaky_job", "flaky_job"))


@graph_app.function
def first(data: Any) -> str:
    return str(_call("first", "first"))


@graph_app.function
def handler(data: Any) -> str:
    return "handled"


for _name, _function in (("inline", "flaky"), ("job", "flaky_job")):
    graph_app.graph(
        f"graph_{_name}",
        {
            "nodes": {
                "a": {"function": "first", "next": "b"},
                "b": {"function": _function, "on_error": "h"},
                "h": {"function": "handler"},
            },
            "output": {"b": {"$ref": "b"}},
        },
    )


@pytest.mark.parametrize("mode", ["inline", "job"])
async def test_a_graph_node_whose_function_parks_leaves_the_run_needs_attention(
    engine_factory: Any, mode: str
) -> None:
    name = "flaky" if mode == "inline" else "flaky_job"
    DOWN.add(name)
    async with engine_factory(graph_app) as engine:
        run_id = await engine.start(f"graph_{mode}")
        run = await _parked(engine, run_id)
        assert run.error is not None and run.error["message"] == f"{name} is down"
        keys = {s.key for s in await engine.get_steps(run_id)}
        assert not any(k.startswith("h") for k in keys), keys  # no error edge taken
        DOWN.clear()
        await engine.retry(run_id)
        done = await engine.wait(run_id, timeout=30)
        assert done.status == "completed", done
        assert done.output == {"b": name}
        assert CALLS["first"] == 1 and CALLS[name] == 2


# -- logs -----------------------------------------------------------------------------------


async def test_parking_is_logged_as_an_error_naming_the_step(
    database: str, caplog: pytest.LogCaptureFixture
) -> None:
    import logging

    from plait.testing import TestEngine
    from support.polling import eventually

    caplog.set_level(logging.INFO, logger="plait.worker")
    DOWN.add("charge")
    async with TestEngine(app, database, log_work=True) as env:
        run_id = await env.start(checkout, 3)
        await _parked(env, run_id)

        async def logged() -> list[logging.LogRecord]:
            return [r for r in caplog.records if r.getMessage().startswith(f"run {run_id} ")]

        (line,) = await eventually(logged, what="the log line of the parked run")
    assert line.levelno == logging.ERROR
    message = line.getMessage()
    assert "parked needs_attention: step 'charge' failed its last attempt" in message
    assert "RuntimeError: charge is down" in message
    assert getattr(line, "workflow", None) == "checkout"


async def test_a_parked_run_is_counted_by_its_status_in_the_metrics(database: str) -> None:
    pytest.importorskip("prometheus_client", reason="the metrics extra is not installed")
    from plait.testing import TestEngine

    DOWN.add("charge")
    async with TestEngine(app, database, metrics=True) as env:
        run_id = await env.start(checkout, 3)
        await _parked(env, run_id)
        counted = 'plait_runs_total{status="needs_attention",workflow="checkout"} 1.0'

        async def shown() -> bool:
            # the pass counts the move once its commit returned; a waiter may hear of the
            # move a moment before
            return counted in (await env.metrics_text() or b"").decode()

        await eventually(shown, what="the parked run to be counted")
