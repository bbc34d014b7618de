"""The ``plait`` command itself: the Typer app and its groups, the options commands share,
and how every command reports an error and reads its arguments.

Every error is one line on stderr (``--debug`` shows tracebacks), every command that
reads runs has ``--json`` for scripts, and everything a run carries (names, results,
errors) is escaped before it reaches the terminal (``plait.cli.terminal``). The commands
are in the modules beside this one, one per group; ``plait.cli`` loads them all.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import sys
from collections.abc import Callable, Coroutine, Sequence
from datetime import datetime
from pathlib import Path
from typing import Any, TypeVar

import typer
from rich.console import Console
from typer.core import TyperGroup

from plait import __version__, loading
from plait import tags as tag_rules
from plait.app import App
from plait.cli.terminal import clean, esc, one_line
from plait.durations import format_duration, parse_duration
from plait.engine import Engine
from plait.errors import PlaitError
from plait.records import TERMINAL, Run
from plait.store import resolve_url

T = TypeVar("T")


def _debug_from_environment() -> bool:
    return os.environ.get("PLAIT_DEBUG", "") not in ("", "0")


#: set by ``--debug``: errors show their traceback instead of one line
DEBUG = {"on": _debug_from_environment()}
#: the base of the command-line parser's usage errors (Typer's own copy of click's, or
#: click's, depending on the Typer release)
_ClickException: type[Exception] = next(
    c for c in typer.BadParameter.__mro__ if c.__name__ == "ClickException"
)


class _OneLineErrors(TyperGroup):
    """Usage errors (a missing argument, an unknown option) as one line, like every
    other error of the command."""

    def main(  # type: ignore[override]
        self,
        args: Sequence[str] | None = None,
        prog_name: str | None = None,
        complete_var: str | None = None,
        standalone_mode: bool = True,
        **extra: Any,
    ) -> Any:
        if not standalone_mode:
            return super().main(args, prog_name, complete_var, standalone_mode, **extra)
        try:
            code = super().main(args, prog_name, complete_var, False, **extra)
        except _ClickException as exc:
            # click's exceptions come untyped through typer's re-export
            message = str(exc.format_message())  # type: ignore[attr-defined]  # pyright: ignore[reportUnknownMemberType, reportUnknownArgumentType]
            if message:  # (none: the help was asked for by giving no command, and shown)
                ctx: Any = getattr(exc, "ctx", None)
                where = f" (see {ctx.command_path} --help)" if ctx is not None else ""
                _print_error(message + where)
            sys.exit(exc.exit_code)  # type: ignore[attr-defined]
        except typer.Abort:
            _print_error("aborted")
            sys.exit(1)
        sys.exit(code if isinstance(code, int) else 0)


cli = typer.Typer(
    name="plait",
    cls=_OneLineErrors,
    help="Durable workflows: start runs, read their timelines, run workers.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
runs_cli = typer.Typer(help="List, inspect and prune runs.", no_args_is_help=True)
cli.add_typer(runs_cli, name="runs")
schedules_cli = typer.Typer(help="List and operate schedules.", no_args_is_help=True)
cli.add_typer(schedules_cli, name="schedules")
approvals_cli = typer.Typer(help="Approval gates waiting for a person.", no_args_is_help=True)
cli.add_typer(approvals_cli, name="approvals")
# Piped output (logs, CI, less) gets a fixed width that fits a run id and a timeline row.
# no emoji codes: ``:fire:`` in a run id or a schedule's name is text to copy, not a picture
console = Console(width=None if sys.stdout.isatty() else 120, emoji=False)
err = Console(stderr=True, width=None if sys.stderr.isatty() else 120, emoji=False)

DatabaseOption = typer.Option(
    None, "--database", "-d", help="Database URL (default: $PLAIT_DATABASE_URL or plait.db)."
)
JsonOption = typer.Option(False, "--json", help="One JSON document on stdout, for scripts.")
#: the help of every RUN_ID argument (``find_run_id`` finds the run it names)
RUN_ID_HELP = "The run id, or a unique prefix or suffix of it (the short id the dashboard shows)."
STATUS_STYLE = {
    "completed": "green",
    "succeeded": "green",
    "running": "blue",
    "scheduled": "cyan",
    "pending": "dim",
    "suspended": "yellow",
    "failed": "red",
    "cancelled": "magenta",
    "continued": "green",
    "interrupted": "yellow",
    "queued": "cyan",
    "active": "blue",
    "paused": "yellow",
    "needs_attention": "bold red",
}


def _version(value: bool) -> None:
    if value:
        print(f"plait {__version__}")
        raise typer.Exit()


@cli.callback()
def _options(
    version: bool = typer.Option(
        False, "--version", callback=_version, is_eager=True, help="Print the version."
    ),
    debug: bool = typer.Option(
        False, "--debug", help="Show the traceback of an error (also: PLAIT_DEBUG=1)."
    ),
) -> None:
    """Durable workflows: start runs, read their timelines, run workers."""
    DEBUG["on"] = debug or _debug_from_environment()


class UsageError(Exception):
    """A bad argument: reported as one line, exit code 2."""


def _print_error(message: str) -> None:
    # soft_wrap: a one-line message stays one line in a log, however narrow the console
    err.print(f"[red]error:[/red] {esc(one_line(message))}", highlight=False, soft_wrap=True)


def fail(message: str, code: int = 2) -> None:
    _print_error(message)
    raise typer.Exit(code)


def load_app(ref: str) -> App:
    """The user's App, with every way the reference can be wrong as a one-line error,
    including the user's module failing as it is imported."""
    module = ref.partition(":")[0]
    try:
        return loading.load_app(ref)
    except loading.AppImportError as exc:
        if DEBUG["on"]:
            raise
        raise UsageError(f"cannot import module {module!r}: {_import_failure(exc.error)}") from None
    except ImportError as exc:
        raise UsageError(f"cannot import module {module!r}: {exc}") from None
    except (ValueError, TypeError) as exc:
        raise UsageError(str(exc)) from None


def _import_failure(error: BaseException) -> str:
    """What went wrong in a user's module as it was imported, with the fix for the
    usual case: code meant for ``python shop.py`` that runs at import."""
    text = f"{type(error).__name__}: {error}"
    if isinstance(error, RuntimeError) and "asyncio.run()" in str(error):
        return (
            f"{text} (the module runs asyncio.run(...) when imported: put it under "
            'if __name__ == "__main__":)'
        )
    return f"{text} (--debug shows the traceback)"


_SIZE = re.compile(r"\s*(\d+)\s*([kmg]?)(i?b?)\s*", re.IGNORECASE)


def parse_size(text: str, what: str) -> int:
    """``"1048576"``, ``"512KiB"``, ``"1MiB"``, ``"2MB"`` or ``"64k"`` as bytes (K, M and G
    count in 1024s either way: these are limits, not disk sizes)."""
    match = _SIZE.fullmatch(text)
    if match is None or int(match[1]) < 1:
        raise UsageError(f"{what} must be a size such as 1048576, 512KiB or 1MiB, got {text!r}")
    return int(match[1]) * {"": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30}[match[2].lower()]


def parse_json(text: str | None, what: str) -> Any:
    if text is None:
        return None
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise UsageError(f"{what} is not valid JSON: {exc.msg} at position {exc.pos}") from None


def parse_time(text: str | None, what: str) -> datetime | None:
    """An aware datetime from ISO 8601 text; a time without a zone is refused."""
    if text is None:
        return None
    try:
        moment = datetime.fromisoformat(text)
    except ValueError:
        raise UsageError(f"{what} is not an ISO 8601 time: {text!r}") from None
    if moment.tzinfo is None:
        raise UsageError(f"{what} {text!r} has no time zone (add Z or +02:00)")
    return moment


#: the help of a repeatable ``--tag k=v`` option
TAG_HELP = "A tag key=value (repeat the option for more): the run carries it."
FILTER_TAG_HELP = "Only runs with this tag key=value (repeat: runs with every one)."


def parse_tags(pairs: list[str] | None, option: str = "--tag") -> dict[str, str] | None:
    """The tags of a repeatable ``--tag key=value`` option (None: none given); a bad one
    is a usage error naming the option and what was given."""
    if not pairs:
        return None
    found: dict[str, str] = {}
    for pair in pairs:
        try:
            key, value = tag_rules.parse_pair(pair, "=", option)
            tag_rules.add_pair(found, key, value, "=", option)
        except ValueError as exc:
            fail(str(exc))
            raise
    try:
        tag_rules.limit(found, option)
    except ValueError as exc:
        fail(str(exc))
        raise
    return found


def positive_duration(text: str, option: str) -> float:
    """The seconds of a duration option (``30d``, ``10m``), which must be more than 0."""
    try:
        seconds = parse_duration(text, what=option)
    except (TypeError, ValueError) as exc:
        fail(str(exc))
        raise
    if seconds <= 0:
        fail(f"{option} must be more than 0, got {text!r}")
    return seconds


def run_async(make: Callable[[], Coroutine[Any, Any, T]]) -> T:
    """Run a coroutine and turn every error into a one-line message (``--debug``: the
    traceback). plait's own errors are worded for people; anything else is named by its
    type."""
    try:
        return asyncio.run(make())
    except UsageError as exc:
        fail(str(exc))
    except typer.Exit:
        raise
    except KeyboardInterrupt:
        raise typer.Exit(130) from None
    except (PlaitError, ValueError, TypeError) as exc:
        if DEBUG["on"]:
            raise
        fail(str(exc), 1)
    except Exception as exc:
        if DEBUG["on"]:
            raise
        fail(f"{type(exc).__name__}: {exc} (--debug shows the traceback)", 1)
    raise AssertionError("unreachable")


def sqlite_path(url: str) -> Path | None:
    """The file of a SQLite URL (None: another database, or one in memory)."""
    for prefix in ("sqlite:///", "sqlite://"):
        if url.startswith(prefix):
            path = url[len(prefix) :]
            return None if path in ("", ":memory:") else Path(path)
    return None


def check_database(url: str, *, create: bool) -> None:
    """A command that only reads or acts on existing runs never creates a database: a
    missing SQLite file is an error naming it. One that may create it (start, worker,
    serve) needs the folder it goes in."""
    path = sqlite_path(url)
    if path is None:
        return
    if path.is_dir():
        raise UsageError(f"the database {clean(str(path))} is a folder, not a SQLite file")
    if path.exists():
        return
    if not create:
        raise UsageError(
            f"no database at {clean(str(path))} (commands that only read never create one; "
            "check --database or $PLAIT_DATABASE_URL)"
        )
    folder = path.parent if str(path.parent) else Path(".")
    if not folder.is_dir():
        raise UsageError(
            f"cannot create the database {clean(str(path))}: "
            f"the folder {clean(str(folder))} does not exist"
        )


def make_engine(
    app: App | None, database: str | None, *, create: bool = False, **options: Any
) -> Engine:
    """An engine on ``database`` for one command: without worker loops unless asked, and
    never creating a database a command only reads (``check_database``)."""
    url = resolve_url(database)
    check_database(url, create=create)
    options.setdefault("workers", False)
    return Engine(app or App("cli"), url, **options)


class RunIdError(PlaitError, LookupError):
    """A run id given on the command line names no run, or more than one."""


#: how many runs an ambiguous run id lists
_CANDIDATES = 5
#: runs read per page while looking for the runs a part of an id names
_ID_PAGE = 500


async def find_run_id(engine: Engine, given: str) -> str:
    """The id of the run ``given`` names: its whole id, or a unique prefix or suffix of it
    (the short id the dashboard shows is the end of a run id), compared without case as
    the dashboard's id search does. ``RunIdError`` when no run or several match."""
    if await engine.store.get_run(given) is not None:
        return given
    needle = given.lower()
    found: list[str] = []
    offset = 0
    while len(found) <= _CANDIDATES:
        runs, total = await engine.run_summaries(id_contains=given, limit=_ID_PAGE, offset=offset)
        found += [
            run.id
            for run in runs
            if run.id.lower().startswith(needle) or run.id.lower().endswith(needle)
        ]
        offset += len(runs)
        if not runs or offset >= total:
            break
    if not found:
        raise RunIdError(
            f"no run matches {given!r} (a run id, or a unique prefix or suffix of one)"
        )
    if len(found) > 1:
        listed = ", ".join(found[:_CANDIDATES])
        more = ", ..." if len(found) > _CANDIDATES else ""
        count = f"more than {_CANDIDATES}" if len(found) > _CANDIDATES else str(len(found))
        raise RunIdError(
            f"run id {given!r} is ambiguous: it starts or ends {count} runs ({listed}{more});"
            " give more of the id"
        )
    return found[0]


def installed(module: str) -> bool:
    """Whether ``module`` can be imported, without importing it."""
    import importlib.util

    return importlib.util.find_spec(module) is not None


def emit_json(document: Any) -> None:
    """One JSON document on stdout (ASCII-escaped: nothing in it can reach a terminal as
    a control character)."""
    print(json.dumps(document, default=str))


def dicts(records: Sequence[Any]) -> list[dict[str, Any]]:
    """Records (runs, steps, attempts...) as the dicts ``--json`` prints."""
    return [r.to_dict() for r in records]


def status_markup(status: str) -> str:
    """A status in its colour (``STATUS_STYLE``), escaped for the console."""
    style = STATUS_STYLE.get(str(status), "")
    text = esc(status)
    return f"[{style}]{text}[/{style}]" if style else text


def run_took(run: Run) -> str:
    """How long an ended run took, or ``-`` while it has not ended."""
    if run.status not in TERMINAL:
        return "-"
    return format_duration((run.updated_at - run.created_at).total_seconds())
