"""A statement bound without its missing values.

The sqlite3 module binds an int, a float or a string at once, but sends a ``None``
through its adapter registry first: about a microsecond each even when the lookup hits
(writer.py registers the adapter that makes it hit). Creating a run binds some fifteen of
them. To SQLite a NULL bound to a placeholder and a NULL written in the text are the same
value, so such a statement gets one text per pattern of missing values, with those
placeholders written as NULL, and binds only the values that are there. The sqlite3
module keeps each text prepared in its statement cache like any other.

Finding the pattern costs a pass over the values' types: it pays for a statement with
many missing values (a run's insert), not for one with a few.
"""

from __future__ import annotations

import sqlite3
from itertools import compress
from typing import Any

_NULL = "NULL"
_NONE_TYPE = type(None)
#: the patterns one statement keeps; past this it binds its values as they are
MOST_PATTERNS = 32


def null_at(sql: str, names: tuple[str, ...], null: tuple[str, ...]) -> str:
    """``sql``, whose placeholders bind ``names`` in order, with those of ``null`` written
    as NULL: the text for a statement's usual pattern of missing values, chosen by its
    caller, who knows which values are usually missing and tests just those (cheaper than
    ``NullsInline``'s pass over every value)."""
    parts = sql.split("?")
    if len(parts) != len(names) + 1 or not set(null) <= set(names):
        raise ValueError(f"{len(parts) - 1} placeholders for {names!r}; NULL: {null!r}")
    pieces = [parts[0]]
    for name, part in zip(names, parts[1:], strict=True):
        pieces += (_NULL if name in null else "?", part)
    return "".join(pieces)


class NullsInline:
    """One statement with ``?`` placeholders and no ``?`` anywhere else in its text (the
    named queries carry no comments; the statement must hold no string with one)."""

    __slots__ = ("_parts", "_patterns", "sql")

    def __init__(self, sql: str) -> None:
        self.sql = sql
        self._parts = sql.split("?")
        # keyed by the values' types: one C-level pass over them, where testing each for
        # None would be a Python call per value
        self._patterns: dict[tuple[type, ...], tuple[str, tuple[bool, ...]]] = {}

    def execute(self, conn: sqlite3.Connection, params: tuple[Any, ...]) -> sqlite3.Cursor:
        kinds = tuple(map(type, params))
        pattern = self._patterns.get(kinds)
        if pattern is None:
            pattern = self._pattern(kinds)
        text, keep = pattern
        return conn.execute(text, tuple(compress(params, keep)))

    def _pattern(self, kinds: tuple[type, ...]) -> tuple[str, tuple[bool, ...]]:
        keep = tuple(kind is not _NONE_TYPE for kind in kinds)
        if len(kinds) != len(self._parts) - 1 or all(keep):
            # a wrong count is bound as given, for sqlite3's own error
            pattern = (self.sql, (True,) * len(kinds))
        else:
            pieces = [self._parts[0]]
            for kept, part in zip(keep, self._parts[1:], strict=True):
                pieces += ("?" if kept else _NULL, part)
            pattern = ("".join(pieces), keep)
        if len(self._patterns) < MOST_PATTERNS:
            self._patterns[kinds] = pattern
        return pattern
