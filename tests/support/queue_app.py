"""The plait app that the queue and schedule suites run in real worker processes.

Every body writes a ``start`` line to the ledger (``CRASH_LEDGER``) before it waits and
an ``end`` line after, with the wall-clock time and the process id: the ledger, not the
database, shows how many bodies really ran at once.
"""

from __future__ import annotations

import asyncio
import os
import time
from typing import Any

import plait
from support.ledger import append_line

app = plait.App("queues")
app.queue("pair", concurrency=2)
app.queue("keyed", per_key=1)
app.queue("rated", rate="10/s")
app.queue("single", concurrency=1)

#: how long an ordinary body holds its slot
HOLD = 0.05


def note(event: str, ctx: plait.StepContext, data: dict[str, Any]) -> None:
    path = os.environ.get("CRASH_LEDGER")
    if path:
        line = {
            "event": event,
            "run_id": ctx.run_id,
            "workflow": ctx.workflow,
            "attempt": ctx.attempt,
            "pid": os.getpid(),
            "t": time.time(),
            **data,
        }
        append_line(path, line)


@app.function
async def hold(data: dict[str, Any], ctx: plait.StepContext) -> dict[str, Any]:
    note("start", ctx, data)
    seconds = data.get("seconds", HOLD)
    if data.get("hang_first") and ctx.attempt == 1:
        seconds = 3600.0  # the worker running it is killed meanwhile
    await asyncio.sleep(seconds)
    note("end", ctx, data)
    return data


async def _flow(wf: plait.Workflow, data: dict[str, Any]) -> dict[str, Any]:
    return await wf.do("hold", hold, data)


for _queue in ("pair", "keyed", "rated", "single"):
    app.workflow(name=f"in_{_queue}", queue=_queue)(_flow)


@app.workflow
async def plain(wf: plait.Workflow, data: Any) -> dict[str, Any]:
    out = await wf.do("hold", hold, data or {})
    return {"out": out, "scheduled_at": wf.scheduled_at.isoformat() if wf.scheduled_at else None}
