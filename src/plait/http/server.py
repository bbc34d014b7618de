"""``plait serve``: load the user's App, open an Engine for the server's lifetime, run uvicorn.

The server stops on SIGINT or SIGTERM within a second or two whatever is open: it tells
the app to end its streams and waits before uvicorn waits for open requests, and gives
any other request ``SHUTDOWN_GRACE`` seconds.

A connection that has not sent the whole head of a request (its request line and
headers) ``HEADER_TIMEOUT`` seconds after it opened, or after the answer to its last
request, is closed: uvicorn has no such limit of its own, and a client that sends a
request a byte at a time, or half a request and then nothing, would otherwise hold a
connection (and an open file) for ever.
"""

from __future__ import annotations

import asyncio
import ipaddress
import logging
import re
import socket
from collections.abc import Iterable
from typing import Any

import uvicorn
from uvicorn.config import HTTP_PROTOCOLS
from uvicorn.importer import import_from_string

from plait.engine import Engine
from plait.http.guard import MAX_BODY
from plait.http.lifecycle import Lifecycle
from plait.http.sse import MAX_STREAMS
from plait.loading import load_app

log = logging.getLogger("plait.http")

#: seconds an ordinary request still in flight at shutdown gets to finish
SHUTDOWN_GRACE = 1.0
#: seconds a connection has to send the head of each request (request line and headers)
HEADER_TIMEOUT = 10.0
#: query parameters whose values the access log never shows
_SECRET_QUERY = re.compile(
    r"(?i)((?:^|[?&;])(?:token|access_token|password|passwd|secret|key)=)[^&;#\s]*"
)


def _is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


class Server(uvicorn.Server):
    """uvicorn's server, which ends the app's streams and waits (``lifecycle``) as soon
    as it starts to shut down, rather than waiting for them to end by themselves."""

    def __init__(self, config: uvicorn.Config, lifecycle: Lifecycle) -> None:
        super().__init__(config)
        self.lifecycle = lifecycle

    async def shutdown(self, sockets: list[socket.socket] | None = None) -> None:
        self.lifecycle.begin_shutdown()
        await super().shutdown(sockets)


class RedactSecrets(logging.Filter):
    """Masks the values of secret query parameters (``?token=``) in access-log lines:
    plait never puts a token in a URL, but a client might."""

    def filter(self, record: logging.LogRecord) -> bool:
        if isinstance(record.args, tuple):
            record.args = tuple(
                _SECRET_QUERY.sub(r"\1***", arg) if isinstance(arg, str) else arg
                for arg in record.args
            )
        return True


class HeaderDeadline(asyncio.Protocol):
    """Mixed in before one of uvicorn's HTTP protocols (h11, httptools): closes the
    connection when the head of a request is not complete ``header_timeout`` seconds
    after the connection opened or the last answer went out.

    A request's head is complete when the protocol starts a request-response cycle for
    it (``cycle``, which every uvicorn HTTP protocol sets); the clock stops then, so a
    long request (a wait, a stream) is never cut short, and starts again with the answer
    (``on_response_complete``), for the next request on the connection."""

    header_timeout: float = HEADER_TIMEOUT
    _deadline: asyncio.TimerHandle | None = None
    _timed_cycle: object = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        super().connection_made(transport)
        self._arm()

    def data_received(self, data: bytes) -> None:
        super().data_received(data)
        self._check_head()

    def on_response_complete(self) -> None:
        # uvicorn's protocols have it; asyncio.Protocol, what type checkers see, has not
        super_complete = getattr(super(), "on_response_complete")  # noqa: B009
        super_complete()
        self._arm()
        self._check_head()  # a pipelined request may have started at once

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm()
        super().connection_lost(exc)

    def _arm(self) -> None:
        self._disarm()
        transport: asyncio.Transport | None = getattr(self, "transport", None)
        if transport is None or transport.is_closing():
            return
        self._timed_cycle = getattr(self, "cycle", None)
        loop = asyncio.get_running_loop()
        self._deadline = loop.call_later(self.header_timeout, self._expire)

    def _disarm(self) -> None:
        if self._deadline is not None:
            self._deadline.cancel()
            self._deadline = None

    def _check_head(self) -> None:
        """Stop the clock once a new request's head is complete."""
        if self._deadline is not None and getattr(self, "cycle", None) is not self._timed_cycle:
            self._disarm()

    def _expire(self) -> None:
        self._deadline = None
        transport: asyncio.Transport | None = getattr(self, "transport", None)
        # an upgraded connection (a WebSocket) belongs to another protocol now
        upgraded = transport is not None and transport.get_protocol() is not self
        if transport is not None and not transport.is_closing() and not upgraded:
            transport.close()


def _with_header_deadline(http: Any, seconds: float) -> type[asyncio.Protocol]:
    """uvicorn's HTTP protocol ``http`` ("auto", "h11", "httptools" or a class) with
    ``HeaderDeadline`` mixed in."""
    base: type[asyncio.Protocol] = (
        import_from_string(HTTP_PROTOCOLS.get(http, http)) if isinstance(http, str) else http
    )
    name = f"HeaderDeadline{base.__name__}"
    return type(name, (HeaderDeadline, base), {"header_timeout": seconds})


def make_server(asgi: Any, *, header_timeout: float = HEADER_TIMEOUT, **config: Any) -> Server:
    """A ``Server`` for a plait app (``create_app``), with plait's shutdown and logging;
    a connection that takes longer than ``header_timeout`` seconds to send the head of a
    request is closed."""
    if isinstance(header_timeout, bool) or not header_timeout > 0:
        raise ValueError(f"invalid header_timeout: {header_timeout!r} (seconds, > 0)")
    config.setdefault("timeout_graceful_shutdown", SHUTDOWN_GRACE)
    config["http"] = _with_header_deadline(config.get("http", "auto"), header_timeout)
    made = Server(uvicorn.Config(asgi, **config), asgi.state.lifecycle)
    logging.getLogger("uvicorn.access").addFilter(RedactSecrets())
    return made


def serve(
    app_ref: str,
    *,
    host: str = "127.0.0.1",
    port: int = 8000,
    database: str | None = None,
    no_auth: bool = False,
    log_level: str = "info",
    max_body: int = MAX_BODY,
    allowed_hosts: Iterable[str] = (),
    metrics: bool = False,
    tracing: bool = False,
    max_streams: int = MAX_STREAMS,
    max_streams_per_user: int | None = None,
) -> None:
    """Serve the API, ``/openapi.json`` and the dashboard until interrupted.

    The engine runs with workers in this process, so a lone ``plait serve`` both shows
    and executes runs; more ``plait worker`` processes may share the database. Its
    ``max_payload`` is ``max_body``: one size for what the server takes in and what it
    stores. Bad settings (a database URL, ``PLAIT_TOKENS``) raise ``ValueError`` before
    anything is served. With ``metrics``, ``/metrics`` serves the engine's Prometheus
    metrics. At most ``max_streams`` event streams are open at once,
    ``max_streams_per_user`` of one user (default: a quarter of them).
    """
    from plait.http.app import create_app

    logging.basicConfig(
        level=log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    user_app = load_app(app_ref)
    engine = Engine(
        user_app, database, workers=True, max_payload=max_body, metrics=metrics, tracing=tracing
    )
    if no_auth and not _is_loopback(host):
        log.warning("serving %s without authentication: anyone who reaches it can act", host)
    asgi = create_app(
        engine,
        no_auth=no_auth,
        max_body=max_body,
        allowed_hosts=allowed_hosts,
        max_streams=max_streams,
        max_streams_per_user=max_streams_per_user,
    )
    make_server(asgi, host=host, port=port, log_level=log_level).run()
