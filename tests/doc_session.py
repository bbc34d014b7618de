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
* In a shell block, each ``plait ...`` command runs, except commands with placeholders
  (``RUN_ID``, ``NAME``, ``a|b``) and processes that run until stopped (``worker``,
  ``serve``); each must exit 0. ``start --wait`` on a run that comes to wait for a person
  (an event, an approval) is stopped once it says so.
"""

from __future__ import annotations

import ast
import asyncio
import inspect
import json
import os
import re
import shlex
import subprocess
import sys
import traceback
from pathlib import Path
from typing import Any

SHELLS = {"sh", "bash", "shell", "console"}
_PLACEHOLDER = re.compile(r"^[A-Z][A-Z_]{2,}$")
_RUNS_UNTIL_STOPPED = {"worker", "serve"}


def is_program(source: str) -> bool:
    return "plait.App(" in source


def is_test_file(source: str) -> bool:
    return re.search(r"^(async\s+)?def test_", source, re.MULTILINE) is not None


def shell_commands(source: str) -> list[tuple[list[str], str | None]]:
    """Each ``plait`` command of a shell block, with why it is skipped (None: it runs)."""
    commands: list[tuple[list[str], str | None]] = []
    for line in source.replace("\\\n", " ").splitlines():
        try:
            argv = shlex.split(line, comments=True)
        except ValueError:
            continue
        if not argv or argv[0] != "plait":
            continue
        if any(_PLACEHOLDER.match(a) or "|" in a for a in argv):
            commands.append((argv, "a placeholder"))
        elif len(argv) > 1 and argv[1] in _RUNS_UNTIL_STOPPED:
            commands.append((argv, "runs until stopped"))
        else:
            commands.append((argv, None))
    return commands


def run_command(argv: list[str]) -> str:
    """Run one ``plait`` command; it must exit 0, or come to wait for a person."""
    process = subprocess.Popen(
        [sys.executable, "-m", "plait", *argv[1:]],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
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
    if process.returncode != 0:
        raise AssertionError(
            f"{shlex.join(argv)} exited {process.returncode}:\n"
            f"{''.join(seen)[-3000:]}{errors[-3000:]}"
        )
    return ""


def run_block(block: dict[str, Any], n: int, ns: dict[str, Any], runner: asyncio.Runner) -> str:
    """Run one block; returns what was done with it."""
    source, lang = block["source"], block["lang"]
    name = f"{block['file']}:{block['line']}"
    if lang in SHELLS:
        done = []
        for argv, skip in shell_commands(source):
            if skip is not None:
                done.append(f"skipped ({skip}): {shlex.join(argv)}")
                continue
            done.append(f"ran: {shlex.join(argv)}{run_command(argv)}")
        return "; ".join(done) or "no plait command"
    if lang not in ("python", "py"):
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
    with asyncio.Runner() as runner:
        for n, block in enumerate(blocks):
            try:
                what = run_block(block, n, ns, runner)
            except BaseException:
                print(f"FAILED {block['file']}:{block['line']} ({block['lang']} block)")
                traceback.print_exc(file=sys.stdout)
                return 1
            print(f"ok {block['file']}:{block['line']} {what}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
