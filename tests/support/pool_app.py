"""Two plait apps that share one database, run by ``plait worker`` processes in the
brake, worker-scope and registry suites.

``app_a`` and ``app_b`` register different workflows; a worker of one must never claim a
run of the other's. Every step body writes a ``start`` line to the ledger
(``CRASH_LEDGER``) before it works, with the wall-clock time and the process id: the
ledger, not the database, says which process ran what and when.
"""

from __future__ import annotations

import asyncio
import os
import time
from typing import Any

import plait
from support.ledger import append_line

app_a = plait.App("pool-a")
app_a.queue("gpu", concurrency=8)
app_b = plait.App("pool-b")

#: how long each step of ``steps`` works
STEP_SECONDS = 0.05


def note(event: str, ctx: plait.StepContext, data: dict[str, Any]) -> None:
    path = os.environ.get("CRASH_LEDGER")
    if path:
        line = {
            "event": event,
            "run_id": ctx.run_id,
            "workflow": ctx.workflow,
            "step": ctx.step_key,
            "attempt": ctx.attempt,
            "pid": os.getpid(),
            "t": time.time(),
            **data,
        }
        append_line(path, line)


@app_a.function(name="work_a")
async def work_a(data: dict[str, Any], ctx: plait.StepContext) -> int:
    note("start", ctx, {})
    await asyncio.sleep(data.get("seconds") or STEP_SECONDS)
    return int(data["i"])


@app_a.workflow(name="steps")
async def steps(wf: plait.Workflow, data: dict[str, Any]) -> int:
    """``data["n"]`` steps one after another: a brake stops it between two of them."""
    total = 0
    for i in range(int(data["n"])):
        total += await wf.do(f"s{i}", work_a, {"i": i, "seconds": data.get("seconds")})
    return total


@app_a.workflow(name="flow_a")
async def flow_a(wf: plait.Workflow, data: dict[str, Any]) -> int:
    return await wf.do("one", work_a, {"i": data.get("i", 1)})


@app_a.workflow(name="flow_gpu", queue="gpu")
async def flow_gpu(wf: plait.Workflow, data: dict[str, Any]) -> int:
    return await wf.do("one", work_a, {"i": data.get("i", 1)})


@app_b.function(name="work_b")
async def work_b(data: dict[str, Any], ctx: plait.StepContext) -> int:
    note("start", ctx, {})
    await asyncio.sleep(STEP_SECONDS)
    return int(data["i"])


@app_b.workflow(name="flow_b")
async def flow_b(wf: plait.Workflow, data: dict[str, Any]) -> int:
    return await wf.do("one", work_b, {"i": data.get("i", 1)})
