"""Refused approval decisions on both stores: whichever way a decision comes to be
refused (at once, by a gate that closed before it committed, when its held gate is
reached, when the run ends first), it keeps who sent it, when and why, never its data;
and a gate keeps at most ``MAX_REFUSED_PER_GATE`` refused ones however many senders
race."""

from __future__ import annotations

import asyncio
from typing import Any

import pydantic
import pytest

import plait
from plait import approval
from plait.engine.approvals import MAX_REFUSED_PER_GATE
from plait.store.rows import DecisionRow
from support.polling import eventually

app = plait.App("refused-decision-tests")

#: what a sender puts in a decision: a refused one must not keep it
BULKY = {"approved": True, "note": "x" * 1000}


class Verdict(pydantic.BaseModel):
    approved: bool
    note: str = ""


@app.workflow
async def owner_gate_later(wf: plait.Workflow, data: Any) -> Any:
    await wf.wait_for_event("go")
    decision = await wf.approval("ok", approvers="owner")
    return decision.decided_by


@app.workflow
async def schema_gate_later(wf: plait.Workflow, data: Any) -> Any:
    await wf.wait_for_event("go")
    decision = await wf.approval("ok", schema=Verdict)
    return decision.decided_by


@app.workflow
async def gate_or_not(wf: plait.Workflow, data: Any) -> Any:
    if await wf.wait_for_event("go"):
        return (await wf.approval("ok")).decided_by
    return "no gate"


@app.workflow
async def gate_then_event(wf: plait.Workflow, data: Any) -> Any:
    decision = await wf.approval("ok")
    await wf.wait_for_event("done")
    return decision.decided_by


async def _stored(engine: plait.Engine, run_id: str) -> list[dict[str, Any]]:
    """The decisions as the store keeps them (payload included)."""
    return await engine.store.get_decisions(run_id)


def _assert_no_data_in_refused(stored: list[dict[str, Any]]) -> None:
    refused = [d for d in stored if d["outcome"] == "refused"]
    assert refused, stored
    for decision in refused:
        assert decision["payload"] is None, decision
        assert decision["decided_by"] is not None and decision["reason"] is not None


async def _gate_open(engine: plait.Engine, run_id: str) -> str:
    """The key of the run's open gate ``ok``, once it is open."""

    async def opened() -> str | None:
        for gate in await engine.list_approvals():
            if gate.run_id == run_id and gate.name == "ok":
                return gate.key
        return None

    key = await eventually(opened, what=f"gate ok of {run_id} to open")
    assert isinstance(key, str)
    return key


async def test_a_held_decision_the_gate_refuses_keeps_no_data(engine_factory) -> None:
    """Held for a gate not reached yet, a decision is judged when the run gets there:
    refused by the gate's policy or by the workflow's schema, its data goes."""
    async with engine_factory(app) as engine:
        by_policy = await engine.start("owner_gate_later", owner="alice")
        by_schema = await engine.start("schema_gate_later", owner="alice")
        held = await engine.approve(by_policy, "ok", BULKY, decided_by="bob")
        assert held.outcome == "held"
        bad = {"approved": "not a bool", "note": "x" * 1000}
        assert (await engine.approve(by_schema, "ok", bad, decided_by="bob")).outcome == "held"
        for run_id in (by_policy, by_schema):
            await engine.send_event(run_id, "go")
            await _gate_open(engine, run_id)
            _assert_no_data_in_refused(await _stored(engine, run_id))
            (decision,) = await engine.get_decisions(run_id)
            assert decision.outcome == "refused" and decision.data is None
            assert decision.decided_by == "bob" and decision.reason is not None
            await engine.approve(run_id, "ok", {"approved": True}, decided_by="alice")
            assert (await engine.wait(run_id, timeout=10)).output == "alice"
        accepted = [d for d in await _stored(engine, by_policy) if d["outcome"] == "accepted"]
        assert accepted and accepted[0]["payload"] is not None  # an accepted one keeps it


async def test_a_held_decision_refused_as_the_run_ends_keeps_no_data(engine_factory) -> None:
    async with engine_factory(app) as engine:
        run_id = await engine.start("gate_or_not")
        assert (await engine.approve(run_id, "ok", BULKY, decided_by="bob")).outcome == "held"
        await engine.send_event(run_id, "go", False)
        assert (await engine.wait(run_id, timeout=10)).output == "no gate"
        _assert_no_data_in_refused(await _stored(engine, run_id))


async def test_a_decision_whose_gate_closed_before_it_committed_keeps_no_data(
    engine_factory,
) -> None:
    """The engine saw the gate open and sent an accepted decision; the gate was decided
    before it committed. The store refuses it and drops its data in that transaction."""
    async with engine_factory(app) as engine:
        run_id = await engine.start("gate_then_event")
        key = await _gate_open(engine, run_id)
        await engine.approve(run_id, "ok", {"first": True}, decided_by="alice")
        now = round(engine.clock.now(), 6)
        late = DecisionRow(
            "ok",
            approval.envelope(BULKY, "bob", now),
            "bob",
            now,
            "accepted",
            key=key,
            if_closed=approval.resolved("decided"),
            if_expired=approval.resolved("expired"),
        )
        assert await engine.store.submit_decision(run_id, late, ()) == "closed"
        stored = await _stored(engine, run_id)
        assert [d["outcome"] for d in stored] == ["accepted", "refused"]
        _assert_no_data_in_refused(stored)
        await engine.send_event(run_id, "done")
        assert (await engine.wait(run_id, timeout=10)).output == "alice"


async def test_the_cap_of_refused_decisions_holds_when_senders_race(engine_factory) -> None:
    """Many senders decide one open gate at once: one wins, the others are refused (by
    the engine, or by the store when the gate closed between its read and their write),
    and the gate keeps no more than ``MAX_REFUSED_PER_GATE`` of them."""
    senders = MAX_REFUSED_PER_GATE + 30
    async with engine_factory(app) as engine:
        run_id = await engine.start("gate_then_event")
        await _gate_open(engine, run_id)

        async def decide(n: int) -> str:
            try:
                await engine.approve(run_id, "ok", BULKY, decided_by=f"user{n}")
            except plait.ApprovalResolvedError:
                return "refused"
            return "accepted"

        results = await asyncio.gather(*(decide(n) for n in range(senders)))
        assert results.count("accepted") == 1
        stored = await _stored(engine, run_id)
        assert sum(d["outcome"] == "accepted" for d in stored) == 1
        assert sum(d["outcome"] == "refused" for d in stored) == MAX_REFUSED_PER_GATE
        _assert_no_data_in_refused(stored)
        # once full, a gate takes no more refusals, in a race or not
        await asyncio.gather(*(decide(n) for n in range(10)))
        assert len(await _stored(engine, run_id)) == MAX_REFUSED_PER_GATE + 1
        await engine.send_event(run_id, "done")
        assert (await engine.wait(run_id, timeout=10)).status == "completed"


async def test_a_refused_decisions_stored_reason_names_the_fields_not_their_values(
    engine_factory: Any,
) -> None:
    """The sender of data that does not fit hears how (the schema's message quotes the
    value); the reason stored with the refusal says which field, and holds none of it."""
    async with engine_factory(app) as engine:
        run_id = await engine.start("schema_gate_later", None)
        await engine.send_event(run_id, "go")
        await _gate_open(engine, run_id)
        secret = "SECRET-" + "x" * 10_000
        with pytest.raises(plait.ValidationError) as caught:
            await engine.approve(run_id, "ok", {"approved": secret}, decided_by="bob")
        assert "SECRET-" in str(caught.value.problems)  # the sender is told
        stored = await _stored(engine, run_id)
        _assert_no_data_in_refused(stored)
        assert "SECRET-" not in str(stored)
        (decision,) = await engine.get_decisions(run_id)
        assert decision.reason is not None
        assert decision.reason["problems"] == [
            {"field": "approved", "message": "does not fit the gate's schema"}
        ]
