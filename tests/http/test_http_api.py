"""The JSON API: every route, its status codes, paging, owner checks and the SSE stream."""

from __future__ import annotations

import asyncio
import json
import re
import sys
import time
from collections.abc import AsyncIterator, Callable
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

import plait
from support.polling import eventually

httpx = pytest.importorskip("httpx", reason="httpx is needed to call the ASGI app")
pytest.importorskip("starlette", reason="the http extra (starlette) is not installed")

from starlette.routing import Mount, Route  # noqa: E402

from plait.http import Principal, create_app, load_app, parse_tokens  # noqa: E402

TOKENS = {"t-alice": Principal("alice", frozenset({"graphs"})), "t-bob": "bob"}
ALICE = {"Authorization": "Bearer t-alice"}
BOB = {"Authorization": "Bearer t-bob"}

app = plait.App("http-tests")


@app.function
async def add(data: dict) -> int:
    return int(data["a"]) + int(data["b"])


@app.function(retries=0)
def flaky(data: dict) -> str:
    """Fails until the flag file exists, so a test can make a retry succeed."""
    if not Path(data["flag"]).exists():
        raise RuntimeError("flag file missing")
    return "ok"


@app.workflow
async def simple(wf: plait.Workflow, data: Any) -> Any:
    return await wf.do("add", add, {"a": data or 0, "b": 1})


@app.workflow
async def other(wf: plait.Workflow, data: Any) -> Any:
    return "other"


@app.workflow
async def fanout(wf: plait.Workflow, data: Any) -> Any:
    first = await wf.do("first", add, {"a": 1, "b": 1})
    left, right = await asyncio.gather(
        wf.do("left", add, {"a": first, "b": 1}), wf.do("right", add, {"a": first, "b": 2})
    )
    return await wf.do("last", add, {"a": left, "b": right})


@app.workflow
async def waiter(wf: plait.Workflow, data: Any) -> Any:
    await wf.do("before", add, {"a": 1, "b": 1})
    return await wf.wait_for_event("go")


@app.workflow
async def pauser(wf: plait.Workflow, data: Any) -> Any:
    await wf.suspend("review")
    return "resumed"


@app.workflow
async def flaky_wf(wf: plait.Workflow, data: Any) -> Any:
    await wf.do("prepare", add, {"a": 1, "b": 2})
    return await wf.do("flaky", flaky, data)


@app.workflow
async def parent(wf: plait.Workflow, data: Any) -> Any:
    return await wf.do("child", "simple", 41)


# -- fixtures -------------------------------------------------------------------------------
@pytest.fixture
async def engine(tmp_path: Path) -> AsyncIterator[plait.Engine]:
    async with plait.Engine(app, f"sqlite:///{tmp_path}/t.db", poll_interval=0.2) as opened:
        yield opened


Client = Callable[..., httpx.AsyncClient]


@pytest.fixture
async def client_for(engine: plait.Engine) -> AsyncIterator[Client]:
    """Clients on one web app; ``client_for(headers, **create_app_options)``."""
    made: list[httpx.AsyncClient] = []

    def make(headers: dict[str, str] | None = None, **options: Any) -> httpx.AsyncClient:
        options.setdefault("tokens", TOKENS)
        web = create_app(engine, **options)
        # every request that changes something says it is JSON, even without a body
        client = httpx.AsyncClient(
            transport=httpx.ASGITransport(app=web),
            base_url="http://test",
            headers={"Content-Type": "application/json", **(headers or {})},
        )
        made.append(client)
        return client

    yield make
    for client in made:
        await client.aclose()


@pytest.fixture
def alice(client_for: Client) -> httpx.AsyncClient:
    return client_for(ALICE)


@pytest.fixture
def bob(client_for: Client) -> httpx.AsyncClient:
    return client_for(BOB)


@pytest.fixture
def anonymous(client_for: Client) -> httpx.AsyncClient:
    return client_for()


async def start(client: httpx.AsyncClient, workflow: str, data: Any = None, **body: Any) -> Any:
    response = await client.post(f"/api/workflows/{workflow}/runs", json={"input": data, **body})
    assert response.status_code in (200, 201, 202), response.text
    return response.json()


async def settled(engine: plait.Engine, run_id: str) -> plait.Run:
    return await engine.wait(run_id, timeout=10)


# -- authentication -------------------------------------------------------------------------
ROUTES = [
    ("GET", "/api/me"),
    ("GET", "/api/workflows"),
    ("POST", "/api/workflows/simple/runs"),
    ("GET", "/api/runs"),
    ("GET", "/api/runs/RID"),
    ("GET", "/api/runs/RID/history"),
    ("GET", "/api/runs/RID/graph"),
    ("GET", "/api/runs/RID/stream"),
    ("GET", "/api/runs/RID/streams/out"),
    ("POST", "/api/runs/RID/cancel"),
    ("POST", "/api/runs/RID/resume"),
    ("POST", "/api/runs/RID/retry"),
    ("POST", "/api/runs/RID/events/go"),
    ("POST", "/api/runs/RID/requests/ask"),
    ("GET", "/api/graphs"),
    ("POST", "/api/graphs"),
    ("GET", "/api/schedules"),
    ("POST", "/api/schedules"),
    ("GET", "/api/schedules/{name}"),
    ("DELETE", "/api/schedules/{name}"),
    ("POST", "/api/schedules/{name}/pause"),
    ("POST", "/api/schedules/{name}/resume"),
    ("POST", "/api/schedules/{name}/trigger"),
    ("GET", "/api/queues"),
    ("GET", "/api/approvals"),
    ("POST", "/api/runs/RID/approvals/gate"),
    ("POST", "/api/runs/RID/fork"),
    ("POST", "/api/runs/bulk"),
    ("POST", "/api/workflows/simple/pause"),
    ("POST", "/api/workflows/simple/resume"),
    ("POST", "/api/queues/{name}/pause"),
    ("POST", "/api/queues/{name}/resume"),
    ("GET", "/api/paused"),
    ("GET", "/api/workers"),
]


@pytest.mark.parametrize(("method", "path"), ROUTES)
async def test_every_api_route_needs_a_valid_token(
    engine: plait.Engine, client_for: Client, method: str, path: str
) -> None:
    run_id = await engine.start("waiter", None)
    path = path.replace("RID", run_id)
    for headers in (None, {"Authorization": "Bearer wrong"}, {"Authorization": "Basic abc"}):
        response = await client_for(headers).request(method, path, json={})
        assert response.status_code == 401, (headers, response.text)
        assert response.headers["www-authenticate"] == "Bearer"
        assert response.json()["error"]["code"] == "UNAUTHENTICATED"
    await engine.cancel(run_id)


def test_every_api_route_is_in_the_route_list_above(engine: plait.Engine) -> None:
    web = create_app(engine, tokens=TOKENS)
    mount = next(r for r in web.routes if isinstance(r, Mount) and r.path == "/api")
    declared = {
        (m, "/api" + r.path) for r in mount.routes if isinstance(r, Route) for m in r.methods or ()
    }
    listed = {(m, p.replace("RID", "{run_id}").replace("simple", "{name}")) for m, p in ROUTES}
    listed = {(m, p.replace("events/go", "events/{name}")) for m, p in listed}
    listed = {(m, p.replace("requests/ask", "requests/{name}")) for m, p in listed}
    listed = {(m, p.replace("streams/out", "streams/{name:path}")) for m, p in listed}
    listed |= {(m, "/api/session") for m in ("GET", "POST", "DELETE")}  # the sign-in
    listed = {(m, p.replace("approvals/gate", "approvals/{name}")) for m, p in listed}
    assert {(m, p) for m, p in declared if m != "HEAD"} == listed


async def test_me_and_workflows(alice: httpx.AsyncClient) -> None:
    me = await alice.get("/api/me")
    assert me.status_code == 200
    assert me.json() == {"user": "alice", "auth": True, "scopes": ["graphs"]}
    names = (await alice.get("/api/workflows")).json()["workflows"]
    assert {"name": "simple", "kind": "workflow"} in names


async def test_tokens_come_from_the_environment(
    engine: plait.Engine, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PLAIT_TOKENS", "carol:c-token, dave:d-token")
    web = create_app(engine)
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=web), base_url="http://t") as c:
        me = await c.get("/api/me", headers={"Authorization": "Bearer d-token"})
        assert me.json()["user"] == "dave"
        assert (await c.get("/api/me", headers={"Authorization": "Bearer x"})).status_code == 401


def test_parse_tokens() -> None:
    assert parse_tokens("alice:token1,bob:token2") == {
        "token1": Principal("alice"),
        "token2": Principal("bob"),
    }
    assert parse_tokens(" a:x:graphs , ") == {"x": Principal("a", frozenset({"graphs"}))}
    assert parse_tokens("") == {}
    for bad in ("alice", "alice:", ":tok", "a:t,b:t", "a:x:y", "a:x:graphs:z"):
        with pytest.raises(ValueError):
            parse_tokens(bad)


@pytest.mark.parametrize("is_async", [False, True])
async def test_authenticate_callable_decides(
    engine: plait.Engine, client_for: Client, is_async: bool
) -> None:
    def sync_user(request: Any) -> str | None:
        return request.headers.get("x-user")

    async def async_user(request: Any) -> str | None:
        return request.headers.get("x-user")

    client = client_for(None, tokens=None, authenticate=async_user if is_async else sync_user)
    assert (await client.get("/api/me")).status_code == 401
    assert (await client.get("/api/me", headers=ALICE)).status_code == 401  # tokens unused
    me = await client.get("/api/me", headers={"x-user": "erin"})
    assert me.json()["user"] == "erin"
    run_id = (await client.post("/api/workflows/simple/runs", headers={"x-user": "erin"})).json()
    run = await settled(engine, run_id["run_id"])
    assert run.owner == "erin"


async def test_no_auth_needs_no_token_and_sees_every_run(
    engine: plait.Engine, client_for: Client, alice: httpx.AsyncClient
) -> None:
    owned = (await start(alice, "simple", 1))["run_id"]
    local = client_for(None, no_auth=True)
    me = (await local.get("/api/me")).json()
    assert (me["user"], me["auth"], "graphs" in me["scopes"]) == (None, False, True)
    created = await start(local, "simple", 2)
    run = await settled(engine, created["run_id"])
    assert run.owner is None
    assert (await local.get(f"/api/runs/{owned}")).status_code == 200
    listed = (await local.get("/api/runs")).json()
    assert {r["id"] for r in listed["runs"]} == {owned, created["run_id"]}


# -- starting runs --------------------------------------------------------------------------
async def test_start_returns_201_and_records_the_owner(
    engine: plait.Engine, alice: httpx.AsyncClient
) -> None:
    response = await alice.post("/api/workflows/simple/runs", json={"input": 4})
    assert response.status_code == 201
    run_id = response.json()["run_id"]
    run = await settled(engine, run_id)
    assert (run.status, run.output, run.owner) == ("completed", 5, "alice")
    body = (await alice.get(f"/api/runs/{run_id}")).json()
    assert body["id"] == run_id
    assert body["status"] == "completed"
    assert body["owner"] == "alice"
    assert [s["key"] for s in body["steps"]] == ["add"]
    assert body["steps"][0]["output"] == 5


async def test_start_without_a_body_means_null_input(
    engine: plait.Engine, alice: httpx.AsyncClient
) -> None:
    response = await alice.post("/api/workflows/simple/runs")
    assert response.status_code == 201
    assert (await settled(engine, response.json()["run_id"])).output == 1


async def test_start_with_wait_answers_200_with_the_finished_run(
    alice: httpx.AsyncClient,
) -> None:
    response = await alice.post("/api/workflows/simple/runs", json={"input": 1, "wait": True})
    assert response.status_code == 200
    body = response.json()
    assert body["status"] == "completed"
    assert body["output"] == 2
    assert body["steps"][0]["status"] == "succeeded"


async def test_start_with_wait_and_timeout_answers_202_while_running(
    engine: plait.Engine, alice: httpx.AsyncClient
) -> None:
    response = await alice.post(
        "/api/workflows/waiter/runs", json={"wait": True, "wait_timeout": 0.2}
    )
    assert response.status_code == 202
    assert response.json()["status"] == "running"
    await engine.cancel(response.json()["id"])


async def test_start_timeout_is_the_run_deadline(
    engine: plait.Engine, alice: httpx.AsyncClient
) -> None:
    response = await alice.post("/api/workflows/waiter/runs", json={"timeout": "1h"})
    assert response.status_code == 201, response.text
    run = await engine.get_run(response.json()["run_id"])
    assert run.deadline_at is not None
    assert abs((run.deadline_at - run.created_at).total_seconds() - 3600) < 5
    shown = (await alice.get(f"/api/runs/{run.id}")).json()
    assert shown["deadline_at"] == run.deadline_at.isoformat()
    await engine.cancel(run.id)


@pytest.mark.parametrize("bad", ["soon", "-5s", 0, -1, True, [60]])
async def test_a_bad_start_timeout_is_422_naming_the_field(
    engine: plait.Engine, alice: httpx.AsyncClient, bad: Any
) -> None:
    response = await alice.post("/api/workflows/waiter/runs", json={"timeout": bad})
    assert response.status_code == 422, response.text
    assert response.json()["error"]["problems"][0]["field"] == "timeout"
    assert await engine.list_runs() == []


async def test_start_unknown_workflow_is_404(alice: httpx.AsyncClient) -> None:
    response = await alice.post("/api/workflows/nope/runs", json={"input": 1})
    assert response.status_code == 404
    assert response.json()["error"]["code"] == "WORKFLOW_NOT_FOUND"


async def test_malformed_start_body_is_422_listing_every_problem(
    alice: httpx.AsyncClient,
) -> None:
    response = await alice.post(
        "/api/workflows/simple/runs", json={"wait": "yes", "run_id": "", "colour": "red"}
    )
    assert response.status_code == 422
    error = response.json()["error"]
    fields = sorted(p["field"] for p in error["problems"])
    assert fields == ["colour", "run_id", "wait"]
    assert error["message"] == "3 problems in the request body"
    for body in (b"{not json", b"[1, 2]", b'"text"'):
        response = await alice.post(
            "/api/workflows/simple/runs",
            content=body,
            headers={"Content-Type": "application/json"},
        )
        assert response.status_code == 422, body
        assert response.json()["error"]["problems"]


async def test_start_node_on_a_code_workflow_is_422(alice: httpx.AsyncClient) -> None:
    response = await alice.post("/api/workflows/simple/runs", json={"start_node": "x"})
    assert response.status_code == 422
    assert response.json()["error"]["problems"][0]["field"] == "start_node"


async def test_run_id_is_an_idempotency_key_per_owner(
    engine: plait.Engine, alice: httpx.AsyncClient, bob: httpx.AsyncClient
) -> None:
    first = await alice.post("/api/workflows/simple/runs", json={"run_id": "order-1"})
    again = await alice.post("/api/workflows/simple/runs", json={"run_id": "order-1"})
    assert first.status_code == again.status_code == 201
    assert first.json() == again.json() == {"run_id": "order-1"}
    total = (await alice.get("/api/runs")).json()["total"]
    assert total == 1
    stolen = await bob.post("/api/workflows/simple/runs", json={"run_id": "order-1"})
    assert stolen.status_code == 403
    other_wf = await alice.post("/api/workflows/other/runs", json={"run_id": "order-1"})
    assert other_wf.status_code == 409
    assert other_wf.json()["error"]["code"] == "RUN_ID_TAKEN"
    # another user learns nothing from another workflow's name either
    probe = await bob.post("/api/workflows/other/runs", json={"run_id": "order-1"})
    assert probe.status_code == 403
    await settled(engine, "order-1")


async def test_a_dedup_key_answers_only_to_the_owner_of_its_run(
    engine: plait.Engine, alice: httpx.AsyncClient, bob: httpx.AsyncClient
) -> None:
    secret = {"card": "4111-1111-1111-1111"}
    body = {"input": secret, "dedup": "order-7"}
    run_id = (await start(alice, "waiter", **body))["run_id"]
    again = await alice.post("/api/workflows/waiter/runs", json=body)
    assert again.status_code == 201 and again.json() == {"run_id": run_id}
    # Bob's start resolves to Alice's live run: 403, as a run id of hers would, and
    # nothing of her run (not even its id) is in the answer; with "wait" nobody waits
    for extra in ({}, {"wait": True, "wait_timeout": 5}, {"run_id": "bobs-own"}):
        began = time.monotonic()
        response = await bob.post(
            "/api/workflows/waiter/runs", json={"input": None, "dedup": "order-7", **extra}
        )
        assert response.status_code == 403, (extra, response.text)
        assert response.json()["error"]["code"] == "FORBIDDEN"
        assert run_id not in response.text and "4111" not in response.text
        assert time.monotonic() - began < 2
        # a dedup key spans workflows: a start of another one finds the same run
        other = await bob.post("/api/workflows/simple/runs", json={"dedup": "order-7", **extra})
        assert other.status_code == 403 and run_id not in other.text
    assert (await engine.get_run(run_id)).status == "running"  # Bob touched nothing
    assert (await bob.get("/api/runs")).json()["total"] == 0  # nor started anything
    # a run without an owner is shared, whichever way a start finds it
    shared = await engine.start("waiter", dedup="shared-1")
    found = await bob.post("/api/workflows/waiter/runs", json={"dedup": "shared-1"})
    assert found.status_code == 201 and found.json() == {"run_id": shared}
    # once Alice's run has ended the key is free again, for Bob too
    assert (await alice.post(f"/api/runs/{run_id}/events/go", json=1)).status_code == 202
    assert (await settled(engine, run_id)).status == "completed"
    mine = await bob.post("/api/workflows/waiter/runs", json={"dedup": "order-7"})
    assert mine.status_code == 201 and mine.json()["run_id"] != run_id
    for rid in (shared, mine.json()["run_id"]):
        await engine.cancel(rid)


# -- reading --------------------------------------------------------------------------------
async def test_unknown_run_is_404_on_every_run_route(alice: httpx.AsyncClient) -> None:
    for method, path in ROUTES:
        if "RID" not in path:
            continue
        response = await alice.request(method, path.replace("RID", "missing"))
        assert response.status_code == 404, path
        assert response.json()["error"]["code"] == "RUN_NOT_FOUND"


async def test_owner_can_another_user_gets_403(
    engine: plait.Engine, alice: httpx.AsyncClient, bob: httpx.AsyncClient
) -> None:
    run_id = (await start(alice, "waiter"))["run_id"]
    for method, path in ROUTES:
        if "RID" not in path:
            continue
        response = await bob.request(method, path.replace("RID", run_id))
        assert response.status_code == 403, path
        assert response.json()["error"]["code"] == "FORBIDDEN"
    assert (await alice.get(f"/api/runs/{run_id}")).status_code == 200
    assert (await alice.get(f"/api/runs/{run_id}/history")).status_code == 200
    assert (await alice.get(f"/api/runs/{run_id}/graph")).status_code == 200
    assert (await alice.post(f"/api/runs/{run_id}/events/go", json=1)).status_code == 202
    assert (await settled(engine, run_id)).status == "completed"
    # Bob's list leaves Alice's run out; a run without an owner is shared.
    shared = await engine.start("simple", 1)
    await settled(engine, shared)
    assert [r["id"] for r in (await bob.get("/api/runs")).json()["runs"]] == [shared]
    assert (await bob.get(f"/api/runs/{shared}")).status_code == 200
    assert {r["id"] for r in (await alice.get("/api/runs")).json()["runs"]} == {run_id, shared}


async def test_list_runs_pages_newest_first_and_filters(
    engine: plait.Engine, alice: httpx.AsyncClient
) -> None:
    ids = [(await start(alice, "simple", i, wait=True))["id"] for i in range(5)]
    ids.append((await start(alice, "other", wait=True))["id"])
    failed = (await start(alice, "flaky_wf", {"flag": "/nonexistent/flag"}, wait=True))["id"]
    newest_first = [failed, *reversed(ids)]

    seen: list[str] = []
    for offset in range(0, 7, 3):
        page = (await alice.get("/api/runs", params={"limit": 3, "offset": offset})).json()
        assert page["total"] == 7
        assert (page["limit"], page["offset"]) == (3, offset)
        seen += [r["id"] for r in page["runs"]]
    assert seen == newest_first
    assert not {"steps", "input", "output", "error"} & set(page["runs"][0])

    simple = (await alice.get("/api/runs", params={"workflow": "simple"})).json()
    assert simple["total"] == 5
    assert {r["workflow"] for r in simple["runs"]} == {"simple"}
    only_failed = (await alice.get("/api/runs", params={"status": "failed"})).json()
    assert [r["id"] for r in only_failed["runs"]] == [failed]
    both = await alice.get("/api/runs", params={"workflow": "other", "status": "completed"})
    assert both.json()["total"] == 1
    empty = await alice.get("/api/runs", params={"offset": 100})
    assert empty.json() == {"runs": [], "total": 7, "limit": 50, "offset": 100}


async def test_list_runs_by_id_time_and_parent(
    engine: plait.Engine, alice: httpx.AsyncClient, bob: httpx.AsyncClient
) -> None:
    first = (await start(alice, "simple", 1, wait=True))["id"]
    family = await start(alice, "parent", wait=True)
    child = family["children"][0]["id"]
    theirs = (await start(bob, "parent", wait=True))["id"]

    async def ids(client: httpx.AsyncClient, **params: Any) -> list[str]:
        response = await client.get("/api/runs", params=params)
        assert response.status_code == 200, response.text
        return [r["id"] for r in response.json()["runs"]]

    # a short id as the dashboard shows it (the end of the id), in any case
    assert await ids(alice, id=first[-8:].upper()) == [first]
    assert await ids(bob, id=first[-8:]) == []  # another user's run stays hidden
    assert await ids(bob, id=theirs[-8:]) == [theirs]
    # children fold under their parents; the parent counts the ones its reader may see
    top = (await alice.get("/api/runs", params={"top_level": "true"})).json()["runs"]
    assert [r["id"] for r in top] == [family["id"], first]
    assert [r["children"] for r in top] == [1, 0]
    assert await ids(alice, parent=family["id"]) == [child]
    assert await ids(alice, parent=theirs) == []
    # a time range; a time without a zone is UTC
    made = datetime.fromisoformat((await alice.get(f"/api/runs/{child}")).json()["created_at"])
    cut = (made - timedelta(microseconds=500)).isoformat()  # below the rounding of times
    assert child in await ids(alice, since=cut)
    assert first not in await ids(alice, since=cut)
    assert await ids(alice, until=cut, id=first) == [first]
    assert await ids(alice, since="2000-01-01T00:00", until="2000-01-02T00:00") == []


@pytest.mark.parametrize(
    ("params", "field", "says"),
    [
        ({"since": "yesterday"}, "since", "is not a date and time; give ISO 8601"),
        ({"until": "2026-13-45T99:00"}, "until", "is not a date and time"),
        ({"since": "2026-02-01", "until": "2026-01-01"}, "since", "not be later than until"),
        ({"top_level": "maybe"}, "top_level", ""),
        ({"parent": "a/b"}, "parent", ""),
        ({"id": ""}, "id", ""),
    ],
)
async def test_a_malformed_time_or_filter_is_a_422_that_says_why(
    alice: httpx.AsyncClient, params: dict[str, str], field: str, says: str
) -> None:
    response = await alice.get("/api/runs", params=params)
    assert response.status_code == 422, response.text
    (problem,) = response.json()["error"]["problems"]
    assert problem["field"] == field
    assert says in problem["message"]


@pytest.mark.parametrize(
    "params",
    [{"limit": 0}, {"limit": "many"}, {"limit": 100000}, {"offset": -1}, {"status": "done"}],
)
async def test_list_runs_bad_query_is_422(alice: httpx.AsyncClient, params: Any) -> None:
    response = await alice.get("/api/runs", params=params)
    assert response.status_code == 422
    assert response.json()["error"]["problems"][0]["field"] in params


async def test_run_shows_child_runs(engine: plait.Engine, alice: httpx.AsyncClient) -> None:
    body = await start(alice, "parent", wait=True)
    assert body["status"] == "completed"
    child_id = body["steps"][0]["child_run_id"]
    assert child_id
    assert [c["id"] for c in body["children"]] == [child_id]
    child = (await alice.get(f"/api/runs/{child_id}")).json()
    assert child["parent_run_id"] == body["id"]
    assert child["owner"] == "alice"


async def test_history_lists_every_attempt_oldest_first(
    engine: plait.Engine, alice: httpx.AsyncClient, tmp_path: Path
) -> None:
    flag = tmp_path / "flag"
    run = await start(alice, "flaky_wf", {"flag": str(flag)}, wait=True)
    assert run["status"] == "failed"
    assert run["error"]["message"] == "flag file missing"
    flag.touch()
    retried = await alice.post(f"/api/runs/{run['id']}/retry")
    assert retried.status_code == 202
    assert retried.json()["status"] == "running"
    assert (await settled(engine, run["id"])).status == "completed"
    history = (await alice.get(f"/api/runs/{run['id']}/history")).json()
    attempts = [(a["key"], a["attempt"], a["status"]) for a in history["attempts"]]
    assert attempts == [
        ("prepare", 1, "succeeded"),
        ("flaky", 1, "failed"),
        ("flaky", 2, "succeeded"),
    ]
    starts = [a["started_at"] for a in history["attempts"]]
    assert starts == sorted(starts)


# -- acting on runs -------------------------------------------------------------------------
async def test_resume_cancel_and_retry_follow_the_run_status(
    engine: plait.Engine, alice: httpx.AsyncClient
) -> None:
    run_id = (await start(alice, "pauser"))["run_id"]
    assert (await settled(engine, run_id)).status == "suspended"
    conflict = await alice.post(f"/api/runs/{run_id}/retry")
    assert conflict.status_code == 409
    assert conflict.json()["error"]["run_status"] == "suspended"
    resumed = await alice.post(f"/api/runs/{run_id}/resume")
    assert resumed.status_code == 202
    assert resumed.json()["id"] == run_id
    assert (await settled(engine, run_id)).output == "resumed"
    for action in ("resume", "retry", "cancel"):
        response = await alice.post(f"/api/runs/{run_id}/{action}")
        assert response.status_code == 409, action
        assert response.json()["error"]["code"] == "RUN_STATE_CONFLICT"

    waiting = (await start(alice, "waiter"))["run_id"]
    cancelled = await alice.post(f"/api/runs/{waiting}/cancel")
    assert cancelled.status_code == 202
    assert cancelled.json()["status"] == "cancelled"
    assert (await alice.post(f"/api/runs/{waiting}/events/go")).status_code == 409


async def test_send_event_delivers_the_body_as_payload(
    engine: plait.Engine, alice: httpx.AsyncClient
) -> None:
    run_id = (await start(alice, "waiter"))["run_id"]
    sent = await alice.post(f"/api/runs/{run_id}/events/go", json={"ok": [1, 2]})
    assert sent.status_code == 202
    assert {k: v for k, v in sent.json().items() if k != "waiting"} == {
        "run_id": run_id,
        "event": "go",
    }
    assert isinstance(sent.json()["waiting"], bool)
    run = await settled(engine, run_id)
    assert run.output == {"ok": [1, 2]}
    bad = await alice.post(
        f"/api/runs/{run_id}/events/go",
        content=b"{oops",
        headers={"Content-Type": "application/json"},
    )
    assert bad.status_code == 422


async def test_event_without_a_body_has_a_null_payload(
    engine: plait.Engine, alice: httpx.AsyncClient
) -> None:
    run_id = (await start(alice, "waiter"))["run_id"]
    assert (await alice.post(f"/api/runs/{run_id}/events/go")).status_code == 202
    run = await settled(engine, run_id)
    assert (run.status, run.output) == ("completed", None)


# -- the graph drawing ----------------------------------------------------------------------
async def test_graph_of_a_code_workflow_puts_parallel_steps_side_by_side(
    alice: httpx.AsyncClient,
) -> None:
    run = await start(alice, "fanout", wait=True)
    assert run["status"] == "completed"
    graph = (await alice.get(f"/api/runs/{run['id']}/graph")).json()
    assert graph["kind"] == "steps"
    layers = {n["id"]: n["layer"] for n in graph["nodes"]}
    assert layers == {"first": 0, "left": 1, "right": 1, "last": 2}
    assert {n["state"] for n in graph["nodes"]} == {"succeeded"}
    assert graph["svg"].startswith("<svg")
    assert 'data-node="left"' in graph["svg"]
    edges = {(e["source"], e["target"]) for e in graph["edges"]}
    assert edges == {("first", "left"), ("first", "right"), ("left", "last"), ("right", "last")}


async def test_graph_of_a_failed_run_marks_the_failed_step(alice: httpx.AsyncClient) -> None:
    run = await start(alice, "flaky_wf", {"flag": "/nonexistent"}, wait=True)
    graph = (await alice.get(f"/api/runs/{run['id']}/graph")).json()
    assert [(n["id"], n["state"]) for n in graph["nodes"]] == [
        ("prepare", "succeeded"),
        ("flaky", "failed"),
    ]
    assert 'class="node n-failed"' in graph["svg"]


# -- run-time graphs ------------------------------------------------------------------------
async def test_graph_routes(engine: plait.Engine, alice: httpx.AsyncClient) -> None:
    listed = await alice.get("/api/graphs")
    assert listed.status_code == 200
    assert isinstance(listed.json()["graphs"], list)
    definition = {"nodes": {"one": {"function": "add", "input": {"a": 1, "b": 2}}}}
    response = await alice.post("/api/graphs", json={"name": "g1", "definition": definition})
    assert response.status_code == 201, response.text
    assert response.json()["version"]
    graphs = (await alice.get("/api/graphs")).json()["graphs"]
    assert [(g["name"], g["source"], g["status"]) for g in graphs] == [
        ("g1", "registered", "active")
    ]
    assert graphs[0]["version"] == response.json()["version"]
    startable = (await alice.get("/api/workflows")).json()["workflows"]
    assert {"name": "g1", "kind": "graph"} in startable
    run = await start(alice, "g1", wait=True)
    assert (run["kind"], run["status"], run["output"]) == ("graph", "completed", 3)
    drawn = (await alice.get(f"/api/runs/{run['id']}/graph")).json()
    assert [(n["id"], n["state"]) for n in drawn["nodes"]] == [("one", "succeeded")]
    bad = await alice.post(
        "/api/graphs", json={"name": "g2", "definition": {"nodes": {"a": {"next": "zzz"}}}}
    )
    assert bad.status_code == 422
    assert bad.json()["error"]["problems"]


async def test_register_graph_body_is_validated(
    engine: plait.Engine, alice: httpx.AsyncClient
) -> None:
    if not callable(getattr(engine, "register_graph", None)):
        pytest.skip("Engine.register_graph is not there yet")
    response = await alice.post("/api/graphs", json={"definition": [], "status": "live"})
    assert response.status_code == 422
    fields = sorted(p["field"] for p in response.json()["error"]["problems"])
    assert fields == ["definition", "name", "status"]


async def test_graph_run_is_drawn_from_its_definition(tmp_path: Path) -> None:
    graph_app = plait.App("graphs")
    graph_app.function(add)
    try:
        graph_app.graph(
            "pair",
            {
                "nodes": {
                    "one": {
                        "function": "add",
                        "input": {"a": 1, "b": 2},
                        "next": "two",
                        "on_error": "never",
                    },
                    "two": {"function": "add", "input": {"a": 3, "b": 4}},
                    "never": {"function": "add", "input": {"a": 0, "b": 0}},
                },
            },
        )
        from plait.runtime.graph_replay import GraphReplay  # noqa: F401
    except (ImportError, AttributeError) as exc:
        pytest.skip(f"graph workflows are not available yet: {exc}")
    async with plait.Engine(graph_app, f"sqlite:///{tmp_path}/g.db") as engine:
        web = create_app(engine, no_auth=True)
        async with httpx.AsyncClient(
            transport=httpx.ASGITransport(app=web), base_url="http://t"
        ) as client:
            run = await start(client, "pair", {}, wait=True)
            assert run["kind"] == "graph"
            drawn = (await client.get(f"/api/runs/{run['id']}/graph")).json()
    assert drawn["kind"] == "graph"
    states = {n["id"]: n["state"] for n in drawn["nodes"]}
    assert states["never"] == "not_reached"
    if run["status"] == "completed":
        assert states["one"] == states["two"] == "succeeded"
    layers = {n["id"]: n["layer"] for n in drawn["nodes"]}
    assert layers["two"] == layers["one"] + 1


# -- server-sent events ---------------------------------------------------------------------
class AsgiStream:
    """Calls the ASGI app directly so a test can read a streaming body as it arrives
    (httpx's ASGITransport only returns once the whole body is there)."""

    def __init__(self, web: Any, path: str, headers: dict[str, str]) -> None:
        self.web = web
        self.scope = {
            "type": "http",
            "asgi": {"version": "3.0"},
            "http_version": "1.1",
            "method": "GET",
            "scheme": "http",
            "path": path,
            "raw_path": path.encode(),
            "query_string": b"",
            "root_path": "",
            "headers": [(b"host", b"test")]
            + [(k.lower().encode(), v.encode()) for k, v in headers.items()],
            "server": ("test", 80),
            "client": ("127.0.0.1", 5000),
        }
        self.status: int | None = None
        self.headers: dict[str, str] = {}
        self.chunks: asyncio.Queue[bytes | None] = asyncio.Queue()
        self.closed = asyncio.Event()
        self.buffer = ""
        self.task: asyncio.Task[None] | None = None

    async def __aenter__(self) -> AsgiStream:
        requested = False

        async def receive() -> dict[str, Any]:
            nonlocal requested
            if not requested:
                requested = True
                return {"type": "http.request", "body": b"", "more_body": False}
            await self.closed.wait()
            return {"type": "http.disconnect"}

        async def send(message: dict[str, Any]) -> None:
            if message["type"] == "http.response.start":
                self.status = message["status"]
                self.headers = {k.decode(): v.decode() for k, v in message["headers"]}
            elif message["type"] == "http.response.body":
                if message.get("body"):
                    await self.chunks.put(message["body"])
                if not message.get("more_body"):
                    await self.chunks.put(None)

        self.task = asyncio.create_task(self.web(self.scope, receive, send))
        return self

    async def __aexit__(self, *exc: object) -> None:
        self.closed.set()
        assert self.task is not None
        await asyncio.wait_for(self.task, 10)

    async def next_event(self, timeout: float = 10.0) -> tuple[str, Any] | None:
        """The next (event, data) pair, or None when the stream has ended."""
        while "\n\n" not in self.buffer:
            chunk = await asyncio.wait_for(self.chunks.get(), timeout)
            if chunk is None:
                return None
            self.buffer += chunk.decode()
        message, self.buffer = self.buffer.split("\n\n", 1)
        name, data = "message", None
        for line in message.splitlines():
            if line.startswith("event: "):
                name = line[7:]
            elif line.startswith("data: "):
                data = json.loads(line[6:])
        if data is None:  # a comment (keep-alive)
            return await self.next_event(timeout)
        return name, data


async def test_stream_sends_changes_and_ends_when_the_run_completes(
    engine: plait.Engine, client_for: Client, alice: httpx.AsyncClient
) -> None:
    web = create_app(engine, tokens=TOKENS)
    run_id = (await start(alice, "waiter"))["run_id"]

    async def waiting_for_event() -> bool:
        steps = await engine.get_steps(run_id)
        return any(s.kind == "event" for s in steps)

    await eventually(waiting_for_event)
    async with AsgiStream(web, f"/api/runs/{run_id}/stream", ALICE) as stream:
        first = await stream.next_event()
        assert stream.status == 200
        assert stream.headers["content-type"].startswith("text/event-stream")
        assert first is not None
        name, data = first
        assert name == "run"
        assert data["id"] == run_id
        assert data["status"] == "running"
        assert data["steps"][0]["key"] == "before"

        await alice.post(f"/api/runs/{run_id}/events/go", json="payload")
        events = []
        while (event := await stream.next_event()) is not None:
            events.append(event)
    assert events[-1] == ("end", {"run_id": run_id, "status": "completed"})
    last_run = [d for n, d in events if n == "run"][-1]
    assert last_run["status"] == "completed"
    assert last_run["output"] == "payload"


async def test_stream_ends_at_once_for_a_suspended_or_finished_run(
    engine: plait.Engine, alice: httpx.AsyncClient
) -> None:
    paused = (await start(alice, "pauser"))["run_id"]
    await settled(engine, paused)
    done = (await start(alice, "simple", wait=True))["id"]
    for run_id, status in ((paused, "suspended"), (done, "completed")):
        response = await alice.get(f"/api/runs/{run_id}/stream")
        assert response.status_code == 200
        messages = [m for m in response.text.split("\n\n") if m]
        assert len(messages) == 2
        assert messages[0].startswith("event: run\nid: 1\ndata: {")
        assert messages[1] == (
            'event: end\ndata: {"run_id":"' + run_id + '","status":"' + status + '"}'
        )


# -- documents and pages --------------------------------------------------------------------
async def test_openapi_document_describes_every_route(
    engine: plait.Engine, anonymous: httpx.AsyncClient
) -> None:
    response = await anonymous.get("/openapi.json")
    assert response.status_code == 200
    doc = response.json()
    assert doc["openapi"].startswith("3.")
    web = create_app(engine, tokens=TOKENS)
    mount = next(r for r in web.routes if isinstance(r, Mount) and r.path == "/api")
    for route in mount.routes:
        assert isinstance(route, Route)
        path = "/api" + route.path.replace(":path}", "}")  # OpenAPI has no converters
        assert path in doc["paths"], path
        for method in route.methods or ():
            if method != "HEAD":
                assert method.lower() in doc["paths"][path], (method, path)
    start_body = doc["components"]["schemas"]["StartRun"]
    assert set(start_body["properties"]) >= {"input", "run_id", "wait"}


async def test_dashboard_pages_and_assets_are_served(anonymous: httpx.AsyncClient) -> None:
    home = await anonymous.get("/")
    assert home.status_code == 200
    assert home.headers["content-type"].startswith("text/html")
    assert 'data-page="runs"' in home.text
    entry = re.search(
        r'<script type="module" src="(/static/js/[0-9a-f]+)/main\.js"></script>', home.text
    )
    assert entry is not None, home.text
    for attribute in ('src="http', 'href="http', "src='http", "href='http", "url(http"):
        assert attribute not in home.text  # nothing from a CDN: it works offline
    page = await anonymous.get("/runs/abc<script>")
    assert page.status_code == 200
    assert 'data-run-id="abc&lt;script&gt;"' in page.text
    filtered = await anonymous.get("/", params={"status": "failed", "workflow": '"x'})
    assert '<option value="failed" selected>' in filtered.text
    assert 'data-selected="&quot;x"' in filtered.text
    # the filters a page is given back are escaped, and a time that is not one is for the
    # page's script to report (from the API's 422), not a reason to fail the page
    searched = await anonymous.get("/", params={"id": '"><script>x', "since": "garbage"})
    assert searched.status_code == 200
    assert "<script>x" not in searched.text and 'value="&quot;&gt;&lt;script&gt;x"' in searched.text
    uuid_run = await anonymous.get("/runs/01968f2a-3b4c-7d5e-8f60-7182a3b4c5d6")
    assert ">a3b4c5d6</span>" in uuid_run.text  # the random end of a UUIDv7
    css = await anonymous.get("/static/dashboard.css")
    assert css.status_code == 200 and "text/css" in css.headers["content-type"]
    # the entry module and every module it imports, and theirs, from the same versioned
    # folder, each as JavaScript (a browser runs a module served as anything else never)
    seen: set[str] = set()
    todo = ["main.js"]
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        seen.add(name)
        module = await anonymous.get(f"{entry[1]}/{name}")
        assert module.status_code == 200, name
        assert module.headers["content-type"] == "text/javascript; charset=utf-8", name
        todo += re.findall(r'^import \{[^}]*\} from "\./([\w-]+\.js)";$', module.text, re.M)
    shipped = Path(plait.__file__).parent / "http" / "static" / "js"
    assert seen == {path.name for path in shipped.glob("*.js")}


async def test_unknown_api_path_and_wrong_method_answer_json(alice: httpx.AsyncClient) -> None:
    missing = await alice.get("/api/nothing-here")
    assert missing.status_code == 404
    assert missing.json()["error"]["code"] == "NOT_FOUND"
    wrong = await alice.delete("/api/runs")
    assert wrong.status_code == 405
    assert wrong.json()["error"]["code"] == "METHOD_NOT_ALLOWED"


# -- serve ----------------------------------------------------------------------------------
def test_load_app_imports_module_attribute(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "myflows.py").write_text(
        "import plait\napp = plait.App('mine')\nclass Holder:\n    app = app\nnot_app = 3\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    assert load_app("myflows:app").name == "mine"
    assert load_app("myflows:Holder.app").name == "mine"
    with pytest.raises(TypeError, match=r"not a plait\.App"):
        load_app("myflows:not_app")
    with pytest.raises(ValueError, match="module:attribute"):
        load_app("myflows")
    with pytest.raises(ValueError, match="no attribute"):
        load_app("myflows:missing")
    sys.modules.pop("myflows", None)


async def test_app_lifespan_opens_and_closes_an_unopened_engine(tmp_path: Path) -> None:
    engine = plait.Engine(app, f"sqlite:///{tmp_path}/life.db")
    web = create_app(engine, no_auth=True)
    async with web.router.lifespan_context(web):
        run_id = await engine.start("simple", 1)
        assert (await engine.wait(run_id, timeout=10)).output == 2
    # Engine has no public "is open" yet; a closed engine's start() would hang.
    assert engine._opened is False


async def test_app_lifespan_leaves_an_open_engine_open(engine: plait.Engine) -> None:
    web = create_app(engine, no_auth=True)
    async with web.router.lifespan_context(web):
        pass
    run_id = await engine.start("simple", 1)
    assert (await engine.wait(run_id, timeout=10)).output == 2
