"""Shared fixtures: every semantic test runs against each store (the conformance suite)."""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import os
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

import plait
from support.stores import STORES


def _postgres_available() -> str | None:
    try:
        import asyncpg  # noqa: F401

        from plait.store.postgres import PostgresStore  # noqa: F401
    except ImportError as exc:
        return f"PostgreSQL store not available: {exc}"
    from plait.testing.postgres import find_pg_bin

    if find_pg_bin() is None:
        return "no PostgreSQL binaries installed"
    return None


@pytest.fixture(scope="session")
def pg_cluster() -> Any:
    reason = _postgres_available()
    if reason:
        pytest.skip(reason)
    from plait.testing.postgres import TemporaryCluster

    cluster = TemporaryCluster(fsync=False)
    cluster.start()
    yield cluster
    cluster.cleanup()


@pytest.fixture(scope="session")
def pg_template(pg_cluster: Any) -> str:
    """A database migrated once, which each test's database copies: a test then opens
    a store whose migrations have nothing left to do (CREATE DATABASE ... TEMPLATE
    copies files, far faster than running every migration again)."""
    from plait.store import make_store

    name = f"plait_template_{os.getpid()}"
    url = pg_cluster.create_database(name)

    async def migrate() -> None:
        store = make_store(url)
        await store.open()
        await store.close()

    # its own thread and loop: a session fixture may be set up while a test's loop runs
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        pool.submit(asyncio.run, migrate()).result()
    return name


_db_counter = 0

pytest_plugins = ["pytester"]


def pytest_configure(config: pytest.Config) -> None:
    """plait's pytest plugin comes through its entry point where plait is installed with
    it; running from a source tree whose install lacks the entry point, register it here,
    so the example tests and docs/testing.md hold either way."""
    from plait.testing import pytest_plugin

    if not config.pluginmanager.is_registered(pytest_plugin):
        config.pluginmanager.register(pytest_plugin, "plait")


@pytest.fixture(params=STORES)
def database(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """A fresh database URL for each test, on each store (on PostgreSQL a copy of
    the migrated template: no run, no row, the schema in place)."""
    global _db_counter
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path / 'plait.db'}"
        return
    cluster = request.getfixturevalue("pg_cluster")
    template = request.getfixturevalue("pg_template")
    _db_counter += 1
    name = f"t{os.getpid()}_{_db_counter}"
    yield cluster.create_database(name, template=template)
    # dropped at once: a run keeping all of them fills gigabytes and spends minutes
    # deleting them at its end
    cluster.drop_database(name)


@pytest.fixture
def engine_factory(database: str) -> Callable[..., Any]:
    """Open engines on the test's database; all are closed at the end of the test."""
    opened: list[plait.Engine] = []

    @contextlib.asynccontextmanager
    async def make(app: plait.App, **options: Any) -> AsyncIterator[plait.Engine]:
        options.setdefault("poll_interval", 0.2)
        engine = plait.Engine(app, database, **options)
        await engine.open()
        opened.append(engine)
        try:
            yield engine
        finally:
            await engine.close()

    return make
