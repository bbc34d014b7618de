"""Queued steps on PostgreSQL: claiming their jobs, an attempt's start and end, and a
job put right or dropped.
"""

from __future__ import annotations

from collections.abc import Sequence

from plait.cancel_guard import uncancelled
from plait.store.ops import Op
from plait.store.postgres.codec import step_job
from plait.store.postgres.commit import op_value
from plait.store.postgres.part import Part
from plait.store.rows import StepJob


class Jobs(Part):
    """The jobs of queued steps."""

    async def claim_step_jobs(
        self,
        owner: str,
        lease_seconds: float,
        limit: int,
        functions: Sequence[str],
        queues: Sequence[str] = (),
    ) -> list[StepJob]:
        if not functions:
            return []
        now = self._now()
        rows = await self._call(
            "fetch",
            self._q["claim_step_jobs"],
            owner,
            now + lease_seconds,
            now,
            limit,
            list(functions),
            list(queues),
        )
        return [step_job(r) for r in rows]

    async def begin_queued_step(self, job: StepJob, owner: str, ops: Sequence[Op]) -> bool:
        values = [op_value(op) for op in ops]
        began = await self._call(
            "fetchval",
            self._q["begin_queued_step"],
            job.run_id,
            job.step_key,
            owner,
            values,
            self._now(),
        )
        return bool(began)

    async def finish_queued_step(self, job: StepJob, owner: str, ops: Sequence[Op]) -> bool:
        return await uncancelled(self._finish_queued_step(job, owner, ops))

    async def _finish_queued_step(self, job: StepJob, owner: str, ops: Sequence[Op]) -> bool:
        values = [op_value(op) for op in ops]
        async with self._in_order(job.run_id):
            done = await self._call(
                "fetchval",
                self._q["finish_queued_step"],
                job.run_id,
                job.step_key,
                owner,
                values,
                self._now(),
            )
        return bool(done)

    async def repair_job(self, job: StepJob, owner: str, function: str) -> None:
        await self._call(
            "execute", self._q["repair_job"], job.run_id, job.step_key, function, owner
        )

    async def drop_job(self, job: StepJob, owner: str) -> None:
        await self._call("execute", self._q["drop_job"], job.run_id, job.step_key, owner)

    async def lost_jobs(self, owner: str, jobs: Sequence[tuple[str, str]]) -> set[tuple[str, str]]:
        if not jobs:
            return set()
        rows = await self._call(
            "fetch",
            self._q["lost_jobs"],
            [run_id for run_id, _ in jobs],
            [key for _, key in jobs],
            owner,
            read=True,
        )
        return {(r[0], r[1]) for r in rows}
