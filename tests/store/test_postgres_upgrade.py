"""A PostgreSQL database made by schema version 1 is upgraded in place and ends up with
the same functions and types as a fresh one, none of which decides a step's status."""

from __future__ import annotations

import itertools
import json
import os
from typing import Any

import pytest

from plait.store import queries
from plait.store.migrations import migrations
from plait.store.ops import Batch, EndRun, StepEnd

asyncpg = pytest.importorskip("asyncpg")
postgres = pytest.importorskip("plait.store.postgres")

_names = itertools.count()
_SCHEMA = '"plait"'

#: words of the policy version 1 kept in PL/pgSQL; the runtime owns all of it now
POLICY = ("STEP_INTERRUPTED", "CHILD_FAILED", "ChildRunError", "StepInterrupted")
GONE = ("resume_run", "retry_run", "requeue")


def _url(pg_cluster: Any) -> str:
    return str(pg_cluster.create_database(f"up{os.getpid()}_{next(_names)}"))


async def _make_version_1(url: str) -> None:
    """What plait wrote with only the first migration, with a child run whose parent's
    step waits for it."""
    q = queries.load("postgres", schema=_SCHEMA)
    first = migrations("postgres").scripts[0]
    conn = await asyncpg.connect(url)
    try:
        async with conn.transaction():
            await conn.execute(q["create_schema"])
            await conn.execute(q["create_schema_version_table"])
            await conn.execute(first.text(schema=_SCHEMA, channel="'plait_plait'"))
            await conn.execute(q["record_schema_version"], 1, first.description())
            await conn.execute(
                "INSERT INTO plait.runs (id, workflow, status, parent_run_id, parent_step_key,"
                " created_at, updated_at) VALUES ('p', 'wf', 'running', NULL, NULL, now(),"
                " now()), ('c1', 'child', 'running', 'p', 'spawn', now(), now())"
            )
            await conn.execute(
                "INSERT INTO plait.steps (run_id, key, seq, name, kind, status, attempts,"
                " invocation_id, child_run_id, created_at, updated_at) VALUES ('p', 'spawn',"
                " 0, 'spawn', 'child', 'running', 1, 'inv', 'c1', now(), now())"
            )
            await conn.execute(
                "INSERT INTO plait.attempts (run_id, key, attempt, status, started_at)"
                " VALUES ('p', 'spawn', 1, 'running', now())"
            )
    finally:
        await conn.close()


async def _schema_shape(url: str) -> dict[str, Any]:
    conn = await asyncpg.connect(url)
    try:
        functions = await conn.fetch(
            "SELECT p.proname || '(' || pg_get_function_identity_arguments(p.oid) || ')',"
            " pg_get_functiondef(p.oid) FROM pg_proc p JOIN pg_namespace n"
            " ON n.oid = p.pronamespace WHERE n.nspname = 'plait' ORDER BY 1"
        )
        types = await conn.fetch(
            "SELECT c.relname, a.attname, format_type(a.atttypid, a.atttypmod)"
            " FROM pg_attribute a JOIN pg_class c ON c.oid = a.attrelid"
            " JOIN pg_namespace n ON n.oid = c.relnamespace"
            " WHERE n.nspname = 'plait' AND c.relkind = 'c' AND a.attnum > 0"
            " AND NOT a.attisdropped ORDER BY c.relname, a.attnum"
        )
        versions = await conn.fetch("SELECT version FROM plait.schema_version ORDER BY 1")
    finally:
        await conn.close()
    return {
        "functions": {name: text for name, text in functions},
        "types": [tuple(t) for t in types],
        "versions": [v["version"] for v in versions],
    }


async def test_postgres_version_1_upgrades_to_the_fresh_schema(pg_cluster: Any) -> None:
    old, fresh = _url(pg_cluster), _url(pg_cluster)
    await _make_version_1(old)
    for url in (old, fresh):
        store = postgres.PostgresStore(url)
        await store.open()
        await store.close()
    upgraded, made = await _schema_shape(old), await _schema_shape(fresh)
    assert upgraded == made
    assert made["versions"] == list(range(1, postgres.SCHEMA_VERSION + 1))
    assert ("op", "parent", "plait.step_end") in made["types"]
    names = {name.split("(")[0] for name in made["functions"]}
    assert names.isdisjoint(GONE)
    for name, text in made["functions"].items():
        assert not any(word in text for word in POLICY), name


async def test_postgres_rows_of_version_1_work_after_the_upgrade(pg_cluster: Any) -> None:
    url = _url(pg_cluster)
    await _make_version_1(url)
    store = postgres.PostgresStore(url)
    await store.open()
    try:
        failure = json.dumps({"message": "child run c1 failed: no", "code": "X"})
        end = EndRun(
            "failed", None, json.dumps({"message": "no"}), StepEnd("failed", None, failure)
        )
        await store.commit(Batch("c1", [end]))
        (settled,) = await store.get_steps("p")
        assert (settled.status, settled.error) == ("failed", json.loads(failure))
        (attempt,) = await store.get_history("p")
        assert (attempt.status, attempt.error) == ("failed", json.loads(failure))
    finally:
        await store.close()
