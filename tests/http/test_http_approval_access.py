"""Who may see and decide an approval gate over HTTP, on both stores: someone who may
read the run (its owner, a token with the ``admin`` scope), or a user the gate's policy
names; everyone else is refused before anything is stored. Refused decisions keep their
reason, never their data, and at most ``MAX_REFUSED_PER_GATE`` of them per gate."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import pydantic
import pytest

import plait
from plait.engine import approvals
from support.polling import eventually

httpx = pytest.importorskip("httpx", reason="httpx is needed to call the ASGI app")
pytest.importorskip("starlette", reason="the http extra (starlette) is not installed")

from plait.http import Principal, create_app  # noqa: E402

app = plait.App("approval-access")

TOKENS = {
    "t-alice": Principal("alice"),
    "t-bob": Principal("bob"),
    "t-carol": Principal("carol"),
    "t-admin": Principal("admin", frozenset({"admin"})),
}

#: a decision's data large enough that storing it would show
BLOB = "x" * 200_000


class Ship(pydantic.BaseModel):
    approved: bool


@app.workflow
async def anyone(wf: plait.Workflow, data: Any) -> Any:
    decision = await wf.approval("ship", schema=Ship)
    return {"approved": decision.data.approved, "by": decision.decided_by}


@app.workflow
async def four_eyes(wf: plait.Workflow, data: Any) -> Any:
    decision = await wf.approval("ship", approvers="not_owner")
    return decision.decided_by


@app.workflow
async def named(wf: plait.Workflow, data: Any) -> Any:
    decision = await wf.approval("ship", approvers=["carol"])
    return decision.decided_by


@app.workflow
async def gave_up(wf: plait.Workflow, data: Any) -> Any:
    """Gives up its first gate ``ok`` (a deadline wins), then waits, then opens another."""
    first = asyncio.ensure_future(wf.approval("ok"))
    deadline = asyncio.ensure_future(wf.sleep("deadline", 0.05))
    _, pending = await asyncio.wait({first, deadline}, return_when=asyncio.FIRST_COMPLETED)
    for task in pending:
        task.cancel()
    await wf.wait_for_event("nap over")
    second = await wf.approval("ok", expires="30s")
    return second.decided_by


@pytest.fixture
async def engine(database: str) -> AsyncIterator[plait.Engine]:
    async with plait.Engine(app, database, poll_interval=0.2) as opened:
        yield opened


@pytest.fixture
async def users(engine: plait.Engine) -> AsyncIterator[dict[str, httpx.AsyncClient]]:
    web = create_app(engine, tokens=TOKENS)
    clients = {
        name: httpx.AsyncClient(
            transport=httpx.ASGITransport(app=web),
            base_url="http://test",
            headers={"Content-Type": "application/json", "Authorization": f"Bearer t-{name}"},
        )
        for name in ("alice", "bob", "carol", "admin")
    }
    yield clients
    for client in clients.values():
        await client.aclose()


async def start(client: httpx.AsyncClient, workflow: str) -> str:
    sent = await client.post(f"/api/workflows/{workflow}/runs", json={"input": None})
    assert sent.status_code == 201, sent.text
    run_id: str = sent.json()["run_id"]
    return run_id


async def gate_open(engine: plait.Engine, run_id: str) -> None:
    async def listed() -> bool:
        return any(a.run_id == run_id for a in await engine.list_approvals())

    await eventually(listed, what="the gate open")


async def listed_for(client: httpx.AsyncClient) -> list[str]:
    answer = await client.get("/api/approvals")
    assert answer.status_code == 200, answer.text
    return [a["run_id"] for a in answer.json()["approvals"]]


def refused_as(answer: httpx.Response, status: int, code: str) -> None:
    assert answer.status_code == status, answer.text
    assert answer.json()["error"]["code"] == code, answer.text


async def test_an_any_gate_is_seen_and_decided_only_by_who_may_read_the_run(
    engine: plait.Engine, users: dict[str, httpx.AsyncClient]
) -> None:
    alice, bob, admin = users["alice"], users["bob"], users["admin"]
    run_id = await start(alice, "anyone")
    await gate_open(engine, run_id)
    assert await listed_for(bob) == []
    assert await listed_for(alice) == [run_id]
    assert await listed_for(admin) == [run_id]
    path = f"/api/runs/{run_id}/approvals/ship"
    refused_as(await bob.post(path, json={"approved": True, "blob": BLOB}), 403, "FORBIDDEN")
    assert await engine.get_decisions(run_id) == []  # nothing stored of bob's
    accepted = await admin.post(path, json={"approved": True})
    assert accepted.status_code == 200 and accepted.json()["outcome"] == "accepted"
    run = await engine.wait(run_id, timeout=15)
    assert run.output == {"approved": True, "by": "admin"}
    # the run has ended: a sender who may not read it still leaves nothing on it
    refused_as(await bob.post(path, json={"approved": True, "blob": BLOB}), 403, "FORBIDDEN")
    assert [d.decided_by for d in await engine.get_decisions(run_id)] == ["admin"]


async def test_four_eyes_takes_a_reader_other_than_the_owner(
    engine: plait.Engine, users: dict[str, httpx.AsyncClient]
) -> None:
    alice, bob, admin = users["alice"], users["bob"], users["admin"]
    run_id = await start(alice, "four_eyes")
    await gate_open(engine, run_id)
    assert await listed_for(alice) == []  # hers to read, not to decide
    assert await listed_for(bob) == []
    path = f"/api/runs/{run_id}/approvals/ship"
    refused_as(await bob.post(path, json=True), 403, "FORBIDDEN")
    refused_as(await alice.post(path, json=True), 403, "APPROVAL_FORBIDDEN")
    assert (await admin.post(path, json=True)).status_code == 200
    assert (await engine.wait(run_id, timeout=15)).output == "admin"
    outcomes = [(d.decided_by, d.outcome) for d in await engine.get_decisions(run_id)]
    assert outcomes == [("alice", "refused"), ("admin", "accepted")]


async def test_a_policy_that_names_users_lets_them_decide_without_reading_the_run(
    engine: plait.Engine, users: dict[str, httpx.AsyncClient]
) -> None:
    alice, bob, carol = users["alice"], users["bob"], users["carol"]
    run_id = await start(alice, "named")
    await gate_open(engine, run_id)
    assert await listed_for(carol) == [run_id]
    assert await listed_for(bob) == [] and await listed_for(alice) == []
    assert (await carol.get(f"/api/runs/{run_id}")).status_code == 403  # named, not a reader
    path = f"/api/runs/{run_id}/approvals/ship"
    refused_as(await bob.post(path, json=True), 403, "FORBIDDEN")
    refused_as(await alice.post(path, json=True), 403, "APPROVAL_FORBIDDEN")
    # a gate named for carol that is not open is not hers to hold decisions for
    refused_as(await carol.post(f"/api/runs/{run_id}/approvals/other", json=1), 403, "FORBIDDEN")
    accepted = await carol.post(path, json={"note": "fine"})
    assert accepted.status_code == 200, accepted.text
    assert (await engine.wait(run_id, timeout=15)).output == "carol"
    # closed now: carol may not read the run, so she is refused with nothing stored
    refused_as(await carol.post(path, json=True), 403, "FORBIDDEN")
    outcomes = [(d.decided_by, d.outcome) for d in await engine.get_decisions(run_id)]
    assert outcomes == [("alice", "refused"), ("carol", "accepted")]


async def test_refused_decisions_keep_their_reason_not_their_data_up_to_a_cap(
    engine: plait.Engine, users: dict[str, httpx.AsyncClient], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(approvals, "MAX_REFUSED_PER_GATE", 3)
    alice = users["alice"]
    run_id = await start(alice, "anyone")
    await gate_open(engine, run_id)
    path = f"/api/runs/{run_id}/approvals/ship"
    for _ in range(5):
        invalid = await alice.post(path, json={"approved": "perhaps", "blob": BLOB})
        assert invalid.status_code == 422, invalid.text
    stored = await engine.get_decisions(run_id)
    assert [d.outcome for d in stored] == ["refused"] * 3
    for decision in stored:
        assert decision.data is None
        assert decision.reason is not None and decision.reason["code"] == "APPROVAL_INVALID"
    assert (await alice.post(path, json={"approved": True})).status_code == 200
    await engine.wait(run_id, timeout=15)
    page = await alice.get(f"/api/runs/{run_id}")
    assert len(page.content) < 20_000  # no refused sender's data on the run's page
    # the gate is decided: refusals for it stay capped too
    assert (await alice.post(path, json={"approved": False})).status_code == 409
    outcomes = [d.outcome for d in await engine.get_decisions(run_id)]
    assert outcomes == ["refused"] * 3 + ["accepted"]


async def test_no_decision_is_planted_for_the_next_gate_of_a_name_given_up(
    engine: plait.Engine, users: dict[str, httpx.AsyncClient]
) -> None:
    """The workflow gave up its first gate ``ok``: that gate counts as reached, and a
    user who may not read the run still cannot hold a decision for the next one."""
    alice, bob = users["alice"], users["bob"]
    run_id = await start(alice, "gave_up")

    async def napping() -> bool:
        return any(s.key == "__event:nap over" for s in await engine.get_steps(run_id))

    await eventually(napping, what="the run past its first gate")
    path = f"/api/runs/{run_id}/approvals/ok"
    refused_as(await bob.post(path, json=None), 403, "FORBIDDEN")
    assert await engine.get_decisions(run_id) == []
    held = await alice.post(path, json=None)
    assert held.status_code == 200 and held.json()["outcome"] == "held"
    await alice.post(f"/api/runs/{run_id}/events/nap over", json=None)
    assert (await engine.wait(run_id, timeout=15)).output == "alice"


async def test_the_engine_stores_nothing_for_a_decider_who_may_not_read_the_run(
    engine_factory: Any,
) -> None:
    async with engine_factory(app) as engine:
        run_id = await engine.start("anyone", owner="alice")
        await gate_open(engine, run_id)
        with pytest.raises(plait.ApprovalForbiddenError):
            await engine.approve(run_id, "ship", {"approved": True}, decided_by="bob", reader=False)
        with pytest.raises(plait.ApprovalForbiddenError):
            await engine.approve(run_id, "later", 1, decided_by="bob", reader=False)
        assert await engine.get_decisions(run_id) == []
        # trusted code vouches for its decider
        await engine.approve(run_id, "ship", {"approved": True}, decided_by="bob")
        assert (await engine.wait(run_id, timeout=15)).output == {"approved": True, "by": "bob"}


async def test_an_empty_or_unknown_status_filter_is_refused(
    users: dict[str, httpx.AsyncClient],
) -> None:
    for given in ("", "closed"):
        answer = await users["alice"].get("/api/approvals", params={"status": given})
        refused_as(answer, 422, "INVALID_REQUEST")
        assert "status" in answer.text


async def test_a_users_open_gate_is_listed_whatever_other_users_have_open(
    engine: plait.Engine, users: dict[str, httpx.AsyncClient]
) -> None:
    """The listing keeps the gates the caller may decide out of everyone's, oldest first:
    a hundred older gates of another user's (a page's worth) do not hide hers."""
    bobs = await engine.start_many("anyone", [None] * 100, owner="bob")

    async def all_open() -> bool:
        return len(await engine.list_approvals(limit=1000)) == len(bobs)

    await eventually(all_open, timeout=60, what="bob's 100 gates open")
    mine = await start(users["alice"], "anyone")

    async def mine_open() -> bool:
        return any(a.run_id == mine for a in await engine.list_approvals(limit=1000))

    await eventually(mine_open, what="alice's gate open")
    assert await listed_for(users["alice"]) == [mine]
    assert len(await listed_for(users["bob"])) == 100
