"""A statement bound without its missing values writes what binding them writes."""

from __future__ import annotations

import sqlite3

import pytest

from plait.store.sqlite import nulls
from plait.store.sqlite.nulls import NullsInline

_INSERT = "INSERT INTO t (a, b, c, d) VALUES (?, ?, ?, ?)"


@pytest.fixture
def conn() -> sqlite3.Connection:
    conn = sqlite3.connect(":memory:", isolation_level=None)
    conn.execute("CREATE TABLE t (n INTEGER PRIMARY KEY, a, b TEXT, c REAL, d)")
    return conn


def _rows(conn: sqlite3.Connection) -> list[tuple[object, ...]]:
    return conn.execute("SELECT a, typeof(a), b, typeof(b), c, typeof(c), d FROM t").fetchall()


def test_each_pattern_of_missing_values_writes_the_rows_plain_binding_writes(
    conn: sqlite3.Connection,
) -> None:
    values = [
        (1, "x", 2.5, None),
        (None, None, None, None),
        (None, "y", 3, b"raw"),
        (True, None, 1.0, "z"),
        (1, "x", 2.5, None),
    ]
    statement = NullsInline(_INSERT)
    for params in values:
        statement.execute(conn, params)
    inlined = _rows(conn)
    conn.execute("DELETE FROM t")
    for params in values:
        conn.execute(_INSERT, params)
    assert inlined == _rows(conn)
    assert len(statement._patterns) == 4  # the repeated pattern is found, not made again


def test_a_wrong_number_of_values_is_sqlites_own_error(conn: sqlite3.Connection) -> None:
    with pytest.raises(sqlite3.ProgrammingError, match="bindings"):
        NullsInline(_INSERT).execute(conn, (1, None, 2))
    assert _rows(conn) == []


def test_patterns_past_the_limit_still_bind_right(
    conn: sqlite3.Connection, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(nulls, "MOST_PATTERNS", 1)
    statement = NullsInline(_INSERT)
    statement.execute(conn, (1, None, None, None))
    statement.execute(conn, (None, "b", None, None))
    statement.execute(conn, (None, "b", None, None))
    assert [row[::2] for row in _rows(conn)] == [
        (1, None, None, None),
        (None, "b", None, None),
        (None, "b", None, None),
    ]
    assert len(statement._patterns) == 1
