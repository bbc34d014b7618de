"""Routes for operating runs: deciding approval gates, forking a run from a step.

A gate is decided by someone who may read its run (its owner, anyone for a run without
an owner, a token with the ``admin`` scope), as its approver policy says (``any``: each
of them, ``owner``, ``not_owner``: each of them but the owner); a policy that lists user
ids names others, who decide that open gate without reading the run. Anyone else is
refused (403) before anything is looked at or stored: not a held decision for a gate
the run has not reached, not a refused one for a gate it has. Forking needs
access to the run, and the fork keeps its owner; a fork's ``run_id`` that another user's
run holds is 403, as for a start.
"""

from __future__ import annotations

import dataclasses
from datetime import datetime
from typing import Any, Literal, cast

from pydantic import BaseModel, ConfigDict, Field, StrictBool, field_validator
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from plait import approval
from plait.engine import Engine
from plait.engine.bulk import DEFAULT_RATE
from plait.errors import RunIdTakenError
from plait.http.auth import Principal
from plait.http.problems import ApiError, bad_input, invalid, validate
from plait.http.schemas import caller_run_id, json_body, path_name
from plait.ids import CALLER_RUN_ID_PATTERN
from plait.records import ApprovalStatus

#: the statuses ``GET /api/approvals`` takes
APPROVAL_STATUSES: tuple[ApprovalStatus, ...] = ("open", "decided", "expired")


class ForkRun(BaseModel):
    """Body of ``POST /api/runs/{run_id}/fork``."""

    model_config = ConfigDict(extra="forbid", regex_engine="python-re")

    from_step: str = Field(min_length=1)
    #: the fork's id, as ``StartRun.run_id``: it must fit in a URL like any run id, and
    #: not be one of a schedule's
    run_id: str | None = Field(
        default=None, min_length=1, max_length=200, pattern=f"^{CALLER_RUN_ID_PATTERN}$"
    )

    #: cancel the run if it has not ended, in the commit that makes the fork
    replace: bool = False

    _run_id = field_validator("run_id", mode="before")(caller_run_id)


#: the fastest pace a bulk action over HTTP may ask for (runs per second)
MAX_HTTP_RATE = 1000.0


class BulkFilter(BaseModel):
    """The runs ``POST /api/runs/bulk`` acts on: those that match every field given."""

    model_config = ConfigDict(extra="forbid")

    workflow: str | None = Field(default=None, min_length=1, max_length=200)
    status: str | None = None
    version: str | None = Field(default=None, min_length=1, max_length=200)
    #: runs created at or after ``since`` and before ``until`` (ISO 8601)
    since: datetime | None = None
    until: datetime | None = None
    #: runs that carry every one of these tags
    tags: dict[str, str] | None = None
    queue: str | None = Field(default=None, min_length=1, max_length=200)
    #: with the ``admin`` scope: the runs of this owner (without: always the caller's)
    owner: str | None = Field(default=None, min_length=1, max_length=200)


class BulkAction(BaseModel):
    """Body of ``POST /api/runs/bulk``."""

    model_config = ConfigDict(extra="forbid")

    action: Literal["cancel", "retry", "resume"]
    filter: BulkFilter = Field(default_factory=BulkFilter)
    #: count the runs the action would act on now (``matched``) and act on none: what a
    #: confirmation shows before the action is sent
    dry_run: StrictBool = False
    #: runs acted on per second at most; over HTTP always paced, so that one request
    #: cannot put thousands of runs ahead of everyone's live work at once
    rate: float = Field(default=DEFAULT_RATE, gt=0, le=MAX_HTTP_RATE, allow_inf_nan=False)


class Operating:
    """Handlers; ``Api`` authenticates and maps engine errors around each of them."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine

    def routes(self, wrap: Any) -> list[Route]:
        return [
            Route("/approvals", wrap(self.list_approvals), methods=["GET"]),
            Route("/runs/{run_id}/approvals/{name}", wrap(self.decide), methods=["POST"]),
            Route("/runs/{run_id}/fork", wrap(self.fork), methods=["POST"]),
            Route("/runs/bulk", wrap(self.bulk), methods=["POST"]),
        ]

    async def list_approvals(self, request: Request, principal: Principal) -> Response:
        """Open gates (or ``?status=decided|expired``) the caller may decide."""
        status = request.query_params.get("status", "open")
        if status not in APPROVAL_STATUSES:
            raise invalid(
                [{"field": "status", "message": f"must be one of {', '.join(APPROVAL_STATUSES)}"}],
                "query string",
            )
        if principal.unrestricted:
            gates = await self.engine.list_approvals(status=status)
        else:
            gates = await self.engine.list_approvals(
                status=status,
                user=principal.user,
                reader=lambda owner: principal.may_access(_Owner(owner)),
            )
        return JSONResponse({"approvals": [g.to_dict() for g in gates]})

    async def decide(self, request: Request, principal: Principal) -> Response:
        """Decide gate ``name``; the body (any JSON) is the decision's data. A name no
        gate can have (the rule of event names) is 422 before any run is looked at."""
        run_id, name = request.path_params["run_id"], path_name(request, "approval")
        run = await self.engine.get_run(run_id)
        reader = principal.may_access(run)
        if not reader and not await self._named_at_open_gate(run_id, name, principal):
            principal.require_access(run)
        data = await json_body(request)
        try:
            decision = await self.engine.approve(
                run_id, name, data, decided_by=principal.user, reader=reader
            )
        except TypeError as exc:
            raise bad_input(exc, "body") from None
        return JSONResponse(decision.to_dict(), status_code=200)

    async def _named_at_open_gate(self, run_id: str, name: str, principal: Principal) -> bool:
        """Whether the run waits at an open gate ``name`` whose policy lists the caller
        (the only gate a caller who may not read the run may decide)."""
        for step in await self.engine.get_steps(run_id):
            if step.kind != "approval" or step.status != "pending":
                continue
            recorded: Any = step.input
            info = cast(dict[str, Any], recorded) if isinstance(recorded, dict) else {}
            if info.get("name") == name and approval.names(info.get("approvers"), principal.user):
                return True
        return False

    async def fork(self, request: Request, principal: Principal) -> Response:
        """A new run from a step of this one (201 with its id)."""
        run = await self.engine.get_run(request.path_params["run_id"])
        principal.require_access(run)
        body: ForkRun = validate(ForkRun, await json_body(request, empty={}))
        try:
            new_id = await self.engine.fork(
                run.id, from_step=body.from_step, run_id=body.run_id, replace=body.replace
            )
        except RunIdTakenError as exc:
            # as for a start: the id answers only to the owner of the run that holds it
            principal.require_access(await self.engine.get_run(exc.run_id))
            raise ApiError(409, "RUN_ID_TAKEN", str(exc)) from None
        except ValueError as exc:
            raise bad_input(exc, "from_step") from None
        return JSONResponse(
            {"run_id": new_id, "forked_from": run.id, "replaced": body.replace}, status_code=201
        )

    async def bulk(self, request: Request, principal: Principal) -> Response:
        """Cancel, retry or resume every run the filter matches, among the caller's own
        runs (every user's with the ``admin`` scope); answers how many were acted on, or
        with ``dry_run`` how many it would act on now."""
        body: BulkAction = validate(BulkAction, await json_body(request, empty={}))
        given = body.filter.model_dump(exclude_none=True)
        if principal.has_scope("admin"):
            owner = given.pop("owner", None)
        else:
            if given.get("owner") not in (None, principal.user):
                principal.require_scope("admin", "acting on another user's runs")
            owner = principal.user
            given.pop("owner", None)
        try:
            if body.dry_run:
                matched = await self.engine.match_runs(body.action, owner=owner, **given)
                return JSONResponse({"action": body.action, "matched": len(matched)})
            acted = await self.engine.act_on_runs(body.action, owner=owner, rate=body.rate, **given)
        except ValueError as exc:
            raise bad_input(exc, "filter") from None
        return JSONResponse({"action": body.action, "acted": acted})


def openapi_paths(
    json: Any, errors: Any, run_id: dict[str, Any], ref: Any
) -> dict[str, dict[str, Any]]:
    """These routes in the OpenAPI document (given the document's own helpers)."""
    name = {"name": "name", "in": "path", "required": True, "schema": {"type": "string"}}
    decision = {"type": "object", "description": "the decision as recorded"}
    return {
        "/api/approvals": {
            "get": {
                "summary": "Approval gates of live runs the caller may decide",
                "parameters": [
                    {
                        "name": "status",
                        "in": "query",
                        "required": False,
                        "schema": {"enum": list(APPROVAL_STATUSES)},
                    }
                ],
                "responses": {
                    "200": json(
                        {
                            "type": "object",
                            "properties": {"approvals": {"type": "array", "items": {}}},
                        },
                        "each with its JSON Schema and approver policy",
                    ),
                    **errors(400, 401, 403, 422),
                },
            }
        },
        "/api/runs/{run_id}/approvals/{name}": {
            "post": {
                "summary": "Decide an approval gate; the body (any JSON) is the data",
                "parameters": [run_id, name],
                "requestBody": {
                    "required": False,
                    "content": {"application/json": {"schema": {}}},
                },
                "responses": {
                    "200": json(decision, "accepted, or held until the run reaches the gate"),
                    # 403: the gate's approver policy refuses the caller; 409: the gate was
                    # already decided or expired, or the run ended
                    **errors(400, 401, 403, 404, 409, 413, 415, 422),
                },
            }
        },
        "/api/runs/bulk": {
            "post": {
                "summary": "Cancel, retry or resume every run a filter matches (the caller's"
                " own; every user's with the admin scope)",
                "requestBody": {
                    "required": True,
                    "content": {"application/json": {"schema": ref("BulkAction")}},
                },
                "responses": {
                    "200": json(
                        {"type": "object"},
                        "the action and how many runs it acted on (acted), or with dry_run"
                        " how many it would act on (matched)",
                    ),
                    **errors(400, 401, 403, 413, 415, 422),
                },
            }
        },
        "/api/runs/{run_id}/fork": {
            "post": {
                "summary": "A new run that reruns this one from a step",
                "parameters": [run_id],
                "requestBody": {
                    "required": True,
                    "content": {"application/json": {"schema": ref("ForkRun")}},
                },
                "responses": {
                    "201": json({"type": "object"}, "the new run's id"),
                    **errors(400, 401, 403, 404, 409, 413, 415, 422),
                },
            }
        },
    }


@dataclasses.dataclass(frozen=True)
class _Owner:
    """A run of ``owner``, as ``Principal.may_access`` takes it (a gate's run)."""

    owner: str | None
    id: str = ""


__all__ = ["APPROVAL_STATUSES", "BulkAction", "ForkRun", "Operating", "openapi_paths"]
