"""What the runs list says about each run over HTTP, on both stores: ``waiting_on`` (an
event, an approval, a sleep, a resume, a queue's admission, a paused workflow),
``counts`` per status for the list's other filters (``?counts=true``), and a bulk
action's ``dry_run``, which counts the runs it would act on and acts on none."""

from __future__ import annotations

from collections.abc import AsyncIterator
from datetime import datetime, timedelta
from typing import Any

import pytest

import plait
from support.polling import eventually

httpx = pytest.importorskip("httpx", reason="httpx is needed to call the ASGI app")
pytest.importorskip("starlette", reason="the http extra (starlette) is not installed")

from plait.http import Principal  # noqa: E402

TOKENS = {
    "t-alice": "alice",
    "t-bob": "bob",
    "t-root": Principal("root", frozenset({"admin"})),
}

app = plait.App("http-waiting")
app.queue("single", concurrency=1)


@app.workflow
async def on_event(wf: plait.Workflow, data: Any) -> Any:
    return await wf.wait_for_event("payment", timeout="1h")


@app.workflow
async def on_approval(wf: plait.Workflow, data: Any) -> Any:
    return (await wf.approval("refund")).data


@app.workflow
async def on_sleep(wf: plait.Workflow, data: Any) -> Any:
    await wf.sleep("nap", "2h")
    return "woke"


@app.workflow
async def on_suspend(wf: plait.Workflow, data: Any) -> Any:
    await wf.suspend("review")
    return "resumed"


@app.workflow(queue="single")
async def in_line(wf: plait.Workflow, data: Any) -> Any:
    return await wf.wait_for_event("go")


@app.workflow
async def quick(wf: plait.Workflow, data: Any) -> Any:
    return data


@pytest.fixture
async def engine(database: str) -> AsyncIterator[plait.Engine]:
    async with plait.Engine(app, database, poll_interval=0.2) as opened:
        yield opened


@pytest.fixture
def client(engine: plait.Engine) -> Any:
    from plait.http import create_app

    def make(token: str) -> httpx.AsyncClient:
        return httpx.AsyncClient(
            transport=httpx.ASGITransport(app=create_app(engine, tokens=TOKENS)),
            base_url="http://test",
            headers={"Content-Type": "application/json", "Authorization": f"Bearer {token}"},
        )

    return make


async def _start(client: httpx.AsyncClient, workflow: str, data: Any = None) -> str:
    answer = await client.post(f"/api/workflows/{workflow}/runs", json={"input": data})
    assert answer.status_code == 201, answer.text
    run_id: str = answer.json()["run_id"]
    return run_id


async def _waiting(client: httpx.AsyncClient, run_id: str) -> dict[str, Any] | None:
    listed = (await client.get("/api/runs", params={"limit": 100})).json()["runs"]
    (row,) = [r for r in listed if r["id"] == run_id]
    found: dict[str, Any] | None = row["waiting_on"]
    return found


async def _waits(client: httpx.AsyncClient, run_id: str, kind: str) -> dict[str, Any]:
    async def check() -> dict[str, Any] | None:
        found = await _waiting(client, run_id)
        return found if found is not None and found["kind"] == kind else None

    found: dict[str, Any] = await eventually(check, timeout=20, what=f"waiting on {kind}")
    return found


async def test_each_run_says_what_it_waits_on(engine: plait.Engine, client: Any) -> None:
    alice = client("t-alice")
    event = await _start(alice, "on_event")
    gate = await _start(alice, "on_approval")
    nap = await _start(alice, "on_sleep")
    held = await _start(alice, "on_suspend")
    first = await _start(alice, "in_line")
    behind = await _start(alice, "in_line")
    done = await _start(alice, "quick", 1)
    soon = datetime.now().astimezone()

    waits_event = await _waits(alice, event, "event")
    assert waits_event["name"] == "payment"
    assert waits_event["message"].startswith("waiting for event 'payment' until ")
    until = datetime.fromisoformat(waits_event["until"])
    assert soon + timedelta(minutes=50) < until < soon + timedelta(minutes=70)

    shown = (await alice.get(f"/api/runs/{event}")).json()
    assert shown["waiting_on"] == waits_event  # the run itself says the same

    waits_gate = await _waits(alice, gate, "approval")
    assert waits_gate == {
        "kind": "approval",
        "name": "refund",
        "message": "waiting for approval 'refund'",
        "until": None,
    }
    waits_sleep = await _waits(alice, nap, "sleep")
    assert waits_sleep["name"] == "nap" and waits_sleep["message"].startswith("sleeping until ")
    assert datetime.fromisoformat(waits_sleep["until"]) > soon + timedelta(minutes=110)
    assert (await _waits(alice, held, "resume"))["message"] == "suspended until it is resumed"
    assert (await _waits(alice, first, "event"))["name"] == "go"
    assert await _waits(alice, behind, "admission") == {
        "kind": "admission",
        "name": "single",
        "message": "waiting for queue 'single' to admit it",
        "until": None,
    }
    assert (await engine.wait(done, timeout=20)).status == "completed"
    assert await _waiting(alice, done) is None
    assert (await alice.get(f"/api/runs/{done}")).json()["waiting_on"] is None

    # a paused workflow holds its run whatever the run waits on
    await engine.pause_workflow("on_sleep")
    paused = await _waits(alice, nap, "paused_workflow")
    assert paused["message"] == "workflow 'on_sleep' is paused"
    await engine.resume_workflow("on_sleep")
    await _waits(alice, nap, "sleep")


async def test_counts_per_status_for_the_other_filters(engine: plait.Engine, client: Any) -> None:
    alice, bob = client("t-alice"), client("t-bob")
    for n in range(3):
        run = await engine.wait(await _start(alice, "quick", n), timeout=20)
        assert run.status == "completed"
    for _ in range(2):
        await _waits(alice, await _start(alice, "on_suspend"), "resume")
    await _waits(bob, await _start(bob, "on_suspend"), "resume")

    answer = await alice.get("/api/runs", params={"counts": "true", "status": "completed"})
    assert answer.status_code == 200, answer.text
    body = answer.json()
    assert body["total"] == 3 and len(body["runs"]) == 3
    # the status filter is left out of the counts; bob's run is not alice's to see
    assert body["counts"] == {"completed": 3, "suspended": 2}
    only = await alice.get("/api/runs", params={"counts": "1", "workflow": "on_suspend"})
    assert only.json()["counts"] == {"suspended": 2}
    assert "counts" not in (await alice.get("/api/runs")).json()
    root = client("t-root")
    assert (await root.get("/api/runs?counts=true")).json()["counts"] == {
        "completed": 3,
        "suspended": 3,
    }

    bad = await alice.get("/api/runs", params={"counts": "maybe"})
    assert bad.status_code == 422
    assert bad.json()["problems"][0]["field"] == "counts"


async def test_a_bulk_dry_run_counts_and_acts_on_nothing(engine: plait.Engine, client: Any) -> None:
    alice, bob, root = client("t-alice"), client("t-bob"), client("t-root")
    mine = [await _start(alice, "on_suspend") for _ in range(2)]
    theirs = await _start(bob, "on_suspend")
    for run_id in [*mine, theirs]:
        await _waits(root, run_id, "resume")

    body = {"action": "cancel", "filter": {"workflow": "on_suspend"}, "dry_run": True}
    counted = await alice.post("/api/runs/bulk", json=body)
    assert counted.status_code == 200, counted.text
    assert counted.json() == {"action": "cancel", "matched": 2}  # her own runs only
    assert (await root.post("/api/runs/bulk", json=body)).json()["matched"] == 3
    retry = {**body, "action": "retry"}
    assert (await alice.post("/api/runs/bulk", json=retry)).json()["matched"] == 0
    statuses = [(await engine.get_run(r)).status for r in [*mine, theirs]]
    assert statuses == ["suspended"] * 3

    bad = await alice.post("/api/runs/bulk", json={**body, "dry_run": "yes"})
    assert bad.status_code == 422
    assert bad.json()["problems"][0]["field"] == "dry_run"


async def test_a_run_no_live_worker_takes_says_so(database: str) -> None:
    from plait.http import create_app

    async with plait.Engine(app, database, workers=False) as engine:
        web = create_app(engine, tokens=TOKENS)
        async with httpx.AsyncClient(
            transport=httpx.ASGITransport(app=web),
            base_url="http://test",
            headers={"Content-Type": "application/json", "Authorization": "Bearer t-alice"},
        ) as alice:
            run_id = await _start(alice, "quick", 1)
            assert await _waiting(alice, run_id) == {
                "kind": "no_worker",
                "name": "quick",
                "message": "no live worker registers workflow 'quick'",
                "until": None,
            }
