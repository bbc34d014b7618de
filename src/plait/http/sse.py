"""Server-sent events for one run: a first ``run`` event with the whole run (its steps,
children, values and decisions), then a ``run`` event with ``"partial": true`` holding
only what changed (the run's changed fields, the steps that changed or appeared,
``removed_steps``, and values, decisions or children when they changed), and a final
``end`` event once the run is completed, failed, cancelled or suspended.

Wake-ups come from ``engine.notifier`` (set when the run changes status in this process);
a short poll covers what it does not see: step progress inside a pass and changes made by
other processes. Each poll reads only the run's marks (``engine.run_marks``: counts and
times, not values) and reads the run again only when they moved, so a quiet tick sends
nothing and costs one small query whatever the run holds.

Streams are limited (``StreamLimits``): in total and per user, each open stream holding a
slot (``take_slot``) until it closes, however it closes; past a limit a new one is 429.

A stream also ends when its client goes away (at once, not at the next write) and when
the server shuts down: then a last ``close`` event tells the client to come back later.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable
from typing import Any

from starlette.requests import Request
from starlette.responses import Response
from starlette.types import Receive, Scope, Send

from plait.engine import Engine
from plait.http.lifecycle import Ended, Lifecycle
from plait.http.problems import ApiError
from plait.notify import wait_event
from plait.records import SETTLED, Run, StreamEntry

Snapshot = Callable[[Run], Awaitable[dict[str, Any]]]

#: seconds between reads when nothing woke us (step progress is not notified)
POLL_SECONDS = 0.5
#: seconds of silence after which a comment line keeps proxies from closing the stream
HEARTBEAT_SECONDS = 15.0
#: event streams open at once on one server, unless ``--max-streams`` says
MAX_STREAMS = 100
#: the parts of a run's JSON that are lists or maps of their own, sent whole when changed
_PARTS = ("steps", "children", "values", "decisions")


class StreamSlot:
    """One open stream's place in its ``StreamLimits``; ``release`` gives it back (once,
    however often it is called)."""

    def __init__(self, limits: StreamLimits, user: str | None) -> None:
        self.limits = limits
        self.user = user
        self.released = False

    def release(self) -> None:
        if not self.released:
            self.released = True
            self.limits.give_back(self.user)


class StreamLimits:
    """How many event streams are open, in total and per user, and the limits: a stream
    takes a slot before it starts (``take``, 429 past a limit) and gives it back when it
    ends, on its client's disconnect or the server's shutdown too."""

    def __init__(self, total: int = MAX_STREAMS, per_user: int | None = None) -> None:
        if isinstance(total, bool) or not isinstance(total, int) or total < 1:
            raise ValueError(f"invalid max_streams: {total!r} (an int, >= 1)")
        if per_user is None:
            per_user = max(1, total // 4)
        if isinstance(per_user, bool) or not isinstance(per_user, int) or per_user < 1:
            raise ValueError(f"invalid max_streams_per_user: {per_user!r} (an int, >= 1)")
        self.total = total
        self.per_user = per_user
        self.open_total = 0
        self.open_by_user: dict[str | None, int] = {}

    def take(self, user: str | None) -> StreamSlot:
        """A slot for a new stream of ``user``, or 429 ``TOO_MANY_STREAMS`` naming the
        limit it would pass."""
        mine = self.open_by_user.get(user, 0)
        if mine >= self.per_user:
            raise ApiError(
                429,
                "TOO_MANY_STREAMS",
                f"{mine} event streams of this user are open, the most one user may have"
                f" (max_streams_per_user={self.per_user}): close one first",
                extra={"limit": self.per_user},
            )
        if self.open_total >= self.total:
            raise ApiError(
                429,
                "TOO_MANY_STREAMS",
                f"{self.open_total} event streams are open, the most this server serves"
                f" (--max-streams {self.total}): try again later",
                extra={"limit": self.total},
            )
        self.open_total += 1
        self.open_by_user[user] = mine + 1
        return StreamSlot(self, user)

    def give_back(self, user: str | None) -> None:
        self.open_total -= 1
        left = self.open_by_user.get(user, 1) - 1
        if left:
            self.open_by_user[user] = left
        else:
            self.open_by_user.pop(user, None)


def take_slot(request: Request, user: str | None) -> StreamSlot | None:
    """A slot of the app's ``StreamLimits`` for a stream of ``user`` (429 past a limit);
    None in an app without limits. Hand it to ``EventStream``, which gives it back."""
    limits = getattr(request.app.state, "streams", None)
    return limits.take(user) if isinstance(limits, StreamLimits) else None


def changes(before: dict[str, Any], after: dict[str, Any]) -> dict[str, Any]:
    """What changed from one JSON of a run (``before``) to the next, as a partial ``run``
    event: its id and status always, the run's other fields that changed, the steps
    that changed or appeared (``removed_steps``: keys of those gone), and children,
    values and decisions whole when they changed. Only ``id`` and ``status`` (and
    ``partial``) when nothing did."""
    out: dict[str, Any] = {"id": after.get("id"), "status": after.get("status"), "partial": True}
    for key, value in after.items():
        if key not in _PARTS and before.get(key) != value:
            out[key] = value
    old_steps = {s["key"]: s for s in before.get("steps", [])}
    new_steps = after.get("steps", [])
    changed = [s for s in new_steps if old_steps.get(s["key"]) != s]
    if changed:
        out["steps"] = changed
    gone = set(old_steps) - {s["key"] for s in new_steps}
    if gone:
        out["removed_steps"] = sorted(gone)
    for key in ("children", "values", "decisions"):
        if key in after and before.get(key) != after[key]:
            out[key] = after[key]
    return out


def format_event(event: str, data: Any, event_id: int | None = None) -> str:
    """One SSE message; JSON never contains a raw newline, so one ``data:`` line is enough."""
    lines = [f"event: {event}"]
    if event_id is not None:
        lines.append(f"id: {event_id}")
    lines.append("data: " + json.dumps(data, separators=(",", ":"), ensure_ascii=False))
    return "\n".join(lines) + "\n\n"


def moved(before: dict[str, Any], message: dict[str, Any]) -> bool:
    """Whether a partial ``run`` event says anything the client does not know."""
    return bool(set(message) - {"id", "status", "partial"}) or (
        before.get("status") != message.get("status")
    )


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
        marks: tuple[Any, ...] | None = None
        last: dict[str, Any] | None = None
        sent = 0
        quiet_since = time.monotonic()
        while True:
            # Clear before reading so a change that lands during the read wakes the next wait.
            watcher.clear()
            now_marks = await engine.run_marks(run_id)
            if now_marks is None or now_marks != marks:
                marks = now_marks
                run = await engine.get_run(run_id)  # RunNotFoundError ends the stream
                data = await snapshot(run)
                message = data if last is None else changes(last, data)
                if last is None or moved(last, message):
                    sent += 1
                    quiet_since = time.monotonic()
                    yield format_event("run", message, sent)
                last = data
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
        self,
        events: AsyncGenerator[str, None],
        lifecycle: Lifecycle,
        run_id: str,
        slot: StreamSlot | None = None,
    ) -> None:
        self.events = events
        self.lifecycle = lifecycle
        self.run_id = run_id
        #: the stream's place in the app's limits, given back when it ends
        self.slot = slot
        self.status_code = 200
        self.background = None
        self.init_headers({"Cache-Control": "no-cache", "X-Accel-Buffering": "no"})

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            await self._serve(receive, send)
        finally:
            if self.slot is not None:
                self.slot.release()

    async def _serve(self, receive: Receive, send: Send) -> None:
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
    engine: Engine,
    run_id: str,
    snapshot: Snapshot,
    lifecycle: Lifecycle,
    slot: StreamSlot | None = None,
) -> EventStream:
    return EventStream(run_events(engine, run_id, snapshot), lifecycle, run_id, slot)


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
    engine: Engine,
    run_id: str,
    name: str,
    after: int,
    settled_only: bool,
    lifecycle: Lifecycle,
    slot: StreamSlot | None = None,
) -> EventStream:
    """A run's stream as server-sent events, bounded as every event stream is (its
    ``slot`` of the app's ``StreamLimits`` given back when it ends)."""
    events = stream_entry_events(engine, run_id, name, after=after, settled_only=settled_only)
    return EventStream(events, lifecycle, run_id, slot)
