"""Queues on SQLite: admitting queued runs within their queues' limits, claiming the
jobs of limited queues (admissions of rated queues logged), and how deep each queue is.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Sequence

from plait.statuses import RunStatusName
from plait.store.rows import ANY_SCOPE, ClaimScope, QueueDepth, QueueKeyDepth, QueueLimits, StepJob
from plait.store.sqlite.jobs import claimed
from plait.store.sqlite.leases import scope_params
from plait.store.sqlite.part import Part
from plait.store.sqlite.writer import SQL


class Queues(Part):
    """Admission and queue limits."""

    async def admit_runs(
        self,
        owner: str,
        lease_seconds: float,
        limit: int,
        queues: Sequence[QueueLimits],
        status: RunStatusName,
        scope: ClaimScope = ANY_SCOPE,
        held: Sequence[tuple[str, str | None]] = (),
    ) -> list[str]:
        conf = json.dumps([_queue_conf(q) for q in queues])
        held_json = json.dumps([list(h) for h in held])
        rated = {q.name: q.window for q in queues if q.rate is not None}
        fair = sorted(q.name for q in queues if q.turn is not None)

        def go(conn: sqlite3.Connection) -> list[str]:
            now = self._now()
            params = {
                "queues": conf,
                "now": now,
                "limit": limit,
                "owner": owner,
                "until": now + lease_seconds,
                "status": status,
                "held": held_json,
                **scope_params(scope),
            }
            for queue in fair:
                conn.execute(SQL["arrive_turns"], {"queue": queue, "now": now})
            rows = conn.execute(SQL["admit_runs"], params).fetchall()
            _log_admissions(conn, [queue for _id, queue, _key in rows], rated, now)
            admitted = [(queue, key) for _id, queue, key in rows]
            _advance_turns(conn, admitted, queues, now, held_json)
            return [run_id for run_id, _queue, _key in rows]

        return await self._write(go)

    async def next_queued(self) -> float | None:
        def go(conn: sqlite3.Connection) -> float | None:
            due: float | None = conn.execute(SQL["next_queued"]).fetchone()[0]
            return due

        return await self._read_here(go)

    async def claim_queue_jobs(
        self,
        owner: str,
        lease_seconds: float,
        limit: int,
        queues: Sequence[QueueLimits],
        held: Sequence[tuple[str, str | None]] = (),
    ) -> list[StepJob]:
        conf = json.dumps([{**_queue_conf(q), "functions": list(q.functions)} for q in queues])
        held_json = json.dumps([list(h) for h in held])
        queue_of = {fn: q.name for q in queues for fn in q.functions}
        rated = {q.name: q.window for q in queues if q.rate is not None}

        def go(conn: sqlite3.Connection) -> list[StepJob]:
            now = self._now()
            params = {
                "queues": conf,
                "now": now,
                "limit": limit,
                "owner": owner,
                "until": now + lease_seconds,
                "held": held_json,
            }
            rows = conn.execute(SQL["claim_queue_jobs"], params).fetchall()
            _log_admissions(conn, [queue_of[r[2]] for r in rows], rated, now)
            return [claimed(conn, *row) for row in rows]

        return await self._write(go)

    async def queue_depths(self) -> list[QueueDepth]:
        def go(conn: sqlite3.Connection) -> list[QueueDepth]:
            rows = conn.execute(SQL["queue_depths"]).fetchall()
            return [QueueDepth(q, int(queued or 0), int(active or 0)) for q, queued, active in rows]

        return await self._read(go)

    async def queue_keys(self, queue: str) -> list[QueueKeyDepth]:
        def go(conn: sqlite3.Connection) -> list[QueueKeyDepth]:
            rows = conn.execute(SQL["queue_keys"], {"queue": queue}).fetchall()
            return [
                QueueKeyDepth(key, int(queued or 0), int(active or 0), ahead)
                for key, queued, active, ahead in rows
            ]

        return await self._read(go)


def _queue_conf(q: QueueLimits) -> dict[str, object]:
    return {
        "name": q.name,
        "concurrency": q.concurrency,
        "per_key": q.per_key,
        "rate": q.rate,
        "window": q.window,
        "turn": q.turn,
        "costs": [list(pair) for pair in q.key_costs],
    }


def _advance_turns(
    conn: sqlite3.Connection,
    admitted: list[tuple[str | None, str | None]],
    queues: Sequence[QueueLimits],
    now: float,
    held: str,
) -> None:
    """Record the turns the keys of fair queues took in one admission (in its write
    transaction, so the next admission ranks from them); ``held`` is the keys the
    budgets hold, as ``admit_runs`` took them."""
    fair = {q.name: q for q in queues if q.turn is not None}
    counts: dict[tuple[str, str], int] = {}
    for queue, key in admitted:
        if queue is not None and queue in fair:
            counts[queue, key or ""] = counts.get((queue, key or ""), 0) + 1
    if not counts:
        return
    taken = json.dumps(
        [
            [queue, key, n, dict(fair[queue].key_costs).get(key, fair[queue].turn)]
            for (queue, key), n in counts.items()
        ]
    )
    conn.execute(SQL["advance_turns"], {"taken": taken})
    conn.execute(SQL["advance_clocks"], {"taken": taken})
    for queue in {queue for queue, _key in counts}:
        conn.execute(SQL["forget_turns"], {"queue": queue, "now": now, "held": held})


def _log_admissions(
    conn: sqlite3.Connection, queues: list[str | None], rated: dict[str, float | None], now: float
) -> None:
    """Record the admissions of queues with a rate, and forget those out of their window."""
    counted = [q for q in queues if q is not None and q in rated]
    for queue in counted:
        conn.execute(SQL["log_admission"], (queue, now))
    for queue in set(counted):
        conn.execute(SQL["prune_admissions"], (queue, now - (rated[queue] or 0.0)))
