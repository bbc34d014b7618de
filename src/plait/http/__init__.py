"""plait over HTTP: a JSON API, a live dashboard and an OpenAPI document in one ASGI app.

Mount it in your own app, or run it with ``plait serve APP``::

    from plait.http import create_app

    web = create_app(engine, tokens={"s3cret": "alice"})

Needs the ``http`` extra (Starlette and uvicorn).
"""

from plait.http.app import create_app
from plait.http.auth import Principal, parse_tokens
from plait.http.server import serve
from plait.loading import load_app

__all__ = ["Principal", "create_app", "load_app", "parse_tokens", "serve"]
