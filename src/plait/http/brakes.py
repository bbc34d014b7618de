"""Routes for brakes and workers: pausing and resuming a workflow or a queue for every
process (the ``admin`` scope), what is paused, and the worker registry.

A brake stops work that belongs to every user, so it needs the ``admin`` scope (403
without it). ``GET /api/paused`` and ``GET /api/workers`` are open to any authenticated
caller: what is paused explains why one's own runs wait, and a worker's record (id,
host, pid, app, version, queues, workflows, started, last seen) carries no run data
(docs/security.md).
"""

from __future__ import annotations

import re
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from plait.engine import Engine
from plait.http.auth import Principal
from plait.http.problems import invalid
from plait.http.schemas import NAME_PATTERN

_NAME = re.compile(NAME_PATTERN)


def _name(request: Request, what: str) -> str:
    """The ``{name}`` of the path if a workflow or queue can have it; else 422."""
    name: str = request.path_params["name"]
    if _NAME.fullmatch(name) is None:
        raise invalid([{"field": "name", "message": f"not a {what} name"}], "path")
    return name


class Brakes:
    """Handlers; ``Api`` authenticates and maps engine errors around each of them."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine

    def routes(self, wrap: Any) -> list[Route]:
        return [
            Route("/workflows/{name}/pause", wrap(self.pause_workflow), methods=["POST"]),
            Route("/workflows/{name}/resume", wrap(self.resume_workflow), methods=["POST"]),
            Route("/queues/{name}/pause", wrap(self.pause_queue), methods=["POST"]),
            Route("/queues/{name}/resume", wrap(self.resume_queue), methods=["POST"]),
            Route("/paused", wrap(self.list_paused), methods=["GET"]),
            Route("/workers", wrap(self.list_workers), methods=["GET"]),
        ]

    async def pause_workflow(self, request: Request, principal: Principal) -> Response:
        """Pause a workflow for every process (``admin``)."""
        name = _name(request, "workflow")
        principal.require_scope("admin", "pausing a workflow")
        moved = await self.engine.pause_workflow(name)
        return JSONResponse({"kind": "workflow", "name": name, "paused": len(moved)})

    async def resume_workflow(self, request: Request, principal: Principal) -> Response:
        """Resume a paused workflow (``admin``)."""
        name = _name(request, "workflow")
        principal.require_scope("admin", "resuming a workflow")
        moved = await self.engine.resume_workflow(name)
        return JSONResponse({"kind": "workflow", "name": name, "resumed": len(moved)})

    async def pause_queue(self, request: Request, principal: Principal) -> Response:
        """Pause a queue for every process (``admin``)."""
        name = _name(request, "queue")
        principal.require_scope("admin", "pausing a queue")
        moved = await self.engine.pause_queue(name)
        return JSONResponse({"kind": "queue", "name": name, "paused": len(moved)})

    async def resume_queue(self, request: Request, principal: Principal) -> Response:
        """Resume a paused queue (``admin``)."""
        name = _name(request, "queue")
        principal.require_scope("admin", "resuming a queue")
        moved = await self.engine.resume_queue(name)
        return JSONResponse({"kind": "queue", "name": name, "resumed": len(moved)})

    async def list_paused(self, request: Request, principal: Principal) -> Response:
        """The paused workflows and queues."""
        return JSONResponse({"paused": await self.engine.list_paused()})

    async def list_workers(self, request: Request, principal: Principal) -> Response:
        """Live and recently seen workers."""
        workers = [worker.to_dict() for worker in await self.engine.list_workers()]
        return JSONResponse({"workers": workers})


def openapi_paths(json: Any, errors: Any) -> dict[str, dict[str, Any]]:
    """These routes in the OpenAPI document (given the document's own helpers)."""
    name = {"name": "name", "in": "path", "required": True, "schema": {"type": "string"}}
    paths: dict[str, dict[str, Any]] = {}
    for kind in ("workflows", "queues"):
        for action in ("pause", "resume"):
            paths[f"/api/{kind}/{{name}}/{action}"] = {
                "post": {
                    "summary": f"{action.title()} a {kind[:-1]} for every process (admin)",
                    "parameters": [name],
                    "responses": {
                        "200": json({"type": "object"}, "how many runs it moved at once"),
                        **errors(401, 403, 404, 415, 422),
                    },
                }
            }
    paths["/api/paused"] = {
        "get": {
            "summary": "The paused workflows and queues",
            "responses": {"200": json({"type": "object"}, "kind, name, paused_at"), **errors(401)},
        }
    }
    paths["/api/workers"] = {
        "get": {
            "summary": "Live and recently seen workers",
            "responses": {"200": json({"type": "object"}, "the workers"), **errors(401)},
        }
    }
    return paths


__all__ = ["Brakes", "openapi_paths"]
