"""``plait queues``: how many runs wait in each queue and how many hold its slots."""

from __future__ import annotations

from rich.table import Table

from plait.cli.app import (
    DatabaseOption,
    JsonOption,
    cli,
    console,
    emit_json,
    make_engine,
    run_async,
)
from plait.cli.terminal import esc


@cli.command()
def queues(
    as_json: bool = JsonOption,
    database: str | None = DatabaseOption,
) -> None:
    """Runs waiting in each queue and runs holding its slots, and what is paused."""

    async def go() -> None:
        async with make_engine(None, database) as engine:
            depths = await engine.queue_depths()
            paused = await engine.list_paused()
        if as_json:
            emit_json({"queues": depths, "paused": paused})
            return
        table = Table(title="Queues", title_justify="left")
        for column in ("queue", "queued", "active"):
            table.add_column(column)
        for depth in depths:
            name = depth["queue"] if depth["queue"] is not None else "(delayed, no queue)"
            table.add_row(esc(name), str(depth["queued"]), str(depth["active"]))
        console.print(table)
        for brake in paused:
            console.print(
                f"[yellow]paused[/yellow] {esc(brake['kind'])} {esc(brake['name'])} "
                f"since {esc(brake['paused_at'])}"
            )

    run_async(go)
