"""A pass frees what it made as soon as it ends: no reference cycle is left to the garbage
collector. A cycle through a pass keeps its replay, its steps and their frames alive until
a collection, and a busy worker then pays full collections that grow with every pass
left to them (tens of milliseconds each, with the event loop stalled)."""

from __future__ import annotations

import asyncio
import gc
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

import plait
from plait.errors import StepError

_PLAIT = str(Path(plait.__file__).parent)


@contextmanager
def cyclic_garbage() -> Iterator[list[str]]:
    """What plait left in reference cycles inside the block: its objects and its frames
    (other libraries' cycles are theirs)."""
    found: list[str] = []
    gc.collect()
    gc.disable()
    gc.set_debug(gc.DEBUG_SAVEALL)
    try:
        yield found
        gc.collect()
        for obj in gc.garbage:
            module = getattr(type(obj), "__module__", "") or ""
            if module.startswith("plait"):
                found.append(type(obj).__qualname__)
            elif type(obj).__name__ == "frame" and obj.f_code.co_filename.startswith(_PLAIT):
                found.append(f"frame of {obj.f_code.co_name}")
    finally:
        gc.set_debug(0)
        gc.garbage.clear()
        gc.enable()


def _app() -> plait.App:
    app = plait.App()

    @app.function
    async def ok(x: int) -> int:
        return x

    @app.function(retries=0)
    async def bad(x: int) -> int:
        raise ValueError(f"bad {x}")

    @app.workflow
    async def straight(wf: plait.Workflow) -> int:
        total = 0
        for i in range(3):
            total += await wf.do("s", ok, i)
        return total

    @app.workflow
    async def gathered(wf: plait.Workflow) -> list[Any]:
        await asyncio.gather(*(wf.do("g", ok, i) for i in range(3)))
        got = await asyncio.gather(wf.do("h", ok, 1), wf.do("b", bad, 1), return_exceptions=True)
        return [type(x).__name__ if isinstance(x, BaseException) else x for x in got]

    @app.workflow
    async def grouped(wf: plait.Workflow) -> int:
        async with asyncio.TaskGroup() as tg:
            tasks = [tg.create_task(wf.do("t", ok, i)) for i in range(3)]
        return sum(t.result() for t in tasks)

    @app.workflow
    async def failing(wf: plait.Workflow) -> None:
        try:  # noqa: SIM105  (the idiom under test)
            await wf.do("caught", bad, 1)
        except StepError:
            pass
        try:
            await wf.do("uncaught", bad, 2)
        finally:
            await wf.do("cleanup", ok, 3)

    @app.workflow
    async def paused(wf: plait.Workflow) -> int:
        try:
            await wf.do("before", ok, 1)
            await wf.sleep("nap", 0.05)  # the first pass unwinds here, a second one ends
        finally:
            await wf.do("after", ok, 2)
        return 1

    app.graph(
        "graphed",
        {
            "nodes": {
                "a": {"function": "ok", "input": 1, "next": "b"},
                "b": {"function": "bad", "input": 2, "on_error": "c"},
                "c": {"function": "ok", "input": 3},
            }
        },
    )
    return app


@pytest.mark.parametrize(
    ("workflow", "status"),
    [
        ("straight", "completed"),
        ("gathered", "completed"),
        ("grouped", "completed"),
        ("failing", "failed"),
        ("paused", "completed"),
        ("graphed", "failed"),
    ],
)
@pytest.mark.parametrize("inline", [True, False], ids=["inline", "claimed"])
async def test_a_pass_leaves_no_cycle_behind(
    engine_factory, workflow: str, status: str, inline: bool
) -> None:
    async with engine_factory(_app()) as engine:
        # the first run pays for what is made once (codecs, statements, caches)
        first = await engine.start(workflow, inline=inline)
        assert (await engine.wait(first, timeout=10)).status == status
        with cyclic_garbage() as left:
            for _ in range(3):
                run_id = await engine.start(workflow, inline=inline)
                assert (await engine.wait(run_id, timeout=10)).status == status
    assert left == []
