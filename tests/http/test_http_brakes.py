"""The HTTP routes of brakes and workers: pausing and resuming a workflow or a queue needs
the ``admin`` scope (403 without it), a workflow no process knows is 404, a name no
workflow or queue can have is 422; ``GET /api/paused`` and ``GET /api/workers`` are for
any authenticated caller (a worker's record carries no run data)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest

import plait

httpx = pytest.importorskip("httpx", reason="httpx is needed to call the ASGI app")
pytest.importorskip("starlette", reason="the http extra (starlette) is not installed")

import test_http_api as base  # noqa: E402
from plait.http.principal import Principal  # noqa: E402

app = base.app
client_for = base.client_for
ADMIN = {"Authorization": "Bearer t-admin"}
TOKENS = {**base.TOKENS, "t-admin": Principal("root", frozenset({"admin"}))}


@pytest.fixture
async def engine(database: str) -> AsyncIterator[plait.Engine]:
    async with plait.Engine(app, database, poll_interval=0.2) as opened:
        yield opened


async def test_pausing_needs_the_admin_scope(engine: plait.Engine, client_for: Any) -> None:
    admin = client_for(ADMIN, tokens=TOKENS)
    alice = client_for(base.ALICE, tokens=TOKENS)
    refused = await alice.post("/api/workflows/simple/pause")
    assert refused.status_code == 403
    assert refused.json()["error"]["scope"] == "admin"
    assert (await alice.post("/api/queues/q/pause")).status_code == 403

    paused = await admin.post("/api/workflows/simple/pause")
    assert paused.status_code == 200, paused.text
    assert paused.json() == {"kind": "workflow", "name": "simple", "paused": 0}
    run_id = (await base.start(alice, "simple", 1))["run_id"]
    assert (await engine.get_run(run_id)).status == "queued"
    listed = (await alice.get("/api/paused")).json()["paused"]
    assert [(p["kind"], p["name"]) for p in listed] == [("workflow", "simple")]

    resumed = await admin.post("/api/workflows/simple/resume")
    assert resumed.status_code == 200
    assert (await engine.wait(run_id, timeout=20)).status == "completed"
    assert (await admin.post("/api/queues/q/pause")).json()["paused"] == 0
    assert (await admin.post("/api/queues/q/resume")).status_code == 200
    assert (await alice.get("/api/paused")).json()["paused"] == []


async def test_bad_names(engine: plait.Engine, client_for: Any) -> None:
    admin = client_for(ADMIN, tokens=TOKENS)
    missing = await admin.post("/api/workflows/nope/pause")
    assert missing.status_code == 404
    assert missing.json()["error"]["code"] == "WORKFLOW_NOT_FOUND"
    bad = await admin.post("/api/queues/a%01b/pause")
    assert bad.status_code == 422
    assert bad.json()["error"]["problems"][0]["field"] == "name"


async def test_workers_are_listed_to_any_token(engine: plait.Engine, client_for: Any) -> None:
    alice = client_for(base.ALICE, tokens=TOKENS)
    (shown,) = (await alice.get("/api/workers")).json()["workers"]
    assert shown["id"] == engine.worker.owner and shown["live"] is True
    assert shown["pid"] > 0 and shown["host"] and shown["app"] == app.name
    assert "simple" in shown["workflows"] and shown["queues"] is None
