"""plait's pytest plugin, registered through the ``pytest11`` entry point.

Fixtures:

* ``plait_database_url``: ``PLAIT_TEST_DATABASE_URL`` if set, else a SQLite file in the
  test's temporary directory. On PostgreSQL each test gets a schema of its own (dropped
  afterwards), so tests never see each other's runs.
* ``plait_engine``: a ``TestEngine`` (virtual time) on that database for the app your
  ``plait_app`` fixture returns, open for the test and closed after it.

``plait_engine`` is an async fixture: it needs pytest-asyncio. The module imports
nothing of plait's engine until a fixture is used, so having plait installed costs other
test suites nothing.
"""

from __future__ import annotations

import asyncio
import os
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

import pytest

if TYPE_CHECKING:
    from plait.testing.engine import TestEngine

#: the environment variable that points the fixtures at a database of your choosing
DATABASE_ENV = "PLAIT_TEST_DATABASE_URL"

try:
    import pytest_asyncio
except ImportError:  # pragma: no cover - the dev extra installs it
    # the plugin still loads, and its async fixture says what to install
    pytest_asyncio = None  # type: ignore[assignment]


@pytest.fixture
def plait_app() -> Any:
    """Override this fixture: return the ``plait.App`` your tests run."""
    pytest.fail(
        "plait_engine needs a `plait_app` fixture: define one in your conftest.py or test "
        "module that returns your plait.App",
        pytrace=False,
    )


@pytest.fixture
def plait_database_url(tmp_path: Path) -> Iterator[str]:
    """``PLAIT_TEST_DATABASE_URL`` (a schema of its own per test on PostgreSQL), or a
    temporary SQLite file."""
    url = os.environ.get(DATABASE_ENV)
    if not url:
        yield f"sqlite:///{tmp_path / 'plait.db'}"
        return
    if not url.startswith(("postgresql:", "postgres:")):
        yield url
        return
    schema = f"plait_test_{uuid.uuid4().hex[:12]}"
    yield _with_schema(url, schema)
    asyncio.run(_drop_schema(url, schema))


if pytest_asyncio is not None:

    @pytest_asyncio.fixture
    async def plait_engine(  # pyright: ignore[reportRedeclaration]
        plait_app: Any, plait_database_url: str
    ) -> AsyncIterator[TestEngine]:
        """A ``TestEngine`` for ``plait_app`` on ``plait_database_url``, in virtual time."""
        from plait.testing.engine import TestEngine

        async with TestEngine(plait_app, plait_database_url) as engine:
            yield engine

else:  # pragma: no cover

    @pytest.fixture
    def plait_engine() -> Any:
        pytest.fail(
            "plait_engine is an async fixture: install pytest-asyncio (pip install pytest-asyncio)",
            pytrace=False,
        )


def _with_schema(url: str, schema: str) -> str:
    """``url`` with its ``schema`` query parameter set (the PostgreSQL store reads it)."""
    parts = urlsplit(url)
    query = [(k, v) for k, v in parse_qsl(parts.query) if k != "schema"]
    query.append(("schema", schema))
    return urlunsplit(parts._replace(query=urlencode(query)))


async def _drop_schema(url: str, schema: str) -> None:
    import asyncpg

    from plait.store.postgres.pool import split_url

    dsn, _ = split_url(url)
    conn = await asyncpg.connect(dsn)
    try:
        await conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')
    finally:
        await conn.close()
