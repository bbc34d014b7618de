"""Parked runs over HTTP: ``GET /api/runs?status=needs_attention`` lists them (a status
that is not one is 422 naming the field), the run's own retry and cancel act on them and
resume is a conflict naming the status; only the owner's runs are listed to a user."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest

import plait

httpx = pytest.importorskip("httpx", reason="httpx is needed to call the ASGI app")
pytest.importorskip("starlette", reason="the http extra (starlette) is not installed")

from plait.http.principal import Principal  # noqa: E402

TOKENS = {"t-alice": Principal("alice", frozenset()), "t-bob": "bob"}
app = plait.App("http-park")
BROKEN = {"now": True}


@app.function(retries=0, on_exhausted="park")
def partner(data: str) -> str:
    if BROKEN["now"]:
        raise RuntimeError("partner API down")
    return data


@app.workflow
async def sync(wf: plait.Workflow, data: str) -> str:
    return str(await wf.do("call", partner, data))


@pytest.fixture
async def engine(database: str) -> AsyncIterator[plait.Engine]:
    BROKEN["now"] = True
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


async def _parked(engine: plait.Engine, client: httpx.AsyncClient, data: str) -> str:
    response = await client.post("/api/workflows/sync/runs", json={"input": data})
    assert response.status_code in (200, 201, 202), response.text
    run_id = str(response.json()["run_id"])
    assert (await engine.wait(run_id, timeout=30)).status == "needs_attention"
    return run_id


async def test_the_run_list_filters_parked_runs_and_retry_and_cancel_act_on_them(
    engine: plait.Engine, client: Any
) -> None:
    alice, bob = client("t-alice"), client("t-bob")
    first = await _parked(engine, alice, "a")
    second = await _parked(engine, alice, "b")
    await _parked(engine, bob, "c")
    listed = (await alice.get("/api/runs", params={"status": "needs_attention"})).json()
    assert sorted(r["id"] for r in listed["runs"]) == sorted([first, second])
    assert all(r["status"] == "needs_attention" for r in listed["runs"])
    assert (await alice.get("/api/runs", params={"status": "failed"})).json()["runs"] == []
    shown = (await alice.get(f"/api/runs/{first}")).json()
    assert shown["error"]["step"] == "call" and shown["error"]["message"] == "partner API down"

    bad = await alice.get("/api/runs", params={"status": "parked"})
    assert bad.status_code == 422
    assert bad.json()["error"]["problems"][0]["field"] == "status"

    resumed = await alice.post(f"/api/runs/{first}/resume")
    assert resumed.status_code == 409
    assert resumed.json()["error"]["run_status"] == "needs_attention"
    assert (await bob.post(f"/api/runs/{first}/retry")).status_code in (403, 404)

    BROKEN["now"] = False
    assert (await alice.post(f"/api/runs/{first}/retry")).status_code == 202
    assert (await engine.wait(first, timeout=30)).output == "a"
    cancelled = await alice.post(f"/api/runs/{second}/cancel")
    assert cancelled.status_code == 202 and cancelled.json()["status"] == "cancelled"


async def test_the_openapi_document_lists_the_status(client: Any) -> None:
    spec = (await client("t-alice").get("/openapi.json")).json()
    params = spec["paths"]["/api/runs"]["get"]["parameters"]
    status = next(p for p in params if p["name"] == "status")
    assert "needs_attention" in status["schema"]["enum"]
    retry = spec["paths"]["/api/runs/{run_id}/retry"]["post"]["summary"]
    assert "needs_attention" in retry


async def test_a_bulk_retry_of_parked_runs_acts_on_the_callers_own(
    engine: plait.Engine, client: Any
) -> None:
    alice, bob = client("t-alice"), client("t-bob")
    mine = [await _parked(engine, alice, name) for name in ("a", "b")]
    theirs = await _parked(engine, bob, "c")
    BROKEN["now"] = False
    answer = await alice.post(
        "/api/runs/bulk", json={"action": "retry", "filter": {"status": "needs_attention"}}
    )
    assert answer.status_code == 200, answer.text
    assert answer.json() == {"action": "retry", "acted": 2}
    for run_id in mine:
        assert (await engine.wait(run_id, timeout=30)).status == "completed"
    assert (await engine.get_run(theirs)).status == "needs_attention"
