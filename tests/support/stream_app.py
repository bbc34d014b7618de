"""The plait app of the process test of streams: a workflow that writes to its stream,
then runs a step that writes too and holds on its first attempt, for a SIGKILL to land
in; the worker that takes the run over replays the workflow's write and runs the step
again."""

from __future__ import annotations

import asyncio

import plait
from support.crash_app import record

app = plait.App("streams")


@app.function(retries=0)
async def hold(data: None, ctx: plait.StepContext) -> int:
    await ctx.stream("log").write(f"step attempt {ctx.attempt}")
    record("start", ctx)
    if ctx.attempt == 1:
        await asyncio.sleep(120)  # the worker is killed here
    return ctx.attempt


@app.workflow
async def writer(wf: plait.Workflow) -> int:
    await wf.stream("log").write("before the kill")
    attempt = await wf.do("hold", hold)
    await wf.stream("log").write("after the takeover")
    return attempt
