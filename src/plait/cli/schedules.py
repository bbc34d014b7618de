"""``plait schedules``: list them, pause, resume, trigger or delete one."""

from __future__ import annotations

import typer
from rich.table import Table

from plait.cli.app import (
    DatabaseOption,
    JsonOption,
    console,
    dicts,
    emit_json,
    make_engine,
    run_async,
    schedules_cli,
    status_markup,
)
from plait.cli.terminal import esc
from plait.durations import format_duration


@schedules_cli.command("list")
def schedules_list(
    as_json: bool = JsonOption,
    database: str | None = DatabaseOption,
) -> None:
    """Every schedule with its next tick and its last run."""

    async def go() -> None:
        async with make_engine(None, database) as engine:
            found = await engine.list_schedules()
        if as_json:
            emit_json({"schedules": dicts(found)})
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
                last = f"{esc(item.last_run_id)} {status_markup(item.last_run_status or 'pruned')}"
            table.add_row(
                esc(item.name),
                esc(item.workflow),
                esc(when),
                status_markup(item.status),
                f"{item.next_tick:%Y-%m-%d %H:%M:%S} UTC" if item.next_tick else "-",
                last,
            )
        console.print(table)

    run_async(go)


def _schedule_action(action: str, name: str, database: str | None) -> None:
    async def go() -> None:
        async with make_engine(None, database) as engine:
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
        console.print(f"schedule {esc(item.name)} {status_markup(item.status)}", highlight=False)

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
