"""The pytest plugin: its fixtures in a test session of their own (pytester), loaded the
way a user's session loads it, by name, with plugin autoloading off so the result does not
depend on what else is installed."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

import pytest

SRC = str(Path(__file__).resolve().parent.parent / "src")

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
