"""Callers waiting for runs to end: woken by the commit that ends a run, not by polling it,
and never stranded by a wake-up that got lost."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from typing import Any

import plait
from plait.notify import Notifier
from plait.records import Run
from support.polling import eventually

app = plait.App("waiting")


@app.function
async def double(n: int) -> int:
    return n * 2


@app.workflow
async def gated(wf: plait.Workflow, n: int) -> int:
    await wf.wait_for_event("go")
    total = 0
    for i in range(5):  # commits that do not end the run
        total += await wf.do(f"step{i}", double, n)
    return total


def _count(engine: plait.Engine, name: str) -> list[int]:
    """Count calls of one of the store's methods (a list so the test can read it)."""
    calls = [0]
    method = getattr(engine.store, name)

    async def counted(*args: Any) -> Any:
        calls[0] += 1
        return await method(*args)

    setattr(engine.store, name, counted)
    return calls


def test_a_watcher_of_a_runs_end_sleeps_through_changes_that_did_not_end_it() -> None:
    async def go() -> None:
        notifier = Notifier()
        every = notifier.watch("r1")
        end = notifier.watch("r1", end_only=True)
        notifier.run_changed("r1", settled=False)
        assert every.is_set() and not end.is_set()
        notifier.run_changed("r1", settled=True)
        assert end.is_set()
        unknown = notifier.watch("r1", end_only=True)
        notifier.local_run_changed("r1")  # a change nobody can name may have ended it
        assert unknown.is_set()
        lost = notifier.watch("r2", end_only=True)
        notifier.everything_changed()
        assert lost.is_set()
        for event in (every, end, unknown):
            notifier.unwatch("r1", event)
        notifier.unwatch("r2", lost)
        assert notifier.watched_runs() == 0

    asyncio.run(go())


def test_a_run_settled_by_a_commit_that_tells_is_not_told_again() -> None:
    """Where a store's commits tell the other processes themselves (PostgreSQL's functions
    NOTIFY a run's end in the transaction that ends it), the process that ended the run
    tells only its own waiters: a second notice would cost a statement after every pass
    that ends a run, on the worker's way to its next claim."""

    async def go() -> None:
        notifier = Notifier()
        told: list[tuple[str, str]] = []
        notifier.remote = lambda kind, value: told.append((kind, value))
        notifier.commits_tell = True
        end = notifier.watch("r1", end_only=True)
        notifier.run_changed("r1", settled=True)
        assert end.is_set() and told == []
        notifier.run_changed("r1", settled=False)  # a pass that left it running
        notifier.run_changed("r2")  # a change that may or may not have settled it
        assert told == [("busy", "r1"), ("run", "r2")]
        notifier.commits_tell = False  # a store whose commits tell nobody
        notifier.run_changed("r1", settled=True)
        assert told[-1] == ("run", "r1")

    asyncio.run(go())


def test_a_run_woken_by_a_commit_that_tells_adds_no_notice_of_work() -> None:
    """An event, a decision, a request or a reopen wakes its run in the commit that stores
    it: where commits tell (PostgreSQL's wake_run and reopen_run NOTIFY), the other
    processes heard of it already, and a second notice would wake every loop of every
    worker for a claim that finds nothing. This process's watchers of the run and its
    workers are told either way (the change did not settle it)."""

    async def go() -> None:
        told_remote: list[tuple[bool, list[tuple[str, str]]]] = [
            (True, []),
            (False, [("busy", "r1"), ("work", "")]),
        ]
        for commits_tell, remote in told_remote:
            notifier = Notifier()
            told: list[tuple[str, str]] = []
            notifier.remote = lambda kind, value, told=told: told.append((kind, value))
            notifier.commits_tell = commits_tell
            worked: list[str] = []
            notifier.on_work(lambda worked=worked: worked.append("due"), "due")
            every, end = notifier.watch("r1"), notifier.watch("r1", end_only=True)
            notifier.run_woken("r1")
            assert told == remote and worked == ["due"]
            assert every.is_set() and not end.is_set()

    asyncio.run(go())


async def test_a_run_ended_by_a_worker_wakes_a_waiter_in_another_process(
    engine_factory: Callable[..., Any],
) -> None:
    async with engine_factory(app) as worker, engine_factory(app, workers=False) as outside:
        told: list[tuple[str, str]] = []
        remote = worker.notifier.remote
        if remote is not None:

            def telling(kind: str, value: str) -> None:
                told.append((kind, value))
                remote(kind, value)

            worker.notifier.remote = telling
        run_id = await outside.start("gated", 2)
        waiting = asyncio.ensure_future(outside.wait(run_id, timeout=30))
        await outside.send_event(run_id, "go")
        run = await asyncio.wait_for(waiting, 20)
        assert (run.status, run.output) == ("completed", 20)
        if worker.notifier.commits_tell:
            assert ("run", run_id) not in told  # the commit that ended it told
        elif remote is not None:
            assert ("run", run_id) in told


async def test_many_waiting_callers_read_each_run_about_twice(
    engine_factory: Callable[..., Any],
) -> None:
    async with engine_factory(app) as engine:
        runs = [await engine.start("gated", n) for n in range(40)]
        reads = _count(engine, "get_run")
        looks = _count(engine, "run_statuses")
        waiting = asyncio.gather(*(engine.wait(r, timeout=60) for r in runs))

        async def looked_three_times() -> bool:
            return looks[0] >= 3

        await eventually(looked_three_times, what="three looks at the waited runs")
        assert reads[0] == 40  # one each; the looks since then read them all at once
        for run_id in runs:
            await engine.send_event(run_id, "go")
        ended: Sequence[Run] = await waiting
        assert [r.output for r in ended] == [n * 10 for n in range(40)]
        # a read at the start and one at the end; the notifications of the five steps'
        # commits did not wake them
        assert reads[0] <= 2 * 40 + 5


async def test_a_waiter_whose_wake_up_was_lost_still_sees_the_run_end(
    engine_factory: Callable[..., Any],
) -> None:
    async with engine_factory(app) as engine:
        run_id = await engine.start("gated", 1)
        original = engine.notifier.local_run_changed

        def lose_settled(changed: str, *, settled: bool | None = None) -> None:
            if changed == run_id and settled:
                return  # as if the notification of its end never came
            original(changed, settled=settled)

        engine.notifier.local_run_changed = lose_settled  # type: ignore[method-assign]
        waiting = asyncio.ensure_future(engine.wait(run_id, timeout=30))
        await eventually(
            lambda: _true(engine.notifier.watched_runs() == 1), what="the caller waiting"
        )
        await engine.send_event(run_id, "go")
        run = await asyncio.wait_for(waiting, 10)
        assert (run.status, run.output) == ("completed", 10)


async def _true(value: bool) -> bool:
    return value
