"""Spend budgets: which queues, and which keys of a queue, have spent their budget in
the window, and when the first of them may spend again.

A step reports what it spent (``ctx.spend``); the store keeps each report with the
queue and key it counts against. Before each admission a worker sums the reports of
every budget's window and holds what reached its budget: the claims leave out the runs
and jobs of a held queue (or key), so they wait ``queued`` until the oldest report of the
window leaves it. The budget is a brake on new work, not a meter: what is running when
the budget is reached runs on, and may spend past it.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

from plait.store.contract import LimitsStore
from plait.store.rows import QueueLimits

#: a queue held whole (key None), or one key of it
Held = tuple[str, str | None]


@dataclasses.dataclass(frozen=True)
class Holds:
    """What the budgets hold now, and what was spent in their windows."""

    held: tuple[Held, ...] = ()
    #: when (the clock's time) the first hold may lift: its oldest report leaves the window
    free_at: float | None = None
    #: per (queue, key) (key None: the queue's budget), per unit, the spend in the window
    spent: dict[Held, dict[str, float]] = dataclasses.field(
        default_factory=dict[Held, dict[str, float]]
    )

    def holds(self, queue: str | None, key: str | None) -> bool:
        """Whether a run of ``queue`` with ``key`` waits for a budget."""
        if queue is None:
            return False
        return (queue, None) in self.held or (key is not None and (queue, key) in self.held)


NO_HOLDS = Holds()


async def budget_holds(store: LimitsStore, limits: Sequence[QueueLimits], now: float) -> Holds:
    """The holds of the budgets of ``limits`` at ``now``: one read, none without budgets.
    With ``budget_per_key`` each key has its own budget and runs without a key are not
    held by it."""
    asks: list[tuple[str, str, float, bool]] = []
    budgets: dict[tuple[str, str], tuple[float, float, bool]] = {}
    for q in limits:
        for unit, amount, window in q.budget:
            asks.append((q.name, unit, now - window, q.budget_per_key))
            budgets[(q.name, unit)] = (amount, window, q.budget_per_key)
    if not asks:
        return NO_HOLDS
    held: set[Held] = set()
    free_at: float | None = None
    spent: dict[Held, dict[str, float]] = {}
    for total in await store.spend_totals(asks):
        amount, window, per_key = budgets[(total.queue, total.unit)]
        if per_key and total.key is None:
            continue
        where = (total.queue, total.key if per_key else None)
        spent.setdefault(where, {})[total.unit] = total.amount
        if total.amount >= amount:
            held.add(where)
            lifts = total.oldest + window
            free_at = lifts if free_at is None else min(free_at, lifts)
    return Holds(tuple(sorted(held, key=lambda h: (h[0], h[1] or ""))), free_at, spent)


async def prune_spend(store: LimitsStore, limits: Sequence[QueueLimits], now: float) -> int:
    """Delete the spend reports no budget counts any more (older than the longest window
    of their queue's budgets), so the reports of a busy queue do not pile up for ever.
    Returns how many queues were pruned. A queue whose budget was dropped keeps its
    reports until a budget is declared for it again (its window is unknown)."""
    pruned = 0
    for q in limits:
        if q.budget:
            await store.prune_spend(q.name, now - max(window for _u, _a, window in q.budget))
            pruned += 1
    return pruned
