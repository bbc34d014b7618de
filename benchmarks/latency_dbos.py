"""DBOS Transact's side of ``latency.py``, run with the interpreter of
``benchmarks/.venv-dbos``: a worker process that serves DBOS's queue, and a driver that
enqueues to it and sends to its workflows with ``DBOSClient`` from another process.

Roles (the JSON parameter's ``role``):

* ``worker``: launch DBOS on the database with the queue declared, say ``BENCH-READY``,
  serve until stdin closes.
* ``drive``: with a worker running, take ``samples`` of each latency (the step body
  returns the machine's monotonic clock, which both processes share), optionally after
  enqueueing ``load`` long-running workflows; print ``BENCH-RESULT``.

The workflows mirror plait's in ``latency.py`` one for one.
"""

from __future__ import annotations

import asyncio
import os
import time
import uuid
from typing import Any

import _common
from dbos import DBOS, DBOSClient, DBOSConfig, Queue

QUEUE = "latency"
#: the worker's queue: DBOS's own polling interval (1 s) unless the driver asks otherwise
queue: Queue | None = None
#: the runs a worker takes at once: the load and every sample, so no sample waits a slot
WORKER_CONCURRENCY = 4000


@DBOS.step()
async def mark(label: str) -> float:
    return time.monotonic()


@DBOS.step()
async def tick(i: int, seconds: float) -> int:
    await asyncio.sleep(seconds)
    return i


@DBOS.workflow()
async def first_step() -> float:
    return await mark("first")


@DBOS.workflow()
async def after_event() -> float:
    await mark("ready")
    await DBOS.set_event_async("ready", True)
    await DBOS.recv_async("go", timeout_seconds=300)
    return await mark("after")


@DBOS.workflow()
async def busy(steps: int, seconds: float) -> int:
    for i in range(steps):
        await tick(i, seconds)
    return steps


async def _launch(p: dict[str, Any]) -> None:
    global queue
    url = p["db"]
    if url.startswith("sqlite:"):
        _common.prepare_sqlite_wal(url.split("sqlite:///", 1)[1])
    config: DBOSConfig = {"name": "latency", "system_database_url": url, "log_level": "WARNING"}
    DBOS(config=config)
    DBOS.launch()
    queue = await DBOS.register_queue_async(
        QUEUE,
        worker_concurrency=WORKER_CONCURRENCY,
        polling_interval_sec=float(p.get("poll", 1.0)),
    )


async def worker(p: dict[str, Any]) -> dict[str, Any]:
    await _launch(p)
    _common.ready({"pid": os.getpid()})
    await asyncio.to_thread(_common.wait_for_stdin_line)
    return {}


async def drive(p: dict[str, Any]) -> dict[str, Any]:
    client = DBOSClient(system_database_url=p["db"])
    samples, load = int(p["samples"]), int(p["load"])

    def options(workflow: str) -> Any:
        return {"workflow_name": workflow, "queue_name": QUEUE, "workflow_id": uuid.uuid4().hex}

    if load:
        gate = asyncio.Semaphore(16)  # DBOS's pool: a few enqueues in flight at once

        async def one() -> None:
            async with gate:
                await client.enqueue_async(
                    options("busy"), int(p["load_steps"]), float(p["load_step_seconds"])
                )

        await asyncio.gather(*(one() for _ in range(load)))
    # one of each first, unmeasured: the worker's first dequeue loads what it needs
    await (await client.enqueue_async(options("first_step"))).get_result()
    budget = float(p["budget"])
    start: list[float] = []
    event: list[float] = []
    ends = time.monotonic() + budget
    for _ in range(samples):
        if start and time.monotonic() > ends:
            break
        began = time.monotonic()
        handle = await client.enqueue_async(options("first_step"))
        start.append((await handle.get_result() - began) * 1000)
    ends = time.monotonic() + budget
    for _ in range(samples):
        if event and time.monotonic() > ends:
            break
        handle = await client.enqueue_async(options("after_event"))
        await client.get_event_async(handle.workflow_id, "ready", timeout_seconds=300)
        began = time.monotonic()
        await client.send_async(handle.workflow_id, "go", "go")
        event.append((await handle.get_result() - began) * 1000)
    live = 0
    if load:
        found = await client.list_workflows_async(status=["PENDING", "ENQUEUED"])
        live = sum(1 for w in found if w.name.endswith("busy"))
    client.destroy()
    return {"start_ms": start, "event_ms": event, "load_live": live}


def main() -> None:
    p = _common.params()
    result = asyncio.run(worker(p) if p["role"] == "worker" else drive(p))
    result["pid"] = os.getpid()
    _common.emit(result)
    os._exit(0)


if __name__ == "__main__":
    main()
