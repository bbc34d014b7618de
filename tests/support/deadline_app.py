"""The plait app of the deadline process test: a workflow with a 2 s deadline whose step
would run for an hour. The step body writes a ``start`` line to the ledger
(``CRASH_LEDGER``) when it begins and a ``cancelled`` line when it is cancelled, with the
process id: the witness of where it ran and how it ended."""

from __future__ import annotations

import asyncio
import os
import time
from typing import Any

import plait
from support.ledger import append_line

app = plait.App("deadlines")

#: the deadline of ``bounded``, in seconds
DEADLINE = 2.0


def note(event: str, ctx: plait.StepContext) -> None:
    path = os.environ.get("CRASH_LEDGER")
    if path:
        line = {
            "event": event,
            "run_id": ctx.run_id,
            "attempt": ctx.attempt,
            "pid": os.getpid(),
            "t": time.time(),
        }
        append_line(path, line)


@app.function(retries=0)
async def hour_long(data: Any, ctx: plait.StepContext) -> str:
    note("start", ctx)
    try:
        await asyncio.sleep(3600)
    except asyncio.CancelledError:
        note("cancelled", ctx)
        raise
    return "done"


@app.workflow(timeout=DEADLINE)
async def bounded(wf: plait.Workflow) -> str:
    return await wf.do("hour", hour_long)
