"""The demo behind ``make demo``: one order placed on the embedded SQLite file demo.db,
its progress printed as it happens, and the stored timeline at the end."""

from __future__ import annotations

import asyncio
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from rich.console import Console
from shop import app

import plait
from plait.cli.runs import render_run
from plait.notify import wait_event

DATABASE = os.environ.get("PLAIT_DATABASE_URL", "sqlite:///demo.db")
console = Console()


async def follow(engine: plait.Engine, run_id: str) -> None:
    """Print each step as it changes, and approve the order when it asks."""
    seen: dict[str, tuple[str, int]] = {}
    approved = False
    while True:
        event = engine.notifier.watch(run_id)
        try:
            for step in await engine.get_steps(run_id):
                state = (step.status, step.attempts)
                if seen.get(step.key) != state:
                    seen[step.key] = state
                    console.print(f"  {_describe(step)}")
                if step.key == "__event:manager approval" and not approved:
                    approved = True
                    console.print("  [yellow]manager approves the order[/yellow]")
                    await engine.send_event(
                        run_id, "manager approval", {"approved": True, "by": "Dana"}
                    )
            run = await engine.get_run(run_id)
            if run.status in plait.records.SETTLED:
                return
            await wait_event(event, 0.1)  # woken by the run's next change
        finally:
            engine.notifier.unwatch(run_id, event)


def _describe(step: plait.Step) -> str:
    name = step.key.removeprefix("__event:")
    if step.kind == "do" and step.status == "scheduled" and step.error:
        return f"{name:<26} attempt {step.attempts} failed ({step.error['message']}), retrying"
    if step.kind == "sleep" and step.status == "scheduled":
        return f"{name:<26} sleeping (a durable timer)"
    if step.kind == "event" and step.status == "scheduled":
        return f"{name:<26} waiting for an event"
    if step.kind == "child" and step.status == "running":
        return f"{name:<26} child run {step.child_run_id} started"
    tries = f" after {step.attempts} attempts" if step.attempts > 1 else ""
    return f"{name:<26} {step.status}{tries}"


async def main() -> None:
    console.print(f"[bold]plait demo[/bold]: placing an order on {DATABASE}")
    order = {"order_id": f"A-{os.getpid()}", "items": ["tea", "mug"], "amount": 120}
    async with plait.Engine(app, DATABASE) as engine:
        run_id = await engine.start("place_order", order)
        console.print(f"started run {run_id}")
        await follow(engine, run_id)
        run = await engine.wait(run_id, timeout=60)
        render_run(
            run,
            await engine.get_steps(run_id),
            await engine.get_history(run_id),
            await engine.get_children(run_id),
        )
    console.print(
        f"\nInspect it again any time:  .venv/bin/plait runs show {run_id} --database {DATABASE}"
    )


if __name__ == "__main__":
    asyncio.run(main())
