"""What a live run waits on inside itself: an event, an approval, a sleep, a child run, a
resume, its queue's admission or its start time. A run list that says only ``running``
for a run that waits for a person hides the one thing its reader needs to know; this
names it from the run's open steps (``Engine.waiting_on`` puts brakes and missing
workers first, as they hold a run whatever it waits on).

Pure rules over records: the engine reads the open steps of a page of runs in one read
(``Store.waiting_steps``) and hands them here.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any, cast

from plait.queues import DEFAULT_QUEUE
from plait.records import Run, RunSummary, Step, WaitingOn

#: the kinds of step a run waits on rather than works through
WAIT_KINDS: tuple[str, ...] = ("event", "approval", "sleep", "child", "suspend")
#: the statuses of a step that has not ended
OPEN_STATUSES: tuple[str, ...] = ("pending", "scheduled", "running")
#: the run statuses whose open steps say what they wait on
STEPPED: tuple[str, ...] = ("running", "suspended")


def run_wait(run: Run | RunSummary, steps: Sequence[Step], now: datetime) -> WaitingOn | None:
    """What ``run`` waits on, from its status and ``steps`` (its open steps of
    ``WAIT_KINDS``, in step order; the first one says it); None while it moves."""
    if run.status == "queued":
        return _queued(run, now)
    if run.status == "suspended":
        return WaitingOn("resume", run.id, "suspended until it is resumed")
    if run.status != "running":
        return None
    for step in steps:
        if step.kind == "event":
            name = _event_name(step)
            return WaitingOn(
                "event", name, f"waiting for event {name!r}" + _until(step), step.wake_at
            )
        if step.kind == "approval":
            name = step.key.removeprefix("__approval:")
            return WaitingOn("approval", name, f"waiting for approval {name!r}", step.wake_at)
        if step.kind == "sleep" and step.wake_at is not None:
            return WaitingOn(
                "sleep", step.key, f"sleeping until {_utc(step.wake_at)}", step.wake_at
            )
        if step.kind == "child" and step.child_run_id:
            child = step.child_run_id
            return WaitingOn("child", child, f"waiting for child run {child}")
    return None


def _queued(run: Run | RunSummary, now: datetime) -> WaitingOn:
    queue = run.queue or DEFAULT_QUEUE
    if run.start_at is not None and run.start_at > now:
        return WaitingOn("start", queue, f"starts at {_utc(run.start_at)}", run.start_at)
    return WaitingOn("admission", queue, f"waiting for queue {queue!r} to admit it")


def _event_name(step: Step) -> str:
    """The event a wait step waits for: recorded in its input, else said by its key."""
    given: Any = step.input
    if isinstance(given, dict):
        name = cast(dict[str, Any], given).get("event")
        if isinstance(name, str):
            return name
    return step.key.removeprefix("__event:")


def _until(step: Step) -> str:
    return "" if step.wake_at is None else f" until {_utc(step.wake_at)}"


def _utc(at: datetime) -> str:
    return f"{at.astimezone(UTC):%Y-%m-%d %H:%M:%S} UTC"
