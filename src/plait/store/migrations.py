"""Schema migrations: the numbered scripts ``sql/<dialect>/migrations/NNN_<name>.sql``.

Version N of a dialect's schema is what scripts 1 to N build, so a database records one
number and this driver decides from it which scripts it still needs, or that it was made
by a newer plait and must not be touched. How a script runs is the store's business:
SQLite runs it statement by statement inside the write lock it already holds, PostgreSQL
as one script in a transaction under an advisory lock. Adding a version is adding a file.
"""

from __future__ import annotations

import dataclasses
import functools
import re
from importlib import resources

from plait.store import queries

_FILE = re.compile(r"(?P<version>\d{3})_(?P<name>[a-z0-9_]+)\.sql\Z")
_DESCRIPTION = re.compile(r"--\s*description:\s*(?P<text>.+?)\s*$", re.MULTILINE)


@dataclasses.dataclass(frozen=True)
class Migration:
    """One numbered script."""

    dialect: str
    version: int
    name: str
    filename: str

    def text(self, **values: str) -> str:
        """The script, with its ``@marker@`` placeholders filled from ``values``."""
        return queries.substitute(queries.read(self.dialect, f"migrations/{self.filename}"), values)

    def description(self) -> str:
        """What the version brings, from the script's ``-- description:`` line (the
        file name when it has none), for stores that record it with the version."""
        found = _DESCRIPTION.search(queries.read(self.dialect, f"migrations/{self.filename}"))
        return found["text"] if found else self.name.replace("_", " ")


class Migrations:
    """The scripts of one dialect, in version order."""

    def __init__(self, dialect: str) -> None:
        if dialect not in queries.DIALECTS:
            raise ValueError(f"unknown SQL dialect {dialect!r}")
        folder = resources.files("plait.store").joinpath(f"sql/{dialect}/migrations")
        found = sorted(
            (int(match["version"]), match["name"], entry.name)
            for entry in folder.iterdir()
            if (match := _FILE.match(entry.name))
        )
        versions = [version for version, _, _ in found]
        if versions != list(range(1, len(found) + 1)):
            raise RuntimeError(
                f"the {dialect} migrations are numbered {versions}: expected 1 to {len(found)}"
            )
        self.dialect = dialect
        self.scripts: tuple[Migration, ...] = tuple(
            Migration(dialect, version, name, filename) for version, name, filename in found
        )
        #: the version a database has once every script ran
        self.latest: int = len(self.scripts)

    def pending(self, current: int, *, where: str) -> tuple[Migration, ...]:
        """The scripts a database at version ``current`` still needs, oldest first.

        A database newer than this code is refused rather than used: its tables may mean
        something this version of plait does not know. ``where`` names the database for
        that message.
        """
        if current > self.latest:
            raise RuntimeError(
                f"{where} has schema version {current}, newer than this plait"
                f" ({self.latest}); upgrade plait"
            )
        return self.scripts[current:]


@functools.cache
def migrations(dialect: str) -> Migrations:
    """The migrations of ``dialect``, listed once per process."""
    return Migrations(dialect)


__all__ = ["Migration", "Migrations", "migrations"]
