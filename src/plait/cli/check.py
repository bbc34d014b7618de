"""``plait check``: replay the live runs on an app's code before deploying it, and name
the runs that would diverge (exit code 1), for CI."""

from __future__ import annotations

import re

import typer

from plait.catalog import Catalog
from plait.cli.app import (
    DatabaseOption,
    JsonOption,
    UsageError,
    cli,
    console,
    dicts,
    emit_json,
    fail,
    load_app,
    make_engine,
    run_async,
)
from plait.cli.terminal import esc, one_line
from plait.engine.check import check_runs
from plait.errors import WorkflowNotFoundError
from plait.records import CheckResult

_UUID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}\Z", re.I)


@cli.command()
def check(
    app_ref: str = typer.Argument(..., metavar="APP", help="module:attribute of your plait.App"),
    workflow: str | None = typer.Option(None, "--workflow", help="Check this workflow only."),
    include_ended: int = typer.Option(
        0, "--include-ended", help="Also replay the last N ended runs of each workflow."
    ),
    as_json: bool = JsonOption,
    database: str | None = DatabaseOption,
) -> None:
    """Replay the live runs on APP's code, running no step and writing nothing, and list
    the runs whose recorded steps the code no longer follows. Exit code 1 when any does.

    Safe on a production database while workers run: it takes no lease and changes no
    row. Run it in CI before a deploy; patch, fork or cancel what it lists."""
    if include_ended < 0:
        fail(f"--include-ended must be 0 or more, got {include_ended}")

    async def go() -> list[CheckResult]:
        app = load_app(app_ref)
        if workflow is not None and workflow not in app.workflows:
            raise UsageError(str(WorkflowNotFoundError(workflow, list(app.workflows))))
        # the command's engine registers no code: opening it writes nothing
        async with make_engine(None, database) as engine:
            return await check_runs(
                engine.store,
                Catalog(app, engine.store),
                engine.limits,
                workflow=workflow,
                include_ended=include_ended,
            )

    results = run_async(go)
    diverging = [r for r in results if not r.ok]
    if as_json:
        emit_json(dicts(results))
    else:
        for result in diverging:
            where = result.step_name or "-"
            console.print(
                f"{esc(_short(result.run_id))}  {esc(result.workflow)}  {esc(where)}: "
                f"{esc(one_line(result.reason or ''))}",
                highlight=False,
                soft_wrap=True,
            )
        console.print(f"{len(results)} runs checked, {len(diverging)} diverge", highlight=False)
    if diverging:
        raise typer.Exit(1)


def _short(run_id: str) -> str:
    """The end of a UUID run id (the dashboard's short id, which ``plait runs show``
    takes); any other id whole."""
    return run_id[-8:] if _UUID.match(run_id) else run_id
