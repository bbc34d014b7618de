"""Leases on SQLite: claiming runs, renewing and expiring leases (also from a thread of
their own, ``ThreadLeaseKeeper``), re-driving idle runs, and what falls due next.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Sequence

from plait.clock import Clock
from plait.queues import DEFAULT_QUEUE
from plait.store.contract import LeaseKeeper
from plait.store.rows import ANY_SCOPE, ClaimScope, Lease, LeaseRenewal, PassSnapshot, Pending
from plait.store.sqlite import apply
from plait.store.sqlite.part import Part
from plait.store.sqlite.runs import read_pass
from plait.store.sqlite.writer import SQL


class Leases(Part):
    """Claims, leases and what is due."""

    async def claim_run(
        self, run_id: str, owner: str, lease_seconds: float, scope: ClaimScope = ANY_SCOPE
    ) -> bool:
        def go(conn: sqlite3.Connection) -> bool:
            now = self._now()
            params = {"owner": owner, "until": now + lease_seconds, "run": run_id, "now": now}
            cur = conn.execute(SQL["claim_run"], {**params, **scope_params(scope)})
            return cur.rowcount == 1

        return await self._write(go)

    async def claim_due_runs(
        self, owner: str, lease_seconds: float, limit: int, scope: ClaimScope = ANY_SCOPE
    ) -> list[str]:
        def go(conn: sqlite3.Connection) -> list[str]:
            return _claim_due(conn, self._now(), owner, lease_seconds, limit, scope)

        return await self._write(go)

    async def claim_due_passes(
        self, owner: str, lease_seconds: float, limit: int, scope: ClaimScope = ANY_SCOPE
    ) -> list[PassSnapshot]:
        def go(conn: sqlite3.Connection) -> list[PassSnapshot]:
            taken = _claim_due(conn, self._now(), owner, lease_seconds, limit, scope)
            # in the claim's transaction: a read that fails takes the claim back with it
            snapshots = (read_pass(conn, run_id) for run_id in taken)
            return [snapshot for snapshot in snapshots if snapshot is not None]

        return await self._write(go)

    def starting_pass(self, run_id: str) -> None:
        """Nothing to forget: a write whose outcome SQLite did not give is not kept."""

    async def release_leases(self, owner: str, run_ids: Sequence[str]) -> int:
        def go(conn: sqlite3.Connection) -> int:
            runs = conn.execute(
                SQL["release_owned_runs"], (self._now(), owner, json.dumps(list(run_ids)))
            )
            return runs.rowcount + conn.execute(SQL["release_owned_jobs"], (owner,)).rowcount

        return await self._write(go)

    async def sweep_idle(self, base: float = 30.0, cap: float = 600.0, limit: int = 100) -> int:
        """Re-drive runs that are ``running`` with nothing that will ever wake them (no
        lease, no timer, no job). A state change and the wake-up it needs are written in
        one transaction, so this is a safety net; each run's sweeps back off (30 s
        doubling to 10 min) so a wedged run can never flood the queue."""

        def go(conn: sqlite3.Connection) -> int:
            now = self._now()
            rows = conn.execute(SQL["sweep_idle"], (now, now, cap, base, limit)).fetchall()
            if rows:
                conn.execute(SQL["touch_runs"], (now, json.dumps([r[0] for r in rows])))
            return len(rows)

        return await self._write(go)

    async def leases_of(self, worker_id: str, owner: str) -> list[Lease]:
        """Leases held under ``worker_id`` by other processes than ``owner`` (an earlier
        life of a restarted worker, or a twin still draining)."""
        prefix = f"{worker_id}#"

        def go(conn: sqlite3.Connection) -> list[Lease]:
            rows = conn.execute(
                SQL["leases_of"], (len(prefix), prefix, owner, len(prefix), prefix, owner)
            ).fetchall()
            return [Lease(*r) for r in rows]

        return await self._read(go)

    async def expire_leases(self, leases: Sequence[Lease]) -> int:
        """Expire the given leases if nobody renewed them since they were read: their
        holder is dead, so its runs and steps are taken over now instead of at expiry."""
        given = list(leases)

        def go(conn: sqlite3.Connection) -> int:
            done = 0
            for lease in given:
                if lease.kind == "run":
                    cur = conn.execute(
                        SQL["expire_run_lease"], (lease.run_id, lease.owner, lease.until)
                    )
                else:
                    cur = conn.execute(
                        SQL["expire_job_lease"],
                        (lease.run_id, lease.step_key, lease.owner, lease.until),
                    )
                done += cur.rowcount
            return done

        return await self._write(go)

    async def renew_leases(
        self,
        owner: str,
        lease_seconds: float,
        holding: Sequence[str],
        stepping: Sequence[str] = (),
    ) -> LeaseRenewal:
        def go(conn: sqlite3.Connection) -> LeaseRenewal:
            held = json.dumps(list(holding))
            apply.renew_leases(conn, owner, self._now() + lease_seconds, held)
            ids = json.dumps(list(stepping))
            ended = conn.execute(SQL["ended_leased_runs"], (owner, held, ids)).fetchall()
            lost = conn.execute(SQL["lost_leased_runs"], (held, owner)).fetchall()
            jobs = conn.execute(SQL["leased_jobs"], (owner,)).fetchall()
            return LeaseRenewal(
                frozenset(r[0] for r in ended),
                frozenset(r[0] for r in lost),
                frozenset((r[0], r[1]) for r in jobs),
            )

        return await self._write(go)

    def lease_keeper(self) -> LeaseKeeper | None:
        if self.memory:
            return None
        return ThreadLeaseKeeper(self.path, self.busy_timeout, self.clock)

    async def next_due(
        self, functions: Sequence[str] | None = None, scope: ClaimScope = ANY_SCOPE
    ) -> float | None:
        """When the next run pass (``functions`` None) of ``scope`` or job for
        ``functions`` is due, counting a leased one as due when its lease runs out."""
        params: tuple[str, ...] | dict[str, object]
        if functions is None:
            sql, params = SQL["next_due_runs"], scope_params(scope)
        else:
            sql, params = SQL["next_due_jobs"], (json.dumps(list(functions)),)

        def go(conn: sqlite3.Connection) -> float | None:
            row = conn.execute(sql, params).fetchone()
            return row[0] if row else None

        return await self._read_here(go)

    async def job_depths(self) -> dict[str, int]:
        params = {"now": self._now()}

        def go(conn: sqlite3.Connection) -> dict[str, int]:
            return {f: int(n) for f, n in conn.execute(SQL["job_depths"], params)}

        return await self._read(go)

    async def pending(self, functions: Sequence[str]) -> Pending:
        params = (json.dumps(list(functions)),)

        def go(conn: sqlite3.Connection) -> Pending:
            row = conn.execute(SQL["pending_work"], params).fetchone()
            leases, runs_due, jobs_due, next_start, next_tick, deadline = row
            due = [t for t in (runs_due, jobs_due) if t is not None]
            return Pending(int(leases), min(due) if due else None, next_start, next_tick, deadline)

        return await self._read_here(go)


class ThreadLeaseKeeper:
    """Lease renewal on a connection of its own, for a thread beside a blocked loop."""

    def __init__(self, path: str, busy_timeout: float, clock: Clock) -> None:
        self._conn = sqlite3.connect(path, timeout=busy_timeout, isolation_level=None)
        self._now = clock.now

    def renew(self, owner: str, lease_seconds: float, holding: Sequence[str]) -> None:
        conn = self._conn
        conn.execute(SQL["begin_immediate"])
        try:
            held = json.dumps(list(holding))
            apply.renew_leases(conn, owner, self._now() + lease_seconds, held)
        except BaseException:
            conn.execute(SQL["rollback"])
            raise
        conn.execute(SQL["commit"])

    def close(self) -> None:
        self._conn.close()


def _claim_due(
    conn: sqlite3.Connection,
    now: float,
    owner: str,
    lease_seconds: float,
    limit: int,
    scope: ClaimScope,
) -> list[str]:
    """Lease up to ``limit`` due runs of ``scope`` to ``owner`` (``claim_due_runs``)."""
    params = {"owner": owner, "until": now + lease_seconds, "now": now, "limit": limit}
    rows = conn.execute(SQL["claim_due_runs"], {**params, **scope_params(scope)})
    return [r[0] for r in rows.fetchall()]


def scope_params(scope: ClaimScope) -> dict[str, object]:
    """A claim's scope as the named parameters its statement takes (``claim_run``)."""
    return {
        "scope_workflows": None if scope.workflows is None else json.dumps(list(scope.workflows)),
        "scope_graphs": int(scope.graphs),
        "scope_queues": None if scope.queues is None else json.dumps(list(scope.queues)),
        "default_queue": DEFAULT_QUEUE,
    }
