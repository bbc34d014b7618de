"""Published values, fork and retention on both stores."""

from __future__ import annotations

import asyncio
import contextlib
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

import plait
import plait.engine.values
from support.paths import ROOT
from support.polling import eventually, run_gone

app = plait.App("operating-tests")

#: set by a test to change what step "s4" does, as a deploy of a fix would
BEHAVIOUR = {"s4": "old"}


@app.function
def touch(data: dict[str, Any]) -> str:
    """A side effect on disk: one line per body that really ran."""
    with open(data["ledger"], "a") as ledger:
        ledger.write(data["step"] + "\n")
    if data["step"] == "s4":
        return f"s4-{BEHAVIOUR['s4']}"
    return data["step"]


@app.workflow
async def five(wf: plait.Workflow, data: Any) -> Any:
    out = []
    for n in range(1, 6):
        await wf.set_value("progress", {"done": n - 1, "total": 5})
        out.append(await wf.do(f"s{n}", touch, {"ledger": data["ledger"], "step": f"s{n}"}))
    await wf.set_value("progress", {"done": 5, "total": 5})
    return {"steps": out, "at": wf.uuid() != ""}


@app.workflow
async def publisher(wf: plait.Workflow, data: Any) -> Any:
    await wf.set_value("stage", "waiting")
    await wf.sleep("pause", "50ms")  # a replay follows: it must publish nothing again
    await wf.set_value("stage", "ready")
    payload = await wf.wait_for_event("go")
    await wf.set_value("answer", payload)
    await wf.set_value("stage", "done")
    return payload


@app.workflow
async def silent(wf: plait.Workflow, data: Any) -> Any:
    return "nothing published"


@app.workflow
async def bad_value(wf: plait.Workflow, data: Any) -> Any:
    await wf.set_value("v", object())


@app.workflow
async def waits(wf: plait.Workflow, data: Any) -> Any:
    await wf.set_value("seen", True)
    return await wf.wait_for_event("go")


@app.workflow
async def staged(wf: plait.Workflow, data: Any) -> Any:
    await wf.set_value("stage", "zero")
    await wf.set_value("stage", "one")
    await wf.set_value("first", data)
    await wf.do("kept", lambda: data)
    payload = await wf.wait_for_event("go")
    await wf.set_value("stage", "two")
    await wf.set_value("second", payload)
    return payload


@app.workflow
async def leaf(wf: plait.Workflow, data: Any) -> Any:
    return await wf.do("leaf step", lambda: data)


@app.workflow
async def parent(wf: plait.Workflow, data: Any) -> Any:
    child = await wf.do("child", "leaf", data)
    return await wf.do("after", lambda: child)


@app.workflow
async def parent_waits(wf: plait.Workflow, data: Any) -> Any:
    child = await wf.do("child", "leaf", data)
    await wf.wait_for_event("go")
    return child


# -- values ---------------------------------------------------------------------------------
async def test_values_are_durable_replay_safe_and_the_last_write_wins(engine_factory) -> None:
    async with engine_factory(app) as engine:
        run_id = await engine.start("publisher")
        assert await engine.get_value(run_id, "stage", wait=True, timeout=10) in (
            "waiting",
            "ready",
        )
        await eventually(
            lambda: _equals(engine.get_value(run_id, "stage"), "ready"), what="stage ready"
        )
        await engine.send_event(run_id, "go", {"n": 42})
        assert (await engine.wait(run_id, timeout=10)).output == {"n": 42}
        assert await engine.get_values(run_id) == {"answer": {"n": 42}, "stage": "done"}
        published = [s.key for s in await engine.get_steps(run_id) if s.kind == "set_value"]
        assert published == [
            "__value:stage",
            "__value:stage#1",
            "__value:answer",
            "__value:stage#2",
        ]


async def test_get_value_wait_wakes_on_the_commit_not_by_polling(
    engine_factory, monkeypatch: pytest.MonkeyPatch
) -> None:
    # the safety look comes only after a minute: a value seen within seconds was woken by
    # the commit that published it (each commit of the run may wake the waiter once)
    monkeypatch.setattr(plait.engine.values, "_VALUE_SAFETY", 60.0)
    async with engine_factory(app) as engine, engine_factory(app, workers=False) as reader:
        for watcher in (engine, reader):  # this process's notifier, and another engine's
            run_id = await engine.start("publisher")
            await eventually(
                lambda r=run_id: _equals(engine.get_value(r, "stage"), "ready"), what="ready"
            )
            reads = _count_reads(watcher)
            waiting = asyncio.ensure_future(watcher.get_value(run_id, "answer", wait=True))
            await eventually(lambda r=reads: _at_least(r, 1), what="the first read")
            await asyncio.sleep(0)
            assert not waiting.done()
            await engine.send_event(run_id, "go", "hello")
            value = await asyncio.wait_for(waiting, 10)
            assert value == "hello"
            # one read per change of the run at most, never a read per poll
            assert reads["n"] <= 10, reads


async def test_get_value_answers_and_refuses_clearly(engine_factory) -> None:
    async with engine_factory(app) as engine:
        run_id = await engine.start("silent")
        await engine.wait(run_id, timeout=10)
        assert await engine.get_value(run_id, "missing") is None
        with pytest.raises(plait.ValueNotSetError, match="never published a value 'missing'"):
            await engine.get_value(run_id, "missing", wait=True)
        waiting = await engine.start("waits")
        await eventually(lambda: _equals(engine.get_value(waiting, "seen"), True), what="seen")
        with pytest.raises(TimeoutError, match="no value 'later'"):
            await engine.get_value(waiting, "later", wait=True, timeout=0.2)
        with pytest.raises(plait.RunNotFoundError):
            await engine.get_value("nope", "x")
        with pytest.raises(TypeError, match="value key"):
            await engine.get_value(run_id, "")
        bad = await engine.wait(await engine.start("bad_value"), timeout=10)
        assert bad.status == "failed" and "value 'v'" in bad.error["message"]


# -- fork -----------------------------------------------------------------------------------
async def test_fork_from_the_third_of_five_steps_runs_three_to_five_only(
    engine_factory, tmp_path: Path
) -> None:
    ledger = tmp_path / "ledger.txt"
    async with engine_factory(app) as engine:
        source = await engine.start("five", {"ledger": str(ledger)})
        first = await engine.wait(source, timeout=10)
        assert first.status == "completed"
        assert ledger.read_text().split() == ["s1", "s2", "s3", "s4", "s5"]

        fork = await engine.fork(source, from_step="s3")
        forked = await engine.wait(fork, timeout=10)
        assert forked.status == "completed"
        assert forked.output == first.output  # unchanged code: the same output
        assert forked.forked_from == source and forked.input == first.input
        # steps 1 and 2 kept their results; 3 to 5 ran again
        assert ledger.read_text().split() == ["s1", "s2", "s3", "s4", "s5", "s3", "s4", "s5"]
        ran_again = {a.key for a in await engine.get_history(fork)}
        assert ran_again == {"s3", "s4", "s5"}
        assert await engine.get_value(fork, "progress") == {"done": 5, "total": 5}

        BEHAVIOUR["s4"] = "fixed"  # a deploy: forked again, the rest runs the new code
        try:
            fixed = await engine.wait(await engine.fork(source, from_step="s4"), timeout=10)
        finally:
            BEHAVIOUR["s4"] = "old"
        assert fixed.output["steps"] == ["s1", "s2", "s3", "s4-fixed", "s5"]


async def test_a_fork_keeps_the_values_its_kept_steps_published(engine_factory) -> None:
    async with engine_factory(app) as engine, engine_factory(app, workers=False) as reader:
        source = await engine.start("staged", {"n": 1})
        await engine.send_event(source, "go", "first go")
        assert (await engine.wait(source, timeout=10)).status == "completed"
        assert await engine.get_values(source) == {
            "first": {"n": 1},
            "second": "first go",
            "stage": "two",
        }
        # from the event wait: the values published before it come with the fork (the
        # last one reached of each key), none published after it
        fork = await engine.fork(source, from_step="__event:go")
        kept = {"first": {"n": 1}, "stage": "one"}
        assert await engine.get_values(fork) == kept
        assert await reader.get_value(fork, "first", wait=True, timeout=10) == {"n": 1}
        assert await reader.get_value(fork, "second") is None
        await engine.send_event(fork, "go", "second go")
        assert (await engine.wait(fork, timeout=10)).output == "second go"
        assert await reader.get_values(fork) == {**kept, "second": "second go", "stage": "two"}
        # from the first value: nothing of the source's is published until it runs again
        early = await engine.fork(source, from_step="__value:stage")
        await eventually(lambda: _equals(engine.get_value(early, "first"), {"n": 1}), what="v")
        assert await engine.get_value(early, "second") is None
        await engine.cancel(early)


async def test_fork_refuses_what_it_cannot_do(engine_factory, tmp_path: Path) -> None:
    async with engine_factory(app) as engine:
        done = await engine.start("parent", 7)
        assert (await engine.wait(done, timeout=10)).output == 7
        listed = (
            r"has no step 'nope' \(its steps: 'child' \(shown as 'child \(child run\)'\), 'after'\)"
        )
        with pytest.raises(ValueError, match=listed):
            await engine.fork(done, from_step="nope")
        with pytest.raises(
            ValueError, match=r"is a step of child run .* fork run .* from step 'child'"
        ):
            await engine.fork(done, from_step="leaf step")
        live = await engine.start("waits")
        await eventually(lambda: _equals(engine.get_value(live, "seen"), True), what="seen")
        with pytest.raises(plait.RunStateError, match="it is running"):
            await engine.fork(live, from_step="__value:seen")
        with pytest.raises(plait.RunNotFoundError):
            await engine.fork("nope", from_step="s1")
        with pytest.raises(TypeError, match="from_step"):
            await engine.fork(done, from_step=3)  # type: ignore[arg-type]
        taken = await engine.fork(done, from_step="after", run_id="fork-1")
        assert (await engine.wait(taken, timeout=10)).output == 7
        with pytest.raises(plait.RunIdTakenError):
            await engine.fork(done, from_step="after", run_id="fork-1")


async def test_a_fork_into_a_taken_run_id_says_so_plainly(engine_factory) -> None:
    async with engine_factory(app) as engine:
        done = await engine.start("parent", 7)
        await engine.wait(done, timeout=10)
        other = await engine.start("silent", run_id="silent-1")
        await engine.wait(other, timeout=10)
        # a run of the same workflow holds the id: still a clash, said as one
        with pytest.raises(plait.RunIdTakenError) as same:
            await engine.fork(done, from_step="after", run_id=done)
        assert str(same.value) == f"run id {done!r} is already used by another run"
        with pytest.raises(plait.RunIdTakenError) as differs:
            await engine.fork(done, from_step="after", run_id="silent-1")
        assert str(differs.value) == (
            "run id 'silent-1' is already used by a run of workflow 'silent', not 'parent'"
        )
        with pytest.raises(plait.RunIdTakenError, match="of workflow 'parent', not 'silent'"):
            await engine.start("silent", run_id=done)
        # a fork's id follows the rule of any run id
        with pytest.raises(ValueError, match="invalid run_id 'a/b'"):
            await engine.fork(done, from_step="after", run_id="a/b")


# -- retention ------------------------------------------------------------------------------
async def rows_naming(engine: plait.Engine, database: str, run_ids: list[str]) -> dict[str, int]:
    """Per table of the store, the rows that name one of ``run_ids`` (a ``run_id`` column,
    or the runs table's own ``id``): read straight from the database, so a table prune
    forgot to clear cannot hide behind the store's own reads."""
    found: dict[str, int] = {}
    if database.startswith("sqlite"):
        import sqlite3

        with contextlib.closing(sqlite3.connect(engine.store.path)) as db:  # type: ignore[attr-defined]
            tables = [r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type='table'")]
            for table in tables:
                columns = {r[1] for r in db.execute(f'PRAGMA table_info("{table}")')}
                column = (
                    "run_id" if "run_id" in columns else "id" if table == "plait_runs" else None
                )
                if column is None:
                    continue
                marks = ",".join("?" * len(run_ids))
                sql = f'SELECT count(*) FROM "{table}" WHERE "{column}" IN ({marks})'
                (n,) = db.execute(sql, run_ids).fetchone()
                if n:
                    found[table] = n
        return found
    import asyncpg

    schema = engine.store.schema  # type: ignore[attr-defined]
    conn = await asyncpg.connect(database.split("?", 1)[0])
    try:
        tables = await conn.fetch(
            "SELECT table_name, column_name FROM information_schema.columns"
            " WHERE table_schema = $1 AND (column_name = 'run_id'"
            " OR (table_name = 'runs' AND column_name = 'id'))",
            schema,
        )
        for row in tables:
            sql = (
                f'SELECT count(*) FROM "{schema}"."{row["table_name"]}"'
                f' WHERE "{row["column_name"]}" = ANY($1::text[])'
            )
            n = await conn.fetchval(sql, run_ids)
            if n:
                found[row["table_name"]] = n
    finally:
        await conn.close()
    return found


async def test_prune_removes_old_ended_runs_and_keeps_live_ones(
    engine_factory, database: str
) -> None:
    async with engine_factory(app) as engine:
        old_done = await engine.start("waits")
        await engine.send_event(old_done, "go", 1)
        old_tree = await engine.start("parent", 1)
        old_failed = await engine.start("bad_value")
        live = await engine.start("waits")
        live_parent = await engine.start("parent_waits", 2)
        for run_id in (old_done, old_tree, old_failed):
            assert (await engine.wait(run_id, timeout=10)).status in ("completed", "failed")
        await eventually(lambda: _equals(engine.get_value(live, "seen"), True), what="seen")

        async def child_done() -> bool:
            steps = await engine.get_steps(live_parent)
            return any(s.key == "child" and s.status == "succeeded" for s in steps)

        await eventually(child_done, what="the live parent's child to end")
        tree_children = [c.id for c in await engine.get_children(old_tree)]
        live_children = [c.id for c in await engine.get_children(live_parent)]
        cutoff = datetime.now(UTC)
        await eventually(_after(cutoff.timestamp()), what="the clock to move on")
        recent = await engine.start("silent")
        await engine.wait(recent, timeout=10)

        assert await engine.prune(older_than=cutoff, statuses=["failed"]) == 1
        with pytest.raises(plait.RunNotFoundError):
            await engine.get_run(old_failed)
        assert await engine.prune(older_than=cutoff) == 3  # the tree counts its child
        for gone in (old_done, old_tree, *tree_children):
            with pytest.raises(plait.RunNotFoundError):
                await engine.get_run(gone)
            assert await engine.store.get_values(gone) == {}
            assert await engine.store.get_decisions(gone) == []
            assert await engine.store.get_steps(gone) == []
            assert await engine.store.get_history(gone) == []
        left = await rows_naming(engine, database, [old_done, old_tree, *tree_children])
        assert left == {}, f"rows of pruned runs left behind: {left}"
        assert await rows_naming(engine, database, [live, live_parent]) != {}  # it can see
        for kept in (live, live_parent, *live_children, recent):
            await engine.get_run(kept)
        assert (await engine.get_run(live_children[0])).status == "completed"
        assert await engine.prune(older_than=cutoff) == 0
        await engine.send_event(live, "go", "still works")
        assert (await engine.wait(live, timeout=10)).output == "still works"


async def test_prune_works_in_batches(engine_factory) -> None:
    from plait.worker import retention

    async with engine_factory(app) as engine:
        ids = [await engine.start("silent") for _ in range(7)]
        for run_id in ids:
            await engine.wait(run_id, timeout=10)
        batches = []
        real = engine.store.prune_batch

        async def spy(*args: Any) -> Any:
            done = await real(*args)
            batches.append(done.deleted)
            return done

        engine.store.prune_batch = spy  # type: ignore[method-assign]
        assert await retention.prune(engine.store, cutoff=time.time() + 1, batch=3) == 7
        assert batches == [3, 3, 1, 0]


async def test_prune_refuses_bad_input(engine_factory) -> None:
    async with engine_factory(app) as engine:
        with pytest.raises(ValueError, match="statuses must be among"):
            await engine.prune(older_than="1d", statuses=["running"])
        with pytest.raises(ValueError, match="aware datetime"):
            await engine.prune(older_than=datetime(2020, 1, 1))
        with pytest.raises(ValueError, match="older_than"):
            await engine.prune(older_than="soon")


async def test_a_worker_with_retain_prunes_in_the_background(engine_factory) -> None:
    async with engine_factory(app, retain="300ms") as engine:
        run_id = await engine.start("silent")
        await engine.wait(run_id, timeout=10)
        live = await engine.start("waits")

        await eventually(
            lambda: run_gone(engine, run_id), timeout=15, what="the retention loop to prune the run"
        )
        assert (await engine.get_run(live)).status == "running"
    with pytest.raises(ValueError, match="retain"):
        plait.Engine(app, "sqlite:///:memory:", retain="-1s")


async def test_the_refunds_example_runs(database: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.syspath_prepend(str(ROOT))
    from examples import refunds

    output = await refunds.main(database)
    assert output == {
        "refunded": True,
        "receipt": "refunded 30 on order A-17",
        "approved_by": "bob",
    }


# -- helpers --------------------------------------------------------------------------------
async def _equals(value: Any, expected: Any) -> bool:
    return (await value) == expected


def _after(moment: float) -> Any:
    async def check() -> bool:
        return time.time() > moment

    return check


def _count_reads(engine: plait.Engine) -> dict[str, int]:
    reads = {"n": 0}
    real = engine.store.get_values

    async def counted(run_id: str) -> Any:
        reads["n"] += 1
        return await real(run_id)

    engine.store.get_values = counted  # type: ignore[method-assign]
    return reads


async def _at_least(reads: dict[str, int], n: int) -> bool:
    return reads["n"] >= n
