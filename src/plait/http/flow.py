"""The ``/api`` routes of flow control: schedules and queue depths.

A schedule made over HTTP belongs to the caller: only its owner sees and operates it,
and the runs it starts are the owner's, by the same rule as runs. Seeing or operating
(reading its input, pausing, resuming, triggering, deleting) any other schedule, another
user's, one declared in code or one made without an owner, needs the ``schedules``
scope; only an unrestricted caller replaces a shared one. A user owns at most
``max_schedules_per_user`` schedules, and without the ``admin`` scope makes none that
fires more often than once every ``MIN_INTERVAL_SECONDS``: a six-field cron could
otherwise start a run every second.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncGenerator
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from plait import schedules
from plait.engine import Engine
from plait.errors import ScheduleChangedError
from plait.http.auth import Principal
from plait.http.problems import ApiError, bad_input, from_plait, invalid, validate
from plait.http.schemas import CreateSchedule, json_body
from plait.records import Schedule

#: the fields of a schedule an engine error may name, most specific first
SCHEDULE_FIELDS = ("cron", "every", "timezone", "overlap", "catchup", "workflow", "name")

#: the shortest time between two ticks of a schedule a user without the ``admin`` scope
#: makes over HTTP
MIN_INTERVAL_SECONDS = 60.0
#: the schedules one user may own, unless ``create_app(max_schedules_per_user=...)`` says
MAX_SCHEDULES_PER_USER = 100
#: the times a schedule's creation decides again after another request stored that name
#: between its read and its write
_STORE_TRIES = 5
#: consecutive ticks looked at to find a schedule's shortest interval (a cron that fires
#: twice in a row a second apart shows within a few)
_TICKS_SAMPLED = 20


def may_operate(principal: Principal, schedule: Schedule) -> bool:
    """Her own schedule is the caller's; any other needs the ``schedules`` scope."""
    own = schedule.owner is not None and schedule.owner == principal.user
    return own or principal.has_scope("schedules")


#: deleting follows the rule of operating
may_delete = may_operate


def shortest_interval(spec: schedules.ScheduleSpec, now: float) -> float:
    """The shortest time between consecutive ticks of ``spec`` over its next few."""
    if spec.every is not None:
        return spec.every
    tick = spec.next_tick(now)
    shortest = float("inf")
    for _ in range(_TICKS_SAMPLED):
        following = spec.next_tick(tick)
        shortest = min(shortest, following - tick)
        tick = following
    return shortest


class FlowApi:
    """Schedules and queues for one engine; ``wrap`` authenticates and maps errors (the
    ``Api``'s own wrapper, so every route answers alike)."""

    def __init__(
        self, engine: Engine, wrap: Any, max_schedules_per_user: int = MAX_SCHEDULES_PER_USER
    ) -> None:
        if (
            isinstance(max_schedules_per_user, bool)
            or not isinstance(max_schedules_per_user, int)
            or max_schedules_per_user < 0
        ):
            raise ValueError(
                f"invalid max_schedules_per_user: {max_schedules_per_user!r} (an int, >= 0)"
            )
        self.engine = engine
        self.wrap = wrap
        self.max_schedules_per_user = max_schedules_per_user
        #: per user, the creation of a schedule going on now and how many wait for it:
        #: a user's creations are decided one after the other, so that two sent at once
        #: cannot both count the schedules she owns before either is stored
        self._creating: dict[str, tuple[asyncio.Lock, int]] = {}

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
            principal.require_scope("schedules", f"operating {_whose(schedule)}")
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
        overlap or catch-up is a 422 naming the field. Whether the caller may store over
        a schedule of that name is decided on what is stored, and the store writes only
        over what was read: a request that lost a race to another (another user's
        creation of the name) decides again on what that one stored, as if it came
        second."""
        body: CreateSchedule = validate(CreateSchedule, await json_body(request, empty={}))
        async with self._one_at_a_time(principal.user):
            return await self._store_schedule(principal, body)

    @contextlib.asynccontextmanager
    async def _one_at_a_time(self, user: str | None) -> AsyncGenerator[None, None]:
        """Hold ``user``'s creation lock (a lock per user with a creation going on, so
        the map holds no more than the requests in flight)."""
        key = user or ""
        lock, users = self._creating.get(key, (asyncio.Lock(), 0))
        self._creating[key] = (lock, users + 1)
        try:
            async with lock:
                yield
        finally:
            lock, users = self._creating[key]
            if users == 1:
                del self._creating[key]
            else:
                self._creating[key] = (lock, users - 1)

    async def _store_schedule(self, principal: Principal, body: CreateSchedule) -> Response:
        for _ in range(_STORE_TRIES):
            existing = self._may_store(principal, body, await self.engine.list_schedules())
            try:
                if not principal.has_scope("admin"):
                    self._check_interval(body)
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
                    replaces=existing,
                )
            except ScheduleChangedError:
                continue
            except (TypeError, ValueError) as exc:
                # an input over the limits answers as it does for a run (413, 422)
                raise (from_plait(exc) or bad_input(exc, _field(exc))) from None
            return JSONResponse(schedule.to_dict(), status_code=201)
        raise ApiError(
            409,
            "SCHEDULE_CHANGED",
            f"schedule {body.name!r} kept changing while it was stored: try again",
        )

    def _may_store(
        self, principal: Principal, body: CreateSchedule, stored: list[Schedule]
    ) -> Schedule | None:
        """The stored schedule of the body's name the caller may store over (None: there
        is none); 403 for one she may not, 429 for a new one past her cap."""
        existing = [s for s in stored if s.name == body.name]
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
        mine = [s for s in stored if s.owner is not None and s.owner == principal.user]
        new = body.name not in {s.name for s in mine}
        if not principal.unrestricted and new and len(mine) >= self.max_schedules_per_user:
            raise ApiError(
                429,
                "TOO_MANY_SCHEDULES",
                f"user {principal.user!r} owns {len(mine)} schedules, the most one user "
                f"may own (max_schedules_per_user={self.max_schedules_per_user}): "
                "delete one first",
                extra={"limit": self.max_schedules_per_user},
            )
        return existing[0] if existing else None

    def _check_interval(self, body: CreateSchedule) -> None:
        """422 naming ``cron`` or ``every`` for a schedule that fires more often than
        once every ``MIN_INTERVAL_SECONDS`` (a bad field raises as the engine would)."""
        spec = schedules.make_spec(
            body.name,
            workflow=body.workflow,
            cron=body.cron,
            every=body.every,
            timezone=body.timezone,
            overlap=body.overlap,
            catchup=body.catchup,
        )
        gap = shortest_interval(spec, self.engine.clock.now())
        if gap < MIN_INTERVAL_SECONDS:
            field = "every" if spec.every is not None else "cron"
            message = (
                f"schedule {spec.name!r} would fire every {gap:g}s: a schedule made over HTTP"
                f" fires at most once every {MIN_INTERVAL_SECONDS:g}s (the 'admin' scope may"
                " go below)"
            )
            raise invalid([{"field": field, "message": message}], "schedule")

    async def delete_schedule(self, request: Request, principal: Principal) -> Response:
        """Remove a schedule (204); the runs it started stay. The caller's own schedule
        is hers to delete; any other (another user's, a shared one, one declared in
        code, which comes back when a process that declares it opens) needs the
        ``schedules`` scope."""
        schedule = await self._named(request)
        if not may_delete(principal, schedule):
            principal.require_scope("schedules", f"deleting {_whose(schedule)}")
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
        """Per queue: runs waiting and runs holding a slot (counts only, no runs). The
        per-key lines name the keys of every user's runs (a customer, a tenant): only the
        ``admin`` scope sees them."""
        queues = await self.engine.queue_depths()
        if not principal.has_scope("admin"):
            queues = [{**queue, "keys": []} for queue in queues]
        return JSONResponse({"queues": queues})


def _whose(schedule: Schedule) -> str:
    if schedule.owner is not None:
        return "another user's schedule"
    return "a schedule declared in code" if schedule.source == "app" else "a shared schedule"


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


__all__ = [
    "MAX_SCHEDULES_PER_USER",
    "MIN_INTERVAL_SECONDS",
    "FlowApi",
    "may_delete",
    "may_operate",
    "shortest_interval",
]
