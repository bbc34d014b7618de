"""The built wheel, installed into a fresh virtual environment without any extra: every
part that needs an extra says which one, in one line, from the command line and from
Python alike. And the source distribution holds what it takes to run the tests.

The development environment has every extra installed, so only a clean install can show
what a user who ran ``pip install plait`` sees. Both are built from a copy of the work
tree: a build leaves ``build/`` and ``*.egg-info`` behind, and a stale ``build/lib`` in
the tree would end up in the next wheel.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tarfile
import tomllib
import venv
from pathlib import Path

import pytest

from support.paths import ROOT

pytestmark = pytest.mark.slow

APP = """
import plait

app = plait.App("shop")


@app.workflow
async def checkout(wf: plait.Workflow, data: dict) -> dict:
    return data
"""

ENGINE = """
import asyncio, sys
import plait
from shop import app

options = dict(arg.split("=", 1) for arg in sys.argv[2:])
flags = {k: v == "1" for k, v in options.items()}
try:
    plait.Engine(app, sys.argv[1], **flags)
except plait.MissingExtraError as exc:
    assert isinstance(exc, ImportError)
    print(type(exc).__name__, exc, exc.extra)
"""


def _clean_env() -> dict[str, str]:
    """This process's environment without what points Python at the source tree (a
    ``PYTHONPATH`` would make pip think plait is installed already)."""
    return {k: v for k, v in os.environ.items() if not k.startswith(("PYTHON", "PLAIT_"))}


#: what a build, a run or a tool leaves in the tree, never part of a distribution
def _must(
    command: list[str], *, cwd: Path | None = None, env: dict[str, str] | None = None
) -> None:
    """Run a set-up step (a build, an install) that the test cannot go on without; on a
    failure, its output's tail says why."""
    done = subprocess.run(
        command, cwd=cwd, capture_output=True, text=True, timeout=600, env=env or _clean_env()
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]


_LEFT_BEHIND = {".git", ".mypy_cache", ".ruff_cache", ".pytest_cache", "__pycache__"}


def _tree_copy(where: Path) -> Path:
    """The work tree as it stands (committed or not), without environments, caches and
    earlier builds, so that a build sees only sources and leaves nothing in the tree."""

    def skipped(folder: str, names: list[str]) -> set[str]:
        left = {n for n in names if n in _LEFT_BEHIND or n.startswith(".venv")}
        if Path(folder) == ROOT:
            left |= {n for n in names if n in ("build", "dist", "test-artifacts")}
            left |= {n for n in names if n.endswith(".db") or ".db-" in n}
        return left | {n for n in names if n.endswith(".egg-info")}

    return Path(shutil.copytree(ROOT, where / "tree", ignore=skipped))


@pytest.fixture(scope="module")
def bare(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A virtual environment with the wheel and its core dependencies only."""
    where = tmp_path_factory.mktemp("wheel")
    dist = where / "dist"
    tree = _tree_copy(where)
    _must([sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(dist), str(tree)])
    (wheel,) = dist.glob("plait-*.whl")
    # built from this tree, so it must hold what the tree holds (not a stale build), its
    # SQL files among them (schemas, migrations, functions) and every dashboard file
    sql = {
        str(path.relative_to(ROOT / "src"))
        for path in (ROOT / "src" / "plait" / "store" / "sql").rglob("*.sql")
    }
    assert installed_files(wheel) >= {
        "plait/errors.py",
        "plait/cli/__init__.py",
        "plait/worker/__init__.py",
        *sql,
    }
    assert installed_files(wheel) >= dashboard_files(), dashboard_files() - installed_files(wheel)
    env_dir = where / "venv"
    venv.create(env_dir, with_pip=True)
    python = env_dir / "bin" / "python"
    _must([str(python), "-m", "pip", "install", "-q", str(wheel)])
    work = where / "work"
    work.mkdir()
    (work / "shop.py").write_text(APP)
    (work / "engine_check.py").write_text(ENGINE)
    return env_dir


def dashboard_files() -> set[str]:
    """The dashboard's templates, stylesheet and script modules in the tree, as paths in
    the package (``plait/http/static/js/main.js``, ...): no Python file names them."""
    http = ROOT / "src" / "plait" / "http"
    found = [*(http / "static").rglob("*"), *(http / "templates").rglob("*")]
    return {p.relative_to(ROOT / "src").as_posix() for p in found if p.is_file()}


def installed_files(wheel: Path) -> set[str]:
    import zipfile

    with zipfile.ZipFile(wheel) as archive:
        return set(archive.namelist())


def _run(bare: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = _clean_env()
    return subprocess.run(
        list(args),
        cwd=bare.parent / "work",
        env={**env, "PATH": f"{bare / 'bin'}:{env.get('PATH', '')}"},
        capture_output=True,
        text=True,
        timeout=120,
    )


def _one_line_error(done: subprocess.CompletedProcess[str], install: str) -> str:
    assert done.returncode != 0, done.stdout + done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    assert f"pip install 'plait[{install}]'" in lines[0], lines[0]
    assert "Traceback" not in done.stderr
    return lines[0]


def test_the_bare_install_has_no_extra(bare: Path) -> None:
    done = _run(
        bare,
        "python",
        "-c",
        "import importlib.util as u; "
        "print([m for m in ('asyncpg', 'starlette', 'uvicorn', 'opentelemetry', "
        "'prometheus_client') if u.find_spec(m)])",
    )
    assert done.stdout.strip() == "[]", done.stdout + done.stderr
    version = _run(bare, "plait", "--version")
    assert version.returncode == 0 and version.stdout.startswith("plait "), version


def test_the_command_line_names_each_missing_extra(bare: Path) -> None:
    pg = "postgresql://plait@127.0.0.1:1/plait"
    _one_line_error(_run(bare, "plait", "serve", "shop:app"), "http")
    _one_line_error(_run(bare, "plait", "runs", "list", "-d", pg), "postgres")
    _one_line_error(_run(bare, "plait", "start", "shop:app", "checkout", "-d", pg), "postgres")
    _one_line_error(_run(bare, "plait", "worker", "shop:app", "--tracing"), "otel")
    _one_line_error(_run(bare, "plait", "worker", "shop:app", "--metrics-port", "9464"), "metrics")


def test_python_gets_a_missing_extra_error_naming_the_install(bare: Path) -> None:
    cases = [
        (["postgresql://plait@127.0.0.1:1/plait"], "postgres"),
        (["sqlite:///x.db", "tracing=1"], "otel"),
        (["sqlite:///x.db", "metrics=1"], "metrics"),
    ]
    for args, extra in cases:
        done = _run(bare, "python", "engine_check.py", *args)
        assert done.returncode == 0, done.stderr
        assert done.stdout.startswith("MissingExtraError "), done.stdout
        assert f"pip install 'plait[{extra}]'" in done.stdout
        assert done.stdout.strip().endswith(f" {extra}")
    for module, extra in [
        ("plait.http", "http"),
        ("plait.store.postgres", "postgres"),
        ("plait.tracing", "otel"),
        ("plait.metrics", "metrics"),
    ]:
        done = _run(bare, "python", "-c", f"import {module}")
        assert done.returncode == 1
        last = done.stderr.strip().splitlines()[-1]
        assert last.startswith("plait.errors.MissingExtraError: "), last
        assert f"pip install 'plait[{extra}]'" in last


#: files the test suite reads from the source distribution, one from each part it needs
SDIST_NEEDS = {
    "tests/conftest.py",
    "tests/support/doc_session.py",
    "LICENSE",
    "README.md",
    "Makefile",
    "docs/concepts.md",
    "examples/typed.py",
    "benchmarks/plot.py",
    "benchmarks/latency_proxy.py",
}

#: the build backend's own entry point, as a build frontend calls it
BUILD_SDIST = """
import sys
from setuptools import build_meta

print(build_meta.build_sdist(sys.argv[1]))
"""


def test_the_sdist_carries_what_the_tests_need(tmp_path: Path) -> None:
    """What ``make test`` reads is in the sdist: the tests with the docs, examples and
    benchmark scripts they load, and no benchmark environment or bytecode with them."""
    tree = _tree_copy(tmp_path)
    # what a benchmark run leaves beside its scripts
    (tree / "benchmarks" / ".venv-dbos" / "lib").mkdir(parents=True)
    (tree / "benchmarks" / ".venv-dbos" / "lib" / "site.py").write_text("")
    (tree / "benchmarks" / "__pycache__").mkdir(exist_ok=True)
    (tree / "benchmarks" / "__pycache__" / "plot.cpython-311.pyc").write_bytes(b"")
    # the backend that pyproject.toml names, installed apart as pip's isolated builds do
    # (the development environment's own setuptools may be older than it needs)
    backend = tmp_path / "backend"
    requires = tomllib.loads((tree / "pyproject.toml").read_text())["build-system"]["requires"]
    _must([sys.executable, "-m", "pip", "install", "-q", "--target", str(backend), *requires])
    dist = tmp_path / "dist"
    dist.mkdir()
    # -S: nothing from this environment's site-packages, only the backend
    _must(
        [sys.executable, "-S", "-c", BUILD_SDIST, str(dist)],
        cwd=tree,
        env={**_clean_env(), "PYTHONPATH": str(backend)},
    )
    (sdist,) = dist.glob("plait-*.tar.gz")
    with tarfile.open(sdist) as archive:
        names = {name.partition("/")[2] for name in archive.getnames()}
    assert names >= SDIST_NEEDS, SDIST_NEEDS - names
    assert "tests/project/test_wheel_extras.py" in names and "src/plait/cli/__init__.py" in names
    assert names >= {f"src/{name}" for name in dashboard_files()}
    unwanted = [n for n in names if ".venv" in n or "__pycache__" in n or n.endswith(".pyc")]
    assert unwanted == []
