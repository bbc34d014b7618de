"""Forks that work, on both stores: kept steps compared by key and function (not input),
only ended runs fork, ``from_step`` by the name runs show displays, ``replace`` as the way
forward for a live run, and the version a fork records."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

import plait
from support.polling import eventually

app = plait.App("fork-tests")
#: (step, run id) of every body that ran, in order
LEDGER: list[tuple[str, str]] = []
#: set by a test to change which function step "notify" calls, as a deploy would
CODE = {"notify": "send"}
#: a body that waits for the test to let it go, and the event that says it started
HELD: dict[str, asyncio.Event] = {}


@app.function
def send(data: Any, ctx: plait.StepContext) -> Any:
    LEDGER.append(("notify", ctx.run_id))
    return data


@app.function
def send_again(data: Any, ctx: plait.StepContext) -> Any:
    LEDGER.append(("notify (new code)", ctx.run_id))
    return data


@app.function
def total(data: Any, ctx: plait.StepContext) -> Any:
    LEDGER.append(("total", ctx.run_id))
    return data * 2


@app.function
async def slow(data: Any, ctx: plait.StepContext) -> Any:
    LEDGER.append(("slow", ctx.run_id))
    if ctx.run_id == data.get("hold"):  # only the source waits; its fork goes through
        HELD["started"].set()
        await asyncio.wait_for(HELD["release"].wait(), 20)
    return "slow done"


@app.workflow
async def notifying(wf: plait.Workflow, n: int) -> Any:
    """A step whose input holds the run's own id, as a notification's would."""
    function = send if CODE["notify"] == "send" else send_again
    await wf.do("notify", function, {"run": wf.run_id})
    return await wf.do("total", total, n)


@app.workflow
async def paced(wf: plait.Workflow, data: Any) -> Any:
    """A do step, a sleep and an event wait, each named by runs show in its own way."""
    first = await wf.do("first", total, 1)
    await wf.sleep("nap", "1ms")
    payload = await wf.wait_for_event("approval")
    return [first, payload, await wf.do("last", total, 2)]


@app.workflow
async def suspends(wf: plait.Workflow, data: Any) -> Any:
    await wf.do("first", total, 1)
    await wf.suspend("review")
    return await wf.do("last", total, 2)


@app.workflow
async def waits(wf: plait.Workflow, data: Any) -> Any:
    await wf.do("first", total, 1)
    return await wf.wait_for_event("go")


@app.workflow
async def holding(wf: plait.Workflow, data: Any) -> Any:
    out = await wf.do("slow", slow, data)
    await wf.do("after", total, 3)
    return out


@app.workflow
async def two_alike(wf: plait.Workflow, data: Any) -> Any:
    """Two steps runs show displays alike: a child run keyed ``sleep: x`` and a sleep
    keyed ``x (child run)`` both read ``sleep: x (child run)``."""
    await wf.do("sleep: x", "leaf", data)
    await wf.sleep("x (child run)", "1ms")
    return data


@app.workflow
async def leaf(wf: plait.Workflow, data: Any) -> Any:
    return await wf.do("leaf step", total, 1)


@app.workflow(queue="single")
async def queued_flow(wf: plait.Workflow, data: Any) -> Any:
    return await wf.wait_for_event("go")


app.queue("single", concurrency=1)


@pytest.fixture(autouse=True)
def _fresh() -> Any:
    LEDGER.clear()
    CODE["notify"] = "send"
    HELD.clear()
    HELD.update(started=asyncio.Event(), release=asyncio.Event())
    yield
    HELD["release"].set()


async def _done(engine: plait.Engine, run_id: str) -> plait.Run:
    run = await engine.wait(run_id, timeout=20)
    assert run.status == "completed", run.error
    return run


async def _has_step(engine: plait.Engine, run_id: str, key: str) -> bool:
    return any(s.key == key for s in await engine.get_steps(run_id))


# -- kept steps are compared by key and function --------------------------------------------
async def test_a_kept_step_whose_input_holds_the_source_run_id_forks(engine_factory) -> None:
    async with engine_factory(app) as engine:
        source = await engine.start("notifying", 4)
        await _done(engine, source)
        fork = await engine.fork(source, from_step="total")
        run = await _done(engine, fork)
        assert run.output == 8 and run.forked_from == source
        # the fork ran again from "total" only: "notify" kept the source's result
        ran = list(LEDGER)
        assert ran == [("notify", source), ("total", source), ("total", fork)]
        steps = {s.key: s for s in await engine.get_steps(fork)}
        assert steps["notify"].input == {"run": source}
        assert steps["notify"].output == {"run": source}


async def test_a_kept_step_whose_function_changed_is_still_a_conflict(engine_factory) -> None:
    async with engine_factory(app) as engine:
        source = await engine.start("notifying", 4)
        await _done(engine, source)
        CODE["notify"] = "send_again"  # a deploy: the kept step now calls another function
        fork = await engine.fork(source, from_step="total")
        run = await engine.wait(fork, timeout=20)
        assert run.status == "failed" and run.error is not None
        assert run.error["code"] == "VERSION_CONFLICT"
        assert "step 'notify' was recorded as do 'send'" in run.error["message"]
        assert ("total", fork) not in LEDGER and ("notify (new code)", fork) not in LEDGER


# -- only an ended run forks ----------------------------------------------------------------
async def test_a_source_that_has_not_ended_is_refused_naming_its_status(engine_factory) -> None:
    async with engine_factory(app) as engine:
        suspended = await engine.start("suspends")
        assert (await engine.wait(suspended, timeout=20)).status == "suspended"
        running = await engine.start("waits")
        await eventually(lambda: _has_step(engine, running, "__event:go"), what="the wait")
        blocker = await engine.start("queued_flow")
        await eventually(
            lambda: _status_is(engine, blocker, "running"), what="the queue's slot taken"
        )
        queued = await engine.start("queued_flow")
        assert (await engine.get_run(queued)).status == "queued"
        for run_id, status in ((suspended, "suspended"), (running, "running"), (queued, "queued")):
            with pytest.raises(plait.RunStateError, match=f"it is {status}; only an ended run"):
                await engine.fork(run_id, from_step="first")
            assert (await engine.get_run(run_id)).status == status
        assert all(r.forked_from is None for r in await engine.list_runs())
        for run_id in (running, blocker, queued):
            await engine.cancel(run_id)


async def _status_is(engine: plait.Engine, run_id: str, status: str) -> bool:
    return (await engine.get_run(run_id)).status == status


# -- from_step by the name runs show displays -----------------------------------------------
async def test_from_step_takes_the_displayed_name(engine_factory) -> None:
    async with engine_factory(app) as engine:
        source = await engine.start("paced")
        await eventually(lambda: _has_step(engine, source, "__event:approval"), what="the wait")
        await engine.send_event(source, "approval", "yes")
        await _done(engine, source)
        shown = {s.key: s.label for s in await engine.get_steps(source)}
        assert shown["__event:approval"] == "wait for event: approval"
        assert shown["nap"] == "sleep: nap" and shown["first"] == "first"

        from_wait = await engine.fork(source, from_step="wait for event: approval")
        await eventually(lambda: _has_step(engine, from_wait, "__event:approval"), what="wait")
        await engine.send_event(from_wait, "approval", "again")
        assert (await _done(engine, from_wait)).output == [2, "again", 4]

        from_sleep = await engine.fork(source, from_step="sleep: nap")
        await eventually(lambda: _has_step(engine, from_sleep, "__event:approval"), what="wait")
        kept = {s.key for s in await engine.get_steps(from_sleep)}
        assert "first" in kept
        await engine.send_event(from_sleep, "approval", "third")
        assert (await _done(engine, from_sleep)).output == [2, "third", 4]

        from_do = await engine.fork(source, from_step="last")  # a do step: its key
        assert (await _done(engine, from_do)).output == [2, "yes", 4]
        ran = [(what, run) for what, run in LEDGER if run == from_do]
        assert ran == [("total", from_do)]  # "last" only


async def test_an_unknown_or_ambiguous_step_name_lists_the_steps(engine_factory) -> None:
    async with engine_factory(app) as engine:
        source = await engine.start("paced")
        await eventually(lambda: _has_step(engine, source, "__event:approval"), what="the wait")
        await engine.send_event(source, "approval", "yes")
        await _done(engine, source)
        with pytest.raises(ValueError) as unknown:
            await engine.fork(source, from_step="wait for event: approve")
        message = str(unknown.value)
        assert "has no step 'wait for event: approve'" in message
        assert "'__event:approval' (shown as 'wait for event: approval')" in message
        assert "'nap' (shown as 'sleep: nap')" in message and "'first'" in message

        alike = await engine.start("two_alike", 1)
        await _done(engine, alike)
        with pytest.raises(ValueError) as ambiguous:
            await engine.fork(alike, from_step="sleep: x (child run)")
        message = str(ambiguous.value)
        assert "'sleep: x (child run)' is ambiguous" in message
        assert "'sleep: x'" in message and "'x (child run)'" in message
        # its key names one of them
        assert (
            await _done(engine, await engine.fork(alike, from_step="x (child run)"))
        ).output == 1


# -- replace: the way forward for a live run ------------------------------------------------
async def test_replace_cancels_a_suspended_or_waiting_source_as_the_fork_starts(
    engine_factory,
) -> None:
    async with engine_factory(app) as engine:
        suspended = await engine.start("suspends")
        assert (await engine.wait(suspended, timeout=20)).status == "suspended"
        # a fork that cannot be made leaves the source as it was
        with pytest.raises(ValueError, match="has no step 'nope'"):
            await engine.fork(suspended, from_step="nope", replace=True)
        with pytest.raises(plait.RunIdTakenError):
            await engine.fork(suspended, from_step="first", run_id=suspended, replace=True)
        assert (await engine.get_run(suspended)).status == "suspended"

        fork = await engine.fork(suspended, from_step="__suspend:review", replace=True)
        source = await engine.get_run(suspended)
        assert source.status == "cancelled" and source.error is not None
        assert source.error["message"] == f"replaced by fork {fork}"
        assert (await engine.wait(fork, timeout=20)).status == "suspended"  # suspends again
        await engine.resume(fork)
        assert (await _done(engine, fork)).output == 4

        waiting = await engine.start("waits")
        await eventually(lambda: _has_step(engine, waiting, "__event:go"), what="the wait")
        fork = await engine.fork(waiting, from_step="wait for event: go", replace=True)
        assert (await engine.get_run(waiting)).status == "cancelled"
        await eventually(lambda: _has_step(engine, fork, "__event:go"), what="the fork's wait")
        await engine.send_event(fork, "go", "went")
        assert (await _done(engine, fork)).output == "went"
        assert ("total", fork) not in LEDGER  # "first" was kept
        # replace on an ended run forks it and cancels nothing
        again = await engine.fork(fork, from_step="wait for event: go", replace=True)
        assert (await engine.get_run(fork)).status == "completed"
        await engine.cancel(again)


async def test_replace_fences_the_worker_that_holds_the_source(engine_factory) -> None:
    """The source's worker is in a step body when another process forks it with
    replace: the source ends cancelled, its worker goes no further (its run gets no
    output, no step after the one in flight starts), and the fork completes."""
    async with (
        engine_factory(app, worker_id="runner", lease_seconds=30.0) as runner,
        engine_factory(app, worker_id="operator", workers=False) as operator,
    ):
        live = await runner.start("holding", {"hold": "live"}, run_id="live")
        await asyncio.wait_for(HELD["started"].wait(), 20)
        fork = await operator.fork(live, from_step="slow", replace=True)
        cancelled = await operator.get_run(live)
        assert cancelled.status == "cancelled" and cancelled.output is None
        HELD["release"].set()  # the body in flight ends after the cancel

        async def let_go() -> bool:
            return live not in runner.worker.driving

        await eventually(let_go, what="the source's worker to let go of it")
        assert (await _done(runner, fork)).output == "slow done"
        after = await runner.get_run(live)
        assert after.status == "cancelled" and after.output is None
        assert after.error is not None and after.error["message"] == f"replaced by fork {fork}"
        assert not await _has_step(runner, live, "after")
        assert ("total", live) not in LEDGER and ("total", fork) in LEDGER


# -- the version a fork records -------------------------------------------------------------
def _versioned(version: str) -> plait.App:
    code = plait.App(f"fork-versions-{version}")

    @code.workflow(name="versioned", version=version)
    async def versioned(wf: plait.Workflow, data: Any) -> Any:
        first = await wf.do("first", lambda: f"first on {version}")
        return [first, await wf.do("second", lambda: f"second on {version}")]

    return code


async def test_a_fork_made_without_the_code_records_the_version_it_runs_on(
    engine_factory,
) -> None:
    async with engine_factory(_versioned("1")) as old:
        source = await old.start("versioned")
        assert (await _done(old, source)).version == "1"
    async with (
        engine_factory(plait.App("no-code"), workers=False) as bare,
        engine_factory(_versioned("2"), workers=False) as new,
    ):
        fork = await bare.fork(source, from_step="second")
        assert (await bare.get_run(fork)).version is None  # not known where it was made
        async with engine_factory(_versioned("2")):  # a worker deployed with version 2
            run = await _done(new, fork)
        assert run.version == "2"
        assert run.output == ["first on 1", "second on 2"]
        made_here = await new.fork(source, from_step="second")
        assert (await new.get_run(made_here)).version == "2"
        await new.cancel(made_here)
