"""Stored queue limits and spend on SQLite: the limits an app declares, kept for every
process, and what step attempts reported spent, summed over budget windows.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Sequence

from plait.store.convert import limits_params, stored_limits
from plait.store.rows import KeyDepth, QueueLimits, Spend, SpendTotal, StoredQueueLimits
from plait.store.sqlite.part import Part
from plait.store.sqlite.writer import SQL


class Limits(Part):
    """Stored queue limits, and spend."""

    async def put_queue_limits(self, queues: Sequence[QueueLimits], app: str) -> None:
        now = self._now()
        params = [limits_params(q, app, now) for q in queues]

        def go(conn: sqlite3.Connection) -> None:
            conn.executemany(SQL["put_queue_limits"], params)

        await self._write(go)

    async def list_queue_limits(self) -> list[StoredQueueLimits]:
        def go(conn: sqlite3.Connection) -> list[StoredQueueLimits]:
            return [stored_limits(row) for row in conn.execute(SQL["list_queue_limits"])]

        return await self._read_here(go)

    async def record_spend(self, spend: Sequence[Spend]) -> None:
        if not spend:
            return
        now = self._now()
        params = [
            {
                "queue": s.queue,
                "unit": s.unit,
                "amount": s.amount,
                "at": now,
                "run_id": s.run_id,
                "step_key": s.step_key,
                "attempt": s.attempt,
            }
            for s in spend
        ]
        await self._write(lambda conn: conn.executemany(SQL["insert_spend"], params))

    async def spend_totals(
        self, budgets: Sequence[tuple[str, str, float, bool]]
    ) -> list[SpendTotal]:
        if not budgets:
            return []
        conf = json.dumps(
            [
                {"queue": q, "unit": u, "since": since, "per_key": per_key}
                for q, u, since, per_key in budgets
            ]
        )

        def go(conn: sqlite3.Connection) -> list[SpendTotal]:
            rows = conn.execute(SQL["spend_totals"], {"budgets": conf}).fetchall()
            return [SpendTotal(q, k, u, float(a), float(o)) for q, k, u, a, o in rows]

        return await self._read_here(go)

    async def prune_spend(self, queue: str, before: float) -> None:
        await self._write(lambda conn: conn.execute(SQL["prune_spend"], (queue, before)))

    async def queue_key_depths(self) -> list[KeyDepth]:
        def go(conn: sqlite3.Connection) -> list[KeyDepth]:
            rows = conn.execute(SQL["queue_key_depths"]).fetchall()
            return [KeyDepth(q, k, int(n or 0), int(a or 0)) for q, k, n, a in rows]

        return await self._read(go)
