"""Actions on a run from outside a pass, on PostgreSQL: wake, cancel, reopen (resume,
retry), send an event or a decision, and prune ended runs.
"""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Sequence
from typing import Any

import asyncpg

from plait.errors import RunNotFoundError, RunStateError
from plait.records import Run
from plait.statuses import RunStatusName
from plait.store.ops import CancelChildren, CancelCut, Op, StepEnd
from plait.store.postgres.codec import (
    RUN_NOT_FOUND,
    RUN_STATE,
    cut_value,
    run_record,
    step_end_value,
)
from plait.store.postgres.commit import op_value
from plait.store.postgres.group import Together
from plait.store.postgres.part import Part
from plait.store.rows import DecisionRow, PruneBatch

#: what reopen_run does, by the status it reopens from, for RunStateError
_REOPEN_ACTIONS = {"suspended": "resume", "failed": "retry", "needs_attention": "retry"}


@dataclasses.dataclass(frozen=True, slots=True)
class Reopening:
    """One ``reopen_run`` call, as reopens made at once are sent together."""

    run_id: str
    from_status: str
    status: RunStatusName
    deadline_at: float | None
    wakeups_seen: int
    ops: list[Op]


class Actions(Part):
    """What the engine does to a run from outside a pass."""

    #: reopens made at once, written together
    _reopens: Together[Reopening, Run | None]

    async def wake(self, run_id: str, at: float | None = None) -> None:
        now = self._now()
        async with self._in_order(run_id):
            await self._call("execute", self._q["wake"], run_id, now, now if at is None else at)

    async def _action(self, action: str, run_id: str, method: str, query: str, *args: Any) -> Any:
        try:
            async with self._in_order(run_id):
                return await self._call(method, query, run_id, *args)
        except asyncpg.PostgresError as exc:
            if exc.sqlstate == RUN_NOT_FOUND:
                raise RunNotFoundError(run_id) from None
            if exc.sqlstate == RUN_STATE:
                raise RunStateError(run_id, exc.detail or "unknown", action) from None
            raise

    async def cancel_run(
        self, run_id: str, status: RunStatusName, error: str, parent: StepEnd, cut: CancelCut
    ) -> list[str]:
        moved = await self._action(
            "cancel",
            run_id,
            "fetchval",
            self._q["cancel_run"],
            status,
            error,
            step_end_value(parent),
            cut_value(cut),
            self._now(),
        )
        return list(moved or [])

    async def time_out_run(
        self,
        run_id: str,
        status: RunStatusName,
        error: str,
        parent: StepEnd,
        cut: CancelCut,
        children: CancelChildren,
    ) -> list[str]:
        async with self._in_order(run_id):
            moved = await self._call(
                "fetchval",
                self._q["time_out_run"],
                run_id,
                status,
                error,
                step_end_value(parent),
                cut_value(cut),
                children.status,
                children.error,
                step_end_value(children.parent),
                self._now(),
            )
        return list(moved or [])

    async def due_deadlines(self, now: float, limit: int) -> list[tuple[str, float]]:
        rows = await self._call("fetch", self._q["due_deadlines"], now, limit, read=True)
        return [(r[0], float(r[1])) for r in rows]

    async def next_deadline(self) -> float | None:
        due = await self._call("fetchval", self._q["next_deadline"], read=True)
        return float(due) if due is not None else None

    async def reopen_run(
        self,
        run_id: str,
        from_status: str,
        status: RunStatusName,
        deadline_at: float | None,
        wakeups_seen: int,
        ops: Sequence[Op],
    ) -> Run | None:
        return await self._reopens(
            Reopening(run_id, from_status, status, deadline_at, wakeups_seen, list(ops))
        )

    async def _reopen_one(self, item: Reopening) -> Run | None:
        rec = await self._action(
            _REOPEN_ACTIONS.get(item.from_status, "reopen"),
            item.run_id,
            "fetchval",
            self._q["reopen_run"],
            item.from_status,
            item.status,
            item.deadline_at,
            item.wakeups_seen,
            [op_value(op) for op in item.ops],
            self._now(),
        )
        return None if rec is None else run_record(rec)

    async def _reopen_many(self, items: list[Reopening]) -> list[Run | None]:
        """Reopens made at once (a bulk retry's lanes) in one statement: one transaction
        and one WAL flush for all. A run that is not in its status fails the statement,
        and ``Together`` then reopens each alone, each with its own answer."""
        ends: list[int] = []
        ops: list[Any] = []
        for item in items:
            ops.extend(op_value(op) for op in item.ops)
            ends.append(len(ops))
        async with contextlib.AsyncExitStack() as turns:
            # in order with this process's other writes to these runs, taken in one order
            for run_id in sorted({item.run_id for item in items}):
                await turns.enter_async_context(self._in_order(run_id))
            rows = await self._call(
                "fetch",
                self._q["reopen_runs"],
                [item.run_id for item in items],
                [item.from_status for item in items],
                [item.status for item in items],
                [item.deadline_at for item in items],
                [item.wakeups_seen for item in items],
                ends,
                ops,
                self._now(),
            )
        return [None if row["reopened"] is None else run_record(row["reopened"]) for row in rows]

    async def send_event(
        self, run_id: str, name: str, payload: str | None, dedup: str | None = None
    ) -> bool:
        sent: bool = await self._action(
            f"send event {name!r} to",
            run_id,
            "fetchval",
            self._q["send_event"],
            name,
            payload,
            dedup,
            self._now(),
        )
        return sent

    async def submit_decision(self, run_id: str, decision: DecisionRow, ops: Sequence[Op]) -> str:
        result = await self._action(
            "send a decision to",
            run_id,
            "fetchval",
            self._q["submit_decision"],
            decision.name,
            decision.payload,
            decision.decided_by,
            decision.outcome,
            decision.reason,
            decision.key,
            [op_value(op) for op in ops],
            decision.if_closed,
            decision.if_expired,
            decision.decided_at,
            decision.refused_cap,
        )
        return str(result)

    async def prune_batch(
        self,
        statuses: Sequence[str],
        cutoff: float,
        after: tuple[float, str] | None,
        limit: int,
    ) -> PruneBatch:
        row = await self._call(
            "fetchrow",
            self._q["prune_runs"],
            list(statuses),
            cutoff,
            after[0] if after else None,
            after[1] if after else None,
            limit,
        )
        cursor = None if row["last_id"] is None else (float(row["last_at"]), row["last_id"])
        return PruneBatch(int(row["deleted"] or 0), cursor)
