"""The embedded store: one SQLite file in WAL mode.

``writer`` holds the file's connections (one write connection with group commit, and
readers), ``apply`` the row changes of a write transaction, ``store`` the ``SQLiteStore``
with its methods grouped by concern (``commit``, ``runs``, ``leases``, ``jobs``, ``queues``,
``schedules``, ``actions``, ``versions``); every statement is a named query in
``sql/sqlite/queries.sql``.
"""

from plait.store.sqlite.store import SCHEMA_VERSION, SQLiteStore

__all__ = ["SCHEMA_VERSION", "SQLiteStore"]
