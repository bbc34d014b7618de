"""Events with a de-duplication key: a run takes one event of each key, held or consumed,
whoever sends it and however often; a different key, or none, is another event."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

import plait
from plait.errors import RunNotFoundError, RunStateError

app = plait.App("event-dedup")


@app.workflow
async def collect(wf: plait.Workflow) -> list[Any]:
    """Every ``item`` event until one says ``"stop"``."""
    got: list[Any] = []
    while True:
        payload = await wf.wait_for_event("item")
        if payload == "stop":
            return got
        got.append(payload)


@app.workflow
async def later(wf: plait.Workflow) -> list[Any]:
    """Holds ``item`` events until ``go`` comes, then takes two."""
    await wf.wait_for_event("go")
    return [await wf.wait_for_event("item"), await wf.wait_for_event("item")]


async def _held(engine: plait.Engine, run_id: str, name: str) -> list[Any]:
    snapshot = await engine.store.load_pass(run_id)
    assert snapshot is not None
    return [e.payload for e in snapshot.events if e.name == name]


async def test_an_event_sent_three_times_with_one_key_is_received_once(
    engine_factory: Callable[..., Any],
) -> None:
    async with engine_factory(app) as engine:
        run_id = await engine.start("collect")
        answers = [await engine.send_event(run_id, "item", "a", dedup="k1") for _ in range(3)]
        assert answers[1:] == [False, False]
        # a different key, or no key, is another event, even with the same payload
        await engine.send_event(run_id, "item", "a", dedup="k2")
        await engine.send_event(run_id, "item", "b")
        await engine.send_event(run_id, "item", "b")
        assert await engine.send_event(run_id, "item", "a", dedup="k2") is False
        await engine.send_event(run_id, "item", "stop")
        run = await engine.wait(run_id, timeout=30)
        assert run.status == "completed", run.error
        assert run.output == ["a", "a", "b", "b"]


async def test_a_held_event_counts_for_its_key(engine_factory: Callable[..., Any]) -> None:
    async with engine_factory(app) as engine:
        run_id = await engine.start("later")
        for _ in range(3):
            assert await engine.send_event(run_id, "item", 1, dedup="once") is False
        assert await _held(engine, run_id, "item") == ["1"]
        await engine.send_event(run_id, "item", 2, dedup="twice")
        await engine.send_event(run_id, "go")
        run = await engine.wait(run_id, timeout=30)
        assert run.output == [1, 2]
        # the run took the key: sending it again changes nothing, even now it has ended
        assert await engine.send_event(run_id, "item", 1, dedup="once") is False
        with pytest.raises(RunStateError):
            await engine.send_event(run_id, "item", 3, dedup="new key")
        with pytest.raises(RunStateError):
            await engine.send_event(run_id, "item", 3)


async def test_two_engines_racing_with_one_key_store_one_event(
    engine_factory: Callable[..., Any],
) -> None:
    async with engine_factory(app) as one, engine_factory(app) as two:
        run_id = await one.start("later")
        for turn in range(5):
            key = f"race-{turn}"
            await asyncio.gather(
                *(engine.send_event(run_id, "item", turn, dedup=key) for engine in (one, two) * 4)
            )
        assert sorted(await _held(one, run_id, "item")) == ["0", "1", "2", "3", "4"]


async def test_a_bad_key_is_refused_naming_dedup(engine_factory: Callable[..., Any]) -> None:
    async with engine_factory(app) as engine:
        run_id = await engine.start("later")
        for bad, error in (
            ("", ValueError),
            ("x" * 513, ValueError),
            ("a\x00b", ValueError),
            (5, TypeError),
            (b"key", TypeError),
            ("__send:0f4b", ValueError),  # the keys of wf.send_event's own sends
        ):
            with pytest.raises(error, match="dedup"):
                await engine.send_event(run_id, "item", 1, dedup=bad)  # type: ignore[arg-type]
        assert await _held(engine, run_id, "item") == []
        await engine.send_event(run_id, "item", 1, dedup="x" * 512)
        assert await _held(engine, run_id, "item") == ["1"]


async def test_a_pruned_runs_keys_go_with_it(engine_factory: Callable[..., Any]) -> None:
    async with engine_factory(app) as engine:
        run_id = await engine.start("collect")
        await engine.send_event(run_id, "item", "stop", dedup="k")
        assert (await engine.wait(run_id, timeout=30)).status == "completed"
        assert await engine.prune(older_than=datetime.now(UTC) + timedelta(hours=1)) == 1
        with pytest.raises(RunNotFoundError):
            await engine.send_event(run_id, "item", "stop", dedup="k")
