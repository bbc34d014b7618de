"""The migration to json values: a PostgreSQL database of schema 5 (jsonb values) keeps the
values it has (what jsonb made of them), and what is written after it comes back exactly."""

from __future__ import annotations

import itertools
import os
from typing import Any

import pytest

from plait.store import queries
from plait.store.migrations import functions, migrations

asyncpg = pytest.importorskip("asyncpg")
postgres = pytest.importorskip("plait.store.postgres")

_names = itertools.count()
_SCHEMA = '"plait"'
_CHANNEL = "'plait_plait'"


async def _make_version_5(url: str) -> None:
    """A database built by scripts 1 to 5, with a run whose values jsonb stored."""
    q = queries.load("postgres", schema=_SCHEMA)
    conn = await asyncpg.connect(url)
    try:
        async with conn.transaction():
            await conn.execute(q["create_schema"])
            await conn.execute(q["create_schema_version_table"])
            await conn.execute(q["create_functions_version_table"])
            for script in migrations("postgres").scripts[:5]:
                await conn.execute(script.text(schema=_SCHEMA, channel=_CHANNEL))
                await conn.execute(q["record_schema_version"], script.version, script.description())
            await conn.execute(q["record_functions_version"], functions().version - 1, "older")
            await conn.execute(
                "INSERT INTO plait.runs (id, workflow, status, input, created_at, updated_at)"
                " VALUES ('old', 'wf', 'running', '{\"big\": 1e16, \"zero\": -0.0, \"s\": \"é\"}',"
                " now(), now())"
            )
            await conn.execute(
                "INSERT INTO plait.run_values (run_id, key, value, updated_at)"
                " VALUES ('old', 'k', '[1e300]', now())"
            )
    finally:
        await conn.close()


async def test_migrated_values_keep_what_they_had_and_new_ones_come_back_exactly(
    pg_cluster: Any,
) -> None:
    url = str(pg_cluster.create_database(f"num{os.getpid()}_{next(_names)}"))
    await _make_version_5(url)
    store = postgres.PostgresStore(url)
    await store.open()
    try:
        run = await store.get_run("old")
        assert run is not None
        # jsonb had already made an int of 1e16 and dropped the sign of -0.0
        assert run.input == {"big": 10**16, "zero": 0.0, "s": "é"}
        assert type(run.input["big"]) is int
        conn = await asyncpg.connect(url)
        try:
            kinds = dict(
                await conn.fetch(
                    "SELECT table_name || '.' || column_name, data_type"
                    " FROM information_schema.columns WHERE table_schema = 'plait'"
                    " AND data_type IN ('json', 'jsonb')"
                )
            )
            assert set(kinds.values()) == {"json"}, kinds
            assert kinds["runs.input"] == "json"
            value = await conn.fetchval("SELECT value FROM plait.run_values WHERE run_id = 'old'")
            assert value == "[1" + "0" * 300 + "]"
            await conn.execute("UPDATE plait.runs SET output = $1 WHERE id = 'old'", "[1e16,-0.0]")
        finally:
            await conn.close()
        again = await store.get_run("old")
        assert again is not None
        out = again.output
        assert out == [1e16, -0.0] and type(out[0]) is float and str(out[1]) == "-0.0"
    finally:
        await store.close()
