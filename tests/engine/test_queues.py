"""Queues through the Engine, on every store: limits, priorities, de-duplication, delayed
starts, queued steps, and every bad input named."""

from __future__ import annotations

import asyncio
import time
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

import plait
from support.polling import eventually


class Gauge:
    """How many bodies run at once, overall and per key, and the most ever."""

    def __init__(self) -> None:
        self.now = 0
        self.most = 0
        self.keys: dict[str, int] = {}
        self.most_per_key = 0
        self.order: list[Any] = []
        #: bodies (by their data) that run until the test lets them end
        self.held: dict[Any, asyncio.Event] = {}

    async def hold(self, data: Any, key: str | None = None, seconds: float = 0.03) -> Any:
        self.now += 1
        self.most = max(self.most, self.now)
        self.order.append(data)
        if key is not None:
            self.keys[key] = self.keys.get(key, 0) + 1
            self.most_per_key = max(self.most_per_key, self.keys[key])
        try:
            if data in self.held:
                await asyncio.wait_for(self.held[data].wait(), 30)
            await asyncio.sleep(seconds)
        finally:
            self.now -= 1
            if key is not None:
                self.keys[key] -= 1
        return data


def queue_app(gauge: Gauge, **limits: Any) -> plait.App:
    app = plait.App("queues")
    app.queue("work", **limits)

    @app.function
    async def body(data: dict[str, Any]) -> Any:
        return await gauge.hold(data["n"], data.get("key"))

    @app.workflow(queue="work")
    async def limited(wf: plait.Workflow, data: dict[str, Any]) -> Any:
        return await wf.do("body", body, data)

    @app.workflow
    async def free(wf: plait.Workflow, data: Any) -> Any:
        return {"data": data, "scheduled_at": wf.scheduled_at}

    return app


async def test_concurrency_holds_and_every_run_completes(engine_factory: Any) -> None:
    gauge = Gauge()
    async with engine_factory(queue_app(gauge, concurrency=2)) as engine:
        ids = [await engine.start("limited", {"n": n}) for n in range(12)]
        for run_id in ids:
            run = await engine.wait(run_id, timeout=30)
            assert run.status == "completed" and run.queue == "work"
            assert run.admitted_at is not None
    assert gauge.most == 2


async def test_per_key_never_runs_two_of_one_key(engine_factory: Any) -> None:
    gauge = Gauge()
    async with engine_factory(queue_app(gauge, concurrency=4, per_key=1)) as engine:
        ids = []
        for n in range(16):
            key = f"k{n % 4}"
            ids.append(await engine.start("limited", {"n": n, "key": key}, key=key))
        for run_id in ids:
            assert (await engine.wait(run_id, timeout=30)).status == "completed"
    assert gauge.most_per_key == 1
    assert gauge.most >= 2  # other keys went past a busy one


async def test_priorities_are_admitted_highest_first(engine_factory: Any) -> None:
    gauge = Gauge()
    gauge.held["blocker"] = release = asyncio.Event()
    app = queue_app(gauge, concurrency=1)
    async with engine_factory(app) as engine:
        # hold the only slot until the others have all queued up
        blocker = await engine.start("limited", {"n": "blocker"}, delay=0)
        await eventually(lambda: _status(engine, blocker, "running"), what="blocker admitted")
        ids = [await engine.start("limited", {"n": p}, priority=p) for p in (1, 5, -3, 9, 5)]
        release.set()
        for run_id in ids:
            await engine.wait(run_id, timeout=30)
    assert gauge.order[0] == "blocker"
    assert gauge.order[1:] == [9, 5, 5, 1, -3]


async def _status(engine: plait.Engine, run_id: str, status: str) -> bool:
    return (await engine.get_run(run_id)).status == status


async def test_dedup_returns_the_live_run_then_frees(engine_factory: Any) -> None:
    gauge = Gauge()
    async with engine_factory(queue_app(gauge)) as engine:
        first = await engine.start("limited", {"n": 1}, dedup="import:42", delay="200ms")
        second = await engine.start("limited", {"n": 2}, dedup="import:42")
        assert second == first
        assert (await engine.get_run(first)).status == "queued"
        await engine.wait(first, timeout=30)
        third = await engine.start("limited", {"n": 3}, dedup="import:42")
        assert third != first
        assert (await engine.wait(third, timeout=30)).output == 3
    assert gauge.order == [1, 3]


async def test_a_delayed_start_does_not_run_early(engine_factory: Any) -> None:
    gauge = Gauge()
    async with engine_factory(queue_app(gauge)) as engine:
        before = time.time()
        run_id = await engine.start("free", 1, delay=timedelta(milliseconds=600))
        run = await engine.get_run(run_id)
        assert run.status == "queued" and run.start_at is not None
        listed = await engine.list_runs(status="queued")
        assert [r.id for r in listed] == [run_id]
        done = await engine.wait(run_id, timeout=30)
        assert done.admitted_at is not None
        assert done.admitted_at.timestamp() >= before + 0.6
        at = datetime.now(UTC) + timedelta(milliseconds=300)
        later = await engine.start("free", 2, start_at=at)
        done = await engine.wait(later, timeout=30)
        assert done.admitted_at is not None and done.admitted_at >= at


async def test_a_delayed_start_survives_a_restart(engine_factory: Any) -> None:
    gauge = Gauge()
    app = queue_app(gauge)
    async with engine_factory(app) as engine:
        run_id = await engine.start("free", 7, delay="700ms")
    async with engine_factory(app) as engine:
        assert (await engine.get_run(run_id)).status == "queued"
        assert (await engine.wait(run_id, timeout=30)).output["data"] == 7


async def test_a_queued_run_can_be_cancelled_and_take_events(engine_factory: Any) -> None:
    gauge = Gauge()
    async with engine_factory(queue_app(gauge)) as engine:
        run_id = await engine.start("free", 1, delay="1h")
        assert await engine.send_event(run_id, "hello", {"x": 1}) is False
        cancelled = await engine.cancel(run_id, "not needed")
        assert cancelled.status == "cancelled"


async def test_queued_steps_hold_their_queue_limit(engine_factory: Any) -> None:
    gauge = Gauge()
    app = plait.App("steps")
    app.queue("emails", concurrency=2)

    @app.function(queue="emails")
    async def send(n: int) -> int:
        return await gauge.hold(n)

    @app.workflow
    async def fan_out(wf: plait.Workflow, count: int) -> list[int]:
        return list(await asyncio.gather(*(wf.do(f"send {n}", send, n) for n in range(count))))

    assert app.functions["send"].queued
    async with engine_factory(app) as engine:
        assert await engine.run("fan_out", 8, timeout=30) == list(range(8))
    assert gauge.most == 2


async def test_rate_admits_at_most_n_per_second(engine_factory: Any) -> None:
    gauge = Gauge()
    async with engine_factory(queue_app(gauge, rate="4/s")) as engine:
        ids = [await engine.start("limited", {"n": n}) for n in range(10)]
        runs = [await engine.wait(run_id, timeout=30) for run_id in ids]
    admitted = sorted(r.admitted_at.timestamp() for r in runs if r.admitted_at)
    assert len(admitted) == 10
    for i, start in enumerate(admitted):
        window = [t for t in admitted[i:] if t < start + 1.0]
        assert len(window) <= 4, admitted


async def test_queue_depths(engine_factory: Any) -> None:
    gauge = Gauge()
    async with engine_factory(queue_app(gauge, concurrency=1)) as engine:
        await engine.start("limited", {"n": 1}, delay="1h")
        await engine.start("free", 1, delay="1h")
        depths = {d["queue"]: d for d in await engine.queue_depths()}
        assert depths["work"]["queued"] == 1
        assert depths["work"]["limits"]["concurrency"] == 1
        assert depths[None]["queued"] == 1


# -- bad input: every field named, nothing stored -----------------------------------------------


@pytest.mark.parametrize(
    ("options", "error", "names"),
    [
        ({"queue": 5}, TypeError, "queue"),
        ({"queue": ""}, ValueError, "queue"),
        ({"priority": "high"}, TypeError, "priority"),
        ({"priority": 2**40}, ValueError, "priority"),
        ({"priority": True}, TypeError, "priority"),
        ({"key": "k"}, ValueError, "key"),
        ({"queue": "work", "key": 3}, TypeError, "key"),
        ({"dedup": ""}, ValueError, "dedup"),
        ({"delay": "soon"}, ValueError, "delay"),
        ({"delay": -1}, ValueError, "delay"),
        ({"start_at": datetime(2030, 1, 1)}, ValueError, "start_at"),
        ({"start_at": "2030-01-01"}, TypeError, "start_at"),
        ({"delay": 1, "start_at": datetime(2030, 1, 1, tzinfo=UTC)}, ValueError, "start_at"),
        ({"queue": "work", "inline": True}, ValueError, "inline"),
    ],
)
async def test_bad_start_options_are_refused(
    engine_factory: Any, options: dict[str, Any], error: type[Exception], names: str
) -> None:
    async with engine_factory(queue_app(Gauge()), workers=False) as engine:
        with pytest.raises(error, match=names):
            await engine.start("free", 1, **options)
        assert await engine.list_runs() == []


@pytest.mark.parametrize(
    ("limits", "names"),
    [
        ({"concurrency": 0}, "concurrency"),
        ({"concurrency": "2"}, "concurrency"),
        ({"per_key": -1}, "per_key"),
        ({"rate": "10"}, "rate"),
        ({"rate": "10/y"}, "rate"),
        ({"rate": "0/s"}, "rate"),
        ({"rate": 10}, "rate"),
    ],
)
def test_bad_queue_limits_are_refused(limits: dict[str, Any], names: str) -> None:
    app = plait.App()
    with pytest.raises(ValueError, match=names):
        app.queue("q", **limits)
    assert app.queues == {}


def test_a_queue_name_must_be_a_string() -> None:
    app = plait.App()
    with pytest.raises(TypeError, match="queue"):
        app.queue(3)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="queue of workflow"):

        @app.workflow(queue=["q"])  # type: ignore[arg-type]
        async def wf(wf: plait.Workflow, data: Any) -> None: ...

    with pytest.raises(TypeError, match="queue of function"):

        @app.function(queue=1)  # type: ignore[arg-type]
        def fn(data: Any) -> None: ...

    assert app.workflows == {} and app.functions == {}


def test_rates_are_read_as_written() -> None:
    from plait.queues import parse_rate

    assert (parse_rate("10/s").count, parse_rate("10/s").window) == (10, 1.0)
    assert parse_rate("100/m").window == 60.0
    assert parse_rate("5 / h").window == 3600.0
    assert parse_rate("20/10s").window == 10.0
    assert str(parse_rate("100/m")) == "100/m"


async def test_a_retried_run_of_a_queue_is_admitted_again(engine_factory: Any) -> None:
    app = plait.App("retry")
    app.queue("work", concurrency=1)
    attempts = {"n": 0}

    @app.function(retries=0)
    async def shaky(data: Any) -> str:
        attempts["n"] += 1
        if attempts["n"] == 1:
            raise RuntimeError("first time fails")
        return "ok"

    @app.workflow(queue="work")
    async def flow(wf: plait.Workflow, data: Any) -> str:
        return await wf.do("shaky", shaky, data)

    async with engine_factory(app) as engine:
        first = await engine.start("flow", 1, dedup="job")
        assert (await engine.wait(first, timeout=30)).status == "failed"
        # the key is free once the run failed: another run takes it
        second = await engine.start("flow", 2, dedup="job", delay="1h")
        assert second != first
        retried = await engine.retry(first)
        assert retried.status == "queued"  # admitted again through its queue
        assert retried.dedup is None  # the key stays with the live run that took it
        done = await engine.wait(first, timeout=30)
        assert done.status == "completed" and done.admitted_at is not None


# -- a fork is admitted like a start ------------------------------------------------------------


def gate_app(ledger: list[tuple[str, str]]) -> plait.App:
    """Runs that hold their queue's slot until they are sent ``go``; every body that ran
    is in ``ledger`` as (what, run id), in the order it ran."""
    app = plait.App("fork-queues")
    app.queue("one", concurrency=1)
    app.queue("keyed", per_key=1)

    @app.function
    def mark(data: Any, ctx: plait.StepContext) -> Any:
        ledger.append(("mark", ctx.run_id))
        return data

    @app.function
    def done(data: Any, ctx: plait.StepContext) -> Any:
        ledger.append(("done", ctx.run_id))
        return data

    async def gate(wf: plait.Workflow, data: Any) -> Any:
        await wf.do("mark", mark, data)
        await wf.wait_for_event("go")
        return await wf.do("done", done, data)

    app.workflow(name="in_one", queue="one")(gate)
    app.workflow(name="in_keyed", queue="keyed")(gate)
    app.workflow(name="free_gate")(gate)
    return app


async def _recorded(engine: plait.Engine, run_id: str, key: str) -> bool:
    return any(s.key == key and s.status == "succeeded" for s in await engine.get_steps(run_id))


async def _finish(engine: plait.Engine, run_id: str) -> plait.Run:
    await engine.send_event(run_id, "go")
    run = await engine.wait(run_id, timeout=30)
    assert run.status == "completed", run
    return run


async def test_a_fork_waits_for_its_queues_slot(engine_factory: Any) -> None:
    ledger: list[tuple[str, str]] = []
    app = gate_app(ledger)
    async with (
        engine_factory(app) as engine,
        engine_factory(plait.App("no-code"), workers=False) as bare,
    ):
        source = await engine.start("in_one", 1, priority=3)
        await _finish(engine, source)
        blocker = await engine.start("in_one", 2)
        await eventually(lambda: _status(engine, blocker, "running"), what="blocker admitted")
        # the fork goes to the source's queue, in this process and in one that lacks the
        # workflow's code (the command line)
        forks = [
            await engine.fork(source, from_step="mark"),
            await bare.fork(source, from_step="mark"),
        ]
        for fork in forks:
            run = await engine.get_run(fork)
            assert (run.status, run.queue, run.priority) == ("queued", "one", 3)
            assert run.dedup is None and run.forked_from == source
        depths = {d["queue"]: d for d in await engine.queue_depths()}
        assert (depths["one"]["active"], depths["one"]["queued"]) == (1, 2)
        await _finish(engine, blocker)
        for fork in forks:
            assert (await _finish(engine, fork)).admitted_at is not None
    # one at a time: each fork's body ran only after the run before it was done
    runs = [source, blocker, *forks]
    assert [r for _, r in ledger] == [r for r in runs for _ in range(2)]


async def test_a_fork_keeps_its_key_for_per_key(engine_factory: Any) -> None:
    ledger: list[tuple[str, str]] = []
    async with engine_factory(gate_app(ledger)) as engine:
        source = await engine.start("in_keyed", 1, key="k1")
        await _finish(engine, source)
        blocker = await engine.start("in_keyed", 2, key="k1")
        await eventually(lambda: _status(engine, blocker, "running"), what="blocker admitted")
        fork = await engine.fork(source, from_step="done")
        run = await engine.get_run(fork)
        assert (run.status, run.queue, run.key) == ("queued", "keyed", "k1")
        other = await engine.start("in_keyed", 3, key="k2")  # another key goes past
        await eventually(lambda: _status(engine, other, "running"), what="k2 admitted")
        assert (await engine.get_run(fork)).status == "queued"
        await _finish(engine, blocker)
        await _finish(engine, other)
        # the fork kept the wait for "go" too: once admitted it runs to its end unasked
        assert (await engine.wait(fork, timeout=30)).status == "completed"
    # the fork kept "mark" and ran "done" only after the blocker of its key was done
    assert ledger.index(("done", fork)) > ledger.index(("done", blocker))
    assert ("mark", fork) not in ledger


async def test_a_fork_takes_no_dedup_key(engine_factory: Any) -> None:
    async with engine_factory(gate_app([])) as engine:
        source = await engine.start("free_gate", 1, dedup="job-1")
        await eventually(lambda: _recorded(engine, source, "mark"), what="the source's mark")
        await engine.cancel(source)
        again = await engine.start("free_gate", 2, dedup="job-1")  # the key is free again
        assert again != source
        fork = await engine.fork(source, from_step="mark")
        run = await engine.get_run(fork)
        assert run.dedup is None and run.status == "running" and run.queue is None
        # the live holder of the key is still the one start returns
        assert await engine.start("free_gate", 3, dedup="job-1") == again
        await _finish(engine, fork)
        await _finish(engine, again)


def fan_out_app(gauge: Gauge, **limits: Any) -> plait.App:
    """``queue_app`` with ``parent``, which runs ``limited`` as ``count`` children at once."""
    app = queue_app(gauge, **limits)

    @app.workflow
    async def parent(wf: plait.Workflow, count: int) -> list[Any]:
        children = (wf.do(f"child {n}", "limited", {"n": n}) for n in range(count))
        return list(await asyncio.gather(*children))

    return app


async def _children_behind_a_blocker(
    engine: plait.Engine, count: int, parent: str = "parent"
) -> tuple[str, str]:
    """A run of ``fan_out_app`` holding the queue's slot (``gauge.held["blocker"]`` keeps
    it), then a run of ``parent`` whose ``count`` children all wait behind it: (blocker,
    parent)."""
    blocker = await engine.start("limited", {"n": "blocker"})
    await eventually(lambda: _status(engine, blocker, "running"), what="blocker admitted")
    run_id = await engine.start(parent, count)

    async def all_queued() -> bool:
        children = await engine.get_children(run_id)
        return len(children) == count and all(c.status == "queued" for c in children)

    await eventually(all_queued, what="the children queued behind the blocker")
    return blocker, run_id


async def test_child_runs_of_a_queued_workflow_wait_for_its_slot(engine_factory: Any) -> None:
    """A workflow declared on a queue is admitted through it however its run starts, as
    the child of another run too: a parent fanning out children must not pass the limit
    that its own starts of the same workflow would keep."""
    gauge = Gauge()
    app = fan_out_app(gauge, concurrency=2)

    async with engine_factory(app) as engine:
        run_id = await engine.start("parent", 6)
        assert (await engine.wait(run_id, timeout=30)).output == list(range(6))
        children = await engine.get_children(run_id)
        assert len(children) == 6
        for child in children:
            assert (child.status, child.queue) == ("completed", "work")
            assert child.admitted_at is not None
    assert gauge.most == 2


async def _queue_empty_once_the_blocker_ends(
    engine: plait.Engine, gauge: Gauge, blocker: str
) -> None:
    """Once the blocker ends, the queue the cancelled children were waiting in is
    empty and holds no slot."""
    gauge.held["blocker"].set()
    assert (await engine.wait(blocker, timeout=30)).status == "completed"
    depths = {d["queue"]: d for d in await engine.queue_depths()}
    assert (depths["work"]["active"], depths["work"]["queued"]) == (0, 0)


async def test_a_cancelled_parent_takes_its_queued_children_with_it(engine_factory: Any) -> None:
    gauge = Gauge()
    gauge.held["blocker"] = asyncio.Event()
    app = fan_out_app(gauge, concurrency=1)

    async with engine_factory(app) as engine:
        blocker, run_id = await _children_behind_a_blocker(engine, 3)
        assert (await engine.cancel(run_id)).status == "cancelled"
        assert {c.status for c in await engine.get_children(run_id)} == {"cancelled"}
        await _queue_empty_once_the_blocker_ends(engine, gauge, blocker)
    assert gauge.order == ["blocker"]


async def test_a_failed_parent_takes_its_queued_children_with_it(engine_factory: Any) -> None:
    """Children queued behind a full queue would otherwise be admitted long after the
    run that wanted them failed, and hold the queue's slots for nothing."""
    gauge = Gauge()
    gauge.held["blocker"] = asyncio.Event()
    app = fan_out_app(gauge, concurrency=1)

    @app.function(retries=0)
    async def boom(data: None) -> None:
        raise RuntimeError("boom")

    @app.workflow
    async def doomed(wf: plait.Workflow, count: int) -> None:
        async def fail_later() -> None:
            await wf.wait_for_event("go")
            await wf.do("bad", boom)

        children = [wf.do(f"child {n}", "limited", {"n": n}) for n in range(count)]
        await asyncio.gather(*children, fail_later())

    async with engine_factory(app) as engine:
        blocker, run_id = await _children_behind_a_blocker(engine, 3, "doomed")
        assert await engine.send_event(run_id, "go")
        assert (await engine.wait(run_id, timeout=10)).status == "failed"
        assert {c.status for c in await engine.get_children(run_id)} == {"cancelled"}
        await _queue_empty_once_the_blocker_ends(engine, gauge, blocker)
    assert gauge.order == ["blocker"]


async def test_a_child_of_its_parents_own_queue_runs_in_the_parents_slot(
    engine_factory: Any,
) -> None:
    """Parents of a queue hold its slots while they wait: were their children of the same
    queue queued, two parents on a queue of two would wait for good."""
    gauge = Gauge()
    app = queue_app(gauge, concurrency=2)

    @app.workflow(queue="work")
    async def batch(wf: plait.Workflow, count: int) -> list[Any]:
        children = (wf.do(f"item {n}", "limited", {"n": n}) for n in range(count))
        return list(await asyncio.gather(*children))

    async with engine_factory(app) as engine:
        batches = [await engine.start("batch", 2) for _ in range(2)]
        for run_id in batches:
            assert (await engine.wait(run_id, timeout=30)).output == [0, 1]
            for child in await engine.get_children(run_id):
                assert (child.status, child.queue) == ("completed", "work")
                assert child.admitted_at is None  # never waited for admission


async def test_a_descendant_of_a_queues_slot_runs_in_that_slot(engine_factory: Any) -> None:
    """A run holding a queue's only slot waits on a child outside the queue, and that
    child starts a workflow of the queue: queued, the grandchild would wait for the slot
    its own grandparent holds until that ends, and it never would. It runs in the slot its
    ancestor holds, as a direct child of the queue's run does."""
    gauge = Gauge()
    app = queue_app(gauge, concurrency=1)

    @app.workflow
    async def middle(wf: plait.Workflow, n: int) -> Any:
        return await wf.do("inner", "limited", {"n": n})

    @app.workflow(queue="work")
    async def outer(wf: plait.Workflow, n: int) -> Any:
        return await wf.do("middle", "middle", n)

    async with engine_factory(app) as engine:
        run_id = await engine.start("outer", 7)
        assert (await engine.wait(run_id, timeout=30)).output == 7
        (middle_run,) = await engine.get_children(run_id)
        (inner_run,) = await engine.get_children(middle_run.id)
        assert (inner_run.status, inner_run.queue, inner_run.admitted_at) == (
            "completed",
            "work",
            None,
        )
        depths = {d["queue"]: d for d in await engine.queue_depths()}
        assert (depths["work"]["active"], depths["work"]["queued"]) == (0, 0)


async def test_children_of_one_pass_are_admitted_in_the_order_it_started_them(
    engine_factory: Any,
) -> None:
    """Equal priorities are admitted in start order. The children of one pass are
    committed at one instant with ids taken from their steps: the order the pass reached
    them must still decide, not their ids."""
    gauge = Gauge()
    gauge.held["blocker"] = release = asyncio.Event()
    app = fan_out_app(gauge, concurrency=1)

    async with engine_factory(app) as engine:
        _, run_id = await _children_behind_a_blocker(engine, 8)
        release.set()
        assert (await engine.wait(run_id, timeout=30)).output == list(range(8))
    assert gauge.order == ["blocker", *range(8)]


async def test_a_child_in_its_ancestors_slot_ends_with_it(engine_factory: Any) -> None:
    """A child of the queue that runs in its parent's slot while the parent fails is
    cancelled with it: its body is interrupted, the slot is free, and the next run of
    the queue is admitted (alone) after it."""
    gauge = Gauge()
    gauge.held["in slot"] = asyncio.Event()  # never set: only the cancel ends the body
    started = asyncio.Event()
    app = queue_app(gauge, concurrency=1)

    @app.function(retries=0)
    async def boom(data: Any) -> Any:
        await asyncio.wait_for(started.wait(), 30)
        raise RuntimeError("boom")

    @app.function
    async def mark(data: Any) -> None:
        started.set()

    @app.workflow(queue="work")
    async def in_slot(wf: plait.Workflow, data: Any) -> Any:
        await wf.do("mark", mark, None)
        return await wf.do("body", "body", {"n": "in slot"})

    @app.workflow(queue="work")
    async def doomed(wf: plait.Workflow, data: Any) -> Any:
        return await asyncio.gather(wf.do("in slot", "in_slot", None), wf.do("boom", boom, {}))

    async with engine_factory(app) as engine:
        parent = await engine.start("doomed")
        assert (await engine.wait(parent, timeout=30)).status == "failed"
        (child,) = await engine.get_children(parent)
        assert (child.queue, child.admitted_at) == ("work", None)
        assert (await engine.wait(child.id, timeout=30)).status == "cancelled"

        async def body_interrupted() -> bool:
            return gauge.order == ["in slot"] and gauge.now == 0

        await eventually(body_interrupted, what="the child's body to be interrupted")
        depths = {d["queue"]: d for d in await engine.queue_depths()}
        assert (depths["work"]["active"], depths["work"]["queued"]) == (0, 0)
        other = await engine.start("limited", {"n": "other"})
        assert (await engine.wait(other, timeout=30)).status == "completed"
    assert gauge.most == 1
    assert gauge.order == ["in slot", "other"]


async def test_a_fork_or_retry_of_a_child_in_a_slot_goes_through_the_queue(
    engine_factory: Any,
) -> None:
    """A child that ran in its ancestor's slot is still a run of its queue: run again on
    its own, it waits for a slot like any run of the queue."""
    gauge = Gauge()
    gauge.held["blocker"] = release = asyncio.Event()
    app = queue_app(gauge, concurrency=1)
    fails = [True]

    @app.function(retries=0)
    async def flaky(data: Any) -> Any:
        if fails.pop() if fails else False:
            raise RuntimeError("first time")
        return await gauge.hold(data)

    @app.workflow(queue="work")
    async def flaky_child(wf: plait.Workflow, data: Any) -> Any:
        return await wf.do("flaky", flaky, data)

    @app.workflow(queue="work")
    async def pair(wf: plait.Workflow, data: Any) -> Any:
        return [
            await wf.do("fine", "limited", {"n": "fine"}),
            await wf.do("flaky", "flaky_child", "retried"),
        ]

    async with engine_factory(app) as engine:
        parent = await engine.start("pair", None)
        assert (await engine.wait(parent, timeout=30)).status == "failed"
        failed, fine = sorted(await engine.get_children(parent), key=lambda c: c.workflow)
        assert (failed.workflow, failed.status) == ("flaky_child", "failed")
        blocker = await engine.start("limited", {"n": "blocker"})
        await eventually(lambda: _status(engine, blocker, "running"), what="blocker admitted")
        fork = await engine.fork(fine.id, from_step="body")
        await engine.retry(failed.id)
        assert (await engine.get_run(fork)).status == "queued"
        assert (await engine.get_run(failed.id)).status == "queued"
        release.set()
        assert (await engine.wait(fork, timeout=30)).status == "completed"
        assert (await engine.wait(failed.id, timeout=30)).output == "retried"
    assert gauge.most == 1
    assert gauge.order[:2] == ["fine", "blocker"]
    assert sorted(gauge.order[2:]) == ["fine", "retried"]
