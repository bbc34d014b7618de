"""``plait start``: start a run; with ``--wait``, run it here and follow its steps."""

from __future__ import annotations

import asyncio
from typing import Any

import typer
from rich.text import Text

from plait.app import App
from plait.cli.app import (
    TAG_HELP,
    DatabaseOption,
    JsonOption,
    cli,
    console,
    dicts,
    emit_json,
    err,
    load_app,
    make_engine,
    parse_json,
    parse_tags,
    parse_time,
    positive_duration,
    run_async,
    status_markup,
)
from plait.cli.follow import LineReporter, LiveReporter, Reporter, follow
from plait.cli.terminal import clean, esc, pretty
from plait.engine import Engine
from plait.records import Run, WaitingOn


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
    dedup_policy: str = typer.Option(
        "skip",
        "--dedup-policy",
        help="With --dedup: skip (return the live run) or replace (cancel it, start this one).",
    ),
    delay: str | None = typer.Option(None, "--delay", help="Start later, e.g. 10m."),
    debounce: str | None = typer.Option(
        None,
        "--debounce",
        help="Share one waiting run with the starts of the same key; start this long after the"
        " last, e.g. 5s.",
    ),
    debounce_key: str | None = typer.Option(
        None, "--debounce-key", help="The key debounced starts share (default: the workflow)."
    ),
    debounce_max: str | None = typer.Option(
        None, "--debounce-max", help="Start at most this long after the first start, e.g. 1m."
    ),
    start_at: str | None = typer.Option(
        None, "--start-at", help="Start at this ISO 8601 time (with a time zone)."
    ),
    timeout: str | None = typer.Option(
        None, "--timeout", help="The run's deadline, e.g. 1h: past it the run fails RUN_TIMEOUT."
    ),
    tag: list[str] | None = typer.Option(None, "--tag", help=TAG_HELP),
    as_json: bool = JsonOption,
    database: str | None = DatabaseOption,
) -> None:
    """Start a run and print its id; with --wait, run it here and show its steps.

    Without --wait the run is left to `plait worker` processes; with a queue, a delay,
    a start time or --debounce it waits (status queued) until a worker admits it. With --wait its
    steps are shown as they happen, and a run that waits for an event or an approval says
    so, and how to send it."""

    async def go() -> None:
        app = load_app(app_ref)
        data = parse_json(input, "--input")
        when = parse_time(start_at, "--start-at")
        deadline = None if timeout is None else positive_duration(timeout, "--timeout")
        flow: dict[str, Any] = {
            "queue": queue,
            "key": key,
            "priority": priority,
            "dedup": dedup,
            "dedup_policy": dedup_policy,
            "delay": delay,
            "debounce": debounce,
            "debounce_key": debounce_key,
            "debounce_max": debounce_max,
            "start_at": when,
            "timeout": deadline,
            "tags": parse_tags(tag),
        }
        wdef = app.workflows.get(workflow)
        queued = queue is not None or delay is not None or when is not None
        queued = queued or debounce is not None
        queued = queued or (wdef is not None and wdef.queue is not None)
        async with make_engine(app, database, create=True) as engine:
            # a queued run is admitted by a worker; --wait then waits for it there
            rid = await engine.start(
                workflow, data, run_id=run_id, inline=wait and not queued, **flow
            )
            if not wait:
                waiting = await engine.waiting_on(rid)
                if as_json:
                    emit_json({"run_id": rid})
                else:
                    console.print(esc(rid), highlight=False)
                note = None if waiting is None else _note(waiting)
                if note is not None and not as_json:  # on stderr: stdout stays the id
                    err.print(f"[yellow]note:[/yellow] {note}", highlight=False)
                return
            if as_json:
                run = await engine.wait(rid)
                emit_json({"run": run.to_dict(), "steps": dicts(await engine.get_steps(rid))})
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

    def runs_as_job(name: str) -> bool:
        fdef = app.functions.get(name)
        return fdef is not None and fdef.queued

    try:
        return await follow(engine, run_id, reporter, runs_as_job=runs_as_job)
    except asyncio.CancelledError:
        err.print(
            f"stopped following run {esc(run_id)}; it goes on (plait runs show {esc(run_id)})",
            highlight=False,
        )
        raise


def _note(waiting: WaitingOn) -> str | None:
    """What to tell someone who started a run that nothing will move yet (None: it waits
    only for what it was started to wait for, a queue's turn or its start time)."""
    if waiting.kind == "no_worker":
        return (
            f"{esc(waiting.message)}: nothing will run workflow {esc(repr(waiting.name))} "
            "until a worker starts (plait worker APP, or plait start --wait)"
        )
    if waiting.kind in ("paused_workflow", "paused_queue"):
        return f"{esc(waiting.message)}: the run waits until it is resumed (plait unpause)"
    return None


def _print_ending(run: Run) -> None:
    console.print(f"run {esc(run.id)} {status_markup(run.status)}", highlight=False)
    if run.status == "completed":
        console.print(Text(pretty(run.output)))
    elif run.error:
        code = f" [{run.error.get('code')}]" if run.error.get("code") else ""
        where = f"step {run.error['step']!r}: " if run.error.get("step") else ""
        message = clean(str(run.error.get("message", "")))
        console.print(Text(f"{where}{message}{code}", style="red"))
        if run.status == "failed":
            console.print(f"the whole story: plait runs show {esc(run.id)}", highlight=False)
