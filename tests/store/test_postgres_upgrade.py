"""A PostgreSQL database whose functions are not this plait's (older ones, or a changed
tree's) gets this plait's when a store opens it: the same functions as a fresh database,
none of which holds a word of the runtime's policy (an error code, a status it chooses),
and its rows go on working. Functions applied by a
newer plait are refused, as a newer schema is."""

from __future__ import annotations

import itertools
import json
import os
from typing import Any

import pytest

from plait.store import queries
from plait.store.migrations import functions, migrations
from plait.store.ops import Batch, EndRun, StepEnd
from unit.sql_choices import chosen_in_sql

asyncpg = pytest.importorskip("asyncpg")
postgres = pytest.importorskip("plait.store.postgres")

_names = itertools.count()
_SCHEMA = '"plait"'
_CHANNEL = "'plait_plait'"

#: words of policy the runtime owns, which no function may hold; nor may one choose a
#: status (``chosen_in_sql``: every status a function writes is handed to it)
POLICY = ("STEP_INTERRUPTED", "CHILD_FAILED", "ChildRunError", "StepInterrupted")
#: functions that are gone: a resume or a retry is a reopen_run with the runtime's ops
GONE = ("resume_run", "retry_run", "requeue")

#: functions of an earlier plait: a signature since changed, and bodies since rewritten
#: (which still named a policy word, or chose a status)
_OLDER = """
CREATE FUNCTION @schema@.end_run(p_run text, p_status text, p_output jsonb, p_error jsonb,
    p_now timestamptz, p_from text[]) RETURNS text[] LANGUAGE sql AS $$ SELECT p_from $$;
CREATE OR REPLACE FUNCTION @schema@.wake_run(p_run text, p_now timestamptz, p_at timestamptz)
RETURNS boolean LANGUAGE sql AS $$ SELECT 'STEP_INTERRUPTED' <> '' $$;
CREATE FUNCTION @schema@.admit_runs(p_owner text) RETURNS SETOF text LANGUAGE sql AS $$
    UPDATE @schema@.runs SET status = 'running', lease_owner = p_owner
    WHERE status = 'queued' RETURNING id $$;
"""


def _url(pg_cluster: Any) -> str:
    return str(pg_cluster.create_database(f"up{os.getpid()}_{next(_names)}"))


async def _make_older(url: str, recorded: tuple[int, str]) -> None:
    """A database with this schema but other functions, recorded as ``recorded``, and a
    child run whose parent's step waits for it."""
    q = queries.load("postgres", schema=_SCHEMA)
    baseline = migrations("postgres").scripts[0]
    conn = await asyncpg.connect(url)
    try:
        async with conn.transaction():
            await conn.execute(q["create_schema"])
            await conn.execute(q["create_schema_version_table"])
            await conn.execute(q["create_functions_version_table"])
            await conn.execute(baseline.text(schema=_SCHEMA, channel=_CHANNEL))
            await conn.execute(q["record_schema_version"], 1, baseline.description())
            await conn.execute(functions().text(schema=_SCHEMA, channel=_CHANNEL))
            await conn.execute(queries.substitute(_OLDER, {"schema": _SCHEMA}))
            await conn.execute(q["record_functions_version"], *recorded)
            await conn.execute(
                "INSERT INTO plait.runs (id, workflow, status, parent_run_id, parent_step_key,"
                " created_at, updated_at) VALUES ('p', 'wf', 'running', NULL, NULL, now(),"
                " now()), ('c1', 'child', 'running', 'p', 'spawn', now(), now())"
            )
            await conn.execute(
                "INSERT INTO plait.steps (run_id, key, seq, name, kind, status, attempts,"
                " invocation_id, child_run_id, created_at, updated_at, worker, attempt_status,"
                " attempt_started) VALUES ('p', 'spawn', 0, 'spawn', 'child', 'running', 1,"
                " 'inv', 'c1', now(), now(), 'w', 'running', now())"
            )
    finally:
        await conn.close()


async def _schema_shape(url: str) -> dict[str, Any]:
    conn = await asyncpg.connect(url)
    try:
        functions_ = await conn.fetch(
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
        triggers = await conn.fetch(
            "SELECT tgname, pg_get_triggerdef(t.oid) FROM pg_trigger t"
            " JOIN pg_class c ON c.oid = t.tgrelid JOIN pg_namespace n"
            " ON n.oid = c.relnamespace WHERE n.nspname = 'plait' AND NOT tgisinternal"
            " ORDER BY tgname"
        )
        versions = await conn.fetch("SELECT version FROM plait.schema_version ORDER BY 1")
        recorded = await conn.fetchrow("SELECT version, digest FROM plait.functions_version")
    finally:
        await conn.close()
    return {
        "functions": {name: text for name, text in functions_},
        "types": [tuple(t) for t in types],
        "triggers": [tuple(t) for t in triggers],
        "versions": [v["version"] for v in versions],
        "recorded": tuple(recorded),
    }


@pytest.mark.parametrize(
    "recorded",
    [(functions().version - 1, "older"), (functions().version, "a changed tree's")],
    ids=["older", "changed"],
)
async def test_postgres_functions_not_this_plaits_are_replaced(
    pg_cluster: Any, recorded: tuple[int, str]
) -> None:
    old, fresh = _url(pg_cluster), _url(pg_cluster)
    await _make_older(old, recorded)
    for url in (old, fresh):
        store = postgres.PostgresStore(url)
        await store.open()
        await store.close()
    upgraded, made = await _schema_shape(old), await _schema_shape(fresh)
    assert upgraded == made
    assert made["versions"] == list(range(1, postgres.SCHEMA_VERSION + 1))
    assert made["recorded"] == (functions().version, functions().digest)
    assert ("op", "parent", "plait.step_end") in made["types"]
    names = {name.split("(")[0] for name in made["functions"]}
    assert names == set(functions().names)
    assert names.isdisjoint(GONE)
    for name, text in made["functions"].items():
        assert not any(word in text for word in POLICY), name
        assert chosen_in_sql(text) == [], name
    # the check sees a status chosen where one is
    assert chosen_in_sql(_OLDER) == ["runs SET status = 'running'"]


async def test_postgres_rows_go_on_after_the_functions_are_replaced(pg_cluster: Any) -> None:
    url = _url(pg_cluster)
    await _make_older(url, (0, "older"))
    store = postgres.PostgresStore(url)
    await store.open()
    try:
        failure = json.dumps({"message": "child run c1 failed: no", "code": "X"})
        end = EndRun(
            "failed",
            None,
            json.dumps({"message": "no"}),
            StepEnd("failed", None, failure, failures=1),
        )
        await store.commit(Batch("c1", [end]))
        (settled,) = await store.get_steps("p")
        assert (settled.status, settled.error) == ("failed", json.loads(failure))
        (attempt,) = await store.get_history("p")
        assert (attempt.status, attempt.error) == ("failed", json.loads(failure))
    finally:
        await store.close()


async def test_postgres_functions_of_a_newer_plait_are_refused(pg_cluster: Any) -> None:
    url = _url(pg_cluster)
    store = postgres.PostgresStore(url)
    await store.open()
    await store.close()
    conn = await asyncpg.connect(url)
    try:
        await conn.execute("UPDATE plait.functions_version SET version = version + 1")
    finally:
        await conn.close()
    with pytest.raises(RuntimeError, match=r"has functions version .*, newer than this plait"):
        await postgres.PostgresStore(url).open()
