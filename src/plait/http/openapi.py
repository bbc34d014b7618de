"""The OpenAPI 3.1 document served at ``/openapi.json``.

Written by hand (routes are few and stable) except for request bodies, whose schemas come
from the same pydantic models that validate them, so the two cannot drift apart. Every
status a route can answer with is listed, with the problem document it carries: the
fuzz test holds the server to this document.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from plait import __version__
from plait.http import brakes, operating
from plait.http.problems import PROBLEM_JSON
from plait.http.schemas import (
    MAX_OFFSET,
    MAX_PAGE,
    NAME_PATTERN,
    RUN_STATUSES,
    CreateSchedule,
    RegisterGraph,
    SendRequest,
    StartRun,
)
from plait.http.signin import SignIn
from plait.ids import RUN_ID_PATTERN

_REF = "#/components/schemas/"


def _ref(name: str) -> dict[str, str]:
    return {"$ref": _REF + name}


def _json(schema: dict[str, Any], description: str) -> dict[str, Any]:
    return {"description": description, "content": {"application/json": {"schema": schema}}}


#: every error status the API answers with, and what it means
_ERROR_TEXT = {
    400: "the server does not answer to this Host, or the request cannot apply here",
    401: "no valid bearer token or sign-in session",
    403: "not allowed: another user's run or graph, a missing scope, a foreign Origin,"
    " or a missing CSRF token",
    404: "unknown workflow, run or schedule",
    409: "the run's status does not allow this action",
    413: "the request body (or a value in it) is over the size limit",
    415: "a request that changes something must be Content-Type: application/json",
    422: "malformed request; `problems` lists every problem",
}
#: what every route may answer whatever it does
_ALWAYS = (400, 401, 403)
#: and every route that changes something
_CHANGES = (*_ALWAYS, 413, 415)


def _errors(*codes: int) -> dict[str, Any]:
    return {str(c): {"$ref": f"#/components/responses/E{c}"} for c in sorted(set(codes))}


_RUN_ID = {"name": "run_id", "in": "path", "required": True, "schema": {"type": "string"}}


def _run_action(summary: str) -> dict[str, Any]:
    return {
        "post": {
            "summary": summary,
            "parameters": [_RUN_ID],
            "responses": {
                "202": _json(_ref("Run"), "the run after the action"),
                **_errors(*_CHANGES, 404, 409),
            },
        }
    }


def _object(**properties: Any) -> dict[str, Any]:
    return {"type": "object", "properties": properties, "required": sorted(properties)}


def _with_optional(schema: dict[str, Any], **properties: Any) -> dict[str, Any]:
    """``schema`` (an ``_object``) with more properties that are not always there."""
    return {**schema, "properties": {**schema["properties"], **properties}}


def openapi_document(workflows: Sequence[str] = ()) -> dict[str, Any]:
    """The API description served at /openapi.json; ``workflows`` (names a run can be
    started with) are given as examples of the start route's ``name``."""
    name_param: dict[str, Any] = {
        "name": "name",
        "in": "path",
        "required": True,
        "schema": {"type": "string"},
    }
    if workflows:
        name_param["examples"] = {name: {"value": name} for name in workflows}
    session = _object(
        user={"type": ["string", "null"]},
        auth={"type": "boolean"},
        scopes={"type": "array", "items": {"type": "string"}},
        session={"type": "boolean", "description": "signed in by a session cookie"},
    )
    session["properties"]["csrf_token"] = {
        "type": "string",
        "description": "send it as X-CSRF-Token with every request that changes something",
    }
    session["properties"]["expires_at"] = {"type": "number", "description": "unix seconds"}
    doc: dict[str, Any] = {
        "openapi": "3.1.0",
        "info": {
            "title": "plait",
            "version": __version__,
            "description": "Start, watch and steer durable workflow runs. Send "
            "`Authorization: Bearer <token>` unless the server runs with --no-auth. Requests "
            "that change something need `Content-Type: application/json`; errors are "
            "`application/problem+json`.",
        },
        "servers": [{"url": "/"}],
        "security": [{"bearer": []}],
        "paths": {
            "/api/session": {
                "get": {
                    "summary": "Who this browser (or token) is signed in as",
                    "responses": {"200": _json(session, "signed in"), **_errors(*_ALWAYS)},
                },
                "post": {
                    "summary": "Sign in with a token: sets an HttpOnly session cookie",
                    "security": [],
                    "requestBody": {
                        "required": True,
                        "content": {"application/json": {"schema": _ref("SignIn")}},
                    },
                    "responses": {
                        "201": _json(session, "signed in; the cookie is set"),
                        **_errors(*_CHANGES, 422),
                    },
                },
                "delete": {
                    "summary": "Sign out: the session ends and its cookie is cleared",
                    "security": [],
                    "responses": {"204": {"description": "signed out"}, **_errors(*_CHANGES)},
                },
            },
            "/api/me": {
                "get": {
                    "summary": "The caller's user id and scopes",
                    "responses": {
                        "200": _json(
                            _object(
                                user={"type": ["string", "null"]},
                                auth={"type": "boolean"},
                                scopes={"type": "array", "items": {"type": "string"}},
                            ),
                            "who you are",
                        ),
                        **_errors(*_ALWAYS),
                    },
                }
            },
            "/api/workflows": {
                "get": {
                    "summary": "Workflows and graphs a run can be started with",
                    "responses": {
                        "200": _json(
                            _object(
                                workflows={
                                    "type": "array",
                                    "items": _object(
                                        name={"type": "string"},
                                        kind={"enum": ["workflow", "graph"]},
                                    ),
                                }
                            ),
                            "registered names",
                        ),
                        **_errors(*_ALWAYS),
                    },
                }
            },
            "/api/workflows/{name}/runs": {
                "post": {
                    "summary": "Start a run (optionally wait for it to settle)",
                    "parameters": [name_param],
                    "requestBody": {
                        "required": False,
                        "content": {"application/json": {"schema": _ref("StartRun")}},
                    },
                    "responses": {
                        "201": _json(
                            _object(run_id={"type": "string"}),
                            "the run was created (or already existed with this run_id)",
                        ),
                        "200": _json(_ref("RunWithSteps"), "with `wait`: the settled run"),
                        "202": _json(
                            _ref("RunWithSteps"),
                            "with `wait`: still going after `wait_timeout` (default 300 s), or"
                            " the server is shutting down",
                        ),
                        **_errors(*_CHANGES, 404, 409, 422),
                    },
                }
            },
            "/api/runs": {
                "get": {
                    "summary": "Runs the caller may read, newest first, as summaries",
                    "parameters": [
                        {
                            "name": "workflow",
                            "in": "query",
                            "schema": {"type": "string", "pattern": NAME_PATTERN},
                        },
                        {"name": "status", "in": "query", "schema": {"enum": list(RUN_STATUSES)}},
                        {
                            "name": "limit",
                            "in": "query",
                            "schema": {
                                "type": "integer",
                                "minimum": 1,
                                "maximum": MAX_PAGE,
                                "default": 50,
                            },
                        },
                        {
                            "name": "offset",
                            "in": "query",
                            "schema": {
                                "type": "integer",
                                "minimum": 0,
                                "maximum": MAX_OFFSET,
                                "default": 0,
                            },
                        },
                        {
                            "name": "id",
                            "in": "query",
                            "description": "runs whose id holds this text, in any case",
                            "schema": {"type": "string", "pattern": NAME_PATTERN},
                        },
                        {
                            "name": "since",
                            "in": "query",
                            "description": "runs started at or after this time (ISO 8601;"
                            " without a zone, UTC)",
                            "schema": {"type": "string", "format": "date-time"},
                        },
                        {
                            "name": "until",
                            "in": "query",
                            "description": "runs started before this time (ISO 8601)",
                            "schema": {"type": "string", "format": "date-time"},
                        },
                        {
                            "name": "top_level",
                            "in": "query",
                            "description": "only runs that are no other run's child",
                            "schema": {"type": "boolean"},
                        },
                        {
                            "name": "hide_continued",
                            "in": "query",
                            "description": "leave out runs that continued as new (of each"
                            " chain, its last run only)",
                            "schema": {"type": "boolean"},
                        },
                        {
                            "name": "counts",
                            "in": "query",
                            "description": "with true, counts: how many runs the other"
                            " filters match in each status",
                            "schema": {"type": "boolean"},
                        },
                        {
                            "name": "parent",
                            "in": "query",
                            "description": "only the children of this run",
                            "schema": {"type": "string", "pattern": f"^{RUN_ID_PATTERN}$"},
                        },
                        {
                            "name": "queue",
                            "in": "query",
                            "description": "only runs of this queue",
                            "schema": {"type": "string"},
                        },
                        {
                            "name": "tag",
                            "in": "query",
                            "description": "only runs with this tag, as key:value (repeat"
                            " it: runs with every one)",
                            "schema": {"type": "array", "items": {"type": "string"}},
                            "style": "form",
                            "explode": True,
                        },
                    ],
                    "responses": {
                        "200": _json(
                            _with_optional(
                                _object(
                                    runs={"type": "array", "items": _ref("RunSummary")},
                                    total={"type": "integer"},
                                    limit={"type": "integer"},
                                    offset={"type": "integer"},
                                ),
                                # with counts=true: runs per status, the status filter
                                # left out
                                counts={
                                    "type": "object",
                                    "additionalProperties": {"type": "integer"},
                                },
                            ),
                            "one page of runs and the total that match",
                        ),
                        **_errors(*_ALWAYS, 422),
                    },
                }
            },
            "/api/runs/{run_id}": {
                "get": {
                    "summary": "A run with its steps and child runs",
                    "parameters": [_RUN_ID],
                    "responses": {
                        "200": _json(_ref("RunWithSteps"), "the run"),
                        **_errors(*_ALWAYS, 404),
                    },
                }
            },
            "/api/runs/{run_id}/history": {
                "get": {
                    "summary": "Every attempt of every step, oldest first",
                    "parameters": [_RUN_ID],
                    "responses": {
                        "200": _json(
                            _object(
                                run_id={"type": "string"},
                                attempts={"type": "array", "items": _ref("StepAttempt")},
                            ),
                            "the attempts",
                        ),
                        **_errors(*_ALWAYS, 404),
                    },
                }
            },
            "/api/runs/{run_id}/graph": {
                "get": {
                    "summary": "The run drawn as a graph (SVG and layout)",
                    "parameters": [_RUN_ID],
                    "responses": {
                        "200": _json(
                            _object(
                                kind={"enum": ["graph", "steps"]},
                                svg={"type": "string"},
                                width={"type": "integer"},
                                height={"type": "integer"},
                                nodes={"type": "array", "items": {"type": "object"}},
                                edges={"type": "array", "items": {"type": "object"}},
                            ),
                            "the drawing",
                        ),
                        **_errors(*_ALWAYS, 404),
                    },
                }
            },
            "/api/runs/{run_id}/stream": {
                "get": {
                    "summary": "Server-sent events until the run ends or suspends",
                    "description": "`event: run` carries the run with its steps (as GET "
                    "/api/runs/{run_id}) whenever it changes; `event: end` carries "
                    "`{run_id, status}` and closes the stream. When the server shuts down, "
                    "`event: close` carries `{run_id, reason}` and closes it too.",
                    "parameters": [_RUN_ID],
                    "responses": {
                        "200": {
                            "description": "an event stream; the schema is that of one event,"
                            " whose `data` is JSON text",
                            "content": {
                                "text/event-stream": {
                                    "schema": {
                                        "type": "object",
                                        "properties": {
                                            "event": {"enum": ["run", "end", "close"]},
                                            "id": {"type": "string"},
                                            "data": {"type": "string"},
                                        },
                                        "required": ["event", "data"],
                                    }
                                }
                            },
                        },
                        **_errors(*_ALWAYS, 404),
                    },
                }
            },
            "/api/runs/{run_id}/streams/{name}": {
                "get": {
                    "summary": "Server-sent events with the entries of one of the run's streams",
                    "description": "One event per entry as it commits, named by its kind: "
                    "`data` (a value written by the workflow, or by a step attempt), `reset` "
                    "(drop the entries of the attempt it names: it failed or was "
                    "interrupted) and `end` (the run ended; the stream closes). `id` is the "
                    "entry's offset: a client that reconnects with `Last-Event-ID` (or "
                    "`?after=`) goes on after it. `data` is the entry (offset, kind, value, "
                    "attempt, at, step). When the server shuts down, `event: close` closes "
                    "it.",
                    "parameters": [
                        _RUN_ID,
                        {
                            "name": "name",
                            "in": "path",
                            "required": True,
                            "schema": {"type": "string", "minLength": 1, "maxLength": 200},
                        },
                        {
                            "name": "after",
                            "in": "query",
                            "required": False,
                            "description": "the offset to go on after (Last-Event-ID wins)",
                            "schema": {"type": "integer", "minimum": -1, "maximum": 2**31 - 1},
                        },
                        {
                            "name": "settled_only",
                            "in": "query",
                            "required": False,
                            "description": "only the entries of attempts that succeeded "
                            "(each once its attempt succeeded), no resets",
                            "schema": {"type": "boolean"},
                        },
                        {
                            "name": "Last-Event-ID",
                            "in": "header",
                            "required": False,
                            "schema": {"type": "string"},
                        },
                    ],
                    "responses": {
                        "200": {
                            "description": "an event stream; the schema is that of one event,"
                            " whose `data` is JSON text",
                            "content": {
                                "text/event-stream": {
                                    "schema": {
                                        "type": "object",
                                        "properties": {
                                            "event": {"enum": ["data", "reset", "end", "close"]},
                                            "id": {"type": "string"},
                                            "data": {"type": "string"},
                                        },
                                        "required": ["event", "data"],
                                    }
                                }
                            },
                        },
                        **_errors(*_ALWAYS, 404, 422),
                    },
                }
            },
            "/api/runs/{run_id}/cancel": _run_action("Cancel a run and its child runs"),
            "/api/runs/{run_id}/resume": _run_action("Resume a suspended run"),
            "/api/runs/{run_id}/retry": _run_action(
                "Retry a failed run from the failed step, or a needs_attention run from "
                "its parked step (a new retry budget)"
            ),
            "/api/runs/{run_id}/events/{name}": {
                "post": {
                    "summary": "Send an event; the body (any JSON) is its payload",
                    "parameters": [
                        _RUN_ID,
                        {
                            "name": "name",
                            "in": "path",
                            "required": True,
                            "schema": {"type": "string"},
                        },
                        {
                            "name": "dedup",
                            "in": "query",
                            "required": False,
                            "description": "a de-duplication key: the run takes one event of"
                            " each key (held or consumed); a send with a key it took already"
                            " changes nothing and answers waiting: false",
                            "schema": {"type": "string", "minLength": 1, "maxLength": 512},
                        },
                    ],
                    "requestBody": {
                        "required": False,
                        "content": {"application/json": {"schema": {}}},
                    },
                    "responses": {
                        "202": _json(
                            _object(
                                run_id={"type": "string"},
                                event={"type": "string"},
                                waiting={
                                    "type": "boolean",
                                    "description": "the run waits for this event now;"
                                    " false: it is held for a later wait, which may"
                                    " never come (a wait that timed out)",
                                },
                            ),
                            "stored for the run",
                        ),
                        **_errors(*_CHANGES, 404, 409, 422),
                    },
                }
            },
            "/api/runs/{run_id}/requests/{name}": {
                "post": {
                    "summary": "Send a request and wait for the workflow's answer"
                    " (wf.wait_for_request, req.reply)",
                    "parameters": [
                        _RUN_ID,
                        {
                            "name": "name",
                            "in": "path",
                            "required": True,
                            "schema": {"type": "string"},
                        },
                    ],
                    "requestBody": {
                        "required": False,
                        "content": {"application/json": {"schema": _ref("SendRequest")}},
                    },
                    "responses": {
                        "200": _json(
                            _object(
                                run_id={"type": "string"},
                                request={"type": "string"},
                                reply={"description": "the workflow's reply (any JSON)"},
                            ),
                            "the workflow's reply",
                        ),
                        "409": {
                            "description": "the workflow refused the request (`reason`"
                            " says why), the run has ended, or no answer came within"
                            " `timeout` (code `REQUEST_TIMEOUT`; a request not taken by"
                            " then is withdrawn, so the workflow never sees it)",
                            "content": {PROBLEM_JSON: {"schema": _ref("Problem")}},
                        },
                        "503": {
                            "description": "the server began to shut down before the"
                            " answer came (code `SHUTTING_DOWN`; a request not taken by"
                            " then is withdrawn): send it again",
                            "content": {PROBLEM_JSON: {"schema": _ref("Problem")}},
                        },
                        **_errors(*_CHANGES, 404, 422),
                    },
                }
            },
            "/api/graphs": {
                "get": {
                    "summary": "Graphs of the app and the graphs the caller registered"
                    " (needs the `graphs` scope)",
                    "responses": {
                        "200": _json(
                            _object(graphs={"type": "array", "items": _ref("GraphVersion")}),
                            "the graphs",
                        ),
                        **_errors(*_ALWAYS),
                    },
                },
                "post": {
                    "summary": "Register a graph from its JSON definition (needs the `graphs`"
                    " scope; a name belongs to the user who registered it first)",
                    "requestBody": {
                        "required": True,
                        "content": {"application/json": {"schema": _ref("RegisterGraph")}},
                    },
                    "responses": {
                        "201": _json(
                            _object(
                                name={"type": "string"},
                                status={"enum": ["draft", "active"]},
                                version={"type": "string"},
                            ),
                            "registered",
                        ),
                        **_errors(*_CHANGES, 422),
                    },
                },
            },
        },
        "components": {
            "securitySchemes": {"bearer": {"type": "http", "scheme": "bearer"}},
            "responses": {
                f"E{c}": {
                    "description": desc,
                    "content": {PROBLEM_JSON: {"schema": _ref("Problem")}},
                }
                for c, desc in _ERROR_TEXT.items()
            },
            "schemas": _schemas(),
        },
    }
    doc["paths"].update(_flow_paths())
    doc["components"]["schemas"]["CreateSchedule"] = CreateSchedule.model_json_schema()
    doc["paths"].update(operating.openapi_paths(_json, _errors, _RUN_ID, _ref))
    doc["components"]["schemas"]["ForkRun"] = operating.ForkRun.model_json_schema()
    bulk = operating.BulkAction.model_json_schema(ref_template=_REF + "{model}")
    doc["components"]["schemas"].update(bulk.pop("$defs", {}))
    doc["components"]["schemas"]["BulkAction"] = bulk
    doc["paths"].update(brakes.openapi_paths(_json, _errors))
    return doc


def _schemas() -> dict[str, Any]:
    timestamp = {"type": "string", "format": "date-time"}
    maybe_timestamp = {"type": ["string", "null"], "format": "date-time"}
    error = {"type": ["object", "null"]}
    text_or_null = {"type": ["string", "null"]}
    summary = _object(
        id={"type": "string"},
        workflow={"type": "string"},
        kind={"enum": ["workflow", "graph"]},
        status={"enum": list(RUN_STATUSES)},
        version=text_or_null,
        owner=text_or_null,
        parent_run_id=text_or_null,
        created_at=timestamp,
        updated_at=timestamp,
        queue=text_or_null,
        key=text_or_null,
        priority={"type": "integer"},
        scheduled_at=maybe_timestamp,
        admitted_at=maybe_timestamp,
        start_at=maybe_timestamp,
        tags={"type": "object", "additionalProperties": {"type": "string"}},
    )
    run = _object(
        **summary["properties"],
        input={},
        output={},
        error=error,
        # a chain of runs continued as new: the run this one continues, the one that
        # continues it
        continued_from=text_or_null,
        continued_to=text_or_null,
    )
    # a summary counts the children the caller may see; a run lists them
    summary["properties"]["children"] = {"type": "integer"}
    # what a live run waits on (``Engine.waiting_on``), null while it moves or once ended
    waiting_on = {
        "type": ["object", "null"],
        "properties": {
            "kind": {"type": "string"},
            "name": {"type": "string"},
            "message": {"type": "string"},
            "until": maybe_timestamp,
        },
        "required": ["kind", "name", "message", "until"],
    }
    summary["properties"]["waiting_on"] = waiting_on
    summary["required"] = sorted(summary["properties"])
    step = _object(
        run_id={"type": "string"},
        key={"type": "string"},
        name={"type": "string"},
        kind={"type": "string"},
        function=text_or_null,
        status={"enum": ["pending", "scheduled", "running", "succeeded", "failed"]},
        input={},
        output={},
        error=error,
        attempts={"type": "integer"},
        retries={"type": "integer"},
        invocation_id={"type": "string"},
        child_run_id=text_or_null,
        created_at=timestamp,
        updated_at=timestamp,
        wake_at=maybe_timestamp,
        reached_after={"type": ["array", "null"], "items": {"type": "string"}},
        label={"type": "string"},
    )
    attempt = _object(
        run_id={"type": "string"},
        key={"type": "string"},
        attempt={"type": "integer"},
        status={"type": "string"},
        output={},
        error=error,
        started_at=timestamp,
        finished_at=maybe_timestamp,
    )
    with_steps = {
        "allOf": [
            {"$ref": _REF + "Run"},
            _object(
                steps={"type": "array", "items": {"$ref": _REF + "Step"}},
                children={"type": "array", "items": {"type": "object"}},
                waiting_on=waiting_on,
            ),
        ]
    }
    graph_version = {
        "type": "object",
        "properties": {
            "name": {"type": "string"},
            "version": {"type": "string"},
            "status": {"type": "string"},
            "source": {"enum": ["app", "registered"]},
            "definition": {"type": "object"},
            "registered_by": text_or_null,
        },
        "required": ["name", "version", "status", "source"],
    }
    problem_item = _object(field={"type": "string"}, message={"type": "string"})
    legacy = {
        "type": "object",
        "properties": {
            "status": {"type": "integer"},
            "code": {"type": "string"},
            "message": {"type": "string"},
            "problems": {"type": "array", "items": problem_item},
        },
        "required": ["status", "code", "message"],
    }
    problem = {
        "type": "object",
        "description": "An RFC 9457 problem; `code` is plait's name for it, `error` the same "
        "fields in the shape of earlier versions",
        "properties": {
            "type": {"type": "string"},
            "title": {"type": "string"},
            "status": {"type": "integer"},
            "detail": {"type": "string"},
            "code": {"type": "string"},
            "problems": {"type": "array", "items": problem_item},
            "error": legacy,
        },
        "required": ["type", "title", "status", "detail", "code", "error"],
    }
    return {
        "Run": run,
        "RunSummary": summary,
        "RunWithSteps": with_steps,
        "Step": step,
        "StepAttempt": attempt,
        "GraphVersion": graph_version,
        "Problem": problem,
        "SignIn": SignIn.model_json_schema(),
        "StartRun": StartRun.model_json_schema(),
        "SendRequest": SendRequest.model_json_schema(),
        "RegisterGraph": RegisterGraph.model_json_schema(),
    }


_NAME = {"name": "name", "in": "path", "required": True, "schema": {"type": "string"}}


def _flow_paths() -> dict[str, Any]:
    """Schedules and queues (``http/flow.py``). A schedule made over HTTP is its
    creator's: 403 for anyone else."""
    schedule = {"type": "object", "description": "plait.Schedule as JSON"}

    def action(summary: str, answer: dict[str, Any]) -> dict[str, Any]:
        return {
            "post": {
                "summary": summary,
                "parameters": [_NAME],
                # 422: a name that breaks the rule for schedule names
                "responses": {"202": answer, **_errors(*_CHANGES, 404, 422)},
            }
        }

    return {
        "/api/schedules": {
            "get": {
                "summary": "Schedules the caller may see, with next tick and last run",
                "responses": {
                    "200": _json(
                        _object(schedules={"type": "array", "items": schedule}),
                        "the schedules",
                    ),
                    **_errors(*_ALWAYS),
                },
            },
            "post": {
                "summary": "Store a schedule owned by the caller",
                "requestBody": {
                    "required": True,
                    "content": {"application/json": {"schema": _ref("CreateSchedule")}},
                },
                "responses": {
                    "201": _json(schedule, "the schedule"),
                    "409": {
                        "description": "other requests kept storing that name between"
                        " this one's read and its write (code `SCHEDULE_CHANGED`): try"
                        " again",
                        "content": {PROBLEM_JSON: {"schema": _ref("Problem")}},
                    },
                    **_errors(*_CHANGES, 404, 422),
                },
            },
        },
        "/api/schedules/{name}": {
            "get": {
                "summary": "One schedule",
                "parameters": [_NAME],
                "responses": {
                    "200": _json(schedule, "the schedule"),
                    **_errors(*_ALWAYS, 404, 422),
                },
            },
            "delete": {
                "summary": "Delete a schedule; the runs it started stay. Another user's, a "
                "shared one or one declared in code needs the `schedules` scope",
                "parameters": [_NAME],
                "responses": {
                    "204": {"description": "deleted"},
                    **_errors(*_CHANGES, 404, 422),
                },
            },
        },
        "/api/schedules/{name}/pause": action(
            "Start nothing until resumed", _json(schedule, "the schedule")
        ),
        "/api/schedules/{name}/resume": action(
            "Fire again from the next tick", _json(schedule, "the schedule")
        ),
        "/api/schedules/{name}/trigger": action(
            "Start the schedule's workflow now",
            _json(
                _object(schedule={"type": "string"}, run_id={"type": "string"}),
                "the schedule and the run it started",
            ),
        ),
        "/api/queues": {
            "get": {
                "summary": "Runs waiting and runs holding a slot, per queue",
                "responses": {
                    "200": _json(
                        _object(queues={"type": "array"}),
                        "queue depths",
                    ),
                    **_errors(*_ALWAYS),
                },
            }
        },
    }
