"""Replay keeps ordinary async Python: blocks, gathers, task groups and branches give the
same steps, results and side effects whether a run goes straight through or pauses."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable
from typing import Any

import pytest

import plait
from plait.clock import VirtualClock
from plait.errors import StepError
from support.polling import eventually


def _order(log: list[str], name: str, value: Any = None) -> Any:
    log.append(name)
    return value


async def test_finally_runs_its_step_once_the_block_ends_not_at_a_pause(engine_factory) -> None:
    app = plait.App()
    log: list[str] = []

    @app.workflow
    async def locked(wf: plait.Workflow) -> str:
        await wf.do("acquire", lambda: _order(log, "acquire", 1))
        try:
            await wf.sleep("hold", 0.2)
            await wf.do("work", lambda: _order(log, "work", 2))
        finally:
            await wf.do("release", lambda: _order(log, "release", 3))
        return "done"

    async with engine_factory(app) as engine:
        assert await engine.run("locked", timeout=10) == "done"
    assert log == ["acquire", "work", "release"]


async def test_async_with_exits_once_when_its_body_ends(engine_factory) -> None:
    app = plait.App()
    log: list[str] = []

    class Lease:
        def __init__(self, wf: plait.Workflow) -> None:
            self.wf = wf

        async def __aenter__(self) -> Lease:
            await self.wf.do("take", lambda: _order(log, "take"))
            return self

        async def __aexit__(self, *exc: object) -> None:
            await self.wf.do("give back", lambda: _order(log, "give back"))

    @app.workflow
    async def leased(wf: plait.Workflow) -> str:
        async with Lease(wf):
            await wf.sleep("wait", 0.1)
            await wf.do("use", lambda: _order(log, "use"))
        return "ok"

    async with engine_factory(app) as engine:
        assert await engine.run("leased", timeout=10) == "ok"
    assert log == ["take", "use", "give back"]


async def test_except_base_exception_never_sees_a_pause(engine_factory) -> None:
    app = plait.App()
    log: list[str] = []

    @app.workflow
    async def guarded(wf: plait.Workflow) -> str:
        try:
            await wf.sleep("nap", 0.1)
        except BaseException:
            await wf.do("cleanup", lambda: _order(log, "cleanup"))
            raise
        await wf.do("after", lambda: _order(log, "after"))
        return "ok"

    async with engine_factory(app) as engine:
        assert await engine.run("guarded", timeout=10) == "ok"
        run_id = (await engine.list_runs(workflow="guarded"))[0].id
        keys = [s.key for s in await engine.get_steps(run_id)]
    assert log == ["after"]
    assert "cleanup" not in keys


async def test_return_exceptions_hands_results_not_pauses(engine_factory) -> None:
    app = plait.App()

    @app.function(retries=0)
    def boom() -> None:
        raise ValueError("boom")

    @app.workflow
    async def mixed(wf: plait.Workflow) -> list[Any]:
        got = await asyncio.gather(
            wf.sleep("nap", 0.2), wf.do("ok", lambda: 7), wf.do("bad", "boom"),
            return_exceptions=True,
        )  # fmt: skip
        out = [type(x).__name__ if isinstance(x, BaseException) else x for x in got]
        await wf.do("record", lambda data: data, out)
        return out

    async with engine_factory(app) as engine:
        assert await engine.run("mixed", timeout=10) == [None, 7, "StepError"]
        run_id = (await engine.list_runs(workflow="mixed"))[0].id
        steps = {s.key: s for s in await engine.get_steps(run_id)}
    assert steps["record"].input == [None, 7, "StepError"]


async def test_branches_that_reuse_names_keep_their_own_results(engine_factory) -> None:
    """Branch 1 finishes its fetch first, so its process step takes the first key. Every
    replay after the pause must hand each branch its own outcomes again."""
    app = plait.App()
    second_done = asyncio.Event()

    @app.function
    async def fetch(i: int) -> str:
        if i == 0:
            await asyncio.wait_for(second_done.wait(), 5)
        else:
            second_done.set()
        return f"item{i}"

    @app.function
    def process(item: str) -> str:
        return item.upper()

    @app.workflow
    async def fan(wf: plait.Workflow) -> list[str]:
        async def branch(i: int) -> str:
            item = await wf.do("fetch", "fetch", i)
            return await wf.do("process", "process", item)

        both = await asyncio.gather(branch(0), branch(1))
        await wf.sleep("pause", 0.1)
        await wf.sleep("pause again", 0.1)
        return list(both)

    async with engine_factory(app) as engine:
        assert await engine.run("fan", timeout=10) == ["ITEM0", "ITEM1"]
        run_id = (await engine.list_runs(workflow="fan"))[0].id
        steps = {s.key: s for s in await engine.get_steps(run_id)}
    # branch 1 reached process first, so it holds the first key
    assert steps["process"].input == "item1" and steps["process"].output == "ITEM1"
    assert steps["process#1"].input == "item0" and steps["process#1"].output == "ITEM0"


async def test_as_completed_over_branches_hands_each_branch_its_own_results(
    engine_factory,
) -> None:
    """``asyncio.as_completed`` puts the coroutines it is given in a set, so their tasks
    start in an order that changes from one pass to the next (it follows their memory
    addresses). Each branch sleeps, a pause, then takes a step of the same name: replay
    must still give every branch its own sleep and its own step, never a sibling's."""
    app = plait.App()
    bodies: list[int] = []

    @app.workflow
    async def fan(wf: plait.Workflow) -> list[list[int]]:
        async def branch(i: int) -> list[int]:
            await wf.sleep("wait", 0.03 * (6 - i))
            got = await wf.do("x", lambda: _order(bodies, "x", i))
            return [i, got]

        return [await done for done in asyncio.as_completed([branch(i) for i in range(6)])]

    async with engine_factory(app) as engine:
        out = await engine.run("fan", timeout=20)
    # which branch ends first follows timers that may fire together; each keeps its own
    assert sorted(out) == [[i, i] for i in range(6)]
    assert len(bodies) == 6


async def test_as_completed_over_coroutines_not_in_a_list_is_refused(engine_factory) -> None:
    """A set of coroutines (or any iterable spent by the time the tasks are made) has no
    order that replay could repeat."""
    app = plait.App()

    @app.workflow
    async def fan(wf: plait.Workflow) -> list[int]:
        async def branch(i: int) -> int:
            return await wf.do("x", lambda: i)

        return [await done for done in asyncio.as_completed({branch(i) for i in range(3)})]

    async with engine_factory(app) as engine:
        run_id = await engine.start("fan")
        run = await engine.wait(run_id, timeout=10)
    assert run.status == "failed"
    assert run.error is not None and "as_completed" in run.error["message"]
    assert "list" in run.error["message"]


async def test_a_step_reached_again_with_other_input_is_a_version_conflict(
    engine_factory,
) -> None:
    app = plait.App()
    inputs = iter([1, 2, 3, 4])

    @app.workflow
    async def drifting(wf: plait.Workflow) -> int:
        value = next(inputs)  # not deterministic: differs on the replay
        got = await wf.do("use", lambda n: n, value)
        await wf.sleep("nap", 0.1)
        return int(got)

    async with engine_factory(app) as engine:
        run_id = await engine.start("drifting")
        run = await engine.wait(run_id, timeout=10)
    assert run.status == "failed"
    assert run.error is not None and run.error["code"] == "VERSION_CONFLICT"
    assert "'use'" in run.error["message"] and "input" in run.error["message"]


async def test_a_failed_step_in_a_gather_fails_the_run_while_a_sibling_waits(
    engine_factory,
) -> None:
    app = plait.App()

    @app.function(retries=0)
    def broken() -> None:
        raise RuntimeError("broken for good")

    @app.workflow
    async def stuck(wf: plait.Workflow) -> Any:
        return await asyncio.gather(wf.wait_for_event("never"), wf.do("bad", "broken"))

    async with engine_factory(app) as engine:
        run_id = await engine.start("stuck")
        run = await engine.wait(run_id, timeout=10)
    assert run.status == "failed"
    assert run.error is not None and run.error["step"] == "bad"


async def test_task_groups_create_task_and_wait_over_steps(engine_factory) -> None:
    app = plait.App()
    log: list[str] = []

    @app.workflow
    async def grouped(wf: plait.Workflow) -> dict[str, Any]:
        async with asyncio.TaskGroup() as group:
            a = group.create_task(wf.do("a", lambda: _order(log, "a", 1)))
            b = group.create_task(wf.sleep("b", 0.1))
        c = asyncio.create_task(wf.do("c", lambda: _order(log, "c", 3)))
        done, _ = await asyncio.wait([c, asyncio.ensure_future(wf.do("d", lambda: 4))])
        firsts = [await f for f in asyncio.as_completed([wf.do("e", lambda: 5)])]
        return {"a": a.result(), "b": b.result(), "waited": sorted(t.result() for t in done),
                "firsts": firsts}  # fmt: skip

    async with engine_factory(app) as engine:
        out = await engine.run("grouped", timeout=10)
    assert out == {"a": 1, "b": None, "waited": [3, 4], "firsts": [5]}
    assert log == ["a", "c"]


async def test_a_failing_step_in_a_task_group_fails_the_run(engine_factory) -> None:
    app = plait.App()

    @app.function(retries=0)
    def broken() -> None:
        raise RuntimeError("no")

    @app.workflow
    async def group_fails(wf: plait.Workflow) -> None:
        async with asyncio.TaskGroup() as group:
            group.create_task(wf.sleep("long", 30))
            group.create_task(wf.do("bad", "broken"))

    async with engine_factory(app) as engine:
        run_id = await engine.start("group_fails")
        run = await engine.wait(run_id, timeout=10)
    assert run.status == "failed"
    assert run.error is not None and "no" in run.error["message"]


async def test_a_workflow_waiting_on_a_non_step_fails_with_a_clear_error(engine_factory) -> None:
    app = plait.App()

    @app.workflow
    async def blocked(wf: plait.Workflow) -> None:
        await asyncio.Event().wait()

    @app.workflow
    async def clocked(wf: plait.Workflow) -> None:
        await asyncio.sleep(0)  # a yield is fine
        await asyncio.sleep(1)

    async with engine_factory(app) as engine:
        run = await engine.wait(await engine.start("blocked"), timeout=10)
        assert run.status == "failed" and run.error is not None
        assert run.error["code"] == "WORKFLOW_BLOCKED"
        run = await engine.wait(await engine.start("clocked"), timeout=10)
        assert run.status == "failed" and run.error is not None
        assert "wf.sleep" in run.error["message"]


async def test_a_refusal_the_workflow_caught_still_fails_the_run(engine_factory) -> None:
    """``except Exception`` around ``asyncio.wait_for`` (a fallback for a slow service)
    catches the refusal of the clock too: the run must still fail with it, not go on
    quietly down the fallback path. So must an unordered ``as_completed``."""
    app = plait.App()

    @app.workflow
    async def wait_for(wf: plait.Workflow) -> str:
        try:
            return await asyncio.wait_for(wf.do("lookup", lambda: "price"), timeout=30)
        except Exception:
            return "fallback"

    @app.workflow
    async def timeout(wf: plait.Workflow) -> str:
        try:
            async with asyncio.timeout(30):
                return await wf.do("lookup", lambda: "price")
        except Exception:
            return "fallback"

    @app.workflow
    async def unordered(wf: plait.Workflow) -> str:
        try:
            branches = {wf.do(f"n{n}", lambda n=n: n) for n in range(2)}
            return str([await b for b in asyncio.as_completed(branches)])
        except Exception:
            return "fallback"

    async with engine_factory(app) as engine:
        for workflow, said in (
            ("wait_for", "wf.sleep"),
            ("timeout", "wf.sleep"),
            ("unordered", "in a list or tuple"),
        ):
            run = await engine.wait(await engine.start(workflow), timeout=10)
            assert run.status == "failed" and run.error is not None, workflow
            assert said in run.error["message"], workflow


async def test_step_errors_reach_the_code_in_the_order_the_run_first_saw_them(
    engine_factory,
) -> None:
    """Two failures in a gather: the one the run saw first is the one the code gets,
    on the first pass and on every replay."""
    app = plait.App()
    first_failed = asyncio.Event()

    @app.function(retries=0)
    async def fails(i: int) -> None:
        if i == 0:
            await asyncio.wait_for(first_failed.wait(), 5)
        else:
            first_failed.set()
        raise ValueError(f"failure {i}")

    @app.workflow
    async def two_failures(wf: plait.Workflow) -> str:
        try:
            await asyncio.gather(wf.do("f0", "fails", 0), wf.do("f1", "fails", 1))
        except StepError as exc:
            seen = exc.step_key
        await wf.sleep("pause", 0.1)
        return seen

    async with engine_factory(app) as engine:
        assert await engine.run("two_failures", timeout=10) == "f1"


@pytest.mark.parametrize("fire_and_forget", [True])
async def test_a_step_nobody_awaits_still_runs_before_the_run_ends(
    engine_factory, fire_and_forget: bool
) -> None:
    app = plait.App()
    log: list[str] = []

    @app.workflow
    async def forgetful(wf: plait.Workflow) -> str:
        wf.do("background", lambda: _order(log, "background"))
        return "returned"

    async with engine_factory(app) as engine:
        assert await engine.run("forgetful", timeout=10) == "returned"
    assert log == ["background"]


def _race_app(event_first: bool) -> plait.App:
    """An event against a one-second deadline (``asyncio.wait``, first completed), the
    two tasks made in either order."""
    app = plait.App("race")

    @app.workflow(name="race")
    async def race(wf: plait.Workflow) -> Any:
        def event() -> asyncio.Task[Any]:
            return asyncio.create_task(wf.wait_for_event("go"))

        def deadline() -> asyncio.Task[Any]:
            return asyncio.create_task(wf.sleep("deadline", 1.0))

        first, second = (event(), deadline()) if event_first else (deadline(), event())
        waiting = first if event_first else second
        done, pending = await asyncio.wait([first, second], return_when=asyncio.FIRST_COMPLETED)
        for task in pending:
            task.cancel()
        return waiting.result() if waiting in done else "timeout"

    return app


@pytest.mark.parametrize("event_first", [True, False], ids=["event-made-first", "sleep-first"])
@pytest.mark.parametrize(("sent_after", "wins"), [(1.5, "timeout"), (0.5, "on time")])
async def test_outcomes_a_pass_finds_at_once_come_in_the_order_they_came_about(
    engine_factory, event_first: bool, sent_after: float, wins: str
) -> None:
    """No worker ran while the deadline came due and the event arrived (sent by a
    process that only starts and sends, as the HTTP server). The worker that comes back
    finds both over: the one that came first wins the race, as in a process that never
    stopped, whichever task the workflow made first."""
    app = _race_app(event_first)
    began = time.time()
    async with engine_factory(app, clock=VirtualClock(began)) as engine:
        run_id = await engine.start("race")

        async def both_wait() -> bool:
            steps = {s.key: s.status for s in await engine.get_steps(run_id)}
            return steps.get("deadline") == "scheduled" and steps.get("__event:go") == "scheduled"

        await eventually(both_wait, what="the event and the deadline both waited on")
    async with engine_factory(app, workers=False, clock=VirtualClock(began + sent_after)) as sender:
        await sender.send_event(run_id, "go", "on time")
    async with engine_factory(app, clock=VirtualClock(began + 2.0)) as engine:
        run = await engine.wait(run_id, timeout=10)
    assert (run.status, run.output) == ("completed", wins)


async def test_timers_due_together_are_seen_in_the_order_they_came_due(
    engine_factory,
) -> None:
    """A run whose sleeps all came due while no worker ran (a deploy, a crash) sees
    them end in the order of their times, not in the order it called them."""
    app = plait.App()

    @app.workflow
    async def first_past(wf: plait.Workflow) -> list[str]:
        async def nap(name: str, seconds: float) -> str:
            await wf.sleep(name, seconds)
            return name

        naps = [nap("long", 0.9), nap("mid", 0.6), nap("short", 0.3)]
        return [await nap for nap in asyncio.as_completed(naps)]

    async def all_asleep(engine: plait.Engine, run_id: str) -> bool:
        steps = {s.key: s.status for s in await engine.get_steps(run_id)}
        return all(steps.get(k) == "scheduled" for k in ("long", "mid", "short"))

    # a clock that stands still while the run goes to sleep, however slow the machine,
    # and one past every timer for the engine that comes after the deploy
    began = time.time()
    async with engine_factory(app, clock=VirtualClock(began)) as engine:
        run_id = await engine.start("first_past")
        await eventually(lambda: all_asleep(engine, run_id), what="three sleeps scheduled")
    async with engine_factory(app, clock=VirtualClock(began + 1.0)) as engine:
        run = await engine.wait(run_id, timeout=10)
        assert (run.status, run.output) == ("completed", ["short", "mid", "long"])


# the workflow's loop catches GeneratorExit too, so Python says so when its ended pass's
# coroutine is closed: the user's code refuses to close, as it would under asyncio
@pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")
async def test_code_that_catches_everything_around_a_pause_waits_like_a_program(
    engine_factory,
) -> None:
    """A retry loop that catches BaseException around a wait: a program would just wait
    for the event. The end of each pass cancels the wait, the loop catches that and
    calls again; that call must leave the loop blocked, not spinning the process's event
    loop for ever (which would stop every run of the process)."""
    app = plait.App()

    @app.workflow
    async def stubborn(wf: plait.Workflow) -> Any:
        while True:
            try:
                wf.now()  # a recorded value, taken again by the loop as well
                wf.uuid()
                await wf.set_value("tries", 1)
                return await wf.wait_for_event("go")
            except BaseException:  # what the test is about
                pass

    async with engine_factory(app) as engine:
        run_id = await engine.start("stubborn")

        async def waiting() -> bool:
            return any(s.key == "__event:go" for s in await engine.get_steps(run_id))

        await eventually(waiting, what="the run waiting for its event")
        assert await engine.send_event(run_id, "go", "payload")
        run = await engine.wait(run_id, timeout=10)
        assert (run.status, run.output) == ("completed", "payload")


async def test_wf_logger_is_silent_while_a_pass_unwinds(engine_factory) -> None:
    """The end of a pass runs ``finally`` blocks and hands ``except BaseException`` a
    cancel at every pause: nothing the code logs then is logged, so each line comes once
    per run, when the run really gets there."""
    app = plait.App()
    lines: list[str] = []

    class Keep(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            lines.append(record.getMessage())

    @app.workflow
    async def logged(wf: plait.Workflow) -> str:
        try:
            await wf.sleep("nap", 0.05)
            await wf.sleep("nap 2", 0.05)
        except BaseException as exc:
            wf.logger.error("the block failed with %s", type(exc).__name__)
            raise
        finally:
            wf.logger.warning("released the lock")
        return "ok"

    logger = logging.getLogger("plait.workflow.logged")
    keep = Keep()
    logger.addHandler(keep)
    try:
        async with engine_factory(app) as engine:
            run = await engine.wait(await engine.start("logged"), timeout=10)
            assert (run.status, run.output) == ("completed", "ok")
    finally:
        logger.removeHandler(keep)
    assert lines == ["released the lock"]


async def test_an_async_generator_left_with_break_is_closed_in_the_workflow(
    engine_factory,
) -> None:
    """Leaving ``async for`` with ``break`` closes the generator soon after, and its
    ``finally`` may take a step: as under asyncio, that happens in the workflow, at the
    same point on every pass, so the workflow's own later step of the same name keeps
    its own result after a replay."""
    app = plait.App()

    @app.workflow
    async def numbered(wf: plait.Workflow) -> list[Any]:
        notes = []

        async def numbers() -> Any:
            try:
                for i in range(5):
                    yield await wf.do("n", lambda i=i: f"n{i}")
            finally:
                notes.append(await wf.do("audit", lambda: "from the generator"))

        got = []
        async for x in numbers():
            got.append(x)
            if len(got) == 2:
                break
        await wf.do("mid", lambda: "mid")
        await wf.sleep("nap", 0.05)  # the rest runs on a replay
        mine = await wf.do("audit", lambda: "from the workflow")
        return [got, mine, notes]

    async with engine_factory(app) as engine:
        run = await engine.wait(await engine.start("numbered"), timeout=10)
        assert (run.status, run.output) == (
            "completed",
            [["n0", "n1"], "from the workflow", ["from the generator"]],
        )


async def test_nested_async_generators_close_in_the_order_asyncio_closes_them(
    engine_factory,
) -> None:
    """Generators left behind are closed in the order asyncio closes them: the same
    program on a plain asyncio loop gives the order expected, and under plait the step
    each ``finally`` takes gets the key it would get in a program that never stops, on
    the first pass and on the replay."""

    async def program(take: Any) -> list[str]:
        order: list[str] = []

        async def inner() -> Any:
            try:
                for i in range(5):
                    yield i
            finally:
                order.append(await take("inner"))

        async def outer() -> Any:
            try:
                async for x in inner():
                    yield x
            finally:
                order.append(await take("outer"))

        async for x in outer():
            if x == 1:
                break
        order.append(await take("body"))
        for _ in range(10):
            await asyncio.sleep(0)
        return order

    async def plain(name: str) -> str:
        await asyncio.sleep(0)
        return name

    expected = await program(plain)
    assert expected == ["body", "outer", "inner"]
    app = plait.App()

    @app.workflow
    async def nested(wf: plait.Workflow) -> list[Any]:
        order = await program(lambda name: wf.do("closed", lambda: name))
        await wf.sleep("nap", 0.05)  # the rest runs on a replay
        return [order, await wf.do("closed", lambda: "after")]

    async with engine_factory(app) as engine:
        run_id = await engine.start("nested")
        run = await engine.wait(run_id, timeout=10)
        assert (run.status, run.output) == ("completed", [expected, "after"])
        keys = {s.key: s.output for s in await engine.get_steps(run_id)}
        taken = [keys["closed"], *(keys[f"closed#{n}"] for n in range(1, len(expected) + 1))]
        assert taken == [*expected, "after"]


async def test_a_wait_the_workflow_cancelled_takes_nothing_sent_later(engine_factory) -> None:
    """A cancelled wait is over, as in plain asyncio: the event or the decision sent
    after it goes to the wait for the same name that is still open, never to the one the
    workflow gave up (whose replay would take it and throw it away)."""
    app = plait.App()

    async def lost_race(wf: plait.Workflow, wait: Any) -> str:
        first = asyncio.ensure_future(wait())
        deadline = asyncio.ensure_future(wf.sleep("deadline", 0.05))
        done, pending = await asyncio.wait({first, deadline}, return_when=asyncio.FIRST_COMPLETED)
        for task in pending:
            task.cancel()
        return "in time" if first in done else "too late"

    @app.workflow
    async def pinged(wf: plait.Workflow) -> list[Any]:
        first = await lost_race(wf, lambda: wf.wait_for_event("ping"))
        return [first, await wf.wait_for_event("ping", timeout="30s")]

    @app.workflow
    async def approved(wf: plait.Workflow) -> list[Any]:
        first = await lost_race(wf, lambda: wf.approval("ok"))
        second = await wf.approval("ok", expires="30s")
        return [first, second.decided_by]

    @app.workflow
    async def held(wf: plait.Workflow) -> list[Any]:
        first = await lost_race(wf, lambda: wf.approval("ok"))
        await wf.wait_for_event("nap over")
        second = await wf.approval("ok", expires="30s")
        return [first, second.decided_by]

    async def second_open(engine: plait.Engine, run_id: str, key: str) -> bool:
        return any(s.key == key and s.status != "failed" for s in await engine.get_steps(run_id))

    async with engine_factory(app) as engine:
        run_id = await engine.start("pinged")
        await eventually(
            lambda: second_open(engine, run_id, "__event:ping#1"), what="the second wait"
        )
        assert await engine.send_event(run_id, "ping", "hello")
        run = await engine.wait(run_id, timeout=10)
        assert (run.status, run.output) == ("completed", ["too late", "hello"])
        run_id = await engine.start("approved")
        await eventually(
            lambda: second_open(engine, run_id, "__approval:ok#1"), what="the second gate"
        )
        await engine.approve(run_id, "ok", None, decided_by="dana")
        run = await engine.wait(run_id, timeout=10)
        assert (run.status, run.output) == ("completed", ["too late", "dana"])
        gates = [(a.key, a.status) for a in await engine.get_history(run_id)]
        assert ("__approval:ok", "failed") in gates  # the gate given up: its attempt closed
        assert ("__approval:ok#1", "succeeded") in gates
        # sent while no gate of the name is open (only the one given up): held for the next
        run_id = await engine.start("held")
        await eventually(
            lambda: second_open(engine, run_id, "__event:nap over"), what="the run napping"
        )
        assert (await engine.approve(run_id, "ok", None, decided_by="dana")).outcome == "held"
        await engine.send_event(run_id, "nap over")
        run = await engine.wait(run_id, timeout=10)
        assert (run.status, run.output) == ("completed", ["too late", "dana"])


async def test_a_retried_race_leaves_the_event_to_the_wait_still_open(engine_factory) -> None:
    """A retry reopens the wait the workflow gave up, so that the race runs again. An
    event sent before the retry must not go to that wait when the replay gives it up
    again (as it must: its deadline won before): it goes to the wait still open."""
    app = plait.App()
    tries: list[int] = []

    def flaky() -> str:
        tries.append(1)
        if len(tries) == 1:
            raise RuntimeError("not yet")
        return "fixed"

    @app.workflow
    async def race_then_fail(wf: plait.Workflow) -> list[Any]:
        ping = asyncio.ensure_future(wf.wait_for_event("ping"))
        deadline = asyncio.ensure_future(wf.sleep("deadline", 0.05))
        done, pending = await asyncio.wait({ping, deadline}, return_when=asyncio.FIRST_COMPLETED)
        for task in pending:
            task.cancel()
        first = "in time" if ping in done else "too late"
        await wf.do("flaky", flaky)
        return [first, await wf.wait_for_event("ping", timeout="3s")]

    async with engine_factory(app) as engine:
        run = await engine.wait(await engine.start("race_then_fail"), timeout=10)
        assert run.status == "failed"
    async with engine_factory(app, workers=False) as engine:  # the event is in before a pass
        await engine.retry(run.id)
        await engine.send_event(run.id, "ping", "hello")
    async with engine_factory(app) as engine:
        run = await engine.wait(run.id, timeout=10)
        assert (run.status, run.output) == ("completed", ["too late", "hello"])
        waits = {s.key: s.status for s in await engine.get_steps(run.id)}
        assert waits["__event:ping"] == "failed"  # given up again, with nothing taken
        assert waits["__event:ping#1"] == "succeeded"


async def test_an_event_a_wait_given_up_in_the_same_pass_found_is_kept(engine_factory) -> None:
    """Two outcomes ready in one pass: the deadline that wins the race, and an event for
    the wait it beats. The wait given up takes nothing: the event waits for the next
    wait of its name."""
    app = plait.App()

    @app.workflow
    async def deadline_first(wf: plait.Workflow) -> list[Any]:
        first = await _race_a_deadline_already_over(wf, lambda: wf.wait_for_event("ping"))
        return [first, await wf.wait_for_event("ping", timeout="3s")]

    async with engine_factory(app) as engine:
        run = await _run_pinged_before_its_first_pass(engine, "deadline_first")
        assert (run.status, run.output) == ("completed", ["too late", "hello"])


async def test_an_event_put_back_reaches_a_wait_that_found_nothing_in_that_pass(
    engine_factory,
) -> None:
    """The wait given up found the event first, so the other wait of the name, called in
    the same pass, found nothing and paused. The event it gets back must not sit unseen
    until something else wakes the run: the run takes another pass at once."""
    app = plait.App()

    @app.workflow
    async def keeper_paused(wf: plait.Workflow) -> list[Any]:
        keeper: list[asyncio.Future[Any]] = []

        def keep() -> None:
            keeper.append(asyncio.ensure_future(wf.wait_for_event("ping")))

        first = await _race_a_deadline_already_over(wf, lambda: wf.wait_for_event("ping"), keep)
        return [first, await keeper[0]]

    async with engine_factory(app) as engine:
        run = await _run_pinged_before_its_first_pass(engine, "keeper_paused")
        assert (run.status, run.output) == ("completed", ["too late", "hello"])


async def test_a_held_decision_a_gate_given_up_in_the_same_pass_found_is_kept(
    engine_factory,
) -> None:
    """As for events: a gate given up before its outcome reaches the workflow leaves the
    decision held for it to the next gate of its name."""
    app = plait.App()

    @app.workflow
    async def gate_after_deadline(wf: plait.Workflow) -> list[Any]:
        first = await _race_a_deadline_already_over(wf, lambda: wf.approval("ok"))
        second = await wf.approval("ok")
        return [first, second.decided_by]

    async def decide(run_id: str) -> None:
        held = await engine.approve(run_id, "ok", None, decided_by="dana")
        assert held.outcome == "held"

    async with engine_factory(app) as engine:
        run = await _run_given_before_its_first_pass(engine, "gate_after_deadline", decide)
        assert (run.status, run.output) == ("completed", ["too late", "dana"])


async def _race_a_deadline_already_over(
    wf: plait.Workflow,
    wait: Callable[[], Awaitable[Any]],
    beside: Callable[[], None] | None = None,
) -> str:
    """Race the wait ``wait`` makes against a sleep already over, called first so that
    its outcome is delivered first: the wait is given up, whatever it found. ``beside``
    starts other waits in the same pass, after both."""
    deadline = asyncio.ensure_future(wf.sleep("deadline", 0))
    waiting = asyncio.ensure_future(wait())
    if beside is not None:
        beside()
    done, pending = await asyncio.wait({waiting, deadline}, return_when=asyncio.FIRST_COMPLETED)
    for task in pending:
        task.cancel()
    return "in time" if waiting in done else "too late"


async def _run_given_before_its_first_pass(
    engine: plait.Engine, workflow: str, give: Callable[[str], Awaitable[Any]]
) -> plait.Run:
    """Start ``workflow`` late enough for ``give`` (an event, a decision) to be in
    before its first pass, and wait for it to end."""
    run_id = await engine.start(workflow, delay=0.3)
    await give(run_id)
    return await engine.wait(run_id, timeout=10)


async def _run_pinged_before_its_first_pass(engine: plait.Engine, workflow: str) -> plait.Run:
    return await _run_given_before_its_first_pass(
        engine, workflow, lambda run_id: engine.send_event(run_id, "ping", "hello")
    )


async def test_a_wait_the_workflow_cancels_does_not_hold_the_run_open(engine_factory) -> None:
    """Racing a call against a deadline and cancelling the loser is plain asyncio: once
    the workflow returns, the run ends, though the cancelled sleep or event wait never
    will. The cancelled wait is recorded as cancelled, not left waiting."""
    app = plait.App()

    @app.workflow
    async def call_with_deadline(wf: plait.Workflow) -> str:
        call = asyncio.ensure_future(wf.do("call", lambda: "answer"))
        deadline = asyncio.ensure_future(wf.sleep("deadline", "1h"))
        done, pending = await asyncio.wait({call, deadline}, return_when=asyncio.FIRST_COMPLETED)
        for task in pending:
            task.cancel()
        return call.result() if call in done else "timed out"

    @app.workflow
    async def event_or_deadline(wf: plait.Workflow) -> str:
        event = asyncio.ensure_future(wf.wait_for_event("approved"))
        deadline = asyncio.ensure_future(wf.sleep("deadline", 0.1))
        done, pending = await asyncio.wait({event, deadline}, return_when=asyncio.FIRST_COMPLETED)
        for task in pending:
            task.cancel()
        return "approved" if event in done else "timed out"

    @app.workflow
    async def cleanup_on_cancel(wf: plait.Workflow) -> str:
        async def nap() -> None:
            try:
                await wf.sleep("nap", "1h")
            finally:
                await wf.do("after nap", lambda: "tidied")

        napping = asyncio.ensure_future(nap())
        await wf.do("work", lambda: 1)
        napping.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await napping
        return "done"

    async with engine_factory(app) as engine:
        for workflow, output, abandoned in (
            ("call_with_deadline", "answer", "deadline"),
            ("event_or_deadline", "timed out", "__event:approved"),
            ("cleanup_on_cancel", "done", "nap"),
        ):
            run_id = await engine.start(workflow)
            run = await engine.wait(run_id, timeout=10)
            assert (run.status, run.output) == ("completed", output), workflow
            steps = {s.name: s for s in await engine.get_steps(run_id)}
            assert steps[abandoned].status == "failed", workflow
            assert steps[abandoned].error is not None
            assert steps[abandoned].error["message"] == "cancelled"
        assert steps["after nap"].output == "tidied"


async def test_a_cancelled_wait_alone_is_a_blocked_workflow(engine_factory) -> None:
    """A workflow whose only step wait it cancelled itself, then waits on something that
    is not a step, can never go on: it fails saying so, rather than run forever."""
    app = plait.App()

    @app.workflow
    async def stuck(wf: plait.Workflow) -> None:
        nap = asyncio.ensure_future(wf.sleep("nap", "1h"))
        await wf.do("first", lambda: 1)
        nap.cancel()
        await asyncio.get_running_loop().create_future()

    async with engine_factory(app) as engine:
        run_id = await engine.start("stuck")
        run = await engine.wait(run_id, timeout=10)
    assert run.status == "failed"
    assert run.error is not None and run.error["code"] == "WORKFLOW_BLOCKED"


async def test_new_steps_after_a_replayed_race_start_while_other_steps_run(
    engine_factory,
) -> None:
    """A replay hands back the outcomes the workflow saw before, the race's loser (which
    it cancels again) among them, before it starts steps the run never recorded. Once
    that is done, a new step starts at once, though another new step's body still runs:
    here the long step waits for the second of a chain of quick steps beside it."""
    app = plait.App("race-replay")
    second_ran = asyncio.Event()

    @app.function
    async def quick(n: int) -> int:
        if n == 2:
            second_ran.set()
        return n

    @app.function
    async def slow() -> str:
        await asyncio.sleep(60)
        return "slow"

    @app.function
    async def long() -> bool:
        try:
            await asyncio.wait_for(second_ran.wait(), 10)
        except TimeoutError:
            return False
        return True

    @app.workflow
    async def w(wf: plait.Workflow) -> Any:
        loser = asyncio.ensure_future(wf.do("slow", slow))
        winner = asyncio.ensure_future(wf.do("quick", quick, 0))
        await asyncio.wait([loser, winner], return_when=asyncio.FIRST_COMPLETED)
        loser.cancel()
        await wf.wait_for_event("go")

        async def chain() -> list[int]:
            return [await wf.do("q1", quick, 1), await wf.do("q2", quick, 2)]

        return await asyncio.gather(wf.do("long", long), chain())

    async with engine_factory(app) as engine:
        run_id = await engine.start(w)

        async def waits() -> bool:
            steps = {s.key: s.status for s in await engine.get_steps(run_id)}
            # the loser is recorded as the workflow left it: cut, its attempt cancelled
            return steps.get("__event:go") == "scheduled" and steps.get("slow") == "failed"

        await eventually(waits, what="the race over and the event waited for")
        await engine.send_event(run_id, "go")
        run = await engine.wait(run_id, timeout=30)
    assert (run.status, run.output) == ("completed", [True, [1, 2]]), run.error
