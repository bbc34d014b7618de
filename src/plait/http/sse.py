"""Server-sent events for one run: a ``run`` event with the run and its steps whenever they
change, and a final ``end`` event once the run is completed, failed, cancelled or suspended.

Wake-ups come from ``engine.notifier`` (set when the run changes status in this process);
a short poll covers what it does not see: step progress inside a pass and changes made by
other processes.

A stream also ends when its client goes away (at once, not at the next write) and when
the server shuts down: then a last ``close`` event tells the client to come back later.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable
from typing import Any

from starlette.responses import Response
from starlette.types import Receive, Scope, Send

from plait.engine import Engine
from plait.http.lifecycle import Ended, Lifecycle
from plait.notify import wait_event
from plait.records import SETTLED, Run, StreamEntry

Snapshot = Callable[[Run], Awaitable[dict[str, Any]]]

#: seconds between reads when nothing woke us (step progress is not notified)
POLL_SECONDS = 0.5
#: seconds of silence after which a comment line keeps proxies from closing the stream
HEARTBEAT_SECONDS = 15.0


def format_event(event: str, data: Any, event_id: int | None = None) -> str:
    """One SSE message; JSON never contains a raw newline, so one ``data:`` line is enough."""
    lines = [f"event: {event}"]
    if event_id is not None:
        lines.append(f"id: {event_id}")
    lines.append("data: " + json.dumps(data, separators=(",", ":"), ensure_ascii=False))
    return "\n".join(lines) + "\n\n"


async def run_events(
    engine: Engine,
    run_id: str,
    snapshot: Snapshot,
    *,
    poll: float = POLL_SECONDS,
    heartbeat: float = HEARTBEAT_SECONDS,
) -> AsyncGenerator[str, None]:
    """The stream's messages; returns after the ``end`` event."""
    watcher = engine.notifier.watch(run_id)
    try:
        last: str | None = None
        sent = 0
        quiet_since = time.monotonic()
        while True:
            # Clear before reading so a change that lands during the read wakes the next wait.
            watcher.clear()
            run = await engine.get_run(run_id)
            data = await snapshot(run)
            text = json.dumps(data, sort_keys=True)
            if text != last:
                last = text
                sent += 1
                quiet_since = time.monotonic()
                yield format_event("run", data, sent)
            if run.status in SETTLED:
                yield format_event("end", {"run_id": run_id, "status": str(run.status)})
                return
            await wait_event(watcher, poll)
            if time.monotonic() - quiet_since >= heartbeat:
                quiet_since = time.monotonic()
                yield ": keep-alive\n\n"
    finally:
        engine.notifier.unwatch(run_id, watcher)


class EventStream(Response):
    """An ``text/event-stream`` answer whose messages come from ``events``, watched by
    ``lifecycle``: the client's disconnect or the server's shutdown ends it."""

    media_type = "text/event-stream"

    def __init__(
        self, events: AsyncGenerator[str, None], lifecycle: Lifecycle, run_id: str
    ) -> None:
        self.events = events
        self.lifecycle = lifecycle
        self.run_id = run_id
        self.status_code = 200
        self.background = None
        self.init_headers({"Cache-Control": "no-cache", "X-Accel-Buffering": "no"})

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        await send({"type": "http.response.start", "status": 200, "headers": self.raw_headers})

        async def pump() -> None:
            async for message in self.events:
                await send(
                    {"type": "http.response.body", "body": message.encode(), "more_body": True}
                )

        try:
            ended = await self.lifecycle.watch(pump(), receive, "streams")
        finally:
            await self.events.aclose()
        if ended is Ended.DISCONNECTED:
            return
        if ended is Ended.SHUTDOWN:
            last = format_event("close", {"run_id": self.run_id, "reason": "shutdown"})
            await send({"type": "http.response.body", "body": last.encode(), "more_body": True})
        await send({"type": "http.response.body", "body": b"", "more_body": False})


def stream_run(
    engine: Engine, run_id: str, snapshot: Snapshot, lifecycle: Lifecycle
) -> EventStream:
    return EventStream(run_events(engine, run_id, snapshot), lifecycle, run_id)


async def stream_entry_events(
    engine: Engine,
    run_id: str,
    name: str,
    *,
    after: int,
    settled_only: bool,
    heartbeat: float = HEARTBEAT_SECONDS,
) -> AsyncGenerator[str, None]:
    """The messages of a run's stream (``engine.follow_stream``): one event per entry,
    named by its kind (``data``, ``reset``, ``end``), whose ``id`` is its offset, so a
    client that reconnects with ``Last-Event-ID`` goes on after the last it got. Returns
    after the ``end`` (an ``end`` without an id for a stream its ended run never wrote)."""
    entries = engine.follow_stream(run_id, name, after=after, settled_only=settled_only)
    waiting: asyncio.Task[StreamEntry] | None = None
    try:
        while True:
            if waiting is None:
                waiting = asyncio.get_running_loop().create_task(
                    _next_entry(entries), name="plait-http-stream-entry"
                )
            done, _ = await asyncio.wait([waiting], timeout=heartbeat)
            if not done:
                yield ": keep-alive\n\n"
                continue
            try:
                entry = waiting.result()
            except StopAsyncIteration:
                yield format_event("end", {"run_id": run_id, "stream": name, "offset": None})
                return
            waiting = None
            yield format_event(entry.kind, entry.to_dict(), entry.offset)
            if entry.kind == "end":
                return
    finally:
        if waiting is not None:
            waiting.cancel()
            await asyncio.wait([waiting])
        await entries.aclose()


async def _next_entry(entries: AsyncIterator[StreamEntry]) -> StreamEntry:
    return await anext(entries)


def stream_entries(
    engine: Engine, run_id: str, name: str, after: int, settled_only: bool, lifecycle: Lifecycle
) -> EventStream:
    """A run's stream as server-sent events, bounded as every event stream is."""
    events = stream_entry_events(engine, run_id, name, after=after, settled_only=settled_only)
    return EventStream(events, lifecycle, run_id)
