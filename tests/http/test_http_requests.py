"""``POST /api/runs/{run_id}/requests/{name}``: a request and the workflow's reply over
HTTP, with the status codes of the approvals route (owner-gated as events)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pydantic
import pytest

import plait
from support.polling import eventually

httpx = pytest.importorskip("httpx", reason="httpx is needed to call the ASGI app")
pytest.importorskip("starlette", reason="the http extra (starlette) is not installed")

from plait.http import Principal, create_app  # noqa: E402

TOKENS = {"t-alice": Principal("alice", frozenset()), "t-bob": "bob"}
ALICE = {"Authorization": "Bearer t-alice"}
BOB = {"Authorization": "Bearer t-bob"}

app = plait.App("http-requests")


class Add(pydantic.BaseModel):
    qty: int


@app.workflow
async def cart(wf: plait.Workflow, data: Any) -> int:
    total = 0
    while True:
        req = await wf.wait_for_request("add", schema=Add)
        if req.data.qty > 100:
            await req.refuse("too many")
            continue
        total += req.data.qty
        await req.reply({"total": total})
        if total >= 10:
            return total


@pytest.fixture
async def engine(tmp_path: Path) -> AsyncIterator[plait.Engine]:
    async with plait.Engine(app, f"sqlite:///{tmp_path}/t.db", poll_interval=0.2) as opened:
        yield opened


@pytest.fixture
async def clients(engine: plait.Engine) -> AsyncIterator[dict[str, httpx.AsyncClient]]:
    web = create_app(engine, tokens=TOKENS)
    made = {
        name: httpx.AsyncClient(
            transport=httpx.ASGITransport(app=web),
            base_url="http://test",
            headers={"Content-Type": "application/json", **headers},
        )
        for name, headers in (("alice", ALICE), ("bob", BOB))
    }
    yield made
    for client in made.values():
        await client.aclose()


async def _cart(client: httpx.AsyncClient) -> str:
    started = await client.post("/api/workflows/cart/runs", json={})
    assert started.status_code in (200, 201, 202), started.text
    return str(started.json()["run_id"])


async def test_a_request_over_http_returns_the_reply(
    clients: dict[str, httpx.AsyncClient],
) -> None:
    alice = clients["alice"]
    run_id = await _cart(alice)
    sent = await alice.post(f"/api/runs/{run_id}/requests/add", json={"data": {"qty": 2}})
    assert sent.status_code == 200, sent.text
    assert sent.json() == {"run_id": run_id, "request": "add", "reply": {"total": 2}}


async def test_http_request_status_codes(
    engine: plait.Engine, clients: dict[str, httpx.AsyncClient]
) -> None:
    alice, bob = clients["alice"], clients["bob"]
    run_id = await _cart(alice)
    path = f"/api/runs/{run_id}/requests/add"
    # another user's run: 403, and nothing is sent
    denied = await bob.post(path, json={"data": {"qty": 1}})
    assert denied.status_code == 403, denied.text
    missing = await alice.post("/api/runs/no-such-run/requests/add", json={"data": {"qty": 1}})
    assert missing.status_code == 404
    assert missing.json()["error"]["code"] == "RUN_NOT_FOUND"
    # data that does not fit the wait's schema
    invalid = await alice.post(path, json={"data": {"qty": "lots"}})
    assert invalid.status_code == 422, invalid.text
    assert invalid.json()["error"]["code"] == "REQUEST_INVALID"
    assert [p["field"] for p in invalid.json()["error"]["problems"]] == ["qty"]
    # a body that is not one
    for body in ({"data": 1, "extra": 2}, {"timeout": 0}, {"timeout": 301}, [1]):
        bad = await alice.post(path, json=body)
        assert bad.status_code == 422, (body, bad.text)
    # refused by the workflow: 409 with its reason
    refused = await alice.post(path, json={"data": {"qty": 101}})
    assert refused.status_code == 409, refused.text
    assert refused.json()["error"]["code"] == "REQUEST_REFUSED"
    assert refused.json()["error"]["reason"] == "too many"
    done = await alice.post(path, json={"data": {"qty": 10}})
    assert done.status_code == 200 and done.json()["reply"] == {"total": 10}
    await engine.wait(run_id, timeout=10)
    # the run has ended: 409
    ended = await alice.post(path, json={"data": {"qty": 1}})
    assert ended.status_code == 409, ended.text
    assert ended.json()["error"]["code"] == "RUN_STATE_CONFLICT"


async def test_an_unanswered_http_request_times_out_with_409(
    clients: dict[str, httpx.AsyncClient],
) -> None:
    alice = clients["alice"]
    run_id = await _cart(alice)
    late = await alice.post(f"/api/runs/{run_id}/requests/other", json={"timeout": 0.2})
    assert late.status_code == 409, late.text
    assert late.json()["error"]["code"] == "REQUEST_TIMEOUT"


@app.workflow
async def slowpoke(wf: plait.Workflow, data: Any) -> Any:
    await wf.wait_for_event("go")
    req = await wf.wait_for_request("ask")
    await req.reply(req.data)


async def test_http_request_ends_at_once_when_the_server_shuts_down(database: str) -> None:
    """A request waiting for its reply is one of the waits a shutdown ends at once: 503,
    and the request, not taken yet, is withdrawn (the workflow never sees it)."""
    async with plait.Engine(app, database, poll_interval=0.2) as engine:
        web = create_app(engine, tokens=TOKENS)
        async with httpx.AsyncClient(
            transport=httpx.ASGITransport(app=web),
            base_url="http://test",
            headers={"Content-Type": "application/json", **ALICE},
            timeout=60,
        ) as alice:
            started = await alice.post("/api/workflows/slowpoke/runs", json={})
            run_id = started.json()["run_id"]
            sender = asyncio.ensure_future(
                alice.post(f"/api/runs/{run_id}/requests/ask", json={"data": 1, "timeout": 60})
            )

            async def sent() -> int:
                snapshot = await engine.store.load_pass(run_id)
                return 0 if snapshot is None else len(snapshot.requests)

            await eventually(sent, what="the request stored")
            web.state.lifecycle.begin_shutdown()
            try:
                answered = await asyncio.wait_for(asyncio.shield(sender), 5)
            except TimeoutError:
                sender.cancel()
                raise AssertionError(
                    "the request still waits 5 s after the shutdown began"
                ) from None
            assert answered.status_code == 503, answered.text
            assert answered.json()["error"]["code"] == "SHUTTING_DOWN"
            assert web.state.lifecycle.leftovers() == {}
            assert await sent() == 0  # withdrawn: no wait will take it
