"""``plait queues``: how many runs wait in each queue and how many hold its slots, and
the limits every process enforces for it (stored in the database) with where they came
from."""

from __future__ import annotations

from typing import Any

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
    as_json: bool = JsonOption,
    database: str | None = DatabaseOption,
) -> None:
    """Runs waiting in each queue and runs holding its slots, the limits every process
    enforces (stored in the database) and where they came from, and what is paused."""

    async def go() -> None:
        async with make_engine(None, database) as engine:
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
            keys = Table(title="Keys", title_justify="left")
            for column in ("queue", "key", "queued", "active", "spent", "waiting on"):
                keys.add_column(column)
            for queue, key in keyed:
                keys.add_row(
                    esc(queue),
                    esc(key["key"]),
                    str(key["queued"]),
                    str(key["active"]),
                    esc(format_spent(key["spent"])),
                    esc(key["waiting"] or ""),
                )
            console.print(keys)
        for brake in paused:
            console.print(
                f"[yellow]paused[/yellow] {esc(brake['kind'])} {esc(brake['name'])} "
                f"since {esc(brake['paused_at'])}"
            )

    run_async(go)
