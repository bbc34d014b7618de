"""``engine.retry``: a failed run goes on from the step that failed it.

A retry reopens a failed step only if the workflow did not go on past its failure: a
failure the workflow caught and went on from (it reached another step after it) stays
failed and replays as the same caught error, so its step never runs again. The step the
run's error names is always reopened. Every step still waiting on a durable timer when
the run failed (a sleep, an event timeout, a retry back-off, an approval's deadline) has
its timer again, so the retried run can finish.
"""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any

import pytest

import plait
from plait import serde
from plait.errors import EventTimeout, StepError
from plait.runtime import steps
from plait.store.ops import PutStep, SetTimer
from plait.store.rows import StepRow
from store.rows import step
from support.counter import Counter


async def _steps(engine: plait.Engine, run_id: str) -> dict[str, plait.Step]:
    return {s.key: s for s in await engine.get_steps(run_id)}


async def _failed(engine: plait.Engine, run_id: str) -> plait.Run:
    run = await engine.wait(run_id, timeout=10)
    assert run.status == "failed", run
    return run


class Outage:
    """Functions that fail while their dependency is down, and count every call."""

    def __init__(self, *down: str) -> None:
        self.down = set(down)
        self.counter = Counter()

    def call(self, name: str, value: Any = None) -> Any:
        self.counter.hit(name)
        if name in self.down:
            raise RuntimeError(f"{name} is down")
        return name if value is None else value


# -- failures the workflow handled ------------------------------------------------------------


async def test_retry_keeps_a_caught_failure_failed(engine_factory) -> None:
    """The customer is charged once: the caught primary charge is not run again."""
    outage = Outage("primary", "warehouse")
    charges: list[str] = []
    app = plait.App()

    def charge(gateway: str) -> str:
        outage.call(gateway)
        charges.append(gateway)
        return gateway

    @app.workflow
    async def checkout(wf: plait.Workflow) -> dict:
        try:
            paid = await wf.do("charge primary", charge, "primary", retries=0)
        except StepError:
            paid = await wf.do("charge backup", charge, "backup", retries=0)
        shipped = await wf.do("ship", outage.call, "warehouse", retries=0)
        return {"paid": paid, "shipped": shipped}

    async with engine_factory(app) as engine:
        run_id = await engine.start("checkout")
        run = await _failed(engine, run_id)
        assert run.error and run.error["step"] == "ship"
        outage.down.clear()  # both recovered meanwhile
        await engine.retry(run_id)
        run = await engine.wait(run_id, timeout=10)
        assert run.status == "completed"
        assert run.output == {"paid": "backup", "shipped": "warehouse"}
        assert charges == ["backup"]
        assert outage.counter["primary"] == 1 and outage.counter["warehouse"] == 2
        recorded = await _steps(engine, run_id)
        assert recorded["charge primary"].status == "failed"
        assert recorded["charge primary"].attempts == 1


async def test_retry_keeps_failures_gathered_with_return_exceptions(engine_factory) -> None:
    outage = Outage("a", "kid", "ship")
    app = plait.App()

    @app.workflow
    async def kid(wf: plait.Workflow) -> str:
        return await wf.do("k", outage.call, "kid", retries=0)

    @app.workflow
    async def fan(wf: plait.Workflow) -> list:
        got = await asyncio.gather(
            wf.do("a", outage.call, "a", retries=0),
            wf.do("child", "kid"),
            wf.do("b", outage.call, "b", retries=0),
            return_exceptions=True,
        )
        names = [type(x).__name__ if isinstance(x, BaseException) else x for x in got]
        return [names, await wf.do("ship", outage.call, "ship", retries=0)]

    async with engine_factory(app) as engine:
        run_id = await engine.start("fan")
        run = await _failed(engine, run_id)
        assert run.error and run.error["step"] == "ship"
        outage.down.clear()
        await engine.retry(run_id)
        run = await engine.wait(run_id, timeout=10)
        assert run.status == "completed"
        assert run.output == [["StepError", "StepError", "b"], "ship"]
        assert outage.counter.counts == {"a": 1, "kid": 1, "b": 1, "ship": 2}
        recorded = await _steps(engine, run_id)
        assert recorded["a"].status == recorded["child"].status == "failed"
        assert len(await engine.get_children(run_id)) == 1  # no second child run


async def test_retry_keeps_a_caught_event_timeout(engine_factory) -> None:
    """A timed-out wait the workflow caught and went on from does not wait again."""
    outage = Outage("ship")
    app = plait.App()

    @app.workflow
    async def waits(wf: plait.Workflow) -> list:
        try:
            got = await wf.wait_for_event("go", timeout=0.2)
        except EventTimeout:
            got = await wf.do("fallback", outage.call, "fallback")
        return [got, await wf.do("ship", outage.call, "ship", retries=0)]

    async with engine_factory(app) as engine:
        run_id = await engine.start("waits")
        await _failed(engine, run_id)
        outage.down.clear()
        await engine.retry(run_id)
        # the caught timeout replays; the wait does not open again to take this event
        await engine.send_event(run_id, "go", "late")
        run = await engine.wait(run_id, timeout=10)
        assert run.status == "completed" and run.output == ["fallback", "ship"]
        assert outage.counter.counts == {"fallback": 1, "ship": 2}
        assert (await _steps(engine, run_id))["__event:go"].status == "failed"


async def test_retry_keeps_a_caught_failure_with_on_error_failed(engine_factory) -> None:
    outage = Outage("charge", "ship")
    app = plait.App()

    @app.function
    def undo(data: dict) -> str:
        outage.call("undo")
        return "undone"

    @app.workflow
    async def checkout(wf: plait.Workflow) -> list:
        try:
            paid = await wf.do("charge", outage.call, "charge", retries=0, on_error="undo")
        except StepError:
            paid = await wf.do("backup", outage.call, "backup")
        return [paid, await wf.do("ship", outage.call, "ship", retries=0)]

    async with engine_factory(app) as engine:
        run_id = await engine.start("checkout")
        await _failed(engine, run_id)
        outage.down.clear()
        await engine.retry(run_id)
        run = await engine.wait(run_id, timeout=10)
        assert run.status == "completed" and run.output == ["backup", "ship"]
        assert outage.counter.counts == {"charge": 1, "undo": 1, "backup": 1, "ship": 2}


# -- failures that failed the run -----------------------------------------------------------


async def test_retry_reopens_a_failure_with_on_error(engine_factory) -> None:
    """Its own compensation step comes after it, but is no sign the workflow went on."""
    outage = Outage("charge")
    app = plait.App()

    @app.function
    def undo(data: dict) -> str:
        outage.call("undo")
        return "undone"

    @app.workflow
    async def checkout(wf: plait.Workflow) -> str:
        return await wf.do("charge", outage.call, "charge", retries=0, on_error="undo")

    async with engine_factory(app) as engine:
        run_id = await engine.start("checkout")
        await _failed(engine, run_id)
        assert (await _steps(engine, run_id))["charge:on_error"].status == "succeeded"
        outage.down.clear()
        await engine.retry(run_id)
        run = await engine.wait(run_id, timeout=10)
        assert run.status == "completed" and run.output == "charge"
        assert outage.counter.counts == {"charge": 2, "undo": 1}


async def test_retry_reopens_a_failure_raised_again_after_a_step(engine_factory) -> None:
    """The step the run's error names is reopened even though the workflow reached a
    step after its failure (it logged it, then raised it again)."""
    outage = Outage("charge")
    app = plait.App()

    @app.workflow
    async def checkout(wf: plait.Workflow) -> str:
        try:
            return await wf.do("charge", outage.call, "charge", retries=0)
        except StepError:
            await wf.do("log", outage.call, "log")
            raise

    async with engine_factory(app) as engine:
        run_id = await engine.start("checkout")
        run = await _failed(engine, run_id)
        assert run.error and run.error["step"] == "charge"
        outage.down.clear()
        await engine.retry(run_id)
        run = await engine.wait(run_id, timeout=10)
        assert run.status == "completed" and run.output == "charge"
        assert outage.counter.counts == {"charge": 2, "log": 1}


async def test_retry_reopens_a_failure_raised_as_another_error(engine_factory) -> None:
    outage = Outage("charge")
    app = plait.App()

    class PaymentError(Exception):
        pass

    @app.workflow
    async def checkout(wf: plait.Workflow) -> str:
        try:
            return await wf.do("charge", outage.call, "charge", retries=0)
        except StepError as exc:
            raise PaymentError("payment failed") from exc

    async with engine_factory(app) as engine:
        run_id = await engine.start("checkout")
        run = await _failed(engine, run_id)
        assert run.error and run.error["type"] == "PaymentError" and "step" not in run.error
        outage.down.clear()
        await engine.retry(run_id)
        run = await engine.wait(run_id, timeout=10)
        assert run.status == "completed" and run.output == "charge"
        assert outage.counter["charge"] == 2


async def test_retry_reopens_every_failure_nobody_caught(engine_factory) -> None:
    """Two gathered steps fail; the run's error names one, both run again."""
    outage = Outage("a", "b")
    app = plait.App()

    @app.workflow
    async def both(wf: plait.Workflow) -> list:
        return list(
            await asyncio.gather(
                wf.do("a", outage.call, "a", retries=0), wf.do("b", outage.call, "b", retries=0)
            )
        )

    async with engine_factory(app) as engine:
        run_id = await engine.start("both")
        await _failed(engine, run_id)
        assert outage.counter.counts == {"a": 1, "b": 1}
        outage.down.clear()
        await engine.retry(run_id)
        run = await engine.wait(run_id, timeout=10)
        assert run.status == "completed" and run.output == ["a", "b"]
        assert outage.counter.counts == {"a": 2, "b": 2}


@pytest.mark.parametrize("cleanup", [False, True], ids=["bare", "finally-cleanup"])
async def test_retry_of_a_run_failed_by_a_task_group_sibling_completes(
    engine_factory, cleanup: bool
) -> None:
    """A task group: ``failing`` fails and the group cancels ``slow`` (recorded
    ``CANCELLED``). The workflow received the failure before that cancel, so a retry
    reopens ``slow`` too: replayed as the cancel it was, it would fail the group again.
    A cleanup step in a ``finally`` reached after the cancel changes nothing."""
    calls = Counter()
    app = plait.App()

    @app.function
    async def slow() -> str:
        if calls.hit("slow") == 1:
            await asyncio.Event().wait()  # still running when the group cancels it
        return "slow"

    @app.function
    async def failing() -> str:
        await asyncio.sleep(0.05)
        if calls.hit("failing") == 1:
            raise plait.NonRetryableError("the service said no (once)")
        return "failing"

    @app.function
    async def tidy() -> str:
        calls.hit("tidy")
        return "tidy"

    @app.workflow
    async def group(wf: plait.Workflow) -> list[str]:
        try:
            async with asyncio.TaskGroup() as tg:
                a = tg.create_task(wf.do("slow", "slow"))
                b = tg.create_task(wf.do("failing", "failing"))
        finally:
            if cleanup:
                await wf.do("tidy", "tidy")
        return [a.result(), b.result()]

    async with engine_factory(app) as engine:
        run_id = await engine.start("group")
        run = await _failed(engine, run_id)
        assert run.error and run.error["step"] == "failing"
        cut = (await _steps(engine, run_id))["slow"]
        assert cut.error and cut.error["code"] == plait.errors.CANCELLED
        await engine.retry(run_id)
        run = await engine.wait(run_id, timeout=10)
        assert run.status == "completed" and run.output == ["slow", "failing"], run.error
        tidied = {"tidy": 1} if cleanup else {}
        assert calls.counts == {"slow": 2, "failing": 2, **tidied}


def _race_app(calls: Counter) -> plait.App:
    """``race``: a race whose loser is cancelled, then ``after``, which fails once.
    ``mixed``: the same beside another task that catches ``flaky``'s failure and reaches
    no step after it."""
    app = plait.App()
    racing = asyncio.Event()

    @app.function(retries=0)
    async def flaky() -> str:
        calls.hit("flaky")
        raise RuntimeError("always down")

    @app.function(retries=0)
    async def fast() -> str:
        calls.hit("fast")
        await racing.wait()  # wins once the loser runs: the loser has a step to cancel
        return "fast"

    @app.function(retries=0)
    async def loser() -> str:
        calls.hit("loser")
        racing.set()
        await asyncio.Event().wait()
        return "loser"

    @app.function(retries=0)
    async def after(data: str) -> str:
        if calls.hit("after") == 1:
            raise RuntimeError("down once")
        return data

    async def racing_then_after(wf: plait.Workflow) -> str:
        a = asyncio.ensure_future(wf.do("fast", "fast"))
        b = asyncio.ensure_future(wf.do("loser", "loser"))
        done, pending = await asyncio.wait({a, b}, return_when=asyncio.FIRST_COMPLETED)
        for task in pending:
            task.cancel()
        return str(await wf.do("after", "after", next(iter(done)).result()))

    @app.workflow
    async def race(wf: plait.Workflow) -> str:
        return await racing_then_after(wf)

    @app.workflow
    async def mixed(wf: plait.Workflow) -> str:
        async def side() -> None:
            with contextlib.suppress(plait.StepError):
                await wf.do("flaky", "flaky")  # caught; this task reaches no step after

        async def main() -> str:
            await wf.sleep("nap", 0.3)  # the side's failure arrives well before the race
            return await racing_then_after(wf)

        _, out = await asyncio.gather(side(), main())
        return out

    return app


@pytest.mark.parametrize("workflow", ["race", "mixed"])
async def test_retry_keeps_a_cancel_the_workflow_went_on_from(
    engine_factory, workflow: str
) -> None:
    """The loser of a race is cancelled and the workflow goes on to a step that fails:
    the retry runs that step again, never the cancelled loser. In ``mixed`` a failure
    caught in another task (reopened: nothing came after it there) reached the workflow
    before the cancel: only the failure that ended the run takes the cancels after it."""
    calls = Counter()
    async with engine_factory(_race_app(calls)) as engine:
        run_id = await engine.start(workflow)
        run = await _failed(engine, run_id)
        assert run.error and run.error["step"] == "after"
        cut = (await _steps(engine, run_id))["loser"]
        assert cut.error and cut.error["code"] == plait.errors.CANCELLED
        await engine.retry(run_id)
        run = await engine.wait(run_id, timeout=20)
        assert run.status == "completed" and run.output == "fast", run.error
        assert (calls["fast"], calls["loser"], calls["after"]) == (1, 1, 2)
        now = (await _steps(engine, run_id))["loser"]
        assert (now.status, now.attempts, now.error) == (cut.status, cut.attempts, cut.error)


async def test_retry_waits_again_for_an_uncaught_event_timeout(engine_factory) -> None:
    app = plait.App()

    @app.workflow
    async def waits(wf: plait.Workflow) -> Any:
        await wf.do("before", lambda: 1)
        return await wf.wait_for_event("go", timeout=0.2)

    async with engine_factory(app) as engine:
        run_id = await engine.start("waits")
        run = await _failed(engine, run_id)
        assert run.error and run.error["code"] == "EVENT_TIMEOUT"
        await engine.retry(run_id)
        await engine.send_event(run_id, "go", {"ok": 1})
        run = await engine.wait(run_id, timeout=10)
        assert run.status == "completed" and run.output == {"ok": 1}


# -- timers of steps still waiting when the run failed --------------------------------------


def _sibling_app(fixed: dict[str, bool], calls: list[int]) -> plait.App:
    """Workflows that fail in one branch of a gather while the other waits on a timer."""
    app = plait.App()

    def flaky() -> str:
        if not fixed["v"]:
            raise RuntimeError("not yet")
        return "fixed"

    @app.function(retries=1, retry_delay=0.4)
    def second_time(data: None, ctx: plait.StepContext) -> str:
        calls.append(ctx.attempt)
        if ctx.attempt == 1:
            raise RuntimeError("first attempt")
        return "ok"

    @app.workflow
    async def sleep_sibling(wf: plait.Workflow) -> list:
        async def sleeper() -> str:
            await wf.sleep("nap", 0.4)
            return "slept"

        return list(await asyncio.gather(sleeper(), wf.do("bad", flaky, retries=0)))

    @app.workflow
    async def event_sibling(wf: plait.Workflow) -> list:
        async def waiter() -> Any:
            try:
                return await wf.wait_for_event("e", timeout=0.4)
            except EventTimeout:
                return "timed out"

        return list(await asyncio.gather(waiter(), wf.do("bad", flaky, retries=0)))

    @app.workflow
    async def backoff_sibling(wf: plait.Workflow) -> list:
        async def late() -> str:
            await wf.do("pre", lambda: 1)
            return await wf.do("bad", flaky, retries=0)

        return list(await asyncio.gather(wf.do("twice", "second_time"), late()))

    @app.workflow
    async def approval_sibling(wf: plait.Workflow) -> list:
        async def gate() -> str:
            decision = await wf.approval("ok", expires=0.4)
            return "expired" if decision.expired else "decided"

        return list(await asyncio.gather(gate(), wf.do("bad", flaky, retries=0)))

    return app


@pytest.mark.parametrize(
    ("workflow", "waiting", "output"),
    [
        ("sleep_sibling", "nap", ["slept", "fixed"]),
        ("event_sibling", "__event:e", ["timed out", "fixed"]),
        ("backoff_sibling", "twice", ["ok", "fixed"]),
        ("approval_sibling", "__approval:ok", ["expired", "fixed"]),
    ],
)
async def test_retry_arms_the_timer_of_a_step_still_waiting(
    engine_factory, workflow: str, waiting: str, output: list
) -> None:
    fixed = {"v": False}
    calls: list[int] = []
    async with engine_factory(_sibling_app(fixed, calls)) as engine:
        run_id = await engine.start(workflow)
        await _failed(engine, run_id)
        assert (await _steps(engine, run_id))[waiting].status in ("scheduled", "pending")
        fixed["v"] = True
        await engine.retry(run_id)
        run = await engine.wait(run_id, timeout=8)
        assert run.status == "completed" and run.output == output
    if workflow == "backoff_sibling":
        assert calls == [1, 2]


async def test_a_fresh_engine_fires_the_timer_a_retry_armed(engine_factory) -> None:
    """The timer is a row, not this process's memory: another engine on the database
    fires it (at once if its time passed while no engine was open)."""
    fixed = {"v": False}
    app = _sibling_app(fixed, [])
    async with engine_factory(app) as engine:
        run_id = await engine.start("sleep_sibling")
        await _failed(engine, run_id)
        fixed["v"] = True
        await engine.retry(run_id)
    async with engine_factory(app) as engine:
        run = await engine.wait(run_id, timeout=8)
        assert run.status == "completed" and run.output == ["slept", "fixed"]


async def test_resume_keeps_the_timer_of_a_sibling_waiting(engine_factory) -> None:
    """Suspending does not end the run's timers (only an end does), so a resumed run's
    sleep fires without being armed again."""
    app = plait.App()

    @app.workflow
    async def held(wf: plait.Workflow) -> list:
        async def sleeper() -> str:
            await wf.sleep("nap", 0.3)
            return "slept"

        async def check() -> str:
            await wf.suspend("check")
            return "checked"

        return list(await asyncio.gather(sleeper(), check()))

    async with engine_factory(app) as engine:
        run_id = await engine.start("held")
        assert (await engine.wait(run_id, timeout=10)).status == "suspended"
        await engine.resume(run_id)
        run = await engine.wait(run_id, timeout=8)
        assert run.status == "completed" and run.output == ["slept", "checked"]


async def test_retry_keeps_the_deadline_of_a_race_the_workflow_cancelled(engine_factory) -> None:
    """A call raced against a deadline fails first, the workflow cancels the deadline
    and lets the failure through. Retried, the call (on the step queue, so the pass
    is free to wake for the deadline) is slow this time: the deadline, still at its
    own time, wins the race."""
    attempts: list[int] = []
    app = plait.App()

    @app.function(retries=0, timeout=0.6, queued=True)
    async def call(data: None, ctx: plait.StepContext) -> str:
        attempts.append(ctx.attempt)
        if ctx.attempt == 1:
            raise RuntimeError("refused")
        await asyncio.Event().wait()  # never set: only the step's timeout ends it
        return "answer"

    @app.workflow
    async def call_with_deadline(wf: plait.Workflow) -> str:
        answer = asyncio.ensure_future(wf.do("call", call))
        deadline = asyncio.ensure_future(wf.sleep("deadline", 0.3))
        done, pending = await asyncio.wait({answer, deadline}, return_when=asyncio.FIRST_COMPLETED)
        for task in pending:
            task.cancel()
        return answer.result() if answer in done else "timed out"

    async with engine_factory(app) as engine:
        run_id = await engine.start("call_with_deadline")
        run = await _failed(engine, run_id)
        assert run.error and run.error["step"] == "call"
        await engine.retry(run_id)
        run = await engine.wait(run_id, timeout=8)
        assert run.status == "completed" and run.output == "timed out"
        assert attempts == [1, 2]


# -- graphs ---------------------------------------------------------------------------------


@pytest.mark.parametrize("queued", [False, True])
async def test_retry_of_a_graph_keeps_a_failure_its_error_edge_handled(
    engine_factory, queued: bool
) -> None:
    outage = Outage("risky", "last")
    app = plait.App()
    for name in ("risky", "after", "handle", "last"):

        def body(data: Any, _name: str = name) -> str:
            return outage.call(_name)

        app.function(name=name, queued=queued, retries=0)(body)
    app.graph(
        "guarded",
        {
            "nodes": {
                "risky": {"function": "risky", "next": "after", "on_error": "handle"},
                "after": {"function": "after"},
                "handle": {"function": "handle", "next": "last"},
                "last": {"function": "last"},
            }
        },
    )
    async with engine_factory(app) as engine:
        run_id = await engine.start("guarded")
        run = await _failed(engine, run_id)
        assert run.error and run.error["step"] == "last"
        outage.down.clear()
        await engine.retry(run_id)
        run = await engine.wait(run_id, timeout=10)
        assert run.status == "completed"
        assert outage.counter.counts == {"risky": 1, "handle": 1, "last": 2}
        recorded = await _steps(engine, run_id)
        assert recorded["risky"].status == "failed" and "after" not in recorded


async def test_retry_of_a_graph_runs_a_failed_for_each_item_again(engine_factory) -> None:
    broken = {"v": True}
    counter = Counter()
    app = plait.App()

    @app.function(retries=0)
    def double(item: dict) -> int:
        counter.hit("double", item["n"])
        if broken["v"] and item["n"] == 2:
            raise ValueError("two is broken")
        return item["n"] * 2

    app.graph(
        "each",
        {
            "nodes": {
                "d": {
                    "function": "double",
                    "for_each": {"$ref": "trigger", "path": "ns"},
                    "input": {"n": {"$ref": "$item"}},
                }
            },
            "output": {"$ref": "d"},
        },
    )
    async with engine_factory(app) as engine:
        run_id = await engine.start("each", {"ns": [1, 2, 3]})
        run = await _failed(engine, run_id)
        assert run.error and run.error["step"] == "d"
        broken["v"] = False
        await engine.retry(run_id)
        run = await engine.wait(run_id, timeout=10)
        assert run.status == "completed" and run.output == [2, 4, 6]
        assert sorted(n for _, n in counter.calls) == [1, 2, 2, 3]


# -- the rule on recorded rows ----------------------------------------------------------------


def _row(key: str, status: str, after: list[str] | None, delivered: int | None = None) -> StepRow:
    failed = status == "failed"
    return step(
        "r",
        key,
        function=None,
        status=status,
        input=None,
        error=serde.dumps({"message": "boom"}) if failed else None,
        attempts=1,
        failures=1 if failed else 0,
        delivered=delivered,
        reached_after=None if after is None else serde.dumps(after),
    )


def _reopened(ops: list[Any]) -> set[str]:
    return {op.step.key for op in ops if isinstance(op, PutStep) and op.step.status == "pending"}


def test_a_capped_reached_after_counts_older_failures_as_handled() -> None:
    """After a gather wider than ``after_cap``, the step that follows records only the
    newest outcomes: a failure the workflow saw before them counts as handled."""
    cap = 4
    items = [f"i{n}" for n in range(6)]
    rows = [_row(k, "failed" if k == "i0" else "succeeded", [], n) for n, k in enumerate(items)]
    rows.append(_row("next", "failed", items[-cap:], 6))
    rows.append(_row("late", "failed", [], 7))  # seen after every kept outcome
    error = serde.dumps({"message": "boom", "step": "next"})
    assert steps.reopened(rows, error, after_cap=cap) == {"next", "late"}
    # without knowing the cap, nothing says i0 was handled
    assert steps.reopened(rows, error) == {"i0", "next", "late"}
    assert _reopened(steps.retry_ops(rows, 1.0, error, after_cap=cap)) == {"next", "late"}


def test_retry_ops_arms_the_timer_of_every_waiting_step() -> None:
    sleep = _row("nap", "scheduled", [])
    sleep.kind, sleep.wake_at = "sleep", 5.0
    event = _row("__event:e", "scheduled", [])
    event.kind, event.wake_at = "event", 6.0
    forever = _row("__event:f", "scheduled", [])
    forever.kind = "event"  # no timeout: nothing to arm
    backoff = _row("twice", "scheduled", [])
    backoff.wake_at = 7.0
    gate = _row("__approval:ok", "pending", [])
    gate.kind, gate.wake_at = "approval", 8.0
    ops = steps.retry_ops([sleep, event, forever, backoff, gate], 1.0)
    assert [op for op in ops if isinstance(op, SetTimer)] == [
        SetTimer("nap", "sleep", 5.0),
        SetTimer("__event:e", "event_timeout", 6.0),
        SetTimer("twice", "retry", 7.0),
        SetTimer("__approval:ok", "approval", 8.0),
    ]


def test_a_step_s_compensation_and_items_go_with_it() -> None:
    def compensated(caught: bool) -> list[StepRow]:
        charge = _row("charge", "failed", [])
        undo = _row("charge:on_error", "failed", ["charge"])
        undo.kind = "on_error"
        rows = [charge, undo]
        if caught:
            rows += [_row("backup", "succeeded", ["charge"]), _row("ship", "failed", ["backup"])]
        return rows

    named = serde.dumps({"message": "boom", "step": "charge"})
    assert steps.reopened(compensated(False), named) == {"charge", "charge:on_error"}
    assert steps.reopened(compensated(True), serde.dumps({"step": "ship"})) == {"ship"}

    def graph(handled: bool) -> list[StepRow]:
        node = _row("d", "failed", None)
        node.kind = "node"
        items = [_row("d[0]", "succeeded", None), _row("d[1]", "failed", None)]
        for item in items:
            item.kind, item.from_key = "item", "d"
        rows = [node, *items]
        if handled:
            handler = _row("h", "succeeded", None)
            last = _row("last", "failed", None)
            handler.kind, handler.from_key = "node", "d"
            last.kind, last.from_key = "node", "h"
            rows += [handler, last]
        return rows

    assert steps.reopened(graph(False), serde.dumps({"step": "d"})) == {"d", "d[1]"}
    assert steps.reopened(graph(True), serde.dumps({"step": "last"})) == {"last"}


def test_a_wait_the_workflow_cancelled_waits_again_until_its_own_time() -> None:
    """A wait recorded ``cancelled`` (the workflow cancelled it, and its run ended)
    waits again as it did, until its stored ``wake_at`` (not a fresh timeout), with its
    timer."""
    rows: list[StepRow] = []
    for key, kind in (("nap", "sleep"), ("__event:e", "event"), ("__approval:ok", "approval")):
        wait = _row(key, "failed", [])
        wait.kind, wait.wake_at, wait.timeout = kind, 5.0, 60.0
        wait.error = steps.cancelled_error()
        rows.append(wait)
    rows.append(_row("bad", "failed", []))
    ops = steps.retry_ops(rows, 1.0, serde.dumps({"step": "bad"}))
    assert [op for op in ops if isinstance(op, SetTimer)] == [
        SetTimer("nap", "sleep", 5.0),
        SetTimer("__event:e", "event_timeout", 5.0),
        SetTimer("__approval:ok", "approval", 5.0),
    ]
    assert [(r.key, r.status, r.error) for r in rows[:3]] == [
        ("nap", "scheduled", None),
        ("__event:e", "scheduled", None),
        ("__approval:ok", "pending", None),
    ]


def test_a_cancel_goes_with_the_failure_before_it_unless_the_workflow_went_on() -> None:
    """``steps.cut_by``: a step the workflow cancelled is reopened with the failure the
    run's error names when the workflow received that failure before the cancel, whatever
    steps came after; a cancel that came before it, or after another failure (one the
    workflow caught), stays."""

    def rows(went_on: bool, cancelled_first: bool = False) -> list[StepRow]:
        failing = _row("failing", "failed", [])
        failing.created_at, failing.updated_at = 1.0, 10.0
        sibling = _row("sibling", "failed", [])
        sibling.error = steps.step_cancelled_error()
        sibling.created_at, sibling.updated_at = 1.0, 5.0 if cancelled_first else 10.0
        made = [failing, sibling]
        if went_on:
            later = _row("later", "failed", ["failing"])
            later.created_at = later.updated_at = 11.0
            made.append(later)
        return made

    named = serde.dumps({"message": "boom", "step": "failing"})
    assert steps.reopened(rows(went_on=False), named) == {"failing", "sibling"}
    assert steps.reopened(rows(went_on=False, cancelled_first=True), named) == {"failing"}
    went_on = rows(went_on=True)
    assert steps.reopened(went_on, serde.dumps({"step": "later"})) == {"later"}
    # a cleanup step reached after the cancel (a ``finally``) keeps it with the failure
    cleanup = _row("cleanup", "succeeded", ["failing", "sibling"])
    cleanup.created_at = cleanup.updated_at = 11.0
    assert steps.reopened([*rows(went_on=False), cleanup], named) == {"failing", "sibling"}
    # the order the workflow received outcomes in decides over the clocks that stamped them
    skewed = rows(went_on=False)
    skewed[0].delivered, skewed[1].delivered, skewed[1].updated_at = 0, 1, 5.0
    assert steps.reopened(skewed, named) == {"failing", "sibling"}

    # a failure caught elsewhere, received before the cancel, does not take it along
    caught = _row("caught", "failed", [], delivered=0)
    fast = _row("fast", "succeeded", [], delivered=1)
    lost = _row("lost", "failed", [], delivered=2)
    lost.error = steps.step_cancelled_error()
    late = _row("late", "failed", ["fast"], delivered=3)
    ended = serde.dumps({"message": "boom", "step": "late"})
    assert steps.reopened([caught, fast, lost, late], ended) == {"caught", "late"}
