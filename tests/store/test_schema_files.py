"""Each dialect's ``schema.sql`` is the schema its migrations build: a database made from the
file (and, on PostgreSQL, the functions of ``functions/``) has the same tables, columns,
defaults, constraints, indexes, types, sequences, triggers and functions as one a store
made by running its migrations. A migration that changes a table or an index must change
``schema.sql`` too."""

from __future__ import annotations

import os
import re
import sqlite3
from pathlib import Path
from typing import Any

import pytest

from plait.store import make_store, queries
from plait.store.migrations import functions

#: the tables that record a database's versions, which only a store writes
_VERSION_TABLES = ("plait_schema", "schema_version", "functions_version")


def _words(sql: str) -> str:
    """SQL without its comments, in single spaces, none inside parentheses or before a
    comma, and without IF NOT EXISTS (which SQLite keeps in what it stores)."""
    text = re.sub(r"--[^\n]*", "", sql)
    text = " ".join(text.split())
    text = re.sub(r"\s*([(),])\s*", r"\1", text)
    return text.replace("IF NOT EXISTS ", "")


def _clauses(create_table: str) -> tuple[str, list[str]]:
    """A CREATE TABLE as its head and the sorted clauses of its body: SQLite appends a
    column added later after the table's constraints, so only the set of clauses is
    compared here (PRAGMA table_xinfo compares the columns in order)."""
    text = _words(create_table)
    start, end = text.index("("), text.rindex(")")
    clauses, depth, current = [], 0, ""
    for char in text[start + 1 : end]:
        depth += {"(": 1, ")": -1}.get(char, 0)
        if char == "," and depth == 0:
            clauses.append(current)
            current = ""
        else:
            current += char
    clauses.append(current)
    return text[:start] + text[end:], sorted(clauses)


def _sqlite_catalog(path: Path) -> dict[str, Any]:
    conn = sqlite3.connect(path)
    try:
        objects = conn.execute(
            "SELECT type, name, tbl_name, sql FROM sqlite_master ORDER BY type, name"
        ).fetchall()
        catalog: dict[str, Any] = {}
        for kind, name, table, sql in objects:
            if name in _VERSION_TABLES:
                continue
            shape: dict[str, Any] = {"table": table}
            if kind == "table":
                shape["sql"] = _clauses(sql) if sql else None
                shape["columns"] = conn.execute(f"PRAGMA table_xinfo({name})").fetchall()
                shape["indexes"] = conn.execute(f"PRAGMA index_list({name})").fetchall()
                shape["foreign_keys"] = conn.execute(f"PRAGMA foreign_key_list({name})").fetchall()
            elif kind == "index":
                shape["sql"] = _words(sql) if sql else None
                shape["columns"] = conn.execute(f"PRAGMA index_xinfo({name})").fetchall()
            else:
                shape["sql"] = _words(sql)
            catalog[f"{kind} {name}"] = shape
        return catalog
    finally:
        conn.close()


async def test_sqlite_schema_file_is_what_the_migrations_build(tmp_path: Path) -> None:
    migrated = tmp_path / "migrated.db"
    store = make_store(f"sqlite:///{migrated}")
    await store.open()
    await store.close()
    fresh = tmp_path / "fresh.db"
    conn = sqlite3.connect(fresh)
    conn.executescript(queries.read("sqlite", "schema.sql"))
    conn.close()
    built, made = _sqlite_catalog(fresh), _sqlite_catalog(migrated)
    assert built == made
    assert "table plait_runs" in made and "trigger plait_runs_end_refuses_held" in made


#: the PostgreSQL catalog of schema $1, one query per kind of object
_PG_CATALOG = {
    "relations": "SELECT c.relname, c.relkind, c.reloptions::text, c.relpersistence"
    " FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname = $1",
    "columns": "SELECT table_name, ordinal_position, column_name, data_type, udt_name,"
    " is_nullable, column_default, is_identity, identity_generation"
    " FROM information_schema.columns WHERE table_schema = $1",
    "indexes": "SELECT tablename, indexname, indexdef FROM pg_indexes WHERE schemaname = $1",
    "constraints": "SELECT conrelid::regclass::text, conname, contype,"
    " pg_get_constraintdef(c.oid) FROM pg_constraint c"
    " JOIN pg_namespace n ON n.oid = c.connamespace WHERE n.nspname = $1",
    "types": "SELECT t.typname, a.attnum, a.attname, format_type(a.atttypid, a.atttypmod)"
    " FROM pg_type t JOIN pg_namespace n ON n.oid = t.typnamespace"
    " JOIN pg_class c ON c.oid = t.typrelid AND c.relkind = 'c'"
    " JOIN pg_attribute a ON a.attrelid = c.oid AND a.attnum > 0 AND NOT a.attisdropped"
    " WHERE n.nspname = $1",
    "sequences": "SELECT sequencename, data_type::text, start_value, increment_by,"
    " min_value, max_value, cache_size, cycle FROM pg_sequences WHERE schemaname = $1",
    "owned_sequences": "SELECT c.relname, d.refobjid::regclass::text, d.refobjsubid,"
    " d.deptype::text FROM pg_depend d JOIN pg_class c ON c.oid = d.objid"
    " JOIN pg_namespace n ON n.oid = c.relnamespace"
    " WHERE n.nspname = $1 AND c.relkind = 'S' AND d.refclassid = 'pg_class'::regclass",
    "triggers": "SELECT tgrelid::regclass::text, tgname, pg_get_triggerdef(t.oid)"
    " FROM pg_trigger t JOIN pg_class c ON c.oid = t.tgrelid"
    " JOIN pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname = $1 AND NOT tgisinternal",
    "functions": "SELECT p.proname || '(' || pg_get_function_identity_arguments(p.oid) || ')',"
    " pg_get_functiondef(p.oid) FROM pg_proc p"
    " JOIN pg_namespace n ON n.oid = p.pronamespace WHERE n.nspname = $1",
}


async def postgres_catalog(url: str, schema: str = "plait") -> dict[str, list[tuple[Any, ...]]]:
    """Every object of ``schema`` but the version tables, as sorted rows per kind."""
    import asyncpg

    conn = await asyncpg.connect(url)
    try:
        catalog = {}
        for kind, query in _PG_CATALOG.items():
            rows = [tuple(str(v) for v in row) for row in await conn.fetch(query, schema)]
            catalog[kind] = sorted(
                row for row in rows if not any(t in row[0] for t in _VERSION_TABLES)
            )
        return catalog
    finally:
        await conn.close()


async def test_postgres_schema_file_is_what_the_migrations_build(pg_cluster: Any) -> None:
    import asyncpg

    from plait.store.postgres import PostgresStore

    migrated = pg_cluster.create_database(f"migrated{os.getpid()}")
    fresh = pg_cluster.create_database(f"fresh{os.getpid()}")
    store = PostgresStore(migrated)
    await store.open()
    await store.close()
    values = {"schema": '"plait"', "channel": "'" + store.channel + "'"}
    conn = await asyncpg.connect(fresh)
    try:
        async with conn.transaction():
            await conn.execute('CREATE SCHEMA "plait"')
            await conn.execute(queries.substitute(queries.read("postgres", "schema.sql"), values))
            await conn.execute(functions().text(**values))
    finally:
        await conn.close()
    built, made = await postgres_catalog(fresh), await postgres_catalog(migrated)
    assert built == made
    names = {signature.split("(")[0] for signature, _ in made["functions"]}
    assert names == set(functions().names)
    assert len(made["functions"]) == len(names), "one signature per function"
    assert [name for _, name, _ in made["triggers"]] == [
        "runs_end_ends_streams",
        "runs_end_refuses_held",
        "steps_attempt_resets_streams",
    ]


def test_every_function_is_defined_once_and_no_migration_defines_one() -> None:
    found = functions()
    assert len(found.names) == len(set(found.names))
    assert found.names
    folder = Path(queries.__file__).parent / "sql"
    for script in folder.glob("*/migrations/*.sql"):
        text = re.sub(r"--[^\n]*", "", script.read_text())
        defines = r"CREATE\s+(OR\s+REPLACE\s+)?FUNCTION\b"
        assert not re.search(defines, text, re.IGNORECASE), script.name


def test_functions_are_needed_unless_a_database_has_these() -> None:
    found = functions()
    assert found.needed(None, where="x")
    assert found.needed((found.version - 1, "older"), where="x")
    assert found.needed((found.version, "another tree's"), where="x")
    assert not found.needed((found.version, found.digest), where="x")
    with pytest.raises(RuntimeError, match=r"x has functions version .*, newer than this plait"):
        found.needed((found.version + 1, found.digest), where="x")
