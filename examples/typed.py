"""A typed shop: every step and the run's output carry their types to mypy and pyright.

``make test`` checks this file with ``mypy --strict`` and strict pyright. Each
``assert_type`` states what a checker must infer there (and does nothing when it runs):
``wf.do`` is typed by the function it runs, ``engine.run`` and ``engine.wait`` by the
workflow passed as an object. Run it with ``python examples/typed.py``.
"""

from __future__ import annotations

import asyncio
from datetime import timedelta
from typing import assert_type

# pydantic, which validates a function's data against its annotation, needs this
# TypedDict before Python 3.12
from typing_extensions import TypedDict

import plait

app = plait.App("typed-shop")


class Order(TypedDict):
    order_id: str
    amount: int


class Receipt(TypedDict):
    charge_id: str
    amount: int


class Confirmation(TypedDict):
    order_id: str
    receipt: Receipt
    items: list[str]
    total_with_shipping: int


@app.function(retries=2, retry_delay="500ms")
async def charge_card(order: Order, ctx: plait.StepContext) -> Receipt:
    # the invocation id is the same on every attempt: the payment provider's idempotency key
    return {"charge_id": f"ch-{ctx.invocation_id[:8]}", "amount": order["amount"]}


@app.function
def reserve_stock(order: Order) -> list[str]:
    """A sync function: it runs in a worker thread."""
    return [f"{order['order_id']}-item-1", f"{order['order_id']}-item-2"]


@app.workflow
async def checkout(wf: plait.Workflow, order: Order) -> Confirmation:
    receipt = await wf.do("charge", charge_card, order)
    assert_type(receipt, Receipt)
    items = await wf.do("reserve", reserve_stock, order, timeout="30s")
    assert_type(items, list[str])
    total = await wf.do("total", lambda: receipt["amount"] + 5)
    assert_type(total, int)
    await wf.sleep("cool off", "10ms")
    return {
        "order_id": order["order_id"],
        "receipt": receipt,
        "items": items,
        "total_with_shipping": total,
    }


async def main() -> Confirmation:
    async with plait.Engine(app, "sqlite:///:memory:") as engine:
        # a typed variable, not a literal in the call: mypy (unlike pyright) cannot infer
        # a TypedDict from a dict literal given to a generic parameter
        order: Order = {"order_id": "o-1", "amount": 42}
        confirmation = await engine.run(checkout, order, timeout=timedelta(seconds=30))
        assert_type(confirmation, Confirmation)

        run_id = await engine.start(checkout, {"order_id": "o-2", "amount": 7})  # data: Any
        run = await engine.wait(run_id, workflow=checkout, timeout="30s")
        assert_type(run, plait.Run[Confirmation])
        print(run.status, run.output["total_with_shipping"])

        done = await engine.list_runs(workflow="checkout", status="completed")
        print(f"{len(done)} completed checkouts; the first: {confirmation}")
        return confirmation


if __name__ == "__main__":
    asyncio.run(main())
