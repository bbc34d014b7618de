"""Event streams on both stores: limited in total and per user (429 naming the limit, the
slot given back when a stream ends, its client's disconnect included), and sending only
what changed: a quiet tick reads the run's marks, not the run, and sends nothing but the
keep-alive."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

import pytest

import plait
from support.polling import eventually

httpx = pytest.importorskip("httpx", reason="httpx is needed to call the ASGI app")
pytest.importorskip("starlette", reason="the http extra (starlette) is not installed")

from plait.http import Principal, create_app  # noqa: E402
from plait.http.sse import StreamLimits, changes, run_events  # noqa: E402
from test_http_api import AsgiStream  # noqa: E402

app = plait.App("stream-limits")

TOKENS = {"t-alice": Principal("alice"), "t-bob": Principal("bob")}
ALICE = {"Authorization": "Bearer t-alice"}
BOB = {"Authorization": "Bearer t-bob"}


@app.function
async def one() -> int:
    return 1


@app.workflow
async def waits(wf: plait.Workflow, data: Any) -> Any:
    await wf.do("first", one)
    return await wf.wait_for_event("go")


@pytest.fixture
async def engine(database: str) -> AsyncIterator[plait.Engine]:
    async with plait.Engine(app, database, poll_interval=0.2) as opened:
        yield opened


async def waiting_run(engine: plait.Engine) -> str:
    run_id = await engine.start("waits", None, owner="alice")

    async def at_the_wait() -> bool:
        return any(s.kind == "event" for s in await engine.get_steps(run_id))

    await eventually(at_the_wait, what="the run at its wait")
    return run_id


async def test_streams_are_limited_per_user_and_in_total_and_given_back(
    engine: plait.Engine,
) -> None:
    web = create_app(engine, tokens=TOKENS, max_streams=3, max_streams_per_user=2)
    run_id = await waiting_run(engine)
    bobs = await engine.start("waits", None, owner="bob")
    path = f"/api/runs/{run_id}/stream"
    async with httpx.AsyncClient(
        transport=httpx.ASGITransport(app=web), base_url="http://test"
    ) as client:
        async with AsgiStream(web, path, ALICE) as first, AsgiStream(web, path, ALICE) as second:
            assert (await first.next_event())[0] == "run"  # type: ignore[index]
            assert (await second.next_event())[0] == "run"  # type: ignore[index]
            over = await client.get(path, headers=ALICE)
            assert over.status_code == 429, over.text
            error = over.json()["error"]
            assert error["code"] == "TOO_MANY_STREAMS" and error["limit"] == 2
            assert "max_streams_per_user=2" in error["message"]
            async with AsgiStream(web, f"/api/runs/{bobs}/stream", BOB) as third:
                assert (await third.next_event())[0] == "run"  # type: ignore[index]
                full = await client.get(f"/api/runs/{bobs}/stream", headers=BOB)
                assert full.status_code == 429
                assert "--max-streams 3" in full.json()["error"]["message"]
            assert web.state.streams.open_total == 2
        # both clients went away: their slots are free again
        assert web.state.streams.open_total == 0 and web.state.streams.open_by_user == {}
        async with AsgiStream(web, path, ALICE) as again:
            assert (await again.next_event())[0] == "run"  # type: ignore[index]
    assert web.state.streams.open_total == 0
    await engine.cancel(run_id)
    await engine.cancel(bobs)


def test_bad_limits_are_refused_naming_them() -> None:
    with pytest.raises(ValueError, match="max_streams"):
        StreamLimits(0)
    with pytest.raises(ValueError, match="max_streams_per_user"):
        StreamLimits(10, 0)
    assert StreamLimits(10).per_user == 2 and StreamLimits(2).per_user == 1


async def test_a_quiet_tick_reads_no_run_and_sends_only_the_keep_alive(
    engine: plait.Engine,
) -> None:
    run_id = await waiting_run(engine)
    reads = 0

    async def snapshot(run: plait.Run) -> dict[str, Any]:
        nonlocal reads
        reads += 1
        steps = await engine.get_steps(run.id)
        return {**run.to_dict(), "steps": [s.to_dict() for s in steps]}

    events = run_events(engine, run_id, snapshot, poll=0.01, heartbeat=0.3)
    try:
        first = await anext(events)
        assert first.startswith("event: run\nid: 1\n")
        # many quiet ticks (poll 0.01 s) pass before the keep-alive: none reads the run
        assert await anext(events) == ": keep-alive\n\n"
        assert reads == 1
        shown = json.loads(first.split("data: ", 1)[1])
        await engine.send_event(run_id, "go", "done")
        while not (message := await anext(events)).startswith("event: end\n"):
            if message.startswith(":"):
                continue
            change = json.loads(message.split("data: ", 1)[1])
            assert change["partial"] is True
            # only the steps that changed: never the first step again
            assert [s["key"] for s in change.get("steps", [])].count("first") == 0
            shown.update({k: v for k, v in change.items() if k not in ("steps", "partial")})
        assert (shown["status"], shown["output"]) == ("completed", "done")
    finally:
        await events.aclose()


def test_changes_holds_only_what_changed() -> None:
    before = {
        "id": "r",
        "status": "running",
        "output": None,
        "steps": [{"key": "a", "status": "succeeded"}, {"key": "b", "status": "running"}],
        "values": {"v": 1},
        "decisions": [],
        "children": [],
    }
    after = {
        **before,
        "status": "completed",
        "output": 3,
        "steps": [{"key": "b", "status": "succeeded"}, {"key": "c", "status": "succeeded"}],
    }
    assert changes(before, after) == {
        "id": "r",
        "status": "completed",
        "partial": True,
        "output": 3,
        "steps": [{"key": "b", "status": "succeeded"}, {"key": "c", "status": "succeeded"}],
        "removed_steps": ["a"],
    }
    assert changes(after, after) == {"id": "r", "status": "completed", "partial": True}
