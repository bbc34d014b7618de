"""Schema migrations and PostgreSQL's functions.

Migrations are the numbered scripts ``sql/<dialect>/migrations/NNN_<name>.sql``; they
change tables and indexes only. Version N of a dialect's schema is what scripts 1 to N
build, so a database records one number and this driver decides from it which scripts it
still needs, or that it was made by a newer plait and must not be touched. How a script
runs is the store's business: SQLite runs it statement by statement inside the write lock
it already holds, PostgreSQL as one script in a transaction under an advisory lock. Adding
a version is adding a file; ``sql/<dialect>/schema.sql`` is the schema they build, kept
current beside them (a test builds a database both ways and compares them).

PostgreSQL's functions are not history: each is defined once, as it is now, in
``sql/postgres/functions/<concern>.sql``. A database records the functions it has
(``Functions.version`` and a digest of the files), and the store applies them all again,
in ``FUNCTION_FILES`` order, whenever that record is not this plait's.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import re
from importlib import resources

from plait.store import queries

_FILE = re.compile(r"(?P<version>\d{3})_(?P<name>[a-z0-9_]+)\.sql\Z")
_DESCRIPTION = re.compile(r"--\s*description:\s*(?P<text>.+?)\s*$", re.MULTILINE)
_DEFINES = re.compile(r"^CREATE OR REPLACE FUNCTION @schema@\.(?P<name>\w+)\(", re.MULTILINE)

#: the files of ``sql/postgres/functions/``, in the order they are applied
FUNCTION_FILES = (
    "steps",
    "runs",
    "commit",
    "jobs",
    "queues",
    "schedules",
    "events",
    "retention",
    "streams",
)
#: the version of those functions: raised with every change to them, so that a database
#: whose functions a newer plait applied is refused by an older one, as a newer schema is
FUNCTIONS_VERSION = 33


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


@dataclasses.dataclass(frozen=True)
class Functions:
    """PostgreSQL's functions: ``sql/postgres/functions/*.sql``, each function defined once,
    as ``CREATE OR REPLACE FUNCTION @schema@.<name>(``.

    They are applied as one script after the migrations, whenever the database's record of
    its functions (version, digest) is not this plait's: a changed function reaches every
    database without a migration. The store drops every function of these names first, so
    a file may change a function's arguments or result; a function no file defines any
    more is dropped by a ``DROP FUNCTION IF EXISTS`` in the file of its concern.
    """

    #: :data:`FUNCTION_FILES`'s texts, with their ``@marker@`` placeholders
    templates: tuple[str, ...]
    version: int = FUNCTIONS_VERSION

    @classmethod
    def load(cls) -> Functions:
        folder = resources.files("plait.store").joinpath("sql/postgres/functions")
        found = sorted(entry.name for entry in folder.iterdir() if entry.name.endswith(".sql"))
        if found != sorted(f"{name}.sql" for name in FUNCTION_FILES):
            raise RuntimeError(
                f"the PostgreSQL functions are {found}: expected the files of FUNCTION_FILES"
            )
        return cls(
            tuple(queries.read("postgres", f"functions/{name}.sql") for name in FUNCTION_FILES)
        )

    @functools.cached_property
    def digest(self) -> str:
        """What tells this plait's functions from any other's with the same version."""
        return hashlib.sha256("\0".join(self.templates).encode()).hexdigest()

    @functools.cached_property
    def names(self) -> tuple[str, ...]:
        """The functions the files define, in order."""
        return tuple(m["name"] for text in self.templates for m in _DEFINES.finditer(text))

    def text(self, **values: str) -> str:
        """The files as one script, their ``@marker@`` placeholders filled from ``values``."""
        return "\n".join(queries.substitute(text, values) for text in self.templates)

    def needed(self, recorded: tuple[int, str] | None, *, where: str) -> bool:
        """Whether a database whose functions are ``recorded`` (version, digest; None: none
        yet) needs these. Functions of a newer plait are refused, not replaced: the newer
        plait's tables and rows may need them. ``where`` names the database."""
        if recorded is None:
            return True
        version, digest = recorded
        if version > self.version:
            raise RuntimeError(
                f"{where} has functions version {version}, newer than this plait"
                f" ({self.version}); upgrade plait"
            )
        return (version, digest) != (self.version, self.digest)


@functools.cache
def migrations(dialect: str) -> Migrations:
    """The migrations of ``dialect``, listed once per process."""
    return Migrations(dialect)


@functools.cache
def functions() -> Functions:
    """PostgreSQL's functions, read once per process."""
    return Functions.load()


__all__ = [
    "FUNCTIONS_VERSION",
    "FUNCTION_FILES",
    "Functions",
    "Migration",
    "Migrations",
    "functions",
    "migrations",
]
