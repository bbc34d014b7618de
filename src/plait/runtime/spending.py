"""Recording what a step attempt reported spent (``ctx.spend``), for the queues'
budgets: the same inline and as a job."""

from __future__ import annotations

import logging

from plait.context import StepContext
from plait.runtime.host import Host
from plait.store.rows import Spend

log = logging.getLogger("plait.worker")


async def record_spend(host: Host, ctx: StepContext, queue: str | None) -> None:
    """Record what the attempt reported spent (``ctx.spend``) against ``queue`` (None:
    its run's queue) before its end is committed, so the admission after the end counts
    it. A failed write is logged, not raised: the attempt's own outcome is what its step
    records."""
    if not ctx._spent:  # pyright: ignore[reportPrivateUsage]
        return
    spend = [
        Spend(queue, unit, amount, ctx.run_id, ctx.step_key, ctx.attempt)
        for unit, amount in sorted(ctx._spent.items())  # pyright: ignore[reportPrivateUsage]
    ]
    try:
        await host.record_spend(spend)
    except Exception:
        log.exception("recording the spend of run %s step %r failed", ctx.run_id, ctx.step_key)
