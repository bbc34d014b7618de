"""``plait queues``: how many runs wait in each queue and how many hold its slots, the
limits an app declares for them, and per key of one queue."""

from __future__ import annotations

from typing import Any

import typer
from rich.table import Table

from plait.cli.app import (
    DatabaseOption,
    JsonOption,
    cli,
    console,
    emit_json,
    load_app,
    make_engine,
    run_async,
)
from plait.cli.terminal import esc
from plait.queues import make_queue


def _limits(limits: dict[str, Any] | None) -> str:
    """A queue's declared limits in one line (``Queue.describe``)."""
    if not limits:
        return ""
    return make_queue(
        limits["name"],
        concurrency=limits["concurrency"],
        per_key=limits["per_key"],
        rate=limits["rate"],
        fair=limits["fair"],
        weights=limits["weights"],
    ).describe()


@cli.command()
def queues(
    app_ref: str | None = typer.Argument(
        None,
        metavar="[APP]",
        help="module:attribute of your plait.App, to show the limits it declares",
    ),
    keys: str | None = typer.Option(
        None,
        "--keys",
        metavar="QUEUE",
        help="Per key of QUEUE: runs waiting, runs holding a slot, and a fair queue's turns",
    ),
    as_json: bool = JsonOption,
    database: str | None = DatabaseOption,
) -> None:
    """Runs waiting in each queue and runs holding its slots, and what is paused."""

    async def go() -> None:
        app = None if app_ref is None else load_app(app_ref)
        if keys is not None:
            async with make_engine(app, database) as engine:
                per_key = await engine.queue_keys(keys)
            _show_keys(keys, per_key, as_json)
            return
        async with make_engine(app, database) as engine:
            depths = await engine.queue_depths()
            paused = await engine.list_paused()
        if as_json:
            emit_json({"queues": depths, "paused": paused})
            return
        table = Table(title="Queues", title_justify="left")
        for column in ("queue", "queued", "active", "limits"):
            table.add_column(column)
        for depth in depths:
            name = depth["queue"] if depth["queue"] is not None else "(delayed, no queue)"
            table.add_row(
                esc(name), str(depth["queued"]), str(depth["active"]), esc(_limits(depth["limits"]))
            )
        console.print(table)
        for brake in paused:
            console.print(
                f"[yellow]paused[/yellow] {esc(brake['kind'])} {esc(brake['name'])} "
                f"since {esc(brake['paused_at'])}"
            )

    run_async(go)


def _show_keys(queue: str, per_key: list[dict[str, Any]], as_json: bool) -> None:
    if as_json:
        emit_json({"queue": queue, "keys": per_key})
        return
    table = Table(title=f"Keys of queue {esc(queue)}", title_justify="left")
    for column in ("key", "queued", "active", "turns ahead"):
        table.add_column(column)
    for row in per_key:
        table.add_row(
            esc(row["key"] if row["key"] is not None else "(no key)"),
            str(row["queued"]),
            str(row["active"]),
            "" if row["ahead"] is None else f"{row['ahead']:g}",
        )
    console.print(table)
