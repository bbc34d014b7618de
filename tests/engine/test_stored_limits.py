"""Queue limits stored in the database, on every store: an engine whose app declares a
queue stores its limits as it opens, every process enforces the stored limits whether
its own app declares the queue or not, and a changed declaration replaces them."""

from __future__ import annotations

import asyncio
import contextlib
import time
from typing import Any

import pytest

import plait
from support.polling import eventually


class Ledger:
    """The start and end time of every body, from every engine of the test."""

    def __init__(self, seconds: float = 0.02) -> None:
        self.seconds = seconds
        self.spans: list[tuple[float, float]] = []

    async def hold(self) -> None:
        start = time.monotonic()
        await asyncio.sleep(self.seconds)
        self.spans.append((start, time.monotonic()))

    def most_at_once(self) -> int:
        edges = sorted([(s, 1) for s, _ in self.spans] + [(e, -1) for _, e in self.spans])
        most = level = 0
        for _t, step in edges:
            level += step
            most = max(most, level)
        return most


def worker_app(ledger: Ledger) -> plait.App:
    """An app that runs workflow ``in_q`` on queue ``q`` and declares no queue."""
    app = plait.App("workers")

    @app.workflow(queue="q")
    async def in_q(wf: plait.Workflow, data: Any) -> Any:
        await wf.do("body", ledger.hold)
        return data

    return app


def declaring_app(**limits: Any) -> plait.App:
    app = plait.App("declares")
    app.queue("q", **limits)
    return app


async def test_workers_that_do_not_declare_a_queue_enforce_its_stored_limits(
    engine_factory: Any,
) -> None:
    ledger = Ledger()
    async with engine_factory(declaring_app(concurrency=1), workers=False):
        pass  # opening stores the limits; the declaring engine is gone before any work
    async with contextlib.AsyncExitStack() as stack:
        engines = [
            await stack.enter_async_context(engine_factory(worker_app(ledger), concurrency=4))
            for _ in range(3)
        ]
        starter = engines[0]
        ids = [await starter.start("in_q", n) for n in range(30)]
        runs = [await starter.wait(run_id, timeout=60) for run_id in ids]
    assert [r.status for r in runs] == ["completed"] * 30
    assert len(ledger.spans) == 30
    assert ledger.most_at_once() == 1


async def test_a_changed_declaration_replaces_the_stored_limits(engine_factory: Any) -> None:
    ledger = Ledger(seconds=0.3)
    async with engine_factory(declaring_app(concurrency=1), workers=False) as first:
        [shown] = [d for d in await first.queue_depths() if d["queue"] == "q"]
        assert shown["limits"]["concurrency"] == 1
        assert shown["source"] == "declared"
    async with engine_factory(declaring_app(concurrency=3, rate="100/s"), workers=False):
        pass
    async with engine_factory(worker_app(ledger), concurrency=8) as worker:
        [shown] = [d for d in await worker.queue_depths() if d["queue"] == "q"]
        assert shown["limits"]["concurrency"] == 3
        assert shown["limits"]["rate"] == "100/s"
        assert shown["source"] == "stored"
        assert shown["stored_by"] == "declares"
        ids = [await worker.start("in_q", n) for n in range(12)]
        for run_id in ids:
            await worker.wait(run_id, timeout=60)
    # the stored concurrency of 3 holds, and it is 3, not the 1 stored first
    assert 2 <= ledger.most_at_once() <= 3
    async with engine_factory(declaring_app(concurrency=1), workers=False) as again:
        [shown] = [d for d in await again.queue_depths() if d["queue"] == "q"]
        assert shown["limits"]["concurrency"] == 1
        assert shown["source"] == "declared"


async def test_a_queued_run_waits_for_the_stored_slot(engine_factory: Any) -> None:
    """The stored concurrency, not the worker's app, decides: with one run holding the
    queue's only slot, a second waits ``queued``."""
    release = asyncio.Event()
    app = plait.App("holder")

    @app.workflow(queue="q")
    async def in_q(wf: plait.Workflow, data: Any) -> Any:
        if data == "first":
            await wf.do("wait", release.wait)
        return data

    async with engine_factory(declaring_app(concurrency=1), workers=False):
        pass
    async with engine_factory(app) as engine:
        first = await engine.start("in_q", "first")
        second = await engine.start("in_q", "second")

        async def running() -> bool:
            return (await engine.get_run(first)).status == "running"

        await eventually(running, timeout=10, what="the first run running")
        assert (await engine.get_run(second)).status == "queued"
        release.set()
        assert (await engine.wait(second, timeout=30)).status == "completed"


@pytest.mark.parametrize(
    ("limits", "named"),
    [
        ({"budget": {"tokens": "lots"}}, "budget 'tokens' of queue 'q'"),
        ({"budget": {"1bad": "10/s"}}, "budget unit of queue 'q'"),
        ({"budget": "10/s"}, "budget of queue 'q'"),
        ({"budget_per_key": True}, "budget_per_key of queue 'q' needs a budget"),
        ({"budget": {"tokens": "10/s"}, "budget_per_key": 1}, "budget_per_key of queue 'q'"),
    ],
)
def test_bad_budgets_are_named(limits: dict[str, Any], named: str) -> None:
    with pytest.raises(ValueError, match=named):
        declaring_app(**limits)
