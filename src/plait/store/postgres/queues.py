"""Queues on PostgreSQL: admitting queued runs within their queues' limits, claiming
the jobs of limited queues, and how deep each queue is.
"""

from __future__ import annotations

from collections.abc import Sequence

from plait.statuses import RunStatusName
from plait.store.postgres.codec import fair_arrays, queue_arrays, step_job
from plait.store.postgres.leases import scope_args
from plait.store.postgres.part import Part
from plait.store.rows import ANY_SCOPE, ClaimScope, QueueDepth, QueueKeyDepth, QueueLimits, StepJob


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
        now = self._now()
        rows = await self._call(
            "fetch",
            self._q["admit_runs"],
            owner,
            now + lease_seconds,
            now,
            limit,
            *queue_arrays(queues),
            status,
            *scope_args(scope),
            *fair_arrays(queues),
            [h[0] for h in held],
            [h[1] for h in held],
        )
        return [r[0] for r in rows]

    async def next_queued(self) -> float | None:
        due = await self._call("fetchval", self._q["next_queued"], read=True)
        return float(due) if due is not None else None

    async def claim_queue_jobs(
        self,
        owner: str,
        lease_seconds: float,
        limit: int,
        queues: Sequence[QueueLimits],
        held: Sequence[tuple[str, str | None]] = (),
    ) -> list[StepJob]:
        names, concurrency, _per_key, rate, window = queue_arrays(queues)
        functions = [fn for q in queues for fn in q.functions]
        function_queues = [q.name for q in queues for _fn in q.functions]
        now = self._now()
        rows = await self._call(
            "fetch",
            self._q["claim_queue_jobs"],
            owner,
            now + lease_seconds,
            now,
            limit,
            names,
            concurrency,
            rate,
            window,
            functions,
            function_queues,
            [h[0] for h in held],
            [h[1] for h in held],
        )
        if not rows:
            return []
        # The claim's function waits for the queues' lock, then reads with snapshots taken
        # after it; a statement calling it would see the steps with its own older one. A
        # job committed meanwhile would come with its step as it was before that commit
        # (none, or pending), which a worker reads as a step that no longer waits for it
        # and drops the job: its step and run are read in a statement of their own.
        found = await self._call(
            "fetch",
            self._q["claimed_steps"],
            [r["run_id"] for r in rows],
            [r["step_key"] for r in rows],
            [r["function"] for r in rows],
            [r["deliveries"] for r in rows],
        )
        return [step_job(r) for r in found]

    async def queue_depths(self) -> list[QueueDepth]:
        rows = await self._call("fetch", self._q["queue_depths"], read=True)
        return [QueueDepth(r[0], int(r[1]), int(r[2])) for r in rows]

    async def queue_keys(self, queue: str) -> list[QueueKeyDepth]:
        rows = await self._call("fetch", self._q["queue_keys"], queue, read=True)
        return [
            QueueKeyDepth(r[0], int(r[1]), int(r[2]), None if r[3] is None else int(r[3]))
            for r in rows
        ]
