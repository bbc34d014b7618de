"""``engine.start_many``: many runs in one commit, each started as ``start`` starts it,
every input checked before anything is written; and concurrent ``start`` calls sharing
their commits. On every store."""

from __future__ import annotations

import asyncio
import dataclasses
from typing import Any

import pytest

import plait
from support.polling import eventually

app = plait.App("many")
app.queue("bulk", concurrency=4)


@app.workflow
async def echo(wf: plait.Workflow, data: Any) -> Any:
    return data


@dataclasses.dataclass
class Item:
    n: int


@app.workflow
async def typed(wf: plait.Workflow, data: Item) -> int:
    return data.n * 2


@app.workflow(queue="bulk")
async def queued(wf: plait.Workflow, data: Any) -> Any:
    return data


async def test_start_many_starts_every_run_in_one_commit(engine_factory: Any) -> None:
    async with engine_factory(app, workers=False) as starter:
        before = starter.store.commits
        ids = await starter.start_many(echo, [{"n": n} for n in range(50)])
        assert starter.store.commits - before == 1
        assert len(ids) == 50 and len(set(ids)) == 50
        runs = {run.id: run for run in await starter.list_runs(limit=100)}
        assert [runs[run_id].input for run_id in ids] == [{"n": n} for n in range(50)]
        assert {run.status for run in runs.values()} == {"running"}
        # a worker on the database (another engine) runs them: each output is its input
        async with engine_factory(app, poll_interval=30) as worker:
            for n, run_id in enumerate(ids):
                run = await worker.wait(run_id, timeout=30)
                assert run.output == {"n": n}


async def test_start_many_with_run_ids_and_dedup_answers_as_start_does(
    engine_factory: Any,
) -> None:
    async with engine_factory(app, workers=False) as engine:
        first = await engine.start(echo, "before", run_id="r-1")
        ids = await engine.start_many(
            echo, ["a", "b", "c", "d"], run_ids=["r-0", "r-1", "r-2", "r-0"]
        )
        assert first == "r-1"
        assert ids == ["r-0", "r-1", "r-2", "r-0"]
        assert (await engine.get_run("r-1")).input == "before"  # not started again
        assert (await engine.get_run("r-0")).input == "a"  # the first input with the id
        with pytest.raises(plait.RunIdTakenError):
            await engine.start_many(typed, [{"n": 1}], run_ids=["r-2"])  # r-2 is a run of echo
        # one de-duplication key for all: the first input starts the run, the rest get it
        same = await engine.start_many(echo, [1, 2, 3], dedup="one-key")
        assert len(set(same)) == 1
        assert (await engine.get_run(same[0])).input == 1
        assert await engine.start(echo, 4, dedup="one-key") == same[0]


async def test_start_many_with_a_run_id_of_another_workflow_starts_no_run(
    engine_factory: Any,
) -> None:
    """One commit, all or nothing: the taken id is found as the runs are written, and the
    runs written before it in that commit go with it."""
    async with engine_factory(app, workers=False) as engine:
        await engine.start(echo, 0, run_id="taken-id")
        with pytest.raises(plait.RunIdTakenError, match=r"'taken-id'.*'echo'"):
            await engine.start_many(queued, [1, 2, 3], run_ids=["m-1", "taken-id", "m-3"])
        assert await engine.list_runs(workflow="queued") == []
        assert [r.id for r in await engine.list_runs()] == ["taken-id"]
        assert await engine.start_many(queued, [1, 3], run_ids=["m-1", "m-3"]) == ["m-1", "m-3"]


async def test_start_many_checks_every_input_before_writing_any(engine_factory: Any) -> None:
    async with engine_factory(app, workers=False) as engine:
        with pytest.raises(plait.NotJSONError, match=r"inputs\[3\]"):
            await engine.start_many(echo, [0, 1, 2, object(), 4])
        with pytest.raises(plait.InputValidationError, match=r"inputs\[2\]"):
            await engine.start_many(typed, [{"n": 1}, {"n": 2}, {"n": "three"}])
        with pytest.raises(ValueError, match=r"run_ids has 1 ids for 2 inputs"):
            await engine.start_many(echo, [1, 2], run_ids=["a"])
        with pytest.raises(ValueError, match=r"run_ids\[1\].*reserved"):
            await engine.start_many(echo, [1, 2], run_ids=["a", "schedule:x"])
        with pytest.raises(TypeError, match=r"run_ids\[0\]"):
            await engine.start_many(echo, [1], run_ids=[7])  # type: ignore[list-item]
        with pytest.raises(TypeError, match="inputs must be a list"):
            await engine.start_many(echo, {"a": 1})
        with pytest.raises(TypeError, match="run_ids must be a list"):
            await engine.start_many(echo, ["x"], run_ids="x")
        with pytest.raises(plait.WorkflowNotFoundError):
            await engine.start_many("nowhere", [])
        with pytest.raises(ValueError, match="key='k' needs a queue"):
            await engine.start_many(echo, [1], key="k")
        assert await engine.list_runs() == []  # nothing of any refused call was written
        assert await engine.start_many(echo, []) == []
        assert await engine.start_many(echo, (n for n in range(2))) != []  # any iterable


async def test_start_many_queued_runs_are_admitted_by_a_worker(engine_factory: Any) -> None:
    async with engine_factory(app, workers=False) as starter:
        ids = await starter.start_many(queued, list(range(12)), priority=3)
        assert {(await starter.get_run(i)).status for i in ids} == {"queued"}
        async with engine_factory(app, poll_interval=30):
            for n, run_id in enumerate(ids):
                run = await starter.wait(run_id, timeout=30)
                assert run.output == n and run.queue == "bulk" and run.priority == 3


async def test_start_many_inline_drives_the_runs_here(engine_factory: Any) -> None:
    async with engine_factory(app, workers=False) as engine:
        ids = await engine.start_many(typed, [{"n": n} for n in (1, 2, 3)], inline=True)
        assert [(await engine.wait(i, timeout=30)).output for i in ids] == [2, 4, 6]
        with pytest.raises(ValueError, match="inline=True cannot start a queued run"):
            await engine.start_many(queued, [1], inline=True)


async def test_concurrent_starts_share_commits(engine_factory: Any) -> None:
    async with engine_factory(app, workers=False) as engine:
        before = engine.store.commits
        ids = await asyncio.gather(*(engine.start(echo, n) for n in range(100)))
        # SQLite: one commit per turn of the event loop; PostgreSQL: the first alone,
        # the rest together while it is on its way
        assert engine.store.commits - before <= 3
        assert len(set(ids)) == 100
        for n, run_id in enumerate(ids):
            assert (await engine.get_run(run_id)).input == n


async def test_workers_of_another_engine_see_started_runs_at_once(engine_factory: Any) -> None:
    """A worker polling every 30 s still starts the runs at once: it is told."""
    async with (
        engine_factory(app, poll_interval=30) as worker,
        engine_factory(app, workers=False) as starter,
    ):
        ids = await starter.start_many(echo, [1, 2])
        one = await starter.start(echo, 3)

        async def done() -> bool:
            runs = [await worker.get_run(i) for i in [*ids, one]]
            return all(r.status == "completed" for r in runs)

        await eventually(done, timeout=10, what="the runs to complete")
