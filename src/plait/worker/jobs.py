"""The step loop: claiming the jobs of job steps and running one attempt each.

A step of a function declared ``queued=True`` is a job step: it runs as a job, a row any
worker that has the function can claim. Each claimed job runs one attempt in a task of
its own (``runtime.job.run_job``), outside any pass of its run.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from typing import Any

from plait.errors import StepFunctionMismatchError
from plait.runtime import steps
from plait.runtime.job import run_job
from plait.store.ops import Op
from plait.store.rows import QueueLimits, StepJob, StepRow
from plait.worker.budgets import budget_holds
from plait.worker.state import WorkerState

log = logging.getLogger("plait.worker")


def limited_functions(limited: list[QueueLimits]) -> set[str]:
    """The functions whose jobs are claimed through limited queues."""
    return {fn for q in limited for fn in q.functions}


class Jobs(WorkerState):
    """Job steps: the step loop, and beginning and running one claimed job."""

    async def _step_loop(self) -> None:
        #: a limited queue came back with fewer jobs than asked: its functions are left
        #: out of the look for due work until something changes (a wake-up) or a poll passes,
        #: so a full queue is not claimed from in a loop
        full_until = 0.0
        # as in the pass loop: a claim that filled every free slot is followed by a claim,
        # not by a read of when work is due
        more = False
        while not self.stopping:
            if self.wake_steps.is_set():
                full_until = 0.0
            self.wake_steps.clear()
            # read each time: a function registered after start-up is worked too
            await self.fresh_brakes()
            functions = self.job_functions()
            if not functions:
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self.wake_steps.wait(), self.poll_interval)
                continue
            await self.refresh_limits()
            limited = [
                q for q in self.queue_limits() if q.functions and not self.queue_braked(q.name)
            ]
            if self.only_queues is not None:
                limited = [q for q in limited if q.name in self.only_queues]
            in_limited = limited_functions(limited)
            functions = [name for name in functions if name not in in_limited]
            try_limited = bool(limited) and time.monotonic() >= full_until
            free = max(0, self.concurrency - len(self.stepping))
            jobs: list[StepJob] = []
            looking = functions + (sorted(in_limited) if try_limited else [])
            if free and looking and (more or await self._due(self.wake_steps, looking)):
                since = time.monotonic()
                try:
                    if functions:
                        jobs = await self.store.claim_step_jobs(
                            self.owner, self.lease, free, functions, self.queues_of(functions)
                        )
                    if try_limited and len(jobs) < free:
                        wanted = free - len(jobs)
                        holds = await budget_holds(self.store, limited, self.clock.now())
                        got = await self.store.claim_queue_jobs(
                            self.owner, self.lease, wanted, limited, holds.held
                        )
                        if len(got) < wanted:
                            full_until = time.monotonic() + self.poll_interval
                        jobs += got
                except Exception:
                    log.exception("claiming step jobs failed; retrying")
                more = len(jobs) == free
                self.jobs_leased([(job.run_id, job.step_key) for job in jobs], since)
                for job in jobs:
                    key = (job.run_id, job.step_key)
                    task = self.spawn(self._run_job(job), name=f"plait-step-{job.step_key}")
                    self.stepping[key] = task

                    def forget(_task: asyncio.Task[Any], key: tuple[str, str] = key) -> None:
                        self.stepping.pop(key, None)
                        self.job_leases.pop(key, None)

                    task.add_done_callback(forget)
            elif free and not looking:
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self.wake_steps.wait(), self.poll_interval)
                continue
            if not (jobs and len(jobs) == free):
                await self._idle(self.wake_steps)

    async def _run_job(self, job: StepJob) -> None:
        async with self.slots:
            try:
                await self.run_job(job)
            except asyncio.CancelledError:
                raise
            except StepFunctionMismatchError:
                pass  # logged and dropped in run_job
            except Exception:
                log.exception(
                    "step %s of run %s: job failed; it will be redelivered",
                    job.step_key,
                    job.run_id,
                )

    async def begin_job(self, job: StepJob, owner: str | None = None) -> StepRow | None:
        """Begin the attempt a claimed job delivers, or say why not (None): the job is
        stale, the run is not running, the step gave up after too many interruptions
        (``runtime.steps.begin`` decides), or the job is no longer ``owner``'s."""
        owner = owner or self.owner
        step = job.step
        if step is not None and step.function != job.function:
            # Rejected without running anything: the job goes back under the function the
            # step was created with.
            await self.store.repair_job(job, owner, step.function or "")
            raise StepFunctionMismatchError(
                f"job for step {job.step_key!r} of run {job.run_id} names function "
                f"{job.function!r}, but the step was created with {step.function!r}"
            )
        if step is None or step.status not in ("scheduled", "running"):
            await self.store.drop_job(job, owner)  # its step no longer waits for it
            return None
        if self.telemetry is not None and step.status == "running":
            self.telemetry.taken_over(job.run_id, step)
        ops, go = steps.begin(step, owner, self.clock.now())
        if not go:
            await self.store.finish_queued_step(job, owner, ops)
            return None
        return step if await self.store.begin_queued_step(job, owner, ops) else None

    async def run_job(self, job: StepJob) -> None:
        """Execute one delivery of a job step. Duplicate deliveries are harmless: the
        attempt begins by a conditional write on the job, so only one of them runs it."""
        fdef = self.catalog.app.functions.get(job.function)
        try:
            step = await self.begin_job(job)
        except StepFunctionMismatchError as exc:
            log.error("rejected a step job: %s", exc)
            raise
        if step is None:
            return
        if fdef is None:  # pragma: no cover - claim filters on the functions we have
            return

        key = (job.run_id, job.step_key)

        async def finish(ops: list[Op]) -> bool:
            self.attempting.pop(key, None)  # its end is on its way: no cancel cuts it
            return await self.store.finish_queued_step(job, self.owner, ops)

        task = asyncio.current_task()
        if task is not None:
            self.attempting[key] = task
        try:
            finished = await run_job(self, step, fdef, finish, job.workflow, job.trace, job.queue)
        finally:
            if self.attempting.get(key) is task:
                del self.attempting[key]
        self.steps_run += 1
        if not finished:
            log.warning(
                "step %s of run %s: its job is no longer this worker's (the run ended, or the "
                "job's lease ran out and another worker took it); result dropped",
                job.step_key,
                job.run_id,
            )
            return
        self.notifier.publish_work()
        self.wake()
