"""The plait app that the crash and multi-worker suites run in real worker processes.

Every step body writes a line to a side-effect ledger (the file named by ``CRASH_LEDGER``)
before it does anything and again when it is done. The ledger lives outside the database,
so it shows what really ran, even in a process that was killed before it could commit:
the tests compare it with what the database claims. Each line is one ``os.write`` on an
``O_APPEND`` descriptor followed by ``fsync``, so lines from concurrent processes never
interleave and a line that was written survives the SIGKILL that follows it.

Step durations are random-looking but derived from the run id and step key, so a replay
of a run takes the same time as the first try and two runs do not move in lockstep.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import os
import time
from typing import Any

import plait
from support.ledger import append_line

app = plait.App("crash")

#: back-off of the flaky steps: long enough that a random kill often lands inside it
RETRY_DELAY = 0.3
#: the durable sleep in the middle of ``crash_flow``
NAP_SECONDS = 0.3
#: the event ``crash_flow`` waits for and never gets
EVENT_TIMEOUT = 0.2


def record(event: str, ctx: plait.StepContext, **extra: Any) -> None:
    """Append one ledger line atomically and durably (no-op without ``CRASH_LEDGER``)."""
    path = os.environ.get("CRASH_LEDGER")
    if not path:
        return
    line = {
        "event": event,
        "run_id": ctx.run_id,
        "key": ctx.step_key,
        "invocation_id": ctx.invocation_id,
        "attempt": ctx.attempt,
        "pid": os.getpid(),
        "t": time.time(),
        **extra,
    }
    append_line(path, line)


def step_seconds(run_id: str, key: str) -> float:
    """10-80 ms, the same for every attempt of one step of one run."""
    digest = hashlib.sha256(f"{run_id}:{key}".encode()).digest()
    return 0.010 + (int.from_bytes(digest[:4], "big") % 71) / 1000.0


async def _body(data: dict[str, Any], ctx: plait.StepContext, *, fail_first: bool) -> dict:
    record("start", ctx)
    await asyncio.sleep(step_seconds(ctx.run_id, ctx.step_key))
    if fail_first and ctx.attempt == 1:
        record("end", ctx, ok=False)
        raise RuntimeError(f"flaky step {ctx.step_key} fails its first attempt")
    record("end", ctx, ok=True)
    return {"v": data["v"] + 1}


@app.function(retries=0)
async def work(data: dict[str, Any], ctx: plait.StepContext) -> dict:
    """An inline step: runs inside the orchestrator pass."""
    return await _body(data, ctx, fail_first=False)


@app.function(queued=True, retries=0)
async def queued_work(data: dict[str, Any], ctx: plait.StepContext) -> dict:
    """A queued step: runs as its own job on the step-worker queue."""
    return await _body(data, ctx, fail_first=False)


@app.function(retries=3, retry_delay=RETRY_DELAY)
async def flaky(data: dict[str, Any], ctx: plait.StepContext) -> dict:
    """Fails its first attempt, so every run goes through a durable retry back-off."""
    return await _body(data, ctx, fail_first=True)


@app.function(queued=True, retries=3, retry_delay=RETRY_DELAY)
async def flaky_queued(data: dict[str, Any], ctx: plait.StepContext) -> dict:
    """The queued twin of ``flaky``: its retry is owned by the workflow, not the worker."""
    return await _body(data, ctx, fail_first=True)


@app.function(retries=0)
def sync_work(data: dict[str, Any], ctx: plait.StepContext) -> dict:
    """A sync step (runs in a thread), so that path is crashed too."""
    record("start", ctx)
    time.sleep(step_seconds(ctx.run_id, ctx.step_key))
    record("end", ctx, ok=True)
    return {"v": data["v"] + 1}


@app.function(retries=0)
async def slow(data: dict[str, Any], ctx: plait.StepContext) -> dict:
    """A step that takes ``data["seconds"]``: long enough to signal a worker inside it."""
    record("start", ctx)
    await asyncio.sleep(data["seconds"])
    record("end", ctx, ok=True)
    return {"v": data["v"] + 1}


@app.function(queued=True, retries=0)
async def slow_queued(data: dict[str, Any], ctx: plait.StepContext) -> dict:
    """The queued twin of ``slow``."""
    return await slow(data, ctx)


@app.function(retries=0)
def slow_sync(data: dict[str, Any], ctx: plait.StepContext) -> dict:
    """The sync twin of ``slow``: its body runs in a thread, which cannot be cancelled."""
    record("start", ctx)
    time.sleep(data["seconds"])
    record("end", ctx, ok=True)
    return {"v": data["v"] + 1}


SLOW_STEPS = {"inline": "slow", "queued": "slow_queued", "sync": "slow_sync"}


@app.workflow
async def child_flow(wf: plait.Workflow, data: dict[str, Any]) -> dict:
    """A small child run: one inline and one queued step."""
    a = await wf.do("c1", work, {"v": data["v"]})
    b = await wf.do("c2", queued_work, {"v": a["v"]})
    return {"v": b["v"]}


@app.workflow
async def crash_flow(wf: plait.Workflow, data: dict[str, Any]) -> dict:
    """Every kind of pause and step the crash suite wants kills to land in."""
    v = data["n"]
    a = await wf.do("a", work, {"v": v})
    q = await wf.do("q", queued_work, {"v": a["v"]})
    f = await wf.do("flaky", flaky, {"v": q["v"]})
    await wf.sleep("nap", NAP_SECONDS)
    # nobody sends it: the event timeout is one more durable timer for kills to land in
    with contextlib.suppress(plait.EventTimeout):
        await wf.wait_for_event("poke", timeout=EVENT_TIMEOUT)
    g1, g2 = await asyncio.gather(
        wf.do("g1", work, {"v": f["v"]}),
        wf.do("g2", queued_work, {"v": f["v"]}),
    )
    fq = await wf.do("flaky_q", flaky_queued, {"v": g1["v"] + g2["v"]})
    child = await wf.do("child", "child_flow", {"v": fq["v"]})
    s = await wf.do("s", sync_work, {"v": child["v"]})
    total = await wf.do("total", lambda: s["v"] * 10)
    return {"n": v, "total": total}


def crash_flow_output(n: int) -> dict:
    """What ``crash_flow`` returns for input ``{"n": n}`` (each step adds one)."""
    f = n + 3  # a, q, flaky
    fq = (f + 1) * 2 + 1  # g1 + g2, then flaky_q
    s = fq + 2 + 1  # child (c1, c2), then s
    return {"n": n, "total": s * 10}


#: the ledger keys ``crash_flow`` writes in its own run and in its child run
CRASH_FLOW_KEYS = ("a", "q", "flaky", "g1", "g2", "flaky_q", "s")
CHILD_FLOW_KEYS = ("c1", "c2")
#: keys whose first attempt fails on purpose (one extra "end" with ok=false is expected)
FLAKY_KEYS = ("flaky", "flaky_q")


@app.workflow
async def mixed_flow(wf: plait.Workflow, data: dict[str, Any]) -> dict:
    """Inline, queued, parallel and retried steps: a short run for the two-worker test."""
    v = data["n"]
    a = await wf.do("a", work, {"v": v})
    b = await wf.do("b", queued_work, {"v": a["v"]})
    c, d = await asyncio.gather(
        wf.do("c", work, {"v": b["v"]}),
        wf.do("d", queued_work, {"v": b["v"]}),
    )
    e = await wf.do("e", queued_work, {"v": c["v"] + d["v"]})
    f = await wf.do("flaky_q", flaky_queued, {"v": e["v"]})
    g = await wf.do("flaky", flaky, {"v": f["v"]})
    return {"n": v, "v": g["v"]}


def mixed_flow_output(n: int) -> dict:
    """What ``mixed_flow`` returns for input ``{"n": n}``."""
    return {"n": n, "v": (n + 3) * 2 + 3}


MIXED_FLOW_KEYS = ("a", "b", "c", "d", "e", "flaky_q", "flaky")
MIXED_QUEUED_KEYS = ("b", "d", "e", "flaky_q")


@app.workflow
async def term_flow(wf: plait.Workflow, data: dict[str, Any]) -> dict:
    """A long step, then a sleep, then a short step: targets for SIGTERM."""
    body = SLOW_STEPS[data.get("kind", "inline")]
    a = await wf.do("long", body, {"v": 0, "seconds": data["step_seconds"]})
    await wf.sleep("rest", data["sleep_seconds"])
    b = await wf.do("after", work, {"v": a["v"]})
    return {"v": b["v"]}


TERM_FLOW_KEYS = ("long", "after")


@app.function(retries=0)
async def blocks_loop(data: dict[str, Any], ctx: plait.StepContext) -> int:
    """Blocks the worker's event loop on purpose, as a blocking client inside async code
    would: no coroutine, lease renewal included, runs until it returns."""
    record("start", ctx)
    time.sleep(data["seconds"])  # noqa: ASYNC251 - the point of this step
    record("end", ctx, ok=True)
    return ctx.attempt


@app.workflow
async def blocking_flow(wf: plait.Workflow, data: dict[str, Any]) -> int:
    return await wf.do("block", blocks_loop, data)
