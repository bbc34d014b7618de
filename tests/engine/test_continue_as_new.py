"""``wf.continue_as_new``: a run ends ``continued`` and a new run of its workflow goes on
in its place, in one commit; ``engine.wait`` follows the chain, ``get_run`` does not; a
parent waits for the last run of its child's chain; the ended run's live children are
cancelled; bad input is refused where it is given; lists can hide continued runs and a
prune deletes them like any ended run. On every store."""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import pydantic
import pytest

import plait
from plait.records import Run
from plait.testing import TestEngine
from support.polling import eventually

app = plait.App("continuing")
app.queue("one", concurrency=1)

#: how many turns a run takes before it continues as new
EVERY = 50
#: code after a continue as new, and a step taken while its pass unwinds: never reached
reached_after: list[str] = []


@app.function
async def turn(state: dict[str, Any]) -> dict[str, Any]:
    """One turn of a long loop: the state (4 KB of text) moves on by one."""
    text = state["text"]
    return {"i": state["i"] + 1, "text": text[1:] + text[0]}


@app.workflow
async def endless(wf: plait.Workflow, state: dict[str, Any]) -> dict[str, Any]:
    """A loop that never ends on its own but for ``until``: it continues as new every
    ``EVERY`` turns, so its history stays bounded."""
    for _ in range(EVERY):
        if state["i"] >= state["until"]:
            return {"i": state["i"], "size": len(state["text"]), "head": state["text"][:8]}
        turned = await wf.do("turn", turn, {"i": state["i"], "text": state["text"]})
        state = {**state, **turned}
    await wf.continue_as_new(state)


@app.workflow
async def hops(wf: plait.Workflow, n: int) -> dict[str, Any]:
    """Continues as new until ``n`` reaches 3; ``finally`` takes no step in the unwind."""
    try:
        await wf.do("note", lambda x: x, n)
        if n < 3:
            await wf.continue_as_new(n + 1)
            reached_after.append("after")  # never runs
        return {"n": n, "run": wf.run_id}
    finally:
        if n < 3:
            # the pass's Unwind: nothing is recorded (a step taken here would be a step
            # of the continued run)
            with contextlib.suppress(BaseException):
                await wf.do("cleanup", lambda: "late")


@app.workflow
async def parent(wf: plait.Workflow) -> Any:
    got = await wf.do("child", "hops", 0)
    return {"child": got, "after": "parent"}


@app.workflow
async def waits_forever(wf: plait.Workflow) -> None:
    await wf.wait_for_event("never")


@app.workflow
async def with_child(wf: plait.Workflow, second: bool) -> str:
    if second:
        return "second"
    background = asyncio.ensure_future(wf.do("sleeper", "waits_forever"))
    await wf.wait_for_event("go")
    await wf.continue_as_new(True)
    await background  # never reached


class Count(pydantic.BaseModel):
    n: int


@app.workflow
async def refuses(wf: plait.Workflow, data: Count) -> dict[str, str]:
    """Bad input to a continue as new is refused where it is given; the run goes on."""
    errors: dict[str, str] = {}
    try:
        await wf.continue_as_new({"n": object()})
    except plait.NotJSONError as exc:
        errors["json"] = str(exc)
    try:
        await wf.continue_as_new({"n": "many"})
    except plait.InputValidationError as exc:
        errors["type"] = str(exc)
    return errors


@app.workflow
async def then_wait(wf: plait.Workflow, n: int) -> int:
    if n < 2:
        await wf.continue_as_new(n + 1)
    await wf.wait_for_event("go")
    return n


@app.workflow(queue="one")
async def queued_hops(wf: plait.Workflow, n: int) -> int:
    if n < 2:
        await wf.continue_as_new(n + 1)
    return n


async def chain_of(engine: plait.Engine, first: str) -> list[Run]:
    """The runs of a chain, first to last, read link by link."""
    runs = [await engine.get_run(first)]
    while runs[-1].continued_to is not None:
        runs.append(await engine.get_run(runs[-1].continued_to))
    return runs


def assert_whole(chain: list[Run]) -> None:
    """Each run but the last continued into the next, which names it back."""
    assert chain[0].continued_from is None
    for before, after in itertools.pairwise(chain):
        assert before.status == "continued"
        assert before.continued_to == after.id
        assert after.continued_from == before.id
    assert chain[-1].status != "continued" and chain[-1].continued_to is None


async def test_a_loop_continues_as_new_for_two_thousand_turns(
    engine_factory: Callable[..., Any],
) -> None:
    text = "".join(chr(65 + i % 26) for i in range(4096))  # 4 KB of state
    async with engine_factory(app) as engine:
        began = time.monotonic()
        first = await engine.start("endless", {"i": 0, "until": 2000, "text": text})
        run = await engine.wait(first, timeout=600)
        took = time.monotonic() - began
        assert run.status == "completed"
        assert run.output == {"i": 2000, "size": 4096, "head": text[2000 % 4096 :][:8]}
        chain = await chain_of(engine, first)
        assert len(chain) == 2000 // EVERY + 1
        assert chain[-1].id == run.id != first
        assert_whole(chain)
        for each in chain:  # the history of each run stays bounded
            assert len(await engine.get_steps(each.id)) <= EVERY
        print(f"2000 turns in {len(chain)} runs took {took:.1f}s")


async def test_get_run_does_not_follow_and_wait_does(engine_factory: Callable[..., Any]) -> None:
    reached_after.clear()
    async with engine_factory(app) as engine:
        first = await engine.start("hops", 0)
        last = await engine.wait(first, timeout=30)
        assert last.status == "completed" and last.output == {"n": 3, "run": last.id}
        old = await engine.get_run(first)
        assert old.status == "continued" and old.output is None and old.error is None
        assert old.continued_to is not None
        chain = await chain_of(engine, first)
        assert [r.input for r in chain] == [0, 1, 2, 3]
        assert_whole(chain)
        assert chain[-1].id == last.id
        # the code after the continue never ran, and the unwind recorded no step
        assert reached_after == []
        for each in chain[:-1]:
            assert [s.name for s in await engine.get_steps(each.id)] == ["note"]
        # engine.run follows the chain as wait does
        assert (await engine.run("hops", 2, timeout=30))["n"] == 3


async def test_a_child_that_continues_gives_its_parent_the_last_output(
    engine_factory: Callable[..., Any],
) -> None:
    async with engine_factory(app) as engine:
        run_id = await engine.start("parent", owner="ann")
        done = await engine.wait(run_id, timeout=30)
        assert done.status == "completed"
        children = await engine.get_children(run_id)
        assert len(children) == 4  # the child's chain, every run of it under the parent
        (step,) = await engine.get_steps(run_id)
        last = await engine.get_run(step.child_run_id or "")
        assert last.status == "completed" and last.continued_to is None
        assert done.output == {"child": {"n": 3, "run": last.id}, "after": "parent"}
        first = next(c for c in children if c.continued_from is None)
        assert_whole(await chain_of(engine, first.id))
        assert {c.owner for c in children} == {"ann"}
        assert {c.parent_run_id for c in children} == {run_id}


async def test_the_live_children_of_a_continued_run_are_cancelled(
    engine_factory: Callable[..., Any],
) -> None:
    async with engine_factory(app) as engine:
        first = await engine.start("with_child", False)

        async def child() -> Run | None:
            found = await engine.get_children(first)
            return found[0] if found and found[0].status == "running" else None

        sleeper = await eventually(child, what="the child run running")
        await engine.send_event(first, "go")
        last = await engine.wait(first, timeout=30)
        assert last.output == "second" and last.id != first
        assert (await engine.get_run(first)).status == "continued"
        ended = await engine.get_run(sleeper.id)
        assert ended.status == "cancelled"
        assert ended.error is not None and first in ended.error["message"]


async def test_input_that_is_not_json_or_not_the_input_type_is_refused(
    engine_factory: Callable[..., Any],
) -> None:
    async with engine_factory(app) as engine:
        run_id = await engine.start("refuses", {"n": 1})
        run = await engine.wait(run_id, timeout=30)
        assert run.status == "completed" and run.id == run_id and run.continued_to is None
        assert "the input of workflow 'refuses' continued as new" in run.output["json"]
        assert "not JSON" in run.output["json"]
        assert "refuses" in run.output["type"] and "n" in run.output["type"]


async def test_lists_can_hide_continued_runs(engine_factory: Callable[..., Any]) -> None:
    async with engine_factory(app) as engine:
        first = await engine.start("hops", 0)
        last = await engine.wait(first, timeout=30)
        every = await engine.list_runs(workflow="hops")
        assert len(every) == 4
        shown = await engine.list_runs(workflow="hops", hide_continued=True)
        assert [r.id for r in shown] == [last.id]
        summaries, total = await engine.run_summaries(workflow="hops", hide_continued=True)
        assert total == 1 and [s.id for s in summaries] == [last.id]
        continued = await engine.list_runs(status="continued")
        assert len(continued) == 3 and all(r.continued_to for r in continued)
        with pytest.raises(ValueError, match="hide_continued"):
            await engine.list_runs(hide_continued="yes")  # type: ignore[arg-type]


async def test_a_prune_deletes_continued_runs_and_leaves_a_live_run_its_dangling_link(
    engine_factory: Callable[..., Any],
) -> None:
    async with engine_factory(app) as engine:
        first = await engine.start("then_wait", 0)

        async def live() -> Run | None:
            chain = await chain_of(engine, first)
            return chain[-1] if len(chain) == 3 and chain[-1].status == "running" else None

        waiting = await eventually(live, what="the third run waiting")
        later = datetime.now(UTC) + timedelta(hours=1)
        assert await engine.prune(older_than=later) == 2
        with pytest.raises(plait.RunNotFoundError):
            await engine.get_run(first)
        kept = await engine.get_run(waiting.id)
        assert kept.continued_from is not None  # a plain id: its run is gone
        with pytest.raises(plait.RunNotFoundError):
            await engine.get_run(kept.continued_from)
        await engine.send_event(waiting.id, "go")
        assert (await engine.wait(waiting.id, timeout=30)).output == 2
        assert await engine.prune(older_than=later) == 1
        assert await engine.list_runs() == []


async def test_the_next_run_takes_over_the_dedup_key(engine_factory: Callable[..., Any]) -> None:
    async with engine_factory(app) as engine:
        first = await engine.start("then_wait", 0, dedup="one-chain")

        async def live() -> Run | None:
            chain = await chain_of(engine, first)
            return chain[-1] if len(chain) == 3 and chain[-1].status == "running" else None

        waiting = await eventually(live, what="the third run waiting")
        assert waiting.dedup == "one-chain"
        # one live run per key holds across the chain: the start finds the live one
        assert await engine.start("then_wait", 0, dedup="one-chain") == waiting.id
        await engine.send_event(waiting.id, "go")
        assert (await engine.wait(first, timeout=30)).id == waiting.id


async def test_a_run_of_a_queue_continues_through_its_queue(
    engine_factory: Callable[..., Any],
) -> None:
    async with engine_factory(app) as engine:
        first = await engine.start("queued_hops", 0, key="k", priority=3)
        last = await engine.wait(first, timeout=30)
        assert last.output == 2
        chain = await chain_of(engine, first)
        assert len(chain) == 3
        for run in chain:
            assert (run.queue, run.key, run.priority) == ("one", "k", 3)
            assert run.admitted_at is not None  # each was admitted as a start is


@app.workflow
async def daily(wf: plait.Workflow, day: int) -> int:
    """A loop that sleeps a day between runs of its chain."""
    await wf.sleep("night", "1d")
    if day < 5:
        await wf.continue_as_new(day + 1)
    return day


async def test_the_testing_engine_skips_time_along_a_chain(database: str) -> None:
    async with TestEngine(app, database) as env:
        began, started_at = time.monotonic(), env.now()
        first = await env.start("daily", 1)
        last = await env.wait(first, timeout=10)
        assert last.output == 5 and last.id != first
        assert env.now() - started_at >= timedelta(days=5)
        assert time.monotonic() - began < 5
        assert len(await chain_of(env, first)) == 5


@app.workflow
async def inbox(wf: plait.Workflow, state: dict[str, Any]) -> Any:
    """An entity loop that takes three messages per run, then continues as new."""
    messages = list(state["messages"])
    for _ in range(3):
        message = await wf.wait_for_event("message")
        if message == "bye":
            return messages
        messages.append(message)
    await wf.continue_as_new({"messages": messages})


async def test_events_held_for_a_run_go_on_to_the_run_that_continues_it(
    engine_factory: Callable[..., Any],
) -> None:
    """Events a run accepted and did not take yet are not dropped by its continue: they
    wait for the next run, in the order they were sent. Decisions held for approval gates
    stay with the run they were sent to."""
    async with engine_factory(app, workers=False) as engine:
        first = await engine.start("inbox", {"messages": []})
        for i in range(5):
            await engine.send_event(first, "message", i)
    async with engine_factory(app) as engine:

        async def continued() -> str | None:
            return (await engine.get_run(first)).continued_to

        second = await eventually(continued, what="the first run continues as new")
        await engine.send_event(second, "message", "bye")
        last = await engine.wait(first, timeout=10)
        assert last.status == "completed"
        assert last.output == [0, 1, 2, 3, 4]


@app.function(queued=True)
async def slow_job(data: Any) -> str:
    """A job step that runs until it is stopped."""
    await asyncio.Event().wait()
    return "never"


@app.workflow
async def leaves_a_job(wf: plait.Workflow, n: int) -> str:
    """Starts a job step it does not wait for, then continues as new once told to."""
    if n == 0:
        background = asyncio.ensure_future(wf.do("slow", slow_job, 1))
        await wf.wait_for_event("go")
        await wf.continue_as_new(1)
        await background
    return "second"


async def test_a_job_step_in_flight_at_a_continue_is_recorded_cancelled(
    engine_factory: Callable[..., Any],
) -> None:
    """The ended run leaves no step in flight in its record: the job step its code did not
    wait for is cancelled with the continue, and its body is stopped."""
    async with engine_factory(app) as engine:
        first = await engine.start("leaves_a_job", 0)

        async def job_running() -> bool:
            steps = {s.key: s for s in await engine.get_steps(first)}
            return "slow" in steps and steps["slow"].status == "running"

        await eventually(job_running, what="the job step's body runs")
        await engine.send_event(first, "go")
        assert (await engine.wait(first, timeout=10)).output == "second"

        async def settled() -> bool:
            history = [h for h in await engine.get_history(first) if h.key == "slow"]
            return bool(history) and all(h.status != "running" for h in history)

        await eventually(settled, what="the job's attempt closed")
        (step,) = [s for s in await engine.get_steps(first) if s.key == "slow"]
        assert step.status == "failed" and step.error is not None
        assert step.error["code"] == "CANCELLED", step.error


async def test_cancelling_a_run_that_continued_names_the_run_its_chain_goes_on_as(
    engine_factory,
) -> None:
    """``wait`` follows a chain; ``cancel`` acts on the run it is given, and a continued
    one is refused, naming the live run of its chain to cancel instead."""
    app = plait.App()

    @app.workflow
    async def loop(wf: plait.Workflow, turn: int) -> None:
        if turn < 2:
            wf.continue_as_new(turn + 1)
        await wf.wait_for_event("stop")

    async with engine_factory(app) as engine:
        first = await engine.start("loop", 0)

        async def last() -> str | None:
            runs = await engine.list_runs(workflow="loop", limit=10)
            live = [r for r in runs if r.status == "running"]
            waiting = [r for r in live if await engine.waiting_on(r.id) is not None]
            return waiting[0].id if len(runs) == 3 and waiting else None

        latest = await eventually(last, what="the chain's third run waiting")
        with pytest.raises(plait.RunStateError) as caught:
            await engine.cancel(first)
        assert "continued" in str(caught.value) and repr(latest) in str(caught.value)
        assert (await engine.cancel(latest)).status == "cancelled"
