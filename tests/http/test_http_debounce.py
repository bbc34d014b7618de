"""Debounced starts and ``dedup_policy: "replace"`` over HTTP, on every store: a caller's
debounced starts share its own waiting run (never another user's), a replace cancels only
the caller's own run (403 for another user's, 409 for a shared one, which is left as it
is), and every bad field is a 422 naming it."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest

import plait

httpx = pytest.importorskip("httpx", reason="httpx is needed to call the ASGI app")
pytest.importorskip("starlette", reason="the http extra (starlette) is not installed")

from plait.http import create_app  # noqa: E402

TOKENS = {"t-alice": "alice", "t-bob": "bob"}

app = plait.App("http-debounce")


@app.workflow
async def gate(wf: plait.Workflow, data: Any) -> Any:
    await wf.wait_for_event("go")
    return data


@pytest.fixture
async def engine(database: str) -> AsyncIterator[plait.Engine]:
    async with plait.Engine(app, database, poll_interval=0.2) as opened:
        yield opened


@pytest.fixture
async def clients(engine: plait.Engine) -> AsyncIterator[dict[str, httpx.AsyncClient]]:
    web = create_app(engine, tokens=TOKENS)
    made = {
        name: httpx.AsyncClient(
            transport=httpx.ASGITransport(app=web),
            base_url="http://test",
            headers={"Content-Type": "application/json", "Authorization": f"Bearer {token}"},
        )
        for token, name in TOKENS.items()
    }
    yield made
    for client in made.values():
        await client.aclose()


async def _start(client: httpx.AsyncClient, **body: Any) -> httpx.Response:
    return await client.post("/api/workflows/gate/runs", json=body)


async def test_debounced_starts_share_the_callers_own_waiting_run(
    clients: dict[str, httpx.AsyncClient], engine: plait.Engine
) -> None:
    alice, bob = clients["alice"], clients["bob"]
    window = {"debounce": "1h", "debounce_key": "k", "debounce_max": "2h"}
    ids = []
    for n in range(3):
        answer = await _start(alice, input=n, **window)
        assert answer.status_code == 201, answer.text
        ids.append(answer.json()["run_id"])
    assert len(set(ids)) == 1
    run = await engine.get_run(ids[0])
    assert run.status == "queued" and run.input == 2 and run.owner == "alice"
    # bob's start with the key has a window of its own: alice's run is not touched
    theirs = await _start(bob, input="bob", **window)
    assert theirs.status_code == 201 and theirs.json()["run_id"] != ids[0]
    assert (await engine.get_run(ids[0])).input == 2


async def test_replace_cancels_only_the_callers_own_run(
    clients: dict[str, httpx.AsyncClient], engine: plait.Engine
) -> None:
    alice, bob = clients["alice"], clients["bob"]
    old = (await _start(alice, input="old", dedup="d")).json()["run_id"]
    new = await _start(alice, input="new", dedup="d", dedup_policy="replace")
    assert new.status_code == 201, new.text
    assert new.json()["run_id"] != old
    assert (await engine.get_run(old)).status == "cancelled"
    # bob may not cancel alice's run by naming its key: 403, and nothing changed
    refused = await _start(bob, input="bob", dedup="d", dedup_policy="replace")
    assert refused.status_code == 403, refused.text
    assert new.json()["run_id"] not in refused.text
    assert (await engine.get_run(new.json()["run_id"])).status in ("queued", "running")
    # a shared run (no owner) is readable by all, but a replace ends only one's own: 409
    shared = await engine.start("gate", "shared", dedup="s")
    held = await _start(alice, input="a", dedup="s", dedup_policy="replace")
    assert held.status_code == 409, held.text
    assert held.json()["error"]["code"] == "DEDUP_KEY_HELD"
    assert (await engine.get_run(shared)).status in ("queued", "running")
    runs = await engine.list_runs(workflow="gate")
    assert sorted(r.owner or "" for r in runs) == ["", "alice", "alice"]


@pytest.mark.parametrize(
    ("options", "field"),
    [
        ({"debounce": "soon"}, "debounce"),
        ({"debounce": 0}, "debounce"),
        ({"debounce": "5s", "debounce_max": "1s"}, "debounce_max"),
        ({"debounce": "5s", "debounce_key": ""}, "debounce_key"),
        ({"debounce": "5s", "debounce_key": 7}, "debounce_key"),
        ({"debounce_key": "k"}, "debounce_key"),
        ({"debounce_max": "1m"}, "debounce_max"),
        ({"debounce": "5s", "delay": "1s"}, "debounce"),
        ({"debounce": "5s", "run_id": "r-1"}, "run_id"),
        ({"dedup_policy": "newest"}, "dedup_policy"),
        ({"dedup_policy": None}, "dedup_policy"),
        ({"dedup_policy": "replace"}, "dedup_policy"),
        ({"dedup_policy": "replace", "dedup": "d", "debounce": "5s"}, "dedup_policy"),
    ],
)
async def test_bad_debounce_and_dedup_fields_are_422_naming_the_field(
    clients: dict[str, httpx.AsyncClient], options: dict[str, Any], field: str
) -> None:
    answer = await _start(clients["alice"], input=1, **options)
    assert answer.status_code == 422, answer.text
    assert answer.json()["error"]["problems"][0]["field"] == field
    assert (await clients["alice"].get("/api/runs")).json()["total"] == 0
