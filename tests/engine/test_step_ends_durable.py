"""A step's end rides with its pass's next commit; a sibling that runs on for long does
not hold it back: the ends of steps that finished are committed on their own soon after,
so a crash while the long one runs does not run their bodies again. Code workflows and
graphs, both stores."""

from __future__ import annotations

import asyncio
from typing import Any

import plait
from support.polling import eventually


async def _ended_in_store(engine: plait.Engine, run_id: str, keys: set[str]) -> bool:
    """Whether the store holds ``keys`` succeeded (what another process would see)."""
    steps = {s.key: s.status for s in await engine.get_steps(run_id)}
    return all(steps.get(key) == "succeeded" for key in keys)


def _app_with_a_long_step() -> tuple[plait.App, asyncio.Event]:
    """An app whose function ``long`` runs until the event returned is set."""
    app = plait.App()
    release = asyncio.Event()

    @app.function
    async def long(data: Any) -> str:
        await release.wait()
        return "long"

    return app, release


async def test_a_long_sibling_does_not_hold_back_the_ends_of_a_gather(engine_factory) -> None:
    app, release = _app_with_a_long_step()

    @app.workflow
    async def w(wf: plait.Workflow, data: None) -> list[Any]:
        quick = [wf.do(f"quick {n}", lambda n=n: n) for n in range(3)]
        return list(await asyncio.gather(wf.do("long", "long"), *quick))

    async with engine_factory(app) as engine:
        run_id = await engine.start("w")
        await eventually(
            lambda: _ended_in_store(engine, run_id, {"quick 0", "quick 1", "quick 2"}),
            timeout=10,
            what="the quick steps' ends committed while the long one runs",
        )
        steps = {s.key: s.status for s in await engine.get_steps(run_id)}
        assert steps["long"] == "running"
        release.set()
        assert (await engine.wait(run_id, timeout=20)).output == ["long", 0, 1, 2]


async def test_a_long_node_does_not_hold_back_the_ends_of_its_siblings(engine_factory) -> None:
    app, release = _app_with_a_long_step()

    @app.function
    def quick(data: Any) -> str:
        return "quick"

    app.graph(
        "fan",
        {
            "nodes": {
                "start": {"function": "quick", "next": ["slow", "fast"]},
                "slow": {"function": "long"},
                "fast": {"function": "quick"},
            },
            "output": {"slow": {"$ref": "slow"}, "fast": {"$ref": "fast"}},
        },
    )
    async with engine_factory(app) as engine:
        run_id = await engine.start("fan", {})
        await eventually(
            lambda: _ended_in_store(engine, run_id, {"fast"}),
            timeout=10,
            what="the fast node's end committed while the slow one runs",
        )
        release.set()
        run = await engine.wait(run_id, timeout=20)
        assert run.output == {"slow": "long", "fast": "quick"}
