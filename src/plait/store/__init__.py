"""Stores: where runs live. ``make_store`` picks one from a database URL."""

from __future__ import annotations

import os
from typing import Any

from plait.store.contract import Store

DEFAULT_URL = "sqlite:///plait.db"


def resolve_url(database: str | None) -> str:
    """The database to use: the argument, then ``PLAIT_DATABASE_URL``, then ./plait.db."""
    url = database or os.environ.get("PLAIT_DATABASE_URL") or DEFAULT_URL
    if not isinstance(url, str):
        raise TypeError(f"database must be a URL string, got {type(url).__name__}")
    return url


#: query parameters of a database URL whose values are secrets (libpq's and asyncpg's
#: names, and the obvious others)
SECRET_PARAMETERS = frozenset(
    {"password", "passwd", "pwd", "pass", "sslpassword", "token", "secret", "key", "sslkey"}
)


def redact(url: str) -> str:
    """The URL without its secrets, for messages and logs: the password of its user part
    and the value of every secret query parameter (``?password=``) become ``***``."""
    from urllib.parse import urlsplit, urlunsplit

    try:
        parts = urlsplit(url)
        password = parts.password
    except ValueError:  # not even a URL: show only its scheme
        scheme = url.partition(":")[0]
        return f"{scheme}:***" if ":" in url else "***"
    netloc = parts.netloc
    if password is not None:
        user, _, host = netloc.rpartition("@")
        name = user.partition(":")[0]
        netloc = f"{name}:***@{host}"
    query = "&".join(_redact_parameter(item) for item in parts.query.split("&"))
    if netloc == parts.netloc and query == parts.query:
        return url  # nothing secret (and urlunsplit would drop "//" of sqlite:///x.db)
    return urlunsplit(parts._replace(netloc=netloc, query=query))


def _redact_parameter(item: str) -> str:
    name, sep, _value = item.partition("=")
    if sep and name.strip().lower() in SECRET_PARAMETERS:
        return f"{name}=***"
    return item


def make_store(database: str | None = None, **options: Any) -> Store:
    url = resolve_url(database)
    if url.startswith("sqlite:"):
        from plait.store.sqlite import SQLiteStore

        return SQLiteStore(url, **options)
    if url.startswith(("postgresql:", "postgres:")):
        from plait.store.postgres import PostgresStore

        return PostgresStore(url, **options)
    raise ValueError(
        f"unsupported database URL {redact(url)!r}:"
        " use sqlite:///path/to/file.db or postgresql://..."
    )


__all__ = ["DEFAULT_URL", "Store", "make_store", "redact", "resolve_url"]
