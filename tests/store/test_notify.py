"""A store tells an attached notifier of what other processes commit."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest

from plait.notify import ADMIT, DUE, JOB, Notifier
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


def test_a_notice_of_work_wakes_the_loops_of_its_kind() -> None:
    """A worker's loops each wait for their own kind of work: a notice that says its kind
    wakes those loops (and whoever waits for any work); one that does not say wakes all."""
    notifier = Notifier()
    woken: list[str] = []
    for kind in (DUE, ADMIT, JOB, None):
        notifier.on_work(lambda kind=kind: woken.append(str(kind)), kind)
    notifier.local_work(DUE)
    assert woken == ["due", "None"]
    woken.clear()
    notifier.local_work(JOB)
    assert woken == ["job", "None"]
    woken.clear()
    notifier.local_work()
    assert woken == ["due", "admit", "job", "None"]


async def test_each_kind_of_new_work_reaches_its_loop_in_another_process(
    store: Store, other: Store
) -> None:
    """What another process commits wakes the loop that takes it: a queued run the loop
    that admits, a run to claim the pass loop, a job the step loop. A store that cannot
    tell them apart wakes every loop, which is slower but never misses one."""
    notifier = Notifier()
    woken: dict[str, asyncio.Event] = {kind: asyncio.Event() for kind in (DUE, ADMIT, JOB)}
    for kind, event in woken.items():
        notifier.on_work(event.set, kind)
    await store.attach_notifier(notifier)
    await new_run(other, "queued", status="queued")
    await asyncio.wait_for(woken[ADMIT].wait(), 5.0)
    await new_run(other, "due")
    await asyncio.wait_for(woken[DUE].wait(), 5.0)
    await write(other, "due", EnqueueJob("q", "fn", T0))
    await asyncio.wait_for(woken[JOB].wait(), 5.0)
