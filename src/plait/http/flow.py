"""The ``/api`` routes of flow control: schedules and queue depths.

A schedule made over HTTP belongs to the caller: only its owner (or an unrestricted
caller) sees and operates it, and the runs it starts are the owner's, by the same rule as
runs. Schedules declared in code or made without an owner are shared: anyone operates
them, only an unrestricted caller replaces them. Deleting a schedule that is not the
caller's own (another user's, a shared one, one declared in code) needs the
``schedules`` scope.
"""

from __future__ import annotations

from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from plait.engine import Engine
from plait.http.auth import Principal
from plait.http.problems import ApiError, bad_input, from_plait, validate
from plait.http.schemas import CreateSchedule, json_body
from plait.records import Schedule

#: the fields of a schedule an engine error may name, most specific first
SCHEDULE_FIELDS = ("cron", "every", "timezone", "overlap", "catchup", "workflow", "name")


def may_operate(principal: Principal, schedule: Schedule) -> bool:
    return principal.unrestricted or schedule.owner is None or schedule.owner == principal.user


def may_delete(principal: Principal, schedule: Schedule) -> bool:
    """A schedule is deleted by its owner, or with the ``schedules`` scope: a shared one
    (declared in code or made without an owner) is every user's to operate, and nobody's
    to take away from the others."""
    own = schedule.owner is not None and schedule.owner == principal.user
    return own or principal.has_scope("schedules")


class FlowApi:
    """Schedules and queues for one engine; ``wrap`` authenticates and maps errors (the
    ``Api``'s own wrapper, so every route answers alike)."""

    def __init__(self, engine: Engine, wrap: Any) -> None:
        self.engine = engine
        self.wrap = wrap

    def routes(self) -> list[Route]:
        return [
            Route("/schedules", self.wrap(self.list_schedules), methods=["GET"]),
            Route("/schedules", self.wrap(self.create_schedule), methods=["POST"]),
            Route("/schedules/{name}", self.wrap(self.get_schedule), methods=["GET"]),
            Route("/schedules/{name}", self.wrap(self.delete_schedule), methods=["DELETE"]),
            Route("/schedules/{name}/pause", self.wrap(self.pause), methods=["POST"]),
            Route("/schedules/{name}/resume", self.wrap(self.resume), methods=["POST"]),
            Route("/schedules/{name}/trigger", self.wrap(self.trigger), methods=["POST"]),
            Route("/queues", self.wrap(self.list_queues), methods=["GET"]),
        ]

    async def _named(self, request: Request) -> Schedule:
        """The schedule the path names. A name that breaks the rule for schedule names is
        a 422 naming it, like an event's or a gate's in their paths, rather than a lookup
        of text a store may not take."""
        try:
            return await self.engine.get_schedule(request.path_params["name"])
        except (TypeError, ValueError) as exc:
            raise bad_input(exc, "name") from None

    async def _schedule(self, request: Request, principal: Principal) -> Schedule:
        """The schedule the path names, if the caller may operate it."""
        schedule = await self._named(request)
        if not may_operate(principal, schedule):
            raise ApiError(403, "FORBIDDEN", f"schedule {schedule.name!r} belongs to another user")
        return schedule

    async def list_schedules(self, request: Request, principal: Principal) -> Response:
        """Schedules the caller may see, with next tick and last run."""
        found = await self.engine.list_schedules()
        return JSONResponse(
            {"schedules": [s.to_dict() for s in found if may_operate(principal, s)]}
        )

    async def get_schedule(self, request: Request, principal: Principal) -> Response:
        return JSONResponse((await self._schedule(request, principal)).to_dict())

    async def create_schedule(self, request: Request, principal: Principal) -> Response:
        """Store a schedule owned by the caller (201); a bad cron, time zone, interval,
        overlap or catch-up is a 422 naming the field."""
        body: CreateSchedule = validate(CreateSchedule, await json_body(request, empty={}))
        existing = [s for s in await self.engine.list_schedules() if s.name == body.name]
        if existing and not may_operate(principal, existing[0]):
            raise ApiError(403, "FORBIDDEN", f"schedule {body.name!r} belongs to another user")
        if existing and existing[0].owner is None and not principal.unrestricted:
            # shared to operate, not to own: storing over it would hand it, and the runs
            # it starts, to this caller, and change what every other user relies on
            raise ApiError(
                403,
                "FORBIDDEN",
                f"schedule {body.name!r} is shared (declared in code or made without an "
                "owner): only an unrestricted caller may replace it",
            )
        try:
            schedule = await self.engine.create_schedule(
                body.name,
                workflow=body.workflow,
                cron=body.cron,
                every=body.every,
                input=body.input,
                timezone=body.timezone,
                overlap=body.overlap,
                catchup=body.catchup,
                owner=principal.user,
            )
        except (TypeError, ValueError) as exc:
            # an input over the limits answers as it does for a run (413, 422)
            raise (from_plait(exc) or bad_input(exc, _field(exc))) from None
        return JSONResponse(schedule.to_dict(), status_code=201)

    async def delete_schedule(self, request: Request, principal: Principal) -> Response:
        """Remove a schedule (204); the runs it started stay. The caller's own schedule
        is hers to delete; any other (another user's, a shared one, one declared in
        code, which comes back when a process that declares it opens) needs the
        ``schedules`` scope."""
        schedule = await self._named(request)
        if not may_delete(principal, schedule):
            whose = (
                "another user's schedule"
                if schedule.owner is not None
                else "a schedule declared in code"
                if schedule.source == "app"
                else "a shared schedule"
            )
            principal.require_scope("schedules", f"deleting {whose}")
        await self.engine.delete_schedule(schedule.name)
        return Response(status_code=204)

    async def pause(self, request: Request, principal: Principal) -> Response:
        schedule = await self._schedule(request, principal)
        return JSONResponse((await self.engine.pause_schedule(schedule.name)).to_dict(), 202)

    async def resume(self, request: Request, principal: Principal) -> Response:
        schedule = await self._schedule(request, principal)
        return JSONResponse((await self.engine.resume_schedule(schedule.name)).to_dict(), 202)

    async def trigger(self, request: Request, principal: Principal) -> Response:
        """Start the schedule's workflow now; 202 with the new run's id."""
        schedule = await self._schedule(request, principal)
        run_id = await self.engine.trigger_schedule(schedule.name)
        return JSONResponse({"schedule": schedule.name, "run_id": run_id}, status_code=202)

    async def list_queues(self, request: Request, principal: Principal) -> Response:
        """Per queue: runs waiting and runs holding a slot (counts only, no runs)."""
        return JSONResponse({"queues": await self.engine.queue_depths()})


def _field(exc: Exception) -> str:
    text = str(exc)
    if "schedule name" in text:
        return "name"
    for name in SCHEDULE_FIELDS:
        if f"invalid {name}" in text or text.startswith(name) or f": {name} " in text:
            return name
    if "cron or every" in text:
        return "cron"
    return "body"


__all__ = ["FlowApi", "may_delete", "may_operate"]
