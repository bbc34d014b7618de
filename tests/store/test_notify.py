"""A store tells an attached notifier of what other processes commit."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest

from plait.notify import Notifier
from plait.store import Store, make_store
from plait.store.ops import EndRun, EnqueueJob

from .rows import T0, new_run, write


@pytest.fixture
async def other(database: str) -> AsyncIterator[Store]:
    """A second store on the same database, as another process would open it."""
    opened = make_store(database)
    await opened.open()
    try:
        yield opened
    finally:
        await opened.close()


async def test_an_attached_notifier_hears_of_runs_and_work_changed_elsewhere(
    store: Store, other: Store
) -> None:
    await new_run(store, "r1")
    notifier = Notifier()
    work = asyncio.Event()
    notifier.on_work(work.set)
    await store.attach_notifier(notifier)
    changed = notifier.watch("r1")
    await write(other, "r1", EnqueueJob("q", "fn", T0))
    await asyncio.wait_for(work.wait(), 5.0)
    await write(other, "r1", EndRun("completed", '"x"'))
    await asyncio.wait_for(changed.wait(), 5.0)
