"""Runs the code blocks of one Markdown file, in order, as a reader would (used by
``test_docs.py``; run in a fresh folder of its own).

usage: python doc_session.py BLOCKS_JSON

* A Python block that makes a ``plait.App(`` starts a program: it must run on its own, as
  ``python block.py`` (so no ``await`` outside a function). Then it runs in the session
  too, with ``__name__`` not ``"__main__"``, so the blocks after it can go on from it.
* A Python block that defines ``test_`` functions is a test file: pytest runs it.
* Any other Python block goes on in the session, as in ``python -m asyncio``: it sees the
  names earlier blocks made, and ``await`` works at its top level.
* A block marked ``<!-- fragment -->`` is compiled, not run.

A shell block runs line by line, as a reader would type it:

* A ``plait`` command (or ``.venv/bin/plait``) is first parsed by the real command line
  (``plait.cli``'s click command; nothing runs), so an option, a subcommand or an
  argument that does not exist fails the block even where the command cannot run. Then
  it runs, and must exit 0.
* Placeholders take the session's values, looked up the way a reader looks them up: with
  ``--json`` reads of the database the command uses (runs and schedules made by earlier
  blocks, whether a command or Python code made them, as long as it used that database).
  ``RUN_ID`` is the newest run that fits the command: a live run to cancel or to send an
  event to, a suspended one to resume, a failed or parked (``needs_attention``) one to
  retry, a run of the drawn workflow for ``graph --run``, one waiting at the gate to
  approve (else a live run, which holds the decision), an ended one with the ``--from``
  step to fork. ``NAME`` is the newest
  schedule for ``schedules``, the open gate for ``approve``. With no fitting run, cancel,
  resume and retry go to the newest run, and their one-line refusal ("cannot resume run
  ...: it is cancelled") passes; other commands are skipped, saying why. ``a|b`` runs
  each alternative in turn, and so does ``plait a | plait b``.
* ``worker`` and ``serve`` run until they are up (the worker logs that it works, the
  server accepts a connection: on a free port unless the block names one, since port 8000
  may be taken on a shared machine), then get SIGTERM and must stop cleanly.
* ``start --wait`` on a run that comes to wait for a person (an event, an approval) is
  stopped once it says so.
* ``export NAME=value`` holds for the rest of the file (in the session's environment, so
  for the Python blocks after it too); ``NAME=value cmd`` for that command. A PostgreSQL
  URL is pointed at the test's own database ($DOCS_POSTGRES_URL), keeping the URL's
  query (``schema=``, ``max_size=``...); without a test server, the commands after it
  are skipped, saying why.
* ``python -m module`` and ``python script.py`` run, except the benchmarks (they run for
  minutes), whose options are checked against their ``--help``. ``make demo`` runs the
  Python lines of the Makefile's recipe (not make's set-up of ``.venv``, which installs
  packages); ``pip`` and the other make targets are skipped, saying why. Any other
  command fails the block, so nothing shown in a shell block is passed over unsaid.

SQL blocks run on PostgreSQL when the test gave the file a database (in a transaction,
rolled back, after plait created its schema there; roles the block grants to are made
first, since the text asks the reader to have them); JSON, TOML, YAML and INI blocks are
parsed; text and Mermaid blocks are not code. Any other fence language fails its block,
so a typo in one (``pyhton``) cannot pass a block over as "not code".
"""

from __future__ import annotations

import ast
import asyncio
import configparser
import dataclasses
import inspect
import json
import os
import re
import shlex
import signal
import socket
import subprocess
import sys
import time
import tomllib
import traceback
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from support.paths import ROOT
from support.ports import free_port

PYTHON = {"python", "py"}
SHELLS = {"sh", "bash", "shell", "console"}
#: parsed, so that a broken example of a file format fails
DATA = {"json", "toml", "yaml", "yml", "ini"}
#: shown to the reader, not code: nothing to run or parse
NOT_CODE = {"", "text", "txt", "mermaid"}
KNOWN_LANGUAGES = PYTHON | SHELLS | DATA | NOT_CODE | {"sql"}

_PLACEHOLDER = re.compile(r"^[A-Z][A-Z_]{2,}$")
#: a token written as alternatives: ``pause|resume|trigger``
_ALTERNATIVES = re.compile(r"^[\w-]+(\|[\w-]+)+$")
_ASSIGNMENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*=")
_RUNS_UNTIL_STOPPED = {"worker", "serve"}
_ENDED = {"completed", "failed", "cancelled"}
#: the one line plait prints when a run's status refuses an action (RunStateError)
_REFUSAL = re.compile(r"error: cannot [\w ()]+ run '[^']+': it is \w+")
#: make targets the session does not run, and why
_MAKE_SKIPPED = {
    "test": "lint, type checks and the whole test suite, this test among them",
    "bench": "the benchmarks, which run for most of an hour",
    "lint": "it rewrites the source files",
    "clean": "it deletes .venv",
}
#: seconds a process that runs until stopped may take to be up, and then to stop
_UP_TIMEOUT = 60.0


def is_program(source: str) -> bool:
    return "plait.App(" in source


def is_test_file(source: str) -> bool:
    return re.search(r"^(async\s+)?def test_", source, re.MULTILINE) is not None


@dataclasses.dataclass
class Shell:
    """What the shell blocks of one file share besides the environment (which is the
    session's own ``os.environ``, so the Python blocks see the exports too)."""

    #: variable -> why the commands after its export cannot run
    blocked: dict[str, str] = dataclasses.field(default_factory=dict)
    #: processes started so far, to name their log files
    processes: int = 0


# -- the plait command line ------------------------------------------------------------------


def parse_cli(argv: list[str]) -> tuple[tuple[str, ...], dict[str, Any]]:
    """The subcommand path and the parameter values of a ``plait`` command line, as the
    real command line parses it, without running it: a command, option or argument it
    does not take fails here, whether or not the session can run the command.

    Typer brings click, or a copy of its own in newer releases: the classes are found
    through typer (a group is a command that resolves subcommands), never imported."""
    import typer.main

    from plait.cli import cli

    click_exception: type[Exception] = next(
        c for c in typer.BadParameter.__mro__ if c.__name__ == "ClickException"
    )
    command: Any = typer.main.get_command(cli)
    args, name, parent = argv[1:], "plait", None
    path: list[str] = []
    try:
        while True:
            ctx = command.make_context(name, list(args), parent=parent)
            if not hasattr(command, "resolve_command"):
                return tuple(path), dict(ctx.params)
            # what is left for the subcommand, as click's Group.invoke reads it
            protected = getattr(ctx, "_protected_args", None)
            if protected is None:  # click before 8.2
                protected = ctx.protected_args
            rest = [*protected, *ctx.args]
            if not rest:
                raise AssertionError(f"{shlex.join(argv)}: names no subcommand")
            found, sub, args = command.resolve_command(ctx, rest)
            assert found is not None and sub is not None
            path.append(found)
            command, name, parent = sub, found, ctx
    except click_exception as exc:
        message = str(exc.format_message())  # type: ignore[attr-defined]
        raise AssertionError(
            f"{shlex.join(argv)}: the command line refuses it: {message}"
        ) from None


def plait_json(args: list[str], env: dict[str, str]) -> Any:
    """A ``--json`` read through the command line, as a reader looks a value up; None
    when it fails (no database yet, for one: reading never creates it)."""
    result = subprocess.run(
        [sys.executable, "-m", "plait", *args, "--json"],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    return json.loads(result.stdout) if result.returncode == 0 else None


@dataclasses.dataclass
class Values:
    """What the placeholders of one command stand for, and how they were found."""

    given: dict[str, str] = dataclasses.field(default_factory=dict)
    notes: list[str] = dataclasses.field(default_factory=list)
    #: no value fits: why the command is skipped
    missing: str | None = None
    #: the run does not fit the action: its one-line refusal passes
    refusal_expected: bool = False


def _has_step(run_id: str, key: str, db: list[str], env: dict[str, str]) -> bool:
    shown = plait_json(["runs", "show", run_id, *db], env)
    return shown is not None and any(step["key"] == key for step in shown["steps"])


def pick_run(
    command: tuple[str, ...], params: dict[str, Any], db: list[str], env: dict[str, str]
) -> tuple[str | None, str, bool]:
    """The run a ``RUN_ID`` stands for: the newest one the command fits. Returns the id
    (None: none to use), how it was chosen, and whether its refusal is expected."""
    found = plait_json(["runs", "list", "--limit", "10000", *db], env)
    runs: list[dict[str, Any]] = found["runs"] if found else []  # newest first
    if not runs:
        return None, "no run in the database yet", False
    live = [r for r in runs if r["status"] not in _ENDED]
    fits, what = runs, "run"
    if command == ("cancel",) or command == ("send-event",):
        fits, what = live, "live run"
    elif command == ("resume",):
        fits, what = [r for r in runs if r["status"] == "suspended"], "suspended run"
    elif command == ("retry",):
        retryable = ("failed", "needs_attention")
        fits, what = [r for r in runs if r["status"] in retryable], "failed or parked run"
    elif command == ("graph",):
        fits = [r for r in runs if r["workflow"] == params["name"]]
        what = f"run of {params['name']!r}"
    elif command == ("fork",):
        step = params["from_step"]
        if _PLACEHOLDER.match(step):
            return None, f"no value for {step}", False
        ended = [r for r in runs if r["status"] not in ("running", "queued")]
        ended = [r for r in ended if r["kind"] != "graph"][:20]
        fits = [r for r in ended if _has_step(r["id"], step, db, env)]
        what = f"ended run with a step {step!r}"
    if fits:
        return fits[0]["id"], f"the newest {what}", False
    if command in (("cancel",), ("resume",), ("retry",)):
        return runs[0]["id"], f"no {what}: the newest run, which refuses", True
    return None, f"no {what} in the database", False


def fill(
    command: tuple[str, ...], params: dict[str, Any], db: list[str], env: dict[str, str]
) -> Values:
    """The values of a command's placeholders, by the parameter each one stands in."""
    wanted = {p: v for p, v in params.items() if isinstance(v, str) and _PLACEHOLDER.match(v)}
    values = Values()
    if command == ("approve",) and wanted.keys() & {"run_id", "name"}:
        gates = plait_json(["approvals", "list", *db], env) or []  # oldest first
        gates = [
            g
            for g in gates
            if (g["run_id"] == params["run_id"] or "run_id" in wanted)
            and (g["name"] == params["name"] or "name" in wanted)
        ]
        if gates:
            filled = [(wanted.pop(p), p) for p in ("run_id", "name") if p in wanted]
            for placeholder, key in filled:
                values.given[placeholder] = gates[-1][key]
            names = ", ".join(placeholder for placeholder, _ in filled)
            values.notes.append(f"{names}: the newest open gate that fits")
        elif "name" not in wanted:  # a decision sent before the run reaches it is held
            run, how, _ = pick_run(("send-event",), params, db, env)
            if run is None:
                values.missing = f"no run waits at approval {params['name']!r}, and {how}"
                return values
            values.given[wanted.pop("run_id")] = run
            values.notes.append(
                f"RUN_ID: no run waits at approval {params['name']!r}: {how}, which holds "
                "the decision"
            )
    if "run_id" in wanted:
        run, how, refusal = pick_run(command, params, db, env)
        if run is None:
            values.missing = how
            return values
        values.given[wanted.pop("run_id")] = run
        values.notes.append(f"{params['run_id']}: {how}")
        values.refusal_expected = refusal
    if command[:1] == ("schedules",) and "name" in wanted:
        found = plait_json(["schedules", "list", *db], env)
        schedules = sorted(found["schedules"] if found else [], key=lambda s: s["created_at"])
        if not schedules:
            values.missing = "no schedule in the database"
            return values
        values.given[wanted.pop("name")] = schedules[-1]["name"]
        values.notes.append(f"{params['name']}: the newest schedule")
    if wanted:
        values.missing = "no value for " + ", ".join(sorted(wanted.values()))
    return values


# -- running shell lines ---------------------------------------------------------------------


def on_test_server(url: str, test_url: str) -> str:
    """A PostgreSQL URL of the docs pointed at the test's database: the test's server,
    user and database, the documented URL's query (``schema=``, ``max_size=``...)."""
    test = urlsplit(test_url)
    return urlunsplit((test.scheme, test.netloc, test.path, urlsplit(url).query, ""))


def is_postgres(url: str) -> bool:
    return urlsplit(url).scheme in ("postgres", "postgresql")


def export(assignment: str, shell: Shell) -> str:
    """Apply ``export NAME=value`` to the rest of the file."""
    name, _, value = assignment.partition("=")
    shell.blocked.pop(name, None)
    note = ""
    if is_postgres(value):
        test_url = os.environ.get("DOCS_POSTGRES_URL")
        if test_url:
            note = " (pointed at the test's PostgreSQL database, with the URL's query)"
            value = on_test_server(value, test_url)
        else:
            host = urlsplit(value).hostname
            shell.blocked[name] = f"{name} names the PostgreSQL server {host}: no test server"
            note = " (no PostgreSQL server for the tests: the commands after it are skipped)"
    os.environ[name] = value
    return f"exported: {assignment}{note}"


def alternatives(argv: list[str]) -> list[list[str]]:
    """Each command a line written with alternatives stands for, in order:
    ``plait cancel RUN_ID | plait resume RUN_ID``, ``plait schedules pause|resume NAME``."""
    commands: list[list[str]] = [[]]
    for arg in argv:
        if arg == "|":
            commands.append([])
        else:
            commands[-1].append(arg)
    expanded: list[list[str]] = []
    for command in commands:
        if not command or Path(command[0]).name != "plait":
            raise AssertionError(f"a pipe the session cannot run: {shlex.join(argv)}")
        choices: list[list[str]] = [[]]
        for arg in command:
            options = arg.split("|") if _ALTERNATIVES.match(arg) else [arg]
            choices = [[*c, o] for c in choices for o in options]
        expanded += choices
    return expanded


def run_line(argv: list[str], shell: Shell) -> list[str]:
    """Run one shell line; returns what was done, one entry per command."""
    background = argv[-1] == "&"
    if background:
        argv = argv[:-1]
    if argv[0] == "export":
        return [export(assignment, shell) for assignment in argv[1:]]
    extra: dict[str, str] = {}
    while argv and _ASSIGNMENT.match(argv[0]):
        name, _, value = argv.pop(0).partition("=")
        extra[name] = value
    word = Path(argv[0]).name
    if word == "plait":
        done = [run_plait(command, extra, shell) for command in alternatives(argv)]
        return [d + " (the docs start it in the background)" for d in done] if background else done
    if word in ("python", "python3"):
        return [run_python(argv, extra, shell)]
    if word == "make":
        return [run_make(target) for target in argv[1:]]
    if word == "pip":
        why = "it installs packages; the test runs plait as installed"
        return [f"skipped ({why}): {shlex.join(argv)}"]
    raise AssertionError(
        f"a command the session neither runs nor has a reason to skip: {shlex.join(argv)}"
    )


def run_plait(argv: list[str], extra: dict[str, str], shell: Shell) -> str:
    """Parse, fill in and run one ``plait`` command."""
    prefix = "".join(f"{name}={shlex.quote(value)} " for name, value in extra.items())
    shown = prefix + shlex.join(argv)
    command, params = parse_cli(argv)
    env = {**os.environ, **extra, "PYTHONUNBUFFERED": "1"}
    db: list[str] = []
    if params.get("database") is not None:
        url = params["database"]
        if is_postgres(url):
            test_url = os.environ.get("DOCS_POSTGRES_URL")
            if not test_url:
                return f"skipped (--database names a PostgreSQL server; parsed): {shown}"
            url, documented = on_test_server(url, test_url), url
            argv = [a.replace(documented, url) for a in argv]
        db = ["--database", url]
    else:
        for name, why in shell.blocked.items():
            if name not in extra:
                return f"skipped ({why}; parsed): {shown}"
    values = fill(command, params, db, env)
    if values.missing is not None:
        return f"skipped ({values.missing}; parsed): {shown}"
    argv = [values.given.get(a, a) for a in argv]
    ran = prefix + shlex.join(argv)
    notes = "".join(f" [{note}]" for note in values.notes)
    if command[:1] and command[0] in _RUNS_UNTIL_STOPPED:
        return f"ran: {ran}{run_until_up(argv, command, params, env, shell)}{notes}"
    return f"ran: {ran}{run_command(argv, env, values.refusal_expected)}{notes}"


def run_command(argv: list[str], env: dict[str, str], refusal_expected: bool = False) -> str:
    """Run one ``plait`` command; it must exit 0, or come to wait for a person, or (where
    expected) refuse in one line because of the run's status."""
    process = subprocess.Popen(
        [sys.executable, "-m", "plait", *argv[1:]],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    assert process.stdout is not None
    seen: list[str] = []
    for line in process.stdout:
        seen.append(line)
        if "--wait" in argv and re.match(r"waiting for (event|approval) ", line):
            process.terminate()
            process.communicate(timeout=60)
            return " (stopped: the run waits for a person)"
    try:
        errors = process.communicate(timeout=120)[1]
    except subprocess.TimeoutExpired:
        process.kill()
        raise AssertionError(f"{shlex.join(argv)} did not end:\n{''.join(seen)[-3000:]}") from None
    if process.returncode != 0 and refusal_expected and _REFUSAL.fullmatch(errors.strip()):
        return f" (refused, as it should: {errors.strip()})"
    if process.returncode != 0:
        raise AssertionError(
            f"{shlex.join(argv)} exited {process.returncode}:\n"
            f"{''.join(seen)[-3000:]}{errors[-3000:]}"
        )
    return ""


def _accepts(host: str, port: int) -> bool:
    try:
        with socket.create_connection((host, port), timeout=1):
            return True
    except OSError:
        return False


def run_until_up(
    argv: list[str],
    command: tuple[str, ...],
    params: dict[str, Any],
    env: dict[str, str],
    shell: Shell,
) -> str:
    """Run a process that works until stopped (``worker``, ``serve``) until it is up,
    then stop it as an operator does, with SIGTERM: it must stop cleanly."""
    args, note = argv[1:], ""
    host, port = str(params.get("host") or "127.0.0.1"), int(params.get("port") or 0)
    if command == ("serve",) and not any(a == "--port" or a.startswith("--port=") for a in args):
        port = free_port()
        args += ["--port", str(port)]
        note = f", on the free port {port}"
    shell.processes += 1
    log = Path(f"{command[0]}-{shell.processes}.log")
    with log.open("w") as out:
        process = subprocess.Popen(
            [sys.executable, "-m", "plait", *args], stdout=out, stderr=subprocess.STDOUT, env=env
        )
    try:
        deadline = time.monotonic() + _UP_TIMEOUT
        while not (
            _accepts(host, port)
            if command == ("serve",)
            else re.search(r"worker \S+ working ", log.read_text())
        ):
            if process.poll() is not None:
                raise AssertionError(
                    f"{shlex.join(argv)} exited {process.returncode} before it was up:\n"
                    f"{log.read_text()[-3000:]}"
                )
            if time.monotonic() > deadline:
                raise AssertionError(f"{shlex.join(argv)} not up:\n{log.read_text()[-3000:]}")
            time.sleep(0.1)
        up = _UP_TIMEOUT - (deadline - time.monotonic())
        process.send_signal(signal.SIGTERM)
        code = process.wait(timeout=_UP_TIMEOUT)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    output = log.read_text()
    # uvicorn ends by raising the signal it was stopped by again, once it has shut down
    if code not in (0, -signal.SIGTERM) or "Traceback" in output:
        raise AssertionError(f"{shlex.join(argv)} stopped with {code}:\n{output[-3000:]}")
    return f" (up after {up:.1f}s{note}, then stopped cleanly by SIGTERM)"


def run_python(argv: list[str], extra: dict[str, str], shell: Shell) -> str:
    """``python -m module`` or ``python script.py``, here (scripts also from the
    repository's root, where the docs run them from); benchmarks are not run."""
    shown = shlex.join(argv)
    args = argv[1:]
    if args[:1] != ["-m"]:
        script = Path(args[0]) if Path(args[0]).exists() else ROOT / args[0]
        if Path(args[0]).parts[:1] == ("benchmarks",):
            helped = subprocess.run(
                [sys.executable, str(script), "--help"],
                capture_output=True,
                text=True,
                timeout=120,
                check=True,
            ).stdout
            options = [a.split("=")[0] for a in args[1:] if a.startswith("-")]
            unknown = [
                o for o in options if not re.search(rf"(?<![\w-]){re.escape(o)}(?![\w-])", helped)
            ]
            if unknown:
                raise AssertionError(f"{shown}: its --help names no {', '.join(unknown)}")
            why = "a benchmark: it runs for minutes; its options are in its --help"
            return f"skipped ({why}): {shown}"
        args = [str(script), *args[1:]]
    for name, why in shell.blocked.items():
        if name not in extra:
            return f"skipped ({why}): {shown}"
    result = subprocess.run(
        [sys.executable, *args],
        capture_output=True,
        text=True,
        env={**os.environ, **extra},
        timeout=300,
    )
    if result.returncode != 0:
        raise AssertionError(
            f"{shown} exited {result.returncode}:\n{result.stdout[-3000:]}{result.stderr[-3000:]}"
        )
    return f"ran: {shown}"


def run_make(target: str) -> str:
    """``make TARGET``: the Python lines of its recipe run here, with this interpreter;
    make's own set-up of ``.venv`` (pip) does not, and the targets in ``_MAKE_SKIPPED``
    are listed as skipped."""
    if target in _MAKE_SKIPPED:
        return f"skipped ({_MAKE_SKIPPED[target]}): make {target}"
    makefile = (ROOT / "Makefile").read_text()
    recipe = re.search(rf"^{re.escape(target)}:.*\n((?:\t.*\n?)*)", makefile, re.MULTILINE)
    if recipe is None:
        raise AssertionError(f"make {target}: the Makefile has no such target")
    lines = [shlex.split(line) for line in recipe[1].splitlines()]
    if not lines or any(line[0] != "$(BIN)/python" for line in lines):
        raise AssertionError(f"make {target}: its recipe is not only Python lines:\n{recipe[1]}")
    for line in lines:
        result = subprocess.run(
            [sys.executable, *(str(ROOT / a) if (ROOT / a).is_file() else a for a in line[1:])],
            capture_output=True,
            text=True,
            timeout=300,
        )
        if result.returncode != 0:
            raise AssertionError(
                f"make {target} ({shlex.join(line)}) exited {result.returncode}:\n"
                f"{result.stdout[-3000:]}{result.stderr[-3000:]}"
            )
    shown = "; ".join("python " + shlex.join(line[1:]) for line in lines)
    return f"ran: make {target} as its recipe's Python lines, {shown} (not make's pip set-up)"


def run_shell(source: str, shell: Shell) -> list[str]:
    done: list[str] = []
    for line in source.replace("\\\n", " ").splitlines():
        try:
            argv = shlex.split(line, comments=True)
        except ValueError as exc:
            raise AssertionError(f"a shell line that does not parse ({exc}): {line}") from None
        if argv:
            done += run_line(argv, shell)
    return done


# -- other blocks ----------------------------------------------------------------------------


async def _run_sql(source: str, url: str) -> None:
    import asyncpg

    connection = await asyncpg.connect(url)
    try:
        transaction = connection.transaction()
        await transaction.start()
        try:
            for role in re.findall(r"\bGRANT\b[^;]*?\bTO\s+(\w+)", source, re.I | re.S):
                if not await connection.fetchval("SELECT 1 FROM pg_roles WHERE rolname = $1", role):
                    await connection.execute(f'CREATE ROLE "{role}"')
            await connection.execute(source)
        finally:
            await transaction.rollback()
    finally:
        await connection.close()


def run_sql(source: str, runner: asyncio.Runner) -> str:
    """Run a SQL block on the test's PostgreSQL database, once plait has made its
    schema there (``plait runs list`` opens it, as docs/postgres.md says), in a
    transaction that is rolled back."""
    url = os.environ.get("DOCS_POSTGRES_URL")
    if not url:
        return "not run (SQL for PostgreSQL: no PostgreSQL server for the tests)"
    opened = subprocess.run(
        [sys.executable, "-m", "plait", "runs", "list", "--database", url],
        capture_output=True,
        text=True,
        timeout=120,
    )
    if opened.returncode != 0:
        raise AssertionError(f"plait runs list --database {url} failed:\n{opened.stderr}")
    runner.run(_run_sql(source, url))
    return "ran on PostgreSQL, in a transaction rolled back"


def parse_data(source: str, lang: str) -> str:
    if lang == "json":
        json.loads(source)
    elif lang == "toml":
        tomllib.loads(source)
    elif lang == "ini":
        configparser.ConfigParser().read_string(source)
    else:
        try:
            import yaml
        except ImportError:
            return "not parsed (YAML: PyYAML is not installed)"
        yaml.safe_load(source)
    return f"parsed ({lang})"


def run_block(
    block: dict[str, Any], n: int, ns: dict[str, Any], runner: asyncio.Runner, shell: Shell
) -> str:
    """Run one block; returns what was done with it."""
    source, lang = block["source"], block["lang"]
    name = f"{block['file']}:{block['line']}"
    if lang not in KNOWN_LANGUAGES:
        raise AssertionError(
            f"unknown fence language {lang!r}: fix the fence, or teach doc_session.py "
            "what to do with the language"
        )
    if lang in SHELLS:
        done = run_shell(source, shell)
        return "shell block:" + "".join(f"\n    {d}" for d in done) if done else "no command"
    if lang == "sql":
        return run_sql(source, runner)
    if lang in DATA:
        return parse_data(source, lang)
    if lang not in PYTHON:
        return "not code"
    flags = ast.PyCF_ALLOW_TOP_LEVEL_AWAIT
    if block["fragment"]:
        compile(source, name, "exec", flags=flags)
        return "compiled (a fragment)"
    if is_test_file(source):
        path = Path(f"test_block_{n}.py")
        path.write_text(source)
        result = subprocess.run(
            [
                sys.executable,
                "-m",
                "pytest",
                "-q",
                "-p",
                "no:cacheprovider",
                "-o",
                "asyncio_mode=auto",
                str(path),
            ],
            capture_output=True,
            text=True,
            timeout=300,
        )
        if result.returncode != 0:
            raise AssertionError(f"pytest failed:\n{result.stdout[-4000:]}{result.stderr[-2000:]}")
        return "pytest: " + result.stdout.strip().splitlines()[-1]
    if is_program(source):
        path = Path(f"block_{n}.py")
        path.write_text(source)
        result = subprocess.run(
            [sys.executable, str(path)], capture_output=True, text=True, timeout=300
        )
        if result.returncode != 0:
            raise AssertionError(
                f"python {path} exited {result.returncode}:\n"
                f"{result.stdout[-3000:]}{result.stderr[-3000:]}"
            )
        ns["__name__"] = "doc_session"
    code = compile(source, name, "exec", flags=flags)
    if code.co_flags & inspect.CO_COROUTINE:
        runner.run(eval(code, ns))
        return "ran in the session (top-level await)"
    exec(code, ns)
    return "ran as a program and in the session" if is_program(source) else "ran in the session"


def main() -> int:
    blocks = json.loads(Path(sys.argv[1]).read_text())
    sys.path.insert(0, os.getcwd())
    ns: dict[str, Any] = {"__name__": "doc_session", "__builtins__": __builtins__}
    shell = Shell()
    with asyncio.Runner() as runner:
        for n, block in enumerate(blocks):
            try:
                what = run_block(block, n, ns, runner, shell)
            except BaseException:
                print(f"FAILED {block['file']}:{block['line']} ({block['lang']} block)")
                traceback.print_exc(file=sys.stdout)
                return 1
            print(f"ok {block['file']}:{block['line']} {what}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
