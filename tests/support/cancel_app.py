"""The plait app of the step cancel process test: a job step that a durable sleep
beats, run by a ``plait worker`` process. Its body writes ledger lines (the file
named by ``CRASH_LEDGER``) when it starts, when it is cancelled and if it ever ends."""

from __future__ import annotations

import asyncio
import os
import time

import plait
from support.ledger import append_line

app = plait.App("cancel")

#: how long the deadline of ``race`` sleeps: time enough for a worker process that
#: polls the job table (SQLite has no notifications across processes) to start the step
DEADLINE = 2.0


def _line(event: str, ctx: plait.StepContext) -> None:
    path = os.environ.get("CRASH_LEDGER")
    if path:
        append_line(
            path,
            {"event": event, "run_id": ctx.run_id, "pid": os.getpid(), "t": time.time()},
        )


@app.function(queued=True)
async def slow(data: object, ctx: plait.StepContext) -> str:
    _line("started", ctx)
    try:
        await asyncio.sleep(60)
    except asyncio.CancelledError:
        _line("cancelled", ctx)
        raise
    _line("finished", ctx)
    return "slow"


@app.workflow
async def race(wf: plait.Workflow) -> str:
    step = asyncio.create_task(wf.do("slow", "slow"))
    deadline = asyncio.create_task(wf.sleep("deadline", DEADLINE))
    done, pending = await asyncio.wait([step, deadline], return_when=asyncio.FIRST_COMPLETED)
    for task in pending:
        task.cancel()
    return "step" if step in done else "deadline"
