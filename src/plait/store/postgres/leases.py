"""Leases on PostgreSQL: claiming runs, renewing and expiring leases (also from a thread
of their own, ``ThreadLeaseKeeper``), re-driving idle runs, and what falls due next.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Sequence
from typing import Any

import asyncpg

from plait.clock import Clock
from plait.queues import DEFAULT_QUEUE
from plait.store.contract import LeaseKeeper
from plait.store.postgres.codec import pass_snapshot, set_codecs
from plait.store.postgres.part import Part
from plait.store.rows import ANY_SCOPE, ClaimScope, Lease, LeaseRenewal, PassSnapshot, Pending


class Leases(Part):
    """Claims, leases and what is due."""

    async def claim_run(
        self, run_id: str, owner: str, lease_seconds: float, scope: ClaimScope = ANY_SCOPE
    ) -> bool:
        now = self._now()
        got = await self._call(
            "fetchval",
            self._q["claim_run"],
            run_id,
            owner,
            now + lease_seconds,
            now,
            *scope_args(scope),
        )
        return got is not None

    async def claim_due_runs(
        self, owner: str, lease_seconds: float, limit: int, scope: ClaimScope = ANY_SCOPE
    ) -> list[str]:
        now = self._now()
        rows = await self._call(
            "fetch",
            self._q["claim_due_runs"],
            owner,
            now + lease_seconds,
            now,
            limit,
            *scope_args(scope),
        )
        return [r["id"] for r in rows]

    async def claim_due_passes(
        self, owner: str, lease_seconds: float, limit: int, scope: ClaimScope = ANY_SCOPE
    ) -> list[PassSnapshot]:
        now = self._now()
        rows = await self._call(
            "fetch",
            self._q["claim_due_passes"],
            owner,
            now + lease_seconds,
            now,
            limit,
            *scope_args(scope),
        )
        return [pass_snapshot(row) for row in rows]

    async def renew_leases(
        self,
        owner: str,
        lease_seconds: float,
        holding: Sequence[str],
        stepping: Sequence[str] = (),
    ) -> LeaseRenewal:
        until = self._now() + lease_seconds
        rows = await self._call(
            "fetch", self._q["renew_leases"], owner, until, list(stepping), list(holding)
        )
        found: dict[str, set[Any]] = {"ended": set(), "lost": set(), "job": set()}
        for r in rows:
            found[r["what"]].add(r["id"] if r["what"] != "job" else (r["id"], r["key"]))
        return LeaseRenewal(
            frozenset(found["ended"]), frozenset(found["lost"]), frozenset(found["job"])
        )

    def lease_keeper(self) -> LeaseKeeper | None:
        return ThreadLeaseKeeper(
            self.dsn, self._q["renew_leases"], self._pool.connect_timeout, self.clock
        )

    async def leases_of(self, worker_id: str, owner: str) -> list[Lease]:
        """Leases held under ``worker_id`` by other processes than ``owner`` (an earlier
        life of a restarted worker, or a twin still draining)."""
        rows = await self._call("fetch", self._q["leases_of"], f"{worker_id}#", owner, read=True)
        return [Lease(*r) for r in rows]

    async def expire_leases(self, leases: Sequence[Lease]) -> int:
        """Expire the given leases if nobody renewed them since they were read: their
        holder is dead, so its runs and steps are taken over now instead of at expiry."""
        if not leases:
            return 0
        given = list(leases)
        expired = await self._call(
            "fetchval",
            self._q["expire_leases"],
            [lease.kind for lease in given],
            [lease.run_id for lease in given],
            [lease.step_key for lease in given],
            [lease.owner for lease in given],
            [lease.until for lease in given],
            0.0,
        )
        return int(expired)

    async def release_leases(self, owner: str, run_ids: Sequence[str]) -> int:
        released = await self._call(
            "fetchval", self._q["release_leases"], owner, list(run_ids), self._now()
        )
        return int(released)

    async def sweep_idle(self, base: float = 30.0, cap: float = 600.0, limit: int = 100) -> int:
        """Re-drive runs that are ``running`` with nothing that will ever wake them (a
        safety net: state changes and their wake-ups are committed together); each run's
        sweeps back off from ``base`` seconds doubling up to ``cap``."""
        swept = int(
            await self._call("fetchval", self._q["sweep_idle"], self._now(), cap, base, limit)
        )
        if swept:
            self._listener.publish("work", "")
        return swept

    async def next_due(
        self, functions: Sequence[str] | None = None, scope: ClaimScope = ANY_SCOPE
    ) -> float | None:
        """When the next run pass (``functions`` None) of ``scope`` or job for
        ``functions`` is due, counting a leased one as due when its lease runs out."""
        if functions is None:
            due = await self._call(
                "fetchval", self._q["next_due_runs"], *scope_args(scope), read=True
            )
        else:
            due = await self._call("fetchval", self._q["next_due_jobs"], list(functions), read=True)
        return float(due) if due is not None else None

    async def job_depths(self) -> dict[str, int]:
        rows = await self._call("fetch", self._q["job_depths"], self._now(), read=True)
        return {r[0]: int(r[1]) for r in rows}

    async def pending(self, functions: Sequence[str]) -> Pending:
        row = await self._call("fetchrow", self._q["pending_work"], list(functions), read=True)
        due, start, tick, deadline = row[1], row[2], row[3], row[4]
        return Pending(
            int(row[0]),
            float(due) if due is not None else None,
            float(start) if start is not None else None,
            float(tick) if tick is not None else None,
            float(deadline) if deadline is not None else None,
        )


def scope_args(scope: ClaimScope) -> tuple[object, ...]:
    """A claim's scope as the last four parameters of its statement (``claim_run``)."""
    workflows = None if scope.workflows is None else list(scope.workflows)
    queues = None if scope.queues is None else list(scope.queues)
    return (workflows, scope.graphs, queues, DEFAULT_QUEUE)


class ThreadLeaseKeeper:
    """Lease renewal on a connection and an event loop of its own, for a thread beside
    a blocked loop (asyncpg connections belong to the loop that opened them)."""

    def __init__(self, dsn: str, statement: str, connect_timeout: float, clock: Clock) -> None:
        self._dsn, self._statement, self._timeout = dsn, statement, connect_timeout
        self._now = clock.now
        self._loop = asyncio.new_event_loop()
        self._conn: asyncpg.Connection | None = None

    def renew(self, owner: str, lease_seconds: float, holding: Sequence[str]) -> None:
        self._loop.run_until_complete(self._renew(owner, lease_seconds, holding))

    async def _renew(self, owner: str, lease_seconds: float, holding: Sequence[str]) -> None:
        if self._conn is None or self._conn.is_closed():
            self._conn = await asyncpg.connect(self._dsn, timeout=self._timeout)
            await set_codecs(self._conn)
        until = self._now() + lease_seconds
        await self._conn.execute(self._statement, owner, until, [], list(holding))

    def close(self) -> None:
        if self._conn is not None:
            with contextlib.suppress(Exception):
                self._loop.run_until_complete(self._conn.close(timeout=2))
        self._loop.close()
