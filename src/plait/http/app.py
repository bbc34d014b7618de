"""``create_app``: the JSON API, the OpenAPI document and the dashboard as one ASGI app."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Mapping

from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Mount, Route

from plait.engine import Engine
from plait.http.api import Api
from plait.http.auth import Authenticate, Authenticator
from plait.http.dashboard import dashboard_routes
from plait.http.flow import FlowApi
from plait.http.openapi import openapi_document
from plait.http.problems import ApiError, handle_api_error, handle_http_exception


def create_app(
    engine: Engine,
    *,
    tokens: Mapping[str, str] | None = None,
    authenticate: Authenticate | None = None,
    no_auth: bool = False,
) -> Starlette:
    """The plait web app for ``engine``: ``/api``, ``/openapi.json`` and the dashboard at ``/``.

    Access: ``tokens`` maps bearer token to user id (default: ``PLAIT_TOKENS``, written
    ``"alice:token1,bob:token2"``); or ``authenticate(request)`` returns the user id (sync
    or async, None for "not authenticated") for apps with their own sign-in. ``no_auth``
    turns checks off for a server on one's own machine; it has to be asked for.

    When run by an ASGI server, the app opens ``engine`` on start-up if it is not open yet
    and closes it again on shut-down. Mounted inside another app (whose lifespan does not
    reach mounted apps), open the engine yourself.
    """
    auth = Authenticator(tokens=tokens, authenticate=authenticate, no_auth=no_auth)
    api = Api(engine, auth)
    document = openapi_document()

    async def openapi(request: Request) -> Response:
        return JSONResponse(document)

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        opened_here = not engine.is_open
        if opened_here:
            await engine.open()
        try:
            yield
        finally:
            if opened_here:
                await engine.close()

    app = Starlette(
        routes=[
            Route("/openapi.json", openapi, methods=["GET"]),
            Mount("/api", routes=[*api.routes(), *FlowApi(engine, api._wrap).routes()]),
            *dashboard_routes(),
        ],
        exception_handlers={ApiError: handle_api_error, HTTPException: handle_http_exception},
        lifespan=lifespan,
    )
    app.state.engine = engine
    return app
