"""Runs started on v1 of a workflow and checked against v2 (``engine.check``, ``plait
check``): one ``Case`` per kind of change, each a workflow of its own in one app, so a
test starts one run of each and knows what the check must say of it. A new kind of change
is one more ``Case``."""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Awaitable, Callable
from typing import Any

import plait
from support.counter import Counter
from support.polling import eventually

WorkflowFn = Callable[[plait.Workflow, Counter], Awaitable[Any]]


@dataclasses.dataclass(frozen=True)
class Case:
    """A workflow as v1 runs it and as v2 changes it: what the check says of a run that
    v1 left waiting. ``step`` None: the run is fine on v2."""

    name: str
    v1: WorkflowFn
    v2: WorkflowFn
    #: the key of the first diverging step, its displayed name, and words of the reason
    step: str | None = None
    step_name: str | None = None
    reason: tuple[str, ...] = ()


def _f(counter: Counter, name: str) -> Callable[[Any], str]:
    def body(data: Any) -> str:
        counter.hit(name, data)
        return name

    return body


async def unchanged_v1(wf: plait.Workflow, c: Counter) -> Any:
    a, b = await asyncio.gather(wf.do("left", _f(c, "left")), wf.do("right", _f(c, "right")))
    await wf.sleep("nap", 0)
    stamp = wf.now()
    paid = await wf.wait_for_event("paid")
    return [a, b, stamp.isoformat(), paid, await wf.do("ship", _f(c, "ship"))]


async def changed_input_v1(wf: plait.Workflow, c: Counter) -> Any:
    await wf.do("reserve", _f(c, "reserve"), {"qty": 1})
    return await wf.wait_for_event("paid")


async def changed_input_v2(wf: plait.Workflow, c: Counter) -> Any:
    await wf.do("reserve", _f(c, "reserve"), {"qty": 2})
    return await wf.wait_for_event("paid")


async def retyped_input_v1(wf: plait.Workflow, c: Counter) -> Any:
    await wf.do("reserve", _f(c, "reserve"), {"gift": True, "qty": 1})
    return await wf.wait_for_event("paid")


async def retyped_input_v2(wf: plait.Workflow, c: Counter) -> Any:
    # equal in Python (True == 1 == 1.0), another value in JSON
    await wf.do("reserve", _f(c, "reserve"), {"qty": 1.0, "gift": 1})
    return await wf.wait_for_event("paid")


async def reordered_input_v2(wf: plait.Workflow, c: Counter) -> Any:
    await wf.do("reserve", _f(c, "reserve"), {"qty": 1, "gift": True})  # the same object
    return await wf.wait_for_event("paid")


async def inserted_step_v1(wf: plait.Workflow, c: Counter) -> Any:
    await wf.do("reserve", _f(c, "reserve"))
    await wf.do("pack", _f(c, "pack"))
    return await wf.wait_for_event("paid")


async def inserted_step_v2(wf: plait.Workflow, c: Counter) -> Any:
    await wf.do("reserve", _f(c, "reserve"))
    await wf.do("fee", _f(c, "fee"))
    await wf.do("pack", _f(c, "pack"))
    return await wf.wait_for_event("paid")


async def before_event_v1(wf: plait.Workflow, c: Counter) -> Any:
    await wf.do("reserve", _f(c, "reserve"))
    return await wf.wait_for_event("paid")


async def before_event_v2(wf: plait.Workflow, c: Counter) -> Any:
    await wf.do("reserve", _f(c, "reserve"))
    await wf.do("fee", _f(c, "fee"))
    return await wf.wait_for_event("paid")


async def patched_step_v2(wf: plait.Workflow, c: Counter) -> Any:
    await wf.do("reserve", _f(c, "reserve"))
    if wf.patched("fee"):  # runs that recorded "pack" already keep the old path
        await wf.do("fee", _f(c, "fee"))
    await wf.do("pack", _f(c, "pack"))
    return await wf.wait_for_event("paid")


async def removed_step_v2(wf: plait.Workflow, c: Counter) -> Any:
    await wf.do("reserve", _f(c, "reserve"))
    return await wf.wait_for_event("paid")  # "pack" is gone


async def removed_in_branch_v1(wf: plait.Workflow, c: Counter) -> Any:
    async def packing() -> list[str]:
        return [await wf.do("reserve", _f(c, "reserve")), await wf.do("pack", _f(c, "pack"))]

    # the event wait is reached first and waits while the other branch goes on
    return await asyncio.gather(wf.wait_for_event("paid"), packing())


async def removed_in_branch_v2(wf: plait.Workflow, c: Counter) -> Any:
    async def packing() -> list[str]:
        return [await wf.do("reserve", _f(c, "reserve"))]  # "pack" is gone

    return await asyncio.gather(wf.wait_for_event("paid"), packing())


async def renamed_event_v2(wf: plait.Workflow, c: Counter) -> Any:
    await wf.do("reserve", _f(c, "reserve"))
    return await wf.wait_for_event("payment")


async def dropped_wait_v2(wf: plait.Workflow, c: Counter) -> Any:
    await wf.do("reserve", _f(c, "reserve"))
    return "no payment needed"


CASES = [
    Case("unchanged", unchanged_v1, unchanged_v1),
    Case(
        "changed_input",
        changed_input_v1,
        changed_input_v2,
        "reserve",
        "reserve",
        ('recorded with input {"qty"', "1}", 'now passes {"qty"', "2}"),
    ),
    Case(
        "retyped_input",
        retyped_input_v1,
        retyped_input_v2,
        "reserve",
        "reserve",
        ('recorded with input {"gift":true,"qty":1}', 'now passes {"qty":1.0,"gift":1}'),
    ),
    Case("reordered_input", retyped_input_v1, reordered_input_v2),
    Case(
        "inserted_step",
        inserted_step_v1,
        inserted_step_v2,
        "fee",
        "fee",
        ("step 'fee'", "comes before step 'pack'"),
    ),
    Case(
        "inserted_before_event",
        before_event_v1,
        before_event_v2,
        "fee",
        "fee",
        ("step 'fee'", "comes before step '__event:paid'"),
    ),
    Case("patched_step", inserted_step_v1, patched_step_v2),
    Case(
        "removed_step",
        inserted_step_v1,
        removed_step_v2,
        "pack",
        "pack",
        ("recorded step 'pack'", "reaches step '__event:paid' without it"),
    ),
    Case(
        "removed_in_branch",
        removed_in_branch_v1,
        removed_in_branch_v2,
        "pack",
        "pack",
        ("recorded step 'pack'", "reaches step '__event:paid' without it"),
    ),
    Case(
        "renamed_event",
        before_event_v1,
        renamed_event_v2,
        "__event:payment",
        "wait for event: payment",
        ("step '__event:payment'", "comes before step '__event:paid'"),
    ),
    Case(
        "dropped_wait",
        before_event_v1,
        dropped_wait_v2,
        "__event:paid",
        "wait for event: paid",
        ("recorded step '__event:paid'", "returns before reaching it"),
    ),
]


def shop_app(counter: Counter, version: str, cases: list[Case]) -> plait.App:
    """The app of ``version`` ("1": each case's v1, else its v2); bodies count in
    ``counter``."""
    app = plait.App("shop")
    for case in cases:
        fn = case.v1 if version == "1" else case.v2

        async def workflow(wf: plait.Workflow, data: None, fn: WorkflowFn = fn) -> Any:
            return await fn(wf, counter)

        app.workflow(name=case.name, version=version)(workflow)
    return app


async def waiting(engine: plait.Engine, run_id: str) -> bool:
    """Whether the run waits for an event, with every other step it reached ended (a
    branch beside the wait may go on after the wait was reached)."""
    steps = await engine.get_steps(run_id)
    in_flight = ("pending", "scheduled", "running")
    return any(s.kind == "event" and s.status in in_flight for s in steps) and all(
        s.kind == "event" or s.status not in in_flight for s in steps
    )


async def start_v1(engine_factory: Any, counter: Counter, cases: list[Case]) -> dict[str, str]:
    """One run of each case, left waiting for its event by v1."""
    async with engine_factory(shop_app(counter, "1", cases)) as engine:
        runs = {case.name: await engine.start(case.name) for case in cases}
        for case in cases:
            await eventually(lambda c=case: waiting(engine, runs[c.name]), what=case.name)
    return runs
