"""Tags and bulk actions over HTTP: a start's tags, ``GET /api/runs?tag=k:v``, and
``POST /api/runs/bulk``, which acts on the caller's own runs only (every user's with the
``admin`` scope); bad tags, filters and actions are 422 naming what is wrong."""

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
TOKENS = {**base.TOKENS, "t-root": Principal("root", frozenset({"admin"}))}


@app.workflow
async def parked_wait(wf: plait.Workflow, data: Any) -> str:
    await wf.suspend("hold")
    return "resumed"


@pytest.fixture
async def engine(database: str) -> AsyncIterator[plait.Engine]:
    async with plait.Engine(app, database, poll_interval=0.2) as opened:
        yield opened


@pytest.fixture
def client(engine: plait.Engine) -> Any:
    from plait.http import create_app

    def make(token: str) -> httpx.AsyncClient:
        web = create_app(engine, tokens=TOKENS)
        return httpx.AsyncClient(
            transport=httpx.ASGITransport(app=web),
            base_url="http://test",
            headers={"Content-Type": "application/json", "Authorization": f"Bearer {token}"},
        )

    return make


async def _suspended(engine: plait.Engine, client: httpx.AsyncClient, tag: str) -> str:
    run_id = (await base.start(client, "parked_wait", tags={"customer": tag}))["run_id"]
    assert (await engine.wait(run_id, timeout=20)).status == "suspended"
    return run_id


async def test_start_with_tags_and_list_by_them(engine: plait.Engine, client: Any) -> None:
    alice = client("t-alice")
    run_id = await _suspended(engine, alice, "acme")
    await _suspended(engine, alice, "globex")
    listed = (await alice.get("/api/runs", params={"tag": "customer:acme"})).json()
    assert [r["id"] for r in listed["runs"]] == [run_id]
    assert listed["runs"][0]["tags"] == {"customer": "acme"}
    both = await alice.get("/api/runs", params=[("tag", "customer:acme"), ("tag", "x:y")])
    assert both.json()["runs"] == []
    shown = (await alice.get(f"/api/runs/{run_id}")).json()
    assert shown["tags"] == {"customer": "acme"}

    bad = await alice.get("/api/runs", params={"tag": "customer"})
    assert bad.status_code == 422
    assert bad.json()["problems"][0]["field"] == "tag"
    assert "expected key:value" in bad.json()["problems"][0]["message"]
    twice = await alice.get("/api/runs", params=[("tag", "customer:a"), ("tag", "customer:b")])
    assert twice.status_code == 422  # one key, two values: no run holds both
    assert "key 'customer' given twice" in twice.json()["problems"][0]["message"]
    bad_key = await alice.post("/api/workflows/parked_wait/runs", json={"tags": {"A": "b"}})
    assert bad_key.status_code == 422
    assert bad_key.json()["problems"][0]["field"] == "tags"
    assert "'A'" in bad_key.json()["problems"][0]["message"]


async def test_bulk_acts_on_the_callers_own_runs_only(engine: plait.Engine, client: Any) -> None:
    alice, bob, root = client("t-alice"), client("t-bob"), client("t-root")
    mine = [await _suspended(engine, alice, "acme") for _ in range(3)]
    theirs = [await _suspended(engine, bob, "acme") for _ in range(2)]

    answer = await alice.post(
        "/api/runs/bulk", json={"action": "cancel", "filter": {"tags": {"customer": "acme"}}}
    )
    assert answer.status_code == 200, answer.text
    assert answer.json() == {"action": "cancel", "acted": 3}
    assert [(await engine.get_run(r)).status for r in mine] == ["cancelled"] * 3
    assert [(await engine.get_run(r)).status for r in theirs] == ["suspended"] * 2

    # naming another owner needs the admin scope
    other = await alice.post(
        "/api/runs/bulk", json={"action": "resume", "filter": {"owner": "bob"}}
    )
    assert other.status_code == 403
    assert [(await engine.get_run(r)).status for r in theirs] == ["suspended"] * 2

    everyone = await root.post("/api/runs/bulk", json={"action": "resume", "filter": {}})
    assert everyone.json()["acted"] == 2
    for run_id in theirs:
        assert (await engine.wait(run_id, timeout=20)).output == "resumed"


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"action": "drop", "filter": {}}, "action"),
        ({"action": "cancel", "filter": {"colour": "red"}}, "filter.colour"),
        ({"action": "cancel", "filter": {"tags": {"Bad": "x"}}}, "filter"),
        ({"action": "cancel", "filter": {"status": "nope"}}, "filter"),
        ({"action": "cancel", "extra": 1}, "extra"),
        ({"action": "retry", "rate": 0}, "rate"),
        ({"action": "retry", "rate": -5}, "rate"),
        ({"action": "retry", "rate": "fast"}, "rate"),
        ({"action": "retry", "rate": 1_000_000}, "rate"),
        # a time with no zone: which runs it names depends on where the caller is
        ({"action": "cancel", "filter": {"since": "2020-01-01T00:00"}}, "filter"),
    ],
)
async def test_bulk_refuses_bad_bodies(client: Any, body: dict[str, Any], field: str) -> None:
    answer = await client("t-alice").post("/api/runs/bulk", json=body)
    assert answer.status_code == 422, answer.text
    assert answer.json()["problems"][0]["field"] == field
