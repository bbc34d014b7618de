"""``plait serve``: load the user's App, open an Engine for the server's lifetime, run uvicorn."""

from __future__ import annotations

import importlib
import ipaddress
import logging
import os
import sys
from typing import Any

from plait.app import App
from plait.engine import Engine

log = logging.getLogger("plait.http")


def load_app(app_ref: str) -> App:
    """Import ``"package.module:attribute"`` (attribute may be dotted) from the current
    directory or the path, and check that it is a ``plait.App``."""
    module_name, sep, attribute = app_ref.partition(":")
    if not sep or not module_name or not attribute:
        raise ValueError(f"APP must look like 'module:attribute', got {app_ref!r}")
    if os.getcwd() not in sys.path and "" not in sys.path:
        sys.path.insert(0, os.getcwd())
    module = importlib.import_module(module_name)
    obj: Any = module
    for part in attribute.split("."):
        try:
            obj = getattr(obj, part)
        except AttributeError:
            raise ValueError(f"module {module_name!r} has no attribute {attribute!r}") from None
    if not isinstance(obj, App):
        raise TypeError(f"{app_ref} is a {type(obj).__name__}, not a plait.App")
    return obj


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
