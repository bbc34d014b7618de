"""Fair queues through the Engine, on every store: a key with a long backlog does not hold
back a key with a few runs, weights hold within a turn, and every bad declaration is
named."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

import plait


class Gauge:
    """How many step bodies run at once in this process, and the most ever."""

    def __init__(self) -> None:
        self.now = self.most = 0

    async def hold(self) -> None:
        self.now += 1
        self.most = max(self.most, self.now)
        try:
            await asyncio.sleep(0.002)
        finally:
            self.now -= 1


def fair_app(gauge: Gauge | None = None, **limits: Any) -> plait.App:
    app = plait.App("fair")
    app.queue("tenants", concurrency=2, **limits)

    @app.function
    async def body(data: Any) -> Any:
        if gauge is not None:
            await gauge.hold()
        return data

    @app.workflow(queue="tenants")
    async def job(wf: plait.Workflow, data: Any) -> Any:
        if gauge is not None:
            return await wf.do("body", body, data)
        return data

    return app


async def admission_order(
    engine: plait.Engine, keys: dict[str, int], last: dict[str, int]
) -> list[tuple[float, str, int, str]]:
    """Start ``keys[k]`` runs of each key (in that order) while the queue is paused, let
    them in, wait until run number ``last[k]`` of each key has ended, and return the
    admitted runs as (admitted at, key, number within its key, run id), in admission
    order."""
    await engine.pause_queue("tenants")
    started: dict[str, list[str]] = {}
    for key, count in keys.items():
        started[key] = await engine.start_many("job", range(count), key=key)
    await engine.resume_queue("tenants")
    for key, n in last.items():
        run = await engine.wait(started[key][n], timeout=60)
        assert run.status == "completed"
    admitted: list[tuple[float, str, int, str]] = []
    for key, ids in started.items():
        for n, run_id in enumerate(ids):
            run = await engine.get_run(run_id)
            if run.admitted_at is not None:
                admitted.append((run.admitted_at.timestamp(), key, n, run_id))
    return sorted(admitted)


async def test_a_small_key_is_not_held_back_by_a_large_one(engine_factory: Any) -> None:
    async with engine_factory(fair_app(fair=True)) as engine:
        order = await admission_order(engine, {"A": 200, "B": 10}, {"A": 39, "B": 9})
    a_40th = next(at for at, key, n, _id in order if key == "A" and n == 39)
    b_last = max(at for at, key, _n, _id in order if key == "B")
    assert b_last < a_40th


async def test_turns_hold_across_engines_admitting_together(engine_factory: Any) -> None:
    """Two engines (each with its worker) admit from one fair queue: the turn order is
    the database's, so they continue one round robin, and the limit holds across both."""
    gauge = Gauge()
    async with (
        engine_factory(fair_app(gauge, fair=True)) as engine,
        engine_factory(fair_app(gauge, fair=True)),
    ):
        order = await admission_order(engine, {"A": 60, "B": 10}, {"A": 39, "B": 9})
    a_40th = next(at for at, key, n, _id in order if key == "A" and n == 39)
    b_last = max(at for at, key, _n, _id in order if key == "B")
    assert b_last < a_40th
    assert 1 <= gauge.most <= 2


async def test_without_fair_a_backlog_goes_first(engine_factory: Any) -> None:
    async with engine_factory(fair_app()) as engine:
        order = await admission_order(engine, {"A": 30, "B": 5}, {"A": 29, "B": 4})
    a_last = max(at for at, key, _n, _id in order if key == "A")
    b_first = min(at for at, key, _n, _id in order if key == "B")
    # two slots freed together are filled in one admission: A's last and B's first may
    # share its time, but B is never admitted before it
    assert a_last <= b_first


async def test_weights_hold_within_one_turn(engine_factory: Any) -> None:
    async with engine_factory(fair_app(fair=True, weights={"A": 3})) as engine:
        order = await admission_order(engine, {"A": 60, "B": 20}, {"A": 29, "B": 9})
    keys = [key for _at, key, _n, _id in order][:40]
    # A gets 3 admissions per turn to B's 1 (runs admitted together may be in either order)
    for n in range(4, 41, 4):
        assert abs(keys[:n].count("A") - 3 * n // 4) <= 1, keys


@pytest.mark.parametrize(
    ("limits", "error", "names"),
    [
        ({"weights": {"A": 2}}, ValueError, "weights of queue 'q' need fair=True"),
        ({"fair": True, "weights": {"A": 0}}, ValueError, "weight of key 'A' in queue 'q'"),
        ({"fair": True, "weights": {"A": 1.5}}, ValueError, "weight of key 'A'"),
        ({"fair": True, "weights": {"A": True}}, ValueError, "weight of key 'A'"),
        ({"fair": True, "weights": {"A": 1001}}, ValueError, "from 1 to 1000"),
        ({"fair": True, "weights": {"": 2}}, ValueError, "key in the weights of queue 'q'"),
        ({"fair": True, "weights": {3: 2}}, TypeError, "key in the weights of queue 'q'"),
        ({"fair": True, "weights": [("A", 2)]}, TypeError, "weights of queue 'q' must be"),
        ({"fair": "yes"}, TypeError, "fair of queue 'q'"),
    ],
)
def test_bad_fair_declarations_are_refused(
    limits: dict[str, Any], error: type[Exception], names: str
) -> None:
    app = plait.App("bad")
    with pytest.raises(error, match=names):
        app.queue("q", **limits)
    assert "q" not in app.queues


def test_a_fair_queue_shows_its_weights() -> None:
    queue = plait.App("shown").queue("q", concurrency=2, fair=True, weights={"big": 3})
    assert queue.fair and queue.weights == {"big": 3}
    assert queue.to_dict()["fair"] is True and queue.to_dict()["weights"] == {"big": 3}
    assert queue.describe() == "concurrency=2 fair weights {big: 3}"


async def test_queue_depths_show_the_weights_a_fair_queue_declares(engine_factory: Any) -> None:
    """The stored limits show each weight as declared, to the declaring app and to any
    other: a weight's cost in turns is rounded (``TURN // weight``), so 1000 and 1001, or
    997 and 998, cost alike, and a weight read back from its cost would be wrong."""
    weights = {"big": 1000, "mid": 900, "odd": 997, "small": 3}
    weighted = fair_app(fair=True, weights=weights)
    async with engine_factory(weighted, workers=False) as engine:
        (shown,) = [q for q in await engine.queue_depths() if q["queue"] == "tenants"]
        assert shown["limits"]["weights"] == weights and shown["source"] == "declared"
    async with engine_factory(plait.App("bystander"), workers=False) as engine:
        (shown,) = [q for q in await engine.queue_depths() if q["queue"] == "tenants"]
        assert shown["limits"]["weights"] == weights and shown["source"] == "stored"


async def test_keys_tied_at_the_clock_take_their_first_turns_in_start_order(
    engine_factory: Any,
) -> None:
    """Start-time fair queueing: the first run of every key that arrives at the clock has
    the same turn, so the first round goes in start order, and a weight makes its key's
    later turns come sooner (it gave the weighted key the first two admissions, ahead of
    keys started before it)."""
    app = plait.App("fair")
    app.queue("tenants", concurrency=1, fair=True, weights={"gold": 3})

    @app.workflow(queue="tenants")
    async def job(wf: plait.Workflow, data: Any) -> Any:
        return data

    async with engine_factory(app) as engine:
        order = await admission_order(
            engine, {"big": 3, "small": 3, "gold": 3}, {"big": 2, "small": 2, "gold": 2}
        )
    assert [f"{key}{n}" for _at, key, n, _id in order] == [
        "big0",
        "small0",
        "gold0",
        "gold1",
        "gold2",
        "big1",
        "small1",
        "big2",
        "small2",
    ]
