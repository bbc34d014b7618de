"""Every code block of README.md and docs/*.md runs, so the documentation cannot drift
from the code: each file's blocks in order, in a fresh folder with no database, the way
``doc_session.py`` describes. The folder holds ``shop.py``, the README's first example,
which the README asks readers to save and other pages import. The commands in
``examples/shop.py``'s docstring run too.

A page whose blocks name PostgreSQL (a SQL block, a ``postgresql://`` URL in a shell
block) gets a database of its own on the tests' PostgreSQL server, where there is one;
without one, what needs it is skipped, saying why. What each block did, and why a
command did not run, is printed (``pytest -rP tests/project/test_docs.py`` shows it).
"""

from __future__ import annotations

import ast
import itertools
import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from support.paths import ROOT

FILES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
FRAGMENT = "<!-- fragment -->"
_FENCE = re.compile(
    r"^(?P<indent>[ \t]*)```(?P<lang>[\w-]*)[^\n]*\n(?P<body>.*?)^(?P=indent)```[ \t]*$",
    re.MULTILINE | re.DOTALL,
)
SHELLS = {"sh", "bash", "shell", "console"}
pytestmark = pytest.mark.slow
_databases = itertools.count()


def blocks_of(path: Path) -> list[dict[str, Any]]:
    """The fenced blocks of a Markdown file, with their language, line and whether the
    line before them marks them as a fragment."""
    text = path.read_text()
    found = []
    for match in _FENCE.finditer(text):
        indent = match["indent"]
        body = "".join(
            line[len(indent) :] if line.startswith(indent) else line
            for line in match["body"].splitlines(keepends=True)
        )
        before = text[: match.start()].rstrip().rsplit("\n", 1)[-1].strip()
        found.append(
            {
                "file": str(path.relative_to(ROOT)),
                "line": text.count("\n", 0, match.start()) + 1,
                "lang": match["lang"].lower(),
                "source": body,
                "fragment": before == FRAGMENT,
            }
        )
    return found


def docstring_commands(path: Path) -> list[dict[str, Any]]:
    """The literal blocks (after ``::``) of a module's docstring, as shell blocks."""
    doc = ast.get_docstring(ast.parse(path.read_text())) or ""
    found = []
    for match in re.finditer(r"::\n\n((?:[ \t]+.*\n?|\n)+)", doc):
        lines = [line.strip() for line in match[1].splitlines()]
        found.append(
            {
                "file": str(path.relative_to(ROOT)),
                "line": 1,
                "lang": "sh",
                "source": "\n".join(lines),
                "fragment": False,
            }
        )
    return found


def readme_program() -> str:
    (first, *_rest) = [b for b in blocks_of(ROOT / "README.md") if b["lang"] == "python"]
    return str(first["source"])


def needs_postgres(blocks: list[dict[str, Any]]) -> bool:
    """Whether a page has something to run on PostgreSQL."""
    return any(
        b["lang"] == "sql" or (b["lang"] in SHELLS and "postgresql://" in b["source"])
        for b in blocks
    )


def postgres_database(request: pytest.FixtureRequest, name: str) -> str | None:
    """A fresh database on the tests' PostgreSQL server (conftest's ``pg_cluster``), or
    None where the tests run without PostgreSQL, as conftest decides for the stores."""
    stores = os.environ.get("PLAIT_TEST_STORES")
    if (stores and "postgres" not in stores.split(",")) or (
        not stores and os.environ.get("PLAIT_SKIP_POSTGRES") == "1"
    ):
        return None
    try:
        cluster = request.getfixturevalue("pg_cluster")
    except pytest.skip.Exception:
        return None
    return str(cluster.create_database(f"docs_{name}_{os.getpid()}_{next(_databases)}"))


def run_session(
    blocks: list[dict[str, Any]], folder: Path, postgres: str | None = None
) -> subprocess.CompletedProcess[str]:
    (folder / "shop.py").write_text(readme_program())
    # test blocks get plait's pytest plugin whether or not plait is installed with it
    (folder / "conftest.py").write_text(
        "def pytest_configure(config):\n"
        "    from plait.testing import pytest_plugin\n"
        "    if not config.pluginmanager.is_registered(pytest_plugin):\n"
        "        config.pluginmanager.register(pytest_plugin, 'plait')\n"
    )
    (folder / "blocks.json").write_text(json.dumps(blocks))
    env = {k: v for k, v in os.environ.items() if not k.startswith("PLAIT_")}
    # tests/: doc_session.py imports the support modules it shares with the tests
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT / "src"), str(ROOT), str(ROOT / "tests")])
    env.pop("DOCS_POSTGRES_URL", None)
    if postgres is not None:
        env["DOCS_POSTGRES_URL"] = postgres
    return subprocess.run(
        [sys.executable, str(ROOT / "tests" / "support" / "doc_session.py"), "blocks.json"],
        cwd=folder,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )


# a page runs its blocks one after another, some as programs of their own: the README's
# take about 50 s on a quiet machine
@pytest.mark.timeout(400)
@pytest.mark.parametrize("path", FILES, ids=lambda p: p.name)
def test_every_block_of_the_page_runs(
    path: Path, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    blocks = blocks_of(path)
    postgres = None
    if needs_postgres(blocks):
        postgres = postgres_database(request, re.sub(r"\W", "_", path.stem))
    done = run_session(blocks, tmp_path, postgres)
    print(done.stdout)  # the report: what ran, what was skipped and why
    assert done.returncode == 0, done.stdout[-8000:] + done.stderr[-3000:]
    assert done.stdout.count("\nok ") + done.stdout.startswith("ok ") == len(blocks)


@pytest.mark.parametrize("path", FILES, ids=lambda p: p.name)
def test_every_fence_opens_a_block_that_is_found(path: Path) -> None:
    """A fence the block pattern misses (four backticks, a ``~~~`` fence, an indent that
    does not match its closing fence) would hide its block from every check."""
    text = path.read_text()
    fences = re.findall(r"^[ \t]*(?:```|~~~)", text, re.MULTILINE)
    assert len(fences) == 2 * len(blocks_of(path))


def test_the_shop_example_commands_run(tmp_path: Path) -> None:
    blocks = docstring_commands(ROOT / "examples" / "shop.py")
    assert blocks, "examples/shop.py's docstring shows no command"
    done = run_session(blocks, tmp_path)
    assert done.returncode == 0, done.stdout[-8000:] + done.stderr[-3000:]
    assert "ran: plait start examples.shop:app place_order --wait" in done.stdout


def test_python_blocks_are_found_and_fragments_are_rare() -> None:
    python = [b for f in FILES for b in blocks_of(f) if b["lang"] == "python"]
    assert len(python) >= 20
    fragments = [f"{b['file']}:{b['line']}" for b in python if b["fragment"]]
    assert len(fragments) <= 3, f"keep {FRAGMENT} rare: {fragments}"


def test_a_broken_block_fails_its_page(tmp_path: Path) -> None:
    """The runner must not pass what does not run."""
    page = tmp_path / "page.md"
    page.write_text("```python\nimport plait\nplait.App('x')\nraise SystemExit(3)\n```\n")
    blocks = [dict(b, file="page.md") for b in _blocks_at(page)]
    (tmp_path / "session").mkdir()
    done = run_session(blocks, tmp_path / "session")
    assert done.returncode == 1 and "FAILED page.md:1" in done.stdout


def test_an_unknown_fence_language_fails_its_page(tmp_path: Path) -> None:
    """A typo in a fence's language must not pass its block as "not code"."""
    blocks = [_block("pyhton", "raise SystemExit(3)\n")]
    done = run_session(blocks, tmp_path)
    assert done.returncode == 1 and "unknown fence language 'pyhton'" in done.stdout


def test_a_command_the_cli_does_not_take_fails_even_unrun(tmp_path: Path) -> None:
    """A command that cannot run (no run for its RUN_ID) is still parsed by the CLI."""
    blocks = [_block("sh", "plait runs show RUN_ID --no-such-option\n")]
    done = run_session(blocks, tmp_path)
    assert done.returncode == 1 and "No such option: --no-such-option" in done.stdout


def test_placeholders_and_exports_take_the_session_s_values(tmp_path: Path) -> None:
    source = (
        "export PLAIT_DATABASE_URL=sqlite:///other.db\n"
        "plait start shop:app checkout --input '{\"amount\": 1}'\n"
        "plait runs show RUN_ID\n"
        "plait cancel RUN_ID | plait retry RUN_ID\n"
        "plait send-event RUN_ID NAME\n"
    )
    done = run_session([_block("sh", source)], tmp_path)
    assert done.returncode == 0, done.stdout[-8000:] + done.stderr[-3000:]
    assert (tmp_path / "other.db").exists() and not (tmp_path / "plait.db").exists()
    (run_id,) = set(
        re.findall(r"ran: plait runs show (\S+) \[RUN_ID: the newest run\]", done.stdout)
    )
    assert f"ran: plait cancel {run_id} [RUN_ID: the newest live run]" in done.stdout
    assert f"refused, as it should: error: cannot retry run '{run_id}': it is cancelled" in (
        done.stdout
    )
    assert "skipped (no live run in the database; parsed): plait send-event" in done.stdout


def _block(lang: str, source: str) -> dict[str, Any]:
    return {"file": "page.md", "line": 1, "lang": lang, "source": source, "fragment": False}


def _blocks_at(path: Path) -> list[dict[str, Any]]:
    text = path.read_text()
    return [
        {
            "file": path.name,
            "line": text.count("\n", 0, m.start()) + 1,
            "lang": m["lang"],
            "source": m["body"],
            "fragment": False,
        }
        for m in _FENCE.finditer(text)
    ]
