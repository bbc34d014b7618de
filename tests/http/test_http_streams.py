"""A run's stream over HTTP: server-sent events whose ids are offsets, resumed after
``Last-Event-ID`` with no gap and no repeat, gated by the run's owner, on both stores."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest

import plait
from support.polling import eventually

httpx = pytest.importorskip("httpx", reason="httpx is needed to call the ASGI app")
pytest.importorskip("starlette", reason="the http extra (starlette) is not installed")

from plait.http import Principal, create_app  # noqa: E402

TOKENS = {"t-alice": Principal("alice", frozenset()), "t-bob": "bob"}
ALICE = {"Authorization": "Bearer t-alice"}
BOB = {"Authorization": "Bearer t-bob"}


def _app() -> plait.App:
    app = plait.App("stream-tests")

    @app.workflow
    async def talker(wf: plait.Workflow) -> str:
        for i in range(10):
            await wf.stream("out").write(f"token {i}")
        await wf.wait_for_event("more")
        for i in range(10, 20):
            await wf.stream("out").write(f"token {i}")
        return "done"

    return app


class SseClient:
    """Reads a streaming ASGI answer message by message, as a browser's EventSource
    does, and can go away mid-stream (a disconnect)."""

    def __init__(self, web: Any, path: str, headers: dict[str, str]) -> None:
        path, _, query = path.partition("?")
        self.web = web
        self.scope = {
            "type": "http",
            "asgi": {"version": "3.0"},
            "http_version": "1.1",
            "method": "GET",
            "scheme": "http",
            "path": path,
            "raw_path": path.encode(),
            "query_string": query.encode(),
            "root_path": "",
            "headers": [(b"host", b"test")]
            + [(k.lower().encode(), v.encode()) for k, v in headers.items()],
            "server": ("test", 80),
            "client": ("127.0.0.1", 5000),
        }
        self.status: int | None = None
        self.chunks: asyncio.Queue[bytes | None] = asyncio.Queue()
        self.gone = asyncio.Event()
        self.buffer = ""
        self.task: asyncio.Task[None] | None = None

    async def __aenter__(self) -> SseClient:
        asked = False

        async def receive() -> dict[str, Any]:
            nonlocal asked
            if not asked:
                asked = True
                return {"type": "http.request", "body": b"", "more_body": False}
            await self.gone.wait()
            return {"type": "http.disconnect"}

        async def send(message: dict[str, Any]) -> None:
            if message["type"] == "http.response.start":
                self.status = message["status"]
            elif message["type"] == "http.response.body":
                if message.get("body"):
                    await self.chunks.put(message["body"])
                if not message.get("more_body"):
                    await self.chunks.put(None)

        self.task = asyncio.create_task(self.web(self.scope, receive, send))
        return self

    async def __aexit__(self, *exc: object) -> None:
        self.gone.set()  # the client goes away, wherever the stream is
        assert self.task is not None
        await asyncio.wait_for(self.task, 10)

    async def next(self) -> tuple[str, str | None, Any] | None:
        """The next (event, id, data), None once the stream closed."""
        while True:
            while "\n\n" not in self.buffer:
                chunk = await asyncio.wait_for(self.chunks.get(), 20)
                if chunk is None:
                    return None
                self.buffer += chunk.decode()
            message, self.buffer = self.buffer.split("\n\n", 1)
            fields = dict(line.split(": ", 1) for line in message.splitlines() if ": " in line)
            if "data" in fields:
                return fields.get("event", "message"), fields.get("id"), json.loads(fields["data"])


async def test_a_client_that_reconnects_with_last_event_id_gets_the_rest_once(
    engine_factory,
) -> None:
    async with engine_factory(_app()) as engine:
        web = create_app(engine, tokens=TOKENS)
        async with httpx.AsyncClient(
            transport=httpx.ASGITransport(app=web),
            base_url="http://test",
            headers={"Content-Type": "application/json"},
        ) as client:
            started = await client.post("/api/workflows/talker/runs", headers=ALICE, json={})
            run_id = started.json()["run_id"]
            got: list[tuple[str, str | None, Any]] = []
            async with SseClient(web, f"/api/runs/{run_id}/streams/out", ALICE) as sse:
                while (event := await sse.next()) is not None:
                    got.append(event)
                    if event[1] == "7":
                        break  # the connection drops after offset 7
            assert [e[1] for e in got] == [str(i) for i in range(8)]
            assert got[0][0] == "data" and got[0][2]["value"] == "token 0"

            path = f"/api/runs/{run_id}/streams/out"
            async with SseClient(web, path, {**ALICE, "Last-Event-ID": "7"}) as sse:
                rest = [await sse.next(), await sse.next()]
                await client.post(f"/api/runs/{run_id}/events/more", headers=ALICE, json=None)
                while (event := await sse.next()) is not None:
                    rest.append(event)
            assert all(e is not None for e in rest)
            ids = [e[1] for e in rest if e is not None]
            assert ids == [str(i) for i in range(8, 21)]  # no gap, no repeat, then the end
            assert [e[0] for e in rest if e is not None] == ["data"] * 12 + ["end"]
            values = [e[2]["value"] for e in rest if e is not None and e[0] == "data"]
            assert values == [f"token {i}" for i in range(8, 20)]

            # ?after= resumes the same way; an ended run's stream closes at once
            after = await client.get(f"{path}?after=18", headers=ALICE)
            messages = [m for m in after.text.split("\n\n") if m]
            assert [m.split("\n")[1] for m in messages] == ["id: 19", "id: 20"]
            assert messages[-1].startswith("event: end\nid: 20\n")


async def test_another_users_token_gets_403_and_bad_offsets_422(engine_factory) -> None:
    async with engine_factory(_app()) as engine:
        web = create_app(engine, tokens=TOKENS)
        async with httpx.AsyncClient(
            transport=httpx.ASGITransport(app=web),
            base_url="http://test",
            headers={"Content-Type": "application/json"},
        ) as client:
            started = await client.post("/api/workflows/talker/runs", headers=ALICE, json={})
            run_id = started.json()["run_id"]

            async def written() -> bool:
                return len(await engine.read_stream(run_id, "out")) == 10

            await eventually(written)
            path = f"/api/runs/{run_id}/streams/out"
            stolen = await client.get(path, headers=BOB)
            assert stolen.status_code == 403
            assert "token" not in stolen.text
            missing = await client.get("/api/runs/no-such-run/streams/out", headers=ALICE)
            assert missing.status_code == 404
            anonymous = await client.get(path)
            assert anonymous.status_code == 401
            bad = await client.get(path, headers={**ALICE, "Last-Event-ID": "seven"})
            assert bad.status_code == 422
            assert "Last-Event-ID must be a stream offset" in bad.json()["detail"]
            for text in ("1_0", " +0 ", "+1"):
                bad = await client.get(path, headers={**ALICE, "Last-Event-ID": text})
                assert bad.status_code == 422, text
            bad = await client.get(f"{path}?after=\u0663", headers=ALICE)  # an Arabic 3
            assert bad.status_code == 422
            for flag in ("yes", "on", "TRUE ", "2", "flase"):
                bad = await client.get(f"{path}?settled_only={flag}", headers=ALICE)
                assert bad.status_code == 422 and "settled_only" in bad.text, flag
            bad = await client.get(f"{path}?after=-5", headers=ALICE)
            assert bad.status_code == 422 and "after must be a stream offset" in bad.text
            # past what a store counts (PostgreSQL refused it with a 500 before)
            huge = await client.get(f"{path}?after=549755813889", headers=ALICE)
            assert huge.status_code == 422 and "after must be a stream offset" in huge.text
            long_name = await client.get(f"/api/runs/{run_id}/streams/{'x' * 201}", headers=ALICE)
            assert long_name.status_code == 422 and "invalid stream name" in long_name.text
            await engine.cancel(run_id)


async def test_a_runs_stream_holds_a_slot_of_the_event_stream_limits(engine_factory) -> None:
    async with engine_factory(_app()) as engine:
        web = create_app(engine, tokens=TOKENS, max_streams=4, max_streams_per_user=1)
        async with httpx.AsyncClient(
            transport=httpx.ASGITransport(app=web),
            base_url="http://test",
            headers={"Content-Type": "application/json"},
        ) as client:
            started = await client.post("/api/workflows/talker/runs", headers=ALICE, json={})
            run_id = started.json()["run_id"]
            path = f"/api/runs/{run_id}/streams/out"
            async with SseClient(web, path, ALICE) as sse:
                assert (await sse.next()) is not None  # open, and holding alice's one slot
                refused = await client.get(path, headers=ALICE)
                assert refused.status_code == 429 and "TOO_MANY_STREAMS" in refused.text
                run_stream = await client.get(f"/api/runs/{run_id}/stream", headers=ALICE)
                assert run_stream.status_code == 429
            await engine.cancel(run_id)
            after = await client.get(path, headers=ALICE)  # the slot was given back
            assert after.status_code == 200 and "event: end" in after.text
