"""The runs of a schedule without an owner over HTTP, on both stores: a schedule declared
in code (or made by trusted code without an owner) starts runs of no user, owned by the
schedule (``schedule:<name>``); they, their children included, answer only to a token
that may operate the schedule (``schedules`` scope) or read every run (``admin``). Runs
of a user's schedule stay hers, and runs trusted code starts without an owner stay
shared. A token with the ``schedules`` scope lists them beside its own runs."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest

import plait
from plait.ids import schedule_owner

httpx = pytest.importorskip("httpx", reason="httpx is needed to call the ASGI app")
pytest.importorskip("starlette", reason="the http extra (starlette) is not installed")

from plait.http import Principal, create_app  # noqa: E402

app = plait.App("schedule-run-access")


@app.workflow
async def nightly_child(wf: plait.Workflow, data: Any) -> Any:
    return {"child_saw": data}


@app.workflow
async def nightly(wf: plait.Workflow, data: Any) -> Any:
    return await wf.do("child", "nightly_child", data)


@app.workflow
async def note_to(wf: plait.Workflow, data: Any) -> Any:
    """Sends to another run: a run of a declared schedule sends as trusted code does."""
    await wf.send_event(data["to"], "note", "from the schedule")
    return "sent"


@app.workflow
async def listen(wf: plait.Workflow, data: Any) -> Any:
    return await wf.wait_for_event("note")


app.schedule("declared", workflow="nightly", cron="0 0 1 1 *", input={"key": "secret"})
app.schedule("notes", workflow="note_to", cron="0 0 1 1 *", input={"to": "alice-listens"})

TOKENS = {
    "t-alice": Principal("alice"),
    "t-ops": Principal("ops", frozenset({"schedules"})),
    "t-admin": Principal("admin", frozenset({"admin"})),
}


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
        for name in ("alice", "ops", "admin")
    }
    yield clients
    for client in clients.values():
        await client.aclose()


async def listed(client: httpx.AsyncClient) -> set[str]:
    answer = await client.get("/api/runs", params={"limit": 100})
    assert answer.status_code == 200, answer.text
    return {r["id"] for r in answer.json()["runs"]}


async def test_runs_of_a_declared_schedule_need_the_schedules_scope(
    engine: plait.Engine, users: dict[str, httpx.AsyncClient]
) -> None:
    alice, ops, admin = users["alice"], users["ops"], users["admin"]
    run_id = await engine.trigger_schedule("declared")
    run = await engine.wait(run_id, timeout=15)
    assert run.status == "completed" and run.owner == schedule_owner("declared")
    (child,) = await engine.get_children(run_id)
    assert child.owner == run.owner  # a child keeps its parent's owner
    shared = await engine.start("nightly", {"key": "public"})  # trusted code, no owner

    for path in (
        f"/api/runs/{run_id}",
        f"/api/runs/{run_id}/history",
        f"/api/runs/{run_id}/stream",
        f"/api/runs/{child.id}",
    ):
        answer = await alice.get(path)
        assert answer.status_code == 403, (path, answer.text)
        assert answer.json()["error"]["code"] == "MISSING_SCOPE", path
        assert answer.json()["error"]["scope"] == "schedules"
        assert "secret" not in answer.text
    refused = await alice.post(f"/api/runs/{run_id}/events/poke", json={})
    assert refused.status_code == 403, refused.text
    assert run_id not in await listed(alice) and child.id not in await listed(alice)
    assert shared in await listed(alice)
    assert (await alice.get(f"/api/runs/{shared}")).status_code == 200

    for client in (ops, admin):
        answer = await client.get(f"/api/runs/{run_id}")
        assert answer.status_code == 200, answer.text
        assert answer.json()["input"] == {"key": "secret"}
        assert answer.json()["children"][0]["id"] == child.id
        assert (await client.get(f"/api/runs/{child.id}")).status_code == 200
        assert {run_id, child.id, shared} <= await listed(client)
    # the schedules scope lists the schedule's runs, not other users' runs
    mine = await alice.post("/api/workflows/nightly/runs", json={"input": 1})
    assert mine.status_code == 201, mine.text
    assert mine.json()["run_id"] not in await listed(ops)
    assert mine.json()["run_id"] in await listed(admin)
    summaries = (await ops.get("/api/runs", params={"top_level": "true"})).json()["runs"]
    assert next(r for r in summaries if r["id"] == run_id)["children"] == 1
    summaries = (await alice.get("/api/runs", params={"top_level": "true"})).json()["runs"]
    assert run_id not in {r["id"] for r in summaries}


async def test_runs_of_a_users_schedule_stay_hers(
    engine: plait.Engine, users: dict[str, httpx.AsyncClient]
) -> None:
    alice, ops = users["alice"], users["ops"]
    made = await alice.post(
        "/api/schedules",
        json={"name": "mine", "workflow": "nightly", "every": 3600, "input": {"k": 1}},
    )
    assert made.status_code == 201, made.text
    run_id = (await alice.post("/api/schedules/mine/trigger", json={})).json()["run_id"]
    assert (await engine.wait(run_id, timeout=15)).owner == "alice"
    assert (await alice.get(f"/api/runs/{run_id}")).status_code == 200
    assert run_id in await listed(alice)
    # the schedules scope operates her schedule, not her runs: that is admin's
    assert (await ops.get(f"/api/runs/{run_id}")).status_code == 403


async def test_a_declared_schedules_run_sends_events_as_trusted_code(
    engine: plait.Engine,
) -> None:
    listener = await engine.start("listen", run_id="alice-listens", owner="alice")
    run_id = await engine.trigger_schedule("notes")
    assert (await engine.wait(run_id, timeout=15)).output == "sent"
    assert (await engine.wait(listener, timeout=15)).output == "from the schedule"


def test_no_user_id_may_be_a_schedules_owner() -> None:
    with pytest.raises(ValueError, match="reserved"):
        Principal(schedule_owner("declared"))
    with pytest.raises(ValueError, match="reserved"):
        create_app(plait.Engine(app, "sqlite:///:memory:"), tokens={"t": "schedule:x"})
