"""Spend reports for the queues' budgets: summed over a window, deleted once no window
counts them."""

from __future__ import annotations

import time

from plait.store import Store
from plait.store.rows import QueueLimits, Spend
from plait.worker.budgets import budget_holds, prune_spend

from .rows import new_run

LIMITS = [QueueLimits("llm", budget=(("tokens", 1000.0, 10.0),), budget_per_key=False)]


async def test_spend_past_every_window_is_pruned_and_spend_within_one_is_kept(
    store: Store,
) -> None:
    await new_run(store, "r1", queue="llm", status="running")
    await store.record_spend([Spend("llm", "tokens", 1200.0, "r1", "s", 1)])
    now = time.time()
    assert (await budget_holds(store, LIMITS, now)).held == (("llm", None),)
    # within the window: kept, and it still holds the queue
    assert await prune_spend(store, LIMITS, now + 5.0) == 1
    assert (await budget_holds(store, LIMITS, now)).held == (("llm", None),)
    # past the longest window: deleted (a queue without budgets is not looked at)
    assert await prune_spend(store, [*LIMITS, QueueLimits("plain")], now + 11.0) == 1
    assert (await budget_holds(store, LIMITS, now)).held == ()
