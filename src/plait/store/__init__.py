"""Stores: where runs live. ``make_store`` picks one from a database URL."""

from __future__ import annotations

import os

from plait.store.base import Store

DEFAULT_URL = "sqlite:///plait.db"


def resolve_url(database: str | None) -> str:
    """The database to use: the argument, then ``PLAIT_DATABASE_URL``, then ./plait.db."""
    url = database or os.environ.get("PLAIT_DATABASE_URL") or DEFAULT_URL
    if not isinstance(url, str):
        raise TypeError(f"database must be a URL string, got {type(url).__name__}")
    return url


def redact(url: str) -> str:
    """The URL without its password, for logs."""
    from urllib.parse import urlsplit, urlunsplit

    parts = urlsplit(url)
    if parts.password is None:
        return url
    netloc = parts.netloc.replace(f":{parts.password}@", ":***@", 1)
    return urlunsplit(parts._replace(netloc=netloc))


def make_store(database: str | None = None, **options: object) -> Store:
    url = resolve_url(database)
    if url.startswith("sqlite:"):
        from plait.store.sqlite import SQLiteStore

        return SQLiteStore(url, **options)  # type: ignore[arg-type]
    if url.startswith(("postgresql:", "postgres:")):
        from plait.store.postgres import PostgresStore

        return PostgresStore(url, **options)
    raise ValueError(
        f"unsupported database URL {url!r}: use sqlite:///path/to/file.db or postgresql://..."
    )


__all__ = ["DEFAULT_URL", "Store", "make_store", "redact", "resolve_url"]
