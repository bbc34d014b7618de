"""TestEngine with flow control: schedules' ticks, delayed starts, queue slots and approval
expiry follow the virtual clock, by hand (``advance``) and by time skipping. Both stores."""

from __future__ import annotations

import time
from datetime import UTC, datetime, timedelta
from typing import Any

import plait
from plait.schedules import run_id_for
from plait.testing import TestEngine

START = datetime(2030, 1, 1, 0, 30, tzinfo=UTC)
#: the hourly ticks of the virtual day after START: 01:00 on the first day to 00:00 on
#: the next
TICKS = [datetime(2030, 1, 1, 1, tzinfo=UTC) + timedelta(hours=h) for h in range(24)]


def hourly_app() -> plait.App:
    app = plait.App()

    @app.workflow
    async def tick(wf: plait.Workflow, data: Any) -> dict[str, Any]:
        assert wf.scheduled_at is not None
        return {"scheduled_at": wf.scheduled_at.isoformat(), "now": wf.now().isoformat()}

    @app.workflow
    async def day(wf: plait.Workflow, data: None) -> str:
        await wf.sleep("a day", "1d")
        return wf.now().isoformat()

    app.schedule("hourly", cron="0 * * * *", workflow="tick", input={"kind": "sync"})
    return app


async def assert_every_tick_ran(env: TestEngine) -> None:
    runs = await env.list_runs(workflow="tick", limit=100)
    assert sorted(r.id for r in runs) == sorted(run_id_for("hourly", t.timestamp()) for t in TICKS)
    for when in TICKS:
        run = await env.get_run(run_id_for("hourly", when.timestamp()))
        assert run is not None and run.status == "completed", run
        assert run.scheduled_at == when
        # the clock stands still while the run works: it ran at its tick
        assert run.output == {"scheduled_at": when.isoformat(), "now": when.isoformat()}
    schedule = await env.get_schedule("hourly")
    assert schedule.next_tick == TICKS[-1] + timedelta(hours=1)


async def test_a_schedules_ticks_over_a_virtual_day_are_all_seen_with_advance(
    database: str,
) -> None:
    async with TestEngine(hourly_app(), database, start=START, time_skipping=False) as env:
        await env.advance("24h")
        assert env.now() == START + timedelta(days=1)
        await assert_every_tick_ran(env)


async def test_a_schedules_ticks_over_a_virtual_day_are_all_seen_with_time_skipping(
    database: str,
) -> None:
    async with TestEngine(hourly_app(), database, start=START) as env:
        # the clock jumps to every tick on its way to the end of the day's sleep
        ended = await env.run("day", timeout=30)
        assert ended == (START + timedelta(days=1)).isoformat()
        await assert_every_tick_ran(env)


async def test_a_delayed_start_completes_at_its_virtual_time(database: str) -> None:
    app = plait.App()

    @app.workflow
    async def later(wf: plait.Workflow, data: None) -> str:
        return wf.now().isoformat()

    start = datetime(2030, 1, 1, tzinfo=UTC)
    async with TestEngine(app, database, start=start) as env:
        by_hand = await env.start("later", delay="2h")
        assert (await env.get_run(by_hand)).status == "queued"
        await env.advance("1h")
        assert (await env.get_run(by_hand)).status == "queued"
        await env.advance("1h")
        run = await env.get_run(by_hand)
        assert run.status == "completed" and run.output == (start + timedelta(hours=2)).isoformat()

        skipped = await env.start("later", delay="2h")
        run = await env.wait(skipped, timeout=30)
        assert run.status == "completed" and run.output == (start + timedelta(hours=4)).isoformat()


async def test_a_queued_run_waits_for_a_slot_in_virtual_time(database: str) -> None:
    app = plait.App()
    app.queue("one", concurrency=1)

    @app.workflow(queue="one")
    async def nap(wf: plait.Workflow, data: None) -> str:
        await wf.sleep("nap", "1h")
        return wf.now().isoformat()

    start = datetime(2030, 1, 1, tzinfo=UTC)
    async with TestEngine(app, database, start=start) as env:
        first = await env.start("nap")
        second = await env.start("nap")
        # the second run is due but has no slot: the clock jumps to the first run's
        # wake-up, and the second starts when the first has ended
        done = await env.wait(second, timeout=30)
        assert done.output == (start + timedelta(hours=2)).isoformat()
        assert (await env.get_run(first)).output == (start + timedelta(hours=1)).isoformat()


def approval_app() -> plait.App:
    app = plait.App()

    @app.workflow
    async def refund(wf: plait.Workflow, data: None) -> dict[str, Any]:
        decision = await wf.approval("refund", expires="2d")
        return {"expired": decision.expired, "now": wf.now().isoformat()}

    return app


async def test_an_approval_expires_by_time_skipping_at_once(database: str) -> None:
    start = datetime(2030, 1, 1, tzinfo=UTC)
    async with TestEngine(approval_app(), database, start=start) as env:
        began = time.monotonic()
        run = await env.wait(await env.start("refund"), timeout=30)
        took = time.monotonic() - began
        assert run.status == "completed"
        assert run.output == {"expired": True, "now": (start + timedelta(days=2)).isoformat()}
        assert took < 1.0, f"two virtual days took {took:.2f}s of wall time"
        assert await env.list_approvals() == []


async def test_an_approval_expires_when_advance_reaches_its_deadline(database: str) -> None:
    start = datetime(2030, 1, 1, tzinfo=UTC)
    async with TestEngine(approval_app(), database, start=start, time_skipping=False) as env:
        began = time.monotonic()
        run_id = await env.start("refund")
        await env.advance("47h")
        assert (await env.get_run(run_id)).status == "running"
        (gate,) = await env.list_approvals()
        assert gate.run_id == run_id
        await env.advance("1h")
        run = await env.get_run(run_id)
        took = time.monotonic() - began
        assert run.status == "completed"
        assert run.output == {"expired": True, "now": (start + timedelta(days=2)).isoformat()}
        assert took < 1.0, f"two virtual days took {took:.2f}s of wall time"
