"""The JSON API under ``/api``: thin handlers that authenticate, check ownership, call one
engine method and shape its records as JSON.

Routes are bound methods of ``Api`` (not module functions reading global state) so several
apps with different engines can live in one process, e.g. in tests.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from datetime import datetime
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from plait import tags as tag_rules
from plait.context import check_stream_name
from plait.engine import Engine
from plait.errors import REQUEST_TIMEOUT, RequestRefused, RunIdTakenError
from plait.http import graphview
from plait.http.auth import Authenticator, Principal
from plait.http.brakes import Brakes
from plait.http.guard import require_json
from plait.http.lifecycle import Ended, Lifecycle
from plait.http.operating import Operating
from plait.http.problems import ApiError, bad_input, from_plait, invalid, validate
from plait.http.schemas import (
    RegisterGraph,
    SendRequest,
    StartRun,
    event_dedup,
    json_body,
    path_name,
    runs_query,
    tags_query,
)
from plait.http.sse import StreamLimits, stream_entries, stream_run
from plait.records import Run, WaitingOn

Handler = Callable[[Request], Awaitable[Response]]

#: the fields of a start an engine error may name, most specific first
START_FIELDS = (
    "start_node",
    "start_at",
    "queue",
    "priority",
    "dedup_policy",
    "dedup",
    "debounce_key",
    "debounce_max",
    "debounce",
    "delay",
    "key",
    "timeout",
    "run_id",
)

#: ``wait`` without a ``wait_timeout`` still gives up (202, run still going) after this long, so
#: an abandoned request cannot hold a server task for ever
MAX_WAIT_SECONDS = 300.0


class Api:
    """The ``/api`` routes for one engine; every route authenticates before anything else,
    so an anonymous caller learns nothing (not even whether a run exists)."""

    def __init__(
        self,
        engine: Engine,
        auth: Authenticator,
        lifecycle: Lifecycle,
        streams: StreamLimits | None = None,
    ) -> None:
        self.engine = engine
        self.auth = auth
        self.lifecycle = lifecycle
        self.streams = streams if streams is not None else StreamLimits()

    def routes(self) -> list[Route]:
        return [
            Route("/me", self._wrap(self.me), methods=["GET"]),
            Route("/workflows", self._wrap(self.list_workflows), methods=["GET"]),
            Route("/workflows/{name}/runs", self._wrap(self.start_run), methods=["POST"]),
            Route("/runs", self._wrap(self.list_runs), methods=["GET"]),
            Route("/runs/{run_id}", self._wrap(self.get_run), methods=["GET"]),
            Route("/runs/{run_id}/history", self._wrap(self.get_history), methods=["GET"]),
            Route("/runs/{run_id}/graph", self._wrap(self.get_graph), methods=["GET"]),
            Route("/runs/{run_id}/stream", self._wrap(self.stream), methods=["GET"]),
            Route(
                "/runs/{run_id}/streams/{name:path}",  # a stream name may hold a "/"
                self._wrap(self.stream_entries),
                methods=["GET"],
            ),
            Route("/runs/{run_id}/cancel", self._wrap(self.cancel), methods=["POST"]),
            Route("/runs/{run_id}/resume", self._wrap(self.resume), methods=["POST"]),
            Route("/runs/{run_id}/retry", self._wrap(self.retry), methods=["POST"]),
            Route("/runs/{run_id}/events/{name}", self._wrap(self.send_event), methods=["POST"]),
            Route(
                "/runs/{run_id}/requests/{name}", self._wrap(self.send_request), methods=["POST"]
            ),
            Route("/graphs", self._wrap(self.list_graphs), methods=["GET"]),
            Route("/graphs", self._wrap(self.register_graph), methods=["POST"]),
            *Operating(self.engine).routes(self._wrap),
            *Brakes(self.engine).routes(self._wrap),
        ]

    def _wrap(self, handler: Callable[[Request, Principal], Awaitable[Response]]) -> Handler:
        """Authenticate first (401 before any other check), then require JSON of a request
        that changes something (415), then turn engine exceptions into their status
        codes."""

        async def endpoint(request: Request) -> Response:
            principal = await self.auth.principal(request)
            require_json(request)
            try:
                return await handler(request, principal)
            except ApiError:
                raise
            except Exception as exc:
                mapped = from_plait(exc)
                if mapped is None:
                    raise
                raise mapped from None

        endpoint.__name__ = handler.__name__
        endpoint.__doc__ = handler.__doc__
        return endpoint

    # -- helpers --------------------------------------------------------------------------
    async def _readable_run(self, request: Request, principal: Principal) -> Run:
        run = await self.engine.get_run(request.path_params["run_id"])
        principal.require_access(run)
        return run

    async def _run_with_steps(self, run: Run, principal: Principal) -> dict[str, Any]:
        steps = await self.engine.get_steps(run.id)
        children = await self.engine.get_children(run.id)
        data = run.to_dict()
        data["steps"] = [s.to_dict() for s in steps]
        data["children"] = [_summary(child) for child in children if principal.may_access(child)]
        data["values"] = await self.engine.get_values(run.id)
        data["streams"] = await self.engine.stream_names(run.id)
        data["decisions"] = [d.to_dict() for d in await self.engine.get_decisions(run.id)]
        data["waiting_on"] = _waiting(await self.engine.waiting_on(run))
        return data

    # -- routes ---------------------------------------------------------------------------
    async def me(self, request: Request, principal: Principal) -> Response:
        """Who the caller is and which scopes it holds."""
        return JSONResponse(principal.to_dict())

    async def list_workflows(self, request: Request, principal: Principal) -> Response:
        """Names a run can be started with: code workflows, the app's graphs and graphs
        registered at run time as active."""
        app = self.engine.app
        graphs = set(app.graphs)
        graphs.update(entry["workflow"] for entry in await self.engine.list_graphs("active"))
        items = [{"name": name, "kind": "workflow"} for name in sorted(app.workflows)]
        items += [{"name": name, "kind": "graph"} for name in sorted(graphs - set(app.workflows))]
        return JSONResponse({"workflows": items})

    async def start_run(self, request: Request, principal: Principal) -> Response:
        """Start a run owned by the caller; with ``wait``, answer with the settled run."""
        name = request.path_params["name"]
        body: StartRun = validate(StartRun, await json_body(request, empty={}))
        try:
            tags = tag_rules.check(body.tags, "tags")
        except ValueError as exc:
            raise bad_input(exc, "tags") from None
        try:
            run_id = await self.engine.start(
                name,
                body.input,
                run_id=body.run_id,
                owner=principal.user,
                start_node=body.start_node,
                queue=body.queue,
                key=body.key,
                priority=body.priority,
                dedup=body.dedup,
                delay=body.delay,
                start_at=body.start_at,
                timeout=body.timeout,
                tags=tags,
                dedup_policy=body.dedup_policy,
                debounce=body.debounce,
                debounce_key=body.debounce_key,
                debounce_max=body.debounce_max,
            )
        except RunIdTakenError as exc:
            # the id answers only to the owner of the run that holds it
            principal.require_access(await self.engine.get_run(exc.run_id))
            raise ApiError(409, "RUN_ID_TAKEN", str(exc)) from None
        except (TypeError, ValueError) as exc:
            mapped = from_plait(exc)
            if mapped is not None:
                raise mapped from None
            raise bad_input(exc, field_named(exc, START_FIELDS, "input")) from None
        run = await self.engine.get_run(run_id)
        if not principal.may_access(run):
            # the start found a live run of another user instead of making one: by its
            # run id (an idempotency key) or by its dedup key. Either answers only to its
            # owner: 403, with nothing of that run (not even the id a dedup key found),
            # and nobody waits on it.
            if run_id == body.run_id:
                principal.require_access(run)
            raise ApiError(403, "FORBIDDEN", "the dedup key is held by a run of another user")
        if body.dedup_policy == "replace" and run.owner != principal.user:
            # a replace ends only the caller's own run (the engine left this one as it is)
            raise ApiError(
                409,
                "DEDUP_KEY_HELD",
                f"the dedup key is held by run {run_id}, which is not the caller's: "
                "a replace cancels only the caller's own runs",
            )
        if not body.wait:
            return JSONResponse({"run_id": run_id}, status_code=201)
        wait = self.engine.wait(run_id, timeout=body.wait_timeout or MAX_WAIT_SECONDS)
        try:
            settled = await self.lifecycle.watch(wait, request.receive, "waits")
        except TimeoutError:
            settled = None  # the wait ran out
        if settled is Ended.DISCONNECTED:
            return Response(status_code=202)  # nobody is left to read it
        if settled is None or settled is Ended.SHUTDOWN:
            # the wait ran out or the server is stopping: the run goes on, 202 says so
            run = await self.engine.get_run(run_id)
            return JSONResponse(await self._run_with_steps(run, principal), status_code=202)
        return JSONResponse(await self._run_with_steps(settled, principal), status_code=200)

    async def list_runs(self, request: Request, principal: Principal) -> Response:
        """Newest first, only runs the caller may read, with the total for paging. Each
        run is a summary: a page costs the same whatever the runs' inputs and outputs.
        Filters: workflow, status, a part of the id, a time range, top-level runs only or
        the children of one run, runs that continued as new left out, a queue, and tags
        (``tag=key:value``, repeatable: runs that carry every one). Each live run says
        what it waits on (``waiting_on``, as ``plait runs list``); with ``counts=true``,
        ``counts`` holds how many runs the filters match in each status (the status
        filter left out), so a list can show them beside its page."""
        query = runs_query(request)
        tags = tags_query(request)
        filters: dict[str, Any] = {
            "workflow": query.workflow,
            "status": query.status,
            "visible_to": principal.visible_to,
            "visible_schedule_runs": principal.has_scope("schedules"),
            "id_contains": query.id,
            "created_after": query.since,
            "created_before": query.until,
            "top_level": bool(query.top_level),
            "hide_continued": bool(query.hide_continued),
            "parent_run_id": query.parent,
            "queue": query.queue,
            "tags": tags,
        }
        try:
            runs, total = await self.engine.run_summaries(
                **filters, limit=query.limit, offset=query.offset
            )
            counts = (
                await self.engine.status_counts(
                    **{k: v for k, v in filters.items() if k != "status"}
                )
                if query.counts
                else None
            )
        except ValueError as exc:
            raise invalid([{"field": "query", "message": str(exc)}], "query string") from None
        waiting = await self.engine.waiting_on_runs(runs)
        listed: dict[str, Any] = {
            "runs": [{**r.to_dict(), "waiting_on": _waiting(waiting.get(r.id))} for r in runs],
            "total": total,
            "limit": query.limit,
            "offset": query.offset,
        }
        if counts is not None:
            listed["counts"] = counts
        return JSONResponse(listed)

    async def get_run(self, request: Request, principal: Principal) -> Response:
        """The run with its steps (first-reached order) and its child runs."""
        run = await self._readable_run(request, principal)
        return JSONResponse(await self._run_with_steps(run, principal))

    async def get_history(self, request: Request, principal: Principal) -> Response:
        """Every attempt of every step, oldest first."""
        run = await self._readable_run(request, principal)
        history = await self.engine.get_history(run.id)
        return JSONResponse({"run_id": run.id, "attempts": [a.to_dict() for a in history]})

    async def get_graph(self, request: Request, principal: Principal) -> Response:
        """The run drawn as a graph (SVG plus the laid-out nodes and edges)."""
        run = await self._readable_run(request, principal)
        steps = await self.engine.get_steps(run.id)
        history = await self.engine.get_history(run.id)
        definition = await _graph_definition(self.engine, run) if run.kind == "graph" else None
        view = graphview.draw_run(run, steps, history, definition)
        return JSONResponse(view)

    async def stream(self, request: Request, principal: Principal) -> Response:
        """Server-sent events with the run and its steps until it ends or suspends: the
        whole run first, then only what changed. 429 past the limits on open streams."""
        run = await self._readable_run(request, principal)
        slot = self.streams.take(principal.user)
        return stream_run(
            self.engine,
            run.id,
            lambda r: self._run_with_steps(r, principal),
            self.lifecycle,
            slot,
        )

    async def stream_entries(self, request: Request, principal: Principal) -> Response:
        """Server-sent events with the entries of one of the run's streams as they
        commit, until its end; ``id`` is each entry's offset. A client that comes back
        with ``Last-Event-ID`` (or ``?after=``) goes on after that offset;
        ``?settled_only=true`` leaves out the entries of attempts that did not succeed."""
        run = await self._readable_run(request, principal)
        name = request.path_params["name"]
        try:
            check_stream_name(name)
        except ValueError as exc:
            raise ApiError(
                422, "INVALID_REQUEST", str(exc), problems=[{"field": "name", "message": str(exc)}]
            ) from None
        after = _offset(request.headers.get("last-event-id"), "Last-Event-ID")
        if after is None:
            after = _offset(request.query_params.get("after"), "after")
        settled = _settled_only(request.query_params.get("settled_only"))
        slot = self.streams.take(principal.user)  # 429 past the limits on open streams
        return stream_entries(
            self.engine, run.id, name, -1 if after is None else after, settled, self.lifecycle, slot
        )

    async def cancel(self, request: Request, principal: Principal) -> Response:
        run = await self._readable_run(request, principal)
        return await self._act(run, "cancel")

    async def resume(self, request: Request, principal: Principal) -> Response:
        run = await self._readable_run(request, principal)
        return await self._act(run, "resume")

    async def retry(self, request: Request, principal: Principal) -> Response:
        run = await self._readable_run(request, principal)
        return await self._act(run, "retry")

    async def _act(self, run: Run, action: str) -> Response:
        method: Callable[[str], Awaitable[Run | None]] = getattr(self.engine, action)
        moved = await method(run.id)
        current = moved if isinstance(moved, Run) else await self.engine.get_run(run.id)
        return JSONResponse(current.to_dict(), status_code=202)

    async def send_event(self, request: Request, principal: Principal) -> Response:
        """Deliver an event; the body (any JSON, or nothing) is its payload, and the query
        parameter ``dedup`` its de-duplication key (the body is the payload whole, so a
        field of it could not be told from the payload's own)."""
        run = await self._readable_run(request, principal)
        name = path_name(request, "event")
        dedup = event_dedup(request)
        payload = await json_body(request)
        try:
            waiting = await self.engine.send_event(run.id, name, payload, dedup=dedup)
        except (TypeError, ValueError) as exc:
            mapped = from_plait(exc)
            if mapped is not None:
                raise mapped from None
            raise bad_input(exc, "body") from None
        # "waiting": false tells the sender the event is only held (the run has not
        # reached its wait, or its wait already timed out)
        return JSONResponse({"run_id": run.id, "event": name, "waiting": waiting}, status_code=202)

    async def send_request(self, request: Request, principal: Principal) -> Response:
        """Send a request and wait for the workflow's answer: 200 with the reply. 409
        when the workflow refuses it (with its ``reason``), the run has ended, or no
        answer came within ``timeout`` (code ``REQUEST_TIMEOUT``; a request not taken by
        then is withdrawn): the run's state, not a fault of the server. 422 when its data
        does not fit the wait's schema (or the body is wrong). 503 when the server starts
        to shut down first: the wait ends at once, as every wait does then, and a request
        not taken yet is withdrawn (so is one whose client went away)."""
        run = await self._readable_run(request, principal)
        name = path_name(request, "request")
        body: SendRequest = validate(SendRequest, await json_body(request, empty={}))
        sending = self.engine.request(run.id, name, body.data, timeout=body.timeout)
        try:
            reply = await self.lifecycle.watch(sending, request.receive, "waits")
        except RequestRefused as exc:
            raise ApiError(409, exc.code, str(exc), extra={"reason": exc.reason}) from None
        except TimeoutError as exc:
            raise ApiError(409, REQUEST_TIMEOUT, str(exc)) from None
        except (TypeError, ValueError) as exc:
            mapped = from_plait(exc)
            if mapped is not None:
                raise mapped from None
            raise bad_input(exc, "data") from None
        if reply is Ended.DISCONNECTED:
            return Response(status_code=202)  # nobody is left to read it
        if reply is Ended.SHUTDOWN:
            raise ApiError(
                503,
                "SHUTTING_DOWN",
                f"the server is shutting down: request {name!r} was withdrawn unless the"
                " workflow had taken it already, and then its reply will not reach this"
                " caller: look at the run before sending it again",
            )
        return JSONResponse({"run_id": run.id, "request": name, "reply": reply})

    async def list_graphs(self, request: Request, principal: Principal) -> Response:
        """Graphs this app declares plus the versions the caller registered at run time
        (every version, with authentication off). Needs the ``graphs`` scope: a
        definition says which functions a graph calls with what."""
        principal.require_scope("graphs", "reading graph definitions")
        items: dict[tuple[str, str | None], dict[str, Any]] = {}
        for name, graph in self.engine.app.graphs.items():
            version = graph.content_hash()
            items[(name, version)] = {
                "name": name,
                "version": version,
                "status": "active",
                "source": "app",
                "definition": graph.to_dict(),
            }
        for entry in await self.engine.list_graphs():
            app_graph = (entry["workflow"], entry["version"]) in items
            mine = principal.unrestricted or entry.get("registered_by") == principal.user
            if not (app_graph or mine):
                continue  # another user's definitions are theirs to read
            data = _jsonable(entry)
            name = data.pop("workflow")
            data.pop("kind", None)
            key = (name, data.get("version"))
            source = "app" if key in items else "registered"
            items[key] = {**items.get(key, {}), **data, "name": name, "source": source}
        return JSONResponse({"graphs": list(items.values())})

    async def register_graph(self, request: Request, principal: Principal) -> Response:
        """Register (or update) a graph from JSON. Needs the ``graphs`` scope; a graph
        name belongs to the user who registered it first, and the app's own names to
        nobody (403 for everyone else)."""
        principal.require_scope("graphs", "registering graphs")
        body: RegisterGraph = validate(RegisterGraph, await json_body(request, empty={}))
        try:
            version = await self.engine.register_graph(
                body.name, body.definition, status=body.status, registered_by=principal.user
            )
        except (TypeError, ValueError) as exc:
            mapped = from_plait(exc)
            if mapped is not None:
                raise mapped from None
            raise bad_input(exc, "definition") from None
        return JSONResponse(
            {"name": body.name, "status": body.status, "version": version}, status_code=201
        )


def field_named(exc: Exception, fields: tuple[str, ...], default: str) -> str:
    """The request field an engine error names (its message starts with or mentions it)."""
    text = str(exc)
    for name in fields:
        if text.startswith((name, f"invalid {name}", f"{name}=")) or f" {name} " in text:
            return name
    return default


def _waiting(why: WaitingOn | None) -> dict[str, Any] | None:
    return None if why is None else why.to_dict()


def _summary(run: Run) -> dict[str, Any]:
    return {
        "id": run.id,
        "workflow": run.workflow,
        "status": str(run.status),
        "created_at": run.created_at.isoformat(),
        "updated_at": run.updated_at.isoformat(),
    }


def _jsonable(data: dict[str, Any]) -> dict[str, Any]:
    return {k: v.isoformat() if isinstance(v, datetime) else v for k, v in data.items()}


async def _graph_definition(engine: Engine, run: Run) -> Any:
    """The graph a run follows: the exact version it started on, else the app's graph of
    that name."""
    graph = await engine.graph_for(run.workflow, run.version)
    return graph if graph is not None else engine.app.graphs.get(run.workflow)


__all__ = ["Api"]


#: the largest stream offset (the stores count a stream's entries in 32 bits)
MAX_OFFSET = 2**31 - 1


def _settled_only(text: str | None) -> bool:
    """``?settled_only=``: true or false (also 1 or 0); anything else is a 422 naming it,
    since a caller who asked for settled entries and got every entry would show output
    that is later taken back."""
    if text is None or text in ("false", "0"):
        return False
    if text in ("true", "1"):
        return True
    message = f"settled_only must be true or false, got {text[:40]!r}"
    raise ApiError(
        422, "INVALID_REQUEST", message, problems=[{"field": "settled_only", "message": message}]
    )


def _offset(text: str | None, field: str) -> int | None:
    """A stream offset a client sent (``Last-Event-ID``, ``?after=``): an int from -1 to
    ``MAX_OFFSET``, in plain digits (Python's ``int`` would take ``1_0`` and `` +0 ``)."""
    if text is None or text == "":
        return None
    digits = text[1:] if text.startswith("-") else text
    value = int(text) if digits.isascii() and digits.isdigit() else -2
    if not -1 <= value <= MAX_OFFSET:
        message = (
            f"{field} must be a stream offset (an integer from -1 to {MAX_OFFSET}), "
            f"got {text[:40]!r}"
        )
        raise ApiError(
            422, "INVALID_REQUEST", message, problems=[{"field": field, "message": message}]
        )
    return value
