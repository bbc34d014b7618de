"""The OpenAPI 3.1 document served at ``/openapi.json``.

Written by hand (routes are few and stable) except for request bodies, whose schemas come
from the same pydantic models that validate them, so the two cannot drift apart.
"""

from __future__ import annotations

from typing import Any

from plait import __version__
from plait.http import operating
from plait.http.schemas import MAX_PAGE, RUN_STATUSES, CreateSchedule, RegisterGraph, StartRun

_REF = "#/components/schemas/"


def _ref(name: str) -> dict[str, str]:
    return {"$ref": _REF + name}


def _json(schema: dict[str, Any], description: str) -> dict[str, Any]:
    return {"description": description, "content": {"application/json": {"schema": schema}}}


#: every error status the API answers with, and what it means
_ERROR_TEXT = {
    401: "no valid bearer token",
    403: "the run belongs to another user",
    404: "unknown workflow or run",
    409: "the run's status does not allow this action",
    422: "malformed request; `problems` lists every problem",
}


def _errors(*codes: int) -> dict[str, Any]:
    return {str(c): {"$ref": f"#/components/responses/E{c}"} for c in codes if c in _ERROR_TEXT}


_RUN_ID = {"name": "run_id", "in": "path", "required": True, "schema": {"type": "string"}}


def _run_action(summary: str, extra: tuple[int, ...] = ()) -> dict[str, Any]:
    return {
        "post": {
            "summary": summary,
            "parameters": [_RUN_ID],
            "responses": {
                "202": _json(_ref("Run"), "the run after the action"),
                **_errors(401, 403, 404, 409, *extra),
            },
        }
    }


def openapi_document() -> dict[str, Any]:
    """The API description served at /openapi.json."""
    doc: dict[str, Any] = {
        "openapi": "3.1.0",
        "info": {
            "title": "plait",
            "version": __version__,
            "description": "Start, watch and steer durable workflow runs. Send "
            "`Authorization: Bearer <token>` unless the server runs with --no-auth.",
        },
        "servers": [{"url": "/"}],
        "security": [{"bearer": []}],
        "paths": {
            "/api/me": {
                "get": {
                    "summary": "The caller's user id",
                    "responses": {
                        "200": _json(
                            {
                                "type": "object",
                                "properties": {
                                    "user": {"type": ["string", "null"]},
                                    "auth": {"type": "boolean"},
                                },
                            },
                            "who you are",
                        ),
                        **_errors(401),
                    },
                }
            },
            "/api/workflows": {
                "get": {
                    "summary": "Workflows and graphs a run can be started with",
                    "responses": {
                        "200": _json(
                            {
                                "type": "object",
                                "properties": {
                                    "workflows": {
                                        "type": "array",
                                        "items": {
                                            "type": "object",
                                            "properties": {
                                                "name": {"type": "string"},
                                                "kind": {"enum": ["workflow", "graph"]},
                                            },
                                        },
                                    }
                                },
                            },
                            "registered names",
                        ),
                        **_errors(401),
                    },
                }
            },
            "/api/workflows/{name}/runs": {
                "post": {
                    "summary": "Start a run (optionally wait for it to settle)",
                    "parameters": [
                        {
                            "name": "name",
                            "in": "path",
                            "required": True,
                            "schema": {"type": "string"},
                        }
                    ],
                    "requestBody": {
                        "required": False,
                        "content": {"application/json": {"schema": _ref("StartRun")}},
                    },
                    "responses": {
                        "201": _json(
                            {"type": "object", "properties": {"run_id": {"type": "string"}}},
                            "the run was created (or already existed with this run_id)",
                        ),
                        "200": _json(_ref("RunWithSteps"), "with `wait`: the settled run"),
                        "202": _json(
                            _ref("RunWithSteps"),
                            "with `wait`: still going after `timeout` (default 300 s)",
                        ),
                        **_errors(401, 403, 404, 409, 422),
                    },
                }
            },
            "/api/runs": {
                "get": {
                    "summary": "Runs the caller may read, newest first",
                    "parameters": [
                        {"name": "workflow", "in": "query", "schema": {"type": "string"}},
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
                            "schema": {"type": "integer", "minimum": 0, "default": 0},
                        },
                    ],
                    "responses": {
                        "200": _json(
                            {
                                "type": "object",
                                "properties": {
                                    "runs": {"type": "array", "items": _ref("Run")},
                                    "total": {"type": "integer"},
                                    "limit": {"type": "integer"},
                                    "offset": {"type": "integer"},
                                },
                            },
                            "one page of runs and the total that match",
                        ),
                        **_errors(401, 422),
                    },
                }
            },
            "/api/runs/{run_id}": {
                "get": {
                    "summary": "A run with its steps and child runs",
                    "parameters": [_RUN_ID],
                    "responses": {
                        "200": _json(_ref("RunWithSteps"), "the run"),
                        **_errors(401, 403, 404),
                    },
                }
            },
            "/api/runs/{run_id}/history": {
                "get": {
                    "summary": "Every attempt of every step, oldest first",
                    "parameters": [_RUN_ID],
                    "responses": {
                        "200": _json(
                            {
                                "type": "object",
                                "properties": {
                                    "run_id": {"type": "string"},
                                    "attempts": {"type": "array", "items": _ref("StepAttempt")},
                                },
                            },
                            "the attempts",
                        ),
                        **_errors(401, 403, 404),
                    },
                }
            },
            "/api/runs/{run_id}/graph": {
                "get": {
                    "summary": "The run drawn as a graph (SVG and layout)",
                    "parameters": [_RUN_ID],
                    "responses": {
                        "200": _json(
                            {
                                "type": "object",
                                "properties": {
                                    "kind": {"enum": ["graph", "steps"]},
                                    "svg": {"type": "string"},
                                    "width": {"type": "integer"},
                                    "height": {"type": "integer"},
                                    "nodes": {"type": "array", "items": {"type": "object"}},
                                    "edges": {"type": "array", "items": {"type": "object"}},
                                },
                            },
                            "the drawing",
                        ),
                        **_errors(401, 403, 404),
                    },
                }
            },
            "/api/runs/{run_id}/stream": {
                "get": {
                    "summary": "Server-sent events until the run ends or suspends",
                    "description": "`event: run` carries the run with its steps (as GET "
                    "/api/runs/{run_id}) whenever it changes; `event: end` carries "
                    "`{run_id, status}` and closes the stream.",
                    "parameters": [_RUN_ID],
                    "responses": {
                        "200": {
                            "description": "an event stream",
                            "content": {"text/event-stream": {"schema": {"type": "string"}}},
                        },
                        **_errors(401, 403, 404),
                    },
                }
            },
            "/api/runs/{run_id}/cancel": _run_action("Cancel a run and its child runs"),
            "/api/runs/{run_id}/resume": _run_action("Resume a suspended run"),
            "/api/runs/{run_id}/retry": _run_action("Retry a failed run from the failed step"),
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
                    ],
                    "requestBody": {
                        "required": False,
                        "content": {"application/json": {"schema": {}}},
                    },
                    "responses": {
                        "202": _json(
                            {
                                "type": "object",
                                "properties": {
                                    "run_id": {"type": "string"},
                                    "event": {"type": "string"},
                                    "waiting": {
                                        "type": "boolean",
                                        "description": "the run waits for this event now;"
                                        " false: it is held for a later wait, which may"
                                        " never come (a wait that timed out)",
                                    },
                                },
                            },
                            "stored for the run",
                        ),
                        **_errors(401, 403, 404, 409, 422),
                    },
                }
            },
            "/api/graphs": {
                "get": {
                    "summary": "Graphs of the app and graphs registered at run time",
                    "responses": {
                        "200": _json(
                            {
                                "type": "object",
                                "properties": {
                                    "graphs": {"type": "array", "items": {"type": "object"}}
                                },
                            },
                            "the graphs",
                        ),
                        **_errors(401),
                    },
                },
                "post": {
                    "summary": "Register a graph from its JSON definition",
                    "requestBody": {
                        "required": True,
                        "content": {"application/json": {"schema": _ref("RegisterGraph")}},
                    },
                    "responses": {
                        "201": _json({"type": "object"}, "registered"),
                        **_errors(401, 422),
                    },
                },
            },
        },
        "components": {
            "securitySchemes": {"bearer": {"type": "http", "scheme": "bearer"}},
            "responses": {f"E{c}": _json(_ref("Error"), desc) for c, desc in _ERROR_TEXT.items()},
            "schemas": _schemas(),
        },
    }
    doc["paths"].update(_flow_paths())
    doc["components"]["schemas"]["CreateSchedule"] = CreateSchedule.model_json_schema()
    doc["paths"].update(operating.openapi_paths(_json, _errors, _RUN_ID, _ref))
    doc["components"]["schemas"]["ForkRun"] = operating.ForkRun.model_json_schema()
    return doc


def _schemas() -> dict[str, Any]:
    timestamp = {"type": "string", "format": "date-time"}
    error = {"type": ["object", "null"]}
    run = {
        "type": "object",
        "properties": {
            "id": {"type": "string"},
            "workflow": {"type": "string"},
            "kind": {"enum": ["workflow", "graph"]},
            "status": {"enum": list(RUN_STATUSES)},
            "input": {},
            "output": {},
            "error": error,
            "created_at": timestamp,
            "updated_at": timestamp,
            "parent_run_id": {"type": ["string", "null"]},
            "owner": {"type": ["string", "null"]},
            "version": {"type": ["string", "null"]},
        },
    }
    step = {
        "type": "object",
        "properties": {
            "run_id": {"type": "string"},
            "key": {"type": "string"},
            "name": {"type": "string"},
            "kind": {"type": "string"},
            "function": {"type": ["string", "null"]},
            "status": {"enum": ["pending", "scheduled", "running", "succeeded", "failed"]},
            "input": {},
            "output": {},
            "error": error,
            "attempts": {"type": "integer"},
            "retries": {"type": "integer"},
            "invocation_id": {"type": "string"},
            "child_run_id": {"type": ["string", "null"]},
            "created_at": timestamp,
            "updated_at": timestamp,
        },
    }
    attempt = {
        "type": "object",
        "properties": {
            "run_id": {"type": "string"},
            "key": {"type": "string"},
            "attempt": {"type": "integer"},
            "status": {"type": "string"},
            "output": {},
            "error": error,
            "started_at": timestamp,
            "finished_at": {"type": ["string", "null"], "format": "date-time"},
        },
    }
    with_steps = {
        "allOf": [
            {"$ref": _REF + "Run"},
            {
                "type": "object",
                "properties": {
                    "steps": {"type": "array", "items": {"$ref": _REF + "Step"}},
                    "children": {"type": "array", "items": {"type": "object"}},
                },
            },
        ]
    }
    problem_error = {
        "type": "object",
        "properties": {
            "error": {
                "type": "object",
                "properties": {
                    "status": {"type": "integer"},
                    "code": {"type": "string"},
                    "message": {"type": "string"},
                    "problems": {
                        "type": "array",
                        "items": {
                            "type": "object",
                            "properties": {
                                "field": {"type": "string"},
                                "message": {"type": "string"},
                            },
                        },
                    },
                },
                "required": ["status", "code", "message"],
            }
        },
    }
    return {
        "Run": run,
        "RunWithSteps": with_steps,
        "Step": step,
        "StepAttempt": attempt,
        "Error": problem_error,
        "StartRun": StartRun.model_json_schema(),
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
                "responses": {"202": answer, **_errors(401, 403, 404)},
            }
        }

    return {
        "/api/schedules": {
            "get": {
                "summary": "Schedules the caller may see, with next tick and last run",
                "responses": {
                    "200": _json(
                        {"type": "object", "properties": {"schedules": {"type": "array"}}},
                        "the schedules",
                    ),
                    **_errors(401),
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
                    **_errors(401, 403, 404, 422),
                },
            },
        },
        "/api/schedules/{name}": {
            "get": {
                "summary": "One schedule",
                "parameters": [_NAME],
                "responses": {"200": _json(schedule, "the schedule"), **_errors(401, 403, 404)},
            }
        },
        "/api/schedules/{name}/pause": action(
            "Start nothing until resumed", _json(schedule, "the schedule")
        ),
        "/api/schedules/{name}/resume": action(
            "Fire again from the next tick", _json(schedule, "the schedule")
        ),
        "/api/schedules/{name}/trigger": action(
            "Start the schedule's workflow now",
            _json({"type": "object", "properties": {"run_id": {"type": "string"}}}, "the run"),
        ),
        "/api/queues": {
            "get": {
                "summary": "Runs waiting and runs holding a slot, per queue",
                "responses": {
                    "200": _json(
                        {"type": "object", "properties": {"queues": {"type": "array"}}},
                        "queue depths",
                    ),
                    **_errors(401),
                },
            }
        },
    }
