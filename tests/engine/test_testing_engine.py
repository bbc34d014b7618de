"""TestEngine: a virtual clock that jumps to the next timer when every run waits only on
timers, ``advance``, and leases that a jump never makes look expired. Both stores."""

from __future__ import annotations

import asyncio
import itertools
import os
import random
import time
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

import plait
from plait.durations import parse_duration
from plait.testing import TestEngine, assert_steps, step_keys

DAY = 86400.0
#: durations whose sum with a clock reading is seldom a whole microsecond as a float (at
#: today's epoch a float holds about four steps per microsecond): a few a user writes, then
#: more drawn from a fixed seed so that a failure repeats
_DRAW = random.Random(20240611)
FRACTIONAL: list[float | str] = [
    "300ms",
    0.7,
    "1.1s",
    2.3,
    "10ms",
    0.123456789,
    *(_DRAW.uniform(0.000_001, 120.0) for _ in range(30)),
]
#: real seconds a test of many timers may take; a clock stuck short of its next timer
#: shows as a timeout here instead of a hang
REAL_DEADLINE = 15.0


def long_haul_app(*, queued: bool) -> tuple[plait.App, dict[str, int]]:
    """A workflow that sleeps 30 days, retries a step with 1-hour back-offs and waits a
    week for an event that never comes."""
    app = plait.App()
    calls = {"flaky": 0}

    @app.function(retries=3, retry_delay="1h", queued=queued)
    async def flaky(data: None, ctx: plait.StepContext) -> int:
        calls["flaky"] += 1
        if ctx.attempt < 3:
            raise ConnectionError(f"attempt {ctx.attempt} fails")
        return ctx.attempt

    @app.workflow
    async def long_haul(wf: plait.Workflow, data: None) -> dict[str, Any]:
        began = wf.now()
        await wf.sleep("a month", "30d")
        slept = wf.now()
        attempt = await wf.do("flaky", flaky)
        retried = wf.now()
        try:
            await wf.wait_for_event("approval", timeout="1w")
            approved = True
        except plait.EventTimeout:
            approved = False
        ended = wf.now()
        return {
            "slept": (slept - began).total_seconds(),
            "retried": (retried - slept).total_seconds(),
            "waited": (ended - retried).total_seconds(),
            "attempt": attempt,
            "approved": approved,
        }

    return app, calls


@pytest.mark.parametrize("queued", [False, True], ids=["inline", "queued"])
async def test_a_month_of_sleeps_retries_and_timeouts_takes_under_a_second(
    database: str, queued: bool
) -> None:
    app, calls = long_haul_app(queued=queued)
    async with TestEngine(app, database) as env:
        began = time.monotonic()
        started_at = env.now()
        output = await env.run("long_haul", timeout=10)
        took = time.monotonic() - began
        assert took < 1.0, f"took {took:.2f}s of wall time"
        # the clock stands still between jumps: virtual times are exact
        assert output["slept"] == 30 * DAY
        assert output["retried"] == 2 * 3600  # two back-offs of an hour
        assert output["waited"] == 7 * DAY
        assert output["attempt"] == 3 and output["approved"] is False
        assert calls["flaky"] == 3
        assert env.now() - started_at == timedelta(days=37, hours=2)
        run_id = (await env.list_runs())[0].id
        await assert_steps(
            env,
            run_id,
            {
                "__now": "succeeded",
                "a month": "succeeded",
                "__now#1": "succeeded",
                "flaky": {"status": "succeeded", "attempts": 3},
                "__now#2": "succeeded",
                "__event:approval": "failed",
                "__now#3": "succeeded",
            },
        )


async def test_an_event_sent_after_advance_arrives_before_its_timeout(database: str) -> None:
    app = plait.App()

    @app.workflow
    async def approve(wf: plait.Workflow, data: None) -> Any:
        await wf.sleep("cool off", "1d")
        return await wf.wait_for_event("approval", timeout="1w")

    async with TestEngine(app, database) as env:
        run_id = await env.start("approve")
        await env.advance("1d")
        assert await step_keys(env, run_id) == ["cool off", "__event:approval"]
        assert (await env.get_run(run_id)).status == "running"
        await env.advance("6d")  # a day short of the timeout
        assert (await env.get_run(run_id)).status == "running"
        assert await env.send_event(run_id, "approval", {"by": "dana"}) is True
        run = await env.wait(run_id, timeout=10)
        assert run.status == "completed" and run.output == {"by": "dana"}


async def test_advance_fires_every_timer_in_order(database: str) -> None:
    app = plait.App()

    @app.workflow
    async def ticker(wf: plait.Workflow, data: None) -> list[str]:
        seen = []
        for _ in range(24):
            await wf.sleep("hour", "1h")
            seen.append(wf.now().isoformat())
        return seen

    start = datetime(2030, 1, 1, tzinfo=UTC)
    async with TestEngine(app, database, start=start, time_skipping=False) as env:
        assert abs((env.now() - start).total_seconds()) < 5
        run_id = await env.start("ticker")
        await env.advance("12h")
        assert len([k for k in await step_keys(env, run_id) if k.startswith("hour")]) == 13
        assert (await env.get_run(run_id)).status == "running"
        await env.advance(timedelta(hours=12))
        run = await env.wait(run_id, timeout=10)
        assert run.status == "completed"
        hours = [datetime.fromisoformat(t) for t in run.output]
        gaps = [(b - a).total_seconds() for a, b in itertools.pairwise(hours)]
        assert gaps == [3600.0] * 23


async def test_without_time_skipping_wait_does_not_jump(tmp_path) -> None:
    app = plait.App()

    @app.workflow
    async def sleepy(wf: plait.Workflow, data: None) -> str:
        await wf.sleep("nap", "1h")
        return "rested"

    async with TestEngine(app, time_skipping=False) as env:
        run_id = await env.start("sleepy")
        with pytest.raises(TimeoutError):
            await env.wait(run_id, timeout=0.3)
        await env.advance("1h")
        assert (await env.wait(run_id, timeout=10)).output == "rested"


@pytest.mark.parametrize("queued", [False, True], ids=["inline", "queued"])
async def test_no_jump_while_a_step_holds_a_lease(database: str, queued: bool) -> None:
    """A step that runs for several lease lengths while another run sleeps for a day:
    the clock does not jump under it, so its lease never looks expired and nobody takes
    it over (one attempt)."""
    app = plait.App()
    seen: dict[str, float] = {}
    release = asyncio.Event()

    @app.function(queued=queued, retries=0)
    async def slow(data: None) -> str:
        seen["began"] = env.virtual_clock.now()
        await release.wait()
        seen["ended"] = env.virtual_clock.now()
        return "done"

    @app.workflow
    async def busy(wf: plait.Workflow, data: None) -> str:
        return await wf.do("slow", slow)

    @app.workflow
    async def sleeper(wf: plait.Workflow, data: None) -> str:
        await wf.sleep("a day", "1d")
        return "woke"

    async with TestEngine(app, database, lease_seconds=0.2) as env:
        sleeping = await env.start("sleeper")
        working = await env.start("busy")
        waiting = asyncio.create_task(env.wait(sleeping, timeout=10))
        deadline = time.monotonic() + 5
        while "began" not in seen:
            assert time.monotonic() < deadline, "the slow step never started"
            await asyncio.sleep(0.01)
        # several lease lengths pass in real time; the sleeper must not wake meanwhile
        done, _ = await asyncio.wait({waiting}, timeout=1.0)
        assert not done, "the clock jumped while a step held its lease"
        release.set()
        assert (await waiting).output == "woke"
        assert (await env.wait(working, timeout=10)).output == "done"
        assert seen["ended"] - seen["began"] < DAY
        await assert_steps(env, working, {"slow": {"status": "succeeded", "attempts": 1}})


async def test_bad_input_is_named(tmp_path) -> None:
    app = plait.App()
    async with TestEngine(app) as env:
        with pytest.raises(ValueError, match="advance duration"):
            await env.advance(-1)
        with pytest.raises(ValueError, match="advance duration"):
            await env.advance("soon")
    with pytest.raises(ValueError, match="workers=False"):
        TestEngine(app, workers=False)
    with pytest.raises(ValueError, match="aware"):
        TestEngine(app, start=datetime(2030, 1, 1))


async def test_the_temporary_database_is_removed_on_close() -> None:
    app = plait.App()

    @app.workflow
    async def hello(wf: plait.Workflow, data: None) -> str:
        return await wf.do("greet", lambda: "hi")

    env = TestEngine(app)
    path = env.url.removeprefix("sqlite:///")
    async with env:
        assert await env.run("hello", timeout=10) == "hi"
    assert not await asyncio.to_thread(os.path.exists, path)


async def test_assert_steps_says_what_the_run_did(tmp_path) -> None:
    app = plait.App()

    @app.workflow
    async def two(wf: plait.Workflow, data: None) -> None:
        await wf.do("a", lambda: 1)
        await wf.do("b", lambda: 2)

    async with TestEngine(app) as env:
        run_id = await env.start("two")
        await env.wait(run_id, timeout=10)
        await assert_steps(env, run_id, ["a", "b"])
        with pytest.raises(AssertionError, match=r"steps \['a', 'b'\] != expected \['a'\]"):
            await assert_steps(env, run_id, ["a"])
        with pytest.raises(AssertionError, match="step 'b': status is 'succeeded'"):
            await assert_steps(env, run_id, {"a": "succeeded", "b": "failed"})


async def test_fractional_sleeps_end_at_once(database: str) -> None:
    """Sleeps of fractions of a second: each jump reaches the sleep's stored wake-up, so
    the store finds it due and the run goes on (a clock left a fraction of a microsecond
    short of it would wait for ever)."""
    app = plait.App()

    @app.workflow
    async def napper(wf: plait.Workflow, durations: list[float | str]) -> float:
        began = wf.now()
        for i, duration in enumerate(durations):
            await wf.sleep(f"nap {i}", duration)
        return (wf.now() - began).total_seconds()

    async with TestEngine(app, database) as env:
        began = time.monotonic()
        slept = await env.run("napper", FRACTIONAL, timeout=REAL_DEADLINE)
        assert time.monotonic() - began < REAL_DEADLINE
        total = sum(parse_duration(d) for d in FRACTIONAL)
        # each wf.now() shows the clock to the microsecond
        assert slept == pytest.approx(total, abs=1e-6 * len(FRACTIONAL))


@pytest.mark.parametrize("queued", [False, True], ids=["inline", "queued"])
async def test_retry_back_offs_end_at_once(database: str, queued: bool) -> None:
    """Steps that fail and wait out a back-off before they succeed: fractional fixed
    delays, and the default policy's jittered exponential ones."""
    app = plait.App()

    @app.function(queued=queued)
    async def flaky(failures: int, ctx: plait.StepContext) -> int:
        if ctx.attempt <= failures:
            raise ConnectionError(f"attempt {ctx.attempt} fails")
        return ctx.attempt

    @app.workflow
    async def retrier(wf: plait.Workflow, durations: list[float | str]) -> list[int]:
        attempts = []
        for i, duration in enumerate(durations):
            attempts.append(await wf.do(f"fixed {i}", flaky, 1, retry_delay=duration))
        for i in range(8):
            attempts.append(await wf.do(f"default {i}", flaky, 2))
        return attempts

    async with TestEngine(app, database) as env:
        began = time.monotonic()
        attempts = await env.run("retrier", FRACTIONAL, timeout=REAL_DEADLINE)
        assert time.monotonic() - began < REAL_DEADLINE
        assert attempts == [2] * len(FRACTIONAL) + [3] * 8


async def test_advance_by_a_fractional_sleep_ends_it(database: str) -> None:
    """``advance(d)`` right after a run began a sleep of ``d`` ends that sleep, whatever
    fraction of a second ``d`` is."""
    app = plait.App()

    @app.workflow
    async def napper(wf: plait.Workflow, durations: list[float | str]) -> int:
        for i, duration in enumerate(durations):
            await wf.sleep(f"nap {i}", duration)
        return len(durations)

    async with TestEngine(app, database, time_skipping=False) as env:
        async with asyncio.timeout(REAL_DEADLINE):
            run_id = await env.start("napper", FRACTIONAL)
            for i, duration in enumerate(FRACTIONAL):
                await env.advance(duration)
                keys = await step_keys(env, run_id)
                assert keys[i] == f"nap {i}", keys
                expected = "completed" if i == len(FRACTIONAL) - 1 else "running"
                assert (await env.get_run(run_id)).status == expected, (i, duration)


def test_a_jump_lands_on_the_stored_wake_up_on_both_stores() -> None:
    """The clock moves to a timer's wake-up exactly as the store gave it back: on SQLite
    the float the runtime wrote, on PostgreSQL the microsecond it kept. Either way the
    store, comparing the clock with what it holds, finds the timer due."""
    pytest.importorskip("asyncpg")
    from plait.clock import VirtualClock
    from plait.store.postgres.codec import decode_timestamp, encode_timestamp

    start = datetime(2030, 1, 1, tzinfo=UTC).timestamp()
    sqlite, postgres = VirtualClock(start), VirtualClock(start)
    for duration in FRACTIONAL:
        seconds = parse_duration(duration)
        # SQLite keeps the float the runtime wrote and compares it with the clock's
        written = sqlite.now() + seconds
        assert sqlite.move_to(written)
        assert written <= sqlite.now(), (duration, written, sqlite.now())
        # PostgreSQL keeps the microsecond and compares the clock's, encoded alike
        stored = encode_timestamp(postgres.now() + seconds)
        assert postgres.move_to(decode_timestamp(stored))
        assert encode_timestamp(postgres.now()) == stored
