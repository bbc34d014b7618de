"""Schedules: when a workflow starts on a clock, decided the same way by every process.

A schedule is data (a cron expression or an interval, a time zone, an overlap policy, a
catch-up window) stored in the database, so a schedule made at run time is seen by every
worker. Each tick has one run id, ``schedule:<name>:<tick in ISO 8601 UTC>``; workers
that race on a tick create the same id, so exactly one run starts, and the schedule's
next tick moves by a compare-and-set on its row.

Everything here is pure: which ticks fall between two instants, how a wall-clock time
becomes an instant across daylight-saving changes, which missed ticks a catch-up starts.
The worker and the stores only move rows.

Daylight saving, explicitly:

* a wall-clock time that does not exist on a day (the clock jumps from 03:00 to 04:00, a
  tick at 03:30) fires once, at the jump (04:00 local); several such ticks become one;
* a wall-clock time that happens twice (the clock falls back from 04:00 to 03:00, a tick
  at 03:30) fires once, at its first occurrence.

So a daily job never runs twice and never silently skips a day. A schedule that fires
every few minutes pauses for the repeated hour; ``every=`` (a fixed interval) or
``timezone="UTC"`` keep a steady beat.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from cronsim import CronSim, CronSimError

from plait import serde
from plait.durations import parse_duration
from plait.ids import SCHEDULE_RUN_ID_PREFIX, check_name, check_run_id

OVERLAP_POLICIES = ("skip", "allow")
#: a tick at most this many seconds late is on time, whatever ``catchup`` says: the
#: ordinary lateness of a busy worker is not downtime
ON_TIME = 2.0
#: the most ticks one look at a schedule starts (a catch-up window of a year at one
#: second would otherwise start millions at once)
MAX_TICKS = 1000
#: the prefix of every run id a schedule makes
RUN_ID_PREFIX = SCHEDULE_RUN_ID_PREFIX


@dataclasses.dataclass(frozen=True)
class ScheduleSpec:
    """What a schedule does; ``cron`` or ``every`` is set, never both."""

    name: str
    workflow: str
    input: Any = None
    cron: str | None = None
    every: float | None = None
    timezone: str = "UTC"
    overlap: str = "skip"
    catchup: float = 0.0
    #: the queue the workflow was registered with where the schedule was stored: a
    #: process that lacks the workflow (the command line) admits a tick's run through it
    queue: str | None = None

    def definition(self) -> str:
        """The stored form of what the schedule does (its name aside), as JSON text: a
        process that declares the same schedule with other options replaces it."""
        stored: dict[str, Any] = {
            "workflow": self.workflow,
            "input": self.input,
            "cron": self.cron,
            "every": self.every,
            "timezone": self.timezone,
            "overlap": self.overlap,
            "catchup": self.catchup,
        }
        if self.queue is not None:  # absent otherwise: older definitions stay the same
            stored["queue"] = self.queue
        return json.dumps(stored, sort_keys=True, separators=(",", ":"))

    def next_tick(self, after: float) -> float:
        """The first tick strictly after ``after`` (unix seconds)."""
        if self.every is not None:
            return (int(after // self.every) + 1) * self.every
        assert self.cron is not None
        return next_cron_tick(self.cron, zone(self.timezone), after)

    def ticks(self, start: float, end: float) -> Iterator[float]:
        """Ticks in ``[start, end]``, oldest first (``start`` is a tick or a lower bound)."""
        tick = start if self.is_tick(start) else self.next_tick(start)
        while tick <= end:
            yield tick
            tick = self.next_tick(tick)

    def is_tick(self, at: float) -> bool:
        return self.next_tick(at - 1e-6) == at


def zone(name: str) -> ZoneInfo:
    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError):
        raise ValueError(
            f"invalid timezone {name!r} (use an IANA name like 'Europe/Helsinki')"
        ) from None


def local_to_instant(wall: datetime, tz: ZoneInfo) -> float:
    """The instant (unix seconds) of a naive wall-clock time in ``tz``, by the rules in
    this module's docstring: a time in a gap fires at the jump, a repeated one at its
    first occurrence."""
    first = wall.replace(tzinfo=tz, fold=0)
    second = wall.replace(tzinfo=tz, fold=1)
    if first.utcoffset() == second.utcoffset():
        return first.timestamp()
    exists = first.astimezone(UTC).astimezone(tz).replace(tzinfo=None) == wall
    if exists:
        return first.timestamp()  # repeated: the first occurrence (fold=0)
    # In a gap: fold=1 reads the wall time with the offset after the jump (an instant
    # before it), fold=0 with the offset before (an instant after it). The jump lies
    # between; find it to the second.
    low, high = second.timestamp(), first.timestamp()
    after = second.utcoffset()
    while high - low > 0.5:
        mid = (low + high) / 2
        if datetime.fromtimestamp(mid, tz).utcoffset() == after:
            high = mid
        else:
            low = mid
    return float(round(high))


def next_cron_tick(expression: str, tz: ZoneInfo, after: float) -> float:
    """The first instant strictly after ``after`` at which ``expression`` fires in ``tz``.

    Cron is read on naive wall-clock times (so the parser's own DST handling never runs),
    and each match becomes an instant by ``local_to_instant``. The walk starts a few hours
    before ``after``'s wall time, because after a fall-back the wall clock reads earlier
    than it did an hour ago.
    """
    wall = datetime.fromtimestamp(after, tz).replace(tzinfo=None) - timedelta(hours=3)
    for match in CronSim(expression, wall):
        instant = local_to_instant(match, tz)
        if instant > after:
            return instant
    raise ValueError(f"cron {expression!r} never fires")  # pragma: no cover - cronsim ends


def check_cron(expression: object) -> str:
    if not isinstance(expression, str):
        raise TypeError(f"cron must be a string, got {type(expression).__name__} {expression!r}")
    fields = expression.split()
    if len(fields) not in (5, 6):
        raise ValueError(
            f"invalid cron {expression!r}: 5 fields (minute hour day month weekday), or 6 "
            "with seconds first"
        )
    try:
        next(iter(CronSim(expression, datetime(2000, 1, 1))))
    except CronSimError as exc:
        raise ValueError(f"invalid cron {expression!r}: {exc}") from None
    except StopIteration:  # pragma: no cover - cronsim raises instead
        raise ValueError(f"invalid cron {expression!r}: it never fires") from None
    return " ".join(fields)


def make_spec(
    name: object,
    *,
    workflow: object,
    input: Any = None,
    cron: object = None,
    every: object = None,
    timezone: object = "UTC",
    overlap: object = "skip",
    catchup: object = "0s",
    limits: serde.Limits | None = None,
) -> ScheduleSpec:
    """A ``ScheduleSpec`` from what a user wrote, or an error naming the bad field. With
    ``limits`` (an engine's), the input must fit them: every run of the schedule gets
    it, so it is refused once, here, rather than at every tick."""
    sname = check_name(name, "schedule name", limit=MAX_NAME)
    if ":" in sname:
        raise ValueError(
            f"invalid schedule name {sname!r}: no ':' (it separates the parts of a run id)"
        )
    try:  # the ids of its runs must be run ids like any other (they travel in URLs)
        check_run_id(run_id_for(sname, 0.5))
    except ValueError:
        raise ValueError(
            f"invalid schedule name {sname!r}: use at most {MAX_NAME} letters, digits and"
            " . _ @ + = ~ - (it is part of the ids of the schedule's runs)"
        ) from None
    if not isinstance(workflow, str) or not workflow:
        raise TypeError(f"schedule {sname!r}: workflow must be a workflow name, got {workflow!r}")
    if (cron is None) == (every is None):
        raise ValueError(f"schedule {sname!r}: give cron or every (one of them)")
    expression = None if cron is None else check_cron(cron)
    interval = None
    if every is not None:
        interval = parse_duration(every, what=f"every of schedule {sname!r}")
        if interval < 1:
            raise ValueError(f"invalid every of schedule {sname!r}: {every!r} (at least 1s)")
    if not isinstance(timezone, str):
        raise TypeError(f"schedule {sname!r}: timezone must be a string, got {timezone!r}")
    zone(timezone)
    if overlap not in OVERLAP_POLICIES:
        raise ValueError(
            f"invalid overlap of schedule {sname!r}: {overlap!r} (use 'skip' or 'allow')"
        )
    window = parse_duration(catchup, what=f"catchup of schedule {sname!r}")
    # stored as JSON (a model or a dataclass as its JSON form): fail here, naming it
    stored = serde.roundtrip(input, what=f"the input of schedule {sname!r}", limits=limits)
    return ScheduleSpec(
        sname, workflow, stored, expression, interval, timezone, str(overlap), window
    )


def due_ticks(spec: ScheduleSpec, next_tick: float, now: float) -> tuple[list[float], float]:
    """The ticks to start now and the schedule's next tick afterwards.

    Ticks from ``next_tick`` up to ``now`` are due; those later than the catch-up window
    (``spec.catchup``, at least ``ON_TIME``) are skipped, the rest start oldest first, at
    most ``MAX_TICKS`` at a time (the rest wait for the next look).
    """
    window = max(spec.catchup, ON_TIME)
    oldest = now - window
    start = next_tick if next_tick >= oldest else spec.next_tick(oldest - 1e-6)
    ticks: list[float] = []
    for tick in spec.ticks(start, now):
        ticks.append(tick)
        if len(ticks) == MAX_TICKS:
            return ticks, spec.next_tick(tick)
    return ticks, spec.next_tick(now)


def run_id_for(name: str, tick: float) -> str:
    """``schedule:<name>:<tick in ISO 8601 UTC>``, milliseconds only when the tick has them."""
    return f"{RUN_ID_PREFIX}{name}:{iso_tick(tick)}"


def iso_tick(tick: float) -> str:
    moment = datetime.fromtimestamp(tick, UTC)
    if moment.microsecond:
        return moment.strftime("%Y-%m-%dT%H:%M:%S.") + f"{moment.microsecond // 1000:03d}Z"
    return moment.strftime("%Y-%m-%dT%H:%M:%SZ")


#: the longest schedule name: what is left of a run id's 200 characters once the prefix
#: and the longest tick (with milliseconds) are in it
MAX_NAME = 200 - len(run_id_for("", 0.5))


__all__ = [
    "MAX_TICKS",
    "ON_TIME",
    "OVERLAP_POLICIES",
    "ScheduleSpec",
    "check_cron",
    "due_ticks",
    "iso_tick",
    "local_to_instant",
    "make_spec",
    "next_cron_tick",
    "run_id_for",
    "zone",
]
