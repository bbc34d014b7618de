"""Events over HTTP with a de-duplication key (``?dedup=KEY``: the body is the payload
whole), and a workflow an HTTP user starts reaching no run she could not reach herself."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

import plait
from plait.errors import StepError

httpx = pytest.importorskip("httpx", reason="httpx is needed to call the ASGI app")
pytest.importorskip("starlette", reason="the http extra (starlette) is not installed")

from plait.http import create_app  # noqa: E402

TOKENS = {"t-alice": "alice", "t-bob": "bob"}

app = plait.App("http-event-dedup")


@app.workflow
async def later(wf: plait.Workflow) -> Any:
    await wf.wait_for_event("go")
    return [await wf.wait_for_event("item"), await wf.wait_for_event("item")]


@app.workflow
async def send_to(wf: plait.Workflow, target: str) -> Any:
    try:
        await wf.send_event(target, "item", "from a workflow")
    except StepError as exc:
        return exc.code
    return "sent"


@pytest.fixture
async def engine(tmp_path: Path) -> AsyncIterator[plait.Engine]:
    async with plait.Engine(app, f"sqlite:///{tmp_path}/t.db", poll_interval=0.2) as opened:
        yield opened


@pytest.fixture
async def clients(engine: plait.Engine) -> AsyncIterator[dict[str, Any]]:
    web = create_app(engine, tokens=TOKENS)
    made = {
        user: httpx.AsyncClient(
            transport=httpx.ASGITransport(app=web),
            base_url="http://test",
            headers={"Content-Type": "application/json", "Authorization": f"Bearer t-{user}"},
        )
        for user in ("alice", "bob")
    }
    yield made
    for client in made.values():
        await client.aclose()


async def _start(client: Any, workflow: str, data: Any = None) -> str:
    response = await client.post(f"/api/workflows/{workflow}/runs", json={"input": data})
    assert response.status_code in (200, 201, 202), response.text
    return str(response.json()["run_id"])


async def test_an_event_sent_three_times_with_one_key_is_taken_once(
    engine: plait.Engine, clients: dict[str, Any]
) -> None:
    alice = clients["alice"]
    run_id = await _start(alice, "later")
    for _ in range(3):
        sent = await alice.post(f"/api/runs/{run_id}/events/item?dedup=k1", json={"n": 1})
        assert sent.status_code == 202, sent.text
        assert sent.json()["waiting"] is False
    sent = await alice.post(f"/api/runs/{run_id}/events/item?dedup=k2", json={"n": 2})
    assert sent.status_code == 202
    assert (await alice.post(f"/api/runs/{run_id}/events/go")).status_code == 202
    run = await engine.wait(run_id, timeout=10)
    assert run.output == [{"n": 1}, {"n": 2}]


async def test_a_bad_key_is_422_naming_dedup(engine: plait.Engine, clients: dict[str, Any]) -> None:
    alice = clients["alice"]
    run_id = await _start(alice, "later")
    queries = ("dedup=", "dedup=" + "x" * 513, "dedup=a%00b", "dedup=a&dedup=b", "dedup=__send:1")
    for query in queries:
        sent = await alice.post(f"/api/runs/{run_id}/events/item?{query}", json=1)
        assert sent.status_code == 422, (query, sent.text)
        assert [p["field"] for p in sent.json()["error"]["problems"]] == ["dedup"]
    snapshot = await engine.store.load_pass(run_id)
    assert snapshot is not None and snapshot.events == []
    # another user's run is 403 before the key is looked at
    bob = clients["bob"]
    assert (await bob.post(f"/api/runs/{run_id}/events/item?dedup=", json=1)).status_code == 403


async def test_a_workflow_started_over_http_reaches_only_its_users_runs(
    engine: plait.Engine, clients: dict[str, Any]
) -> None:
    alice, bob = clients["alice"], clients["bob"]
    bobs = await _start(bob, "later")
    alices = await _start(alice, "later")
    refused = await _start(alice, "send_to", bobs)
    assert (await engine.wait(refused, timeout=10)).output == "EVENT_NOT_SENT"
    allowed = await _start(alice, "send_to", alices)
    assert (await engine.wait(allowed, timeout=10)).output == "sent"
    for run_id, held in ((bobs, []), (alices, ['"from a workflow"'])):
        snapshot = await engine.store.load_pass(run_id)
        assert snapshot is not None
        assert [e.payload for e in snapshot.events] == held
