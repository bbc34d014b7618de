"""Approval gates on both stores: policies, validation, held decisions, expiry racing a
decision, the audit trail, and the Python a workflow wraps around a gate."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pydantic
import pytest

import plait
from plait.errors import GateClosedError
from plait.store.ops import Batch, GuardStep
from support.counter import Counter
from support.polling import eventually

counter = Counter()
app = plait.App("approval-tests")


class Refund(pydantic.BaseModel):
    approved: bool
    note: str = ""

    @pydantic.field_validator("note")
    @classmethod
    def polite(cls, value: str) -> str:
        # a check that a JSON Schema cannot express: only the workflow's model knows it
        if "rude" in value:
            raise ValueError("the note must be polite")
        return value


@app.function
def record(data: Any) -> Any:
    counter.hit("record", data)
    return data


@app.function(retries=0)
def fragile(data: Any) -> Any:
    if counter.hit(f"fragile:{data}") == 1:
        raise RuntimeError("first try fails")
    return "fine"


def _out(decision: plait.Decision[Any]) -> dict[str, Any]:
    data = decision.data
    if isinstance(data, pydantic.BaseModel):
        data = data.model_dump()
    return {"expired": decision.expired, "data": data, "by": decision.decided_by}


@app.workflow
async def four_eyes(wf: plait.Workflow, data: Any) -> Any:
    decision = await wf.approval("refund", schema=Refund, approvers="not_owner")
    return _out(decision)


@app.workflow
async def owner_only(wf: plait.Workflow, data: Any) -> Any:
    return _out(await wf.approval("ok", approvers="owner"))


@app.workflow
async def listed(wf: plait.Workflow, data: Any) -> Any:
    return _out(await wf.approval("ok", approvers=["carol", "dave"]))


@app.workflow
async def anyone(wf: plait.Workflow, data: Any) -> Any:
    decision = await wf.approval("ok")  # approvers="any", the default
    return {
        **_out(decision),
        "at": decision.decided_at.isoformat() if decision.decided_at else None,
    }


@app.workflow
async def later_gate(wf: plait.Workflow, data: Any) -> Any:
    await wf.wait_for_event("go")
    decision = await wf.approval("refund", schema=Refund, approvers="not_owner")
    return _out(decision)


@app.workflow
async def maybe_gate(wf: plait.Workflow, data: Any) -> Any:
    """Asks for a person only if the event says so: a decision sent early may find no
    gate before the run ends."""
    go = await wf.wait_for_event("go")
    if go == "fail":
        raise RuntimeError("failed before its gate")
    if go:
        return _out(await wf.approval("refund", schema=Refund))
    return "no gate"


@app.workflow
async def gate_then_event(wf: plait.Workflow, data: Any) -> Any:
    decision = await wf.approval("refund", schema=Refund)
    await wf.wait_for_event("done")
    return _out(decision)


@app.workflow
async def expiring(wf: plait.Workflow, data: Any) -> Any:
    decision = await wf.approval("refund", schema=Refund, expires=data["expires"])
    return _out(decision)


@app.workflow
async def with_suspend(wf: plait.Workflow, data: Any) -> Any:
    decision, _ = await asyncio.gather(
        wf.approval("refund", schema=Refund), wf.suspend("paperwork")
    )
    return _out(decision)


@app.workflow
async def guarded(wf: plait.Workflow, data: Any) -> Any:
    try:
        decision = await wf.approval("refund", schema=Refund)
    finally:
        await wf.do("cleanup", record, "cleanup")
    return _out(decision)


@app.workflow
async def or_timeout(wf: plait.Workflow, data: Any) -> Any:
    gate = asyncio.ensure_future(wf.approval("refund", schema=Refund))
    nap = asyncio.ensure_future(wf.sleep("nap", data["nap"]))
    done, _ = await asyncio.wait({gate, nap}, return_when=asyncio.FIRST_COMPLETED)
    if gate in done:
        return {"winner": "person", **_out(gate.result())}
    return {"winner": "clock"}


@app.workflow
async def then_fragile(wf: plait.Workflow, data: Any) -> Any:
    decision = await wf.approval("refund", schema=Refund)
    await wf.do("fragile", fragile, wf.run_id)
    return _out(decision)


async def open_gate(engine: plait.Engine, run_id: str, name: str = "refund") -> None:
    async def reached() -> bool:
        return any(a.run_id == run_id and a.name == name for a in await engine.list_approvals())

    await eventually(reached, what=f"approval {name!r} of {run_id} to open")


async def test_four_eyes_refuses_the_owner_and_accepts_another_user(engine_factory) -> None:
    async with engine_factory(app) as engine:
        run_id = await engine.start("four_eyes", owner="alice")
        await open_gate(engine, run_id)
        assert [a.run_id for a in await engine.list_approvals(user="bob")] == [run_id]
        assert await engine.list_approvals(user="alice") == []

        with pytest.raises(plait.ApprovalForbiddenError, match="'alice' may not decide"):
            await engine.approve(run_id, "refund", {"approved": True}, decided_by="alice")
        with pytest.raises(plait.ApprovalForbiddenError, match="anonymous"):
            await engine.approve(run_id, "refund", {"approved": True})
        assert (await engine.get_run(run_id)).status == "running"

        accepted = await engine.approve(run_id, "refund", {"approved": True}, decided_by="bob")
        assert accepted.outcome == "accepted" and accepted.decided_by == "bob"
        run = await engine.wait(run_id, timeout=10)
        assert run.status == "completed"
        assert run.output == {
            "expired": False,
            "data": {"approved": True, "note": ""},
            "by": "bob",
        }
        decisions = await engine.get_decisions(run_id)
        assert [(d.decided_by, d.outcome) for d in decisions] == [
            ("alice", "refused"),
            (None, "refused"),
            ("bob", "accepted"),
        ]
        assert decisions[0].reason["code"] == "APPROVAL_FORBIDDEN"
        assert all(d.decided_at is not None for d in decisions)


async def test_owner_and_listed_policies(engine_factory) -> None:
    async with engine_factory(app) as engine:
        mine = await engine.start("owner_only", owner="alice")
        theirs = await engine.start("listed", owner="alice")
        await open_gate(engine, mine, "ok")
        await open_gate(engine, theirs, "ok")
        with pytest.raises(plait.ApprovalForbiddenError):
            await engine.approve(mine, "ok", 1, decided_by="bob")
        await engine.approve(mine, "ok", 1, decided_by="alice")
        with pytest.raises(plait.ApprovalForbiddenError):
            await engine.approve(theirs, "ok", 2, decided_by="alice")
        await engine.approve(theirs, "ok", 2, decided_by="dave")
        assert (await engine.wait(mine, timeout=10)).output["by"] == "alice"
        assert (await engine.wait(theirs, timeout=10)).output["by"] == "dave"


async def test_policy_any_takes_a_decision_from_anyone_and_says_when(engine_factory) -> None:
    """The default policy: the owner, another user and an anonymous caller alike; the
    workflow sees who decided and when, the time the decision was recorded."""
    async with engine_factory(app) as engine:
        runs = {who: await engine.start("anyone", owner="alice") for who in ("alice", "bob", None)}
        for who, run_id in runs.items():
            await open_gate(engine, run_id, "ok")
            await engine.approve(run_id, "ok", {"who": who}, decided_by=who)
        for who, run_id in runs.items():
            run = await engine.wait(run_id, timeout=10)
            assert run.output["by"] == who and run.output["data"] == {"who": who}
            (decision,) = await engine.get_decisions(run_id)
            assert decision.outcome == "accepted" and decision.decided_at is not None
            assert run.output["at"] == decision.decided_at.isoformat()


async def test_an_invalid_decision_keeps_the_gate_open_and_is_reported(engine_factory) -> None:
    async with engine_factory(app) as engine:
        run_id = await engine.start("four_eyes", owner="alice")
        await open_gate(engine, run_id)
        with pytest.raises(plait.ValidationError) as caught:
            await engine.approve(run_id, "refund", {"approved": "maybe"}, decided_by="bob")
        assert caught.value.problems == [
            {"field": "approved", "message": "'maybe' is not of type 'boolean'"}
        ]
        with pytest.raises(plait.ValidationError, match="approved"):
            await engine.approve(run_id, "refund", {"note": "no verdict"}, decided_by="bob")
        assert (await engine.get_run(run_id)).status == "running"
        assert [a.status for a in await engine.list_approvals()] == ["open"]

        await engine.approve(run_id, "refund", {"approved": False}, decided_by="bob")
        run = await engine.wait(run_id, timeout=10)
        assert run.output["data"] == {"approved": False, "note": ""}
        outcomes = [
            (d.outcome, (d.reason or {}).get("code")) for d in await engine.get_decisions(run_id)
        ]
        assert outcomes == [
            ("refused", "APPROVAL_INVALID"),
            ("refused", "APPROVAL_INVALID"),
            ("accepted", None),
        ]


async def test_the_workflows_own_validators_judge_when_the_run_reads_it(engine_factory) -> None:
    """The JSON Schema cannot say "polite": the model refuses the decision when the run
    reads it; the gate opens again, the refusal is recorded, and a good decision wins."""
    async with engine_factory(app) as engine:
        run_id = await engine.start("four_eyes", owner="alice")
        await open_gate(engine, run_id)
        await engine.approve(run_id, "refund", {"approved": True, "note": "rude"}, decided_by="bob")

        async def refused() -> bool:
            return any(d.outcome == "refused" for d in await engine.get_decisions(run_id))

        await eventually(refused, what="the run to refuse the decision")
        await open_gate(engine, run_id)
        assert (await engine.get_run(run_id)).status == "running"
        await engine.approve(
            run_id, "refund", {"approved": True, "note": "thanks"}, decided_by="bob"
        )
        run = await engine.wait(run_id, timeout=10)
        assert run.output["data"]["note"] == "thanks"
        decisions = await engine.get_decisions(run_id)
        assert [d.outcome for d in decisions] == ["refused", "accepted"]
        assert decisions[0].reason["problems"][0]["field"] == "note"


async def test_a_decision_sent_before_the_gate_is_held_and_judged_there(engine_factory) -> None:
    async with engine_factory(app) as engine:
        run_id = await engine.start("later_gate", owner="alice")
        # both arrive before the run reaches the gate: the owner's is refused when judged
        early = await engine.approve(run_id, "refund", {"approved": True}, decided_by="alice")
        assert early.outcome == "held"
        second = await engine.approve(run_id, "refund", {"approved": False}, decided_by="bob")
        assert second.outcome == "held"
        # a third, held too, comes after the one accepted: refused, not left held for good
        third = await engine.approve(run_id, "refund", {"approved": True}, decided_by="carol")
        assert third.outcome == "held"
        await engine.send_event(run_id, "go")
        run = await engine.wait(run_id, timeout=10)
        assert run.output == {
            "expired": False,
            "data": {"approved": False, "note": ""},
            "by": "bob",
        }
        decisions = await engine.get_decisions(run_id)
        assert [(d.decided_by, d.outcome) for d in decisions] == [
            ("alice", "refused"),
            ("bob", "accepted"),
            ("carol", "refused"),
        ]
        assert decisions[0].reason["code"] == "APPROVAL_FORBIDDEN"
        assert decisions[0].judged_at is not None
        assert decisions[2].reason["code"] == "APPROVAL_RESOLVED"
        assert decisions[2].judged_at is not None


async def test_a_decision_held_for_a_gate_never_reached_is_refused_when_the_run_ends(
    engine_factory,
) -> None:
    """A held decision waits for its gate; once the run has completed or was cancelled
    no gate will come, so it is refused then, not left held for good. A failed run may
    be retried and reach the gate: its held decisions stay held."""
    async with engine_factory(app) as engine:
        ended: dict[str, str] = {}
        for how in ("completed", "cancelled", "failed"):
            run_id = await engine.start("maybe_gate")
            held = await engine.approve(run_id, "refund", {"approved": True}, decided_by="bob")
            assert held.outcome == "held"
            if how == "cancelled":
                await engine.cancel(run_id)
            else:
                await engine.send_event(run_id, "go", False if how == "completed" else "fail")
            assert (await engine.wait(run_id, timeout=10)).status == how
            ended[how] = run_id
        for how in ("completed", "cancelled"):
            (decision,) = await engine.get_decisions(ended[how])
            assert decision.outcome == "refused", how
            assert decision.reason is not None and decision.reason["code"] == "APPROVAL_RESOLVED"
            assert "ended" in decision.reason["message"] and decision.judged_at is not None
        (kept,) = await engine.get_decisions(ended["failed"])
        assert kept.outcome == "held"


async def test_a_decided_gate_refuses_another_decision(engine_factory) -> None:
    async with engine_factory(app) as engine:
        run_id = await engine.start("gate_then_event")
        await open_gate(engine, run_id)
        await engine.approve(run_id, "refund", {"approved": True}, decided_by="bob")
        with pytest.raises(plait.ApprovalResolvedError, match="already decided") as caught:
            await engine.approve(run_id, "refund", {"approved": False}, decided_by="carol")
        assert caught.value.outcome == "decided"
        await engine.send_event(run_id, "done")
        assert (await engine.wait(run_id, timeout=10)).output["by"] == "bob"
        assert [d.outcome for d in await engine.get_decisions(run_id)] == ["accepted", "refused"]
        with pytest.raises(plait.ApprovalResolvedError):
            await engine.approve(run_id, "refund", {"approved": False}, decided_by="carol")


async def test_expiry_is_a_durable_timer_and_refuses_later_decisions(engine_factory) -> None:
    async with engine_factory(app) as engine:
        run_id = await engine.start("expiring", {"expires": "300ms"})
        run = await engine.wait(run_id, timeout=10)
        assert run.output == {"expired": True, "data": None, "by": None}
        with pytest.raises(plait.ApprovalResolvedError, match="expired"):
            await engine.approve(run_id, "refund", {"approved": True}, decided_by="bob")


async def test_a_decision_after_the_deadline_loses_even_before_the_timer_fired(
    engine_factory,
) -> None:
    """No worker runs when the deadline passes: the decision that comes after it is
    refused as expired, and the run, picked up later, ends expired."""
    async with engine_factory(app) as engine:
        run_id = await engine.start("expiring", {"expires": "1s"})
        await open_gate(engine, run_id)
    deadline = next(s.wake_at for s in await _steps(engine_factory, run_id) if s.kind == "approval")
    async with engine_factory(app, workers=False) as outside:
        await eventually(_after(deadline.timestamp()), what="the deadline to pass")
        with pytest.raises(plait.ApprovalResolvedError) as caught:
            await outside.approve(run_id, "refund", {"approved": True}, decided_by="bob")
        assert caught.value.outcome == "expired"
    async with engine_factory(app) as engine:
        run = await engine.wait(run_id, timeout=10)
        assert run.output["expired"] is True
        assert [d.outcome for d in await engine.get_decisions(run_id)] == ["refused"]


async def test_expiry_racing_decisions_exactly_one_wins_and_is_recorded(engine_factory) -> None:
    """Decisions sent around the deadline of each of several gates: each gate ends one
    way only, and its decision's record agrees with how the run saw it."""
    async with engine_factory(app) as engine:
        ids = [await engine.start("expiring", {"expires": "1s"}) for _ in range(8)]
        for run_id in ids:
            await open_gate(engine, run_id)
        deadlines = {}
        for run_id in ids:
            gate = next(s for s in await engine.get_steps(run_id) if s.kind == "approval")
            deadlines[run_id] = gate.wake_at.timestamp()

        async def decide(n: int, run_id: str) -> bool:
            # spread the decisions from just before to just after the deadline
            await eventually(_after(deadlines[run_id] - 0.04 + n * 0.01), what="its moment")
            try:
                await engine.approve(run_id, "refund", {"approved": True}, decided_by="bob")
            except plait.ApprovalResolvedError:
                return False
            return True

        won = await asyncio.gather(*(decide(n, rid) for n, rid in enumerate(ids)))
        for run_id, decided in zip(ids, won, strict=True):
            run = await engine.wait(run_id, timeout=10)
            assert run.output["expired"] is (not decided), run_id
            outcomes = [d.outcome for d in await engine.get_decisions(run_id)]
            assert outcomes == (["accepted"] if decided else ["refused"])


async def test_a_pass_never_closes_a_gate_a_decision_closed_first(engine_factory, database) -> None:
    """The store refuses a pass's expiry when a decision committed since its snapshot."""
    async with engine_factory(app) as engine:
        run_id = await engine.start("gate_then_event")
        await open_gate(engine, run_id)
        await engine.approve(run_id, "refund", {"approved": True}, decided_by="bob")
        with pytest.raises(GateClosedError):
            await engine.store.commit(Batch(run_id, [GuardStep("__approval:refund", "pending")]))


async def test_resume_never_opens_an_approval(engine_factory) -> None:
    async with engine_factory(app) as engine:
        run_id = await engine.start("with_suspend")
        run = await engine.wait(run_id, timeout=10)
        assert run.status == "suspended"
        await engine.resume(run_id)
        await open_gate(engine, run_id)

        # the run is running again and waits for a person: resume has nothing to release
        async def running() -> bool:
            return (await engine.get_run(run_id)).status == "running"

        await eventually(running, what="the run to wait on its gate")
        with pytest.raises(plait.RunStateError):
            await engine.resume(run_id)
        assert [a.status for a in await engine.list_approvals()] == ["open"]
        await engine.approve(run_id, "refund", {"approved": True}, decided_by="bob")
        assert (await engine.wait(run_id, timeout=10)).status == "completed"


async def test_finally_around_a_gate_runs_once_after_the_decision(engine_factory) -> None:
    before = counter["record"]
    async with engine_factory(app) as engine:
        run_id = await engine.start("guarded")
        await open_gate(engine, run_id)
        assert counter["record"] == before  # the pause is no exit of the try block
        await engine.approve(run_id, "refund", {"approved": True}, decided_by="bob")
        assert (await engine.wait(run_id, timeout=10)).status == "completed"
        assert counter["record"] == before + 1


async def test_a_gate_raced_against_a_sleep(engine_factory) -> None:
    """The first to finish wins; the run ends once the loser's step has ended too (a
    step the workflow started always ends before its run does: a gate that should give
    up on its own takes ``expires=``)."""
    async with engine_factory(app) as engine:
        person = await engine.start("or_timeout", {"nap": "1s"})
        await open_gate(engine, person)
        await engine.approve(person, "refund", {"approved": True}, decided_by="bob")
        run = await engine.wait(person, timeout=10)
        assert run.output["winner"] == "person" and run.output["by"] == "bob"


async def test_a_cancel_while_waiting_closes_the_gate_for_good(engine_factory) -> None:
    async with engine_factory(app) as engine:
        run_id = await engine.start("four_eyes", owner="alice")
        await open_gate(engine, run_id)
        await engine.cancel(run_id, "not needed")
        assert await engine.list_approvals() == []
        with pytest.raises(plait.RunStateError, match="cancelled"):
            await engine.approve(run_id, "refund", {"approved": True}, decided_by="bob")


async def test_a_retried_run_keeps_its_decision(engine_factory) -> None:
    async with engine_factory(app) as engine:
        run_id = await engine.start("then_fragile")
        await open_gate(engine, run_id)
        await engine.approve(run_id, "refund", {"approved": True}, decided_by="bob")
        assert (await engine.wait(run_id, timeout=10)).status == "failed"
        await engine.retry(run_id)
        run = await engine.wait(run_id, timeout=10)
        assert run.status == "completed" and run.output["by"] == "bob"
        assert [d.outcome for d in await engine.get_decisions(run_id)] == ["accepted"]


async def test_bad_approval_input_is_named(engine_factory) -> None:
    async with engine_factory(app) as engine:
        with pytest.raises(plait.RunNotFoundError):
            await engine.approve("nope", "refund", {})
        run_id = await engine.start("four_eyes", owner="alice")
        with pytest.raises(TypeError, match="approval name"):
            await engine.approve(run_id, "", {})
        with pytest.raises(TypeError, match="decided_by"):
            await engine.approve(run_id, "refund", {}, decided_by=3)  # type: ignore[arg-type]
        with pytest.raises(plait.NotJSONError):
            await engine.approve(run_id, "refund", {"x": object()})
        with pytest.raises(ValueError, match="starts with '__'"):
            await engine.send_event(run_id, "__approval:refund", {"approved": True})
        with pytest.raises(ValueError, match="invalid approval status"):
            await engine.list_approvals(status="later")


BAD_NAMES = ["a\x00b", "a\x01b", "a\nb", "a\x7fb", "x" * 201, "x" * 3000]


@pytest.mark.parametrize("name", BAD_NAMES)
async def test_an_approval_name_follows_the_rule_of_event_names(engine_factory, name: str) -> None:
    """1 to 200 characters, no control characters, on both stores: refused with a
    ValueError naming the value before anything is stored (a NUL once reached
    PostgreSQL, which cannot hold one, and a 3000-character name was held)."""
    bad = plait.App("bad-gate-names")

    @bad.workflow
    async def gate(wf: plait.Workflow, data: Any) -> Any:
        return await wf.approval(name)

    @bad.workflow
    async def waits(wf: plait.Workflow, data: Any) -> Any:
        return await wf.wait_for_event(name if data == "bad" else "go")

    async with engine_factory(bad) as engine:
        live = await engine.start("waits")
        for what, send in (("approval", engine.approve), ("event", engine.send_event)):
            with pytest.raises(ValueError, match=f"invalid {what} name") as refused:
                await send(live, name, {"approved": True})
            message = str(refused.value)
            assert repr(name[:40]).rstrip("'") in message and "1 to 200 characters" in message
            assert len(message) < 300  # a long name is shown cut short
        assert await engine.get_decisions(live) == []
        for workflow, what in (("gate", "approval"), ("waits", "event")):
            run = await engine.wait(await engine.start(workflow, "bad"), timeout=10)
            assert run.status == "failed"
            assert f"invalid {what} name" in run.error["message"]
        fine = "x" * 200
        assert (await engine.approve(live, fine, {})).outcome == "held"
        await engine.cancel(live)


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"approvers": "someone"}, "approvers must be one of"),
        ({"approvers": []}, "non-empty list"),
        ({"schema": dict}, "pydantic model class"),
        ({"expires": "soon"}, "expiry of approval"),
    ],
)
async def test_bad_gate_options_fail_the_run_naming_the_gate(
    engine_factory, options: dict[str, Any], message: str
) -> None:
    bad = plait.App("bad-gates")

    @bad.workflow
    async def gate(wf: plait.Workflow, data: Any) -> Any:
        return await wf.approval("g", **options)

    async with engine_factory(bad) as engine:
        run = await engine.wait(await engine.start("gate"), timeout=10)
        assert run.status == "failed"
        assert message in run.error["message"]


def _after(moment: float) -> Any:
    async def check() -> bool:
        return time.time() > moment

    return check


async def _steps(engine_factory: Any, run_id: str) -> list[plait.Step]:
    async with engine_factory(app, workers=False) as reader:
        return await reader.get_steps(run_id)


@app.workflow
async def publishes(wf: plait.Workflow, size: int) -> str:
    await wf.set_value("progress", "x" * size)
    return "published"


async def test_decisions_and_values_are_held_to_max_payload(engine_factory) -> None:
    """A decision or a published value is data from outside like an input or an event:
    over the engine's ``max_payload`` it is refused with the limit named, and nothing of
    it is stored (the gate stays open for a decision that fits)."""
    async with engine_factory(app, max_payload=1000) as engine:
        run_id = await engine.start("owner_only", owner="alice")
        await open_gate(engine, run_id, "ok")
        with pytest.raises(plait.PayloadTooLargeError, match=r"decision.*1000"):
            await engine.approve(run_id, "ok", "y" * 2000, decided_by="alice")
        assert await engine.get_decisions(run_id) == []
        await engine.approve(run_id, "ok", "fits", decided_by="alice")
        assert (await engine.wait(run_id, timeout=10)).output["data"] == "fits"

        small = await engine.run("publishes", 10, timeout=10)
        assert small == "published"
        big = await engine.start("publishes", 2000)
        run = await engine.wait(big, timeout=10)
        assert run.status == "failed"
        assert "value 'progress'" in run.error["message"] and "1000" in run.error["message"]
        assert await engine.get_value(big, "progress") is None
