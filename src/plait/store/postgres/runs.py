"""Runs and their records on PostgreSQL: creating runs (concurrent starts together),
forking one, reading runs, steps, attempts, decisions, gates and values, and what a pass
reads (concurrent passes' reads together).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import asyncpg

from plait.errors import RunIdTakenError, RunNotFoundError, RunStateError
from plait.records import Run, RunSummary, Step, StepAttempt
from plait.store import convert
from plait.store.ops import EndRun, Op
from plait.store.postgres.codec import (
    RUN_EXISTS,
    RUN_NOT_FOUND,
    RUN_STATE,
    filter_args,
    new_run_value,
    pass_snapshot,
    run_record,
    step_row,
    with_filters,
)
from plait.store.postgres.commit import op_value
from plait.store.postgres.group import Together
from plait.store.postgres.part import Part
from plait.store.rows import GateRow, NewRun, PassSnapshot, RunFilter

#: the most children get_children returns (the newest ones)
_MAX_CHILDREN = 10_000


class Runs(Part):
    """Creating, forking and reading runs, and loading passes."""

    #: runs started at once, created together
    _starts: Together[NewRun, tuple[Run, bool]]
    #: runs read at once, read together
    _reads: Together[str, Run | None]
    #: what passes starting at once read, read together
    _passes: Together[str, Any]

    async def create_run(self, new: NewRun) -> tuple[Run, bool]:
        return await self._starts(new)

    async def create_runs(self, news: Sequence[NewRun]) -> list[tuple[Run, bool]]:
        if not news:
            return []
        values = [new_run_value(n) for n in news]
        try:
            rows = await self._call("fetch", self._q["create_all_runs"], values, self._now())
        except asyncpg.PostgresError as exc:
            if exc.sqlstate == RUN_EXISTS:
                workflow = next((n.workflow for n in news if n.id == exc.detail), "?")
                raise RunIdTakenError(exc.detail or "?", exc.hint or "?", workflow) from None
            raise
        return [(run_record(r["run"]), bool(r["created"])) for r in rows]

    async def _create_one(self, new: NewRun) -> tuple[Run, bool]:
        row = await self._call("fetchrow", self._q["create_run"], new_run_value(new), self._now())
        return run_record(row["run"]), bool(row["created"])

    async def _create_many(self, news: list[NewRun]) -> list[tuple[Run, bool]]:
        rows = await self._call(
            "fetch", self._q["create_runs"], [new_run_value(n) for n in news], self._now()
        )
        return [(run_record(r["run"]), bool(r["created"])) for r in rows]

    async def replace_run(self, new: NewRun, end: EndRun) -> tuple[Run, bool, list[str]]:
        # in order with this process's other writes to the run it is likely to end, as a
        # cancel is (another run may hold the key by the time the function looks)
        holder = await self._call("fetchval", self._q["live_dedup_run"], new.dedup, read=True)
        async with self._in_order(holder or new.id):
            row = await self._call(
                "fetchrow", self._q["replace_run"], new_run_value(new), self._now(), op_value(end)
            )
        return run_record(row["run"]), bool(row["created"]), list(row["moved"] or [])

    async def get_run(self, run_id: str) -> Run | None:
        return await self._reads(run_id)

    async def _get_one(self, run_id: str) -> Run | None:
        rec = await self._call("fetchval", self._q["select_run"], run_id, read=True)
        return run_record(rec) if rec is not None else None

    async def _get_many(self, run_ids: list[str]) -> list[Run | None]:
        rows = await self._call("fetch", self._q["select_runs"], run_ids, read=True)
        found = {run.id: run for run in (run_record(r["r"]) for r in rows)}
        return [found.get(run_id) for run_id in run_ids]

    async def run_statuses(self, run_ids: Sequence[str]) -> dict[str, str]:
        rows = await self._call("fetch", self._q["run_statuses"], list(run_ids), read=True)
        return {row[0]: row[1] for row in rows}

    async def list_runs(self, where: RunFilter) -> tuple[list[Run], int]:
        query = self._filtered(self._q["list_runs"], where)
        row = await self._call("fetchrow", query, *filter_args(where), read=True)
        return [run_record(r) for r in row["runs"]], int(row["total"])

    async def list_run_summaries(self, where: RunFilter) -> tuple[list[RunSummary], int]:
        query = self._filtered(self._q["list_run_summaries"], where)
        row = await self._call("fetchrow", query, *filter_args(where), read=True)
        return [convert.run_summary(tuple(r)) for r in row["runs"]], int(row["total"])

    async def count_by_status(self, where: RunFilter) -> dict[str, int]:
        query = self._filtered(self._q["count_by_status"], where)
        rows = await self._call("fetch", query, *filter_args(where), read=True)
        return {row[0]: int(row[1]) for row in rows}

    async def waiting_steps(
        self, run_ids: Sequence[str], kinds: Sequence[str], statuses: Sequence[str]
    ) -> list[Step]:
        rows = await self._call(
            "fetch",
            self._q["waiting_steps"],
            list(run_ids),
            list(kinds),
            list(statuses),
            read=True,
        )
        return [convert.step_record(step_row(r["s"])) for r in rows]

    def _filtered(self, listing: str, where: RunFilter) -> str:
        """``listing`` with the filters' conditions (``run_filter``, and ``tag_filter``
        when ``where`` has tags) in place of its ``/*filters*/``."""
        tags = self._q["tag_filter"] if where.tags else None
        return with_filters(listing, self._q["run_filter"], tags)

    async def get_children(self, run_id: str) -> list[Run]:
        rows = await self._call("fetch", self._q["get_children"], run_id, _MAX_CHILDREN, read=True)
        return sorted((run_record(r["r"]) for r in rows), key=lambda r: r.created_at)

    async def get_steps(self, run_id: str) -> list[Step]:
        rows = await self._call("fetch", self._q["get_steps"], run_id, read=True)
        return [convert.step_record(step_row(r["s"])) for r in rows]

    async def get_history(self, run_id: str) -> list[StepAttempt]:
        rows = await self._call("fetch", self._q["get_history"], run_id, read=True)
        return [convert.attempt_record(tuple(r)) for r in rows]

    async def count_timers(self, run_id: str) -> int:
        """How many durable timers the run has (sleeps, retry back-offs, event timeouts)."""
        return int(await self._call("fetchval", self._q["count_timers"], run_id, read=True))

    # -- orchestrator passes ----------------------------------------------------------------
    async def load_pass(self, run_id: str) -> PassSnapshot | None:
        row = await self._passes(run_id)
        if row is None:
            return None
        self.starting_pass(run_id)
        return pass_snapshot(row)

    async def list_passes(
        self, statuses: Sequence[str], kind: str, workflow: str | None, after: str, limit: int
    ) -> list[PassSnapshot]:
        rows = await self._call(
            "fetch", self._q["list_passes"], list(statuses), kind, workflow, after, limit, read=True
        )
        return [pass_snapshot(row) for row in rows]

    async def _load_one(self, run_id: str) -> Any:
        (row,) = await self._load_many([run_id])
        return row

    async def _load_many(self, run_ids: list[str]) -> list[Any]:
        rows = await self._call("fetch", self._q["load_passes"], run_ids, read=True)
        found = {row["id"]: row for row in rows}
        return [found.get(run_id) for run_id in run_ids]

    async def fork_run(
        self,
        new: NewRun,
        forked_from: str,
        ops: Sequence[Op],
        from_statuses: Sequence[str],
        replace: EndRun | None = None,
    ) -> tuple[Run, list[str]]:
        try:
            # in order with this process's other writes to the source, as a cancel is
            async with self._in_order(forked_from):
                row = await self._call(
                    "fetchrow",
                    self._q["fork_run"],
                    new_run_value(new),
                    forked_from,
                    [op_value(op) for op in ops],
                    self._now(),
                    list(from_statuses),
                    None if replace is None else op_value(replace),
                )
        except asyncpg.PostgresError as exc:
            if exc.sqlstate == RUN_EXISTS:
                existing = await self.get_run(new.id)
                raise RunIdTakenError(
                    new.id, existing.workflow if existing else "?", new.workflow
                ) from None
            if exc.sqlstate == RUN_NOT_FOUND:
                raise RunNotFoundError(forked_from) from None
            if exc.sqlstate == RUN_STATE:
                raise RunStateError(forked_from, exc.detail or "unknown", "fork") from None
            raise
        return run_record(row["forked"]), list(row["moved"] or [])

    async def get_decisions(self, run_id: str) -> list[dict[str, Any]]:
        rows = await self._call("fetch", self._q["get_decisions"], run_id, read=True)
        return [dict(r) for r in rows]

    async def list_gates(self, status: str | None, limit: int) -> list[GateRow]:
        rows = await self._call("fetch", self._q["list_gates"], status, limit, read=True)
        return [GateRow(step_row(r["s"]), r["workflow"], r["owner"], r["run_status"]) for r in rows]

    async def get_values(self, run_id: str) -> dict[str, str | None]:
        rows = await self._call("fetch", self._q["get_values"], run_id, read=True)
        return {r["key"]: r["value"] for r in rows}

    async def run_marks(self, run_id: str) -> tuple[Any, ...] | None:
        row = await self._call("fetchrow", self._q["run_marks"], run_id, read=True)
        return None if row is None else tuple(row)
