"""Round 3 hardening of the HTTP API, over real HTTP against a live server on each store:
run ids reserved for schedules, bounded keys, connections that never finish their
headers, the order of refusals, and deleting schedules.

1. ``schedule:`` run ids   2. key and dedup lengths   3. header timeout
4. 401 first, 405, start_at   5. DELETE /api/schedules/{name}
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import socket
import time
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

import plait
from plait import queues
from plait.schedules import run_id_for
from support.polling import eventually

httpx = pytest.importorskip("httpx", reason="httpx is needed to call the server")
pytest.importorskip("uvicorn", reason="the http extra (uvicorn) is not installed")

from plait.cli import cli  # noqa: E402
from plait.http import Principal, create_app, make_server  # noqa: E402
from support.live_server import LiveServer  # noqa: E402

app = plait.App("round3")
app.queue("lane", concurrency=2, per_key=1)


@app.function
async def echo_step(data: Any) -> Any:
    return data


@app.workflow
async def echo(wf: plait.Workflow, data: Any) -> Any:
    return await wf.do("echo", echo_step, data)


@app.workflow(queue="lane")
async def laned(wf: plait.Workflow, data: Any) -> Any:
    return await wf.do("echo", echo_step, data)


app.schedule("declared", workflow="echo", cron="0 0 1 1 *")

ALICE = {"Authorization": "Bearer t-alice"}
BOB = {"Authorization": "Bearer t-bob"}
ADMIN = {"Authorization": "Bearer t-admin"}
TOKENS = {
    "t-alice": Principal("alice"),
    "t-bob": Principal("bob"),
    "t-admin": Principal("admin", frozenset({"schedules"})),
}
JSON = {"Content-Type": "application/json"}

Serve = Callable[..., contextlib.AbstractContextManager[LiveServer]]


@pytest.fixture
def serve(database: str) -> Iterator[Serve]:
    """``with serve(header_timeout=..., **create_app_options) as server:``"""

    @contextlib.contextmanager
    def start(header_timeout: float | None = None, **options: Any) -> Iterator[LiveServer]:
        options.setdefault("tokens", TOKENS)
        engine = plait.Engine(app, database, poll_interval=0.2)
        server = LiveServer(create_app(engine, **options))
        if header_timeout is not None:
            server.server = make_server(
                server.web, log_level="warning", lifespan="on", header_timeout=header_timeout
            )
        with server:
            yield server

    yield start


@contextlib.asynccontextmanager
async def client(server: LiveServer, **headers: str) -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(base_url=server.url, headers=headers, timeout=30) as made:
        yield made


def engine_of(server: LiveServer) -> plait.Engine:
    engine: plait.Engine = server.web.state.engine
    return engine


def problem(response: httpx.Response, status: int, code: str) -> dict[str, Any]:
    assert response.status_code == status, response.text
    assert response.headers["content-type"].startswith("application/problem+json")
    body: dict[str, Any] = response.json()
    assert (body["status"], body["code"]) == (status, code), body
    return body


def field_of(response: httpx.Response) -> str:
    field: str = problem(response, 422, "INVALID_REQUEST")["problems"][0]["field"]
    return field


# -- 1. run ids starting schedule: are the schedules' own ------------------------------------
async def test_a_start_cannot_take_a_schedules_next_tick(serve: Serve) -> None:
    with serve() as server:
        engine = engine_of(server)
        await server.acall(engine.create_schedule("beat", workflow="echo", every="2s"))
        schedule = await server.acall(engine.get_schedule("beat"))
        assert schedule.next_tick is not None
        tick = schedule.next_tick.timestamp()
        taken = run_id_for("beat", tick)
        async with client(server, **ALICE) as alice:
            sent = await alice.post("/api/workflows/echo/runs", json={"run_id": taken})
            assert field_of(sent) == "run_id"
            assert "reserved" in sent.json()["problems"][0]["message"]
            source = await alice.post("/api/workflows/echo/runs", json={"wait": True})
            assert source.json()["status"] == "completed", source.text
            forked = await alice.post(
                f"/api/runs/{source.json()['id']}/fork",
                json={"from_step": "echo", "run_id": taken},
            )
            assert field_of(forked) == "run_id"
        with pytest.raises(ValueError, match=r"run_id .*reserved for the runs schedules start"):
            await server.acall(engine.start("echo", 1, run_id=taken))
        # the fork's source, and the schedule's own runs: the tick's if it came already,
        # and those of later ticks (every 2 s) on a machine slow enough to reach them
        listed = {r.id for r in await server.acall(engine.list_runs())}
        assert source.json()["id"] in listed
        others = listed - {taken, source.json()["id"]}
        assert all(i.startswith("schedule:beat:") and i > taken for i in others), others

        # the schedule still starts its own run at that tick, and a trigger still works
        async def ticked() -> bool:
            with contextlib.suppress(plait.RunNotFoundError):
                return (await server.acall(engine.get_run(taken))).status == "completed"
            return False

        await eventually(ticked, timeout=20, what="the tick's own run")
        run = await server.acall(engine.get_run(taken))
        assert run.scheduled_at is not None and run.scheduled_at.timestamp() == tick
        triggered = await server.acall(engine.trigger_schedule("beat"))
        assert triggered.startswith("schedule:beat:")


async def test_a_fork_cannot_take_a_schedules_run_id(
    engine_factory: Callable[..., Any],
) -> None:
    async with engine_factory(app) as engine:
        source = await engine.start("echo", 1)
        assert (await engine.wait(source, timeout=15)).status == "completed"
        with pytest.raises(ValueError, match="reserved"):
            await engine.fork(
                source, from_step="echo", run_id="schedule:declared:2030-01-01T00:00:00Z"
            )
        assert (
            await engine.fork(source, from_step="echo", run_id="Schedule-like") == "Schedule-like"
        )


CLI_APP = """
import plait

app = plait.App("cli-round3")


@app.workflow
async def hello(wf: plait.Workflow, data: object) -> object:
    return data
"""


def test_the_command_line_refuses_a_schedules_run_id_and_a_long_key(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "cli_round3.py").write_text(CLI_APP)
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    db = f"sqlite:///{tmp_path / 'plait.db'}"
    runner = CliRunner()
    refused = runner.invoke(
        cli, ["start", "cli_round3:app", "hello", "--run-id", "schedule:x:1", "-d", db]
    )
    assert refused.exit_code == 1, refused.output
    (line,) = refused.output.strip().splitlines()
    assert "run_id" in line and "reserved for the runs schedules start" in line
    long_key = runner.invoke(
        cli, ["start", "cli_round3:app", "hello", "--dedup", "d" * 513, "-d", db]
    )
    assert long_key.exit_code == 1, long_key.output
    (line,) = long_key.output.strip().splitlines()
    assert "invalid dedup" in line and "at most 512 characters" in line


# -- 2. key and dedup are at most 512 characters ---------------------------------------------
@pytest.mark.parametrize("field", ["key", "dedup"])
async def test_a_key_or_dedup_over_512_characters_is_refused_naming_it(
    serve: Serve, field: str
) -> None:
    with serve() as server:
        engine = engine_of(server)
        async with client(server, **ALICE) as alice:
            for size in (513, 3000, 100_000):
                sent = await alice.post(
                    "/api/workflows/laned/runs", json={field: "k" * size, "input": 1}
                )
                assert field_of(sent) == field
                assert "at most 512 characters" in sent.json()["detail"]
        with pytest.raises(ValueError, match=f"invalid {field} .*at most 512 characters"):
            await server.acall(engine.start("laned", 1, **{field: "k" * 513}))
        assert (await server.acall(engine.count_runs()))[1] == 0


async def test_keys_of_512_characters_go_all_the_way(serve: Serve) -> None:
    """The longest key and dedup, in characters that take 4 bytes each and in a queue
    whose name is as long as a name may be: stored, admitted, run and found again. (A
    queue named in 4-byte characters leaves less room: key and name are indexed
    together.)"""
    rng = random.Random(44)
    # characters that do not repeat, so no index can shrink them by compression
    long_queue = "q" * 200
    noise = "".join(chr(rng.randrange(0x10000, 0x10FFFF)) for _ in range(queues.MAX_KEY - 1))
    with serve() as server:
        engine = engine_of(server)
        started: list[str] = []
        # held queued until every dedup is checked: a run that ended frees its key
        await server.acall(engine.pause_workflow("laned"))
        async with client(server, **ALICE) as alice:
            for n, text in enumerate(("x" * (queues.MAX_KEY - 1), "\U0001d11e" * 511, noise)):
                key = text + str(n)
                body = {"input": n, "key": key, "dedup": key, "queue": long_queue}
                sent = await alice.post("/api/workflows/laned/runs", json=body)
                assert sent.status_code == 201, sent.text
                started.append(sent.json()["run_id"])
                again = await alice.post("/api/workflows/laned/runs", json=body)
                assert again.json()["run_id"] == started[-1]  # the dedup key found it
            await server.acall(engine.resume_workflow("laned"))
            for n, run_id in enumerate(started):
                run = await server.acall(engine.wait(run_id, timeout=30))
                assert (run.status, run.output) == ("completed", n)
                assert run.key is not None and len(run.key) == queues.MAX_KEY
            # a queue name of 200 such characters leaves too little room in an index row
            body = {"key": noise, "queue": "\U0001f600" * 200}
            sent = await alice.post("/api/workflows/laned/runs", json=body)
            assert field_of(sent) == "key" and "bytes of UTF-8" in sent.json()["detail"]
            # admission keeps going for everyone after them
            after = await alice.post("/api/workflows/laned/runs", json={"input": 9, "key": "k"})
            done = await server.acall(engine.wait(after.json()["run_id"], timeout=30))
            assert done.status == "completed"


# -- 3. connections that do not finish their headers ------------------------------------------
def _closed_within(port: int, sent: bytes, limit: float) -> float:
    """Send ``sent`` and wait (up to ``limit`` seconds) for the server to close."""
    with socket.create_connection(("127.0.0.1", port), timeout=limit) as sock:
        began = time.monotonic()
        sock.sendall(sent)
        deadline = began + limit
        while True:
            sock.settimeout(max(0.01, deadline - time.monotonic()))
            try:
                data = sock.recv(65536)
            except TimeoutError:
                raise AssertionError(f"still open after {limit}s") from None
            except ConnectionResetError:
                data = b""
            if not data:
                return time.monotonic() - began


@pytest.mark.parametrize(
    "sent", [b"", b"GET /api/me HT", b"GET /api/me HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: a"]
)
async def test_a_connection_that_does_not_finish_its_headers_is_closed(
    serve: Serve, sent: bytes
) -> None:
    with serve(header_timeout=0.5) as server:
        took = await asyncio.to_thread(_closed_within, server.port, sent, 5.0)
        assert 0.4 <= took < 5.0


async def test_the_header_clock_restarts_after_each_answer_and_spares_slow_requests(
    serve: Serve,
) -> None:
    """A keep-alive connection gets the same time for its next request's headers; a
    request whose headers are in is never cut short, however long it takes."""
    with serve(header_timeout=0.5) as server:
        reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
        try:
            head = "Host: 127.0.0.1\r\nAuthorization: Bearer t-alice\r\n"
            # a wait that takes longer than the header timeout: answered, not cut
            body = '{"input": 1, "wait": true}'
            writer.write(
                (
                    f"POST /api/workflows/echo/runs HTTP/1.1\r\n{head}"
                    f"Content-Type: application/json\r\nContent-Length: {len(body) + 2}\r\n\r\n"
                ).encode()
            )
            writer.write(body[:-1].encode())
            await writer.drain()
            await asyncio.sleep(0.8)  # the body is slow: only the head is on the clock
            writer.write(b"} \n")
            await writer.drain()
            status = await asyncio.wait_for(reader.readline(), 10)
            assert status.startswith(b"HTTP/1.1 200"), status
            # the next request on the connection starts half its head and stops
            writer.write(b"GET /api/me HTTP/1.1\r\n")
            await writer.drain()
            began = time.monotonic()
            while await asyncio.wait_for(reader.read(65536), 5):
                pass  # the rest of the first answer, then the close
            assert time.monotonic() - began < 5
        finally:
            writer.close()


def test_the_default_header_timeout_is_ten_seconds() -> None:
    from plait.http import server

    assert server.HEADER_TIMEOUT == 10.0
    web = create_app(plait.Engine(app, "sqlite:///:memory:"), tokens=TOKENS)
    made = make_server(web)
    made.config.load()
    protocol = made.config.http_protocol_class
    assert getattr(protocol, "header_timeout", None) == 10.0
    with pytest.raises(ValueError, match="header_timeout"):
        make_server(web, header_timeout=0)


# -- 4. the order of refusals, start_at ------------------------------------------------------
async def test_an_unauthenticated_request_gets_401_before_any_other_check(serve: Serve) -> None:
    with serve() as server:
        async with client(server) as anonymous:
            for method, path in [
                ("POST", "/api/workflows/echo/runs"),
                ("POST", "/api/schedules"),
                ("POST", "/api/runs/x/cancel"),
                ("DELETE", "/api/schedules/declared"),
                # a method the route does not take, a path no route serves: the 405 or
                # 404 would tell an anonymous caller what the API has
                ("PATCH", "/api/runs"),
                ("PUT", "/api/runs/x/requests/q"),
                ("GET", "/api/runs/x/cancel"),
                ("GET", "/api/no-such-route"),
            ]:
                for headers in ({}, {"Content-Type": "text/plain"}):
                    answer = await anonymous.request(method, path, headers=headers)
                    problem(answer, 401, "UNAUTHENTICATED")
                    wrong = await anonymous.request(
                        method, path, headers={**headers, "Authorization": "Bearer t-nobody"}
                    )
                    problem(wrong, 401, "UNAUTHENTICATED")
        async with client(server, **ALICE) as alice:
            # with a token, the content type is still required
            sent = await alice.post("/api/workflows/echo/runs", content=b"{}")
            problem(sent, 415, "UNSUPPORTED_MEDIA_TYPE")
            sent = await alice.post("/api/session", content=b"{}")
            problem(sent, 415, "UNSUPPORTED_MEDIA_TYPE")
        assert (await server.acall(engine_of(server).count_runs()))[1] == 0


@pytest.mark.parametrize(
    ("headers", "content"),
    [
        ({"Content-Type": "application/json"}, b"[" + b"1," * 600_000 + b"1]"),
        ({"Content-Type": "application/json", "Origin": "http://elsewhere.example"}, b"{}"),
    ],
    ids=["over-max-body", "foreign-origin"],
)
async def test_an_anonymous_request_the_guard_would_refuse_gets_401_first(
    serve: Serve, headers: dict[str, str], content: bytes
) -> None:
    """The guard's refusals (413 for a body over --max-body, 403 for another site's
    Origin) come after authentication: an anonymous request learns only that it needs a
    token. The sign-in, which anyone may reach, is still refused as before."""
    with serve() as server:
        async with client(server) as anonymous:
            answer = await anonymous.post(
                "/api/workflows/echo/runs", content=content, headers=headers
            )
            problem(answer, 401, "UNAUTHENTICATED")
            assert answer.headers["www-authenticate"] == "Bearer"
            wrong = await anonymous.post(
                "/api/workflows/echo/runs",
                content=content,
                headers={**headers, "Authorization": "Bearer t-nobody"},
            )
            problem(wrong, 401, "UNAUTHENTICATED")
            signing_in = await anonymous.post("/api/session", content=content, headers=headers)
            assert signing_in.status_code in (403, 413), signing_in.text
        async with client(server, **ALICE) as alice:
            refused = await alice.post("/api/workflows/echo/runs", content=content, headers=headers)
            assert refused.status_code in (403, 413), refused.text
        assert (await server.acall(engine_of(server).count_runs()))[1] == 0


async def test_a_method_a_route_does_not_take_is_405(serve: Serve) -> None:
    with serve() as server:
        async with client(server, **ALICE) as alice:
            for method, path in [
                ("PATCH", "/api/runs"),
                ("PUT", "/api/workflows/echo/runs"),
                ("POST", "/api/me"),
                ("DELETE", "/api/runs/x"),
                ("POST", "/openapi.json"),
                ("PUT", "/"),
            ]:
                for headers in ({}, JSON):
                    answer = await alice.request(method, path, headers=headers)
                    assert answer.status_code == 405, (method, path, answer.text)


@pytest.mark.parametrize("value", [1700000000, 1.5, 0, True, [], {}])
async def test_start_at_must_be_a_time_as_text(serve: Serve, value: Any) -> None:
    with serve() as server:
        async with client(server, **ALICE) as alice:
            sent = await alice.post("/api/workflows/echo/runs", json={"start_at": value})
            assert field_of(sent) == "start_at"
            ok = await alice.post(
                "/api/workflows/echo/runs", json={"start_at": "2020-01-01T00:00:00Z"}
            )
            assert ok.status_code == 201, ok.text
        assert (await server.acall(engine_of(server).count_runs()))[1] == 1


# -- 5. deleting schedules over HTTP ----------------------------------------------------------
async def test_a_user_deletes_her_own_schedule(serve: Serve) -> None:
    with serve() as server:
        engine = engine_of(server)
        async with client(server, **ALICE) as alice:
            made = await alice.post(
                "/api/schedules", json={"name": "mine", "workflow": "echo", "every": "1h"}
            )
            assert made.status_code == 201, made.text
            gone = await alice.delete("/api/schedules/mine", headers=JSON)
            assert gone.status_code == 204, gone.text
            assert gone.content == b""
            problem(await alice.get("/api/schedules/mine"), 404, "SCHEDULE_NOT_FOUND")
            again = await alice.delete("/api/schedules/mine", headers=JSON)
            problem(again, 404, "SCHEDULE_NOT_FOUND")
            bad = await alice.delete("/api/schedules/a%00b", headers=JSON)
            assert field_of(bad) == "name"
        names = [s.name for s in await server.acall(engine.list_schedules())]
        assert names == ["declared"]


async def test_deleting_others_and_declared_schedules_needs_the_schedules_scope(
    serve: Serve,
) -> None:
    with serve() as server:
        engine = engine_of(server)
        await server.acall(engine.create_schedule("shared", workflow="echo", every="1h"))
        async with (
            client(server, **ALICE) as alice,
            client(server, **BOB) as bob,
            client(server, **ADMIN) as admin,
        ):
            made = await alice.post(
                "/api/schedules", json={"name": "alices", "workflow": "echo", "every": "1h"}
            )
            assert made.status_code == 201, made.text
            for name in ("alices", "shared", "declared"):
                refused = await bob.delete(f"/api/schedules/{name}", headers=JSON)
                assert problem(refused, 403, "MISSING_SCOPE")["error"]["scope"] == "schedules"
            names = {s.name for s in await server.acall(engine.list_schedules())}
            assert names == {"alices", "shared", "declared"}
            for name in ("alices", "shared", "declared"):
                gone = await admin.delete(f"/api/schedules/{name}", headers=JSON)
                assert gone.status_code == 204, gone.text
            assert await server.acall(engine.list_schedules()) == []
            me = (await admin.get("/api/me")).json()
            assert me["scopes"] == ["schedules"]


async def test_the_document_describes_deleting_a_schedule(serve: Serve) -> None:
    with serve() as server:
        async with client(server) as anonymous:
            doc = (await anonymous.get("/openapi.json")).json()
    operation = doc["paths"]["/api/schedules/{name}"]["delete"]
    assert {"204", "401", "403", "404", "415", "422"} <= set(operation["responses"])
    start = doc["components"]["schemas"]["StartRun"]["properties"]
    assert start["key"]["maxLength"] == start["dedup"]["maxLength"] == 512
    assert "(?!schedule:)" in start["run_id"]["anyOf"][0]["pattern"]
