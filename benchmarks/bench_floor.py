"""The storage floor: how many durable single-row transactions the database itself takes.

A durable step cannot cost less than the commit that records it, so this is the yardstick
for "per step" figures: one ``INSERT`` and one ``COMMIT`` into a small table, back to back
on one connection, with the same settings the engines use (SQLite: WAL journal,
``synchronous=FULL``; PostgreSQL: the server's defaults, ``fsync=on``,
``synchronous_commit=on``).
"""

from __future__ import annotations

import asyncio
import os
import sqlite3
import time
from typing import Any

import _common

_WARMUP = 50


def sqlite_floor(p: dict[str, Any]) -> dict[str, Any]:
    path = p["db"].split("sqlite:///", 1)[1]
    conn = sqlite3.connect(path, isolation_level=None)
    try:
        mode = conn.execute("PRAGMA journal_mode = WAL").fetchone()[0]
        conn.execute(f"PRAGMA synchronous = {p.get('synchronous', 'FULL')}")
        sync = conn.execute("PRAGMA synchronous").fetchone()[0]
        conn.execute(
            "CREATE TABLE floor (id INTEGER PRIMARY KEY, payload TEXT NOT NULL, at REAL NOT NULL)"
        )

        def one(i: int) -> None:
            conn.execute("BEGIN IMMEDIATE")
            conn.execute(
                "INSERT INTO floor (payload, at) VALUES (?, ?)", (f'{{"i": {i}}}', time.time())
            )
            conn.execute("COMMIT")

        for i in range(_WARMUP):
            one(i)
        seconds = float(p["seconds"])
        done = 0
        t0 = time.perf_counter()
        while time.perf_counter() - t0 < seconds:
            one(done)
            done += 1
        elapsed = time.perf_counter() - t0
    finally:
        conn.close()
    return {
        "commits_per_s": done / elapsed,
        "us_per_commit": elapsed / done * 1e6,
        "settings": {
            "journal_mode": str(mode).upper(),
            "synchronous": _common.sync_name(sync),
            "driver": f"sqlite3, SQLite {sqlite3.sqlite_version}",
        },
    }


async def _postgres_asyncpg(p: dict[str, Any]) -> dict[str, Any]:
    import asyncpg  # type: ignore[import-not-found, import-untyped, unused-ignore]

    conn = await asyncpg.connect(p["db"])
    try:
        await conn.execute(
            "CREATE TABLE floor (id bigserial PRIMARY KEY, payload text NOT NULL,"
            " at double precision NOT NULL)"
        )
        settings = {
            name: await conn.fetchval(f"SHOW {name}")
            for name in ("fsync", "synchronous_commit", "wal_sync_method")
        }
        insert = "INSERT INTO floor (payload, at) VALUES ($1, $2)"
        for i in range(_WARMUP):
            await conn.execute(insert, f'{{"i": {i}}}', time.time())
        seconds = float(p["seconds"])
        done = 0
        t0 = time.perf_counter()
        while time.perf_counter() - t0 < seconds:
            # Outside a transaction block each statement commits on its own: one round
            # trip and one WAL flush per row, the least a durable step can cost.
            await conn.execute(insert, f'{{"i": {done}}}', time.time())
            done += 1
        elapsed = time.perf_counter() - t0
    finally:
        await conn.close()
    return {
        "commits_per_s": done / elapsed,
        "us_per_commit": elapsed / done * 1e6,
        "settings": {**settings, "driver": f"asyncpg {asyncpg.__version__}"},
    }


def _postgres_psycopg(p: dict[str, Any]) -> dict[str, Any]:
    import psycopg  # type: ignore[import-not-found, unused-ignore]

    with psycopg.connect(p["db"], autocommit=True) as conn:
        conn.execute(
            "CREATE TABLE floor (id bigserial PRIMARY KEY, payload text NOT NULL,"
            " at double precision NOT NULL)"
        )
        settings = {
            name: conn.execute(f"SHOW {name}").fetchone()[0]  # type: ignore[index]
            for name in ("fsync", "synchronous_commit", "wal_sync_method")
        }
        insert = "INSERT INTO floor (payload, at) VALUES (%s, %s)"
        for i in range(_WARMUP):
            conn.execute(insert, (f'{{"i": {i}}}', time.time()))
        seconds = float(p["seconds"])
        done = 0
        t0 = time.perf_counter()
        while time.perf_counter() - t0 < seconds:
            conn.execute(insert, (f'{{"i": {done}}}', time.time()))
            done += 1
        elapsed = time.perf_counter() - t0
    return {
        "commits_per_s": done / elapsed,
        "us_per_commit": elapsed / done * 1e6,
        "settings": {**settings, "driver": f"psycopg {psycopg.__version__}"},
    }


def postgres_floor(p: dict[str, Any]) -> dict[str, Any]:
    """asyncpg when this interpreter has it (plait's PostgreSQL driver), else psycopg."""
    try:
        import asyncpg  # type: ignore[import-not-found, import-untyped, unused-ignore]  # noqa: F401
    except ImportError:
        return _postgres_psycopg(p)
    return asyncio.run(_postgres_asyncpg(p))


def main() -> None:
    p = _common.params()
    result = sqlite_floor(p) if p["db"].startswith("sqlite:") else postgres_floor(p)
    result["pid"] = os.getpid()
    _common.emit(result)


if __name__ == "__main__":
    main()
