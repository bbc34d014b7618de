"""A plait web app served over real HTTP for tests: uvicorn (``plait.http.Server``, the
server ``plait serve`` runs) in a thread of its own, on a free loopback port.

The app's lifespan opens the engine inside the server's event loop, so a test reaches the
engine only through ``call``, which runs a coroutine on that loop.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import socket
import threading
import time
from collections.abc import Coroutine
from typing import Any, TypeVar

from plait.http import make_server

T = TypeVar("T")


class LiveServer:
    """``with LiveServer(web) as server:`` serves ``web`` at ``server.url`` until the block
    ends; leaving it shuts the server down the way SIGTERM does."""

    def __init__(self, web: Any, *, host: str = "127.0.0.1") -> None:
        self.web = web
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        # IPPROTO_TCP said out loud: asyncio turns Nagle's algorithm off only on sockets
        # whose protocol says TCP, and the connections inherit it from this one. Left at 0,
        # every answer (headers, then body) waited ~40 ms for the client's delayed ACK.
        self.sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.sock.bind((host, 0))
        self.port = self.sock.getsockname()[1]
        shown = f"[{host}]" if ":" in host else host
        self.url = f"http://{shown}:{self.port}"
        self.server = make_server(web, log_level="warning", lifespan="on")
        self.loop: asyncio.AbstractEventLoop | None = None
        self.thread = threading.Thread(target=self._run, daemon=True, name="live-server")
        self.stopped_in: float | None = None

    def _run(self) -> None:
        async def serve() -> None:
            self.loop = asyncio.get_running_loop()
            await self.server.serve(sockets=[self.sock])

        asyncio.run(serve())

    def __enter__(self) -> LiveServer:
        self.thread.start()
        deadline = time.monotonic() + 30
        while not self.server.started:
            if not self.thread.is_alive() or time.monotonic() > deadline:
                raise RuntimeError("uvicorn did not start")
            time.sleep(0.01)
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def stop(self, timeout: float = 30.0) -> float:
        """Shut down as on SIGTERM; returns how many seconds it took."""
        if self.stopped_in is None:
            began = time.monotonic()
            self.server.should_exit = True
            self.thread.join(timeout)
            self.stopped_in = time.monotonic() - began
            self.sock.close()
            if self.thread.is_alive():
                raise AssertionError(f"the server did not stop within {timeout}s")
        return self.stopped_in

    def call(self, coro: Coroutine[Any, Any, T], timeout: float = 30.0) -> T:
        """Run ``coro`` on the server's event loop (where its engine lives)."""
        assert self.loop is not None
        future: concurrent.futures.Future[T] = asyncio.run_coroutine_threadsafe(coro, self.loop)
        return future.result(timeout)

    async def acall(self, coro: Coroutine[Any, Any, T], timeout: float = 30.0) -> T:
        """``call`` from a test's own event loop, without blocking it."""
        assert self.loop is not None
        future = asyncio.run_coroutine_threadsafe(coro, self.loop)
        return await asyncio.wait_for(asyncio.wrap_future(future), timeout)
