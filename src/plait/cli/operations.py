"""``plait pause`` / ``plait unpause`` (a workflow or a queue, for every process) and
``plait workers`` (the worker registry)."""

from __future__ import annotations

from typing import Literal

import typer
from rich.table import Table

from plait.cli.app import (
    DatabaseOption,
    JsonOption,
    cli,
    console,
    dicts,
    emit_json,
    fail,
    make_engine,
    run_async,
)
from plait.cli.terminal import esc

#: what ``plait pause`` and ``plait unpause`` act on
Kind = Literal["workflow", "queue"]


def _kind(kind: str) -> Kind:
    if kind not in ("workflow", "queue"):
        fail(f"unknown kind {kind!r}: pause a 'workflow' or a 'queue'")
    return "workflow" if kind == "workflow" else "queue"


@cli.command()
def pause(
    kind: str = typer.Argument(..., metavar="workflow|queue"),
    name: str = typer.Argument(..., help="The workflow's or the queue's name."),
    database: str | None = DatabaseOption,
) -> None:
    """Pause a workflow or a queue in every process: new runs wait queued, running runs
    stop after the step they are in and wait paused until `plait unpause`."""
    which = _kind(kind)

    async def go() -> None:
        async with make_engine(None, database) as engine:
            if which == "workflow":
                moved = await engine.pause_workflow(name)
            else:
                moved = await engine.pause_queue(name)
        console.print(
            f"paused {which} {esc(name)}: {len(moved)} runs paused now; runs in a step "
            "stop after it"
        )

    run_async(go)


@cli.command()
def unpause(
    kind: str = typer.Argument(..., metavar="workflow|queue"),
    name: str = typer.Argument(..., help="The workflow's or the queue's name."),
    database: str | None = DatabaseOption,
) -> None:
    """Resume a paused workflow or queue: its paused runs go on where they stopped."""
    which = _kind(kind)

    async def go() -> None:
        async with make_engine(None, database) as engine:
            paused = {(p["kind"], p["name"]) for p in await engine.list_paused()}
            if (which, name) not in paused:
                fail(f"{which} {name!r} is not paused")
            if which == "workflow":
                moved = await engine.resume_workflow(name)
            else:
                moved = await engine.resume_queue(name)
        console.print(f"resumed {which} {esc(name)}: {len(moved)} runs go on")

    run_async(go)


@cli.command()
def workers(
    as_json: bool = JsonOption,
    database: str | None = DatabaseOption,
) -> None:
    """Workers working this database now, and those seen in the last hour."""

    async def go() -> None:
        async with make_engine(None, database) as engine:
            found = await engine.list_workers()
        if as_json:
            emit_json({"workers": dicts(found)})
            return
        table = Table(title=f"{sum(w.live for w in found)} live workers", title_justify="left")
        for column in ("worker", "host", "pid", "app", "queues", "workflows", "started", "seen"):
            table.add_column(column, overflow="fold")
        for w in found:
            seen = f"{w.last_seen:%m-%d %H:%M:%S}" + ("" if w.live else " (gone)")
            table.add_row(
                esc(w.id),
                esc(w.host),
                str(w.pid),
                esc(w.app),
                esc(", ".join(w.queues) if w.queues is not None else "all"),
                esc(", ".join(w.workflows)),
                f"{w.started_at:%m-%d %H:%M:%S}",
                seen,
            )
        console.print(table)

    run_async(go)
