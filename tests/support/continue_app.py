"""The app of the continue-as-new crash test: loops that continue as new every few turns,
run by real worker processes that the test kills.

Each turn is a step that takes a few milliseconds, so a kill lands inside a step, between
steps or in the pass that ends a run and starts the next; the output is a function of
the start input alone, so the test knows what every chain must end with.
"""

from __future__ import annotations

import asyncio
from typing import Any

import plait

app = plait.App("continue-crash")

#: turns a run takes before it continues as new
TURNS = 3


@app.function
async def turn(data: dict[str, Any]) -> int:
    await asyncio.sleep(0.005 + (data["i"] * 7 % 11) / 1000)
    return int(data["i"]) * 2 + 1


@app.workflow
async def chain_loop(wf: plait.Workflow, state: dict[str, Any]) -> dict[str, Any]:
    i, total = state["i"], state["total"]
    for _ in range(TURNS):
        if i >= state["until"]:
            return {"i": i, "total": total, "chain": state["chain"]}
        total += await wf.do("turn", turn, {"i": i})
        i += 1
    await wf.continue_as_new({**state, "i": i, "total": total})


def expected(until: int, chain: int) -> dict[str, Any]:
    """What a chain started with ``{"i": 0, "total": 0, "until": until}`` ends with."""
    return {"i": until, "total": sum(i * 2 + 1 for i in range(until)), "chain": chain}
