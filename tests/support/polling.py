"""Waiting for something another task, thread or process does: poll it with a deadline.

A fixed sleep is either too short on a loaded machine or wasted time on an idle one;
``eventually`` returns as soon as the condition holds and fails, naming what it waited
for, only when the deadline has passed.
"""

from __future__ import annotations

import asyncio
import inspect
import time
from collections.abc import Callable
from typing import Any

import plait


async def eventually(
    check: Callable[[], Any],
    *,
    timeout: float = 10.0,
    what: str | Callable[[], str] = "condition",
) -> Any:
    """Call ``check`` (a plain or an async function) until it returns something truthy,
    and return that; after ``timeout`` seconds fail naming ``what``: a text, or a function
    that tells the state at the moment of failure.

    The first check is at once and the delay between checks grows from 5 ms to 100 ms, so
    a fast condition costs little and a slow one is not polled hard."""
    deadline = time.monotonic() + timeout
    delay = 0.005
    while True:
        value = check()
        if inspect.isawaitable(value):
            value = await value
        if value:
            return value
        if time.monotonic() > deadline:
            shown = what() if callable(what) else what
            raise AssertionError(f"timed out after {timeout}s waiting for {shown}")
        await asyncio.sleep(delay)
        delay = min(0.1, delay * 1.5)


async def run_gone(engine: plait.Engine, run_id: str) -> bool:
    """Whether the run is no longer stored (pruned), for ``eventually``."""
    try:
        await engine.get_run(run_id)
    except plait.RunNotFoundError:
        return True
    return False
