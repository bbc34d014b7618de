"""One delivery of a job step (a step the step worker runs from the job table): its
body runs once, outside any pass.

The step worker claims a job, the store begins the attempt, and this module runs the body
and decides, through the same state machine as an inline attempt (``runtime.steps``),
what its end writes. A graph node's branch choice and state writes ride with it, as
they do inline.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable

from plait import serde
from plait.app import FunctionDef
from plait.cancel_guard import uncancelled
from plait.context import StepContext
from plait.observe import NO_REPORT
from plait.queues import DEFAULT_QUEUE
from plait.runtime import steps
from plait.runtime.attempt import finished_on_stop, run_attempt
from plait.runtime.host import Host
from plait.runtime.spending import record_spend
from plait.store.ops import Batch, Op
from plait.store.rows import StepRow


async def run_job(
    host: Host,
    step: StepRow,
    fdef: FunctionDef,
    finish: Callable[[list[Op]], Awaitable[bool]],
    workflow: str = "",
    trace: str | None = None,
    queue: str | None = None,
) -> bool:
    """Run the attempt the store began on ``step`` and hand its end to ``finish`` (which
    commits it if the job is still ours). Cut short by a shutdown, the attempt ends
    ``interrupted`` and the step goes back on the queue; by a cancel of its run, it ends
    ``cancelled``."""
    ctx = StepContext(
        run_id=step.run_id,
        step_key=step.key,
        invocation_id=step.invocation_id,
        attempt=step.attempts,
        workflow=workflow,
        _streams=host.streams,
    )
    hook = None
    if step.kind in steps.GRAPH_STEP_KINDS:
        # loaded with the first graph step (see plait.graph)
        from plait.runtime.graph_replay import job_node_hook

        hook = await job_node_hook(host, step)
    if hook is not None:
        hook.prepare(step, ctx)
    telemetry = host.telemetry
    with (
        NO_REPORT if telemetry is None else telemetry.attempting(step.run_id, workflow, trace, step)
    ) as report:
        # reported and decoded before the lease's last look, as a pass's attempt is
        # (``Driver.attempt``): a freeze between that look and the body starts the body late
        data = serde.loads(step.input)
        if not await host.keep_lease(step.run_id, step.key):
            return False  # the job's lease ran out and another worker has it: its body is theirs
        if host.braked(workflow, queue) or host.queue_braked(fdef.queue or DEFAULT_QUEUE):
            # paused since the job was claimed (the brakes were read again if this
            # process was held up meanwhile): no body starts, the job goes back on the
            # table, and the claims leave it there until the resume
            return await finish(steps.interrupt(step, host.clock.now(), cancelled=False))
        try:
            outcome = await run_attempt(fdef, data, ctx, step.timeout, host.limits)
        except asyncio.CancelledError as exc:
            # what the attempt spent before it was stopped was spent all the same
            await uncancelled(record_spend(host, ctx, fdef.queue))
            cancelled = host.cancelling(step.run_id)
            finished = finished_on_stop(exc, cancelled)
            if finished is not None:
                report.outcome = finished
                ops = steps.end_attempt(step, finished, host.clock.now())  # it did run to its end
            else:
                ops = steps.interrupt(step, host.clock.now(), cancelled=cancelled)
            with contextlib.suppress(Exception):
                if cancelled:
                    # the cancel dropped the job with the run; the attempt's end is still
                    # recorded, and nothing else can run this step any more
                    guarded = [steps.while_running(step), *ops]
                    await uncancelled(host.commit(Batch(step.run_id, guarded)))
                else:
                    await uncancelled(finish(ops))
            raise
        if hook is not None:
            outcome = hook.finish(step, ctx, outcome)
        report.outcome = outcome
        await record_spend(host, ctx, fdef.queue)
        written = hook.ops if hook is not None else []
        return await finish([*written, *steps.end_attempt(step, outcome, host.clock.now())])
