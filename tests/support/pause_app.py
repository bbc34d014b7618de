"""The plait app of the pause tests: worker processes frozen with SIGSTOP past their
lease and woken with SIGCONT after another worker took their work over.

Every step body appends a ``start`` line to the side-effect ledger (``CRASH_LEDGER``)
before anything else, with the process id, run, step, attempt and both clocks, so the
tests can hold each start against when its worker was frozen and woken. Results differ
on every execution (a fresh token), so a late write of a stale execution would show in
the run's output.

``PAUSE_BEFORE_BODY=<step name>`` (with the file ``PAUSE_MARKER`` present) makes the
process freeze itself once, at the worst moment: right after the commit that began an
attempt of that step, before its body starts. That commit is the last write the lease
fences; what happens after it is only guarded by the worker's own look at its lease.
"""

from __future__ import annotations

import asyncio
import os
import signal
import time
import uuid
from typing import Any

import plait
from plait.runtime.ledger import Ledger
from plait.store.ops import StartAttempt
from support.ledger import append_line

app = plait.App("pause")


def record(event: str, ctx: plait.StepContext, **extra: Any) -> None:
    """One ledger line for this process (no-op without ``CRASH_LEDGER``)."""
    path = os.environ.get("CRASH_LEDGER")
    if not path:
        return
    append_line(
        path,
        {
            "event": event,
            "run_id": ctx.run_id,
            "key": ctx.step_key,
            "attempt": ctx.attempt,
            "pid": os.getpid(),
            "t": time.time(),
            "mono": time.monotonic(),
            **extra,
        },
    )


async def _body(data: Any, ctx: plait.StepContext, seconds: float) -> dict[str, Any]:
    record("start", ctx)
    await asyncio.sleep(seconds)
    token = uuid.uuid4().hex  # differs on every execution: a late write would show
    record("end", ctx, token=token)
    return {"token": token, "pid": os.getpid(), "attempt": ctx.attempt}


@app.function(retries=0)
async def quick(data: Any, ctx: plait.StepContext) -> dict[str, Any]:
    """An inline step of a few milliseconds."""
    return await _body(data, ctx, 0.005)


@app.function(retries=0)
async def slow(data: Any, ctx: plait.StepContext) -> dict[str, Any]:
    """An inline step long enough for a pause to land in it now and then."""
    return await _body(data, ctx, 0.15)


@app.function(queued=True, retries=0)
async def queued(data: Any, ctx: plait.StepContext) -> dict[str, Any]:
    """A job step."""
    return await _body(data, ctx, 0.05)


@app.function(retries=2, retry_delay=0.2)
async def flaky(data: Any, ctx: plait.StepContext) -> dict[str, Any]:
    """Fails its first attempt: its retry starts after a back-off."""
    result = await _body(data, ctx, 0.01)
    if ctx.attempt == 1:
        raise RuntimeError("the first attempt of a flaky step fails")
    return result


@app.workflow
async def pair(wf: plait.Workflow, data: Any) -> dict[str, Any]:
    """Two inline steps: the pause lands between them."""
    first = await wf.do("first", "quick", data)
    second = await wf.do("second", "quick", data)
    return {"first": first, "second": second}


@app.workflow
async def pair_queued(wf: plait.Workflow, data: Any) -> dict[str, Any]:
    """An inline step, then a job step: the pause lands before the job's body."""
    first = await wf.do("first", "quick", data)
    second = await wf.do("second", "queued", data)
    return {"first": first, "second": second}


#: the steps of ``soak_flow`` in order, each (key, function)
SOAK_STEPS = (("a", "quick"), ("b", "slow"), ("c", "queued"), ("d", "flaky"), ("e", "quick"))


app.queue("soak", concurrency=3)


@app.workflow(queue="soak")
async def soak_flow(wf: plait.Workflow, data: Any) -> dict[str, Any]:
    """The soak's run: inline, slow, job and retried steps and a durable sleep, through a
    queue of three at a time; its output is every step's result as recorded."""
    out: dict[str, Any] = {}
    for key, function in SOAK_STEPS[:3]:
        out[key] = await wf.do(key, function, data)
    await wf.sleep("nap", 0.1)
    for key, function in SOAK_STEPS[3:]:
        out[key] = await wf.do(key, function, data)
    return out


@app.workflow
async def ticked(wf: plait.Workflow, data: Any) -> dict[str, Any]:
    """What the per-second schedule starts."""
    return {"a": await wf.do("a", "quick", data)}


if os.environ.get("PAUSE_SCHEDULE"):
    # only where the soak asks for it: each worker fires it (once per tick between them)
    app.schedule("every-second", workflow=ticked, every="1s", overlap="allow")


def _freeze_before_body() -> None:
    """Freeze this process once, right after the commit that began an attempt of the step
    named by ``PAUSE_BEFORE_BODY`` (inline: the pass's flush; a job: its begin)."""
    name = os.environ.get("PAUSE_BEFORE_BODY")
    marker = os.environ.get("PAUSE_MARKER")
    if not name or not marker:
        return

    def freeze(run_id: str, key: str) -> None:
        try:
            os.unlink(marker)  # once only
        except FileNotFoundError:
            return
        path = os.environ.get("CRASH_LEDGER")
        if path:
            append_line(
                path,
                {
                    "event": "freeze",
                    "run_id": run_id,
                    "key": key,
                    "pid": os.getpid(),
                    "t": time.time(),
                    "mono": time.monotonic(),
                },
            )
        os.kill(os.getpid(), signal.SIGSTOP)

    real_flush = Ledger.flush

    async def flush(self: Ledger) -> None:
        begun = [
            op.step.key
            for op in self.ops
            if isinstance(op, StartAttempt) and op.step.name == name and not op.step.queued
        ]
        await real_flush(self)
        for key in begun:
            freeze(self.run.id, key)

    Ledger.flush = flush  # type: ignore[method-assign]

    from plait.worker.worker import Worker

    real_begin = Worker.begin_job

    async def begin_job(self: Worker, job: Any, owner: str | None = None) -> Any:
        step = await real_begin(self, job, owner)
        if step is not None and step.name == name:
            freeze(job.run_id, job.step_key)
        return step

    Worker.begin_job = begin_job  # type: ignore[method-assign]


_freeze_before_body()
