"""The throwaway PostgreSQL cluster that the PostgreSQL store tests and benchmarks rely on."""

from __future__ import annotations

import socket
from collections.abc import Iterator

import pytest

from plait.testing.postgres import TemporaryCluster, find_pg_bin

asyncpg = pytest.importorskip("asyncpg", reason="asyncpg is needed to talk to the cluster")

pytestmark = pytest.mark.skipif(
    find_pg_bin() is None,
    reason="PostgreSQL server binaries (initdb, pg_ctl, postgres) not found "
    "on PATH or under /usr/lib/postgresql/*/bin",
)


@pytest.fixture(scope="module")
def cluster() -> Iterator[TemporaryCluster]:
    # One server for the read-only checks keeps the module fast; tests that stop
    # or destroy a server start their own.
    with TemporaryCluster() as started:
        yield started


async def test_accepts_connections_with_requested_settings(cluster: TemporaryCluster) -> None:
    conn = await asyncpg.connect(cluster.dsn)
    try:
        assert await conn.fetchval("SELECT 1") == 1
        assert await conn.fetchval("SHOW fsync") == "off"
        assert await conn.fetchval("SHOW max_connections") == "200"
        assert await conn.fetchval("SHOW listen_addresses") == "127.0.0.1"
        assert await conn.fetchval("SHOW server_encoding") == "UTF8"
    finally:
        await conn.close()


async def test_create_database_returns_working_dsn(cluster: TemporaryCluster) -> None:
    # Quotes and spaces check both the SQL quoting and the DSN encoding.
    name = 'plait "test" db'
    dsn = cluster.create_database(name)
    conn = await asyncpg.connect(dsn)
    try:
        assert await conn.fetchval("SELECT current_database()") == name
        assert await conn.fetchval("SELECT count(*) FROM pg_tables WHERE schemaname='public'") == 0
    finally:
        await conn.close()
    with pytest.raises(RuntimeError, match="already exists"):
        cluster.create_database(name)


async def test_create_database_copies_a_template(cluster: TemporaryCluster) -> None:
    template = cluster.create_database("a template")
    conn = await asyncpg.connect(template)
    try:
        await conn.execute("CREATE TABLE kept (v int); INSERT INTO kept VALUES (7)")
    finally:
        await conn.close()
    conn = await asyncpg.connect(cluster.create_database("a copy", template="a template"))
    try:
        assert await conn.fetchval("SELECT v FROM kept") == 7
    finally:
        await conn.close()
    with pytest.raises(RuntimeError, match=r"no such template.*does not exist"):
        cluster.create_database("no copy", template="no such template")


async def test_drop_database_ends_its_sessions(cluster: TemporaryCluster) -> None:
    dsn = cluster.create_database("to drop")
    conn = await asyncpg.connect(dsn)
    try:
        cluster.drop_database("to drop")
        with pytest.raises((asyncpg.PostgresError, asyncpg.InterfaceError, OSError)):
            await conn.fetchval("SELECT 1")
    finally:
        await conn.close()
    with pytest.raises(asyncpg.InvalidCatalogNameError):
        await asyncpg.connect(dsn)
    cluster.drop_database("to drop")  # gone already: nothing to do


async def test_create_database_outlives_a_dropped_connection(cluster: TemporaryCluster) -> None:
    """The kept session that creates databases is opened again if the server dropped
    it (a restart, an idle timeout): the next database is made all the same."""
    cluster.create_database("before the drop")
    conn = await asyncpg.connect(cluster.dsn)
    try:
        ended = await conn.fetchval(
            "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity "
            "WHERE datname = 'postgres' AND pid <> pg_backend_pid()"
        )
    finally:
        await conn.close()
    assert ended >= 1
    dsn = cluster.create_database("after the drop")
    conn = await asyncpg.connect(dsn)
    try:
        assert await conn.fetchval("SELECT current_database()") == "after the drop"
    finally:
        await conn.close()


async def test_restart_keeps_data_and_drops_connections() -> None:
    with TemporaryCluster() as cluster:
        dsn = cluster.dsn
        conn = await asyncpg.connect(dsn)
        await conn.execute("CREATE TABLE kept (v int); INSERT INTO kept VALUES (42)")

        cluster.restart()

        assert cluster.dsn == dsn
        with pytest.raises((asyncpg.PostgresError, asyncpg.InterfaceError, OSError)):
            await conn.fetchval("SELECT 1")
        await conn.close()
        conn = await asyncpg.connect(dsn)
        try:
            assert await conn.fetchval("SELECT v FROM kept") == 42
        finally:
            await conn.close()


def test_cleanup_stops_server_and_removes_directory() -> None:
    cluster = TemporaryCluster()
    cluster.start()
    directory, port = cluster.directory, cluster.port
    assert cluster.running

    cluster.cleanup()

    assert not directory.exists()
    assert not cluster.running
    with pytest.raises(OSError), socket.create_connection(("127.0.0.1", port), timeout=2):
        pass
    cluster.cleanup()  # idempotent


def test_failed_start_reports_log_and_cleans_up() -> None:
    with socket.socket() as blocker:
        blocker.bind(("127.0.0.1", 0))
        blocker.listen()
        cluster = TemporaryCluster(port=blocker.getsockname()[1])
        with pytest.raises(RuntimeError, match="could not bind"):
            cluster.start()
        directory = cluster.directory
        assert not cluster.running
        cluster.cleanup()
    assert not directory.exists()
