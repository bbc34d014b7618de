"""Every code block of README.md and docs/*.md runs, so the documentation cannot drift
from the code: each file's blocks in order, in a fresh folder with no database, the way
``doc_session.py`` describes. The folder holds ``shop.py``, the README's first example,
which the README asks readers to save and other pages import. The commands in
``examples/shop.py``'s docstring run too.
"""

from __future__ import annotations

import ast
import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parent.parent
FILES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
FRAGMENT = "<!-- fragment -->"
_FENCE = re.compile(
    r"^(?P<indent>[ \t]*)```(?P<lang>[\w-]*)[^\n]*\n(?P<body>.*?)^(?P=indent)```[ \t]*$",
    re.MULTILINE | re.DOTALL,
)
pytestmark = pytest.mark.slow


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


def run_session(blocks: list[dict[str, Any]], folder: Path) -> subprocess.CompletedProcess[str]:
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
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT / "src"), str(ROOT)])
    return subprocess.run(
        [sys.executable, str(ROOT / "tests" / "doc_session.py"), "blocks.json"],
        cwd=folder,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )


@pytest.mark.parametrize("path", FILES, ids=lambda p: p.name)
def test_every_block_of_the_page_runs(path: Path, tmp_path: Path) -> None:
    blocks = blocks_of(path)
    done = run_session(blocks, tmp_path)
    assert done.returncode == 0, done.stdout[-8000:] + done.stderr[-3000:]
    assert done.stdout.count("\nok ") + done.stdout.startswith("ok ") == len(blocks)


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
