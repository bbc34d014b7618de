"""Every step of a code workflow records which steps it was reached after: the steps whose
outcomes the task that reached it had received. Sequential steps form a chain, steps
started together share their predecessor, and what follows a gather comes after all of
its steps. The record is the same whether a run goes straight through or pauses, and it
is what the run's drawing is made from."""

from __future__ import annotations

import asyncio
import sqlite3
from typing import Any

import pytest

import plait
from support.polling import eventually


def noop(value: Any = None) -> Any:
    return value


async def after_of(engine: plait.Engine, run_id: str) -> dict[str, list[str] | None]:
    return {s.key: s.reached_after for s in await engine.get_steps(run_id)}


async def test_sequential_steps_form_a_chain(engine_factory) -> None:
    app = plait.App()

    @app.workflow
    async def chain(wf: plait.Workflow) -> None:
        for i in range(3):
            await wf.do("s", noop, i)

    async with engine_factory(app) as engine:
        run_id = await engine.start("chain")
        await engine.wait(run_id, timeout=10)
        assert await after_of(engine, run_id) == {"s": [], "s#1": ["s"], "s#2": ["s#1"]}


async def test_gathered_steps_share_their_predecessor_and_what_follows_comes_after_all(
    engine_factory,
) -> None:
    app = plait.App()

    @app.workflow
    async def fan(wf: plait.Workflow) -> None:
        await wf.do("price", noop, 1)
        await asyncio.gather(wf.do("reserve", noop, 2), wf.do("fraud", noop, 3))
        async with asyncio.TaskGroup() as group:
            group.create_task(wf.do("mail", noop, 4))
            group.create_task(wf.do("sms", noop, 5))
        await wf.do("record", noop, 6)

    async with engine_factory(app) as engine:
        run_id = await engine.start("fan")
        await engine.wait(run_id, timeout=10)
        after = await after_of(engine, run_id)
    assert after["price"] == []
    assert after["reserve"] == after["fraud"] == ["price"]
    assert sorted(after["mail"] or []) == sorted(after["sms"] or []) == ["fraud", "reserve"]
    assert sorted(after["record"] or []) == ["mail", "sms"]


async def test_each_branch_of_a_gather_is_a_chain_of_its_own(engine_factory) -> None:
    app = plait.App()

    async def branch(wf: plait.Workflow, name: str, pause: bool) -> None:
        await wf.do(f"{name}1", noop)
        if pause:
            await wf.sleep(f"{name} nap", 0.05)
        await wf.do(f"{name}2", noop)

    @app.workflow
    async def two(wf: plait.Workflow) -> None:
        await wf.do("start", noop)
        await asyncio.gather(branch(wf, "a", True), branch(wf, "b", False))
        now = wf.now()
        await wf.do("end", noop, now.isoformat())

    async with engine_factory(app) as engine:
        run_id = await engine.start("two")
        await engine.wait(run_id, timeout=10)
        after = await after_of(engine, run_id)
    assert after["a1"] == after["b1"] == ["start"]
    assert after["a nap"] == ["a1"]
    assert after["a2"] == ["a nap"]
    assert after["b2"] == ["b1"]  # not after anything of branch a
    assert sorted(after["__now"] or []) == ["a2", "b2"]
    assert after["end"] == ["__now"]


async def test_the_record_is_the_same_when_the_run_pauses_on_the_way(engine_factory) -> None:
    app = plait.App()

    @app.workflow
    async def paused(wf: plait.Workflow) -> Any:
        await wf.do("a", noop)
        got = await asyncio.gather(wf.wait_for_event("go"), wf.do("b", noop, 2))
        await wf.do("c", noop)
        await wf.sleep("rest", 0.05)
        await wf.do("d", noop)
        return got

    async with engine_factory(app) as engine:
        waits = await engine.start("paused")

        async def waiting() -> bool:
            return "__event:go" in await after_of(engine, waits)

        await eventually(waiting)
        await engine.send_event(waits, "go", 1)
        await engine.wait(waits, timeout=10)
        early = await engine.start("paused")
        await engine.send_event(early, "go", 1)  # held until the run gets there
        await engine.wait(early, timeout=10)
        once, again = await after_of(engine, waits), await after_of(engine, early)
    # the same steps before each (in the order each run happened to receive them)
    assert {k: sorted(v or []) for k, v in once.items()} == {
        k: sorted(v or []) for k, v in again.items()
    }
    assert once["__event:go"] == once["b"] == ["a"]
    assert sorted(once["c"] or []) == ["__event:go", "b"]
    assert once["rest"] == ["c"] and once["d"] == ["rest"]


async def test_an_error_handler_comes_after_its_step(engine_factory) -> None:
    app = plait.App()

    @app.function(retries=0, on_error="undo")
    def boom(data: Any) -> None:
        raise RuntimeError("no")

    @app.function
    def undo(data: Any) -> None:
        return None

    @app.workflow
    async def failing(wf: plait.Workflow) -> None:
        await wf.do("first", noop)
        await wf.do("boom", boom)

    async with engine_factory(app) as engine:
        run_id = await engine.start("failing")
        await engine.wait(run_id, timeout=10)
        after = await after_of(engine, run_id)
    assert after == {"first": [], "boom": ["first"], "boom:on_error": ["boom"]}


async def test_a_run_is_drawn_from_the_record_and_an_older_run_from_its_times(
    engine_factory, database: str
) -> None:
    graphview = pytest.importorskip("plait.http.graphview")
    app = plait.App()

    @app.workflow
    async def shop(wf: plait.Workflow) -> None:
        await wf.do("price", noop)
        await asyncio.gather(wf.do("reserve", noop), wf.do("fraud", noop))
        for name in ("charge", "mail", "done"):
            await wf.do(name, noop)

    async with engine_factory(app) as engine:
        run_id = await engine.start("shop")
        run = await engine.wait(run_id, timeout=10)

        async def layers() -> dict[str, int]:
            steps = await engine.get_steps(run_id)
            drawn = graphview.draw_run(run, steps, await engine.get_history(run_id))
            return {n["id"]: n["layer"] for n in drawn["nodes"]}

        assert await layers() == {
            "price": 0,
            "reserve": 1,
            "fraud": 1,
            "charge": 2,
            "mail": 3,
            "done": 4,
        }
        # the same run as a database upgraded from before the record holds it (NULL)
        await _forget_reached_after(database, run_id)
        steps = await engine.get_steps(run_id)
        assert {s.reached_after for s in steps} == {None}
        history = await engine.get_history(run_id)
        timed, _ = graphview._timed_view(steps, _by_key(history))
        assert await layers() == {n.id: n.layer for n in timed}


def _by_key(history: list[Any]) -> dict[str, list[Any]]:
    out: dict[str, list[Any]] = {}
    for attempt in history:
        out.setdefault(attempt.key, []).append(attempt)
    return out


async def _forget_reached_after(database: str, run_id: str) -> None:
    if database.startswith("sqlite:///"):
        with sqlite3.connect(database.removeprefix("sqlite:///")) as conn:
            conn.execute("UPDATE plait_steps SET reached_after = NULL WHERE run_id = ?", (run_id,))
        return
    import asyncpg

    conn = await asyncpg.connect(database)
    try:
        await conn.execute("UPDATE plait.steps SET reached_after = NULL WHERE run_id = $1", run_id)
    finally:
        await conn.close()


async def test_a_step_after_a_wide_gather_records_a_bounded_list(engine_factory) -> None:
    """A gather of 100 after a gather of 100 would record 10,000 keys (and the work to
    keep them grows with the square): a step keeps at most the last ``MAX_AFTER``."""
    from plait.runtime.steps import MAX_AFTER

    app = plait.App()

    @app.workflow
    async def wide(wf: plait.Workflow) -> None:
        await asyncio.gather(*(wf.do("a", noop, i) for i in range(100)))
        await asyncio.gather(*(wf.do("b", noop, i) for i in range(100)))
        await wf.do("c", noop)

    async with engine_factory(app) as engine:
        run_id = await engine.start("wide")
        assert (await engine.wait(run_id, timeout=30)).status == "completed"
        after = await after_of(engine, run_id)
    b_keys = [k for k in after if k.startswith("b")]
    assert len(b_keys) == 100
    assert all(after[k] and len(after[k]) == MAX_AFTER for k in b_keys)
    assert all(a.startswith("a") for k in b_keys for a in after[k] or ())
    assert after["c"] and len(after["c"]) == MAX_AFTER
    assert all(b.startswith("b") for b in after["c"] or ())
