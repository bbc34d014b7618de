"""Request bodies and query strings as pydantic models: the single place that says what a
client may send, so validation errors (422) and the OpenAPI document agree."""

from __future__ import annotations

import json
import re
from datetime import UTC, datetime
from typing import Any, Literal, get_args

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    StrictBool,
    StrictFloat,
    StrictInt,
    field_validator,
)
from starlette.requests import Request

from plait import ids, queues, request, schedules, serde
from plait import tags as tag_rules
from plait.http.problems import ApiError, invalid, validate
from plait.ids import (
    CALLER_RUN_ID_PATTERN,
    MAX_NAME,
    NAME_FORBIDDEN,
    RUN_ID_PATTERN,
    SCHEDULE_RUN_ID_PREFIX,
    reserved_run_id,
)
from plait.statuses import RunStatusName

RUN_STATUSES: tuple[str, ...] = get_args(RunStatusName)
MAX_PAGE = 500
#: the largest ``offset`` of a page of runs
MAX_OFFSET = 2**31 - 1
#: a workflow, graph, event or approval name sent by a client: the engine's rule for
#: names (``ids.check_name``), and no ``/``, as it travels in URL paths
NAME_PATTERN = rf"^[^{NAME_FORBIDDEN}/]{{1,{MAX_NAME}}}$"
_PATH_NAME = re.compile(NAME_PATTERN)


def path_name(request: Request, what: str) -> str:
    """The ``{name}`` of the request's path, an event's or an approval gate's, if it
    follows ``NAME_PATTERN``; else 422 (before any run is looked at)."""
    name: str = request.path_params["name"]
    if _PATH_NAME.fullmatch(name) is None:
        raise invalid(
            [
                {
                    "field": "name",
                    "message": f"an {what} name has 1 to {MAX_NAME} characters, no /"
                    " and no control characters",
                }
            ],
            "path",
        )
    return name


#: how the document describes a flow-control text field (the engine checks the rest)
_TEXT_OR_NULL: dict[str, Any] = {"type": ["string", "null"], "minLength": 1}
#: ... and a key (``key``, ``dedup``), which has a length limit of its own
_KEY_OR_NULL: dict[str, Any] = {**_TEXT_OR_NULL, "maxLength": queues.MAX_KEY}


def caller_run_id(value: Any) -> Any:
    """A run id a client chose: one of a schedule's (``schedule:...``) is refused with
    why, before the pattern (which says the same to the document's readers) is tried."""
    if isinstance(value, str) and value.startswith(SCHEDULE_RUN_ID_PREFIX):
        raise ValueError(reserved_run_id(value))
    return value


class SendRequest(BaseModel):
    """Body of ``POST /api/runs/{run_id}/requests/{name}``."""

    model_config = ConfigDict(extra="forbid")

    #: the request's data (any JSON)
    data: Any = None
    #: seconds to wait for the answer (more than 0, at most 300)
    timeout: StrictFloat | StrictInt = Field(
        default=request.DEFAULT_TIMEOUT, gt=0, le=request.MAX_TIMEOUT
    )


class StartRun(BaseModel):
    """Body of ``POST /api/workflows/{name}/runs``."""

    # the run id's pattern looks ahead (no schedule's id), which Rust's regex cannot
    model_config = ConfigDict(extra="forbid", regex_engine="python-re")

    input: Any = None
    run_id: str | None = Field(
        default=None, min_length=1, max_length=200, pattern=f"^{CALLER_RUN_ID_PATTERN}$"
    )
    wait: StrictBool = False
    #: seconds to wait with ``wait`` (default 300); past it the answer is 202 with the
    #: unfinished run
    wait_timeout: float | None = Field(default=None, gt=0, le=3600)
    #: the run's deadline (see ``Engine.start``): seconds, or a duration such as ``"1h"``;
    #: checked by the engine, which names the field
    timeout: Any = Field(default=None, json_schema_extra={"type": ["number", "string", "null"]})
    start_node: str | None = Field(default=None, min_length=1, max_length=200)
    #: flow control (see ``Engine.start``); checked by the engine, which names the field.
    #: The document still says what each takes, so a client knows without trying.
    queue: Any = Field(default=None, json_schema_extra=_TEXT_OR_NULL)
    key: Any = Field(default=None, json_schema_extra=_KEY_OR_NULL)
    priority: Any = Field(
        default=0,
        json_schema_extra={
            "type": "integer",
            "minimum": queues.PRIORITY_RANGE[0],
            "maximum": queues.PRIORITY_RANGE[1],
        },
    )
    dedup: Any = Field(default=None, json_schema_extra=_KEY_OR_NULL)
    #: what a start does when a live run holds its ``dedup`` key: ``skip`` returns that
    #: run, ``replace`` cancels it (only one of the caller's own) and starts this one
    dedup_policy: Any = Field(
        default="skip", json_schema_extra={"type": "string", "enum": list(queues.DEDUP_POLICIES)}
    )
    #: seconds, or a duration such as ``"5m"``
    delay: Any = Field(default=None, json_schema_extra={"type": ["number", "string", "null"]})
    #: debounced starts (see ``Engine.start``): the window (seconds or a duration), the
    #: key (default: the workflow's name; windows are the caller's own) and the limit
    #: from the first start
    debounce: Any = Field(default=None, json_schema_extra={"type": ["number", "string", "null"]})
    debounce_key: Any = Field(default=None, json_schema_extra=_KEY_OR_NULL)
    debounce_max: Any = Field(
        default=None, json_schema_extra={"type": ["number", "string", "null"]}
    )
    start_at: datetime | None = None
    #: the run's tags (see ``plait.tags``), merged over the workflow's; checked by the
    #: engine's rules, which name the key
    tags: Any = Field(
        default=None,
        json_schema_extra={
            "type": ["object", "null"],
            "additionalProperties": {"type": "string", "maxLength": 256},
            "maxProperties": 16,
        },
    )

    _run_id = field_validator("run_id", mode="before")(caller_run_id)

    @field_validator("start_at", mode="before")
    @classmethod
    def _start_at_text(cls, value: Any) -> Any:
        """An ISO 8601 text, as the document says: not a number, which pydantic would
        otherwise read as unix seconds (or milliseconds, by its size)."""
        if value is not None and not isinstance(value, str):
            raise ValueError(
                "start_at is an ISO 8601 date and time with a time zone, as a string"
                " (e.g. 2026-05-01T09:30:00Z)"
            )
        return value


class CreateSchedule(BaseModel):
    """Body of ``POST /api/schedules``: a schedule made at run time, owned by the caller."""

    model_config = ConfigDict(extra="forbid")

    #: the engine checks the rest of a schedule name's rule and names the field
    name: str = Field(min_length=1, max_length=schedules.MAX_NAME)
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
    status: RunStatusName | None = None
    #: runs of this queue
    queue: str | None = Field(default=None, min_length=1, max_length=200)
    limit: int = Field(default=50, ge=1, le=MAX_PAGE)
    offset: int = Field(default=0, ge=0, le=MAX_OFFSET)
    #: runs whose id holds this text, in any case (a short id, a part of one)
    id: str | None = Field(default=None, min_length=1, max_length=200, pattern=NAME_PATTERN)
    #: runs started at or after ``since`` and before ``until``: ISO 8601 date-times (a
    #: time without a zone is UTC)
    since: datetime | None = None
    until: datetime | None = None
    #: only runs that are no other run's child (children fold under their parents)
    top_level: StrictBool | None = None
    #: leave out runs that continued as new (of each chain, its last run only)
    hide_continued: StrictBool | None = None
    #: with ``true``: how many runs the other filters match in each status (``counts``)
    counts: StrictBool | None = None
    #: only the children of this run
    parent: str | None = Field(
        default=None, min_length=1, max_length=200, pattern=f"^{RUN_ID_PATTERN}$"
    )

    @field_validator("top_level", "hide_continued", "counts", mode="before")
    @classmethod
    def _flag(cls, value: Any) -> Any:
        """``true``/``false`` (and ``1``/``0``) as a query string spells them."""
        flags = {"true": True, "1": True, "false": False, "0": False}
        return flags.get(value, value) if isinstance(value, str) else value

    @field_validator("since", "until", mode="before")
    @classmethod
    def _time(cls, value: Any) -> Any:
        """A time that is not one is refused with what a time looks like."""
        if isinstance(value, str):
            try:
                # a "+" of a zone left unescaped in a query string arrives as a space
                return datetime.fromisoformat(_ZONE_AS_SPACE.sub(r"\1+\2", value.strip()))
            except ValueError:
                raise ValueError(
                    f"{value[:40]!r} is not a date and time; give ISO 8601, "
                    "e.g. 2026-05-01T09:30:00Z or 2026-05-01T09:30+02:00"
                ) from None
        return value


_ZONE_AS_SPACE = re.compile(r"(\d\d:\d\d(?::\d\d(?:\.\d+)?)?) (\d\d:?\d\d)$")


def _utc(value: datetime) -> datetime:
    """A time without a zone is UTC, as every time plait stores."""
    return value if value.tzinfo is not None else value.replace(tzinfo=UTC)


def event_dedup(request: Request) -> str | None:
    """The ``dedup`` query parameter of an event's send (None: none), if it is a
    de-duplication key (1 to 512 characters, no control characters); else 422 naming
    ``dedup``."""
    values = request.query_params.getlist("dedup")
    if not values:
        return None
    try:
        if len(values) > 1:
            raise ValueError("dedup is given more than once")
        return ids.check_event_dedup(queues.check_text(values[0], "dedup"))
    except ValueError as exc:
        raise invalid([{"field": "dedup", "message": str(exc)}], "query string") from None


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


def tags_query(request: Request) -> dict[str, str] | None:
    """The repeatable ``tag=key:value`` parameter of ``GET /api/runs`` (None: none); a bad
    one is a 422 naming the parameter and what was given."""
    pairs = request.query_params.getlist("tag")
    if not pairs:
        return None
    found: dict[str, str] = {}
    try:
        for pair in pairs:
            key, value = tag_rules.parse_pair(pair, ":", "tag")
            tag_rules.add_pair(found, key, value, ":", "tag")
        tag_rules.limit(found, "tag")
    except ValueError as exc:
        raise invalid([{"field": "tag", "message": str(exc)}], "query string") from None
    return found


def runs_query(request: Request) -> RunsQuery:
    """The query of ``GET /api/runs``; an empty value (``?status=``) is a bad value, not
    a missing one, as the OpenAPI document says. A time that is not one gets a 422 that
    says what a time looks like."""
    result: RunsQuery = validate(RunsQuery, dict(request.query_params), "query string")
    since, until = result.since, result.until
    if since is not None and until is not None and _utc(since) > _utc(until):
        message = "since must not be later than until"
        raise invalid([{"field": "since", "message": message}], "query string")
    return result
