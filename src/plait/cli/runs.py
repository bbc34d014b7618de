"""``plait runs``: list runs, show one as a timeline (``render_run``), prune ended runs."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any, cast

import typer
from rich.table import Table
from rich.text import Text

from plait.cli.app import (
    FILTER_TAG_HELP,
    RUN_ID_HELP,
    DatabaseOption,
    JsonOption,
    console,
    dicts,
    emit_json,
    find_run_id,
    make_engine,
    parse_tags,
    positive_duration,
    run_async,
    run_took,
    runs_cli,
    status_markup,
)
from plait.cli.follow import detail, label
from plait.cli.terminal import clean, esc, pretty
from plait.durations import format_duration
from plait.records import ApprovalDecision, Run, Step, StepAttempt, WaitingOn
from plait.worker.retention import EndedStatus


@runs_cli.command("list")
def runs_list(
    status: str | None = typer.Option(None, "--status", help="Filter by status."),
    workflow: str | None = typer.Option(None, "--workflow", help="Filter by workflow name."),
    version: str | None = typer.Option(None, "--version", help="Filter by workflow version."),
    limit: int = typer.Option(50, "--limit", min=1, max=10_000),
    offset: int = typer.Option(0, "--offset", min=0),
    hide_continued: bool = typer.Option(
        False,
        "--hide-continued",
        help="Leave out runs that continued as new: of each chain, only its last run.",
    ),
    tag: list[str] | None = typer.Option(None, "--tag", help=FILTER_TAG_HELP),
    as_json: bool = JsonOption,
    database: str | None = DatabaseOption,
) -> None:
    """List runs, newest first."""
    tags = parse_tags(tag)

    async def go() -> None:
        async with make_engine(None, database) as engine:
            runs, total = await engine.count_runs(
                status=status,
                workflow=workflow,
                version=version,
                hide_continued=hide_continued,
                tags=tags,
                limit=limit,
                offset=offset,
            )
            waiting = await engine.waiting_on_runs(runs)
        if as_json:
            listed = [
                {**run.to_dict(), "waiting_on": _waiting_dict(waiting.get(run.id))} for run in runs
            ]
            emit_json({"runs": listed, "total": total})
            return
        table = Table(title=f"{len(runs)} of {total} runs", title_justify="left")
        columns = ["run", "workflow", "version", "status", "started", "took", "tags"]
        for column in [*columns, *(["waiting on"] if waiting else [])]:
            table.add_column(column, no_wrap=column == "run")
        for run in runs:
            cells: list[str | Text] = [
                esc(run.id),
                esc(run.workflow),
                esc(run.version or ""),
                status_markup(run.status),
                f"{run.created_at:%m-%d %H:%M:%S}",
                run_took(run),
                Text(clean(format_tags(run.tags))),
            ]
            if waiting:
                why = waiting.get(run.id)
                cells.append(Text(clean(_short(why))) if why is not None else "")
            table.add_row(*cells)
        console.print(table)

    run_async(go)


@runs_cli.command("show")
def runs_show(
    run_id: str = typer.Argument(..., help=RUN_ID_HELP),
    as_json: bool = JsonOption,
    database: str | None = DatabaseOption,
) -> None:
    """A run's steps and every attempt, as a timeline.

    Results are shown in full, and so is the traceback of what failed."""

    async def go() -> None:
        nonlocal run_id  # the whole id of what was given
        async with make_engine(None, database) as engine:
            run_id = await find_run_id(engine, run_id)
            run = await engine.get_run(run_id)
            steps = await engine.get_steps(run_id)
            history = await engine.get_history(run_id)
            children = await engine.get_children(run_id)
            values = await engine.get_values(run_id)
            decisions = await engine.get_decisions(run_id)
            waiting = await engine.waiting_on(run)
        if as_json:
            emit_json(
                {
                    "run": run.to_dict(),
                    "waiting_on": _waiting_dict(waiting),
                    "steps": dicts(steps),
                    "attempts": dicts(history),
                    "children": dicts(children),
                    "values": values,
                    "decisions": dicts(decisions),
                }
            )
            return
        render_run(run, steps, history, children, values, decisions, waiting)

    run_async(go)


def format_tags(tags: dict[str, str]) -> str:
    """A run's tags on one line, as ``--tag`` takes them: ``k=v k2=v2``."""
    return " ".join(f"{key}={value}" for key, value in sorted(tags.items()))


#: the "waiting on" column of ``runs list``, short (``runs show`` says it in full)
_WAITING_SHORT = {
    "paused_workflow": "paused workflow",
    "paused_queue": "paused queue",
    "no_worker": "no live worker",
    "budget": "budget spent",
    "event": "event",
    "approval": "approval",
    "sleep": "sleep",
    "child": "child run",
    "resume": "resume",
    "admission": "queue",
    "start": "start time",
}


def _short(why: WaitingOn) -> str:
    """A run's "waiting on" cell: the kind, and the event's or the approval's name."""
    named = why.kind in ("event", "approval")
    return _WAITING_SHORT[why.kind] + (f" {why.name}" if named else "")


def _waiting_dict(waiting: WaitingOn | None) -> dict[str, Any] | None:
    return None if waiting is None else waiting.to_dict()


def _deadline(run: Run) -> str:
    """When the run must have ended (and its timeout, which a retry counts again), and
    how long it has left while it is live."""
    when = f"{run.deadline_at:%Y-%m-%d %H:%M:%S} UTC"
    if run.timeout is not None:
        when += f"   (timeout {format_duration(run.timeout)})"
    if run.status.is_terminal or run.deadline_at is None:
        return when
    left = (run.deadline_at - datetime.now(UTC)).total_seconds()
    return f"{when}   ({format_duration(left)} left)" if left > 0 else f"{when}   (passed)"


def render_run(
    run: Run,
    steps: list[Step],
    history: list[StepAttempt],
    children: list[Run],
    values: dict[str, Any] | None = None,
    decisions: list[ApprovalDecision] | None = None,
    waiting: WaitingOn | None = None,
) -> None:
    """Print a run so that someone who never saw plait can follow what happened: every
    value in full, and the traceback of what failed."""
    console.rule(f"[bold]{esc(run.workflow)}[/bold]  run {esc(run.id)}")
    console.print(f"status   {status_markup(run.status)}   version {esc(run.version or '-')}")
    if waiting is not None:
        console.print(f"waiting  [yellow]{esc(waiting.message)}[/yellow]")
    console.print(f"started  {run.created_at:%Y-%m-%d %H:%M:%S} UTC   took {run_took(run)}")
    if run.parent_run_id:
        console.print(f"parent   {esc(run.parent_run_id)}")
    if run.forked_from:
        console.print(f"forked   from run {esc(run.forked_from)}")
    if run.continued_from:
        console.print(f"continues run {esc(run.continued_from)}")
    if run.continued_to:
        console.print(f"continued as new in run {esc(run.continued_to)}")
    if run.deadline_at is not None:
        console.print(f"deadline {_deadline(run)}")
    if run.tags:
        console.print(Text(f"tags     {clean(format_tags(run.tags))}"))
    patches = [s.key.removeprefix("__patch:") for s in steps if s.kind == "patch"]
    if patches:  # markers, not work: said once here, not as rows of the table
        console.print(f"patches  {esc(', '.join(patches))}")
    steps = [s for s in steps if s.kind != "patch"]
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
            status_markup(step.status) + tries,
            result,
        )
    console.print(table)

    if history:
        origin = run.created_at
        timeline = Table(title="Timeline of attempts", title_justify="left")
        for column in ("at", "step", "attempt", "outcome", "took", "worker"):
            timeline.add_column(column, overflow="fold")
        for a in history:
            offset = (a.started_at - origin).total_seconds()
            took = (a.finished_at - a.started_at).total_seconds() if a.finished_at else None
            outcome = status_markup(a.status)
            if a.error:
                outcome += f": {esc(a.error.get('message'))}"
            timeline.add_row(
                f"+{offset:.3f}s",
                Text(clean(a.key)),
                str(a.attempt),
                outcome,
                "" if took is None else format_duration(took),
                Text(clean(a.worker or "-")),
            )
        console.print(timeline)
    _print_tracebacks(run, steps)
    for child in children:
        console.print(
            f"child run {esc(child.id)} ({esc(child.workflow)}) {status_markup(child.status)}"
        )
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


@runs_cli.command("prune")
def runs_prune(
    older_than: str = typer.Option(
        ..., "--older-than", help="Age of the runs to delete, e.g. 30d."
    ),
    status: list[str] = typer.Option(
        ["completed", "cancelled", "failed", "continued"],
        "--status",
        help="Ended statuses to prune (repeat the option).",
    ),
    as_json: bool = JsonOption,
    database: str | None = DatabaseOption,
) -> None:
    """Delete ended runs (with their steps, events, values and child runs) last updated
    longer ago than --older-than, in short batches."""
    seconds = positive_duration(older_than, "--older-than")

    async def go() -> None:
        async with make_engine(None, database) as engine:
            # the engine refuses any status but these, with a message naming them
            pruned = await engine.prune(
                older_than=seconds, statuses=cast(list[EndedStatus], status)
            )
        if as_json:
            emit_json({"pruned": pruned})
            return
        console.print(f"pruned {pruned} runs")

    run_async(go)
