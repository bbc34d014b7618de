"""``plait graph``: a Mermaid diagram of a graph, or of what a code workflow run did
(``plait.cli.diagram``)."""

from __future__ import annotations

import typer

from plait.cli.app import (
    DatabaseOption,
    JsonOption,
    cli,
    console,
    emit_json,
    find_run_id,
    load_app,
    make_engine,
    run_async,
    sqlite_path,
)
from plait.cli.terminal import clean
from plait.store import resolve_url


@cli.command()
def graph(
    app_ref: str = typer.Argument(..., metavar="APP", help="module:attribute of your plait.App"),
    name: str = typer.Argument(..., help="Graph or workflow name."),
    run_id: str | None = typer.Option(
        None,
        "--run",
        help="Colour or draw this run's steps (its id, or a unique prefix or suffix of it).",
    ),
    as_json: bool = JsonOption,
    database: str | None = DatabaseOption,
) -> None:
    """Print a Mermaid diagram of a graph (or of a code workflow run's steps).

    A code workflow is drawn from what a run did: --run, else its latest run."""

    async def go() -> None:
        nonlocal run_id  # the whole id of what was given
        from plait.cli.diagram import draw

        app = load_app(app_ref)
        url = resolve_url(database)
        path = sqlite_path(url)
        if run_id is None and path is not None and not path.exists():
            url = "sqlite:///:memory:"  # the app's own graphs need no database file
        async with make_engine(app, url) as engine:
            run_id = None if run_id is None else await find_run_id(engine, run_id)
            drawing = await draw(engine, name, run_id)
        if as_json:
            run = drawing.run
            emit_json(
                {
                    "workflow": drawing.name,
                    "kind": drawing.kind,
                    "run_id": None if run is None else run.id,
                    "status": None if run is None else run.status,
                    "mermaid": drawing.mermaid,
                }
            )
            return
        console.print(clean(drawing.mermaid), markup=False, highlight=False)

    run_async(go)
