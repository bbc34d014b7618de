"""Request bodies and query strings as pydantic models: the single place that says what a
client may send, so validation errors (422) and the OpenAPI document agree."""

from __future__ import annotations

import json
from datetime import datetime
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, StrictBool
from starlette.requests import Request

from plait.http.problems import invalid, validate

RUN_STATUSES = ("queued", "running", "suspended", "completed", "failed", "cancelled")
MAX_PAGE = 500


class StartRun(BaseModel):
    """Body of ``POST /api/workflows/{name}/runs``."""

    model_config = ConfigDict(extra="forbid")

    input: Any = None
    run_id: str | None = Field(default=None, min_length=1, max_length=200)
    wait: StrictBool = False
    #: seconds to wait with ``wait`` (default 300); past it the answer is 202 with the
    #: unfinished run
    timeout: float | None = Field(default=None, gt=0, le=3600)
    start_node: str | None = Field(default=None, min_length=1)
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

    name: str = Field(min_length=1, max_length=200)
    definition: dict[str, Any]
    status: Literal["draft", "active"] = "active"


class RunsQuery(BaseModel):
    """Query of ``GET /api/runs``; unknown parameters are ignored like any web server does."""

    model_config = ConfigDict(extra="ignore")

    workflow: str | None = Field(default=None, min_length=1)
    status: Literal["queued", "running", "suspended", "completed", "failed", "cancelled"] | None = (
        None
    )
    limit: int = Field(default=50, ge=1, le=MAX_PAGE)
    offset: int = Field(default=0, ge=0)


async def json_body(request: Request, *, empty: Any = None) -> Any:
    """The parsed JSON body; ``empty`` when there is none; 422 when it is not JSON."""
    raw = await request.body()
    if not raw.strip():
        return empty
    try:
        return json.loads(raw)
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise invalid(
            [{"field": "body", "message": f"not valid JSON: {exc}"}], "request body"
        ) from None


def runs_query(request: Request) -> RunsQuery:
    params = {k: v for k, v in request.query_params.items() if v != ""}
    result: RunsQuery = validate(RunsQuery, params, "query string")
    return result
