"""The ``plait`` command: start, inspect and act on runs; run workers and the server."""

from __future__ import annotations

import asyncio
import json
import logging
import re
import sys
from collections.abc import Callable, Coroutine
from datetime import datetime
from typing import Any, TypeVar, cast

import typer
from rich.console import Console
from rich.table import Table

from plait import loading
from plait.app import App
from plait.durations import format_duration, parse_duration
from plait.engine import Engine
from plait.errors import PlaitError
from plait.logs import LOG_FORMATS
from plait.logs import configure as configure_logs
from plait.records import ApprovalDecision, ApprovalStatus, Run, Step, StepAttempt
from plait.retention import EndedStatus
from plait.store import redact

T = TypeVar("T")

cli = typer.Typer(
    name="plait",
    help="Durable workflows: start runs, read their timelines, run workers.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
runs_cli = typer.Typer(help="List, inspect and prune runs.", no_args_is_help=True)
cli.add_typer(runs_cli, name="runs")
schedules_cli = typer.Typer(help="List and operate schedules.", no_args_is_help=True)
cli.add_typer(schedules_cli, name="schedules")
approvals_cli = typer.Typer(help="Approval gates waiting for a person.", no_args_is_help=True)
cli.add_typer(approvals_cli, name="approvals")
# Piped output (logs, CI, less) gets a fixed width that fits a run id and a timeline row.
console = Console(width=None if sys.stdout.isatty() else 120)
err = Console(stderr=True, width=None if sys.stderr.isatty() else 120)

DatabaseOption = typer.Option(
    None, "--database", "-d", help="Database URL (default: $PLAIT_DATABASE_URL or plait.db)."
)
STATUS_STYLE = {
    "completed": "green",
    "succeeded": "green",
    "running": "blue",
    "scheduled": "cyan",
    "pending": "dim",
    "suspended": "yellow",
    "failed": "red",
    "cancelled": "magenta",
    "interrupted": "yellow",
    "queued": "cyan",
    "active": "blue",
    "paused": "yellow",
}


#: seconds past --drain that a stopping worker waits for step bodies it cannot cancel
STOP_GRACE = 2.0


class UsageError(Exception):
    """A bad argument: reported as one line, exit code 2."""


def fail(message: str, code: int = 2) -> None:
    # soft_wrap: a one-line message stays one line in a log, however narrow the console
    err.print(f"[red]error:[/red] {message}", highlight=False, soft_wrap=True)
    raise typer.Exit(code)


def load_app(ref: str) -> App:
    """The user's App, with every way the reference can be wrong as a one-line error."""
    try:
        return loading.load_app(ref)
    except ImportError as exc:
        module = ref.partition(":")[0]
        raise UsageError(f"cannot import module {module!r}: {exc}") from None
    except (ValueError, TypeError) as exc:
        raise UsageError(str(exc)) from None


_SIZE = re.compile(r"\s*(\d+)\s*([kmg]?)(i?b?)\s*", re.IGNORECASE)


def parse_size(text: str, what: str) -> int:
    """``"1048576"``, ``"512KiB"``, ``"1MiB"``, ``"2MB"`` or ``"64k"`` as bytes (K, M and G
    count in 1024s either way: these are limits, not disk sizes)."""
    match = _SIZE.fullmatch(text)
    if match is None or int(match[1]) < 1:
        raise UsageError(f"{what} must be a size such as 1048576, 512KiB or 1MiB, got {text!r}")
    return int(match[1]) * {"": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30}[match[2].lower()]


def parse_json(text: str | None, what: str) -> Any:
    if text is None:
        return None
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise UsageError(f"{what} is not valid JSON: {exc.msg} at position {exc.pos}") from None


def parse_time(text: str | None, what: str) -> datetime | None:
    """An aware datetime from ISO 8601 text; a time without a zone is refused."""
    if text is None:
        return None
    try:
        moment = datetime.fromisoformat(text)
    except ValueError:
        raise UsageError(f"{what} is not an ISO 8601 time: {text!r}") from None
    if moment.tzinfo is None:
        raise UsageError(f"{what} {text!r} has no time zone (add Z or +02:00)")
    return moment


def run_async(make: Callable[[], Coroutine[Any, Any, T]]) -> T:
    """Run a coroutine and turn plait's own errors into one-line messages."""
    try:
        return asyncio.run(make())
    except UsageError as exc:
        fail(str(exc))
    except (PlaitError, ValueError, TypeError) as exc:
        fail(str(exc), 1)
    raise AssertionError("unreachable")


def _engine(app: App | None, database: str | None, **options: Any) -> Engine:
    options.setdefault("workers", False)
    return Engine(app or App("cli"), database, **options)


# -- starting -------------------------------------------------------------------------------


@cli.command()
def start(
    app_ref: str = typer.Argument(..., metavar="APP", help="module:attribute of your plait.App"),
    workflow: str = typer.Argument(..., help="Workflow or graph name."),
    input: str | None = typer.Option(None, "--input", "-i", help="Input as JSON."),
    wait: bool = typer.Option(
        False, "--wait", "-w", help="Run it in this process and wait for the output."
    ),
    run_id: str | None = typer.Option(None, "--run-id", help="Idempotency key for the run."),
    queue: str | None = typer.Option(None, "--queue", help="Admit the run through this queue."),
    key: str | None = typer.Option(None, "--key", help="The run's key (for per_key limits)."),
    priority: int = typer.Option(0, "--priority", help="Higher is admitted first."),
    dedup: str | None = typer.Option(
        None, "--dedup", help="Return the live run with this de-duplication key instead."
    ),
    delay: str | None = typer.Option(None, "--delay", help="Start later, e.g. 10m."),
    start_at: str | None = typer.Option(
        None, "--start-at", help="Start at this ISO 8601 time (with a time zone)."
    ),
    database: str | None = DatabaseOption,
) -> None:
    """Start a run. Without --wait it is queued for `plait worker` processes; with a queue,
    a delay or a start time it waits (status queued) until a worker admits it."""

    async def go() -> None:
        app = load_app(app_ref)
        data = parse_json(input, "--input")
        when = parse_time(start_at, "--start-at")
        flow: dict[str, Any] = {
            "queue": queue,
            "key": key,
            "priority": priority,
            "dedup": dedup,
            "delay": delay,
            "start_at": when,
        }
        wdef = app.workflows.get(workflow)
        queued = queue is not None or delay is not None or when is not None
        queued = queued or (wdef is not None and wdef.queue is not None)
        async with _engine(app, database) as engine:
            # a queued run is admitted by a worker; --wait then waits for it there
            rid = await engine.start(
                workflow, data, run_id=run_id, inline=wait and not queued, **flow
            )
            if not wait:
                console.print(rid)
                return
            run = await engine.wait(rid)
            console.print(f"run {rid} {run.status}")
            if run.status == "completed":
                console.print_json(json.dumps(run.output))
            else:
                console.print_json(json.dumps(run.error))
                raise typer.Exit(1)

    run_async(go)


# -- reading --------------------------------------------------------------------------------


@runs_cli.command("list")
def runs_list(
    status: str | None = typer.Option(None, "--status", help="Filter by status."),
    workflow: str | None = typer.Option(None, "--workflow", help="Filter by workflow name."),
    version: str | None = typer.Option(None, "--version", help="Filter by workflow version."),
    limit: int = typer.Option(50, "--limit", min=1, max=10_000),
    offset: int = typer.Option(0, "--offset", min=0),
    database: str | None = DatabaseOption,
) -> None:
    """List runs, newest first."""

    async def go() -> None:
        async with _engine(None, database) as engine:
            runs, total = await engine.count_runs(
                status=status, workflow=workflow, version=version, limit=limit, offset=offset
            )
        table = Table(title=f"{len(runs)} of {total} runs", title_justify="left")
        for column in ("run", "workflow", "version", "status", "started", "took"):
            table.add_column(column)
        for run in runs:
            table.add_row(
                run.id,
                run.workflow,
                run.version or "",
                _status(run.status),
                f"{run.created_at:%m-%d %H:%M:%S}",
                _took(run),
            )
        console.print(table)

    run_async(go)


@runs_cli.command("show")
def runs_show(
    run_id: str = typer.Argument(..., help="The run id."),
    database: str | None = DatabaseOption,
) -> None:
    """A run's steps and every attempt, as a timeline."""

    async def go() -> None:
        async with _engine(None, database) as engine:
            run = await engine.get_run(run_id)
            steps = await engine.get_steps(run_id)
            history = await engine.get_history(run_id)
            children = await engine.get_children(run_id)
            values = await engine.get_values(run_id)
            decisions = await engine.get_decisions(run_id)
        render_run(run, steps, history, children, values, decisions)

    run_async(go)


def render_run(
    run: Run,
    steps: list[Step],
    history: list[StepAttempt],
    children: list[Run],
    values: dict[str, Any] | None = None,
    decisions: list[ApprovalDecision] | None = None,
) -> None:
    """Print a run so that someone who never saw plait can follow what happened."""
    console.rule(f"[bold]{run.workflow}[/bold]  run {run.id}")
    console.print(f"status   {_status(run.status)}   version {run.version or '-'}")
    console.print(f"started  {run.created_at:%Y-%m-%d %H:%M:%S} UTC   took {_took(run)}")
    if run.parent_run_id:
        console.print(f"parent   {run.parent_run_id}")
    if run.forked_from:
        console.print(f"forked   from run {run.forked_from}")
    console.print(f"input    {_short(run.input, 100)}")
    if run.status == "completed":
        console.print(f"output   {_short(run.output, 100)}")
    if run.error:
        code = f" [{run.error.get('code')}]" if run.error.get("code") else ""
        console.print(f"[red]error[/red]    {run.error.get('message')}{code}")

    table = Table(title="Steps (in the order the workflow reached them)", title_justify="left")
    for column in ("#", "step", "function", "status", "result"):
        table.add_column(column, justify="right" if column == "#" else "left")
    for n, step in enumerate(steps, 1):
        if step.status == "failed" and step.error:
            result = f"[red]{_short(step.error.get('message'), 40)}[/red]"
        elif step.kind == "sleep" and step.status != "succeeded" and step.wake_at:
            result = f"sleeping until {step.wake_at:%H:%M:%S}"
        elif step.kind == "child":
            result = f"child run {step.child_run_id or '-'}"
            if step.status == "succeeded":
                result += f" -> {_short(step.output, 30)}"
        else:
            result = _short(step.output, 40) if step.status == "succeeded" else ""
        tries = f" x{step.attempts}" if step.attempts > 1 else ""
        table.add_row(
            str(n),
            _label(step),
            step.function or ("(inline code)" if step.kind == "do" else ""),
            _status(step.status) + tries,
            result,
        )
    console.print(table)

    if history:
        origin = run.created_at
        timeline = Table(title="Timeline of attempts", title_justify="left")
        for column in ("at", "step", "attempt", "outcome", "took"):
            timeline.add_column(column, overflow="fold")
        for a in history:
            offset = (a.started_at - origin).total_seconds()
            took = (a.finished_at - a.started_at).total_seconds() if a.finished_at else None
            outcome = _status(a.status)
            if a.error:
                outcome += f": {_short(a.error.get('message'), 50)}"
            timeline.add_row(
                f"+{offset:.3f}s",
                a.key,
                str(a.attempt),
                outcome,
                "" if took is None else format_duration(took),
            )
        console.print(timeline)
    for child in children:
        console.print(f"child run {child.id} ({child.workflow}) {_status(child.status)}")
    if values:
        table = Table(title="Published values", title_justify="left")
        table.add_column("key")
        table.add_column("value", overflow="fold")
        for key, value in values.items():
            table.add_row(key, _short(value, 100))
        console.print(table)
    if decisions:
        table = Table(title="Approval decisions", title_justify="left")
        for column in ("at", "approval", "by", "outcome", "data"):
            table.add_column(column, overflow="fold")
        for d in decisions:
            style = {"accepted": "green", "refused": "red"}.get(d.outcome, "yellow")
            outcome = f"[{style}]{d.outcome}[/{style}]"
            if d.reason:
                outcome += f": {_short(d.reason.get('message'), 60)}"
            table.add_row(
                f"{d.decided_at:%Y-%m-%d %H:%M:%S}",
                d.name,
                d.decided_by or "-",
                outcome,
                _short(d.data, 60),
            )
        console.print(table)


def _label(step: Step) -> str:
    if step.kind == "approval":
        return f"approval: {step.key.removeprefix('__approval:')}"
    if step.kind == "set_value":
        return f"set value: {step.key.removeprefix('__value:')}"
    if step.kind == "suspend":
        return f"suspend: {step.key.removeprefix('__suspend:')}"
    if step.kind == "event":
        return f"wait for event: {step.key.removeprefix('__event:')}"
    if step.kind == "value":
        return step.key.removeprefix("__")
    if step.kind == "sleep":
        return f"sleep: {step.key}"
    if step.kind == "child":
        return f"{step.key} (child run)"
    return step.key


def _status(status: str) -> str:
    style = STATUS_STYLE.get(str(status), "")
    return f"[{style}]{status}[/{style}]" if style else str(status)


def _short(value: Any, width: int) -> str:
    text = value if isinstance(value, str) else json.dumps(value, default=str)
    text = text.replace("[", "\\[")
    return text if len(text) <= width else text[: width - 1] + "…"


def _took(run: Run) -> str:
    if run.status not in ("completed", "failed", "cancelled"):
        return "-"
    return format_duration((run.updated_at - run.created_at).total_seconds())


# -- acting ---------------------------------------------------------------------------------


def _act(action: str, run_id: str, database: str | None, reason: str | None = None) -> None:
    async def go() -> None:
        async with _engine(None, database) as engine:
            if action == "cancel":
                run = await engine.cancel(run_id, reason)
            elif action == "resume":
                run = await engine.resume(run_id)
            else:
                run = await engine.retry(run_id)
        console.print(f"run {run.id} {_status(run.status)}")

    run_async(go)


@cli.command()
def cancel(
    run_id: str = typer.Argument(..., help="The run id."),
    reason: str | None = typer.Option(None, "--reason", help="Stored as the run's error."),
    database: str | None = DatabaseOption,
) -> None:
    """Cancel a run and its child runs."""
    _act("cancel", run_id, database, reason)


@cli.command()
def resume(
    run_id: str = typer.Argument(..., help="The run id."), database: str | None = DatabaseOption
) -> None:
    """Resume a suspended run (workers continue it)."""
    _act("resume", run_id, database)


@cli.command()
def retry(
    run_id: str = typer.Argument(..., help="The run id."), database: str | None = DatabaseOption
) -> None:
    """Retry a failed run from the failed step (workers continue it)."""
    _act("retry", run_id, database)


# -- schedules and queues -------------------------------------------------------------------


@schedules_cli.command("list")
def schedules_list(
    as_json: bool = typer.Option(False, "--json", help="One JSON document on stdout."),
    database: str | None = DatabaseOption,
) -> None:
    """Every schedule with its next tick and its last run."""

    async def go() -> None:
        async with _engine(None, database) as engine:
            found = await engine.list_schedules()
        if as_json:
            print(json.dumps({"schedules": [s.to_dict() for s in found]}))
            return
        table = Table(title=f"{len(found)} schedules", title_justify="left")
        for column in ("schedule", "workflow", "when", "status", "next tick", "last run"):
            table.add_column(column)
        for item in found:
            when = item.cron or f"every {format_duration(item.every or 0)}"
            if item.timezone != "UTC":
                when += f" ({item.timezone})"
            last = "-"
            if item.last_run_id:
                last = f"{item.last_run_id} {_status(item.last_run_status or 'pruned')}"
            table.add_row(
                item.name,
                item.workflow,
                when,
                _status(item.status),
                f"{item.next_tick:%Y-%m-%d %H:%M:%S} UTC" if item.next_tick else "-",
                last,
            )
        console.print(table)

    run_async(go)


def _schedule_action(action: str, name: str, database: str | None) -> None:
    async def go() -> None:
        async with _engine(None, database) as engine:
            if action == "pause":
                item = await engine.pause_schedule(name)
            elif action == "resume":
                item = await engine.resume_schedule(name)
            elif action == "trigger":
                console.print(await engine.trigger_schedule(name))
                return
            else:
                await engine.delete_schedule(name)
                console.print(f"schedule {name} deleted")
                return
        console.print(f"schedule {item.name} {_status(item.status)}")

    run_async(go)


@schedules_cli.command("pause")
def schedules_pause(
    name: str = typer.Argument(..., help="The schedule's name."),
    database: str | None = DatabaseOption,
) -> None:
    """Start nothing until resumed."""
    _schedule_action("pause", name, database)


@schedules_cli.command("resume")
def schedules_resume(
    name: str = typer.Argument(..., help="The schedule's name."),
    database: str | None = DatabaseOption,
) -> None:
    """Fire again from the next tick (ticks missed while paused are not caught up)."""
    _schedule_action("resume", name, database)


@schedules_cli.command("trigger")
def schedules_trigger(
    name: str = typer.Argument(..., help="The schedule's name."),
    database: str | None = DatabaseOption,
) -> None:
    """Start the schedule's workflow now; prints the run id."""
    _schedule_action("trigger", name, database)


@schedules_cli.command("delete")
def schedules_delete(
    name: str = typer.Argument(..., help="The schedule's name."),
    database: str | None = DatabaseOption,
) -> None:
    """Remove the schedule (its runs stay)."""
    _schedule_action("delete", name, database)


@cli.command()
def queues(
    as_json: bool = typer.Option(False, "--json", help="One JSON document on stdout."),
    database: str | None = DatabaseOption,
) -> None:
    """Runs waiting in each queue and runs holding its slots."""

    async def go() -> None:
        async with _engine(None, database) as engine:
            depths = await engine.queue_depths()
        if as_json:
            print(json.dumps({"queues": depths}))
            return
        table = Table(title="Queues", title_justify="left")
        for column in ("queue", "queued", "active"):
            table.add_column(column)
        for depth in depths:
            name = depth["queue"] if depth["queue"] is not None else "(delayed, no queue)"
            table.add_row(name, str(depth["queued"]), str(depth["active"]))
        console.print(table)

    run_async(go)


# -- long-running processes -----------------------------------------------------------------


@cli.command()
def worker(
    app_ref: str = typer.Argument(..., metavar="APP", help="module:attribute of your plait.App"),
    concurrency: int = typer.Option(
        64, "--concurrency", "-c", min=1, help="Runs and steps at once."
    ),
    lease: float = typer.Option(2.0, "--lease", min=0.1, help="Lease length in seconds."),
    worker_id: str | None = typer.Option(
        None, "--worker-id", help="Stable name: a restarted worker takes back its runs at once."
    ),
    drain: float = typer.Option(10.0, "--drain", min=0.0, help="Seconds to finish work on stop."),
    max_payload: str = typer.Option(
        "1MiB", "--max-payload", help="Largest step result or state value to store."
    ),
    retain: str | None = typer.Option(
        None,
        "--retain",
        help="Prune ended runs older than this (e.g. 30d) in the background.",
    ),
    log_format: str = typer.Option(
        "text",
        "--log-format",
        help="text, or json: one object per line with run_id, step and attempt.",
    ),
    metrics_port: int | None = typer.Option(
        None,
        "--metrics-port",
        min=1,
        max=65535,
        help="Serve Prometheus metrics at http://HOST:PORT/metrics (extra 'metrics').",
    ),
    metrics_host: str = typer.Option("127.0.0.1", "--metrics-host", help="Address to bind."),
    tracing: bool = typer.Option(
        False, "--tracing", help="OpenTelemetry spans for passes and attempts (extra 'otel')."
    ),
    database: str | None = DatabaseOption,
) -> None:
    """Work the queues of a database until SIGTERM or SIGINT."""
    retain_seconds = _duration(retain, "--retain") if retain is not None else None
    if log_format not in LOG_FORMATS:
        fail(f"invalid --log-format {log_format!r}: use one of {', '.join(LOG_FORMATS)}")
    if metrics_port is not None and not _installed("prometheus_client"):
        fail("--metrics-port needs the 'metrics' extra: pip install 'plait[metrics]'")
    if tracing and not _installed("opentelemetry"):
        fail("--tracing needs the 'otel' extra: pip install 'plait[otel]'")
    configure_logs(log_format)

    async def go() -> None:
        app = load_app(app_ref)
        engine = Engine(
            app,
            database,
            workers=True,
            concurrency=concurrency,
            lease_seconds=lease,
            worker_id=worker_id,
            max_payload=parse_size(max_payload, "--max-payload"),
            retain=retain_seconds,
            tracing=tracing,
            metrics=metrics_port is not None,
            log_work=True,
        )
        server = None
        if metrics_port is not None:
            from plait.metrics_server import serve_metrics

            try:
                server = await serve_metrics(engine, metrics_host, metrics_port)
            except OSError as exc:
                raise UsageError(
                    f"cannot serve metrics on --metrics-port {metrics_port}: {exc.strerror}"
                ) from None
        await engine.open()
        logging.getLogger("plait.worker").info(
            "worker %s working %s (concurrency %d)",
            engine.worker_id,
            redact(engine.url),
            concurrency,
        )

        async def close(seconds: float) -> None:
            await engine.close(drain=seconds)
            if server is not None:
                server.close()

        await engine.worker.run_until_signal(close, drain=drain, grace=STOP_GRACE)

    run_async(go)


def _duration(text: str, option: str) -> float:
    try:
        seconds = parse_duration(text, what=option)
    except (TypeError, ValueError) as exc:
        fail(str(exc))
        raise
    if seconds <= 0:
        fail(f"{option} must be more than 0, got {text!r}")
    return seconds


# -- approvals, fork, retention -------------------------------------------------------------


@cli.command()
def approve(
    run_id: str = typer.Argument(..., help="The run id."),
    name: str = typer.Argument(..., help="The approval's name (wf.approval(name, ...))."),
    data: str | None = typer.Option(None, "--data", help="The decision's data as JSON."),
    by: str | None = typer.Option(None, "--by", help="Who decides (the user id recorded)."),
    database: str | None = DatabaseOption,
) -> None:
    """Decide an approval gate of a run (held if the run has not reached it yet)."""

    async def go() -> None:
        payload = parse_json(data, "--data")
        async with _engine(None, database) as engine:
            decision = await engine.approve(run_id, name, payload, decided_by=by)
        console.print(f"approval {name!r} of run {run_id}: {decision.outcome}")

    run_async(go)


@approvals_cli.command("list")
def approvals_list(
    user: str | None = typer.Option(None, "--user", help="Only gates this user may decide."),
    status: str = typer.Option("open", "--status", help="open, decided or expired."),
    as_json: bool = typer.Option(False, "--json", help="One JSON document on stdout."),
    database: str | None = DatabaseOption,
) -> None:
    """Approval gates of live runs, oldest first."""

    async def go() -> None:
        async with _engine(None, database) as engine:
            # the engine refuses any status but these, with a message naming them
            gates = await engine.list_approvals(status=cast(ApprovalStatus, status), user=user)
        if as_json:
            print(json.dumps([g.to_dict() for g in gates]))
            return
        table = Table(title=f"{len(gates)} {status} approvals", title_justify="left")
        for column in ("run", "workflow", "approval", "approvers", "owner", "expires"):
            table.add_column(column, overflow="fold")
        for g in gates:
            table.add_row(
                g.run_id,
                g.workflow,
                g.name,
                g.approvers if isinstance(g.approvers, str) else ", ".join(g.approvers),
                g.owner or "-",
                f"{g.expires_at:%Y-%m-%d %H:%M:%S}" if g.expires_at else "-",
            )
        console.print(table)

    run_async(go)


@cli.command()
def fork(
    run_id: str = typer.Argument(..., help="The run to fork."),
    from_step: str = typer.Option(..., "--from", help="The step key to run again from."),
    new_id: str | None = typer.Option(None, "--run-id", help="The new run's id."),
    database: str | None = DatabaseOption,
) -> None:
    """A new run that keeps the results of the steps before --from and runs the rest
    again on the code deployed now (workers run it)."""

    async def go() -> None:
        async with _engine(None, database) as engine:
            forked = await engine.fork(run_id, from_step=from_step, run_id=new_id)
        console.print(forked)

    run_async(go)


@runs_cli.command("prune")
def runs_prune(
    older_than: str = typer.Option(
        ..., "--older-than", help="Age of the runs to delete, e.g. 30d."
    ),
    status: list[str] = typer.Option(
        ["completed", "cancelled", "failed"],
        "--status",
        help="Ended statuses to prune (repeat the option).",
    ),
    database: str | None = DatabaseOption,
) -> None:
    """Delete ended runs (with their steps, events, values and child runs) last updated
    longer ago than --older-than, in short batches."""
    seconds = _duration(older_than, "--older-than")

    async def go() -> None:
        async with _engine(None, database) as engine:
            # the engine refuses any status but these, with a message naming them
            pruned = await engine.prune(
                older_than=seconds, statuses=cast(list[EndedStatus], status)
            )
        console.print(f"pruned {pruned} runs")

    run_async(go)


def _installed(module: str) -> bool:
    """Whether ``module`` can be imported, without importing it."""
    import importlib.util

    return importlib.util.find_spec(module) is not None


@cli.command()
def graph(
    app_ref: str = typer.Argument(..., metavar="APP", help="module:attribute of your plait.App"),
    name: str = typer.Argument(..., help="Graph or workflow name."),
    run_id: str | None = typer.Option(None, "--run", help="Colour or draw this run's steps."),
    database: str | None = DatabaseOption,
) -> None:
    """Print a Mermaid diagram of a graph (or of a code workflow run's steps)."""

    async def go() -> None:
        from plait.diagram import diagram_for

        app = load_app(app_ref)
        async with _engine(app, database) as engine:
            console.print(await diagram_for(engine, name, run_id), markup=False, highlight=False)

    run_async(go)


@cli.command()
def serve(
    app_ref: str = typer.Argument(..., metavar="APP", help="module:attribute of your plait.App"),
    host: str = typer.Option("127.0.0.1", "--host"),
    port: int = typer.Option(8000, "--port", min=1, max=65535),
    no_auth: bool = typer.Option(False, "--no-auth", help="Serve without tokens (local use)."),
    max_body: str = typer.Option(
        "1MiB", "--max-body", help="Largest request body (and stored value), e.g. 512KiB."
    ),
    allowed_host: list[str] = typer.Option(
        [],
        "--allowed-host",
        help="A host name clients use to reach this server (behind a proxy); repeatable.",
    ),
    log_level: str = typer.Option("info", "--log-level", help="debug, info, warning, error."),
    metrics: bool | None = typer.Option(
        None,
        "--metrics/--no-metrics",
        help="Prometheus metrics at /metrics (default: on when prometheus-client is installed).",
    ),
    tracing: bool = typer.Option(
        False, "--tracing", help="OpenTelemetry spans for passes and attempts (extra 'otel')."
    ),
    database: str | None = DatabaseOption,
) -> None:
    """Serve the JSON API and the dashboard. Tokens come from PLAIT_TOKENS
    ("user:token" or "user:token:scope+scope", comma-separated)."""
    try:
        from plait.http import serve as serve_http
    except ImportError as exc:
        fail(f"the HTTP server needs the 'http' extra (pip install 'plait[http]'): {exc}")
        return
    try:
        load_app(app_ref)
        size = parse_size(max_body, "--max-body")
        if log_level.lower() not in ("critical", "error", "warning", "info", "debug", "trace"):
            raise UsageError(
                f"--log-level must be debug, info, warning or error, not {log_level!r}"
            )
    except UsageError as exc:
        fail(str(exc))
        return
    if metrics is None:
        metrics = _installed("prometheus_client")
    elif metrics and not _installed("prometheus_client"):
        fail("--metrics needs the 'metrics' extra: pip install 'plait[metrics]'")
    if tracing and not _installed("opentelemetry"):
        fail("--tracing needs the 'otel' extra: pip install 'plait[otel]'")
    try:
        serve_http(
            app_ref,
            host=host,
            port=port,
            database=database,
            no_auth=no_auth,
            log_level=log_level.lower(),
            max_body=size,
            allowed_hosts=allowed_host,
            metrics=metrics,
            tracing=tracing,
        )
    except (PlaitError, ValueError, TypeError) as exc:
        # a bad database URL or PLAIT_TOKENS entry: one line (its messages hide secrets)
        fail(str(exc), 1)


def main() -> None:
    cli()


if __name__ == "__main__":
    main()
