"""Requests with a reply: ``engine.request`` waits for the workflow's answer
(``wf.wait_for_request``, ``req.reply`` / ``req.refuse``), on both stores."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from datetime import timedelta
from typing import Any

import pydantic
import pytest

import plait
from support.polling import eventually

app = plait.App("requests")


class Item(pydantic.BaseModel):
    sku: str
    qty: int


@app.workflow
async def order(wf: plait.Workflow) -> int:
    """A live order: each request adds an item and is told the new total."""
    total = 0
    while True:
        req = await wf.wait_for_request("add", schema=Item)
        if req.data.qty <= 0:
            await req.refuse(f"quantity must be positive, got {req.data.qty}")
            continue
        total += req.data.qty
        await req.reply({"total": total})
        if total >= 10:
            return total


@app.workflow
async def counter(wf: plait.Workflow, count: int) -> int:
    """Takes ``count`` requests and answers each with the running total of their data."""
    total = 0
    for _ in range(count):
        req = await wf.wait_for_request("add")
        total += req.data
        await req.reply(total)
    return total


@app.workflow
async def late_taker(wf: plait.Workflow) -> Any:
    """Waits for a go event before it takes any request."""
    await wf.wait_for_event("go")
    req = await wf.wait_for_request("ask", timeout="1s")
    await req.reply("seen")
    return req.data


@app.workflow
async def impatient(wf: plait.Workflow) -> str:
    try:
        await wf.wait_for_request("ask", timeout=0.2)
    except plait.RequestTimeout as exc:
        return f"timed out: {exc.code}"
    return "got one"


async def test_request_returns_the_reply(engine_factory: Callable[..., Any]) -> None:
    async with engine_factory(app) as engine:
        run_id = await engine.start("order")
        assert await engine.request(run_id, "add", {"sku": "a", "qty": 3}) == {"total": 3}
        assert await engine.request(run_id, "add", {"sku": "b", "qty": 4}) == {"total": 7}
        steps = {s.key: s for s in await engine.get_steps(run_id)}
        answer = steps["__reply:add"]
        # the run shows a request and its reply as a step: input the data, output the reply
        assert answer.input == {"sku": "a", "qty": 3}
        assert answer.output == {"total": 3}
        assert await engine.request(run_id, "add", {"sku": "c", "qty": 3}) == {"total": 10}
        run = await engine.wait(run_id, timeout=10)
        assert run.status == "completed" and run.output == 10


async def test_a_schema_violation_is_refused_at_once_and_never_seen(
    engine_factory: Callable[..., Any],
) -> None:
    async with engine_factory(app) as engine:
        run_id = await engine.start("order")
        assert await engine.request(run_id, "add", {"sku": "a", "qty": 1}) == {"total": 1}
        # the workflow waits at its next wait: the request is judged on arrival
        with pytest.raises(plait.ValidationError) as raised:
            await engine.request(run_id, "add", {"sku": "b", "qty": "many"})
        assert raised.value.code == "REQUEST_INVALID"
        assert [p["field"] for p in raised.value.problems] == ["qty"]
        assert await engine.request(run_id, "add", {"sku": "c", "qty": 2}) == {"total": 3}
        # the workflow took two requests, never the bad one
        taken = [
            s
            for s in await engine.get_steps(run_id)
            if s.kind == "request" and s.status == "succeeded"
        ]
        assert [s.output["data"]["sku"] for s in taken] == ["a", "c"]


async def test_a_request_sent_before_the_wait_is_judged_when_taken(
    engine_factory: Callable[..., Any],
) -> None:
    async with engine_factory(app) as engine:
        run_id = await engine.start("late_taker")
        bad = asyncio.create_task(engine.request(run_id, "ask", "x", timeout=10))
        await asyncio.sleep(0)
        good = asyncio.create_task(engine.request(run_id, "ask", "y", timeout=10))
        await eventually(lambda: _sent(engine, run_id, 2), what="two requests stored")
        await engine.send_event(run_id, "go")
        assert await bad == "seen"
        with pytest.raises(plait.RunStateError):
            await good  # the run ended without taking it
        run = await engine.wait(run_id, timeout=10)
        assert run.output == "x"


async def _sent(engine: plait.Engine, run_id: str, count: int) -> bool:
    snapshot = await engine.store.load_pass(run_id)
    return snapshot is not None and len(snapshot.requests) >= count


async def test_refuse_raises_request_refused_with_the_reason(
    engine_factory: Callable[..., Any],
) -> None:
    async with engine_factory(app) as engine:
        run_id = await engine.start("order")
        with pytest.raises(plait.RequestRefused) as raised:
            await engine.request(run_id, "add", {"sku": "a", "qty": 0})
        assert raised.value.reason == "quantity must be positive, got 0"
        assert raised.value.code == "REQUEST_REFUSED"
        # the workflow goes on waiting and answers the next one
        assert await engine.request(run_id, "add", {"sku": "a", "qty": 2}) == {"total": 2}


async def test_wait_for_request_times_out_in_the_workflow(
    engine_factory: Callable[..., Any],
) -> None:
    async with engine_factory(app) as engine:
        assert await engine.run("impatient", timeout=10) == "timed out: REQUEST_TIMEOUT"


async def test_request_to_a_missing_or_ended_run(engine_factory: Callable[..., Any]) -> None:
    async with engine_factory(app) as engine:
        with pytest.raises(plait.RunNotFoundError):
            await engine.request("no-such-run", "add", 1)
        run = await engine.wait(await engine.start("impatient"), timeout=10)
        with pytest.raises(plait.RunStateError):
            await engine.request(run.id, "ask", 1)
        with pytest.raises(ValueError, match="at most 300"):
            await engine.request(run.id, "ask", 1, timeout=301)
        with pytest.raises(ValueError, match="more than 0"):
            await engine.request(run.id, "ask", 1, timeout=0)
        with pytest.raises(ValueError, match="'__'"):
            await engine.request(run.id, "__ask", 1)
        with pytest.raises(plait.NotJSONError):
            await engine.request(run.id, "ask", object())


@app.workflow
async def gated_order(wf: plait.Workflow) -> list[str]:
    """Takes requests only once told to go, so requests sent before are judged then."""
    await wf.wait_for_event("go")
    skus: list[str] = []
    for _ in range(2):
        req = await wf.wait_for_request("add", schema=Item)
        skus.append(req.data.sku)
        await req.reply(len(skus))
    return skus


async def test_a_schema_violation_sent_before_the_wait_is_refused_when_judged(
    engine_factory: Callable[..., Any],
) -> None:
    async with engine_factory(app) as engine:
        run_id = await engine.start("gated_order")
        first = asyncio.create_task(engine.request(run_id, "add", {"sku": "a", "qty": 1}))
        await eventually(lambda: _sent(engine, run_id, 1), what="the first request stored")
        bad = asyncio.create_task(engine.request(run_id, "add", {"sku": "b"}))
        await eventually(lambda: _sent(engine, run_id, 2), what="the bad request stored")
        last = asyncio.create_task(engine.request(run_id, "add", {"sku": "c", "qty": 1}))
        await eventually(lambda: _sent(engine, run_id, 3), what="the last request stored")
        await engine.send_event(run_id, "go")
        assert await first == 1
        with pytest.raises(plait.ValidationError) as raised:
            await bad
        assert [p["field"] for p in raised.value.problems] == ["qty"]
        assert await last == 2
        run = await engine.wait(run_id, timeout=10)
        assert run.output == ["a", "c"]  # the workflow never saw "b"


@app.workflow
async def after_go(wf: plait.Workflow) -> Any:
    await wf.wait_for_event("go")
    try:
        req = await wf.wait_for_request("ask", timeout="0.5s")
    except plait.RequestTimeout:
        return "nothing"
    await req.reply("late")
    return req.data


async def test_a_timed_out_request_never_reaches_the_workflow_later(
    engine_factory: Callable[..., Any],
) -> None:
    async with engine_factory(app) as engine:
        run_id = await engine.start("after_go")
        with pytest.raises(TimeoutError, match="withdrawn"):
            await engine.request(run_id, "ask", "too late", timeout=0.3)
        await engine.send_event(run_id, "go")
        run = await engine.wait(run_id, timeout=10)
        assert run.output == "nothing"


async def test_a_hundred_concurrent_requests_are_answered_in_arrival_order(
    engine_factory: Callable[..., Any],
) -> None:
    async with engine_factory(app) as engine:
        run_id = await engine.start("counter", 100)
        replies = await asyncio.gather(
            *(engine.request(run_id, "add", n, timeout=120) for n in range(1, 101))
        )
        run = await engine.wait(run_id, timeout=30)
        assert run.status == "completed" and run.output == 5050
        # in the order the workflow reached its waits
        taken = [s for s in await engine.get_steps(run_id) if s.kind == "request"]
        assert len(taken) == 100
        ids = [s.output["id"] for s in taken]
        assert ids == sorted(ids)  # taken oldest first
        running, expected = 0, {}
        for step in taken:  # each sender got the running total up to its own request
            running += step.output["data"]
            expected[step.output["data"]] = running
        assert replies == [expected[n] for n in range(1, 101)]


#: how often ``hold`` ran, and what it waits for before it returns (None: nothing)
HOLD: dict[str, Any] = {"calls": 0, "release": None}


@app.function
async def hold(n: int) -> int:
    HOLD["calls"] += 1
    release: asyncio.Event | None = HOLD["release"]
    if release is not None:
        await release.wait()
    return n * 10


@app.workflow
async def slow_answer(wf: plait.Workflow) -> Any:
    req = await wf.wait_for_request("ask")
    value = await wf.do("work", hold, req.data)
    await req.reply({"value": value})
    await wf.wait_for_event("done")  # one more pass, which replays the answer
    return value


async def test_a_reply_survives_a_restart_and_is_given_once(
    engine_factory: Callable[..., Any],
) -> None:
    HOLD.update(calls=0, release=asyncio.Event())
    async with engine_factory(app, workers=False) as client:
        opening = engine_factory(app)  # held: its engine closes when it is collected
        first = await opening.__aenter__()
        run_id = await first.start("slow_answer")
        asked = asyncio.create_task(client.request(run_id, "ask", 4, timeout=60))

        await eventually(lambda: HOLD["calls"] == 1, what="the step after the take running")
        steps = {s.key: s for s in await client.get_steps(run_id)}
        assert steps["__request:ask"].status == "succeeded"  # taken, not answered
        await first.close()  # between the take and the reply
        assert not asked.done()
        HOLD["release"] = None
        async with engine_factory(app) as second:
            assert await asked == {"value": 40}
            await second.send_event(run_id, "done")
            run = await second.wait(run_id, timeout=10)
            assert run.output == 40
            answers = [s for s in await second.get_steps(run_id) if s.kind == "reply"]
            assert [(s.input, s.output) for s in answers] == [(4, {"value": 40})]
            (taken,) = [s for s in await second.get_steps(run_id) if s.kind == "request"]
            sent = await second.store.get_request(taken.output["id"])
            assert sent is not None and sent.status == "replied"
            assert sent.reply is not None and sent.reply.replace(" ", "") == '{"value":40}'


class Qty(pydantic.BaseModel):
    qty: int


@app.workflow
async def qty_taker(wf: plait.Workflow, first: bool) -> int:
    if first:
        await wf.wait_for_event("go")
    req = await wf.wait_for_request("add", schema=Qty)
    await req.reply(req.data.qty)
    return req.data.qty


async def test_a_request_is_judged_alike_whether_sent_before_or_while_the_wait_is_open(
    engine_factory: Callable[..., Any],
) -> None:
    """A request's data gets one verdict whenever it arrives: the JSON Schema the wait
    stored, as for an approval's decision. ``{"qty": "5"}`` (a string, which pydantic
    alone would coerce) is refused sent before the wait as it is sent while it is open,
    and the workflow sees neither."""
    async with engine_factory(app) as engine:
        # sent before the wait: judged when the run reaches it
        early = await engine.start("qty_taker", True)
        sender = asyncio.ensure_future(engine.request(early, "add", {"qty": "5"}, timeout=10))
        await eventually(lambda: _sent(engine, early, 1), what="the request stored")
        await engine.send_event(early, "go")
        with pytest.raises(plait.ValidationError) as before:
            await sender
        assert await engine.request(early, "add", {"qty": 5}, timeout=10) == 5

        # sent while the wait is open: the same data, the same verdict
        late = await engine.start("qty_taker", False)

        async def waiting() -> bool:
            steps = await engine.get_steps(late)
            return any(s.key == "__request:add" and s.status == "scheduled" for s in steps)

        await eventually(waiting, what="the wait open")
        with pytest.raises(plait.ValidationError) as during:
            await engine.request(late, "add", {"qty": "5"}, timeout=10)
        assert [p["field"] for p in before.value.problems] == ["qty"]
        assert before.value.problems == during.value.problems
        assert await engine.request(late, "add", {"qty": 5}, timeout=10) == 5
        for run_id in (early, late):
            assert (await engine.wait(run_id, timeout=10)).output == 5


async def test_a_sender_cancelled_while_its_request_commits_withdraws_it(
    engine_factory: Callable[..., Any],
) -> None:
    """The store's write can commit before the sender's await returns: a cancel landing in
    between (a client gone, a server shutting down) still withdraws the request, so the
    workflow never takes one nobody waits for."""
    async with engine_factory(app) as engine:
        run_id = await engine.start("after_go")
        committed = asyncio.Event()
        hold = asyncio.Event()
        store_send = engine.store.send_request

        async def send_then_hold(*args: Any, **kwargs: Any) -> int:
            request_id = await store_send(*args, **kwargs)
            committed.set()
            await hold.wait()  # the commit is done; the caller has not heard of it yet
            return request_id

        engine.store.send_request = send_then_hold  # type: ignore[method-assign]
        sender = asyncio.ensure_future(engine.request(run_id, "ask", "nobody waits", timeout=60))
        await asyncio.wait_for(committed.wait(), 10)
        sender.cancel()
        hold.set()
        with pytest.raises(asyncio.CancelledError):
            await sender
        snapshot = await engine.store.load_pass(run_id)
        assert snapshot is not None and snapshot.requests == []
        await engine.send_event(run_id, "go")
        run = await engine.wait(run_id, timeout=10)
        assert run.output == "nothing"  # the workflow never saw it


async def test_a_request_timeout_takes_durations_like_every_timeout(
    engine_factory: Callable[..., Any],
) -> None:
    """``"30s"``, ``"500ms"`` and a ``timedelta`` as for ``wf.wait_for_request`` and
    ``engine.wait``; a bad one is named."""
    async with engine_factory(app) as engine:
        run_id = await engine.start("counter", 3)
        replies = [
            await engine.request(run_id, "add", 1, timeout="30s"),
            await engine.request(run_id, "add", 2, timeout=timedelta(seconds=30)),
            await engine.request(run_id, "add", 3, timeout="1m"),
        ]
        assert replies == [1, 3, 6]
        assert (await engine.wait(run_id, timeout=30)).output == 6
        with pytest.raises(ValueError, match="request timeout"):
            await engine.request(run_id, "add", 1, timeout="soon")
        with pytest.raises(TypeError, match="request timeout"):
            await engine.request(run_id, "add", 1, timeout=[5])  # type: ignore[arg-type]
