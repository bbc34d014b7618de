"""Errors as HTTP answers: one JSON shape for every failure, and the plait exceptions that
map onto each status code.

Every error is an RFC 9457 problem (``application/problem+json``: ``type``, ``title``,
``status``, ``detail``) that also carries plait's own ``code`` and, for a malformed request,
``problems`` (every problem at once, so one edit can fix a request). The same fields are
kept under ``error`` (``{"error": {"status", "code", "message", "problems"?}}``), the shape
clients of earlier versions read, so the dashboard and scripts can show ``message``
without knowing which route failed.
"""

from __future__ import annotations

from http import HTTPStatus
from typing import Any

from pydantic import BaseModel, ValidationError
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse, Response

from plait.errors import (
    ApprovalForbiddenError,
    ApprovalResolvedError,
    GraphOwnerError,
    NotJSONError,
    PayloadTooDeepError,
    PayloadTooLargeError,
    RunNotFoundError,
    RunStateError,
    ScheduleNotFoundError,
    WorkflowNotFoundError,
)
from plait.errors import ValidationError as DataInvalidError
from plait.graph.errors import GraphValidationError

#: the media type of every error answer
PROBLEM_JSON = "application/problem+json"


class ApiError(Exception):
    """An answer other than success, raised anywhere below a route."""

    def __init__(
        self,
        status: int,
        code: str,
        message: str,
        *,
        problems: list[dict[str, str]] | None = None,
        headers: dict[str, str] | None = None,
        extra: dict[str, Any] | None = None,
    ) -> None:
        super().__init__(message)
        self.status = status
        self.code = code
        self.message = message
        self.problems = problems
        self.headers = headers
        self.extra = extra or {}

    def body(self) -> dict[str, Any]:
        error: dict[str, Any] = {"status": self.status, "code": self.code, "message": self.message}
        if self.problems is not None:
            error["problems"] = self.problems
        error.update(self.extra)
        problem: dict[str, Any] = {
            "type": "about:blank",
            "title": _title(self.status),
            "status": self.status,
            "detail": self.message,
            "code": self.code,
        }
        if self.problems is not None:
            problem["problems"] = self.problems
        return {**problem, "error": error}

    def response(self) -> JSONResponse:
        return JSONResponse(
            self.body(), status_code=self.status, headers=self.headers, media_type=PROBLEM_JSON
        )


def _title(status: int) -> str:
    try:
        return HTTPStatus(status).phrase
    except ValueError:
        return "Error"


def invalid(problems: list[dict[str, str]], what: str = "request") -> ApiError:
    count = len(problems)
    noun = "problem" if count == 1 else "problems"
    return ApiError(422, "INVALID_REQUEST", f"{count} {noun} in the {what}", problems=problems)


def problems_of(exc: ValidationError, prefix: str = "") -> list[dict[str, str]]:
    """Pydantic's errors as ``{"field": "a.b", "message": ...}`` items."""
    out: list[dict[str, str]] = []
    for err in exc.errors(include_url=False):
        loc = ".".join(str(part) for part in err.get("loc", ()))
        field = f"{prefix}.{loc}" if prefix and loc else (loc or prefix)
        out.append({"field": field, "message": err.get("msg", "invalid value")})
    return out


def validate(model: type[BaseModel], data: Any, what: str = "request body") -> Any:
    """``model.model_validate(data)`` or a 422 listing every problem."""
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        raise invalid(problems_of(exc), what) from None


def from_plait(exc: Exception) -> ApiError | None:
    """The HTTP answer for an exception raised by the engine, if it has one."""
    if isinstance(exc, RunNotFoundError):
        return ApiError(404, "RUN_NOT_FOUND", str(exc))
    if isinstance(exc, WorkflowNotFoundError):
        return ApiError(404, "WORKFLOW_NOT_FOUND", str(exc))
    if isinstance(exc, ScheduleNotFoundError):
        return ApiError(404, "SCHEDULE_NOT_FOUND", str(exc))
    if isinstance(exc, RunStateError):
        return ApiError(409, "RUN_STATE_CONFLICT", str(exc), extra={"run_status": exc.status})
    if isinstance(exc, ApprovalForbiddenError):
        return ApiError(403, exc.code, str(exc))
    if isinstance(exc, ApprovalResolvedError):
        return ApiError(409, exc.code, str(exc), extra={"outcome": exc.outcome})
    if isinstance(exc, DataInvalidError):
        return ApiError(422, exc.code, str(exc), problems=exc.problems)
    if isinstance(exc, GraphValidationError):
        problems = [{"field": "definition", "message": p} for p in exc.problems]
        return ApiError(422, "INVALID_GRAPH", str(exc).splitlines()[0], problems=problems)
    if isinstance(exc, GraphOwnerError):
        return ApiError(403, "GRAPH_FORBIDDEN", str(exc))
    if isinstance(exc, PayloadTooLargeError):
        return ApiError(413, "PAYLOAD_TOO_LARGE", str(exc), extra={"limit": exc.limit})
    if isinstance(exc, PayloadTooDeepError):
        return ApiError(422, "PAYLOAD_TOO_DEEP", str(exc), extra={"limit": exc.limit})
    return None


def bad_input(exc: Exception, field: str = "input") -> ApiError:
    """A ``TypeError``/``ValueError`` from the engine about what the caller sent."""
    code = "NOT_JSON" if isinstance(exc, NotJSONError) else "INVALID_REQUEST"
    return ApiError(422, code, str(exc), problems=[{"field": field, "message": str(exc)}])


async def handle_api_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, ApiError)
    return exc.response()


async def handle_unexpected(request: Request, exc: Exception) -> Response:
    """The last resort: a bug answers as a problem like every other error, never as a
    bare text page (Starlette raises the exception on afterwards, so the server logs it
    with its traceback)."""
    return ApiError(500, "INTERNAL_ERROR", "the server failed to answer; see its log").response()


async def handle_http_exception(request: Request, exc: Exception) -> Response:
    """Unknown paths and wrong methods: JSON under ``/api``, plain text elsewhere."""
    assert isinstance(exc, HTTPException)
    if request.url.path.startswith("/api") or request.url.path.endswith(".json"):
        codes = {404: "NOT_FOUND", 405: "METHOD_NOT_ALLOWED"}
        return ApiError(
            exc.status_code,
            codes.get(exc.status_code, "HTTP_ERROR"),
            str(exc.detail),
            headers=dict(exc.headers or {}),
        ).response()
    return PlainTextResponse(str(exc.detail), status_code=exc.status_code, headers=exc.headers)
