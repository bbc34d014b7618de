"""``plait fork``: a new run that keeps the steps before one and runs the rest again."""

from __future__ import annotations

import typer

from plait.cli.app import (
    RUN_ID_HELP,
    DatabaseOption,
    JsonOption,
    cli,
    console,
    emit_json,
    find_run_id,
    make_engine,
    run_async,
)
from plait.cli.terminal import esc


@cli.command()
def fork(
    run_id: str = typer.Argument(..., help=f"The run to fork. {RUN_ID_HELP}"),
    from_step: str = typer.Option(..., "--from", help="The step key to run again from."),
    new_id: str | None = typer.Option(None, "--run-id", help="The new run's id."),
    as_json: bool = JsonOption,
    database: str | None = DatabaseOption,
) -> None:
    """A new run that keeps the results of the steps before --from and runs the rest
    again on the code deployed now (workers run it)."""

    async def go() -> None:
        nonlocal run_id  # the whole id of what was given
        async with make_engine(None, database) as engine:
            run_id = await find_run_id(engine, run_id)
            forked = await engine.fork(run_id, from_step=from_step, run_id=new_id)
        if as_json:
            emit_json({"run_id": forked, "forked_from": run_id})
            return
        console.print(esc(forked), highlight=False)

    run_async(go)
