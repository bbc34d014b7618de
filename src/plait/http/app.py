"""``create_app``: the JSON API, the OpenAPI document and the dashboard as one ASGI app."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncGenerator, Iterable

from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Mount, Route

from plait.engine import Engine
from plait.http.api import Api
from plait.http.auth import Authenticate, Authenticator, Tokens
from plait.http.dashboard import dashboard_routes
from plait.http.flow import MAX_SCHEDULES_PER_USER, FlowApi
from plait.http.guard import MAX_BODY, Guard
from plait.http.lifecycle import Lifecycle
from plait.http.openapi import openapi_document
from plait.http.problems import (
    ApiError,
    handle_api_error,
    handle_http_exception,
    handle_unexpected,
)
from plait.http.sessions import SESSION_SECONDS, Sessions
from plait.http.signin import SignInRoutes
from plait.http.sse import MAX_STREAMS, StreamLimits

log = logging.getLogger("plait.http")

#: the Prometheus text format (as prometheus-client names it; not imported for it)
METRICS_MEDIA_TYPE = "text/plain; version=0.0.4; charset=utf-8"


def create_app(
    engine: Engine,
    *,
    tokens: Tokens | None = None,
    authenticate: Authenticate | None = None,
    no_auth: bool = False,
    max_body: int = MAX_BODY,
    allowed_hosts: Iterable[str] = (),
    session_seconds: float = SESSION_SECONDS,
    max_schedules_per_user: int = MAX_SCHEDULES_PER_USER,
    max_streams: int = MAX_STREAMS,
    max_streams_per_user: int | None = None,
) -> Starlette:
    """The plait web app for ``engine``: ``/api``, ``/openapi.json`` and the dashboard at ``/``.

    Access: ``tokens`` maps bearer token to user id or ``Principal`` (default:
    ``PLAIT_TOKENS``, written ``"alice:token1,admin:token2:graphs"``: user, token and
    optional scopes joined by ``+``); or ``authenticate(request)`` returns the user id or
    ``Principal`` (sync or async, None for "not authenticated") for apps with their own
    sign-in. The dashboard's sign-in form turns a token into a session cookie that lasts
    ``session_seconds``. ``no_auth`` turns checks off for a server on one's own machine;
    it has to be asked for, and then only requests that name this server in ``Host``
    (its own address, a loopback name, or one of ``allowed_hosts``) and come from no
    other site's page are served.

    Request bodies over ``max_body`` bytes get 413. A user owns at most
    ``max_schedules_per_user`` schedules made over HTTP (429 past it). At most
    ``max_streams`` event streams are open at once, and ``max_streams_per_user`` of one
    user (default: a quarter of ``max_streams``, at least 1); 429 past either. When run
    by an ASGI server, the app opens ``engine`` on start-up if it is not open yet and
    closes it again on shut-down; the server should call
    ``app.state.lifecycle.begin_shutdown()`` as it starts to shut down (``plait serve``
    does), so open streams and waits end at once. Mounted inside
    another app (whose lifespan does not reach mounted apps), open the engine yourself.
    """
    sessions = Sessions(session_seconds)
    auth = Authenticator(
        tokens=tokens, authenticate=authenticate, no_auth=no_auth, sessions=sessions
    )
    lifecycle = Lifecycle()
    limits = StreamLimits(max_streams, max_streams_per_user)
    api = Api(engine, auth, lifecycle, limits)
    signin = SignInRoutes(auth, sessions)
    document = openapi_document([*engine.app.workflows, *engine.app.graphs])

    async def openapi(request: Request) -> Response:
        return JSONResponse(document)

    async def metrics(request: Request) -> Response:
        # Prometheus scrapes without a token, like /openapi.json: the counts name
        # workflows and functions, never inputs, outputs or users.
        text = await engine.metrics_text()
        if text is None:
            raise HTTPException(404, "metrics are off: open the engine with metrics=True")
        return Response(text, media_type=METRICS_MEDIA_TYPE)

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncGenerator[None, None]:
        opened_here = not engine.is_open
        if opened_here:
            await engine.open()
        try:
            yield
        finally:
            lifecycle.begin_shutdown()
            if opened_here:
                await engine.close()
            _report_leftovers(lifecycle, engine)

    app = Starlette(
        routes=[
            Route("/openapi.json", openapi, methods=["GET"]),
            Route("/metrics", metrics, methods=["GET"]),
            Mount(
                "/api",
                routes=[
                    *signin.routes(),
                    *api.routes(),
                    # the flow routes share the API's request handling
                    *FlowApi(
                        engine,
                        api._wrap,  # pyright: ignore[reportPrivateUsage]
                        max_schedules_per_user,
                    ).routes(),
                ],
            ),
            *dashboard_routes(),
        ],
        middleware=[
            Middleware(
                Guard,
                max_body=max_body,
                no_auth=no_auth,
                allowed_hosts=allowed_hosts,
                authenticate=auth.principal,
            )
        ],
        exception_handlers={
            ApiError: handle_api_error,
            HTTPException: handle_http_exception,
            Exception: handle_unexpected,
        },
        lifespan=lifespan,
    )
    app.state.engine = engine
    app.state.lifecycle = lifecycle
    #: open event streams, in total and by user; any stream route takes a slot of it
    app.state.streams = limits
    app.state.sessions = sessions
    return app


def _report_leftovers(lifecycle: Lifecycle, engine: Engine) -> None:
    """After shut-down nothing of ours may still run: say so loudly if something does."""
    open_requests = lifecycle.leftovers()
    watched = engine.notifier.watched_runs()
    ours = [
        t.get_name()
        for t in asyncio.all_tasks()
        if not t.done() and t.get_name().startswith("plait") and t is not asyncio.current_task()
    ]
    if open_requests or watched or ours:
        log.warning(
            "shutdown left work behind: requests %s, watchers on %d runs, tasks %s",
            open_requests,
            watched,
            ours,
        )
    else:
        log.info("shutdown complete: no stream, wait, watcher or task left")
