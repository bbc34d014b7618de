"""The ``plait`` command: start, inspect and act on runs; run workers and the server.

Every error is one line on stderr (``--debug`` shows tracebacks), every command that
reads runs has ``--json`` for scripts, and everything a run carries (names, results,
errors) is escaped before it reaches the terminal (``plait.terminal``).
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import re
import sys
from collections.abc import Callable, Coroutine, Sequence
from datetime import datetime
from pathlib import Path
from typing import Any, TypeVar, cast

import typer
from rich.console import Console
from rich.table import Table
from rich.text import Text
from typer.core import TyperGroup

from plait import __version__, loading
from plait.app import App
from plait.durations import format_duration, parse_duration
from plait.engine import DEFAULT_CONCURRENCY, Engine
from plait.errors import PlaitError
from plait.follow import LineReporter, LiveReporter, Reporter, detail, follow, label
from plait.logs import LOG_FORMATS
from plait.logs import configure as configure_logs
from plait.records import ApprovalDecision, ApprovalStatus, Run, Step, StepAttempt
from plait.store import redact, resolve_url
from plait.terminal import clean, esc, one_line, pretty
from plait.worker.retention import EndedStatus

T = TypeVar("T")


def _debug_from_environment() -> bool:
    return os.environ.get("PLAIT_DEBUG", "") not in ("", "0")


#: set by ``--debug``: errors show their traceback instead of one line
_DEBUG = {"on": _debug_from_environment()}
#: the base of the command-line parser's usage errors (Typer's own copy of click's, or
#: click's, depending on the Typer release)
_ClickException: type[Exception] = next(
    c for c in typer.BadParameter.__mro__ if c.__name__ == "ClickException"
)


class _OneLineErrors(TyperGroup):
    """Usage errors (a missing argument, an unknown option) as one line, like every
    other error of the command."""

    def main(  # type: ignore[override]
        self,
        args: Sequence[str] | None = None,
        prog_name: str | None = None,
        complete_var: str | None = None,
        standalone_mode: bool = True,
        **extra: Any,
    ) -> Any:
        if not standalone_mode:
            return super().main(args, prog_name, complete_var, standalone_mode, **extra)
        try:
            code = super().main(args, prog_name, complete_var, False, **extra)
        except _ClickException as exc:
            # click's exceptions come untyped through typer's re-export
            message = str(exc.format_message())  # type: ignore[attr-defined]  # pyright: ignore[reportUnknownMemberType, reportUnknownArgumentType]
            if message:  # (none: the help was asked for by giving no command, and shown)
                ctx: Any = getattr(exc, "ctx", None)
                where = f" (see {ctx.command_path} --help)" if ctx is not None else ""
                _print_error(message + where)
            sys.exit(exc.exit_code)  # type: ignore[attr-defined]
        except typer.Abort:
            _print_error("aborted")
            sys.exit(1)
        sys.exit(code if isinstance(code, int) else 0)


cli = typer.Typer(
    name="plait",
    cls=_OneLineErrors,
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
JsonOption = typer.Option(False, "--json", help="One JSON document on stdout, for scripts.")
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


def _version(value: bool) -> None:
    if value:
        print(f"plait {__version__}")
        raise typer.Exit()


@cli.callback()
def _options(
    version: bool = typer.Option(
        False, "--version", callback=_version, is_eager=True, help="Print the version."
    ),
    debug: bool = typer.Option(
        False, "--debug", help="Show the traceback of an error (also: PLAIT_DEBUG=1)."
    ),
) -> None:
    """Durable workflows: start runs, read their timelines, run workers."""
    _DEBUG["on"] = debug or _debug_from_environment()


class UsageError(Exception):
    """A bad argument: reported as one line, exit code 2."""


def _print_error(message: str) -> None:
    # soft_wrap: a one-line message stays one line in a log, however narrow the console
    err.print(f"[red]error:[/red] {esc(one_line(message))}", highlight=False, soft_wrap=True)


def fail(message: str, code: int = 2) -> None:
    _print_error(message)
    raise typer.Exit(code)


def load_app(ref: str) -> App:
    """The user's App, with every way the reference can be wrong as a one-line error,
    including the user's module failing as it is imported."""
    module = ref.partition(":")[0]
    try:
        return loading.load_app(ref)
    except loading.AppImportError as exc:
        if _DEBUG["on"]:
            raise
        raise UsageError(f"cannot import module {module!r}: {_import_failure(exc.error)}") from None
    except ImportError as exc:
        raise UsageError(f"cannot import module {module!r}: {exc}") from None
    except (ValueError, TypeError) as exc:
        raise UsageError(str(exc)) from None


def _import_failure(error: BaseException) -> str:
    """What went wrong in a user's module as it was imported, with the fix for the
    usual case: code meant for ``python shop.py`` that runs at import."""
    text = f"{type(error).__name__}: {error}"
    if isinstance(error, RuntimeError) and "asyncio.run()" in str(error):
        return (
            f"{text} (the module runs asyncio.run(...) when imported: put it under "
            'if __name__ == "__main__":)'
        )
    return f"{text} (--debug shows the traceback)"


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
    """Run a coroutine and turn every error into a one-line message (``--debug``: the
    traceback). plait's own errors are worded for people; anything else is named by its
    type."""
    try:
        return asyncio.run(make())
    except UsageError as exc:
        fail(str(exc))
    except typer.Exit:
        raise
    except KeyboardInterrupt:
        raise typer.Exit(130) from None
    except (PlaitError, ValueError, TypeError) as exc:
        if _DEBUG["on"]:
            raise
        fail(str(exc), 1)
    except Exception as exc:
        if _DEBUG["on"]:
            raise
        fail(f"{type(exc).__name__}: {exc} (--debug shows the traceback)", 1)
    raise AssertionError("unreachable")


def sqlite_path(url: str) -> Path | None:
    """The file of a SQLite URL (None: another database, or one in memory)."""
    for prefix in ("sqlite:///", "sqlite://"):
        if url.startswith(prefix):
            path = url[len(prefix) :]
            return None if path in ("", ":memory:") else Path(path)
    return None


def check_database(url: str, *, create: bool) -> None:
    """A command that only reads or acts on existing runs never creates a database: a
    missing SQLite file is an error naming it. One that may create it (start, worker,
    serve) needs the folder it goes in."""
    path = sqlite_path(url)
    if path is None:
        return
    if path.is_dir():
        raise UsageError(f"the database {clean(str(path))} is a folder, not a SQLite file")
    if path.exists():
        return
    if not create:
        raise UsageError(
            f"no database at {clean(str(path))} (commands that only read never create one; "
            "check --database or $PLAIT_DATABASE_URL)"
        )
    folder = path.parent if str(path.parent) else Path(".")
    if not folder.is_dir():
        raise UsageError(
            f"cannot create the database {clean(str(path))}: "
            f"the folder {clean(str(folder))} does not exist"
        )


def _engine(
    app: App | None, database: str | None, *, create: bool = False, **options: Any
) -> Engine:
    url = resolve_url(database)
    check_database(url, create=create)
    options.setdefault("workers", False)
    return Engine(app or App("cli"), url, **options)


def emit_json(document: Any) -> None:
    """One JSON document on stdout (ASCII-escaped: nothing in it can reach a terminal as
    a control character)."""
    print(json.dumps(document, default=str))


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
    as_json: bool = JsonOption,
    database: str | None = DatabaseOption,
) -> None:
    """Start a run and print its id; with --wait, run it here and show its steps.

    Without --wait the run is queued for `plait worker` processes; with a queue, a delay
    or a start time it waits (status queued) until a worker admits it. With --wait its
    steps are shown as they happen, and a run that waits for an event or an approval says
    so, and how to send it."""

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
        async with _engine(app, database, create=True) as engine:
            # a queued run is admitted by a worker; --wait then waits for it there
            rid = await engine.start(
                workflow, data, run_id=run_id, inline=wait and not queued, **flow
            )
            if not wait:
                if as_json:
                    emit_json({"run_id": rid})
                else:
                    console.print(esc(rid), highlight=False)
                return
            if as_json:
                run = await engine.wait(rid)
                emit_json({"run": run.to_dict(), "steps": _dicts(await engine.get_steps(rid))})
            else:
                console.print(esc(rid), highlight=False)  # first, so it can be used at once
                run = await _follow(engine, app, rid)
                _print_ending(run)
            if run.status != "completed":
                raise typer.Exit(1)

    run_async(go)


async def _follow(engine: Engine, app: App, run_id: str) -> Run:
    """Show the run's steps until it settles: a live table on a terminal, one line per
    change elsewhere."""
    reporter: Reporter = LiveReporter(console) if console.is_terminal else LineReporter(console)

    def queued(name: str) -> bool:
        fdef = app.functions.get(name)
        return fdef is not None and fdef.queued

    try:
        return await follow(engine, run_id, reporter, queued=queued)
    except asyncio.CancelledError:
        err.print(
            f"stopped following run {esc(run_id)}; it goes on (plait runs show {esc(run_id)})",
            highlight=False,
        )
        raise


def _print_ending(run: Run) -> None:
    console.print(f"run {esc(run.id)} {_status(run.status)}", highlight=False)
    if run.status == "completed":
        console.print(Text(pretty(run.output)))
    elif run.error:
        code = f" [{run.error.get('code')}]" if run.error.get("code") else ""
        where = f"step {run.error['step']!r}: " if run.error.get("step") else ""
        message = clean(str(run.error.get("message", "")))
        console.print(Text(f"{where}{message}{code}", style="red"))
        if run.status == "failed":
            console.print(f"the whole story: plait runs show {esc(run.id)}", highlight=False)


def _dicts(records: Sequence[Any]) -> list[dict[str, Any]]:
    return [r.to_dict() for r in records]


# -- reading --------------------------------------------------------------------------------


@runs_cli.command("list")
def runs_list(
    status: str | None = typer.Option(None, "--status", help="Filter by status."),
    workflow: str | None = typer.Option(None, "--workflow", help="Filter by workflow name."),
    version: str | None = typer.Option(None, "--version", help="Filter by workflow version."),
    limit: int = typer.Option(50, "--limit", min=1, max=10_000),
    offset: int = typer.Option(0, "--offset", min=0),
    as_json: bool = JsonOption,
    database: str | None = DatabaseOption,
) -> None:
    """List runs, newest first."""

    async def go() -> None:
        async with _engine(None, database) as engine:
            runs, total = await engine.count_runs(
                status=status, workflow=workflow, version=version, limit=limit, offset=offset
            )
        if as_json:
            emit_json({"runs": _dicts(runs), "total": total})
            return
        table = Table(title=f"{len(runs)} of {total} runs", title_justify="left")
        for column in ("run", "workflow", "version", "status", "started", "took"):
            table.add_column(column)
        for run in runs:
            table.add_row(
                esc(run.id),
                esc(run.workflow),
                esc(run.version or ""),
                _status(run.status),
                f"{run.created_at:%m-%d %H:%M:%S}",
                _took(run),
            )
        console.print(table)

    run_async(go)


@runs_cli.command("show")
def runs_show(
    run_id: str = typer.Argument(..., help="The run id."),
    as_json: bool = JsonOption,
    database: str | None = DatabaseOption,
) -> None:
    """A run's steps and every attempt, as a timeline.

    Results are shown in full, and so is the traceback of what failed."""

    async def go() -> None:
        async with _engine(None, database) as engine:
            run = await engine.get_run(run_id)
            steps = await engine.get_steps(run_id)
            history = await engine.get_history(run_id)
            children = await engine.get_children(run_id)
            values = await engine.get_values(run_id)
            decisions = await engine.get_decisions(run_id)
        if as_json:
            emit_json(
                {
                    "run": run.to_dict(),
                    "steps": _dicts(steps),
                    "attempts": _dicts(history),
                    "children": _dicts(children),
                    "values": values,
                    "decisions": _dicts(decisions),
                }
            )
            return
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
    """Print a run so that someone who never saw plait can follow what happened: every
    value in full, and the traceback of what failed."""
    console.rule(f"[bold]{esc(run.workflow)}[/bold]  run {esc(run.id)}")
    console.print(f"status   {_status(run.status)}   version {esc(run.version or '-')}")
    console.print(f"started  {run.created_at:%Y-%m-%d %H:%M:%S} UTC   took {_took(run)}")
    if run.parent_run_id:
        console.print(f"parent   {esc(run.parent_run_id)}")
    if run.forked_from:
        console.print(f"forked   from run {esc(run.forked_from)}")
    fields = Table.grid(padding=(0, 3))
    fields.add_column(style="bold")
    fields.add_column(overflow="fold")
    fields.add_row("input", Text(pretty(run.input)))
    if run.status == "completed":
        fields.add_row("output", Text(pretty(run.output)))
    if run.error:
        code = f" [{run.error.get('code')}]" if run.error.get("code") else ""
        fields.add_row("error", Text(f"{clean(str(run.error.get('message')))}{code}", "red"))
    console.print(fields)

    table = Table(title="Steps (in the order the workflow reached them)", title_justify="left")
    for column in ("#", "step", "function", "status", "result"):
        table.add_column(column, justify="right" if column == "#" else "left", overflow="fold")
    for n, step in enumerate(steps, 1):
        if step.status == "failed" and step.error:
            result = Text(clean(str(step.error.get("message"))), style="red")
        elif step.status == "succeeded" and step.kind in ("do", "on_error", "value", "event"):
            result = Text(pretty(step.output))
        else:
            result = Text(detail(step, width=None))
        tries = f" x{step.attempts}" if step.attempts > 1 else ""
        table.add_row(
            str(n),
            Text(clean(label(step))),
            Text(clean(step.function or ("(inline code)" if step.kind == "do" else ""))),
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
                outcome += f": {esc(a.error.get('message'))}"
            timeline.add_row(
                f"+{offset:.3f}s",
                Text(clean(a.key)),
                str(a.attempt),
                outcome,
                "" if took is None else format_duration(took),
            )
        console.print(timeline)
    _print_tracebacks(run, steps)
    for child in children:
        console.print(f"child run {esc(child.id)} ({esc(child.workflow)}) {_status(child.status)}")
    if values:
        table = Table(title="Published values", title_justify="left")
        table.add_column("key")
        table.add_column("value", overflow="fold")
        for key, value in values.items():
            table.add_row(Text(clean(key)), Text(pretty(value)))
        console.print(table)
    if decisions:
        table = Table(title="Approval decisions", title_justify="left")
        for column in ("at", "approval", "by", "outcome", "data"):
            table.add_column(column, overflow="fold")
        for d in decisions:
            style = {"accepted": "green", "refused": "red"}.get(d.outcome, "yellow")
            outcome = f"[{style}]{esc(d.outcome)}[/{style}]"
            if d.reason:
                outcome += f": {esc(d.reason.get('message'))}"
            table.add_row(
                f"{d.decided_at:%Y-%m-%d %H:%M:%S}",
                Text(clean(d.name)),
                Text(clean(d.decided_by or "-")),
                outcome,
                Text(pretty(d.data)),
            )
        console.print(table)


def _print_tracebacks(run: Run, steps: list[Step]) -> None:
    """Where each failure came from: the traceback stored with a failed step's error,
    and with the run's own error when no step's failure explains it."""
    shown: list[tuple[str, dict[str, Any]]] = [
        (f"step {step.key!r} failed", step.error)
        for step in steps
        if step.status == "failed" and step.error and step.error.get("traceback")
    ]
    if run.error and run.error.get("traceback") and not run.error.get("step"):
        shown.append((f"run {run.id} failed", run.error))
    for title, error in shown:
        console.rule(f"[red]{esc(title)}[/red]", align="left")
        console.print(Text(clean(str(error["traceback"]).rstrip())), highlight=False)


def _status(status: str) -> str:
    style = STATUS_STYLE.get(str(status), "")
    text = esc(status)
    return f"[{style}]{text}[/{style}]" if style else text


def _took(run: Run) -> str:
    if run.status not in ("completed", "failed", "cancelled"):
        return "-"
    return format_duration((run.updated_at - run.created_at).total_seconds())


# -- acting ---------------------------------------------------------------------------------


def _act(
    action: str,
    run_id: str,
    database: str | None,
    as_json: bool,
    reason: str | None = None,
) -> None:
    async def go() -> None:
        async with _engine(None, database) as engine:
            if action == "cancel":
                run = await engine.cancel(run_id, reason)
            elif action == "resume":
                run = await engine.resume(run_id)
            else:
                run = await engine.retry(run_id)
        if as_json:
            emit_json({"run": run.to_dict()})
        else:
            console.print(f"run {esc(run.id)} {_status(run.status)}", highlight=False)

    run_async(go)


@cli.command()
def cancel(
    run_id: str = typer.Argument(..., help="The run id."),
    reason: str | None = typer.Option(None, "--reason", help="Stored as the run's error."),
    as_json: bool = JsonOption,
    database: str | None = DatabaseOption,
) -> None:
    """Cancel a run and its child runs."""
    _act("cancel", run_id, database, as_json, reason)


@cli.command()
def resume(
    run_id: str = typer.Argument(..., help="The run id."),
    as_json: bool = JsonOption,
    database: str | None = DatabaseOption,
) -> None:
    """Resume a suspended run (workers continue it)."""
    _act("resume", run_id, database, as_json)


@cli.command()
def retry(
    run_id: str = typer.Argument(..., help="The run id."),
    as_json: bool = JsonOption,
    database: str | None = DatabaseOption,
) -> None:
    """Retry a failed run from the failed step (workers continue it)."""
    _act("retry", run_id, database, as_json)


@cli.command("send-event")
def send_event(
    run_id: str = typer.Argument(..., help="The run id."),
    name: str = typer.Argument(..., help="The event's name (wf.wait_for_event(name))."),
    data: str | None = typer.Option(None, "--data", help="The event's payload as JSON."),
    as_json: bool = JsonOption,
    database: str | None = DatabaseOption,
) -> None:
    """Send an event to a run (for its wf.wait_for_event(NAME)).

    A run that is not waiting for it yet gets it when it does."""

    async def go() -> None:
        payload = parse_json(data, "--data")
        async with _engine(None, database) as engine:
            waiting = await engine.send_event(run_id, name, payload)
        if as_json:
            emit_json({"run_id": run_id, "event": name, "waiting": waiting})
        elif waiting:
            console.print(f"event {esc(repr(name))} delivered to run {esc(run_id)}")
        else:
            console.print(
                f"event {esc(repr(name))} held for run {esc(run_id)}: it is not waiting for "
                "it now (it gets it when it does)"
            )

    run_async(go)


# -- schedules and queues -------------------------------------------------------------------


@schedules_cli.command("list")
def schedules_list(
    as_json: bool = JsonOption,
    database: str | None = DatabaseOption,
) -> None:
    """Every schedule with its next tick and its last run."""

    async def go() -> None:
        async with _engine(None, database) as engine:
            found = await engine.list_schedules()
        if as_json:
            emit_json({"schedules": _dicts(found)})
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
                last = f"{esc(item.last_run_id)} {_status(item.last_run_status or 'pruned')}"
            table.add_row(
                esc(item.name),
                esc(item.workflow),
                esc(when),
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
                console.print(esc(await engine.trigger_schedule(name)), highlight=False)
                return
            else:
                await engine.delete_schedule(name)
                console.print(f"schedule {esc(name)} deleted", highlight=False)
                return
        console.print(f"schedule {esc(item.name)} {_status(item.status)}", highlight=False)

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
    as_json: bool = JsonOption,
    database: str | None = DatabaseOption,
) -> None:
    """Runs waiting in each queue and runs holding its slots."""

    async def go() -> None:
        async with _engine(None, database) as engine:
            depths = await engine.queue_depths()
        if as_json:
            emit_json({"queues": depths})
            return
        table = Table(title="Queues", title_justify="left")
        for column in ("queue", "queued", "active"):
            table.add_column(column)
        for depth in depths:
            name = depth["queue"] if depth["queue"] is not None else "(delayed, no queue)"
            table.add_row(esc(name), str(depth["queued"]), str(depth["active"]))
        console.print(table)

    run_async(go)


# -- long-running processes -----------------------------------------------------------------


@cli.command()
def worker(
    app_ref: str = typer.Argument(..., metavar="APP", help="module:attribute of your plait.App"),
    concurrency: int = typer.Option(
        DEFAULT_CONCURRENCY, "--concurrency", "-c", min=1, help="Runs and steps at once."
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
        url = resolve_url(database)
        check_database(url, create=True)
        engine = Engine(
            app,
            url,
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
    as_json: bool = JsonOption,
    database: str | None = DatabaseOption,
) -> None:
    """Decide an approval gate of a run (held if the run has not reached it yet)."""

    async def go() -> None:
        payload = parse_json(data, "--data")
        async with _engine(None, database) as engine:
            decision = await engine.approve(run_id, name, payload, decided_by=by)
        if as_json:
            emit_json({"decision": decision.to_dict()})
            return
        console.print(
            f"approval {esc(repr(name))} of run {esc(run_id)}: {esc(decision.outcome)}",
            highlight=False,
        )

    run_async(go)


@approvals_cli.command("list")
def approvals_list(
    user: str | None = typer.Option(None, "--user", help="Only gates this user may decide."),
    status: str = typer.Option("open", "--status", help="open, decided or expired."),
    as_json: bool = JsonOption,
    database: str | None = DatabaseOption,
) -> None:
    """Approval gates of live runs, oldest first."""

    async def go() -> None:
        async with _engine(None, database) as engine:
            # the engine refuses any status but these, with a message naming them
            gates = await engine.list_approvals(status=cast(ApprovalStatus, status), user=user)
        if as_json:
            emit_json(_dicts(gates))
            return
        table = Table(title=f"{len(gates)} {status} approvals", title_justify="left")
        for column in ("run", "workflow", "approval", "approvers", "owner", "expires"):
            table.add_column(column, overflow="fold")
        for g in gates:
            table.add_row(
                esc(g.run_id),
                esc(g.workflow),
                esc(g.name),
                esc(g.approvers if isinstance(g.approvers, str) else ", ".join(g.approvers)),
                esc(g.owner or "-"),
                f"{g.expires_at:%Y-%m-%d %H:%M:%S}" if g.expires_at else "-",
            )
        console.print(table)

    run_async(go)


@cli.command()
def fork(
    run_id: str = typer.Argument(..., help="The run to fork."),
    from_step: str = typer.Option(..., "--from", help="The step key to run again from."),
    new_id: str | None = typer.Option(None, "--run-id", help="The new run's id."),
    as_json: bool = JsonOption,
    database: str | None = DatabaseOption,
) -> None:
    """A new run that keeps the results of the steps before --from and runs the rest
    again on the code deployed now (workers run it)."""

    async def go() -> None:
        async with _engine(None, database) as engine:
            forked = await engine.fork(run_id, from_step=from_step, run_id=new_id)
        if as_json:
            emit_json({"run_id": forked, "forked_from": run_id})
            return
        console.print(esc(forked), highlight=False)

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
    as_json: bool = JsonOption,
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
        if as_json:
            emit_json({"pruned": pruned})
            return
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
    as_json: bool = JsonOption,
    database: str | None = DatabaseOption,
) -> None:
    """Print a Mermaid diagram of a graph (or of a code workflow run's steps).

    A code workflow is drawn from what a run did: --run, else its latest run."""

    async def go() -> None:
        from plait.diagram import draw

        app = load_app(app_ref)
        url = resolve_url(database)
        path = sqlite_path(url)
        if run_id is None and path is not None and not path.exists():
            url = "sqlite:///:memory:"  # the app's own graphs need no database file
        async with _engine(app, url) as engine:
            drawing = await draw(engine, name, run_id)
        if as_json:
            run = drawing.run
            emit_json(
                {
                    "workflow": drawing.name,
                    "kind": drawing.kind,
                    "run_id": None if run is None else run.id,
                    "status": None if run is None else run.status,
                    "mermaid": drawing.mermaid,
                }
            )
            return
        console.print(clean(drawing.mermaid), markup=False, highlight=False)

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
        if _DEBUG["on"]:
            raise
        fail(str(exc) if "pip install" in str(exc) else f"plait.http cannot be imported: {exc}")
        return

    async def check() -> None:
        # imported inside a running loop, as every command does: a module that runs
        # asyncio.run(...) at import is refused instead of running its whole program
        load_app(app_ref)
        check_database(resolve_url(database), create=True)

    run_async(check)
    try:
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
