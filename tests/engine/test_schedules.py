"""Schedules: ticks across daylight-saving changes, catch-up after downtime, and the
schedule API through the Engine on every store (real waiting only where a worker must
fire a tick, polled with a deadline)."""

from __future__ import annotations

import time
from datetime import UTC, datetime, timedelta
from typing import Any
from zoneinfo import ZoneInfo

import pytest

import plait
from plait.schedules import ON_TIME, due_ticks, iso_tick, make_spec, run_id_for
from support.polling import eventually

HEL = ZoneInfo("Europe/Helsinki")


def instant(text: str) -> float:
    return datetime.fromisoformat(text).timestamp()


def utc(ts: float) -> str:
    return datetime.fromtimestamp(ts, UTC).strftime("%Y-%m-%d %H:%M:%S")


def ticks(spec: Any, start: str, count: int) -> list[str]:
    at, found = instant(start), []
    for _ in range(count):
        at = spec.next_tick(at)
        found.append(utc(at))
    return found


# -- daylight saving, explicitly ------------------------------------------------------------
# Helsinki: 2024-03-31 03:00 EET jumps to 04:00 EEST; 2024-10-27 04:00 EEST falls back to 03:00.


def test_a_daily_tick_in_the_spring_gap_fires_once_at_the_jump() -> None:
    spec = make_spec("d", workflow="w", cron="30 3 * * *", timezone="Europe/Helsinki")
    assert ticks(spec, "2024-03-30T00:00:00+00:00", 3) == [
        "2024-03-30 01:30:00",  # 03:30 EET
        "2024-03-31 01:00:00",  # 03:30 does not exist: at the jump, 04:00 EEST
        "2024-04-01 00:30:00",  # 03:30 EEST
    ]


def test_ticks_in_the_gap_become_one() -> None:
    spec = make_spec("d", workflow="w", cron="*/20 3 * * *", timezone="Europe/Helsinki")
    assert ticks(spec, "2024-03-31T00:30:00+00:00", 2) == [
        "2024-03-31 01:00:00",  # 03:00, 03:20 and 03:40 all fire once at 04:00 EEST
        "2024-04-01 00:00:00",  # 03:00 EEST the next day
    ]


def test_a_repeated_tick_in_the_autumn_fires_once_at_its_first_occurrence() -> None:
    spec = make_spec("d", workflow="w", cron="30 3 * * *", timezone="Europe/Helsinki")
    assert ticks(spec, "2024-10-26T00:00:00+00:00", 3) == [
        "2024-10-26 00:30:00",  # 03:30 EEST
        "2024-10-27 00:30:00",  # 03:30 happens twice: the first (EEST) only
        "2024-10-28 01:30:00",  # 03:30 EET
    ]


def test_an_hourly_schedule_across_the_fall_back() -> None:
    spec = make_spec("h", workflow="w", cron="0 * * * *", timezone="Europe/Helsinki")
    assert ticks(spec, "2024-10-26T23:30:00+00:00", 4) == [
        "2024-10-27 00:00:00",  # 03:00 EEST
        # 03:00 EET (01:00 UTC) is the repeat of 03:00: skipped
        "2024-10-27 02:00:00",  # 04:00 EET
        "2024-10-27 03:00:00",
        "2024-10-27 04:00:00",
    ]


def test_six_fields_with_seconds_and_every() -> None:
    spec = make_spec("s", workflow="w", cron="*/10 * * * * *")
    assert ticks(spec, "2024-01-01T00:00:01+00:00", 2) == [
        "2024-01-01 00:00:10",
        "2024-01-01 00:00:20",
    ]
    every = make_spec("e", workflow="w", every="90s")
    assert ticks(every, "2024-01-01T00:00:00+00:00", 2) == [
        "2024-01-01 00:01:30",
        "2024-01-01 00:03:00",
    ]


def test_run_ids_name_the_schedule_and_the_tick() -> None:
    assert run_id_for("nightly", instant("2024-01-01T03:00:00+00:00")) == (
        "schedule:nightly:2024-01-01T03:00:00Z"
    )
    assert iso_tick(1.5) == "1970-01-01T00:00:01.500Z"


# -- catch-up: which missed ticks start ---------------------------------------------------


def test_catchup_starts_missed_ticks_within_the_window_and_skips_older() -> None:
    spec = make_spec("c", workflow="w", every="1s", catchup="3s")
    # the last tick handled was at 100; nothing looked until 110 (a 10-second stop)
    started, following = due_ticks(spec, 101.0, 110.0)
    assert started == [107.0, 108.0, 109.0, 110.0]
    assert following == 111.0


def test_without_catchup_only_ticks_on_time_start() -> None:
    spec = make_spec("c", workflow="w", every="1s")
    started, following = due_ticks(spec, 101.0, 110.0)
    assert started == [t for t in (108.0, 109.0, 110.0) if t >= 110.0 - ON_TIME]
    assert following == 111.0
    assert due_ticks(spec, 110.0, 110.2) == ([110.0], 111.0)


# -- bad input ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("options", "error", "names"),
    [
        ({"cron": "61 * * * *"}, ValueError, "cron"),
        ({"cron": "* * *"}, ValueError, "cron"),
        ({"cron": 5}, TypeError, "cron"),
        ({"cron": "0 3 31 2 *"}, ValueError, "cron"),
        ({"cron": "0 * * * *", "timezone": "Mars/Olympus"}, ValueError, "timezone"),
        ({"cron": "0 * * * *", "timezone": 3}, TypeError, "timezone"),
        ({"cron": "0 * * * *", "overlap": "queue"}, ValueError, "overlap"),
        ({"cron": "0 * * * *", "catchup": "forever"}, ValueError, "catchup"),
        ({"every": "0.5s"}, ValueError, "every"),
        ({}, ValueError, "cron or every"),
        ({"cron": "0 * * * *", "every": "1m"}, ValueError, "cron or every"),
    ],
)
def test_bad_schedules_are_refused(
    options: dict[str, Any], error: type[Exception], names: str
) -> None:
    app = plait.App()
    with pytest.raises(error, match=names):
        app.schedule("s", workflow="w", **options)
    assert app.schedules == {}


def test_a_schedule_name_may_not_hold_a_colon() -> None:
    with pytest.raises(ValueError, match="schedule name"):
        make_spec("a:b", workflow="w", every="1m")


@pytest.mark.parametrize("name", ["", "a\x00b", "x" * 167, "x" * 200, "x" * 201])
def test_a_bad_schedule_name_is_told_the_real_limit(name: str) -> None:
    with pytest.raises(ValueError, match="schedule name") as refused:
        make_spec(name, workflow="w", every="1m")
    assert "166" in str(refused.value) and "1 to 200" not in str(refused.value)
    make_spec("x" * 166, workflow="w", every="1m")


# -- through the engine -------------------------------------------------------------------


def schedule_app() -> plait.App:
    app = plait.App("sched")

    @app.workflow
    async def report(wf: plait.Workflow, data: Any) -> Any:
        return {
            "data": data,
            "scheduled_at": wf.scheduled_at.isoformat() if wf.scheduled_at else None,
        }

    app.schedule("yearly", workflow="report", cron="0 0 1 1 *", input={"kind": "year"})
    return app


async def test_schedules_are_stored_listed_paused_resumed_triggered_deleted(
    engine_factory: Any,
) -> None:
    async with engine_factory(schedule_app()) as engine:
        (yearly,) = await engine.list_schedules()
        assert (yearly.name, yearly.source, yearly.status) == ("yearly", "app", "active")
        assert yearly.next_tick is not None and yearly.next_tick.month == 1

        created = await engine.create_schedule(
            "tick", workflow="report", every="1s", input={"n": 1}, overlap="allow"
        )
        assert created.source == "api" and created.every == 1.0

        async def tick_runs() -> list[plait.Run]:
            runs = await engine.list_runs(workflow="report", limit=1000)
            return [r for r in runs if r.id.startswith("schedule:tick:")]

        await eventually(lambda: _at_least(tick_runs, 2), timeout=15, what="two ticks")
        run = await engine.wait((await tick_runs())[-1].id, timeout=15)
        assert run.output["data"] == {"n": 1}
        assert run.scheduled_at is not None
        assert run.output["scheduled_at"] == run.scheduled_at.isoformat()
        assert run.id == run_id_for("tick", run.scheduled_at.timestamp())

        paused = await engine.pause_schedule("tick")
        assert paused.status == "paused" and paused.next_tick is None
        count = len(await tick_runs())
        manual = await engine.trigger_schedule("tick")
        assert (await engine.wait(manual, timeout=15)).status == "completed"
        listed = {s.name: s for s in await engine.list_schedules()}
        assert listed["tick"].last_run_id == manual
        assert len(await tick_runs()) == count + 1  # the trigger only: paused starts nothing

        resumed = await engine.resume_schedule("tick")
        assert resumed.status == "active" and resumed.next_tick is not None
        await eventually(lambda: _at_least(tick_runs, count + 2), timeout=15, what="resumed")

        await engine.delete_schedule("tick")
        with pytest.raises(plait.ScheduleNotFoundError):
            await engine.get_schedule("tick")
        with pytest.raises(plait.ScheduleNotFoundError):
            await engine.pause_schedule("tick")


async def _at_least(read: Any, n: int) -> bool:
    return len(await read()) >= n


async def test_run_time_schedules_are_seen_by_another_engine(engine_factory: Any) -> None:
    app = schedule_app()
    async with engine_factory(app, workers=False) as maker, engine_factory(app) as worker:
        await maker.create_schedule("every", workflow="report", every="1s")

        async def started() -> list[plait.Run]:
            return [r for r in await worker.list_runs() if r.id.startswith("schedule:every:")]

        await eventually(started, timeout=15, what="a run started by the other engine")


async def test_a_schedule_of_an_unknown_workflow_is_refused(engine_factory: Any) -> None:
    async with engine_factory(schedule_app(), workers=False) as engine:
        with pytest.raises(plait.WorkflowNotFoundError):
            await engine.create_schedule("x", workflow="nope", every="1m")
        with pytest.raises(ValueError, match="cron"):
            await engine.create_schedule("x", workflow="report", cron="bad")
        assert [s.name for s in await engine.list_schedules()] == ["yearly"]


async def test_an_app_schedule_of_an_unknown_workflow_fails_the_open(database: str) -> None:
    app = plait.App()
    app.schedule("orphan", workflow="missing", every="1m")
    with pytest.raises(plait.WorkflowNotFoundError):
        async with plait.Engine(app, database):
            pass


async def _status(engine: plait.Engine, run_id: str, status: str) -> bool:
    return (await engine.get_run(run_id)).status == status


async def test_triggers_in_one_millisecond_each_start_a_run(engine_factory: Any) -> None:
    """A run id names its moment to the millisecond, and a clock that stands still (a
    virtual one, or two clicks of a button) gives two triggers the same one: each must
    still start a run of its own, the later ones a millisecond on, never an error."""
    from plait.clock import VirtualClock

    start = datetime(2030, 1, 1, tzinfo=UTC).timestamp()
    async with engine_factory(schedule_app(), clock=VirtualClock(start)) as engine:
        await engine.create_schedule("tick", workflow="report", every="1h", overlap="allow")
        first = await engine.trigger_schedule("tick")
        assert first == run_id_for("tick", start)
        triggered = [first, await engine.trigger_schedule("tick")]
        triggered += [await engine.trigger_schedule("tick") for _ in range(3)]
        assert triggered == [run_id_for("tick", start + n / 1000) for n in range(5)]
        for n, run_id in enumerate(triggered):
            run = await engine.wait(run_id, timeout=15)
            assert run.status == "completed"
            assert run.scheduled_at is not None
            assert run.scheduled_at.timestamp() == pytest.approx(start + n / 1000, abs=1e-6)
        listed = {s.name: s for s in await engine.list_schedules()}
        assert listed["tick"].last_run_id == triggered[-1]


async def test_a_triggered_run_goes_through_the_workflows_queue_from_any_process(
    engine_factory: Any,
) -> None:
    app = plait.App("sched-queue")
    app.queue("one", concurrency=1)

    @app.workflow(queue="one")
    async def slot(wf: plait.Workflow, data: Any) -> Any:
        return await wf.wait_for_event("go")

    app.schedule("declared", workflow="slot", cron="0 0 1 1 *")
    async with (
        engine_factory(app) as engine,
        engine_factory(plait.App("cli"), workers=False) as bare,
    ):
        await engine.create_schedule("made", workflow="slot", cron="0 0 1 1 *")
        blocker = await engine.start("slot")
        await eventually(lambda: _status(engine, blocker, "running"), what="blocker admitted")
        # the command line loads no app: the queue comes with the schedule
        triggered = [
            await bare.trigger_schedule("declared"),
            await bare.trigger_schedule("made"),
            await engine.trigger_schedule("made"),
        ]
        for run_id in triggered:
            run = await engine.get_run(run_id)
            assert (run.status, run.queue) == ("queued", "one"), run
        depths = {d["queue"]: d for d in await engine.queue_depths()}
        assert (depths["one"]["active"], depths["one"]["queued"]) == (1, 3)
        for run_id in [blocker, *triggered]:
            await engine.send_event(run_id, "go", run_id)
            assert (await engine.wait(run_id, timeout=30)).output == run_id


async def test_overlap_skip_starts_no_tick_while_the_last_run_lives(engine_factory: Any) -> None:
    """``overlap="skip"``: the ticks that come while the last run still lives start
    nothing (they are not started later either); the first tick after it ends starts
    the next run."""
    app = plait.App("sched-skip")

    @app.workflow
    async def long(wf: plait.Workflow, data: Any) -> Any:
        return await wf.wait_for_event("go")

    async with engine_factory(app) as engine:
        await engine.create_schedule("beat", workflow="long", every="1s", overlap="skip")

        async def beat_runs() -> list[plait.Run]:
            runs = await engine.list_runs(workflow="long", limit=1000)
            return sorted(runs, key=lambda r: r.id)

        (first,) = await eventually(beat_runs, timeout=15, what="the first tick's run")
        assert first.scheduled_at is not None
        began = first.scheduled_at.timestamp()

        await _ticks_past(engine, "beat", began + 3)
        assert [r.id for r in await beat_runs()] == [first.id]  # both skipped
        await engine.send_event(first.id, "go")
        assert (await engine.wait(first.id, timeout=15)).status == "completed"

        async def next_run() -> list[plait.Run]:
            return [r for r in await beat_runs() if r.id != first.id]

        (second, *_) = await eventually(next_run, timeout=15, what="a tick after the run ended")
        assert second.scheduled_at is not None
        assert second.scheduled_at.timestamp() >= began + 3  # no skipped tick came back


def _chain_app() -> plait.App:
    """Workflow ``chain``: a run that continues as new twice, then waits for "go"."""
    app = plait.App("sched-chain")

    @app.workflow
    async def chain(wf: plait.Workflow, n: Any) -> Any:
        if (n or 0) < 2:
            await wf.continue_as_new((n or 0) + 1)
        return await wf.wait_for_event("go")

    return app


async def test_overlap_skip_counts_a_scheduled_run_that_continued_as_new(
    engine_factory: Any,
) -> None:
    """A scheduled run that continues as new goes on as its successor: with
    ``overlap="skip"`` no tick starts while that chain is live, however many times it
    continued, and the schedule's last run is the chain's live run."""
    async with engine_factory(_chain_app()) as engine:
        await engine.create_schedule("beat", workflow="chain", every="1s", overlap="skip")

        async def first_tick() -> list[plait.Run]:
            runs = await engine.list_runs(workflow="chain", limit=1000)
            return [r for r in runs if r.scheduled_at is not None]

        (first,) = await eventually(first_tick, timeout=15, what="the first tick's run")
        assert first.scheduled_at is not None
        began = first.scheduled_at.timestamp()

        await _ticks_past(engine, "beat", began + 3)
        runs = await engine.list_runs(workflow="chain", limit=1000)
        live = [r for r in runs if not r.status.is_terminal]
        assert len(live) == 1, f"{len(live)} chains live at once: {[r.id for r in live]}"
        assert [r.id for r in runs if r.scheduled_at is not None] == [first.id]
        assert (await engine.get_schedule("beat")).last_run_id == live[0].id
        await engine.send_event(live[0].id, "go", "done")
        assert (await engine.wait(first.id, timeout=15)).output == "done"


async def test_overlap_skip_still_sees_the_live_run_once_its_chain_is_pruned(
    engine_factory: Any,
) -> None:
    """A prune deletes the ended runs of a live chain (a loop that continues as new runs
    for ever in bounded storage), the tick's own run among them: the schedule still
    knows the chain's live run, and ``overlap="skip"`` still starts no tick beside it."""
    async with engine_factory(_chain_app()) as engine:
        await engine.create_schedule("beat", workflow="chain", every="1s", overlap="skip")

        async def live_chain() -> plait.Run | None:
            runs = await engine.list_runs(workflow="chain", limit=1000)
            live = [r for r in runs if r.status == "running" and r.continued_from is not None]
            return live[0] if len(runs) == 3 and live else None

        live = await eventually(live_chain, timeout=15, what="the first tick's chain live")
        assert await engine.prune(older_than=datetime.now(UTC) + timedelta(hours=1)) == 2
        assert (await engine.get_schedule("beat")).last_run_id == live.id
        await _ticks_past(engine, "beat", time.time() + 3)
        runs = await engine.list_runs(workflow="chain", limit=1000)
        assert [r.id for r in runs] == [live.id], [(r.id, r.status) for r in runs]
        await engine.send_event(live.id, "go", "done")
        assert (await engine.wait(live.id, timeout=15)).output == "done"


@pytest.mark.parametrize("stop", ["paused", "suspended"])
async def test_overlap_skip_holds_while_the_last_run_is_paused_not_while_it_is_suspended(
    engine_factory: Any, stop: str
) -> None:
    """A last run that a brake holds (``paused``) is a running run: with
    ``overlap="skip"`` no tick starts another, which would go on beside it once it is let
    go. A last run suspended for a person is not: the schedule goes on."""
    app = plait.App("sched-stopped")

    @app.workflow
    async def held(wf: plait.Workflow, data: Any) -> Any:
        if stop == "suspended":
            await wf.suspend("until a person looks")
        return await wf.wait_for_event("go")

    async with engine_factory(app) as engine:
        await engine.create_schedule("beat", workflow="held", every="1s", overlap="skip")

        async def first_tick() -> list[plait.Run]:
            runs = await engine.list_runs(workflow="held", limit=1000)
            return [r for r in runs if r.status in ("running", "suspended")]

        (first,) = await eventually(first_tick, timeout=15, what="the first tick's run")
        if stop == "paused":
            await engine.pause_workflow("held")

        async def stopped() -> bool:
            return (await engine.get_run(first.id)).status == stop

        await eventually(stopped, timeout=15, what=f"the first run {stop}")
        after = (await engine.get_run(first.id)).updated_at.timestamp()
        await _ticks_past(engine, "beat", after + 2)
        runs = await engine.list_runs(workflow="held", limit=1000)
        if stop == "paused":
            assert [r.id for r in runs] == [first.id]
        else:
            assert len(runs) > 1 and first.id in [r.id for r in runs]


async def _ticks_past(engine: plait.Engine, name: str, at: float) -> None:
    """Wait until schedule ``name``'s next tick is at ``at`` or later: the ticks before
    it came and went."""

    async def passed() -> bool:
        schedule = await engine.get_schedule(name)
        return schedule.next_tick is not None and schedule.next_tick.timestamp() >= at

    await eventually(passed, timeout=15, what=f"the ticks of {name!r} before {at}")
