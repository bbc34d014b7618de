"""Stored queue limits and spend on PostgreSQL: the limits an app declares, kept for
every process, and what step attempts reported spent, summed over budget windows.
"""

from __future__ import annotations

from collections.abc import Sequence

from plait.store.convert import limits_params, stored_limits
from plait.store.postgres.part import Part
from plait.store.rows import KeyDepth, QueueLimits, Spend, SpendTotal, StoredQueueLimits


class Limits(Part):
    """Stored queue limits, and spend."""

    async def put_queue_limits(self, queues: Sequence[QueueLimits], app: str) -> None:
        now = self._now()
        for q in queues:
            await self._call("execute", self._q["put_queue_limits"], *limits_params(q, app, now))

    async def list_queue_limits(self) -> list[StoredQueueLimits]:
        rows = await self._call("fetch", self._q["list_queue_limits"], read=True)
        return [stored_limits(tuple(r)) for r in rows]

    async def record_spend(self, spend: Sequence[Spend]) -> None:
        if not spend:
            return
        now = self._now()
        await self._call(
            "execute",
            self._q["insert_spend"],
            [s.queue for s in spend],
            [s.unit for s in spend],
            [s.amount for s in spend],
            [now for _s in spend],
            [s.run_id for s in spend],
            [s.step_key for s in spend],
            [s.attempt for s in spend],
        )

    async def spend_totals(
        self, budgets: Sequence[tuple[str, str, float, bool]]
    ) -> list[SpendTotal]:
        if not budgets:
            return []
        rows = await self._call(
            "fetch",
            self._q["spend_totals"],
            [b[0] for b in budgets],
            [b[1] for b in budgets],
            [b[2] for b in budgets],
            [b[3] for b in budgets],
            read=True,
        )
        return [SpendTotal(r[0], r[1], r[2], float(r[3]), float(r[4])) for r in rows]

    async def prune_spend(self, queue: str, before: float) -> None:
        await self._call("execute", self._q["prune_spend"], queue, before)

    async def queue_key_depths(self) -> list[KeyDepth]:
        rows = await self._call("fetch", self._q["queue_key_depths"], read=True)
        return [KeyDepth(r[0], r[1], int(r[2]), int(r[3])) for r in rows]
