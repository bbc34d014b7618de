"""Operating runs: a refund that a second person approves, its progress published as it
goes, a rerun from a step after a fix, and old runs pruned.

    python -m examples.refunds            # runs the whole story on refunds.db
    plait serve examples.refunds:app --database sqlite:///refunds.db --no-auth
"""

from __future__ import annotations

import asyncio
import sys

import pydantic

import plait

app = plait.App("refunds")


class Refund(pydantic.BaseModel):
    approved: bool
    note: str = ""


@app.function
def look_up_order(data: dict) -> dict:
    return {"order": data["order"], "amount": data["amount"]}


@app.function
def pay_back(data: dict) -> str:
    return f"refunded {data['amount']} on order {data['order']}"


@app.workflow
async def refund(wf: plait.Workflow, data: dict) -> dict:
    await wf.set_value("progress", {"done": 0, "total": 3})
    order = await wf.do("look up", look_up_order, data)
    await wf.set_value("progress", {"done": 1, "total": 3})
    await wf.set_value("stage", "waiting for approval")  # committed with the gate's opening
    # four eyes: anyone but the run's owner decides, within two days
    decision = await wf.approval("refund", schema=Refund, approvers="not_owner", expires="2d")
    await wf.set_value("progress", {"done": 2, "total": 3})
    if decision.expired or not decision.data.approved:
        return {"refunded": False}
    receipt = await wf.do("pay back", pay_back, order)
    await wf.set_value("progress", {"done": 3, "total": 3})
    return {"refunded": True, "receipt": receipt, "approved_by": decision.decided_by}


async def main(database: str = "sqlite:///refunds.db") -> dict:
    async with plait.Engine(app, database) as engine:
        run_id = await engine.start("refund", {"order": "A-17", "amount": 30}, owner="alice")
        # the progress as it changes; no polling: the commit that publishes it wakes us
        print("progress", await engine.get_value(run_id, "progress", wait=True, timeout=10))
        await engine.get_value(run_id, "stage", wait=True, timeout=10)
        print("bob may decide", [a.name for a in await engine.list_approvals(user="bob")])
        try:
            await engine.approve(run_id, "refund", {"approved": True}, decided_by="alice")
        except plait.ApprovalForbiddenError as refused:
            print("refused:", refused)
        await engine.approve(run_id, "refund", {"approved": True, "note": "ok"}, decided_by="bob")
        run = await engine.wait(run_id, timeout=30)
        print("output", run.output)
        for decision in await engine.get_decisions(run_id):
            print("decision", decision.decided_by, decision.outcome)
        # after a fix to pay_back: run it again, keeping the lookup and the decision
        again = await engine.fork(run_id, from_step="pay back")
        print("forked", (await engine.wait(again, timeout=30)).output)
        # retention: delete ended runs older than 30 days
        print("pruned", await engine.prune(older_than="30d"))
        return dict(run.output)


if __name__ == "__main__":
    asyncio.run(main(*sys.argv[1:]))
