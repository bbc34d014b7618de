"""plait over HTTP: a JSON API, a live dashboard and an OpenAPI document in one ASGI app.

Mount it in your own app, or run it with ``plait serve APP``::

    from plait.http import create_app

    web = create_app(engine, tokens={"s3cret": "alice"})

Needs the ``http`` extra (Starlette and uvicorn). ``docs/security.md`` says who may do
what, and what to put in front of a server on a network.
"""

from plait.errors import extra_needed

with extra_needed("http", "plait.http (the API and dashboard)"):
    import starlette  # noqa: F401  # pyright: ignore[reportUnusedImport]
    import uvicorn  # noqa: F401  # pyright: ignore[reportUnusedImport]

from plait.http.app import create_app
from plait.http.auth import parse_tokens
from plait.http.principal import SCOPES, Principal
from plait.http.server import Server, make_server, serve
from plait.loading import load_app

__all__ = [
    "SCOPES",
    "Principal",
    "Server",
    "create_app",
    "load_app",
    "make_server",
    "parse_tokens",
    "serve",
]
