"""Following a run from a terminal as it happens (``plait start --wait``).

A person who starts a run and waits for it should see each step as it is reached and
ends, and, when the run stops moving, what it waits on and what would move it on (an
event to send, an approval to give, a worker to start). A terminal gets a live table; a
pipe or a log gets one plain line per change.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, Protocol, cast

from rich.console import Console, Group, RenderableType
from rich.live import Live
from rich.spinner import Spinner
from rich.table import Table
from rich.text import Text

from plait.cli.terminal import clean, compact, esc
from plait.durations import format_duration
from plait.notify import wait_event
from plait.records import SETTLED, Run, Step

if TYPE_CHECKING:
    from plait.engine import Engine

#: longest result shown beside a step while following (``plait runs show`` shows all)
RESULT_WIDTH = 80


class Reporter(Protocol):
    """Where a followed run's changes go."""

    def step(self, step: Step, origin: datetime) -> None: ...

    def waiting(self, what: str | None) -> None: ...

    def close(self) -> None: ...


def label(step: Step) -> str:
    """A step as the timeline names it: plait's own keys said in words, as the dashboard
    and ``plait fork --from`` name it (``Step.label``)."""
    return step.label


def detail(step: Step, width: int | None = RESULT_WIDTH) -> str:
    """What to say beside a step: its result, its error, or when it goes on."""
    if step.status == "failed" and step.error:
        text = compact(step.error.get("message", ""))
    elif step.status in ("scheduled", "pending") and step.wake_at is not None:
        until = f"{step.wake_at.astimezone(UTC):%H:%M:%S} UTC"
        if step.kind == "sleep":
            text = f"until {until}"
        elif step.kind in ("event", "approval"):
            text = f"waiting, until {until}"
        else:
            failed = compact(step.error.get("message", "")) if step.error else ""
            text = f"{failed}; next attempt at {until}" if failed else f"next attempt at {until}"
    elif step.kind == "send_event":  # its input is what wf.send_event recorded, a dict
        text = f"to run {cast(dict[str, Any], step.input or {}).get('run_id', '-')}"
    elif step.kind == "child":
        text = f"child run {step.child_run_id or '-'}"
        if step.status == "succeeded":
            text += f" -> {compact(step.output)}"
    elif step.status == "succeeded" and step.kind not in ("sleep", "suspend"):
        text = "" if step.output is None else compact(step.output)
    else:
        text = ""
    if width is not None and len(text) > width:
        text = text[: width - 1] + "…"
    return text


def waiting_on(
    run: Run,
    steps: list[Step],
    runs_as_job: Callable[[str], bool],
    children: Mapping[str, str] | None = None,
) -> str | None:
    """What a run that is not moving waits for, said with what would move it on; None
    while it moves. ``runs_as_job`` says whether a function's steps are job steps;
    ``children`` holds the status of child runs its steps wait for, where known."""
    rid = run.id
    if run.status == "queued":
        return "queued: waiting for a worker to admit it (plait worker APP)"
    if run.status == "needs_attention":
        parked = (run.error or {}).get("step", "?")
        return (
            f"needs attention: step {parked!r} failed its last attempt: plait retry {rid} "
            f"gives it a new budget, plait cancel {rid} ends the run"
        )
    for step in steps:
        if step.status in ("succeeded", "failed"):
            continue
        if step.kind == "event":
            name = step.key.removeprefix("__event:")
            until = ""
            if step.wake_at is not None:
                until = f" (until {step.wake_at.astimezone(UTC):%Y-%m-%d %H:%M:%S} UTC)"
            return (
                f"waiting for event {name!r}{until}: send it with "
                f"plait send-event {rid} {name} --data JSON"
            )
        if step.kind == "approval":
            name = step.key.removeprefix("__approval:")
            return f"waiting for approval {name!r}: plait approve {rid} {name} --data JSON"
        if step.kind == "suspend":
            return f"suspended: plait resume {rid}"
        if step.kind == "child" and step.child_run_id:
            if (children or {}).get(step.child_run_id) == "queued":
                return (
                    f"waiting for child run {step.child_run_id}, queued: waiting for a "
                    "worker to admit it (plait worker APP)"
                )
            return f"waiting for child run {step.child_run_id}"
        if step.function and step.status != "running" and runs_as_job(step.function):
            return f"step {step.key!r} waits for a step worker (plait worker APP)"
    return None


class LineReporter:
    """One plain line per change: for pipes, logs and CI."""

    def __init__(self, console: Console) -> None:
        self.console = console

    def step(self, step: Step, origin: datetime) -> None:
        offset = max(0.0, (step.updated_at - origin).total_seconds())
        tries = f" x{step.attempts}" if step.attempts > 1 else ""
        text = f"+{offset:.3f}s  {label(step)}  {step.status}{tries}"
        more = detail(step)
        if more:
            text += f"  {more}"
        self.console.print(esc(text, keep_newlines=False), highlight=False, soft_wrap=True)

    def waiting(self, what: str | None) -> None:
        if what is not None:
            self.console.print(esc(what), highlight=False, soft_wrap=True)

    def close(self) -> None:
        pass


_STYLE = {
    "succeeded": "green",
    "failed": "red",
    "running": "blue",
    "scheduled": "cyan",
    "pending": "dim",
}


class LiveReporter:
    """A table of steps that updates in place, under a spinner saying what the run is
    doing: for a terminal."""

    def __init__(self, console: Console) -> None:
        self.steps: dict[str, tuple[Step, datetime]] = {}
        self.what: str | None = None
        self.started = time.monotonic()
        self.live = Live(self._render(), console=console, refresh_per_second=8)
        self.live.start()

    def step(self, step: Step, origin: datetime) -> None:
        self.steps[step.key] = (step, origin)
        self.live.update(self._render())

    def waiting(self, what: str | None) -> None:
        self.what = what
        self.live.update(self._render())

    def close(self) -> None:
        self.what = None
        self.live.update(self._render(done=True))
        self.live.stop()

    def _render(self, done: bool = False) -> RenderableType:
        table = Table(box=None, show_header=True, pad_edge=False)
        for column in ("#", "step", "status", "took", "result"):
            table.add_column(column, overflow="fold", justify="right" if column == "#" else "left")
        for n, (step, _origin) in enumerate(self.steps.values(), 1):
            took = ""
            if step.status in ("succeeded", "failed"):
                took = format_duration(
                    max(0.0, (step.updated_at - step.created_at).total_seconds())
                )
            tries = f" x{step.attempts}" if step.attempts > 1 else ""
            table.add_row(
                str(n),
                Text(clean(label(step), keep_newlines=False)),
                Text(f"{step.status}{tries}", style=_STYLE.get(str(step.status), "")),
                took,
                Text(detail(step)),
            )
        if done:
            return table
        return Group(table, Spinner("dots", text=_StatusLine(self)))


class _StatusLine:
    """What the run is doing and for how long, drawn afresh at every refresh."""

    def __init__(self, reporter: LiveReporter) -> None:
        self.reporter = reporter

    def __rich__(self) -> Text:
        elapsed = format_duration(time.monotonic() - self.reporter.started)
        return Text(f"{self.reporter.what or 'running'}  ({elapsed})")


async def _children(engine: Engine, steps: list[Step]) -> dict[str, str]:
    """The status of the child run the first unsettled child step waits for: one read,
    and only while a child is waited for."""
    for step in steps:
        if step.kind == "child" and step.child_run_id and step.status == "running":
            child = await engine.store.get_run(step.child_run_id)
            return {} if child is None else {child.id: child.status}
    return {}


async def follow(
    engine: Engine,
    run_id: str,
    reporter: Reporter,
    *,
    runs_as_job: Callable[[str], bool] = lambda name: False,
) -> Run:
    """Report every change of ``run_id``'s steps until it settles (completed, failed,
    cancelled or suspended); returns the run. Woken by the engine's notifications,
    with short reads in between, since a long pass commits its steps before it ends."""
    seen: dict[str, tuple[object, ...]] = {}
    said: str | None = None
    pause = 0.05
    try:
        while True:
            event = engine.notifier.watch(run_id)
            try:
                run = await engine.get_run(run_id)
                steps = await engine.get_steps(run_id)
                changed = False
                for step in steps:
                    mark = (step.status, step.attempts, step.wake_at)
                    if seen.get(step.key) != mark:
                        seen[step.key] = mark
                        reporter.step(step, run.created_at)
                        changed = True
                if run.status in SETTLED:
                    return run
                what = waiting_on(run, steps, runs_as_job, await _children(engine, steps))
                if what != said:
                    said = what
                    reporter.waiting(what)
                pause = 0.05 if changed else min(1.0, pause * 1.5)
                await wait_event(event, pause)
            finally:
                engine.notifier.unwatch(run_id, event)
    finally:
        reporter.close()
