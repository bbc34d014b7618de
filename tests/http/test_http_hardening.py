"""The HTTP API and dashboard under attack, over real HTTP against a live server on each
store: one test (or a few) for every hole of the hardening review.

1. graphs: scopes and owners   2. cross-site use of --no-auth   3. tokens out of URLs
4. deep JSON   5. sizes   6. disconnects and shutdown   7. secrets in messages
8. odd input, headers, framing, the graph view's size
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import re
import time
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

import plait
from plait import serde
from support.polling import eventually

httpx = pytest.importorskip("httpx", reason="httpx is needed to call the server")
pytest.importorskip("uvicorn", reason="the http extra (uvicorn) is not installed")

from plait.http import Principal, create_app, parse_tokens  # noqa: E402
from plait.http.dashboard import asset_version  # noqa: E402
from support.http_app import app  # noqa: E402
from support.live_server import LiveServer  # noqa: E402

ALICE = {"Authorization": "Bearer t-alice"}
BOB = {"Authorization": "Bearer t-bob"}
MALLORY = {"Authorization": "Bearer t-mallory"}
TOKENS = {
    "t-alice": Principal("alice", frozenset({"graphs"})),
    "t-bob": Principal("bob"),
    "t-mallory": Principal("mallory", frozenset({"graphs"})),
}
JSON = {"Content-Type": "application/json"}

Serve = Callable[..., contextlib.AbstractContextManager[LiveServer]]


@pytest.fixture
def serve(database: str) -> Iterator[Serve]:
    """``with serve(**create_app_options) as server:`` a live server on the test's
    database; ``engine_options`` go to the Engine."""
    servers: list[LiveServer] = []

    @contextlib.contextmanager
    def start(engine_options: dict[str, Any] | None = None, **options: Any) -> Iterator[LiveServer]:
        options.setdefault("tokens", TOKENS)
        engine = plait.Engine(app, database, poll_interval=0.2, **(engine_options or {}))
        server = LiveServer(create_app(engine, **options))
        servers.append(server)
        with server:
            yield server

    yield start
    for server in servers:
        server.stop()


@contextlib.asynccontextmanager
async def client(server: LiveServer, **headers: str) -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(base_url=server.url, headers=headers, timeout=30) as made:
        yield made


async def start_run(c: httpx.AsyncClient, workflow: str, **body: Any) -> httpx.Response:
    return await c.post(f"/api/workflows/{workflow}/runs", json=body)


async def run_count(server: LiveServer) -> int:
    engine: plait.Engine = server.web.state.engine
    _runs, total = await server.acall(engine.count_runs())
    return total


def problem(response: httpx.Response, status: int, code: str) -> dict[str, Any]:
    """The problem document of an error answer, checked for its status and code."""
    assert response.status_code == status, response.text
    assert response.headers["content-type"].startswith("application/problem+json")
    body: dict[str, Any] = response.json()
    assert (body["status"], body["code"]) == (status, code), body
    assert body["error"]["code"] == code and body["detail"] == body["error"]["message"]
    return body


def nested(depth: int) -> str:
    return "[" * depth + "]" * depth


# -- 1. graphs: the graphs scope, owners, versions ---------------------------------------------
GRAPH_A = {"nodes": {"sum": {"function": "add", "input": {"a": 1, "b": 2}}}}
GRAPH_B = {"nodes": {"sum": {"function": "add", "input": {"a": 100, "b": 200}}}}


async def test_registering_and_reading_graphs_needs_the_graphs_scope(serve: Serve) -> None:
    with serve() as server:
        async with client(server, **BOB) as bob:
            sent = await bob.post("/api/graphs", json={"name": "g", "definition": GRAPH_A})
            assert problem(sent, 403, "MISSING_SCOPE")["error"]["scope"] == "graphs"
            problem(await bob.get("/api/graphs"), 403, "MISSING_SCOPE")
            assert await run_count(server) == 0
            names = (await bob.get("/api/workflows")).json()["workflows"]
            assert {"name": "g", "kind": "graph"} not in names


async def test_a_graph_name_belongs_to_the_user_who_registered_it_first(serve: Serve) -> None:
    with serve() as server:
        async with client(server, **ALICE) as alice, client(server, **MALLORY) as mallory:
            first = await alice.post("/api/graphs", json={"name": "g", "definition": GRAPH_A})
            assert first.status_code == 201, first.text
            # another user with the scope can neither replace it nor switch it off
            replaced = await mallory.post("/api/graphs", json={"name": "g", "definition": GRAPH_B})
            problem(replaced, 403, "GRAPH_FORBIDDEN")
            drafted = await mallory.post(
                "/api/graphs", json={"name": "g", "definition": GRAPH_A, "status": "draft"}
            )
            problem(drafted, 403, "GRAPH_FORBIDDEN")
            # nor read its definition
            listed = (await mallory.get("/api/graphs")).json()["graphs"]
            assert [g["name"] for g in listed if g["source"] == "registered"] == []
            # alice's next run still runs alice's definition
            run = (await start_run(alice, "g", wait=True)).json()
            assert (run["status"], run["output"]) == ("completed", 3)
            mine = (await alice.get("/api/graphs")).json()["graphs"]
            registered = [g for g in mine if g["source"] == "registered"]
            assert [(g["name"], g["registered_by"], g["status"]) for g in registered] == [
                ("g", "alice", "active")
            ]
            # a name the app's code defines is nobody's to replace over HTTP
            app_owned = await alice.post(
                "/api/graphs", json={"name": "app_graph", "definition": GRAPH_B}
            )
            problem(app_owned, 403, "GRAPH_FORBIDDEN")
            problem(
                await alice.post("/api/graphs", json={"name": "echo", "definition": GRAPH_B}),
                403,
                "GRAPH_FORBIDDEN",
            )


async def test_a_draft_version_never_switches_off_the_active_one(serve: Serve) -> None:
    with serve() as server:
        async with client(server, **ALICE) as alice:
            active = await alice.post("/api/graphs", json={"name": "g", "definition": GRAPH_A})
            draft = await alice.post(
                "/api/graphs", json={"name": "g", "definition": GRAPH_B, "status": "draft"}
            )
            assert active.status_code == draft.status_code == 201
            run = (await start_run(alice, "g", wait=True)).json()
            assert run["output"] == 3  # the active version, not the newer draft
            engine: plait.Engine = server.web.state.engine
            versions = await server.acall(engine.list_graphs())
            assert {
                (v["version"], v["status"], v["registered_by"])
                for v in versions
                if v["workflow"] == "g"
            } == {
                (active.json()["version"], "active", "alice"),
                (draft.json()["version"], "draft", "alice"),
            }


# -- 2. --no-auth: no cross-site or DNS-rebinding use --------------------------------------------
async def test_no_auth_refuses_what_another_site_could_send(serve: Serve) -> None:
    with serve(no_auth=True, tokens=None) as server:
        async with client(server) as local:
            body = json.dumps({"input": 1})
            # fetch(..., {mode: "no-cors", body: text}) and an HTML form
            for content_type in ("text/plain", "application/x-www-form-urlencoded", None):
                headers = {"Content-Type": content_type} if content_type else {}
                sent = await local.post("/api/workflows/echo/runs", content=body, headers=headers)
                problem(sent, 415, "UNSUPPORTED_MEDIA_TYPE")
            # a JSON request from another site's page (its preflight would fail; this is
            # what the server does if one gets through anyway)
            foreign = await local.post(
                "/api/workflows/echo/runs",
                content=body,
                headers={**JSON, "Origin": "http://evil.example"},
            )
            problem(foreign, 403, "ORIGIN_NOT_ALLOWED")
            other_port = f"http://127.0.0.1:{server.port + 1}"
            for method, path in (("POST", "/api/graphs"), ("GET", "/api/runs")):
                sent = await local.request(method, path, headers={**JSON, "Origin": other_port})
                problem(sent, 403, "ORIGIN_NOT_ALLOWED")
            # a page that rebinds its own name to 127.0.0.1 sends its own Host
            rebound = {"Host": f"evil.example:{server.port}"}
            for path in ("/api/runs", "/", "/openapi.json"):
                problem(await local.get(path, headers=rebound), 400, "HOST_NOT_ALLOWED")
            assert await run_count(server) == 0
            # the server's own pages and local tools still work
            own = {**JSON, "Origin": server.url}
            assert (await local.post("/api/workflows/echo/runs", json={}, headers=own)).is_success
            by_name = {"Host": f"localhost:{server.port}"}
            assert (await local.get("/api/runs", headers=by_name)).status_code == 200
            assert await run_count(server) == 1


async def test_allowed_hosts_name_a_server_behind_a_proxy(serve: Serve) -> None:
    with serve(no_auth=True, tokens=None, allowed_hosts=["plait.example"]) as server:
        async with client(server) as local:
            proxied = {"Host": "plait.example", "Origin": "https://plait.example"}
            sent = await local.post("/api/workflows/echo/runs", json={}, headers=proxied)
            assert sent.status_code == 201, sent.text
            problem(
                await local.get("/api/runs", headers={"Host": "other.example"}),
                400,
                "HOST_NOT_ALLOWED",
            )


async def test_a_signed_in_browser_needs_the_csrf_token_to_change_anything(
    serve: Serve,
) -> None:
    with serve() as server:
        async with client(server) as browser:
            signed = await browser.post("/api/session", json={"token": "t-alice"})
            csrf = signed.json()["csrf_token"]
            # reading needs the cookie only
            assert (await browser.get("/api/runs")).status_code == 200
            # changing needs the CSRF token too: a forged request has the cookie only
            problem(await start_run(browser, "echo"), 403, "CSRF_TOKEN_INVALID")
            forged = await browser.post(
                "/api/workflows/echo/runs", json={}, headers={"X-CSRF-Token": "guess"}
            )
            problem(forged, 403, "CSRF_TOKEN_INVALID")
            foreign = await browser.post(
                "/api/workflows/echo/runs",
                json={},
                headers={"X-CSRF-Token": csrf, "Origin": "http://evil.example"},
            )
            problem(foreign, 403, "ORIGIN_NOT_ALLOWED")
            assert await run_count(server) == 0
            own = await browser.post(
                "/api/workflows/echo/runs", json={}, headers={"X-CSRF-Token": csrf}
            )
            assert own.status_code == 201
            run_id = own.json()["run_id"]
            assert (await browser.get(f"/api/runs/{run_id}")).json()["owner"] == "alice"


# -- 3. tokens out of URLs: sign-in, sessions, sign-out ------------------------------------------
async def test_sign_in_opens_a_session_cookie_and_sign_out_ends_it(serve: Serve) -> None:
    with serve() as server:
        async with client(server) as browser:
            problem(await browser.get("/api/session"), 401, "UNAUTHENTICATED")
            wrong = await browser.post("/api/session", json={"token": "t-nobody"})
            problem(wrong, 401, "UNAUTHENTICATED")
            assert "set-cookie" not in wrong.headers
            problem(await browser.post("/api/session", json={"token": ""}), 422, "INVALID_REQUEST")
            signed = await browser.post("/api/session", json={"token": "t-alice"})
            assert signed.status_code == 201
            cookie = signed.headers["set-cookie"]
            assert re.match(r"plait_session=[\w-]{40,};", cookie)
            attributes = {part.strip().lower() for part in cookie.split(";")[1:]}
            assert {"httponly", "samesite=strict", "path=/api/"} <= attributes
            assert "t-alice" not in signed.text  # the token is never sent back
            session = signed.json()
            assert (session["user"], session["session"], session["scopes"]) == (
                "alice",
                True,
                ["graphs"],
            )
            assert session["expires_at"] > time.time() + 3600
            assert (await browser.get("/api/session")).json()["user"] == "alice"
            stolen = dict(browser.cookies)
            csrf = {"X-CSRF-Token": session["csrf_token"], **JSON}
            out = await browser.request("DELETE", "/api/session", headers=csrf)
            assert out.status_code == 204
            assert (
                'plait_session=""' in out.headers["set-cookie"]
                or "Max-Age=0" in (out.headers["set-cookie"])
            )
        # the cookie from before the sign-out no longer works anywhere
        async with client(server) as replay:
            replay.cookies.update(stolen)
            problem(await replay.get("/api/session"), 401, "UNAUTHENTICATED")
            problem(await replay.get("/api/runs"), 401, "UNAUTHENTICATED")


async def test_a_session_expires(serve: Serve) -> None:
    with serve(session_seconds=0.5) as server:
        async with client(server) as browser:
            assert (await browser.post("/api/session", json={"token": "t-bob"})).status_code == 201
            assert (await browser.get("/api/runs")).status_code == 200

            async def expired() -> bool:
                return (await browser.get("/api/runs")).status_code == 401

            await eventually(expired, what="the session to expire")


async def test_one_users_sign_ins_do_not_sign_other_users_out(serve: Serve) -> None:
    """Sessions are capped per user (``MAX_SESSIONS_PER_USER``): a user who signs in
    again and again loses her own oldest sessions, never another user's, even past the
    cap of all sessions (shrunk here to keep the test short; it is 10,000)."""
    from plait.http.sessions import COOKIE, MAX_SESSIONS_PER_USER

    with serve() as server:
        server.web.state.sessions.capacity = MAX_SESSIONS_PER_USER * 2
        async with client(server, **JSON) as bob:
            signed = await bob.post("/api/session", json={"token": "t-bob"})
            assert signed.status_code == 201, signed.text
            async with client(server, **JSON) as alice:
                first = await alice.post("/api/session", json={"token": "t-alice"})
                assert first.status_code == 201
                oldest = dict(alice.cookies)
                for _ in range(MAX_SESSIONS_PER_USER * 3):
                    alice.cookies.clear()
                    made = await alice.post("/api/session", json={"token": "t-alice"})
                    assert made.status_code == 201
                assert (await alice.get("/api/me")).json()["user"] == "alice"
                alice.cookies.clear()
                alice.cookies.update(oldest)
                problem(await alice.get("/api/me"), 401, "UNAUTHENTICATED")
            assert COOKIE in bob.cookies
            me = await bob.get("/api/me")
            assert me.status_code == 200 and me.json()["user"] == "bob", me.text
            assert len(server.web.state.sessions) == MAX_SESSIONS_PER_USER + 1


async def test_a_token_in_a_url_signs_nobody_in(serve: Serve) -> None:
    with serve() as server:
        async with client(server) as visitor:
            for path in ("/?token=t-alice&status=failed", "/runs/abc?token=t-alice"):
                page = await visitor.get(path)
                assert page.status_code == 303
                assert "token" not in page.headers["location"]
                assert "set-cookie" not in page.headers
            assert (await visitor.get("/?token=t-alice")).headers["location"] == "/"
            assert (await visitor.get("/?status=failed&token=x")).headers["location"] == (
                "/?status=failed"
            )
            problem(await visitor.get("/api/session"), 401, "UNAUTHENTICATED")
            home = await visitor.get("/")
            assert 'id="signin-form"' in home.text and "localStorage" not in home.text
            for module in (Path(plait.__file__).parent / "http" / "static" / "js").glob("*.js"):
                js = (await visitor.get(f"/static/js/{module.name}")).text
                assert "localStorage.setItem" not in js and "Authorization" not in js


# -- 4. deep JSON --------------------------------------------------------------------------------
@pytest.mark.parametrize("depth", [65, 950, 100_000])
async def test_json_nested_too_deep_is_422_and_creates_nothing(serve: Serve, depth: int) -> None:
    with serve() as server:
        async with client(server, **ALICE, **JSON) as alice:
            body = '{"input": ' + nested(depth) + "}"
            sent = await alice.post("/api/workflows/echo/runs", content=body)
            assert problem(sent, 422, "PAYLOAD_TOO_DEEP")["error"]["limit"] == 64
            graph = '{"name": "g", "definition": {"nodes": ' + nested(depth) + "}}"
            problem(await alice.post("/api/graphs", content=graph), 422, "PAYLOAD_TOO_DEEP")
            waiting = (await start_run(alice, "waiter")).json()["run_id"]
            event = await alice.post(f"/api/runs/{waiting}/events/go", content=nested(depth))
            problem(event, 422, "PAYLOAD_TOO_DEEP")
            assert await run_count(server) == 1
            # everything of the owner's still answers
            assert (await alice.get("/api/runs")).status_code == 200
            assert (await alice.get(f"/api/runs/{waiting}")).status_code == 200
            assert (await alice.post(f"/api/runs/{waiting}/cancel")).status_code == 202


async def test_json_as_deep_as_allowed_is_stored_and_read_back(serve: Serve) -> None:
    with serve() as server:
        async with client(server, **ALICE) as alice:
            value = json.loads(nested(63))  # 64 levels with the body's own object
            run = (await start_run(alice, "echo", input=value, wait=True)).json()
            assert (run["status"], run["output"]) == ("completed", value)


async def test_a_step_result_too_deep_fails_its_run_cleanly(serve: Serve) -> None:
    with serve() as server:
        async with client(server, **ALICE, **JSON) as alice:
            run = (await start_run(alice, "deep_result", input={"depth": 950}, wait=True)).json()
            assert run["status"] == "failed"
            assert run["error"]["code"] == "PAYLOAD_TOO_DEEP"
            assert "the result of step 'make'" in run["error"]["message"]
            assert (await alice.get("/api/runs")).status_code == 200
            assert (await alice.get(f"/api/runs/{run['id']}")).status_code == 200
            problem(await alice.post(f"/api/runs/{run['id']}/cancel"), 409, "RUN_STATE_CONFLICT")


async def test_engine_start_refuses_deep_input_before_creating_a_run(
    engine_factory: Callable[..., Any],
) -> None:
    async with engine_factory(app) as engine:
        deep: Any = 0
        for _ in range(950):
            deep = [deep]
        with pytest.raises(plait.PayloadTooDeepError, match="64 levels"):
            await engine.start("echo", deep)
        assert (await engine.count_runs())[1] == 0


# -- 5. sizes ------------------------------------------------------------------------------------
async def test_a_body_over_max_body_is_413_before_it_is_read(serve: Serve) -> None:
    with serve(max_body=64 * 1024) as server:
        async with client(server, **ALICE, **JSON) as alice:
            big = json.dumps({"input": "x" * 100_000})
            problem(
                await alice.post("/api/workflows/echo/runs", content=big), 413, "BODY_TOO_LARGE"
            )

            async def chunks() -> AsyncIterator[bytes]:  # no Content-Length: counted as read
                for part in range(0, len(big), 8192):
                    yield big[part : part + 8192].encode()

            chunked = await alice.post("/api/workflows/echo/runs", content=chunks())
            assert problem(chunked, 413, "BODY_TOO_LARGE")["error"]["limit"] == 64 * 1024
            assert await run_count(server) == 0
            fits = await start_run(alice, "echo", input="x" * 60_000)
            assert fits.status_code == 201


async def test_max_payload_holds_inputs_events_and_results(serve: Serve) -> None:
    with serve(engine_options={"max_payload": 10_000}) as server:
        async with client(server, **ALICE) as alice:
            sent = await start_run(alice, "echo", input="x" * 20_000)
            assert "max_payload" in problem(sent, 413, "PAYLOAD_TOO_LARGE")["detail"]
            waiting = (await start_run(alice, "waiter")).json()["run_id"]
            event = await alice.post(f"/api/runs/{waiting}/events/go", json="y" * 20_000)
            problem(event, 413, "PAYLOAD_TOO_LARGE")
            run = (await start_run(alice, "big_result", input={"size": 20_000}, wait=True)).json()
            assert (run["status"], run["error"]["code"]) == ("failed", "PAYLOAD_TOO_LARGE")
            assert run["steps"][0]["attempts"] == 1  # not retried: it would only fail again
            assert await run_count(server) == 2


async def echo_workflow(wf: plait.Workflow, data: Any) -> Any:
    return data


def deep_value(depth: int) -> Any:
    value: Any = 0
    for _ in range(depth):
        value = [value]
    return value


async def test_max_payload_holds_schedule_inputs_when_they_are_made(
    engine_factory: Callable[..., Any],
) -> None:
    async with engine_factory(app, max_payload=10_000) as engine:
        with pytest.raises(plait.PayloadTooLargeError, match="max_payload") as caught:
            await engine.create_schedule("big", workflow="echo", every="1h", input="x" * 20_000)
        assert "the input of schedule 'big'" in str(caught.value)
        with pytest.raises(plait.PayloadTooDeepError, match="64 levels"):
            await engine.create_schedule("deep", workflow="echo", every="1h", input=deep_value(100))
        assert await engine.list_schedules() == []
        fits = await engine.create_schedule("fits", workflow="echo", every="1h", input="x" * 9_000)
        assert fits.input == "x" * 9_000
    declared = plait.App("declared")
    declared.workflow(echo_workflow)
    declared.schedule("nightly", workflow="echo_workflow", every="1h", input="x" * 20_000)
    with pytest.raises(plait.PayloadTooLargeError, match="the input of schedule 'nightly'"):
        async with engine_factory(declared, max_payload=10_000):
            pass
    # an engine that fires no schedule (the command line's) opens: it only reads or starts
    async with engine_factory(declared, max_payload=10_000, workers=False) as reader:
        assert await reader.count_runs() is not None


async def test_a_stored_schedule_is_started_as_stored(engine_factory: Callable[..., Any]) -> None:
    """Limits hold when a schedule is made. Its ticks and triggers start runs of the input
    as stored, which PostgreSQL's jsonb may spell longer than it came (a float with an
    exponent as all its digits): measured again there, an accepted schedule would start
    nothing, ever."""
    inflating = [1e300] * 50  # 358 bytes as sent; about 15 kB as jsonb spells it
    async with engine_factory(app, max_payload=2_000) as engine:
        await engine.create_schedule("wide", workflow="waiter", every="1h", input=inflating)
        run_id = await engine.trigger_schedule("wide")
        stored = (await engine.get_run(run_id)).input
        assert [float(x) for x in stored] == inflating  # jsonb gives back 10**300, an int
        await engine.send_event(run_id, "go", "done")
        assert (await engine.wait(run_id, timeout=30)).output == "done"


async def test_max_payload_holds_schedule_inputs_over_http(serve: Serve) -> None:
    with serve(engine_options={"max_payload": 10_000}) as server:
        async with client(server, **ALICE) as alice:
            body = {"name": "big", "workflow": "echo", "every": "1h", "input": "x" * 20_000}
            sent = await alice.post("/api/schedules", json=body)
            assert "max_payload" in problem(sent, 413, "PAYLOAD_TOO_LARGE")["detail"]
            assert (await alice.get("/api/schedules")).json()["schedules"] == []


#: a join whose input (both results) is larger than either result, and a for_each whose
#: items each take the run's input twice
JOIN = {
    "nodes": {
        "a": {"function": "make_text", "input": {"size": 6_000}, "next": "both"},
        "b": {"function": "make_text", "input": {"size": 6_000}, "next": "both"},
        "both": {"function": "measure", "input": {"a": {"$ref": "a"}, "b": {"$ref": "b"}}},
    }
}
EACH = {
    "nodes": {
        "each": {
            "function": "measure",
            "for_each": {"$ref": "trigger", "path": "items"},
            "input": {
                "item": {"$ref": "$item"},
                "pad": {"$ref": "trigger", "path": "pad"},
                "again": {"$ref": "trigger", "path": "pad"},
            },
        }
    }
}
#: nests its input two levels deeper than the run's input
DEEPER = {"nodes": {"wrap": {"function": "measure", "input": [[{"$ref": "trigger"}]]}}}


@pytest.mark.parametrize(
    ("graph", "data", "code", "what"),
    [
        (JOIN, None, "PAYLOAD_TOO_LARGE", "the input of node 'both'"),
        (DEEPER, deep_value(63), "PAYLOAD_TOO_DEEP", "the input of node 'wrap'"),
        # the item cannot start, so its node fails (its own input, the items, is stored)
        (EACH, {"items": [1, 2], "pad": "p" * 5_000}, "PAYLOAD_TOO_LARGE", "'each[0]'"),
        # only the last item is over: its siblings are never recorded, left pending
        (
            EACH,
            {"items": [1, 2, "x" * 4_500], "pad": "p" * 3_000},
            "PAYLOAD_TOO_LARGE",
            "'each[2]'",
        ),
    ],
    ids=["join", "deep", "for_each", "for_each_last_item"],
)
async def test_a_graph_node_input_over_the_limits_fails_its_run(
    engine_factory: Callable[..., Any], graph: Any, data: Any, code: str, what: str
) -> None:
    async with engine_factory(app, max_payload=10_000) as engine:
        await engine.register_graph("g", graph)
        run_id = await engine.start("g", data)
        run = await engine.wait(run_id, timeout=30)
        assert run.status == "failed", run
        error = run.error
        assert error is not None
        if graph is EACH:
            assert (error["code"], error["node"]) == ("GRAPH_NODE_FAILED", "each"), error
            error = error["cause"]
        assert error["code"] == code, error
        assert what in error["message"], error
        limit = "max_payload" if code == "PAYLOAD_TOO_LARGE" else "64 levels"
        assert limit in error["message"], error
        for step in await engine.get_steps(run_id):
            assert step.status not in ("pending", "running"), step
            stored = json.dumps(step.input)
            assert len(stored) <= 10_000 and not serde.too_deep(stored, 64), step.key


async def test_run_lists_are_summaries(serve: Serve) -> None:
    with serve() as server:
        async with client(server, **ALICE) as alice:
            for _ in range(5):
                assert (await start_run(alice, "echo", input="x" * 200_000)).status_code == 201
            page = await alice.get("/api/runs")
            assert page.json()["total"] == 5
            assert len(page.content) < 5_000  # not 5 x 200 kB of input (and output)
            for run in page.json()["runs"]:
                assert set(run) == {
                    "id",
                    "workflow",
                    "kind",
                    "status",
                    "version",
                    "owner",
                    "parent_run_id",
                    "created_at",
                    "updated_at",
                    "queue",
                    "key",
                    "priority",
                    "scheduled_at",
                    "admitted_at",
                    "start_at",
                    "children",
                    "tags",
                    "waiting_on",
                }


# -- 6. disconnects and shutdown -----------------------------------------------------------------
async def open_raw(server: LiveServer, request: str) -> tuple[asyncio.StreamReader, Any]:
    reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
    writer.write(request.encode())
    await writer.drain()
    return reader, writer


def raw_get(path: str, headers: dict[str, str]) -> str:
    lines = [f"GET {path} HTTP/1.1", "Host: 127.0.0.1"]
    lines += [f"{k}: {v}" for k, v in headers.items()]
    return "\r\n".join(lines) + "\r\n\r\n"


def raw_post(path: str, body: Any, headers: dict[str, str]) -> str:
    data = json.dumps(body)
    lines = [f"POST {path} HTTP/1.1", "Host: 127.0.0.1", "Content-Type: application/json"]
    lines += [f"{k}: {v}" for k, v in headers.items()]
    lines.append(f"Content-Length: {len(data)}")
    return "\r\n".join(lines) + "\r\n\r\n" + data


def open_requests(server: LiveServer) -> dict[str, int]:
    return dict(server.web.state.lifecycle.open)


async def test_streams_and_waits_end_when_their_client_goes_away(serve: Serve) -> None:
    with serve() as server:
        engine: plait.Engine = server.web.state.engine
        async with client(server, **ALICE) as alice:
            run_id = (await start_run(alice, "waiter")).json()["run_id"]
        conns = []
        for _ in range(20):
            reader, writer = await open_raw(server, raw_get(f"/api/runs/{run_id}/stream", ALICE))
            assert (await reader.readuntil(b"event: run")).startswith(b"HTTP/1.1 200")
            conns.append(writer)
        waiting = raw_post("/api/workflows/waiter/runs", {"wait": True}, ALICE)
        for _ in range(20):
            conns.append((await open_raw(server, waiting))[1])
        await eventually(
            lambda: open_requests(server) == {"streams": 20, "waits": 20}, what="all to open"
        )
        assert await server.acall(_watched(engine)) >= 21
        # every task a waiting request runs is named, so a shutdown that leaves one
        # behind says so (it looks for tasks named plait*)
        names = await server.acall(_task_names())
        for kind in ("streams", "waits"):
            for part in ("work", "disconnect", "shutdown"):
                assert names.count(f"plait-http-{kind}-{part}") == 20, (kind, part, names)
        assert "plait-run-end-poll" in names
        for writer in conns:
            writer.close()
        await eventually(
            lambda: open_requests(server) == {"streams": 0, "waits": 0},
            what=lambda: f"all to end (open: {open_requests(server)})",
        )

        async def no_watchers() -> bool:
            return await server.acall(_watched(engine)) == 0

        await eventually(no_watchers, what="every watcher to go")

        async def no_request_tasks() -> bool:
            left = await server.acall(_task_names())
            return not [name for name in left if name.startswith("plait-http-")]

        await eventually(no_request_tasks, what="every task of a request to end")


async def test_a_request_whose_client_goes_away_ends_and_is_withdrawn(serve: Serve) -> None:
    """``POST /api/runs/{id}/requests/{name}`` waits for its reply as a start with
    ``wait`` does: its client closing the connection ends it at once, and the request,
    not taken yet, is withdrawn (no wait of the workflow ever takes it)."""
    with serve() as server:
        engine: plait.Engine = server.web.state.engine
        async with client(server, **ALICE) as alice:
            run_id = (await start_run(alice, "waiter")).json()["run_id"]
        asking = raw_post(f"/api/runs/{run_id}/requests/ask", {"data": 1, "timeout": 60}, ALICE)
        _reader, writer = await open_raw(server, asking)

        async def sent() -> int:
            snapshot = await server.acall(engine.store.load_pass(run_id))
            return 0 if snapshot is None else len(snapshot.requests)

        await eventually(sent, what="the request stored")
        assert open_requests(server)["waits"] == 1
        writer.close()
        await eventually(
            lambda: open_requests(server)["waits"] == 0, what="the request's wait to end"
        )
        assert await sent() == 0


async def _watched(engine: plait.Engine) -> int:
    return engine.notifier.watched_runs()


async def _task_names() -> list[str]:
    """The names of the tasks of the loop it runs on (the server's)."""
    return [task.get_name() for task in asyncio.all_tasks() if not task.done()]


async def test_shutdown_ends_open_streams_and_waits_at_once(serve: Serve) -> None:
    with serve() as server:
        async with client(server, **ALICE) as alice:
            run_id = (await start_run(alice, "waiter")).json()["run_id"]
        streams = []  # (reader, writer): a writer let go of would close its connection
        for _ in range(3):
            reader, writer = await open_raw(server, raw_get(f"/api/runs/{run_id}/stream", ALICE))
            await reader.readuntil(b"event: run")
            streams.append((reader, writer))
        waiting = raw_post("/api/workflows/waiter/runs", {"wait": True}, ALICE)
        waits = [await open_raw(server, waiting) for _ in range(3)]
        await eventually(lambda: open_requests(server) == {"streams": 3, "waits": 3})
        took = await asyncio.to_thread(server.stop)
        assert took < 2.0, f"shutdown took {took:.2f}s"
        for reader, _writer in streams:
            rest = await asyncio.wait_for(reader.read(), 5)
            assert b"event: close" in rest and b'"reason":"shutdown"' in rest
        for reader, _writer in waits:
            answer = await asyncio.wait_for(reader.read(), 5)
            assert answer.startswith(b"HTTP/1.1 202")
            assert b'"status":"running"' in answer


# -- 8. odd input, headers, framing, the graph view ----------------------------------------------
SCHEDULE_ACTIONS = ("pause", "resume", "trigger")


async def test_odd_values_are_4xx_never_500(serve: Serve) -> None:
    with serve() as server:
        async with client(server, **ALICE, **JSON) as alice:
            digits = "9" * 5001
            sent = await alice.post("/api/workflows/echo/runs", content='{"input": ' + digits + "}")
            assert (
                "not valid JSON" in problem(sent, 422, "INVALID_REQUEST")["problems"][0]["message"]
            )
            for params in ({"limit": digits}, {"offset": 2**63}, {"offset": 2**64 + 5}):
                problem(await alice.get("/api/runs", params=params), 422, "INVALID_REQUEST")
            for constant in ("NaN", "Infinity", "-Infinity"):
                body = '{"input": ' + constant + "}"
                problem(
                    await alice.post("/api/workflows/echo/runs", content=body),
                    422,
                    "INVALID_REQUEST",
                )
            problem(
                await alice.post("/api/workflows/echo/runs", content=b'{"input": "\xff"}'),
                422,
                "INVALID_REQUEST",
            )
            # NUL characters: PostgreSQL cannot store them, so no store does
            nul = await alice.post("/api/workflows/echo/runs", content='{"input": "a\\u0000b"}')
            assert "NUL" in problem(nul, 422, "NOT_JSON")["detail"]
            surrogate = await alice.post("/api/workflows/echo/runs", content='{"input": "\\ud800"}')
            problem(surrogate, 422, "NOT_JSON")
            problem(
                await alice.get("/api/runs", params={"workflow": "a\x00b"}), 422, "INVALID_REQUEST"
            )
            problem(await alice.get("/api/runs/a%00b"), 404, "RUN_NOT_FOUND")
            problem(await alice.post("/api/runs/a%00b/cancel"), 404, "RUN_NOT_FOUND")
            problem(
                await alice.post("/api/workflows/ech%00o/runs", json={}), 404, "WORKFLOW_NOT_FOUND"
            )
            waiting = (await start_run(alice, "waiter")).json()["run_id"]
            problem(await alice.post(f"/api/runs/{waiting}/events/g%00o"), 422, "INVALID_REQUEST")
            # a schedule name no schedule can have, and keys no store can hold (PostgreSQL
            # refused them with a driver error, SQLite stored them)
            for method, path in [
                ("GET", "/api/schedules/a%00b"),
                *(("POST", f"/api/schedules/a%00b/{action}") for action in SCHEDULE_ACTIONS),
                ("GET", "/api/schedules/a%07b"),
            ]:
                answer = problem(await alice.request(method, path), 422, "INVALID_REQUEST")
                assert answer["problems"][0]["field"] == "name", answer
                assert "control characters" in answer["detail"]
            for field, body in [
                ("dedup", '{"dedup": "a\\u0000"}'),
                ("key", '{"key": "a\\u0000", "queue": "q"}'),
                ("dedup", '{"dedup": "a\\nb"}'),
            ]:
                sent = await alice.post("/api/workflows/echo/runs", content=body)
                answer = problem(sent, 422, "INVALID_REQUEST")
                assert answer["problems"][0]["field"] == field, answer
                assert "control characters" in answer["detail"]
            assert (await alice.get("/api/runs")).json()["total"] == 1


async def test_even_a_bug_answers_as_a_problem_not_as_plain_text(serve: Serve) -> None:
    def broken(request: Any) -> str:
        raise RuntimeError("a bug in the app's own sign-in")

    with serve(tokens=None, authenticate=broken) as server:
        async with client(server) as anyone:
            answer = await anyone.get("/api/runs")
    body = problem(answer, 500, "INTERNAL_ERROR")
    assert "bug" not in body["detail"]  # the details go to the server's log, not out


@pytest.mark.parametrize("run_id", ["a/b", "a b", "../x", "a?b", "x" * 201, "a\u0000b", "ü"])
async def test_a_run_id_outside_the_pattern_is_refused(serve: Serve, run_id: str) -> None:
    with serve() as server:
        async with client(server, **ALICE) as alice:
            sent = await start_run(alice, "echo", run_id=run_id)
            assert problem(sent, 422, "INVALID_REQUEST")["problems"][0]["field"] == "run_id"
            assert await run_count(server) == 0
            ok = await start_run(alice, "echo", run_id="order-42:retry@2024.01+x=y~z_")
            assert ok.status_code == 201


async def test_engine_start_refuses_a_run_id_a_url_cannot_carry(
    engine_factory: Callable[..., Any],
) -> None:
    async with engine_factory(app) as engine:
        for bad in ("a/b", "a b", "a#b", "", "\x00"):
            with pytest.raises((ValueError, TypeError), match="run_id"):
                await engine.start("echo", 1, run_id=bad)
        assert await engine.start("echo", 1, run_id="ok-1") == "ok-1"


async def test_engine_refuses_control_characters_in_schedule_names_and_keys(
    engine_factory: Callable[..., Any],
) -> None:
    """No store error escapes: a name or key PostgreSQL cannot hold is refused by the
    engine, naming what is wrong, on every store alike."""
    async with engine_factory(app) as engine:
        await engine.create_schedule("nightly", workflow="echo", every="1h")
        for call in (
            engine.get_schedule,
            engine.pause_schedule,
            engine.resume_schedule,
            engine.trigger_schedule,
            engine.delete_schedule,
        ):
            for bad in ("a\x00b", "a\nb", "x" * 500):
                with pytest.raises(ValueError, match="invalid schedule name"):
                    await call(bad)
        with pytest.raises(plait.ScheduleNotFoundError):
            await engine.get_schedule("no-such-schedule")
        for options, field in [
            ({"dedup": "a\x00"}, "dedup"),
            ({"dedup": "a\tb"}, "dedup"),
            ({"key": "a\x00", "queue": "q"}, "key"),
            ({"key": "a\x1bb", "queue": "q"}, "key"),
        ]:
            with pytest.raises(ValueError, match=f"invalid {field} .*control characters"):
                await engine.start("echo", 1, **options)
        assert (await engine.count_runs())[1] == 0
        assert (await engine.get_schedule("nightly")).status == "active"


async def test_every_answer_carries_the_security_headers(serve: Serve) -> None:
    with serve() as server:
        async with client(server) as anyone:
            answers = [
                await anyone.get("/"),
                await anyone.get("/runs/x"),
                await anyone.get("/static/js/main.js"),
                await anyone.get(f"/static/js/{asset_version()}/main.js"),
                await anyone.get("/openapi.json"),
                await anyone.get("/api/runs"),
                await anyone.get("/api/nothing"),
                await anyone.post("/api/session", content="x"),
            ]
        for answer in answers:
            headers = answer.headers
            assert headers["x-content-type-options"] == "nosniff"
            assert headers["x-frame-options"] == "DENY"
            assert headers["referrer-policy"] == "no-referrer"
            csp = headers["content-security-policy"]
            assert "frame-ancestors 'none'" in csp
            assert "script-src 'self'" in csp and "unsafe-inline" not in csp
            assert "unsafe-eval" not in csp


async def test_the_code_run_graph_grows_linearly_with_its_steps(serve: Serve) -> None:
    with serve() as server:
        async with client(server, **ALICE) as alice:
            run = await start_run(alice, "two_gathers", input={"n": 150}, wait=True, timeout=120)
            body = run.json()
            assert body["status"] == "completed", body.get("error")
            drawn = await alice.get(f"/api/runs/{body['id']}/graph")
            graph = drawn.json()
            steps = [n for n in graph["nodes"] if n["state"] != "junction"]
            assert len(steps) == 300
            assert len(graph["edges"]) <= 2 * 300  # 150 x 150 = 22,500 edges before
            assert len(drawn.content) < 400_000
            layers = {n["id"]: n["layer"] for n in graph["nodes"]}
            assert layers["a0"] == layers["a149"] < layers["~join-0"] < layers["b0"] == layers["b9"]


# -- 7. secrets in messages ------------------------------------------------------------------------
def test_a_malformed_tokens_entry_is_named_without_its_token() -> None:
    for text in ("alice:s3cret-1:nosuchscope", "alice:s3cret-1:graphs:x", "s3cret-1", ":s3cret-1"):
        with pytest.raises(ValueError) as caught:
            parse_tokens(f"bob:fine-token,{text}")
        message = str(caught.value)
        assert "s3cret-1" not in message and "fine-token" not in message
        assert "entry 2" in message


@pytest.mark.parametrize(
    "entry",
    [
        "alice:abc:def-s3cret",  # a token with ":" in it: its second half reads as scopes
        "alice:abc:graphs+def-s3cret",  # and with "+" too
        "alice:abc:def-s3cret+graphs",
        "alice:abc:s3cret:more",
    ],
)
def test_a_token_with_a_colon_is_never_echoed_as_a_scope(entry: str) -> None:
    with pytest.raises(ValueError) as caught:
        parse_tokens(f"bob:fine-token,{entry}")
    message = str(caught.value)
    assert "s3cret" not in message and "abc" not in message, message
    assert message.startswith("invalid PLAIT_TOKENS entry 2 (user 'alice')"), message
    assert "graphs" in message or "user:token" in message  # the rule it broke


def test_database_url_secrets_are_masked_in_errors() -> None:
    from plait.store import make_store, redact

    with pytest.raises(ValueError) as caught:
        make_store("mysql://root:topsecret@db.example/app?password=other-secret")
    assert "topsecret" not in str(caught.value) and "other-secret" not in str(caught.value)
    assert "root:***@" in str(caught.value)
    masked = redact("postgresql://u:pw1@h/db?sslmode=require&password=pw2&sslpassword=pw3")
    assert masked == "postgresql://u:***@h/db?sslmode=require&password=***&sslpassword=***"
