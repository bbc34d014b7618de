"""Actions on a run from outside a pass, on SQLite: wake, cancel, reopen (resume, retry),
send an event or a decision, and prune ended runs.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Sequence

from plait.errors import RunNotFoundError
from plait.records import Run
from plait.statuses import RunStatusName
from plait.store.ops import CancelChildren, CancelCut, EndRun, Op, StepEnd
from plait.store.rows import DecisionRow, PruneBatch
from plait.store.sqlite import apply
from plait.store.sqlite.part import Part
from plait.store.sqlite.writer import SQL

#: a held decision waits in a run that has not ended; any other is kept for every run
_LIVE = ("queued", "running", "suspended", "paused", "needs_attention")
_ANY_STATUS = (*_LIVE, "completed", "failed", "cancelled", "continued")
#: what a pruned run leaves in each table, the run row itself last
_PRUNED = (
    SQL["prune_attempts"],
    SQL["prune_steps"],
    SQL["prune_events"],
    SQL["prune_requests"],
    SQL["prune_timers"],
    SQL["prune_jobs"],
    SQL["prune_state"],
    SQL["prune_values"],
    SQL["prune_tags"],
    SQL["prune_stream_entries"],
    SQL["prune_runs"],
)


class Actions(Part):
    """What the engine does to a run from outside a pass."""

    async def wake(self, run_id: str, at: float | None = None) -> None:
        def go(conn: sqlite3.Connection) -> None:
            now = self._now()
            apply.wake(conn, run_id, now, now if at is None else at)

        await self._write(go)

    async def cancel_run(
        self, run_id: str, status: RunStatusName, error: str, parent: StepEnd, cut: CancelCut
    ) -> list[str]:
        end = EndRun(status, None, error, parent, cut)

        def go(conn: sqlite3.Connection) -> list[str]:
            apply.require_status(conn, run_id, _LIVE, "cancel")
            return apply.end_run(conn, run_id, end, self._now(), from_suspended=True)

        return await self._write(go)

    async def time_out_run(
        self,
        run_id: str,
        status: RunStatusName,
        error: str,
        parent: StepEnd,
        cut: CancelCut,
        children: CancelChildren,
    ) -> list[str]:
        end = EndRun(status, None, error, parent, cut)

        def go(conn: sqlite3.Connection) -> list[str]:
            now = self._now()
            row = conn.execute(SQL["run_deadline"], (run_id,)).fetchone()
            if row is None or row[0] not in _LIVE or row[1] is None or row[1] > now:
                return []
            # the children first, as the children's end says; the run's own end then
            # finds none left to take with it
            moved = apply.cancel_children(conn, run_id, children, now)
            return apply.end_run(conn, run_id, end, now, from_suspended=True) + moved

        return await self._write(go)

    async def due_deadlines(self, now: float, limit: int) -> list[tuple[str, float]]:
        def go(conn: sqlite3.Connection) -> list[tuple[str, float]]:
            rows = conn.execute(SQL["due_deadlines"], {"now": now, "limit": limit})
            return [(r[0], r[1]) for r in rows]

        return await self._read_here(go)

    async def next_deadline(self) -> float | None:
        def go(conn: sqlite3.Connection) -> float | None:
            found = conn.execute(SQL["next_deadline"]).fetchone()
            return None if found is None else found[0]

        return await self._read_here(go)

    async def reopen_run(
        self,
        run_id: str,
        from_status: str,
        status: RunStatusName,
        deadline_at: float | None,
        wakeups_seen: int,
        ops: Sequence[Op],
    ) -> Run | None:
        action = "resume" if from_status == "suspended" else "retry"

        def go(conn: sqlite3.Connection) -> Run | None:
            now = self._now()
            apply.require_status(conn, run_id, (from_status,), action)
            cur = conn.execute(
                SQL["reopen_run"],
                (status, deadline_at, now, now, run_id, from_status, wakeups_seen),
            )
            if cur.rowcount == 0:
                return None  # woken since it was read: the caller reads it again
            apply.apply_ops(conn, run_id, ops, now)
            return apply.load_run(conn, run_id)

        return await self._write(go)

    async def send_event(
        self, run_id: str, name: str, payload: str | None, dedup: str | None = None
    ) -> bool:
        def go(conn: sqlite3.Connection) -> bool:
            now = self._now()
            if dedup is not None:
                # a key the run took already changes nothing, whatever became of the run
                if conn.execute(SQL["run_status"], (run_id,)).fetchone() is None:
                    raise RunNotFoundError(run_id)
                if conn.execute(SQL["event_dedup_taken"], (run_id, dedup)).fetchone()[0]:
                    return False
            apply.require_status(conn, run_id, _LIVE, f"send event {name!r} to")
            if not apply.store_event(conn, run_id, name, payload, dedup, now):
                return False
            return bool(conn.execute(SQL["waits_for_event"], (run_id, name)).fetchone()[0])

        return await self._write(go)

    async def submit_decision(self, run_id: str, decision: DecisionRow, ops: Sequence[Op]) -> str:
        def go(conn: sqlite3.Connection) -> str:
            now = decision.decided_at
            result, reason, consumed = decision.outcome, decision.reason, decision.key
            if result == "held":
                apply.require_status(conn, run_id, _LIVE, "send a decision to")
                consumed = None
            else:
                apply.require_status(conn, run_id, _ANY_STATUS, "send a decision to")
                consumed = consumed or ""
            if result == "accepted":
                row = conn.execute(SQL["step_status"], (run_id, decision.key)).fetchone()
                if row is None or row[0] != "pending":
                    result, reason = "closed", decision.if_closed
                elif row[1] is not None and now >= row[1]:
                    result, reason = "expired", decision.if_expired
                else:
                    apply.apply_ops(conn, run_id, ops, now)
            refused = result in ("refused", "closed", "expired")
            # the write transaction serializes the decisions, so the count sees every
            # refusal stored before this one
            if refused and decision.refused_cap is not None:
                found = conn.execute(SQL["refused_decisions"], (run_id, consumed)).fetchone()
                if found[0] >= decision.refused_cap:
                    return result
            conn.execute(
                SQL["insert_decision"],
                (
                    run_id,
                    "__approval:" + decision.name,
                    # a refused decision keeps who sent it, when and why, never its data
                    None if refused else decision.payload,
                    now,
                    consumed,
                    decision.decided_by,
                    "refused" if refused else result,
                    reason,
                    None if result == "held" else now,
                ),
            )
            if result in ("accepted", "held"):
                apply.wake(conn, run_id, now, now)
            return result

        return await self._write(go)

    async def prune_batch(
        self,
        statuses: Sequence[str],
        cutoff: float,
        after: tuple[float, str] | None,
        limit: int,
    ) -> PruneBatch:
        params = {
            "statuses": json.dumps(list(statuses)),
            "cutoff": cutoff,
            "after_at": after[0] if after else float("-inf"),
            "after_id": after[1] if after else "",
            "limit": limit,
        }

        def go(conn: sqlite3.Connection) -> PruneBatch:
            roots = conn.execute(SQL["prune_roots"], params).fetchall()
            if not roots:
                return PruneBatch(0, None)
            cursor = (roots[-1][1], roots[-1][0])
            doomed = [
                r[0] for r in conn.execute(SQL["prune_trees"], (json.dumps([r[0] for r in roots]),))
            ]
            if doomed:
                ids = json.dumps(doomed)
                for statement in _PRUNED:
                    conn.execute(statement, (ids,))
            return PruneBatch(len(doomed), cursor)

        # off the event loop's thread: a batch must never block the loop, only take its
        # turn at the write lock
        return await self._db.write(go, background=True)
