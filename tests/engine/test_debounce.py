"""Debounced starts and ``dedup_policy="replace"`` through the Engine, on every store:
starts within the window share one run that starts ``debounce`` after the last with the
last input (virtual time in TestEngine, and real time), ``debounce_max`` bounds it, a
replace cancels the live run and the new one runs, and two engines racing on one key
end with one run. Every bad option is named."""

from __future__ import annotations

import asyncio
import time
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

import plait
from plait.testing import TestEngine
from support.polling import eventually

START = datetime(2030, 1, 1, tzinfo=UTC)


def debounce_app() -> plait.App:
    app = plait.App("debounce")

    @app.workflow
    async def sync(wf: plait.Workflow, data: Any) -> dict[str, Any]:
        return {"data": data, "now": wf.now().isoformat()}

    @app.workflow
    async def gate(wf: plait.Workflow, data: Any) -> Any:
        await wf.wait_for_event("go")
        return data

    app.queue("lane", concurrency=5)
    failed: set[str] = set()

    @app.workflow(queue="lane")
    async def flaky(wf: plait.Workflow, data: Any) -> Any:
        if wf.run_id not in failed:  # its first pass fails; a retry completes
            failed.add(wf.run_id)
            raise RuntimeError(f"sync {data} failed")
        return data

    return app


# -- debounce in virtual time -------------------------------------------------------------------


async def test_twenty_starts_within_two_seconds_make_one_run_with_the_last_input(
    database: str,
) -> None:
    async with TestEngine(debounce_app(), database, start=START) as env:
        ids = []
        for n in range(20):
            if n:
                await env.advance(0.0625)  # a binary fraction: the sums stay exact
            ids.append(await env.start("sync", n, debounce="5s", debounce_key="user-1"))
        last_start = env.now()
        assert last_start == START + timedelta(seconds=19 * 0.0625)
        assert len(set(ids)) == 1
        queued = await env.get_run(ids[0])
        assert queued.status == "queued" and queued.input == 19
        assert queued.start_at == last_start + timedelta(seconds=5)
        run = await env.wait(ids[0], timeout=30)
        assert run.status == "completed"
        assert run.output == {"data": 19, "now": (last_start + timedelta(seconds=5)).isoformat()}
        assert [r.id for r in await env.list_runs(workflow="sync")] == ids[:1]


async def test_a_start_that_joins_a_waiting_run_merges_its_tags_into_it(database: str) -> None:
    """The latest start wins, for the input and for a tag key both starts give; a key
    only the first gave stays. The run is found by every tag it holds (the tag index
    follows the merge)."""
    async with TestEngine(debounce_app(), database, start=START) as env:
        first = await env.start("sync", 1, debounce="5s", tags={"customer": "a", "team": "x"})
        second = await env.start("sync", 2, debounce="5s", tags={"customer": "b", "ui": "web"})
        third = await env.start("sync", 3, debounce="5s")  # no tags: the run keeps its own
        assert first == second == third
        run = await env.get_run(first)
        assert run.input == 3
        assert run.tags == {"customer": "b", "team": "x", "ui": "web"}
        for pair in ({"customer": "b"}, {"team": "x"}, {"ui": "web"}):
            assert [r.id for r in await env.list_runs(tags=pair)] == [first], pair
        assert await env.list_runs(tags={"customer": "a"}) == []
        assert (await env.wait(first, timeout=30)).output["data"] == 3


async def test_joining_starts_never_take_a_run_past_the_tag_limit(database: str) -> None:
    """Each start passes the limit of 16 tags on its own; merged, they would not. A start
    whose tags would take the run past it leaves the run's tags (and their index) as they
    are, so the run's own ``wf.set_tags`` and a list by its tags go on working."""
    async with TestEngine(debounce_app(), database, start=START) as env:
        first = await env.start("sync", 0, debounce="5s", tags={f"k{n}": "v" for n in range(15)})
        for n in range(15, 20):
            assert await env.start("sync", n, debounce="5s", tags={f"k{n}": "v"}) == first
        run = await env.get_run(first)
        assert run.input == 19
        assert run.tags == {f"k{n}": "v" for n in range(16)}
        assert await env.list_runs(tags={"k16": "v"}) == []
        assert [r.id for r in await env.list_runs(tags={"k15": "v"})] == [first]
        assert (await env.wait(first, timeout=30)).output["data"] == 19


async def test_debounce_max_bounds_the_wait_from_the_first_start(database: str) -> None:
    async with TestEngine(debounce_app(), database, start=START) as env:
        ids = []
        for n in range(6):  # one a second: each alone would push the start 5 s on
            if n:
                await env.advance("1s")
            ids.append(await env.start("sync", n, debounce="5s", debounce_max="6s"))
        assert len(set(ids)) == 1
        await env.advance("1s")  # the first start plus debounce_max: it starts now
        run = await env.get_run(ids[0])
        assert run.status == "completed"
        assert run.output == {"data": 5, "now": (START + timedelta(seconds=6)).isoformat()}
        # once it has started, the key makes a new run
        after = await env.start("sync", 6, debounce="5s", debounce_max="6s")
        assert after != ids[0]
        assert (await env.wait(after, timeout=30)).output["data"] == 6


async def test_keys_debounce_apart_and_run_waits_for_a_debounced_run(database: str) -> None:
    async with TestEngine(debounce_app(), database, start=START) as env:
        first = await env.start("sync", "a", debounce="1m", debounce_key="a")
        other = await env.start("sync", "b", debounce="1m", debounce_key="b")
        shared = await env.start("sync", "c", debounce="1m")  # the key: the workflow's name
        assert len({first, other, shared}) == 3
        assert await env.start("sync", "d", debounce="1m", debounce_key="sync") == shared
        output = await env.run("sync", "e", debounce="1m", debounce_key="a", timeout=30)
        assert output == {"data": "e", "now": (START + timedelta(minutes=1)).isoformat()}


async def test_a_debounced_start_whose_dedup_key_is_held_returns_the_holder(
    database: str,
) -> None:
    async with TestEngine(debounce_app(), database, start=START) as env:
        holder = await env.start("gate", "holder", dedup="one-at-a-time")
        debounced = {"debounce": "10s", "dedup": "one-at-a-time"}
        assert await env.start("gate", "late", **debounced) == holder
        await env.send_event(holder, "go")
        assert (await env.wait(holder, timeout=30)).output == "holder"
        # the key is free: debounced starts share one run, which then holds it
        first = await env.start("gate", 1, **debounced)
        assert first != holder and await env.start("gate", 2, **debounced) == first
        assert (await env.get_run(first)).dedup == "one-at-a-time"


async def test_start_many_debounces_its_inputs_into_one_run(database: str) -> None:
    async with TestEngine(debounce_app(), database, start=START) as env:
        ids = await env.start_many("sync", [1, 2, 3], debounce="10s", debounce_key="k")
        assert len(set(ids)) == 1
        assert await env.start("sync", 4, debounce="10s", debounce_key="k") == ids[0]
        run = await env.wait(ids[0], timeout=30)
        assert run.output["data"] == 4
        with pytest.raises(ValueError, match="dedup_policy"):
            await env.start_many("sync", [1, 2], dedup="k", dedup_policy="replace")


async def test_a_debounced_runs_deadline_counts_from_its_moved_start(database: str) -> None:
    async with TestEngine(debounce_app(), database, start=START) as env:
        run_id = await env.start("gate", 1, debounce="10s", timeout="1m")
        await env.advance("5s")
        assert await env.start("gate", 2, debounce="10s", timeout="1m") == run_id
        run = await env.get_run(run_id)
        assert run.deadline_at == START + timedelta(seconds=75)


# -- debounce in real time, and across engines ----------------------------------------------------


async def test_debounced_starts_in_real_time_start_after_the_last(engine_factory: Any) -> None:
    async with engine_factory(debounce_app()) as engine:
        ids = []
        for n in range(20):
            last = time.time()
            ids.append(await engine.start("sync", n, debounce="2s", debounce_key="k"))
        assert len(set(ids)) == 1
        run = await engine.wait(ids[0], timeout=30)
        assert run.output["data"] == 19
        started = datetime.fromisoformat(run.output["now"]).timestamp()
        assert started >= last + 2.0 - 0.001
        assert len(await engine.list_runs(workflow="sync")) == 1


async def test_engines_debouncing_one_key_at_once_make_one_run(engine_factory: Any) -> None:
    async with (
        engine_factory(debounce_app(), workers=False) as one,
        engine_factory(debounce_app(), workers=False) as two,
        engine_factory(debounce_app(), workers=False) as three,
    ):
        for key in ("a", "b", "c", "d", "e"):
            ids = await asyncio.gather(
                *(
                    engine.start("sync", n, debounce="1h", debounce_key=key)
                    for n in range(6)
                    for engine in (one, two, three)
                )
            )
            assert len(set(ids)) == 1
            run = await one.get_run(ids[0])
            assert run.status == "queued" and run.input in range(6)
        assert len(await one.list_runs(workflow="sync")) == 5


async def test_a_retried_debounced_run_leaves_the_run_waiting_with_its_key(
    engine_factory: Any,
) -> None:
    """An admitted debounced run has left its window: once it failed and a new debounced
    start of its key waits, a retry reopens it (queued again, for its queue) without
    taking the key from the waiting run, which keeps its input, start and later starts."""
    async with engine_factory(debounce_app()) as engine:
        first = await engine.start("flaky", "one", debounce="0.2s", debounce_key="acme")
        assert (await engine.wait(first, timeout=30)).status == "failed"
        waiting = await engine.start("flaky", "two", debounce="1h", debounce_key="acme")
        assert waiting != first
        before = await engine.get_run(waiting)
        assert before.status == "queued" and before.start_at is not None
        assert (await engine.retry(first)).status in ("queued", "running")
        await eventually(lambda: _ended(engine, first), timeout=30, what="the retried run ending")
        retried = await engine.get_run(first)
        assert retried.status == "completed" and retried.output == "one"
        after = await engine.get_run(waiting)
        assert after.status == "queued" and after.input == "two"
        assert after.start_at == before.start_at
        # the key is still the waiting run's: the next start joins it
        assert await engine.start("flaky", "three", debounce="1h", debounce_key="acme") == waiting
        assert (await engine.get_run(waiting)).input == "three"
        assert len(await engine.list_runs(workflow="flaky")) == 2


# -- dedup_policy="replace" ---------------------------------------------------------------------


async def test_replace_cancels_the_live_run_and_the_new_one_runs(engine_factory: Any) -> None:
    async with engine_factory(debounce_app()) as engine:
        old = await engine.start("gate", "old", dedup="job-1")
        await eventually(lambda: _waiting(engine, old), what="the first run waiting")
        assert await engine.start("gate", "skip", dedup="job-1") == old  # the default
        new = await engine.start("gate", "new", dedup="job-1", dedup_policy="replace")
        assert new != old
        cancelled = await engine.get_run(old)
        assert cancelled.status == "cancelled" and cancelled.dedup == "job-1"
        assert (
            cancelled.error is not None and f"replaced by run {new}" in cancelled.error["message"]
        )
        fresh = await engine.get_run(new)
        assert fresh.dedup == "job-1" and fresh.input == "new"
        await eventually(lambda: _waiting(engine, new), what="the new run waiting")
        await engine.send_event(new, "go")
        assert (await engine.wait(new, timeout=30)).output == "new"
        # no live run holds the key now: a replace is a plain start
        again = await engine.start("gate", "again", dedup="job-1", dedup_policy="replace")
        assert (await engine.get_run(new)).status == "completed"
        assert (await engine.get_run(again)).status in ("running", "queued")


async def test_replace_with_a_taken_run_id_changes_nothing(engine_factory: Any) -> None:
    async with engine_factory(debounce_app()) as engine:
        first = await engine.start("gate", 1, run_id="order-1", dedup="job")
        again = await engine.start("gate", 2, run_id="order-1", dedup="job", dedup_policy="replace")
        assert again == first
        assert (await engine.get_run(first)).status in ("running", "queued")


async def test_racing_replace_starts_leave_exactly_one_live_run(engine_factory: Any) -> None:
    async with (
        engine_factory(debounce_app()) as one,
        engine_factory(debounce_app(), workers=False) as two,
    ):
        await one.start("gate", "first", dedup="job")
        ids = await asyncio.gather(
            *(
                engine.start("gate", n, dedup="job", dedup_policy="replace")
                for n in range(8)
                for engine in (one, two)
            )
        )
        assert len(set(ids)) == 16
        runs = await one.list_runs(workflow="gate", limit=100)
        live = [r for r in runs if r.status in ("running", "queued")]
        assert len(runs) == 17 and len(live) == 1
        assert all(r.status == "cancelled" for r in runs if r not in live)


async def _ended(engine: plait.Engine, run_id: str) -> bool:
    """Whether the run has ended (completed, failed or cancelled)."""
    return (await engine.get_run(run_id)).status in ("completed", "failed", "cancelled")


async def _waiting(engine: plait.Engine, run_id: str) -> bool:
    """Whether the run's pass reached its wait for the event."""
    return bool(await engine.get_steps(run_id))


# -- bad options ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("options", "error", "names"),
    [
        ({"debounce": "soon"}, ValueError, "debounce"),
        ({"debounce": 0}, ValueError, "debounce"),
        ({"debounce": -1}, ValueError, "debounce"),
        ({"debounce": "5s", "debounce_max": "1s"}, ValueError, "debounce_max"),
        ({"debounce": "5s", "debounce_max": "often"}, ValueError, "debounce_max"),
        ({"debounce_key": "k"}, ValueError, "debounce_key"),
        ({"debounce_max": "1m"}, ValueError, "debounce_max"),
        ({"debounce": "5s", "debounce_key": ""}, ValueError, "debounce_key"),
        ({"debounce": "5s", "debounce_key": 5}, TypeError, "debounce_key"),
        ({"debounce": "5s", "delay": "1s"}, ValueError, "debounce"),
        ({"debounce": "5s", "run_id": "r-1"}, ValueError, "run_id"),
        ({"debounce": "5s", "inline": True}, ValueError, "inline"),
        ({"dedup_policy": "newest"}, ValueError, "dedup_policy"),
        ({"dedup_policy": None}, ValueError, "dedup_policy"),
        ({"dedup_policy": "replace"}, ValueError, "dedup_policy"),
        (
            {"dedup": "k", "dedup_policy": "replace", "debounce": "5s"},
            ValueError,
            "dedup_policy",
        ),
    ],
)
async def test_bad_debounce_and_dedup_options_are_refused(
    engine_factory: Any, options: dict[str, Any], error: type[Exception], names: str
) -> None:
    async with engine_factory(debounce_app(), workers=False) as engine:
        with pytest.raises(error, match=names):
            await engine.start("sync", 1, **options)
        assert await engine.list_runs() == []
