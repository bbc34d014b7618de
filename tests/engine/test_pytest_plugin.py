"""The pytest plugin: its fixtures in a test session of their own (pytester), loaded by
name with plugin autoloading off so the result does not depend on what else is installed;
and once the way an installed plait offers it, through its ``pytest11`` entry point."""

from __future__ import annotations

import asyncio
import importlib.metadata
import os
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from support.paths import ROOT

SRC = str(ROOT / "src")
PLUGIN = "plait.testing.pytest_plugin"

USER_TESTS = """
import plait
import pytest
from plait.testing import TestEngine, assert_steps

app = plait.App("user")

@app.workflow
async def remind(wf: plait.Workflow, data: dict) -> str:
    await wf.sleep("wait a year", "365d")
    return await wf.do("send", lambda: f"reminded {data['who']}")

@pytest.fixture
def plait_app():
    return app

async def test_a_year_passes(plait_engine, plait_database_url):
    assert isinstance(plait_engine, TestEngine)
    assert plait_engine.url.startswith(plait_database_url.split("?")[0])
    run_id = await plait_engine.start("remind", {"who": "ann"})
    run = await plait_engine.wait(run_id, timeout=10)
    assert run.output == "reminded ann"
    await assert_steps(plait_engine, run_id, ["wait a year", "send"])
"""


@pytest.fixture(autouse=True)
def _session_env(monkeypatch: pytest.MonkeyPatch) -> None:
    """The inner session imports this source tree and loads only the plugins named."""
    env = os.environ.get("PYTHONPATH", "")
    monkeypatch.setenv("PYTHONPATH", f"{SRC}{os.pathsep}{env}" if env else SRC)
    monkeypatch.setenv("PYTEST_DISABLE_PLUGIN_AUTOLOAD", "1")
    monkeypatch.delenv("PLAIT_TEST_DATABASE_URL", raising=False)


def _run(pytester: pytest.Pytester) -> pytest.RunResult:
    pytester.makeini("[pytest]\nasyncio_mode = auto\n")
    return pytester.runpytest_subprocess(
        "-p", "plait.testing.pytest_plugin", "-p", "asyncio", "-p", "no:cacheprovider"
    )


def test_plait_engine_runs_a_users_app_in_virtual_time(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_user=USER_TESTS)
    result = _run(pytester)
    result.assert_outcomes(passed=1)


def test_plait_database_url_comes_from_the_environment(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    url = f"sqlite:///{tmp_path / 'chosen.db'}"
    monkeypatch.setenv("PLAIT_TEST_DATABASE_URL", url)
    pytester.makepyfile(
        test_url=f"""
def test_url(plait_database_url):
    assert plait_database_url == {url!r}
"""
    )
    _run(pytester).assert_outcomes(passed=1)


def test_each_postgres_test_gets_a_schema_of_its_own(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, pg_cluster
) -> None:
    asyncpg = pytest.importorskip("asyncpg")
    from plait.store.postgres.pool import split_url

    url = pg_cluster.create_database("plugin_schemas")
    monkeypatch.setenv("PLAIT_TEST_DATABASE_URL", url)
    pytester.makepyfile(test_user=USER_TESTS + USER_TESTS.replace("a_year", "another_year"))
    _run(pytester).assert_outcomes(passed=2)

    async def schemas() -> list[str]:
        conn = await asyncpg.connect(split_url(url)[0])
        try:
            rows = await conn.fetch("SELECT nspname FROM pg_namespace WHERE nspname LIKE 'plait%'")
            return [r[0] for r in rows]
        finally:
            await conn.close()

    assert asyncio.run(schemas()) == []  # each test's schema was dropped after it


def test_a_missing_plait_app_fixture_is_explained(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(
        test_missing="""
async def test_needs_app(plait_engine):
    pass
"""
    )
    result = _run(pytester)
    result.assert_outcomes(errors=1)
    result.stdout.fnmatch_lines(["*needs a `plait_app` fixture*"])


ENTRY_POINT_TESTS = (
    USER_TESTS
    + """

def test_the_plugin_came_through_the_entry_point(pytestconfig):
    from plait.testing import pytest_plugin

    assert pytestconfig.pluginmanager.get_plugin("plait") is pytest_plugin
    loaded = {
        plugin: dist.project_name
        for plugin, dist in pytestconfig.pluginmanager.list_plugin_distinfo()
    }
    assert loaded[pytest_plugin] == "plait"
"""
)


def test_the_installed_entry_point_offers_the_fixtures(tmp_path: Path) -> None:
    """A user's session with no conftest and no ``-p``: plugin autoloading finds the
    fixtures through the entry point installed with plait."""
    declared = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["entry-points"]
    assert declared["pytest11"] == {"plait": PLUGIN}
    try:
        installed = importlib.metadata.distribution("plait").entry_points
    except importlib.metadata.PackageNotFoundError:
        pytest.skip("plait is not installed here (run from a source tree)")
    assert [(e.name, e.value) for e in installed if e.group == "pytest11"] == [("plait", PLUGIN)]

    (tmp_path / "pytest.ini").write_text("[pytest]\nasyncio_mode = auto\n")
    (tmp_path / "test_user.py").write_text(ENTRY_POINT_TESTS)
    env = {
        name: value
        for name, value in os.environ.items()
        if name not in ("PYTEST_DISABLE_PLUGIN_AUTOLOAD", "PYTEST_PLUGINS", "PYTEST_ADDOPTS")
        and not name.startswith("PLAIT_")
    }
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q", "test_user.py"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "2 passed" in done.stdout, done.stdout
