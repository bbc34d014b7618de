"""The plait app of the process test of ``wf.send_event``: senders that send numbered
events to their receivers, with step bodies and durable sleeps between the sends for a
SIGKILL to land in. A receiver counts what it got, so a send made twice (or lost) shows
in its output.

Each step body writes a ledger line when it starts (``crash_app.record``), so the test
can wait until a restarted worker is at work before it kills it again.
"""

from __future__ import annotations

import asyncio
from typing import Any

import plait
from support.crash_app import record, step_seconds

app = plait.App("send")


@app.function(retries=0)
async def pause(i: int, ctx: plait.StepContext) -> int:
    record("start", ctx)
    await asyncio.sleep(step_seconds(ctx.run_id, ctx.step_key))
    record("end", ctx, ok=True)
    return i


@app.workflow
async def sender(wf: plait.Workflow, data: dict[str, Any]) -> int:
    """Sends ``item`` 0 .. count-1 to ``data["to"]``, then ``done``."""
    count = data["count"]
    for i in range(count):
        await wf.send_event(data["to"], "item", i)
        await wf.do(f"pause{i}", pause, i)
        if i % 8 == 7:
            await wf.sleep(f"nap{i}", 0.05)
    await wf.send_event(data["to"], "item", "done")
    return count


@app.workflow
async def receiver(wf: plait.Workflow) -> dict[str, int]:
    """How many times each ``item`` came, up to ``done``; then waits for ``end`` (so that a
    late duplicate would still find the run live, and be held where the test sees it)."""
    counts: dict[str, int] = {}
    while (item := await wf.wait_for_event("item")) != "done":
        counts[str(item)] = counts.get(str(item), 0) + 1
    await wf.wait_for_event("end")
    return counts
