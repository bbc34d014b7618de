"""Testing a workflow with plait's pytest plugin: a complete test file.

The workflow waits three days before it charges a card (with hourly retries), then up to a
week for the warehouse to confirm shipping. Under the ``plait_engine`` fixture every one of
those waits takes no real time: the engine's clock jumps to the next timer whenever every
run waits only on timers, and ``advance`` moves it by hand.

Run it with ``pytest examples/testing/test_orders.py`` (with pytest-asyncio installed);
set ``PLAIT_TEST_DATABASE_URL=postgresql://...`` to run it on PostgreSQL.
"""

from __future__ import annotations

import pytest

import plait
from plait.testing import TestEngine, assert_steps

app = plait.App("orders")

#: how many charge attempts fail before the provider answers (tests set it)
PROVIDER = {"failures": 0}


@app.function(retries=3, retry_delay="1h")
async def charge(order: dict, ctx: plait.StepContext) -> dict:
    if ctx.attempt <= PROVIDER["failures"]:
        raise ConnectionError("payment provider unavailable")
    return {"charged": order["amount"], "key": ctx.invocation_id}


@app.workflow
async def place_order(wf: plait.Workflow, order: dict) -> dict:
    await wf.sleep("cooling off", "3d")
    receipt = await wf.do("charge", charge, order)
    try:
        shipped = await wf.wait_for_event("shipped", timeout="7d")
    except plait.EventTimeout:
        return {"status": "refund", "charged": receipt["charged"]}
    return {"status": "shipped", "tracking": shipped["tracking"], "at": wf.now().isoformat()}


@pytest.fixture
def plait_app() -> plait.App:
    """The app the ``plait_engine`` fixture runs."""
    return app


@pytest.fixture(autouse=True)
def reliable_provider() -> None:
    PROVIDER["failures"] = 0


async def test_an_order_ships(plait_engine: TestEngine) -> None:
    run_id = await plait_engine.start("place_order", {"amount": 42})
    await plait_engine.advance("3d")  # the cooling-off period passes at once
    await plait_engine.send_event(run_id, "shipped", {"tracking": "TRK-1"})
    run = await plait_engine.wait(run_id, timeout=10)
    assert run.output["status"] == "shipped"
    assert run.output["tracking"] == "TRK-1"
    await assert_steps(
        plait_engine,
        run_id,
        {
            "cooling off": "succeeded",
            "charge": {"status": "succeeded", "attempts": 1},
            "__event:shipped": "succeeded",
            "__now": "succeeded",
        },
    )


async def test_an_order_that_never_ships_is_refunded(plait_engine: TestEngine) -> None:
    started = plait_engine.now()
    output = await plait_engine.run("place_order", {"amount": 42}, timeout=10)
    assert output == {"status": "refund", "charged": 42}
    # three days of cooling off and a week of waiting went by in virtual time
    assert (plait_engine.now() - started).days == 10


async def test_a_flaky_provider_is_retried_hourly(plait_engine: TestEngine) -> None:
    PROVIDER["failures"] = 2
    run_id = await plait_engine.start("place_order", {"amount": 7})
    await plait_engine.advance("3d")
    await plait_engine.advance("2h")  # two back-offs of an hour
    await plait_engine.send_event(run_id, "shipped", {"tracking": "TRK-2"})
    run = await plait_engine.wait(run_id, timeout=10)
    assert run.output["status"] == "shipped"
    history = await plait_engine.get_history(run_id)
    charges = [a for a in history if a.key == "charge"]
    assert [a.status for a in charges] == ["failed", "failed", "succeeded"]
    assert (charges[2].started_at - charges[0].started_at).total_seconds() == 2 * 3600
