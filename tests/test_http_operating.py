"""The HTTP routes of operating runs: approvals (200, 403, 409, 422), fork, and the values
and decisions a run's JSON and its stream carry."""

from __future__ import annotations

from typing import Any

import pydantic
import pytest

import plait

httpx = pytest.importorskip("httpx", reason="httpx is needed to call the ASGI app")
pytest.importorskip("starlette", reason="the http extra (starlette) is not installed")

import test_http_api as base  # noqa: E402
from plait.http import create_app  # noqa: E402
from test_http_api import ALICE, TOKENS, AsgiStream, eventually  # noqa: E402

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


engine = base.engine
client_for = base.client_for
alice = base.alice
bob = base.bob


async def gate_open(engine: plait.Engine, run_id: str) -> None:
    async def listed() -> bool:
        return any(a.run_id == run_id for a in await engine.list_approvals())

    await eventually(listed)


async def test_four_eyes_over_http(engine: plait.Engine, alice: Any, bob: Any) -> None:
    run_id = (await base.start(alice, "shipping"))["run_id"]
    await gate_open(engine, run_id)
    for_bob = (await bob.get("/api/approvals")).json()["approvals"]
    assert [a["run_id"] for a in for_bob] == [run_id]
    assert for_bob[0]["schema"]["required"] == ["approved"]
    assert (await alice.get("/api/approvals")).json()["approvals"] == []

    path = f"/api/runs/{run_id}/approvals/ship"
    forbidden = await alice.post(path, json={"approved": True})
    assert forbidden.status_code == 403
    assert forbidden.json()["error"]["code"] == "APPROVAL_FORBIDDEN"
    invalid = await bob.post(path, json={"approved": "yes"})
    assert invalid.status_code == 422
    assert invalid.json()["error"]["problems"] == [
        {"field": "approved", "message": "'yes' is not of type 'boolean'"}
    ]
    not_json = await bob.post(path, content=b"{", headers={"content-type": "application/json"})
    assert not_json.status_code == 422
    accepted = await bob.post(path, json={"approved": True, "note": "ok"})
    assert accepted.status_code == 200, accepted.text
    assert accepted.json()["outcome"] == "accepted" and accepted.json()["decided_by"] == "bob"
    again = await bob.post(path, json={"approved": False})
    assert again.status_code == 409
    assert again.json()["error"]["code"] == "APPROVAL_RESOLVED"
    assert again.json()["error"]["outcome"] == "decided"

    run = await base.settled(engine, run_id)
    assert run.output == {"approved": True, "by": "bob"}
    shown = (await alice.get(f"/api/runs/{run_id}")).json()
    assert shown["values"] == {"progress": 1.0}
    assert [(d["decided_by"], d["outcome"]) for d in shown["decisions"]] == [
        ("alice", "refused"),
        ("bob", "refused"),
        ("bob", "accepted"),
        ("bob", "refused"),
    ]
    ended = await bob.post(path, json={"approved": True})
    assert ended.status_code == 409


async def test_a_decision_before_the_gate_needs_access_to_the_run(
    engine: plait.Engine, alice: Any, bob: Any
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
    assert (await bob.post(path, json={"approved": False})).status_code == 200
    assert (await base.settled(engine, run_id)).output["by"] == "bob"


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
    assert forked.json() == {"run_id": "fork-http", "forked_from": run_id}
    run = await base.settled(engine, "fork-http")
    assert run.output == done["output"] and run.owner == "alice"
    taken = await alice.post(path, json={"from_step": "last", "run_id": "fork-http"})
    assert taken.status_code == 409
    live = (await base.start(alice, "waiter"))["run_id"]
    running = await alice.post(f"/api/runs/{live}/fork", json={"from_step": "before"})
    assert running.status_code == 409
    assert (await alice.post("/api/runs/nope/fork", json={"from_step": "x"})).status_code == 404
    await engine.cancel(live)


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
