"""Step semantics of code workflows: names, ordinals, invocation ids, retries, errors."""

from __future__ import annotations

import asyncio
import time
import uuid
from typing import Any

import pytest
from pydantic import BaseModel

import plait
from plait import ids
from support.counter import Counter
from support.polling import eventually


def make_app(counter: Counter) -> plait.App:
    app = plait.App("steps")

    @app.function
    async def add(data: dict) -> int:
        counter.hit("add", data)
        return data["a"] + data["b"]

    @app.function
    def shout(data: str, ctx: plait.StepContext) -> dict:
        counter.hit("shout", ctx.invocation_id)
        return {"text": data.upper(), "attempt": ctx.attempt, "key": ctx.step_key}

    @app.workflow
    async def forms(wf: plait.Workflow, data: dict) -> dict:
        by_name = await wf.do("add", "add", {"a": 1, "b": 2})
        by_object = await wf.do("add", add, {"a": 3, "b": 4})
        closure = await wf.do("sum", lambda: by_name + by_object)
        async_closure = await wf.do("async sum", _async_plus(closure))
        loud = await wf.do("shout", shout, "hi")
        return {
            "name": by_name,
            "object": by_object,
            "closure": closure,
            "async": async_closure,
            "loud": loud,
        }

    return app


def _async_plus(n: int):
    async def inner() -> int:
        await asyncio.sleep(0)
        return n + 1

    return inner


async def test_do_by_name_object_and_closure(engine_factory) -> None:
    counter = Counter()
    app = make_app(counter)
    async with engine_factory(app) as engine:
        out = await engine.run("forms", {}, timeout=10)
        assert out["name"] == 3 and out["object"] == 7 and out["closure"] == 10
        assert out["async"] == 11
        assert out["loud"]["text"] == "HI" and out["loud"]["attempt"] == 1
        run = (await engine.list_runs(workflow="forms"))[0]
        steps = await engine.get_steps(run.id)
        assert [s.key for s in steps] == ["add", "add#1", "sum", "async sum", "shout"]
        assert all(s.status == "succeeded" and s.attempts == 1 for s in steps)
        assert [s.function for s in steps] == ["add", "add", None, None, "shout"]
        for s in steps:
            assert s.invocation_id == str(uuid.uuid5(ids.NAMESPACE, f"{run.id}:{s.key}"))
        assert counter["add"] == 2 and counter["shout"] == 1
        assert counter.calls[-1][1] == steps[-1].invocation_id
        history = await engine.get_history(run.id)
        assert [(a.key, a.attempt, a.status) for a in history] == [
            (s.key, 1, "succeeded") for s in steps
        ]


async def test_a_data_parameter_with_a_default_gets_the_data_given(engine_factory) -> None:
    """``lambda order=None: ...`` (or a function whose data parameter has a default) is
    called with the data a step gives it, and keeps its default when it gives none: the
    data was dropped before, silently, for any parameter with a default."""
    app = plait.App()

    @app.function
    def tally(data: int = 5) -> int:
        return data * 2

    async def echo(order: dict[str, Any] | None = None) -> Any:
        return order

    @app.workflow
    async def defaults(wf: plait.Workflow) -> list[Any]:
        return [
            await wf.do("given", lambda order=None: order, {"id": 1}),
            await wf.do("not given", lambda order="none": order),
            await wf.do("async given", echo, {"id": 2}),
            await wf.do("tally given", "tally", 4),
            await wf.do("tally not given", "tally"),
        ]

    async with engine_factory(app) as engine:
        out = await engine.run("defaults", timeout=10)
    assert out == [{"id": 1}, "none", {"id": 2}, 8, 10]


async def test_ordinals_in_a_loop_and_replay_runs_nothing_twice(engine_factory) -> None:
    counter = Counter()
    app = plait.App()

    @app.function
    def fetch(i: int) -> int:
        counter.hit("fetch", i)
        return i * 10

    @app.workflow
    async def loop(wf: plait.Workflow, n: int) -> list[int]:
        out = []
        for i in range(n):
            out.append(await wf.do("fetch", fetch, i))
        await wf.sleep("pause", 0.05)  # forces a second pass that replays every fetch
        out.append(await wf.do("fetch", fetch, 99))
        return out

    async with engine_factory(app) as engine:
        run_id = await engine.start("loop", 3)
        run = await engine.wait(run_id, timeout=10)
        assert run.output == [0, 10, 20, 990]
        keys = [s.key for s in await engine.get_steps(run_id)]
        assert keys == ["fetch", "fetch#1", "fetch#2", "pause", "fetch#3"]
        assert counter["fetch"] == 4
        invocations = {s.invocation_id for s in await engine.get_steps(run_id)}
        assert len(invocations) == 5


async def test_step_name_that_is_not_a_string(engine_factory) -> None:
    app = plait.App()

    @app.workflow
    async def bad(wf: plait.Workflow, data: None) -> None:
        await wf.do(42, lambda: 1)  # type: ignore[arg-type]

    async with engine_factory(app) as engine:
        with pytest.raises(plait.WorkflowFailedError) as info:
            await engine.run("bad", timeout=10)
        error = info.value.run.error
        assert error["type"] == "TypeError"
        assert "step name must be a string" in error["message"] and "42" in error["message"]
        assert await engine.get_steps(info.value.run.id) == []


@pytest.mark.parametrize(
    "call",
    [
        lambda wf: wf.do("fetch#1", lambda: 1),
        lambda wf: wf.do("charge:on_error", lambda: 1),
        lambda wf: wf.do("__suspend:x", lambda: 1),
        lambda wf: wf.sleep("nap#2", 0),
        lambda wf: wf.suspend("review#1"),
    ],
    ids=["ordinal", "on_error", "reserved prefix", "sleep ordinal", "suspend ordinal"],
)
async def test_a_name_shaped_like_a_generated_key_is_refused(engine_factory, call) -> None:
    """A step named like the key of another step would be handed that step's result."""
    counter = Counter()
    app = plait.App()

    @app.workflow
    async def clash(wf: plait.Workflow, data: None) -> int:
        first = await wf.do("fetch", lambda: counter.hit("fetch"))
        await call(wf)
        return first

    async with engine_factory(app) as engine:
        with pytest.raises(plait.WorkflowFailedError) as info:
            await engine.run("clash", timeout=10)
        error = info.value.run.error
        assert error["type"] == "ValueError"
        assert "generates" in error["message"]
        assert [s.key for s in await engine.get_steps(info.value.run.id)] == ["fetch"]


async def test_unknown_workflow_name(engine_factory) -> None:
    app = plait.App()

    @app.workflow
    async def known(wf: plait.Workflow, data: None) -> None:
        return None

    async with engine_factory(app) as engine:
        with pytest.raises(plait.WorkflowNotFoundError, match="'nope'"):
            await engine.start("nope")
        assert await engine.list_runs() == []


async def test_closure_returning_an_unencodable_value_fails_clearly(engine_factory) -> None:
    counter = Counter()
    app = plait.App()

    class Handle:
        pass

    @app.workflow
    async def opaque(wf: plait.Workflow, data: None) -> None:
        def make() -> object:
            counter.hit("make")
            return Handle()

        await wf.do("make handle", make, retries=3)

    async with engine_factory(app) as engine:
        with pytest.raises(plait.WorkflowFailedError) as info:
            await engine.run("opaque", timeout=10)
        run = info.value.run
        assert run.error["code"] == "NOT_JSON"
        assert "step 'make handle'" in run.error["message"] and "Handle" in run.error["message"]
        (step,) = await engine.get_steps(run.id)
        assert step.status == "failed" and step.attempts == 1
        assert counter["make"] == 1  # not retried: the same body would return one again


async def test_non_json_input_and_output_are_refused(engine_factory) -> None:
    app = plait.App()

    @app.workflow
    async def out(wf: plait.Workflow, data: None) -> object:
        return object()

    async with engine_factory(app) as engine:
        with pytest.raises(plait.NotJSONError, match="input of workflow 'out'"):
            await engine.start("out", {"handle": object()})
        with pytest.raises(plait.WorkflowFailedError, match="output of workflow 'out'"):
            await engine.run("out", timeout=10)


@pytest.mark.parametrize("retries", [0, 1, 2])
async def test_retries_give_n_plus_one_attempts(engine_factory, retries: int) -> None:
    counter = Counter()
    app = plait.App()

    @app.function(retries=retries, retry_delay=0)
    def always_fails(data: None, ctx: plait.StepContext) -> None:
        counter.hit("fail", (ctx.attempt, ctx.invocation_id))
        raise RuntimeError(f"attempt {ctx.attempt} failed")

    @app.workflow
    async def fails(wf: plait.Workflow, data: None) -> None:
        await wf.do("try", always_fails)

    async with engine_factory(app) as engine:
        with pytest.raises(plait.WorkflowFailedError) as info:
            await engine.run("fails", timeout=10)
        run = info.value.run
        assert counter["fail"] == retries + 1
        attempts = [a for a, _ in (c[1] for c in counter.calls)]
        assert attempts == list(range(1, retries + 2))
        assert len({inv for _, inv in (c[1] for c in counter.calls)}) == 1
        (step,) = await engine.get_steps(run.id)
        assert step.status == "failed" and step.attempts == retries + 1
        assert step.retries == retries
        history = await engine.get_history(run.id)
        assert [(a.attempt, a.status) for a in history] == [
            (n, "failed") for n in range(1, retries + 2)
        ]
        assert run.error["message"] == f"attempt {retries + 1} failed"
        assert run.error["step"] == "try"


@pytest.mark.parametrize("queued", [False, True], ids=["inline", "queued"])
async def test_a_body_raising_cancelled_error_itself_fails_its_attempt(
    engine_factory, queued: bool
) -> None:
    """A client library whose own inner task was cancelled raises CancelledError out of
    the body while nobody cancelled the step: an ordinary failure that uses up an
    attempt, not an interruption to run again at once (which would never end)."""
    counter = Counter()
    app = plait.App()

    @app.function(retries=1, retry_delay=0, queued=queued)
    async def client(data: None, ctx: plait.StepContext) -> None:
        counter.hit("call", ctx.attempt)
        raise asyncio.CancelledError("inner request cancelled")

    @app.workflow
    async def alone(wf: plait.Workflow, data: None) -> None:
        await wf.do("call", client)

    @app.workflow
    async def gathered(wf: plait.Workflow, data: None) -> list[str]:
        results = await asyncio.gather(
            wf.do("call", client), wf.do("other", lambda: 2), return_exceptions=True
        )
        return [type(r).__name__ for r in results]

    async with engine_factory(app) as engine:
        with pytest.raises(plait.WorkflowFailedError) as info:
            await engine.run("alone", timeout=10)
        assert [c[1] for c in counter.calls] == [1, 2]
        assert info.value.run.error["type"] == "CancelledError"
        assert info.value.run.error["message"] == "inner request cancelled"
        counter.calls.clear()
        assert await engine.run("gathered", timeout=10) == ["StepError", "int"]
        assert [c[1] for c in counter.calls] == [1, 2]


async def test_step_options_on_do_win_over_function_options(engine_factory) -> None:
    counter = Counter()
    app = plait.App()

    @app.function(retries=5, retry_delay=0)
    def flaky(data: None, ctx: plait.StepContext) -> int:
        counter.hit("flaky")
        raise RuntimeError("no")

    @app.workflow
    async def wins(wf: plait.Workflow, data: None) -> None:
        await wf.do("once", flaky, retries=0)

    async with engine_factory(app) as engine:
        with pytest.raises(plait.WorkflowFailedError):
            await engine.run("wins", timeout=10)
        assert counter["flaky"] == 1


async def test_retry_waits_on_a_durable_timer(engine_factory) -> None:
    counter = Counter()
    app = plait.App()

    @app.function(retries=1, retry_delay="300ms")
    def flaky(data: None, ctx: plait.StepContext) -> int:
        counter.hit("flaky")
        if ctx.attempt == 1:
            raise RuntimeError("transient")
        return ctx.attempt

    @app.workflow
    async def w(wf: plait.Workflow, data: None) -> int:
        return await wf.do("flaky", flaky)

    async with engine_factory(app) as engine:
        run_id = await engine.start("w")

        async def waiting() -> bool:
            steps = await engine.get_steps(run_id)
            return bool(steps) and steps[0].status == "scheduled"

        await eventually(waiting, what="the step to wait for its retry")
        (step,) = await engine.get_steps(run_id)
        assert step.wake_at is not None and step.attempts == 1
        run = await engine.get_run(run_id)
        assert run.status == "running"
        run = await engine.wait(run_id, timeout=10)
        assert run.status == "completed" and run.output == 2
        history = await engine.get_history(run_id)
        gap = (history[1].started_at - history[0].finished_at).total_seconds()
        assert gap >= 0.29


async def test_timeout_fails_the_attempt(engine_factory) -> None:
    counter = Counter()
    app = plait.App()

    @app.function(timeout="100ms", retries=1, retry_delay=0)
    async def slow(data: None, ctx: plait.StepContext) -> str:
        counter.hit("slow")
        if ctx.attempt == 1:
            await asyncio.sleep(30)
        return "fast enough"

    @app.workflow
    async def w(wf: plait.Workflow, data: None) -> str:
        return await wf.do("slow", slow)

    async with engine_factory(app) as engine:
        assert await engine.run("w", timeout=10) == "fast enough"
        run = (await engine.list_runs())[0]
        history = await engine.get_history(run.id)
        assert [a.status for a in history] == ["failed", "succeeded"]
        assert history[0].error["code"] == "STEP_TIMEOUT"
        assert "timed out after 0.1s" in history[0].error["message"]


@pytest.mark.parametrize("queued", [False, True])
async def test_a_body_that_swallows_its_timeout_still_times_out(engine_factory, queued) -> None:
    """A body that catches the cancel of its deadline and returns later: the attempt
    timed out all the same, its late result discarded, and what it wrote to a stream
    after the deadline is taken back with the attempt."""
    app = plait.App()

    @app.function(timeout="100ms", retries=0, queued=queued)
    async def stubborn(data: None, ctx: plait.StepContext) -> str:
        try:
            await asyncio.sleep(30)
        except asyncio.CancelledError:
            await ctx.stream("out").write("late")
        return "late result"

    @app.workflow
    async def w(wf: plait.Workflow, data: None) -> str:
        return await wf.do("s", stubborn)

    async with engine_factory(app, poll_interval=0.2) as engine:
        with pytest.raises(plait.WorkflowFailedError) as info:
            await engine.run("w", timeout=20)
        run = info.value.run
        (attempt,) = await engine.get_history(run.id)
        assert attempt.status == "failed" and attempt.output is None
        assert attempt.error["code"] == "STEP_TIMEOUT"
        assert await engine.read_stream(run.id, "out", settled_only=True) == [
            e for e in await engine.read_stream(run.id, "out") if e.kind == "end"
        ]


async def test_a_timeout_error_of_the_body_itself_is_not_a_step_timeout(engine_factory) -> None:
    app = plait.App()

    @app.function(timeout="10s", retries=0)
    async def calls_out(data: None) -> None:
        raise TimeoutError("the payment provider did not answer")

    @app.workflow
    async def w(wf: plait.Workflow, data: None) -> None:
        await wf.do("call", calls_out)

    async with engine_factory(app) as engine:
        with pytest.raises(plait.WorkflowFailedError) as info:
            await engine.run("w", timeout=10)
        (attempt,) = await engine.get_history(info.value.run.id)
    assert attempt.error["type"] == "TimeoutError"
    assert attempt.error.get("code") != "STEP_TIMEOUT"
    assert "did not answer" in attempt.error["message"]


async def test_a_sync_body_past_its_timeout_ends_before_the_next_attempt_starts(
    engine_factory,
) -> None:
    """A thread cannot be stopped: the attempt times out once the body returns, its
    result is discarded, and the next attempt never runs beside it."""
    spans: list[tuple[int, float, float]] = []
    app = plait.App()

    @app.function(timeout="100ms", retries=1, retry_delay=0)
    def blocking(data: None, ctx: plait.StepContext) -> str:
        started = time.monotonic()
        if ctx.attempt == 1:
            time.sleep(0.4)
        spans.append((ctx.attempt, started, time.monotonic()))
        return f"attempt {ctx.attempt}"

    @app.workflow
    async def w(wf: plait.Workflow, data: None) -> str:
        return await wf.do("block", blocking)

    async with engine_factory(app) as engine:
        assert await engine.run("w", timeout=10) == "attempt 2"
        run = (await engine.list_runs())[0]
        history = await engine.get_history(run.id)
    assert [a.status for a in history] == ["failed", "succeeded"]
    assert history[0].error["code"] == "STEP_TIMEOUT" and history[0].output is None
    (first, one_start, one_end), (second, two_start, _) = spans
    assert (first, second) == (1, 2) and one_end - one_start >= 0.4
    assert two_start >= one_end


async def test_the_step_context_names_the_workflow_on_every_path(engine_factory) -> None:
    seen: dict[str, str] = {}
    app = plait.App()

    @app.function
    def inline(data: None, ctx: plait.StepContext) -> None:
        seen["inline"] = ctx.workflow

    @app.function(queued=True)
    def queued(data: None, ctx: plait.StepContext) -> None:
        seen["queued"] = ctx.workflow

    @app.workflow
    async def named(wf: plait.Workflow, data: None) -> None:
        await wf.do("a", inline)
        await wf.do("b", queued)

    async with engine_factory(app) as engine:
        await engine.run("named", timeout=10)
    assert seen == {"inline": "named", "queued": "named"}


async def test_on_error_compensates_once(engine_factory) -> None:
    counter = Counter()
    app = plait.App()

    @app.function
    def undo(data: dict) -> str:
        counter.hit("undo", data)
        return "undone"

    @app.function(retries=2, retry_delay=0, on_error="undo")
    def charge(data: dict, ctx: plait.StepContext) -> None:
        counter.hit("charge", ctx.attempt)
        raise RuntimeError("card declined")

    @app.workflow
    async def w(wf: plait.Workflow, data: None) -> None:
        await wf.do("charge", charge, {"amount": 5})

    async with engine_factory(app) as engine:
        with pytest.raises(plait.WorkflowFailedError, match="card declined"):
            await engine.run("w", timeout=10)
        run = (await engine.list_runs())[0]
        assert counter["charge"] == 3 and counter["undo"] == 1
        received = counter.calls[-1][1]
        assert received["error"]["message"] == "card declined"
        assert received["input"] == {"amount": 5}
        steps = {s.key: s for s in await engine.get_steps(run.id)}
        assert received["invocation_id"] == steps["charge"].invocation_id
        assert steps["charge:on_error"].status == "succeeded"
        assert steps["charge:on_error"].output == "undone"
        # a retry of the failed run replays without compensating again
        await engine.retry(run.id)
        await engine.wait(run.id, timeout=10)
        assert counter["undo"] == 1


async def test_bad_options_are_refused_with_the_name(engine_factory) -> None:
    app = plait.App()
    with pytest.raises(ValueError, match="retries of function 'f'"):
        app.function(name="f", retries=-1)(lambda data: data)
    with pytest.raises(ValueError, match="invalid timeout of function 'g'"):

        @app.function(timeout="soon")
        def g(data: None) -> None: ...

    @app.workflow
    async def w(wf: plait.Workflow, data: str) -> None:
        if data == "delay":
            await wf.do("x", lambda: 1, retry_delay="fast")
        elif data == "sleep":
            await wf.sleep("nap", "forever")
        else:
            await wf.do("x", lambda: 1, retires=3)

    async with engine_factory(app) as engine:
        with pytest.raises(plait.WorkflowFailedError, match="invalid retry_delay: 'fast'"):
            await engine.run("w", "delay", timeout=10)
        with pytest.raises(plait.WorkflowFailedError, match="duration of sleep 'nap'"):
            await engine.run("w", "sleep", timeout=10)
        with pytest.raises(plait.WorkflowFailedError, match=r"unknown option.*retires"):
            await engine.run("w", "typo", timeout=10)


class Order(BaseModel):
    id: int
    amount: float


async def test_pydantic_input_is_validated(engine_factory) -> None:
    counter = Counter()
    app = plait.App()

    @app.function
    def total(order: Order) -> Order:
        counter.hit("total")
        return Order(id=order.id, amount=order.amount * 2)

    @app.workflow
    async def w(wf: plait.Workflow, data: dict) -> dict:
        return await wf.do("total", total, data, retries=3)

    async with engine_factory(app) as engine:
        assert await engine.run("w", {"id": "7", "amount": 1.5}, timeout=10) == {
            "id": 7,
            "amount": 3.0,
        }
        with pytest.raises(plait.WorkflowFailedError, match="invalid input for function 'total'"):
            await engine.run("w", {"id": "x"}, timeout=10)
        assert counter["total"] == 1  # the bad input never reached the body, and no retries


async def test_user_except_exception_cannot_swallow_a_pause(engine_factory) -> None:
    counter = Counter()
    app = plait.App()

    @app.workflow
    async def w(wf: plait.Workflow, data: None) -> str:
        try:
            await wf.sleep("nap", 0.1)
        except Exception:
            counter.hit("fallback")
            return "fallback"
        return "slept"

    async with engine_factory(app) as engine:
        assert await engine.run("w", timeout=10) == "slept"
        assert counter["fallback"] == 0
