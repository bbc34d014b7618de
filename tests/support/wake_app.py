"""A worker process that polls almost never: ``python -m support.wake_app DATABASE``.

Its engine polls every 30 s (and, on SQLite, looks for other processes' commits every
30 s too), so a run it starts within a second was started because it was told. Each step
body returns the system's monotonic clock, which every process on the machine shares:
the test subtracts the moment it started the run or sent the event.
"""

from __future__ import annotations

import asyncio
import signal
import sys
import time

import plait

app = plait.App("wake")

#: the worker's poll: far longer than any deadline the test waits
POLL_SECONDS = 30.0


@app.function
async def mark(label: str) -> float:
    return time.monotonic()


@app.workflow
async def first_step(wf: plait.Workflow) -> float:
    return await wf.do("mark", mark, "first")


@app.workflow
async def after_event(wf: plait.Workflow) -> float:
    await wf.do("ready", mark, "ready")
    await wf.wait_for_event("go")
    return await wf.do("mark", mark, "after")


async def main(database: str) -> None:
    options = {"watch_interval": POLL_SECONDS} if database.startswith("sqlite") else {}
    async with plait.Engine(app, database, poll_interval=POLL_SECONDS, **options):
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        loop.add_signal_handler(signal.SIGTERM, stop.set)
        print("ready", flush=True)
        await stop.wait()


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1]))
