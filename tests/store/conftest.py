"""A fresh, open store on each backend (``database`` comes from tests/conftest.py)."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from plait.store import Store, make_store


@pytest.fixture
async def store(database: str) -> AsyncIterator[Store]:
    opened = make_store(database)
    await opened.open()
    try:
        yield opened
    finally:
        await opened.close()
