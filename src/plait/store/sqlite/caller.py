"""Runs created in the caller's own transaction on SQLite: a ``sqlite3`` connection the
application opened on the same file, with its own writes in it. The run's rows join that
transaction: they are committed with it or rolled back with it.
"""

from __future__ import annotations

import os
import sqlite3
from collections.abc import Callable

from plait.records import Run
from plait.store.rows import NewRun
from plait.store.sqlite.part import Part
from plait.store.sqlite.writer import SQL


class CallerTransactions(Part):
    """``create_run_in``: a run written in the caller's transaction."""

    #: ``Runs._create``: a run's rows written on a connection, in its transaction
    _create: Callable[[sqlite3.Connection, NewRun, float], tuple[Run, bool]]

    async def create_run_in(self, connection: object, new: NewRun) -> tuple[str, str, bool]:
        if not isinstance(connection, sqlite3.Connection):
            raise TypeError(
                "connection must be a sqlite3.Connection to this engine's SQLite file, got "
                f"{type(connection).__module__}.{type(connection).__name__}"
            )
        if self.memory:
            raise ValueError(
                "connection= needs a database file: another connection cannot share an"
                " in-memory database"
            )
        check_connection(connection, self.path)
        run, created = self._create(connection, new, self._now())
        return run.id, run.workflow, created


def check_connection(connection: sqlite3.Connection, path: str) -> None:
    """``connection`` is to the file at ``path`` and inside a transaction; else
    ``ValueError`` saying what it is."""
    files = [row[1] for row in connection.execute(SQL["database_files"]) if row[0] == "main"]
    mine = os.path.realpath(path)
    if not files or not files[0] or os.path.realpath(files[0]) != mine:
        raise ValueError(
            f"connection is to {files[0] if files and files[0] else 'no file'!r}, not to"
            f" this engine's database {mine!r}"
        )
    if not connection.in_transaction:
        raise ValueError(
            "connection has no open transaction: start(connection=...) writes the run in"
            " the caller's transaction (write to it first, or begin one)"
        )
