"""``plait stream``: print one of a run's streams, or follow it until the run ends."""

from __future__ import annotations

import json
import sys

import typer

from plait.cli.app import (
    RUN_ID_HELP,
    DatabaseOption,
    JsonOption,
    cli,
    find_run_id,
    make_engine,
    run_async,
)
from plait.cli.terminal import clean, compact
from plait.context import check_stream_name
from plait.records import StreamEntry

#: entries read at a time without --follow
_PAGE = 1000


class _Printer:
    """Text values run on as they arrive (a model's tokens read as its reply); any other
    value gets a line of its own, and a reset says which attempt's entries to drop."""

    def __init__(self) -> None:
        self.mid_line = False

    def entry(self, entry: StreamEntry) -> None:
        if entry.kind == "data" and isinstance(entry.value, str):
            sys.stdout.write(clean(entry.value))
            self.mid_line = not entry.value.endswith("\n")
        elif entry.kind == "data":
            self._line(compact(entry.value))
        elif entry.kind == "reset":
            self._line(f"[reset: drop attempt {entry.attempt} of step {clean(entry.step or '')}]")
        sys.stdout.flush()

    def _line(self, text: str) -> None:
        if self.mid_line:
            sys.stdout.write("\n")
        sys.stdout.write(text + "\n")
        self.mid_line = False

    def close(self) -> None:
        if self.mid_line:
            sys.stdout.write("\n")
        sys.stdout.flush()


@cli.command()
def stream(
    run_id: str = typer.Argument(..., help=f"The run. {RUN_ID_HELP}"),
    name: str = typer.Argument(..., help="The stream's name (wf.stream / ctx.stream)."),
    follow: bool = typer.Option(
        False, "--follow", "-f", help="Go on printing entries as they commit, until the run ends."
    ),
    settled_only: bool = typer.Option(
        False,
        "--settled-only",
        help="Only entries of attempts that succeeded (and the workflow's own), no resets.",
    ),
    after: int = typer.Option(-1, "--after", help="Start after this offset.", min=-1),
    as_json: bool = JsonOption,
    database: str | None = DatabaseOption,
) -> None:
    """Print a run's stream: text values run on (as a chat reply does), other values one
    per line. With --json, one JSON object per entry and line (offset, kind, value,
    attempt, at, step)."""
    try:
        check_stream_name(name)
    except ValueError as exc:
        raise typer.BadParameter(str(exc), param_hint="'NAME'") from None

    async def go() -> None:
        nonlocal run_id
        printer = _Printer()
        async with make_engine(None, database) as engine:
            run_id = await find_run_id(engine, run_id)

            def show(entry: StreamEntry) -> None:
                if as_json:
                    print(json.dumps(entry.to_dict(), default=str), flush=True)
                else:
                    printer.entry(entry)

            try:
                if follow:
                    entries = engine.follow_stream(
                        run_id, name, after=after, settled_only=settled_only
                    )
                    async for entry in entries:
                        show(entry)
                    return
                cursor = after
                while True:
                    page = await engine.read_stream(
                        run_id, name, after=cursor, limit=_PAGE, settled_only=settled_only
                    )
                    for entry in page:
                        show(entry)
                    if len(page) < _PAGE:
                        return
                    cursor = page[-1].offset
            finally:
                if not as_json:
                    printer.close()

    run_async(go)
