"""The HTTP routes of operating runs: approvals (200, 403, 409, 422), fork, and the values
and decisions a run's JSON and its stream carry."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pydantic
import pytest

import plait
from support.polling import eventually

httpx = pytest.importorskip("httpx", reason="httpx is needed to call the ASGI app")
pytest.importorskip("starlette", reason="the http extra (starlette) is not installed")

import test_http_api as base  # noqa: E402
from plait.http import Principal, create_app  # noqa: E402
from test_http_api import ALICE, TOKENS, AsgiStream  # noqa: E402

app = base.app


class Ship(pydantic.BaseModel):
    approved: bool
    note: str = ""


@app.workflow
async def shipping(wf: plait.Workflow, data: Any) -> Any:
    await wf.set_value("progress", 0.25)
    if data == "late":
        await wf.wait_for_event("go")
    decision = await wf.approval("ship", schema=Ship, approvers="not_owner")
    await wf.set_value("progress", 1.0)
    return {"approved": decision.data.approved, "by": decision.decided_by}


@app.workflow
async def ticking(wf: plait.Workflow, data: Any) -> Any:
    for n in range(3):
        await wf.wait_for_event(f"tick{n}")
        await wf.set_value("progress", (n + 1) / 3)
    return "done"


@pytest.fixture
async def engine(database: str) -> AsyncIterator[plait.Engine]:
    """These routes hold on both stores (the rules behind them are the store's)."""
    async with plait.Engine(app, database, poll_interval=0.2) as opened:
        yield opened


client_for = base.client_for
alice = base.alice
bob = base.bob


async def gate_open(engine: plait.Engine, run_id: str) -> None:
    async def listed() -> bool:
        return any(a.run_id == run_id for a in await engine.list_approvals())

    await eventually(listed)


@pytest.fixture
def admin(client_for: Any) -> Any:
    """A token with the ``admin`` scope: it reads every run, so it decides their gates."""
    tokens = {**TOKENS, "t-admin": Principal("admin", frozenset({"admin"}))}
    return client_for({"Authorization": "Bearer t-admin"}, tokens=tokens)


async def test_four_eyes_over_http(engine: plait.Engine, alice: Any, bob: Any, admin: Any) -> None:
    """Four eyes: a user who may read the run other than its owner (here the admin)
    decides; bob, who may not read it, neither sees nor decides the gate."""
    run_id = (await base.start(alice, "shipping"))["run_id"]
    await gate_open(engine, run_id)
    for_admin = (await admin.get("/api/approvals")).json()["approvals"]
    assert [a["run_id"] for a in for_admin] == [run_id]
    assert for_admin[0]["schema"]["required"] == ["approved"]
    assert (await alice.get("/api/approvals")).json()["approvals"] == []
    assert (await bob.get("/api/approvals")).json()["approvals"] == []

    path = f"/api/runs/{run_id}/approvals/ship"
    forbidden = await alice.post(path, json={"approved": True})
    assert forbidden.status_code == 403
    assert forbidden.json()["error"]["code"] == "APPROVAL_FORBIDDEN"
    outsider = await bob.post(path, json={"approved": True})
    assert outsider.status_code == 403 and outsider.json()["error"]["code"] == "FORBIDDEN"
    invalid = await admin.post(path, json={"approved": "yes"})
    assert invalid.status_code == 422
    assert invalid.json()["error"]["problems"] == [
        {"field": "approved", "message": "'yes' is not of type 'boolean'"}
    ]
    not_json = await admin.post(path, content=b"{", headers={"content-type": "application/json"})
    assert not_json.status_code == 422
    accepted = await admin.post(path, json={"approved": True, "note": "ok"})
    assert accepted.status_code == 200, accepted.text
    assert accepted.json()["outcome"] == "accepted" and accepted.json()["decided_by"] == "admin"
    again = await admin.post(path, json={"approved": False})
    assert again.status_code == 409
    assert again.json()["error"]["code"] == "APPROVAL_RESOLVED"
    assert again.json()["error"]["outcome"] == "decided"

    run = await base.settled(engine, run_id)
    assert run.output == {"approved": True, "by": "admin"}
    shown = (await alice.get(f"/api/runs/{run_id}")).json()
    assert shown["values"] == {"progress": 1.0}
    assert [(d["decided_by"], d["outcome"]) for d in shown["decisions"]] == [
        ("alice", "refused"),
        ("admin", "refused"),
        ("admin", "accepted"),
        ("admin", "refused"),
    ]
    ended = await admin.post(path, json={"approved": True})
    assert ended.status_code == 409


async def test_a_decision_before_the_gate_needs_access_to_the_run(
    engine: plait.Engine, alice: Any, bob: Any, admin: Any
) -> None:
    run_id = (await base.start(alice, "shipping", "late"))["run_id"]
    path = f"/api/runs/{run_id}/approvals/ship"
    early = await bob.post(path, json={"approved": True})
    assert early.status_code == 403 and early.json()["error"]["code"] == "FORBIDDEN"
    held = await alice.post(path, json={"approved": True})
    assert held.status_code == 200 and held.json()["outcome"] == "held"
    missing = await bob.post("/api/runs/nope/approvals/ship", json={})
    assert missing.status_code == 404
    bad_status = await bob.get("/api/approvals", params={"status": "later"})
    assert bad_status.status_code == 422
    await alice.post(f"/api/runs/{run_id}/events/go", json=None)
    await gate_open(engine, run_id)  # the owner's held decision was refused when judged
    decisions = (await alice.get(f"/api/runs/{run_id}")).json()["decisions"]
    assert [d["outcome"] for d in decisions] == ["refused"]
    assert (await admin.post(path, json={"approved": False})).status_code == 200
    assert (await base.settled(engine, run_id)).output["by"] == "admin"


# (a newline never gets this far: no route of /api matches a path that holds one, 404)
@pytest.mark.parametrize("name", ["a%00b", "a%01b", "a%1Fb", "a%7Fb", "x" * 201, "x" * 3000])
async def test_an_approval_name_follows_the_rule_of_event_names(
    engine: plait.Engine, alice: Any, bob: Any, name: str
) -> None:
    run_id = (await base.start(alice, "shipping", "late"))["run_id"]
    for path in (f"/api/runs/{run_id}/approvals/{name}", f"/api/runs/{run_id}/events/{name}"):
        refused = await alice.post(path, json={"approved": True})
        assert refused.status_code == 422, (path, refused.text)
        problems = refused.json()["error"]["problems"]
        assert [p["field"] for p in problems] == ["name"]
        assert "1 to 200 characters" in problems[0]["message"]
        assert len(refused.text) < 2000  # a long name is not echoed back whole
    # a malformed name is refused before any run is looked at: 422 for every caller
    for who, rid in ((bob, run_id), (bob, "nope"), (alice, "nope")):
        assert (await who.post(f"/api/runs/{rid}/approvals/{name}", json={})).status_code == 422
    assert await engine.get_decisions(run_id) == []  # nothing was held
    ok = await alice.post(f"/api/runs/{run_id}/approvals/{'x' * 200}", json={})
    assert ok.status_code == 200 and ok.json()["outcome"] == "held"
    await engine.cancel(run_id)


async def test_fork_over_http(engine: plait.Engine, alice: Any, bob: Any) -> None:
    done = await base.start(alice, "fanout", wait=True)
    run_id = done["id"]
    path = f"/api/runs/{run_id}/fork"
    assert (await bob.post(path, json={"from_step": "last"})).status_code == 403
    assert (await alice.post(path, json={})).status_code == 422
    assert (await alice.post(path, json={"from_step": "last", "extra": 1})).status_code == 422
    unknown = await alice.post(path, json={"from_step": "nope"})
    assert unknown.status_code == 422 and "has no step 'nope'" in unknown.json()["error"]["message"]
    forked = await alice.post(path, json={"from_step": "last", "run_id": "fork-http"})
    assert forked.status_code == 201
    assert forked.json() == {"run_id": "fork-http", "forked_from": run_id, "replaced": False}
    run = await base.settled(engine, "fork-http")
    assert run.output == done["output"] and run.owner == "alice"
    taken = await alice.post(path, json={"from_step": "last", "run_id": "fork-http"})
    assert taken.status_code == 409
    live = (await base.start(alice, "waiter"))["run_id"]
    running = await alice.post(f"/api/runs/{live}/fork", json={"from_step": "before"})
    assert running.status_code == 409
    assert (await alice.post("/api/runs/nope/fork", json={"from_step": "x"})).status_code == 404
    # replace: the way forward for a live run, which the fork's commit cancels
    body = {"from_step": "before", "replace": "sometimes"}

    async def reached() -> bool:
        return any(s.key == "before" for s in await engine.get_steps(live))

    await eventually(reached, what="the live run's first step")
    assert (await alice.post(f"/api/runs/{live}/fork", json=body)).status_code == 422
    assert (
        await bob.post(f"/api/runs/{live}/fork", json={**body, "replace": True})
    ).status_code == 403
    replaced = await alice.post(f"/api/runs/{live}/fork", json={**body, "replace": True})
    assert replaced.status_code == 201 and replaced.json()["replaced"] is True
    source = await engine.get_run(live)
    assert source.status == "cancelled"
    assert source.error["message"] == f"replaced by fork {replaced.json()['run_id']}"
    await engine.cancel(replaced.json()["run_id"])


async def test_a_fork_into_a_taken_run_id_answers_like_a_start(
    engine: plait.Engine, alice: Any, bob: Any
) -> None:
    await base.start(alice, "fanout", "alice", run_id="alice-order-1", wait=True)
    own = (await base.start(bob, "fanout", wait=True))["id"]
    await base.start(bob, "simple", run_id="bob-order-1", wait=True)
    path = f"/api/runs/{own}/fork"
    # another user's run holds the id: 403, nothing said of that run
    theirs = await bob.post(path, json={"from_step": "last", "run_id": "alice-order-1"})
    assert theirs.status_code == 403, theirs.text
    assert theirs.json()["error"]["code"] == "FORBIDDEN"
    assert "workflow" not in theirs.text and "fanout" not in theirs.text
    # the caller's own runs: 409 that says what holds the id
    for taken, message in (
        (own, f"run id {own!r} is already used by another run"),
        ("bob-order-1", "run id 'bob-order-1' is already used by a run of workflow 'simple'"),
    ):
        clash = await bob.post(path, json={"from_step": "last", "run_id": taken})
        assert clash.status_code == 409, clash.text
        assert clash.json()["error"]["code"] == "RUN_ID_TAKEN"
        assert clash.json()["error"]["message"].startswith(message), clash.text
        assert "'fanout', not 'fanout'" not in clash.text
    # a fork's run id follows the same pattern as a start's
    for bad in ("a/b", "a b", "a\u0000b", "x" * 201):
        refused = await bob.post(path, json={"from_step": "last", "run_id": bad})
        assert refused.status_code == 422, (bad, refused.text)
    total = (await bob.get("/api/runs")).json()["total"]
    assert total == 2  # no fork was made


async def test_the_stream_sends_values_as_they_change(engine: plait.Engine, alice: Any) -> None:
    web = create_app(engine, tokens=TOKENS)
    run_id = (await base.start(alice, "ticking"))["run_id"]
    seen: list[Any] = []
    async with AsgiStream(web, f"/api/runs/{run_id}/stream", ALICE) as stream:
        for n in range(3):
            await alice.post(f"/api/runs/{run_id}/events/tick{n}", json=None)
            while True:
                event = await stream.next_event()
                assert event is not None
                progress = event[1].get("values", {}).get("progress")
                if progress is not None and (not seen or seen[-1] != progress):
                    seen.append(progress)
                if progress is not None and abs(progress - (n + 1) / 3) < 1e-9:
                    break
    assert seen == pytest.approx([1 / 3, 2 / 3, 1.0])
