r"""A small shop: an order workflow with a flaky payment provider, a cooling-off sleep,
a manager's approval for large orders, and shipping as a child workflow.

Run it with ``make demo`` (see order_demo.py), or with the CLI from the repository's root::

    plait start examples.shop:app place_order --wait \
        --input '{"order_id": "A-1", "amount": 40, "items": ["mug"]}'

An order of 100 or more waits for a manager's approval; ``--wait`` then says so, with the
command that sends it (``plait send-event RUN_ID "manager approval" --data '{"approved":
true, "by": "dana"}'``).
"""

from __future__ import annotations

import plait

app = plait.App("shop")

#: attempts the payment provider fails before it answers (the demo sets it)
FLAKY_PAYMENTS = {"failures": 2}


@app.function
async def reserve_stock(order: dict) -> dict:
    return {"reserved": order["items"], "warehouse": "north"}


@app.function(retries=4, retry_delay="200ms", on_error="release_stock")
async def charge_card(order: dict, ctx: plait.StepContext) -> dict:
    # A real provider would get ctx.invocation_id as its idempotency key, so a retry of
    # a half-finished charge can never charge twice.
    if ctx.attempt <= FLAKY_PAYMENTS["failures"]:
        raise ConnectionError(f"payment provider timed out (attempt {ctx.attempt})")
    return {"charge_id": f"ch_{ctx.invocation_id[:8]}", "amount": order["amount"]}


@app.function
async def release_stock(failure: dict) -> dict:
    return {"released": failure["input"]["items"]}


@app.function
def print_label(data: dict) -> dict:
    return {"label": f"LBL-{data['order_id']}", "carrier": "parcel-co"}


@app.function
async def notify_customer(data: dict) -> str:
    return f"sent '{data['message']}' for order {data['order_id']}"


@app.workflow
async def ship_order(wf: plait.Workflow, data: dict) -> dict:
    label = await wf.do("print label", print_label, data)
    await wf.sleep("wait for pickup", "300ms")
    return {"tracking": label["label"], "carrier": label["carrier"]}


@app.workflow
async def place_order(wf: plait.Workflow, order: dict) -> dict:
    stock = await wf.do("reserve stock", reserve_stock, order)
    payment = await wf.do("charge card", charge_card, order)
    await wf.sleep("cooling-off period", "500ms")
    if order["amount"] >= 100:
        decision = await wf.wait_for_event("manager approval", timeout="1h")
        if not decision.get("approved"):
            raise plait.Cancel(f"rejected by {decision.get('by', 'a manager')}")
    shipment = await wf.do("ship", "ship_order", {"order_id": order["order_id"]})
    await wf.do(
        "notify customer",
        notify_customer,
        {"order_id": order["order_id"], "message": f"on its way: {shipment['tracking']}"},
    )
    return {"order_id": order["order_id"], "stock": stock, "payment": payment, **shipment}
