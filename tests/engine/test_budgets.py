"""Spend budgets, on every store: steps report spend with ``ctx.spend``; a key (or a
queue) that spent its budget in the window admits nothing new and its runs wait
``queued`` (waiting on ``budget``) until the window frees, by themselves, in virtual
time (``TestEngine``) and in real time on a worker; other keys are not held."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest

import plait
from plait.testing import TestEngine
from support.polling import eventually


def budget_app(budget: str = "1000/10s", *, per_key: bool = True) -> plait.App:
    app = plait.App("budgets")
    app.queue("llm", budget={"tokens": budget}, budget_per_key=per_key)

    @app.function
    async def call(data: dict[str, Any], ctx: plait.StepContext) -> dict[str, Any]:
        ctx.spend(tokens=data["tokens"] / 2)
        ctx.spend(tokens=data["tokens"] / 2, usd=0.01)  # reports add up; any units
        return data

    @app.workflow(queue="llm")
    async def agent(wf: plait.Workflow, data: dict[str, Any]) -> dict[str, Any]:
        return await wf.do("call", call, data)

    return app


async def test_a_key_over_its_budget_waits_for_the_window_in_virtual_time(
    database: str,
) -> None:
    async with TestEngine(budget_app(), database) as engine:
        spent = await engine.start("agent", {"tokens": 1200}, key="a")
        assert (await engine.wait(spent, timeout=30)).status == "completed"
        spent_at = engine.now()
        held = await engine.start("agent", {"tokens": 1}, key="a")
        other = await engine.start("agent", {"tokens": 1}, key="b")
        await engine.advance("1s")
        assert (await engine.get_run(other)).status == "completed"  # key b is not held
        run = await engine.get_run(held)
        assert run.status == "queued"
        why = await engine.waiting_on(run)
        assert why is not None and (why.kind, why.name) == ("budget", "llm")
        assert "'a'" in why.message
        await engine.advance("8s")
        assert (await engine.get_run(held)).status == "queued"
        await engine.advance("2s")  # the 1,200 tokens left the window
        run = await engine.get_run(held)
        assert run.status == "completed"
        assert run.admitted_at is not None
        assert (run.admitted_at - spent_at).total_seconds() >= 10


async def test_waiting_for_a_held_run_skips_to_the_window_in_virtual_time(
    database: str,
) -> None:
    async with TestEngine(budget_app(), database) as engine:
        first = await engine.start("agent", {"tokens": 1000}, key="a")
        await engine.wait(first, timeout=30)
        before = engine.now()
        held = await engine.start("agent", {"tokens": 1}, key="a")
        run = await engine.wait(held, timeout=30)  # the clock jumps to when the window frees
        assert run.status == "completed"
        assert 10 <= (engine.now() - before).total_seconds() < 11


async def test_a_queue_budget_holds_every_key(database: str) -> None:
    async with TestEngine(budget_app(per_key=False), database) as engine:
        await engine.wait(await engine.start("agent", {"tokens": 600}, key="a"), timeout=30)
        await engine.wait(await engine.start("agent", {"tokens": 600}, key="b"), timeout=30)
        held = await engine.start("agent", {"tokens": 1}, key="c")
        await engine.advance("1s")
        why = await engine.waiting_on(held)
        assert why is not None and why.kind == "budget"
        assert why.message == "queue 'llm' spent its budget in the window"
        await engine.advance("10s")
        assert (await engine.get_run(held)).status == "completed"


async def test_a_held_key_goes_on_by_itself_on_a_real_worker(engine_factory: Any) -> None:
    # a long poll: only the window's end can wake the admission in time
    async with engine_factory(budget_app("1000/2s"), poll_interval=30) as engine:
        spent = await engine.start("agent", {"tokens": 1200}, key="a")
        await engine.wait(spent, timeout=30)
        spent_at = time.time()
        held = await engine.start("agent", {"tokens": 1}, key="a")
        other = await engine.start("agent", {"tokens": 1}, key="b")
        assert (await engine.wait(other, timeout=30)).status == "completed"
        assert (await engine.get_run(held)).status == "queued"

        async def waits_on_budget() -> bool:
            why = await engine.waiting_on(held)
            return why is not None and why.kind == "budget"

        await eventually(waits_on_budget, timeout=1, what="the held run waiting on budget")
        run = await engine.wait(held, timeout=20)
        assert run.status == "completed"
        assert run.admitted_at is not None
        waited = run.admitted_at.timestamp() - spent_at
        assert 1.0 < waited < 6.0, waited


@pytest.mark.parametrize(
    ("amounts", "named"),
    [
        ({"tokens": -1}, "spend of 'tokens'"),
        ({"tokens": "5"}, "spend of 'tokens'"),
        ({"tokens": float("nan")}, "spend of 'tokens'"),
        ({"tokens": True}, "spend of 'tokens'"),
    ],
)
def test_bad_spend_is_named(amounts: dict[str, Any], named: str) -> None:
    ctx = plait.StepContext(run_id="r", step_key="s", invocation_id="i", attempt=1, workflow="w")
    with pytest.raises(ValueError, match=named):
        ctx.spend(**amounts)


async def test_queued_steps_of_a_queue_over_its_budget_wait(engine_factory: Any) -> None:
    app = plait.App("tools")
    app.queue("tools", budget={"calls": "2/2s"})
    ran: list[float] = []

    @app.function(queued=True, queue="tools")
    async def tool(data: int, ctx: plait.StepContext) -> int:
        ran.append(time.monotonic())
        ctx.spend(calls=1)
        return data

    @app.workflow
    async def agent(wf: plait.Workflow, data: Any) -> list[int]:
        return [await wf.do(f"tool {n}", tool, n) for n in range(3)]

    async with engine_factory(app) as engine:
        run = await engine.wait(await engine.start("agent"), timeout=30)
    assert run.status == "completed" and run.output == [0, 1, 2]
    # the third call waited until the first two calls' spend left the 2 s window
    assert ran[2] - ran[0] >= 1.9


async def test_queue_depths_show_each_key_its_spend_and_why_it_waits(database: str) -> None:
    async with TestEngine(budget_app(), database) as engine:
        await engine.wait(await engine.start("agent", {"tokens": 1200}, key="a"), timeout=30)
        await engine.wait(await engine.start("agent", {"tokens": 10}, key="b"), timeout=30)
        await engine.start("agent", {"tokens": 1}, key="a")
        await engine.advance("1s")
        [llm] = [d for d in await engine.queue_depths() if d["queue"] == "llm"]
    assert llm["limits"]["budget"] == {"tokens": "1000/10s"}
    assert llm["limits"]["budget_per_key"] is True
    keys = {k["key"]: k for k in llm["keys"]}
    assert keys["a"] == {
        "key": "a",
        "queued": 1,
        "active": 0,
        "spent": {"tokens": 1200.0},
        "waiting": "budget",
    }
    assert keys["b"]["spent"] == {"tokens": 10.0} and keys["b"]["waiting"] is None


def test_plait_queues_prints_the_keys(tmp_path: Any) -> None:
    from typer.testing import CliRunner

    from plait.cli import cli

    db = f"sqlite:///{tmp_path / 'q.db'}"

    async def spend() -> None:
        async with TestEngine(budget_app(), db) as engine:
            await engine.wait(await engine.start("agent", {"tokens": 1200}, key="a"), timeout=30)
            await engine.start("agent", {"tokens": 1}, key="a")
            await engine.advance("1s")

    asyncio.run(spend())
    # the virtual clock started at the wall clock's time: the spend is in the window
    result = CliRunner().invoke(cli, ["queues", "--database", db])
    assert result.exit_code == 0, result.output
    assert "budget tokens 1000/10s, budget per key" in result.output
    assert "tokens 1200" in result.output
