"""The dashboard: HTML pages rendered on the server, data fetched by a little JavaScript.

Pages carry no run data themselves: the browser signs in through the JSON API
(``/api/session``, a form on every page) and only the API checks who it is, so the same
owner rules apply to the dashboard as to any other client. A token never goes in a URL: a
page asked for with ``?token=`` is sent back to itself without it, and the token is not
used. Everything the pages need ships inside the package and works offline; the
Content-Security-Policy allows nothing else.

The script is native JavaScript modules (``static/js/``, no build step), entered at
``main.js``. Their URLs carry the assets' version in the path, ``/static/js/<version>/``,
rather than in a query: a module imports its neighbours by relative URL, which keeps the
directory but drops the query, so a new version changes every module's URL at once and a
browser never mixes a cached module of an old version with a new one.
"""

from __future__ import annotations

import hashlib
import os
import re
from functools import cache
from html import escape
from importlib import resources
from os import PathLike
from string import Template
from urllib.parse import quote

from starlette.requests import Request
from starlette.responses import FileResponse, HTMLResponse, RedirectResponse, Response
from starlette.routing import BaseRoute, Mount, Route
from starlette.staticfiles import StaticFiles
from starlette.types import Scope

from plait.http.schemas import RUN_STATUSES

_PACKAGE = "plait.http"


@cache
def _template(name: str) -> Template:
    text = resources.files(_PACKAGE).joinpath("templates", name).read_text("utf-8")
    return Template(text)


@cache
def asset_version() -> str:
    """Changes whenever the shipped CSS or JavaScript changes, so browsers refetch them."""
    static = resources.files(_PACKAGE).joinpath("static")
    modules = static.joinpath("js")
    digest = hashlib.sha256()
    digest.update(static.joinpath("dashboard.css").read_bytes())
    for module in sorted(modules.iterdir(), key=lambda entry: entry.name):
        if module.name.endswith(".js"):
            digest.update(module.name.encode() + b"\0" + module.read_bytes())
    return digest.hexdigest()[:10]


class _Assets(StaticFiles):
    """The package's static files, each ``.js`` one as ``text/javascript`` whatever the
    platform's table of file types says: a browser runs a module script only when it is
    served as JavaScript (and, with ``nosniff``, a classic one too)."""

    def file_response(
        self,
        full_path: PathLike[str] | str,
        stat_result: os.stat_result,
        scope: Scope,
        status_code: int = 200,
    ) -> Response:
        response = super().file_response(full_path, stat_result, scope, status_code)
        if os.fspath(full_path).endswith(".js") and isinstance(response, FileResponse):
            response.headers["content-type"] = "text/javascript; charset=utf-8"
        return response


def _root(request: Request) -> str:
    """Where this app is mounted, so links keep working under a prefix."""
    return str(request.scope.get("root_path", "")).rstrip("/")


def render_page(request: Request, page: str, title: str, body: str) -> HTMLResponse:
    root = _root(request)
    html = _template("base.html").substitute(
        title=escape(title),
        page=page,
        root=escape(root),
        static=escape(f"{root}/static"),
        modules=escape(f"{root}/static/js/{asset_version()}"),
        asset_version=asset_version(),
        body=body,
    )
    return HTMLResponse(html, headers={"Cache-Control": "no-store"})


def _without_token(request: Request) -> Response | None:
    """A page asked for with ``?token=``: the same page without it (303), so the token
    leaves the address bar and history. Signing in is the form's job, never a link's: a
    link would sign its visitor in as whoever made it."""
    if "token" not in request.query_params:
        return None
    kept = [(k, v) for k, v in request.query_params.multi_items() if k != "token"]
    query = "&".join(f"{quote(k, safe='')}={quote(v, safe='')}" for k, v in kept)
    target = request.url.path + (f"?{query}" if query else "")
    return RedirectResponse(target, status_code=303, headers={"Cache-Control": "no-store"})


async def runs_page(request: Request) -> Response:
    if (redirect := _without_token(request)) is not None:
        return redirect
    status = request.query_params.get("status", "")
    options = "\n".join(
        f'        <option value="{s}"{" selected" if s == status else ""}>{s}</option>'
        for s in RUN_STATUSES
    )
    offset = request.query_params.get("offset", "0")
    body = _template("runs.html").substitute(
        root=escape(_root(request)),
        id=escape(request.query_params.get("id", "")[:200]),
        workflow=escape(request.query_params.get("workflow", "")),
        status_options=options,
        offset=escape(offset if offset.isdigit() else "0"),
    )
    return render_page(request, "runs", "Runs", body)


async def run_page(request: Request) -> Response:
    if (redirect := _without_token(request)) is not None:
        return redirect
    run_id = request.path_params["run_id"]
    body = _template("run.html").substitute(
        root=escape(_root(request)),
        run_id=escape(run_id),
        run_id_short=escape(short_id(run_id)),
    )
    return render_page(request, "run", f"Run {short_id(run_id)}", body)


_UUID = re.compile(r"^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$", re.I)


def short_id(run_id: str) -> str:
    """What a page shows of a run id: a UUIDv7 starts with its time, which changes only
    every minute or so (runs of one minute would all read alike), so its random end;
    any other id whole, or its start and end when long. Keep in step with ``shortId``
    in static/js/format.js."""
    if _UUID.match(run_id):
        return run_id[-8:]
    if len(run_id) <= 16:
        return run_id
    return f"{run_id[:6]}…{run_id[-6:]}"


async def schedules_page(request: Request) -> Response:
    """Schedules (next tick, last run, pause/resume/trigger) and queue depths."""
    if (redirect := _without_token(request)) is not None:
        return redirect
    body = _template("schedules.html").substitute(root=escape(_root(request)))
    return render_page(request, "schedules", "Schedules", body)


def dashboard_routes() -> list[BaseRoute]:
    static_dir = resources.files(_PACKAGE).joinpath("static")
    return [
        Route("/", runs_page, methods=["GET"]),
        Route("/runs/{run_id}", run_page, methods=["GET"]),
        Route("/schedules", schedules_page, methods=["GET"]),
        # the modules under any version (a page loaded before an upgrade gets today's):
        # the version in the path is only there to change the URL
        Mount("/static/js/{version}", _Assets(directory=str(static_dir.joinpath("js")))),
        Mount("/static", _Assets(directory=str(static_dir)), name="static"),
    ]
