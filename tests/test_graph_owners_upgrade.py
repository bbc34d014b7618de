"""Upgrading a database whose graphs were registered before graph names had owners: they
become trusted code's, so no user can take one over after the upgrade."""

from __future__ import annotations

import json
import os
import sqlite3
from pathlib import Path
from typing import Any

import pytest

import plait
from plait.store import queries
from plait.store.migrations import migrations

DEFINITION = {"nodes": {"only": {"function": "add", "input": {"a": 1, "b": 2}}}}

app = plait.App("owners-upgrade")


@app.function
async def add(data: dict) -> int:
    return int(data["a"]) + int(data["b"])


def _before_owners(dialect: str) -> list[Any]:
    """The migrations a database had when graph owners came (every script before theirs)."""
    scripts = migrations(dialect).scripts
    owners = next(m.version for m in scripts if m.name == "graph_owners")
    return [m for m in scripts if m.version < owners]


def _sqlite_before_owners(path: Path) -> None:
    scripts = _before_owners("sqlite")
    conn = sqlite3.connect(path, isolation_level=None)
    for script in scripts:
        conn.executescript(script.text())
    conn.executescript(
        f"""
        CREATE TABLE plait_schema (id INTEGER PRIMARY KEY CHECK (id = 1), version INTEGER);
        INSERT INTO plait_schema VALUES (1, {len(scripts)});
        INSERT INTO plait_workflow_versions (workflow, version, kind, definition, status,
            created_at, updated_at) VALUES ('legacy', 'v-old', 'graph',
            '{json.dumps(DEFINITION)}', 'active', 1, 1);
        """
    )
    conn.close()


async def _postgres_before_owners(url: str) -> None:
    import asyncpg

    schema = '"plait"'
    q = queries.load("postgres", schema=schema)
    scripts = _before_owners("postgres")
    conn = await asyncpg.connect(url)
    try:
        async with conn.transaction():
            await conn.execute(q["create_schema"])
            await conn.execute(q["create_schema_version_table"])
            for script in scripts:
                await conn.execute(script.text(schema=schema, channel="'plait_plait'"))
                await conn.execute(q["record_schema_version"], script.version, script.description())
            await conn.execute(
                "INSERT INTO plait.workflow_versions (workflow, version, kind, definition,"
                " status, created_at, updated_at) VALUES ('legacy', 'v-old', 'graph', $1,"
                " 'active', now(), now())",
                json.dumps(DEFINITION),
            )
    finally:
        await conn.close()


@pytest.mark.parametrize("store", ["sqlite", "postgres"])
async def test_graphs_registered_before_owners_belong_to_trusted_code(
    store: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    if store == "sqlite":
        url = f"sqlite:///{tmp_path / 'old.db'}"
        _sqlite_before_owners(tmp_path / "old.db")
    else:
        cluster: Any = request.getfixturevalue("pg_cluster")
        url = cluster.create_database(f"owners{os.getpid()}")
        await _postgres_before_owners(url)
    async with plait.Engine(app, url) as engine:
        (legacy,) = await engine.list_graphs()
        assert (legacy["workflow"], legacy["registered_by"]) == ("legacy", None)
        with pytest.raises(plait.GraphOwnerError, match="another user"):
            await engine.register_graph("legacy", DEFINITION, registered_by="mallory")
        assert await engine.run("legacy", timeout=10) == 3
        # trusted code still may
        await engine.register_graph("legacy", DEFINITION, status="draft")
