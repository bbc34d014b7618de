"""Named SQL queries: every statement a store runs lives in ``sql/<dialect>/queries.sql``.

A queries file is a list of blocks, each opened by a ``-- name: <name>`` line (the way
procrastinate keeps its SQL), so the statements are read, reviewed and tried by hand as
SQL while the Python code only names the one it runs. Each dialect's file is parsed once
per process and handed out as a read-only mapping, so looking a statement up costs a dict
lookup and nothing is parsed or formatted per call.

Identifiers and literals that a bound parameter cannot carry (PostgreSQL's schema name,
its NOTIFY channel) are ``@marker@`` placeholders, filled once per store by ``load``.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Mapping
from importlib import resources
from types import MappingProxyType

#: the dialects that have a ``sql/<dialect>/`` folder
DIALECTS = ("sqlite", "postgres")

_BLOCK = re.compile(r"--\s*name:\s*(?P<name>\S+)\s*$")
_QUERY_NAME = re.compile(r"[a-z_][a-z0-9_]*\Z")
_MARKER = re.compile(r"@([a-z_]+)@")


def parse(text: str) -> dict[str, str]:
    """The statements of a queries file by name.

    Whole-line comments are dropped: they document the file, and a statement that carries
    none is the same text however its block is annotated. Text before the first block is
    the file's own header.
    """
    queries: dict[str, str] = {}
    name: str | None = None
    lines: list[str] = []
    for line in [*text.splitlines(), "-- name: <end>"]:
        block = _BLOCK.match(line)
        if block is None:
            if name is not None and not line.lstrip().startswith("--"):
                lines.append(line.rstrip())
            continue
        if name is not None:
            body = "\n".join(lines).strip()
            if not body:
                raise ValueError(f"query {name!r} has no statement")
            if name in queries:
                raise ValueError(f"query {name!r} is defined twice")
            queries[name] = body
        name, lines = block["name"], []
        if name != "<end>" and not _QUERY_NAME.match(name or ""):
            raise ValueError(f"invalid query name {name!r}: use lowercase letters, digits, _")
    return queries


def substitute(text: str, values: Mapping[str, str]) -> str:
    """Fill every ``@marker@`` of ``text``; a marker without a value is an error, so a
    statement never reaches the database half filled in."""

    def fill(marker: re.Match[str]) -> str:
        try:
            return values[marker[1]]
        except KeyError:
            raise KeyError(f"no value for the SQL marker @{marker[1]}@") from None

    return _MARKER.sub(fill, text)


def read(dialect: str, path: str) -> str:
    """A file of the dialect's SQL folder, as installed with the package."""
    if dialect not in DIALECTS:
        raise ValueError(f"unknown SQL dialect {dialect!r} (known: {', '.join(DIALECTS)})")
    return resources.files("plait.store").joinpath(f"sql/{dialect}/{path}").read_text("utf-8")


def load(dialect: str, **values: str) -> Mapping[str, str]:
    """The named statements of ``dialect`` with ``values`` filled in. Cached: every store
    of one dialect (and one schema) shares the same mapping."""
    return _load(dialect, tuple(sorted(values.items())))


@functools.cache
def _templates(dialect: str) -> Mapping[str, str]:
    return MappingProxyType(parse(read(dialect, "queries.sql")))


@functools.cache
def _load(dialect: str, values: tuple[tuple[str, str], ...]) -> Mapping[str, str]:
    given = dict(values)
    filled = {name: substitute(sql, given) for name, sql in _templates(dialect).items()}
    return MappingProxyType(filled)


__all__ = ["DIALECTS", "load", "parse", "read", "substitute"]
