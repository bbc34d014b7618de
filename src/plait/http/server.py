"""``plait serve``: load the user's App, open an Engine for the server's lifetime, run uvicorn."""

from __future__ import annotations

import ipaddress
import logging

from plait.engine import Engine
from plait.loading import load_app

log = logging.getLogger("plait.http")


def _is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def serve(
    app_ref: str,
    *,
    host: str = "127.0.0.1",
    port: int = 8000,
    database: str | None = None,
    no_auth: bool = False,
    log_level: str = "info",
) -> None:
    """Serve the API, ``/openapi.json`` and the dashboard until interrupted.

    The engine runs with workers in this process, so a lone ``plait serve`` both shows
    and executes runs; more ``plait worker`` processes may share the database.
    """
    import uvicorn

    from plait.http.app import create_app

    user_app = load_app(app_ref)
    engine = Engine(user_app, database, workers=True)
    if no_auth and not _is_loopback(host):
        log.warning("serving %s without authentication: anyone who reaches it can act", host)
    asgi = create_app(engine, no_auth=no_auth)
    uvicorn.run(asgi, host=host, port=port, log_level=log_level)
