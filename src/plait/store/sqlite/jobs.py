"""Queued steps on SQLite: claiming their jobs, an attempt's start and end, and a job put
right or dropped.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Sequence

from plait.store import convert
from plait.store.ops import Op
from plait.store.rows import StepJob
from plait.store.sqlite import apply
from plait.store.sqlite.part import Part
from plait.store.sqlite.writer import SQL

_JOB_HELD = SQL["job_held"]
_CLAIMED_STEP = SQL["claimed_step"]


def claimed(
    conn: sqlite3.Connection, run_id: str, key: str, function: str, deliveries: int
) -> StepJob:
    """A claimed job with its step's row and its run's workflow, trace and queue, read in
    the claim's transaction."""
    found = conn.execute(_CLAIMED_STEP, (run_id, key)).fetchone()
    if found is None:
        return StepJob(run_id, key, function, deliveries)
    workflow, trace, queue = found[-3:]
    step = convert.step_row(found[:-3])
    return StepJob(run_id, key, function, deliveries, step, workflow, trace, queue)


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
        names = json.dumps(list(functions))
        pairs = json.dumps([[f, q] for f, q in zip(functions, queues, strict=False)])

        def go(conn: sqlite3.Connection) -> list[StepJob]:
            now = self._now()
            until = now + lease_seconds
            rows = conn.execute(
                SQL["claim_step_jobs"], (owner, until, now, now, names, pairs, limit)
            ).fetchall()
            return [claimed(conn, *row) for row in rows]

        return await self._write(go)

    async def begin_queued_step(self, job: StepJob, owner: str, ops: Sequence[Op]) -> bool:
        def go(conn: sqlite3.Connection) -> bool:
            held = conn.execute(_JOB_HELD, (job.run_id, job.step_key, owner)).fetchone()
            if held is None:
                return False
            status = conn.execute(SQL["run_status"], (job.run_id,)).fetchone()
            if status is not None and status[0] in ("suspended", "paused"):
                # keep the job for when the run goes on; claims skip such runs
                conn.execute(SQL["unlease_job"], (job.run_id, job.step_key))
                return False
            if status is None or status[0] != "running":
                apply.delete_job(conn, job.run_id, job.step_key)
                return False
            apply.apply_ops(conn, job.run_id, ops, self._now())
            return True

        return await self._write(go)

    async def finish_queued_step(self, job: StepJob, owner: str, ops: Sequence[Op]) -> bool:
        def go(conn: sqlite3.Connection) -> bool:
            now = self._now()
            held = conn.execute(_JOB_HELD, (job.run_id, job.step_key, owner)).fetchone()
            if held is None:
                return False
            apply.delete_job(conn, job.run_id, job.step_key)
            apply.apply_ops(conn, job.run_id, ops, now)
            apply.wake(conn, job.run_id, now, now)
            return True

        return await self._write(go)

    async def repair_job(self, job: StepJob, owner: str, function: str) -> None:
        params = (function, job.run_id, job.step_key, owner)
        await self._write(lambda conn: conn.execute(SQL["repoint_job"], params))

    async def drop_job(self, job: StepJob, owner: str) -> None:
        params = (job.run_id, job.step_key, owner)
        await self._write(lambda conn: conn.execute(SQL["drop_held_job"], params))

    async def lost_jobs(self, owner: str, jobs: Sequence[tuple[str, str]]) -> set[tuple[str, str]]:
        if not jobs:
            return set()
        params = (json.dumps([list(job) for job in jobs]), owner)

        def go(conn: sqlite3.Connection) -> set[tuple[str, str]]:
            return {(r[0], r[1]) for r in conn.execute(SQL["lost_jobs"], params)}

        return await self._read(go)
