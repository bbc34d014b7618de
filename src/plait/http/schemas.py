"""Request bodies and query strings as pydantic models: the single place that says what a
client may send, so validation errors (422) and the OpenAPI document agree."""

from __future__ import annotations

import json
from datetime import datetime
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, StrictBool
from starlette.requests import Request

from plait import serde
from plait.http.problems import ApiError, invalid, validate
from plait.ids import RUN_ID_PATTERN

RUN_STATUSES = ("queued", "running", "suspended", "completed", "failed", "cancelled")
MAX_PAGE = 500
#: the largest ``offset`` of a page of runs
MAX_OFFSET = 2**31 - 1
#: a workflow, graph or event name sent by a client: it travels in URL paths and logs, so
#: no ``/`` and no control characters
NAME_PATTERN = r"^[^\x00-\x1f\x7f/]{1,200}$"


class StartRun(BaseModel):
    """Body of ``POST /api/workflows/{name}/runs``."""

    model_config = ConfigDict(extra="forbid")

    input: Any = None
    run_id: str | None = Field(
        default=None, min_length=1, max_length=200, pattern=f"^{RUN_ID_PATTERN}$"
    )
    wait: StrictBool = False
    #: seconds to wait with ``wait`` (default 300); past it the answer is 202 with the
    #: unfinished run
    timeout: float | None = Field(default=None, gt=0, le=3600)
    start_node: str | None = Field(default=None, min_length=1, max_length=200)
    #: flow control (see ``Engine.start``); checked by the engine, which names the field
    queue: Any = None
    key: Any = None
    priority: Any = 0
    dedup: Any = None
    delay: Any = None
    start_at: datetime | None = None


class CreateSchedule(BaseModel):
    """Body of ``POST /api/schedules``: a schedule made at run time, owned by the caller."""

    model_config = ConfigDict(extra="forbid")

    name: str = Field(min_length=1, max_length=200)
    workflow: str = Field(min_length=1)
    cron: str | None = None
    every: str | float | None = None
    input: Any = None
    timezone: str = "UTC"
    overlap: str = "skip"
    catchup: str | float = "0s"


class RegisterGraph(BaseModel):
    """Body of ``POST /api/graphs``."""

    model_config = ConfigDict(extra="forbid")

    name: str = Field(min_length=1, max_length=200, pattern=NAME_PATTERN)
    definition: dict[str, Any]
    status: Literal["draft", "active"] = "active"


class RunsQuery(BaseModel):
    """Query of ``GET /api/runs``; unknown parameters are ignored like any web server does."""

    model_config = ConfigDict(extra="ignore")

    workflow: str | None = Field(default=None, max_length=200, pattern=NAME_PATTERN)
    status: Literal["queued", "running", "suspended", "completed", "failed", "cancelled"] | None = (
        None
    )
    limit: int = Field(default=50, ge=1, le=MAX_PAGE)
    offset: int = Field(default=0, ge=0, le=MAX_OFFSET)


async def json_body(request: Request, *, empty: Any = None) -> Any:
    """The parsed JSON body; ``empty`` when there is none; 422 naming what is wrong when
    it is not UTF-8 JSON, or nests deeper than plait stores (checked on the text first,
    so no depth can exhaust the parser)."""
    raw = await request.body()
    if not raw.strip():
        return empty
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise _not_json(f"not UTF-8 text ({exc.reason} at byte {exc.start})") from None
    if serde.too_deep(text, serde.MAX_DEPTH):
        raise ApiError(
            422,
            "PAYLOAD_TOO_DEEP",
            f"the request body nests arrays and objects deeper than {serde.MAX_DEPTH} levels",
            problems=[{"field": "body", "message": f"deeper than {serde.MAX_DEPTH} levels"}],
            extra={"limit": serde.MAX_DEPTH},
        )
    try:
        return json.loads(text, parse_constant=_no_constant)
    except json.JSONDecodeError as exc:
        raise _not_json(f"{exc.msg} at line {exc.lineno} column {exc.colno}") from None
    except (ValueError, RecursionError) as exc:
        # integers longer than Python converts (4300 digits), NaN and Infinity
        raise _not_json(str(exc)) from None


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a JSON value")


def _not_json(reason: str) -> ApiError:
    return invalid([{"field": "body", "message": f"not valid JSON: {reason}"}], "request body")


def runs_query(request: Request) -> RunsQuery:
    """The query of ``GET /api/runs``; an empty value (``?status=``) is a bad value, not
    a missing one, as the OpenAPI document says."""
    result: RunsQuery = validate(RunsQuery, dict(request.query_params), "query string")
    return result
