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
    from_step: str = typer.Option(
        ...,
        "--from",
        help="The step to run again from: its key, or the name `plait runs show` displays "
        "(e.g. 'wait for event: approval').",
    ),
    new_id: str | None = typer.Option(None, "--run-id", help="The new run's id."),
    replace: bool = typer.Option(
        False,
        "--replace",
        help="Cancel the run if it has not ended, in the same commit that makes the fork "
        "(the way forward for a live run that `plait check` says diverges).",
    ),
    as_json: bool = JsonOption,
    database: str | None = DatabaseOption,
) -> None:
    """A new run that keeps the results of the steps before --from and runs the rest
    again on the code deployed now (workers run it). Only an ended run forks, unless
    --replace cancels it."""
    if not from_step.strip() or not from_step.isprintable():
        raise typer.BadParameter(
            f"a step key or displayed name, without control characters, got {from_step!r}",
            param_hint="'--from'",
        )

    async def go() -> None:
        nonlocal run_id  # the whole id of what was given
        async with make_engine(None, database) as engine:
            run_id = await find_run_id(engine, run_id)
            forked = await engine.fork(run_id, from_step=from_step, run_id=new_id, replace=replace)
        if as_json:
            emit_json({"run_id": forked, "forked_from": run_id, "replaced": replace})
            return
        console.print(esc(forked), highlight=False)

    run_async(go)
