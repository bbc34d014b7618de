"""``plait queues``: how many runs wait in each queue and how many hold its slots, the
limits every process enforces for it (stored in the database) with where they came from,
and per key of one queue."""

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


def format_limits(limits: dict[str, Any] | None) -> str:
    """A queue's limits on one line: ``concurrency 2, rate 10/s, budget tokens 1000/h``."""
    if not limits:
        return "-"
    parts = [
        f"{name} {limits[name]}"
        for name in ("concurrency", "per_key", "rate")
        if limits.get(name) is not None
    ]
    budget: dict[str, str] = limits.get("budget") or {}
    for unit, amount in budget.items():
        parts.append(f"budget {unit} {amount}")
    if limits.get("budget_per_key"):
        parts.append("budget per key")
    if limits.get("fair"):
        weights: dict[str, int] = limits.get("weights") or {}
        shown = ", ".join(f"{key}={weight}" for key, weight in sorted(weights.items()))
        parts.append(f"fair (weights {shown})" if shown else "fair")
    return ", ".join(parts) or "none"


def format_spent(spent: dict[str, float]) -> str:
    """Spend in the budgets' windows: ``tokens 1200, usd 0.5``."""
    return ", ".join(f"{unit} {amount:g}" for unit, amount in sorted(spent.items()))


def format_source(depth: dict[str, Any]) -> str:
    """Where a queue's limits came from: this app's declaration, or the database (stored
    by an engine of which app)."""
    if depth.get("source") == "stored":
        return f"stored by app {depth['stored_by']}"
    return depth.get("source") or ""


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
    """Runs waiting in each queue and runs holding its slots, the limits every process
    enforces (stored in the database) and where they came from, and what is paused."""

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
        for column in ("queue", "queued", "active", "limits", "from", "spent", "waiting on"):
            table.add_column(column)
        for depth in depths:
            name = depth["queue"] if depth["queue"] is not None else "(delayed, no queue)"
            table.add_row(
                esc(name),
                str(depth["queued"]),
                str(depth["active"]),
                esc(format_limits(depth["limits"])),
                esc(format_source(depth)),
                esc(format_spent(depth["spent"])),
                esc(depth["waiting"] or ""),
            )
        console.print(table)
        keyed = [(d["queue"], k) for d in depths for k in d["keys"]]
        if keyed:
            key_table = Table(title="Keys", title_justify="left")
            for column in ("queue", "key", "queued", "active", "spent", "waiting on"):
                key_table.add_column(column)
            for queue, key in keyed:
                key_table.add_row(
                    esc(queue),
                    esc(key["key"]),
                    str(key["queued"]),
                    str(key["active"]),
                    esc(format_spent(key["spent"])),
                    esc(key["waiting"] or ""),
                )
            console.print(key_table)
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
