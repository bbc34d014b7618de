"""The shared store: PostgreSQL, for many workers on many machines.

``pool`` holds the connections (the pool, what errors mean), ``codec`` the values that
cross to and from PostgreSQL, ``listen`` the LISTEN/NOTIFY wake-ups, ``group`` the group
commit, ``store`` the ``PostgresStore`` with its methods grouped by concern (``commit``,
``runs``, ``leases``, ``jobs``, ``queues``, ``schedules``, ``actions``, ``versions``);
every statement is a named query in ``sql/postgres/queries.sql``, the tables are built by
the scripts of ``sql/postgres/migrations/`` and the functions are those of
``sql/postgres/functions/``.
"""

from plait.errors import extra_needed

with extra_needed("postgres", "a PostgreSQL database"):
    import asyncpg  # noqa: F401  # pyright: ignore[reportUnusedImport]

from plait.store.postgres.pool import DatabaseUnavailableError
from plait.store.postgres.store import SCHEMA_VERSION, PostgresStore

__all__ = ["SCHEMA_VERSION", "DatabaseUnavailableError", "PostgresStore"]
