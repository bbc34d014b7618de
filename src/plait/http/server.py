"""``plait serve``: load the user's App, open an Engine for the server's lifetime, run uvicorn.

The server stops on SIGINT or SIGTERM within a second or two whatever is open: it tells
the app to end its streams and waits before uvicorn waits for open requests, and gives
any other request ``SHUTDOWN_GRACE`` seconds.
"""

from __future__ import annotations

import ipaddress
import logging
import re
import socket
from collections.abc import Iterable
from typing import Any

import uvicorn

from plait.engine import Engine
from plait.http.guard import MAX_BODY
from plait.http.lifecycle import Lifecycle
from plait.loading import load_app

log = logging.getLogger("plait.http")

#: seconds an ordinary request still in flight at shutdown gets to finish
SHUTDOWN_GRACE = 1.0
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


def make_server(asgi: Any, **config: Any) -> Server:
    """A ``Server`` for a plait app (``create_app``), with plait's shutdown and logging."""
    config.setdefault("timeout_graceful_shutdown", SHUTDOWN_GRACE)
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
) -> None:
    """Serve the API, ``/openapi.json`` and the dashboard until interrupted.

    The engine runs with workers in this process, so a lone ``plait serve`` both shows
    and executes runs; more ``plait worker`` processes may share the database. Its
    ``max_payload`` is ``max_body``: one size for what the server takes in and what it
    stores. Bad settings (a database URL, ``PLAIT_TOKENS``) raise ``ValueError`` before
    anything is served. With ``metrics``, ``/metrics`` serves the engine's Prometheus
    metrics.
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
    asgi = create_app(engine, no_auth=no_auth, max_body=max_body, allowed_hosts=allowed_hosts)
    make_server(asgi, host=host, port=port, log_level=log_level).run()
