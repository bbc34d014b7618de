"""``start(connection=...)``'s bad input, on every store: a connection of the wrong kind,
to another database, or with no open transaction is refused, saying which; the happy
path and the workers are in ``tests/processes/test_transactional_start.py``, but for
``start_many(connection=...)``'s, here."""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import pytest

import plait


def app() -> plait.App:
    made = plait.App("orders")

    @made.workflow
    async def ship(wf: plait.Workflow, data: Any) -> Any:
        return data

    return made


async def test_a_connection_of_the_wrong_kind_is_refused(
    engine_factory: Any, database: str, tmp_path: Path
) -> None:
    async with engine_factory(app(), workers=False) as engine:
        if database.startswith("sqlite"):
            with pytest.raises(TypeError, match=r"sqlite3\.Connection"):
                await engine.start("ship", connection=object())
            return
        wrong = sqlite3.connect(tmp_path / "other.db")
        with pytest.raises(TypeError, match="asyncpg connection"):
            await engine.start("ship", connection=wrong)
        wrong.close()


async def test_another_database_or_no_transaction_is_refused(
    engine_factory: Any, database: str, tmp_path: Path
) -> None:
    async with engine_factory(app(), workers=False) as engine:
        with pytest.raises(ValueError, match="inline=True"):
            await engine.start("ship", inline=True, connection=object())
        if database.startswith("sqlite"):
            other = sqlite3.connect(tmp_path / "other.db")
            other.execute("CREATE TABLE t (x)")
            other.execute("INSERT INTO t VALUES (1)")
            with pytest.raises(ValueError, match="not to this engine's database"):
                await engine.start("ship", connection=other)
            same = sqlite3.connect(database.removeprefix("sqlite:///"))
            with pytest.raises(ValueError, match="no open transaction"):
                await engine.start("ship", connection=same)
            return
        import asyncpg

        dsn = urlsplit(database)._replace(query="")
        same = await asyncpg.connect(urlunsplit(dsn))
        other = await asyncpg.connect(urlunsplit(dsn._replace(path="/postgres")))
        try:
            with pytest.raises(ValueError, match="no open transaction"):
                await engine.start("ship", connection=same)
            async with other.transaction():
                with pytest.raises(ValueError, match="not to this engine's database"):
                    await engine.start("ship", connection=other)
        finally:
            await same.close()
            await other.close()
        assert await engine.list_runs() == []


async def test_start_many_writes_its_runs_in_the_caller_s_transaction(
    engine_factory: Any, database: str
) -> None:
    """``start_many`` takes ``start``'s options, ``connection`` too: its runs are
    written in the caller's transaction, gone with its rollback, there with its commit."""
    async with engine_factory(app(), workers=False) as engine:
        with pytest.raises(ValueError, match="inline=True"):
            await engine.start_many("ship", [1], inline=True, connection=object())
        with pytest.raises(ValueError, match="debounce"):
            await engine.start_many("ship", [1], debounce="5s", connection=object())
        if database.startswith("sqlite"):
            conn = sqlite3.connect(database.removeprefix("sqlite:///"), isolation_level=None)
            try:
                for end in ("ROLLBACK", "COMMIT"):
                    conn.execute("BEGIN")
                    ids = await engine.start_many("ship", [1, 2], connection=conn)
                    conn.execute(end)
                    assert len(set(ids)) == 2
            finally:
                conn.close()
        else:
            import asyncpg

            pg = await asyncpg.connect(urlunsplit(urlsplit(database)._replace(query="")))
            try:
                for end in ("rollback", "commit"):
                    transaction = pg.transaction()
                    await transaction.start()
                    ids = await engine.start_many("ship", [1, 2], connection=pg)
                    await getattr(transaction, end)()
                    assert len(set(ids)) == 2
            finally:
                await pg.close()
        # the rolled-back runs are not there; the committed ones are, with their inputs
        runs = await engine.list_runs()
        assert sorted(r.id for r in runs) == sorted(ids)
        assert sorted(r.input for r in runs) == [1, 2]
