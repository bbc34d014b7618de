"""Requests that wait (a ``wait: true`` start, an event stream) and what ends them.

Such a request ends when its work ends, when its client goes away, or when the server
starts to shut down, whichever comes first; then nothing of it is left behind (no task,
no watcher on the engine's notifier). An ASGI server only says "shutting down" to the app
after its open requests have finished, which a stream never does by itself, so the
server (``plait serve``, or whoever runs the app) calls ``begin_shutdown`` first.
"""

from __future__ import annotations

import asyncio
import enum
import logging
from collections.abc import Awaitable
from typing import Any, TypeVar

from starlette.types import Receive

log = logging.getLogger("plait.http")

T = TypeVar("T")


class Ended(enum.Enum):
    """Why a waiting request stopped before its work was done."""

    DISCONNECTED = "disconnected"
    SHUTDOWN = "shutdown"


class Lifecycle:
    """The waiting requests of one app, counted by kind, and the shutdown signal."""

    def __init__(self) -> None:
        self._closing = asyncio.Event()
        #: requests that wait right now, by kind ("streams", "waits")
        self.open: dict[str, int] = {"streams": 0, "waits": 0}

    @property
    def closing(self) -> bool:
        return self._closing.is_set()

    def begin_shutdown(self) -> None:
        """End every waiting request now, and any that starts from here on at once."""
        if not self._closing.is_set():
            log.info(
                "shutting down: ending %d open streams and %d waits",
                self.open["streams"],
                self.open["waits"],
            )
            self._closing.set()

    async def watch(self, work: Awaitable[T], receive: Receive, kind: str) -> T | Ended:
        """``work``'s result, unless the client disconnects or the server shuts down
        first (then ``work`` is cancelled and awaited, and the reason is returned)."""
        self.open[kind] += 1
        # named, as every task of plait's is: a shutdown that finds one still running
        # reports it (``app._report_leftovers`` looks for tasks named plait*)
        job: asyncio.Future[T] = _named(work, f"plait-http-{kind}-work")
        enders: list[asyncio.Future[Any]] = [
            _named(_disconnected(receive), f"plait-http-{kind}-disconnect"),
            _named(self._closing.wait(), f"plait-http-{kind}-shutdown"),
        ]
        tasks: list[asyncio.Future[Any]] = [job, *enders]
        try:
            await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
            if job.done():
                return job.result()
            return Ended.SHUTDOWN if self.closing else Ended.DISCONNECTED
        finally:
            for task in tasks:
                task.cancel()
            await asyncio.wait(tasks)  # nothing of this request outlives it
            self.open[kind] -= 1

    def leftovers(self) -> dict[str, int]:
        """Waiting requests that are still open (after a shutdown: ones that leaked)."""
        return {kind: count for kind, count in self.open.items() if count}


def _named(work: Awaitable[T], name: str) -> asyncio.Future[T]:
    """``work`` as a task called ``name`` (a future already running keeps its own)."""
    if asyncio.iscoroutine(work):
        return asyncio.get_running_loop().create_task(work, name=name)
    return asyncio.ensure_future(work)


async def _disconnected(receive: Receive) -> None:
    """Returns once the client has gone (the request's body is already read)."""
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            return
