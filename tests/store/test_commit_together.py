"""Batches of many passes committed at once: each caller gets its own outcome.

Both stores share commits between concurrent passes (SQLite per loop turn, PostgreSQL one
group per round trip). Sharing must never let one pass's failure touch another's writes,
nor let a batch whose lease is gone land."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
from collections.abc import AsyncIterator, Awaitable, Callable

import pytest

from plait.cancel_guard import guarded_task
from plait.errors import LeaseLostError
from plait.store import Store
from plait.store.ops import (
    Batch,
    ConsumeEvent,
    EndRun,
    FinishAttempt,
    Op,
    PutStep,
    SetState,
    SetTimer,
    StartAttempt,
    StepEnd,
)
from plait.store.rows import NewRun
from support.polling import eventually

from .rows import CUT, error, new_run, step, wakeups, write


async def _claimed(store: Store, n: int, owner: str = "w1") -> list[str]:
    ids = [f"r{i}" for i in range(n)]
    for run_id in ids:
        await new_run(store, run_id)
        assert await store.claim_run(run_id, owner, 60.0)
    return ids


async def _state(store: Store, run_id: str) -> dict[str, str | None]:
    snapshot = await store.load_pass(run_id)
    assert snapshot is not None
    return snapshot.state


@contextlib.asynccontextmanager
async def _row_held(
    database: str, run_id: str, step_key: str | None = None
) -> AsyncIterator[Callable[[], Awaitable[None]]]:
    """Hold ``run_id``'s row (or the row of its step ``step_key``) from another
    connection, in a transaction of its own, until the function this yields lets it go
    (or the block ends)."""
    asyncpg = pytest.importorskip("asyncpg")
    holder = await asyncpg.connect(database)
    try:
        tx = holder.transaction()
        await tx.start()
        if step_key is None:
            await holder.execute("SELECT 1 FROM plait.runs WHERE id = $1 FOR UPDATE", run_id)
        else:
            await holder.execute(
                "SELECT 1 FROM plait.steps WHERE run_id = $1 AND key = $2 FOR UPDATE",
                run_id,
                step_key,
            )
        yield tx.commit
    finally:
        await holder.close()


@contextlib.asynccontextmanager
async def _nothing_held() -> AsyncIterator[Callable[[], Awaitable[None]]]:
    """``_row_held`` where no other transaction can hold a row (SQLite)."""

    async def let_go() -> None:
        return None

    yield let_go


async def test_concurrent_batches_all_land(store: Store) -> None:
    ids = await _claimed(store, 30)
    await asyncio.gather(
        *(store.commit(Batch(r, [SetState("n", f'"{r}"')], fence="w1")) for r in ids)
    )
    for run_id in ids:
        assert await _state(store, run_id) == {"n": f'"{run_id}"'}


async def test_a_lost_lease_fails_only_its_own_batch(store: Store) -> None:
    ids = await _claimed(store, 6)
    assert not await store.claim_run("r3", "thief", 60.0)  # still ours...
    await store.renew_leases("w1", -1.0, ids)  # ...until our leases run out
    assert await store.claim_run("r3", "thief", 60.0)  # and another worker takes it
    outcomes = await asyncio.gather(
        *(store.commit(Batch(r, [SetState("n", '"x"')], fence="w1")) for r in ids),
        return_exceptions=True,
    )
    for run_id, outcome in zip(ids, outcomes, strict=True):
        if run_id == "r3":
            assert isinstance(outcome, LeaseLostError), outcome
            assert await _state(store, run_id) == {}
        else:
            assert outcome is False, outcome
            assert await _state(store, run_id) == {"n": '"x"'}


async def test_a_refused_batch_fails_alone_and_the_others_land(store: Store) -> None:
    ids = await _claimed(store, 6)
    await store.send_event("r2", "go", '"payload"')
    snapshot = await store.load_pass("r2")
    assert snapshot is not None
    (event,) = snapshot.events
    await store.commit(Batch("r2", [ConsumeEvent(event.id, "first")], fence="w1"))
    outcomes = await asyncio.gather(
        *(
            store.commit(
                Batch(
                    r,
                    [SetState("n", '"y"')]
                    + ([ConsumeEvent(event.id, "second")] if r == "r2" else []),
                    fence="w1",
                )
            )
            for r in ids
        ),
        return_exceptions=True,
    )
    for run_id, outcome in zip(ids, outcomes, strict=True):
        if run_id == "r2":
            assert isinstance(outcome, LeaseLostError), outcome
            assert await _state(store, run_id) == {}  # nothing of it was written
        else:
            assert outcome is False, outcome
            assert await _state(store, run_id) == {"n": '"y"'}


async def test_releases_committed_together_each_say_whether_their_run_is_due(
    store: Store,
) -> None:
    ids = await _claimed(store, 8)
    seen = {r: await wakeups(store, r) for r in ids}
    woken = {"r1", "r5"}
    for run_id in woken:
        await store.wake(run_id)  # woken during the pass: due again once released
    far = 2_000_000_000.0
    outcomes = await asyncio.gather(
        *(
            store.commit(
                Batch(r, [SetTimer("nap", "sleep", far)], fence="w1", release_wakeups_seen=seen[r])
            )
            for r in ids
        )
    )
    assert {r for r, due in zip(ids, outcomes, strict=True) if due} == woken
    for run_id in ids:
        snapshot = await store.load_pass(run_id)
        assert snapshot is not None and snapshot.run.lease_owner is None


async def test_postgres_sends_concurrent_batches_in_few_transactions(
    store: Store, database: str
) -> None:
    if not database.startswith("postgresql"):
        pytest.skip("the SQLite writer's group commit is tested in test_sqlite_writes")
    ids = await _claimed(store, 50)
    before = store.commits  # type: ignore[attr-defined]
    await asyncio.gather(*(store.commit(Batch(r, [SetState("n", '"z"')], fence="w1")) for r in ids))
    transactions = store.commits - before  # type: ignore[attr-defined]
    # the first batch goes alone; the rest wait for it and go together
    assert transactions <= 3, transactions
    for run_id in ids:
        assert await _state(store, run_id) == {"n": '"z"'}


async def test_postgres_group_never_waits_on_a_row_another_transaction_holds(
    store: Store, database: str
) -> None:
    if not database.startswith("postgresql"):
        pytest.skip("SQLite has one writer: no row is ever held by another transaction")
    ids = await _claimed(store, 6)
    async with _row_held(database, "r2") as let_go:
        commits = asyncio.gather(
            *(store.commit(Batch(r, [SetState("n", '"w"')], fence="w1")) for r in ids)
        )

        async def others_landed() -> bool:
            states = [await _state(store, r) for r in ids if r != "r2"]
            return all(state == {"n": '"w"'} for state in states)

        # every other batch commits while r2's row is held: no group waits for it
        await eventually(others_landed, what="the batches of the other runs to land")
        assert await _state(store, "r2") == {}
        assert not commits.done()
        await let_go()  # once the row is free, r2's batch lands too, on its own
        assert await asyncio.wait_for(commits, timeout=10) == [False] * len(ids)
        assert await _state(store, "r2") == {"n": '"w"'}


async def test_postgres_group_never_waits_for_the_child_of_a_run_that_cancels_itself(
    store: Store, database: str
) -> None:
    """A run that ends cancelled (its workflow cancelled itself) cancels its live
    children, and must wait for their rows: its batch goes alone, so the other batches
    handed in with it land while a child's row is held elsewhere."""
    if not database.startswith("postgresql"):
        pytest.skip("SQLite has one writer: no row is ever held by another transaction")
    ids = await _claimed(store, 6)
    await new_run(store, "kid", parent_run_id="r2", parent_step_key="sub")
    stop = EndRun("cancelled", error=error("stopped itself", "WORKFLOW_CANCELLED"), cut=CUT)
    async with _row_held(database, "kid") as let_go:
        commits = asyncio.gather(
            *(
                store.commit(Batch(r, [stop] if r == "r2" else [SetState("n", '"w"')], fence="w1"))
                for r in ids
            )
        )

        async def others_landed() -> bool:
            states = [await _state(store, r) for r in ids if r != "r2"]
            return all(state == {"n": '"w"'} for state in states)

        await eventually(others_landed, what="the batches beside the cancel to land")
        assert not commits.done()
        await let_go()
        assert await asyncio.wait_for(commits, timeout=10) == [False] * len(ids)
    for run_id in ("r2", "kid"):
        run = await store.get_run(run_id)
        assert run is not None and run.status == "cancelled", run_id


def _begin(run_id: str, key: str) -> StartAttempt:
    return StartAttempt(step(run_id, key, status="running", attempts=1), 1, "running", "w1")


def _finish(run_id: str, key: str, output: str) -> FinishAttempt:
    done = step(run_id, key, status="succeeded", attempts=1, output=output, delivered=1)
    return FinishAttempt(done, 1, "succeeded", output)


async def _steps(store: Store, run_id: str) -> dict[str, tuple[str, object]]:
    return {s.key: (str(s.status), s.output) for s in await store.get_steps(run_id)}


async def _attempts(store: Store, run_id: str) -> dict[str, str]:
    return {f"{a.key}#{a.attempt}": str(a.status) for a in await store.get_history(run_id)}


async def test_step_writes_of_many_passes_land_as_each_would_alone(store: Store) -> None:
    """Batches of step writes only (how most steps commit) are written together as sets
    on PostgreSQL: each must land exactly as its ops would in order, a step written twice
    in one batch keeping its last write, and an attempt begun and ended in one batch
    ending closed."""
    ids = await _claimed(store, 12)
    await asyncio.gather(*(store.commit(Batch(r, [_begin(r, "a")], fence="w1")) for r in ids))
    await asyncio.gather(
        *(
            store.commit(
                Batch(
                    r,
                    [
                        _finish(r, "a", f'"{r}"'),
                        _begin(r, "b"),
                        PutStep(step(r, "c", status="pending")),
                        PutStep(step(r, "c", status="scheduled", wake_at=2e9)),
                        _begin(r, "d"),
                        _finish(r, "d", '"d"'),
                    ],
                    fence="w1",
                )
            )
            for r in ids
        )
    )
    for run_id in ids:
        assert await _steps(store, run_id) == {
            "a": ("succeeded", run_id),
            "b": ("running", None),
            "c": ("scheduled", None),
            "d": ("succeeded", "d"),
        }
        assert await _attempts(store, run_id) == {
            "a#1": "succeeded",
            "b#1": "running",
            "d#1": "succeeded",
        }
        snapshot = await store.load_pass(run_id)
        assert snapshot is not None
        assert snapshot.steps["a"].delivered == 1  # every column of the row is written


async def test_step_writes_beside_other_writes_each_get_their_own_outcome(
    store: Store, database: str
) -> None:
    """A group mixing step-only batches with other batches, one lease lost and, on
    PostgreSQL, one run row held by another transaction: only the lost batch fails, the
    held one lands once its row is free, and every other lands whole."""
    ids = await _claimed(store, 8)
    await store.renew_leases("w1", -1.0, ids)
    assert await store.claim_run("r3", "thief", 60.0)
    for run_id in ids:
        if run_id != "r3":
            assert await store.claim_run(run_id, "w1", 60.0)
    postgres = database.startswith("postgresql")
    async with _row_held(database, "r5") if postgres else _nothing_held() as let_go:
        outcomes = asyncio.gather(
            *(
                store.commit(
                    Batch(
                        r,
                        [_begin(r, "a")] + ([SetState("n", '"s"')] if r in ("r1", "r6") else []),
                        fence="w1",
                    )
                )
                for r in ids
            ),
            return_exceptions=True,
        )
        if postgres:

            async def others_landed() -> bool:
                free = [r for r in ids if r not in ("r3", "r5")]
                return all(["a" in await _steps(store, r) for r in free])

            await eventually(others_landed, what="the batches of the free runs to land")
            assert await _steps(store, "r5") == {}
        await let_go()
        results = await asyncio.wait_for(outcomes, timeout=10)
    for run_id, outcome in zip(ids, results, strict=True):
        if run_id == "r3":
            assert isinstance(outcome, LeaseLostError), outcome
            assert await _steps(store, run_id) == {}
            assert await _attempts(store, run_id) == {}
        else:
            assert outcome is False, outcome
            assert await _steps(store, run_id) == {"a": ("running", None)}
            assert await _attempts(store, run_id) == {"a#1": "running"}
            expected = {"n": '"s"'} if run_id in ("r1", "r6") else {}
            assert await _state(store, run_id) == expected


async def test_pass_ends_committed_together_end_as_each_would_alone(store: Store) -> None:
    """A pass's last batch (its last step's end, the run's end, the release) from many
    passes at once, as every run of ten steps ends: on PostgreSQL a group writes them with
    its step writes. Each run ends as its batch says; a run cancelled from elsewhere
    keeps its cancel but records how its step really ended; a run that only ends (no step
    write) ends too; a child's end, which locks its parent first, settles the parent's
    step and wakes the parent."""
    ids = await _claimed(store, 10)
    await new_run(store, "parent")
    await write(store, "parent", PutStep(step("parent", "sub", status="running", child_run_id="c")))
    await new_run(store, "c", parent_run_id="parent", parent_step_key="sub")
    assert await store.claim_run("c", "w1", 60.0)
    ids.append("c")
    await asyncio.gather(*(store.commit(Batch(r, [_begin(r, "a")], fence="w1")) for r in ids))
    await write(store, "r4", EndRun("cancelled", None, error("stop"), cut=CUT))
    woken = await wakeups(store, "parent")

    def last(run_id: str) -> list[Op]:
        if run_id == "r7":
            return [EndRun("failed", error=error("no steps"))]
        end = EndRun("completed", output=f'"{run_id} done"')
        if run_id == "c":
            end = dataclasses.replace(end, parent=StepEnd("succeeded", '"from c"', failures=0))
        return [_finish(run_id, "a", f'"{run_id}"'), end]

    outcomes = await asyncio.gather(
        *(store.commit(Batch(r, last(r), fence="w1", release_wakeups_seen=0)) for r in ids)
    )
    assert outcomes == [False] * len(ids)
    for run_id in ids:
        snapshot = await store.load_pass(run_id)
        assert snapshot is not None
        run = snapshot.run
        assert run.lease_owner is None, run_id  # released
        if run_id == "r4":
            assert (run.status, run.output) == ("cancelled", None)
        elif run_id == "r7":
            assert run.status == "failed" and json.loads(run.error or "{}")["message"] == (
                "no steps"
            )
            assert await _steps(store, run_id) == {"a": ("running", None)}
            continue
        else:
            assert (run.status, run.output) == ("completed", f'"{run_id} done"'), run_id
        assert await _steps(store, run_id) == {"a": ("succeeded", run_id)}, run_id
        assert await _attempts(store, run_id) == {"a#1": "succeeded"}, run_id
    assert await _steps(store, "parent") == {"sub": ("succeeded", "from c")}
    assert await wakeups(store, "parent") == woken + 1


async def test_a_caller_cancelled_while_its_write_is_on_the_way_waits_for_it(
    store: Store, database: str
) -> None:
    """A pass cancelled while its batch is on the way (a shutdown, its run cancelled) must
    not go on before the batch is in: the cancel reaches it only once the write ended, and
    the write lands. The run row is held elsewhere, so the write cannot end until it is
    let go."""
    if not database.startswith("postgresql"):
        pytest.skip("the SQLite writer finishes a write whatever its caller does")
    ids = await _claimed(store, 4)
    async with _row_held(database, "r2") as let_go:
        tasks = [
            asyncio.create_task(store.commit(Batch(r, [_begin(r, "a")], fence="w1"))) for r in ids
        ]
        stuck = tasks[ids.index("r2")]

        async def others_landed() -> bool:
            return all([await _steps(store, r) != {} for r in ids if r != "r2"])

        await eventually(others_landed, what="the writes of the free runs to land")
        stuck.cancel()
        # the cancel is held back while the write waits for the row (a bounded look for
        # something that must not happen)
        with pytest.raises(TimeoutError):
            await asyncio.wait_for(asyncio.shield(stuck), timeout=0.3)
        assert not stuck.done()
        await let_go()
        with pytest.raises(asyncio.CancelledError):
            await stuck
        assert await _steps(store, "r2") == {"a": ("running", None)}
        assert await asyncio.gather(*(t for t in tasks if t is not stuck)) == [False] * 3


async def test_a_pass_task_cancelled_while_its_own_write_is_on_the_way_waits_for_it(
    store: Store, database: str
) -> None:
    """The worker's tasks send a lone write themselves (no task of the group's): a cancel
    that arrives meanwhile is held back until the write ended, and the write lands, as for
    a write handed to the group. Batches handed in meanwhile wait and go afterwards."""
    if not database.startswith("postgresql"):
        pytest.skip("the SQLite writer finishes a write whatever its caller does")
    ids = await _claimed(store, 3)
    async with _row_held(database, "r0") as let_go:
        alone = guarded_task(store.commit(Batch("r0", [_begin("r0", "a")], fence="w1")))
        # the lone write is on its way (waiting for the row): the others queue behind it
        await eventually(lambda: _waiting_for_a_lock(database), what="the write to wait")
        others = [
            asyncio.create_task(store.commit(Batch(r, [_begin(r, "a")], fence="w1")))
            for r in ids[1:]
        ]
        alone.cancel()
        # a bounded look for something that must not happen: the cancel cutting it short
        with pytest.raises(TimeoutError):
            await asyncio.wait_for(asyncio.shield(alone), timeout=0.3)
        assert not alone.done()
        await let_go()
        with pytest.raises(asyncio.CancelledError):
            await alone
    assert await _steps(store, "r0") == {"a": ("running", None)}
    assert await asyncio.gather(*others) == [False, False]
    for run_id in ids[1:]:
        assert await _steps(store, run_id) == {"a": ("running", None)}

    # a task with a cancel requested already writes the handed off way: the write lands,
    # then the cancel is delivered
    async def cancelled_first() -> bool:
        task = asyncio.current_task()
        assert task is not None
        task.cancel()
        return await store.commit(Batch("r0", [_begin("r0", "b")], fence="w1"))

    with pytest.raises(asyncio.CancelledError):
        await guarded_task(cancelled_first())
    assert (await _steps(store, "r0"))["b"] == ("running", None)
    # and a cancel outside a write is an ordinary one
    idle = guarded_task(asyncio.sleep(60))
    await asyncio.sleep(0)
    idle.cancel()
    with pytest.raises(asyncio.CancelledError):
        await idle


async def test_a_write_made_as_the_runs_last_one_ends_is_not_lost_to_a_cancel(
    store: Store, database: str
) -> None:
    """A pass's task that commits again as soon as its last write of the run ended finds
    the run's turn promised to the write that waited for it. Its cancel (a shutdown, its
    run cancelled) arriving while it waits its turn must still wait for its write: the
    batch is out of the pass's hands, and may hold another step's result, which would be
    lost and its body run again."""
    if not database.startswith("postgresql"):
        pytest.skip("the SQLite writer finishes a write whatever its caller does")
    (run_id,) = await _claimed(store, 1)
    await store.commit(Batch(run_id, [_begin(run_id, "b")], fence="w1"))

    async def two_writes() -> None:
        await store.commit(Batch(run_id, [_begin(run_id, "a")], fence="w1"))
        # at once, as a pass's next step starts: the run's turn goes to "b" first
        await store.commit(Batch(run_id, [_finish(run_id, "c", '"kept"')], fence="w1"))

    async with _row_held(database, run_id, "b") as let_b_go:
        async with _row_held(database, run_id) as let_go:
            writer = asyncio.create_task(two_writes())
            await eventually(lambda: _waiting_for_a_lock(database), what="a to wait")
            other = asyncio.create_task(
                store.commit(Batch(run_id, [_finish(run_id, "b", '"b"')], fence="w1"))
            )

            async def queued() -> bool:
                # the writer holds the run's turn and "b" waits for it (the PostgreSQL
                # store counts both)
                return store._in_order(run_id).users == 2

            await eventually(queued, what="b to wait for its turn")
            await let_go()

        async def a_landed() -> bool:
            return "a" in await _steps(store, run_id)

        await eventually(a_landed, what="a to land")
        # "b" waits for its step's row now, and "c" for its turn behind it
        assert not writer.done()
        writer.cancel()
        # a bounded look for something that must not happen: the cancel cutting it short
        with pytest.raises(TimeoutError):
            await asyncio.wait_for(asyncio.shield(writer), timeout=0.3)
        await let_b_go()
        with pytest.raises(asyncio.CancelledError):
            await writer
    assert await other is False
    steps = await _steps(store, run_id)
    assert steps["c"] == ("succeeded", "kept")
    assert steps["b"] == ("succeeded", "b")


async def test_cancels_held_during_a_write_are_counted_as_asyncio_counts_them(
    store: Store, database: str
) -> None:
    """A timeout that runs out around a pass's own write, and a cancel from outside on top
    of it (a shutdown), both arrive while the write is on its way: both are counted, so
    ``asyncio.timeout`` takes back only its own and the task still ends cancelled, as a
    task that handed its write off does."""
    if not database.startswith("postgresql"):
        pytest.skip("the SQLite writer finishes a write whatever its caller does")
    ids = await _claimed(store, 1)
    seen: list[str] = []

    async def body() -> str:
        try:
            async with asyncio.timeout(0.05):
                await store.commit(Batch(ids[0], [_begin(ids[0], "a")], fence="w1"))
        except TimeoutError:
            seen.append("timeout")
        await asyncio.sleep(0)
        return "went on"

    async with _row_held(database, ids[0]) as let_go:
        task = guarded_task(body())
        await eventually(lambda: _waiting_for_a_lock(database), what="the write to wait")

        async def timed_out() -> bool:
            return task.cancelling() == 1

        await eventually(timed_out, what="the timeout to run out during the write")
        task.cancel()
        assert task.cancelling() == 2
        await let_go()
        with pytest.raises(asyncio.CancelledError):
            await task
    assert seen == []
    assert await _steps(store, ids[0]) == {"a": ("running", None)}


async def _waiting_for_a_lock(database: str) -> bool:
    asyncpg = pytest.importorskip("asyncpg")
    conn = await asyncpg.connect(database)
    try:
        return bool(
            await conn.fetchval(
                "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock'"
                " AND datname = current_database()"
            )
        )
    finally:
        await conn.close()


async def test_runs_started_at_once_are_each_created_once(store: Store) -> None:
    """Concurrent starts (PostgreSQL sends them together): each caller hears its own run,
    and a run id given twice in one group is created once."""
    news = [
        NewRun(f"s{i}", "wf", "workflow", None, input=f'{{"i": {i}}}', status="running")
        for i in range(40)
    ]
    twice = NewRun("s7", "wf", "workflow", None, input='{"i": "again"}', status="running")
    starts = [*news[:20], twice, *news[20:]]
    outcomes = await asyncio.gather(*(store.create_run(n) for n in starts))
    for n, (run, created) in zip(starts, outcomes, strict=True):
        assert run.id == n.id
        assert run.input == ({"i": 7} if n.id == "s7" else json.loads(n.input))
        assert created == (n is not twice), n.id  # the second start of s7 finds the first
    assert len({run.id for run, _ in outcomes}) == 40


async def test_a_start_the_database_refuses_fails_alone(store: Store) -> None:
    news = [
        NewRun(f"s{i}", "wf", "workflow", None, input="{}", status="running") for i in range(10)
    ]
    broken = NewRun("bad", None, "workflow", None, input="{}", status="running")  # type: ignore[arg-type]
    outcomes = await asyncio.gather(
        *(store.create_run(n) for n in [*news[:5], broken, *news[5:]]), return_exceptions=True
    )
    assert isinstance(outcomes.pop(5), Exception)  # the run without a workflow
    assert await store.get_run("bad") is None
    assert [(run.id, created) for run, created in outcomes] == [  # type: ignore[misc]
        (n.id, True) for n in news
    ]


async def test_postgres_creates_runs_started_at_once_in_few_transactions(
    store: Store, database: str
) -> None:
    if not database.startswith("postgresql"):
        pytest.skip("SQLite's writer shares its commits per loop turn (test_sqlite_writes)")
    before = store.commits  # type: ignore[attr-defined]
    await asyncio.gather(*(new_run(store, f"t{i}") for i in range(100)))
    transactions = store.commits - before  # type: ignore[attr-defined]
    # the first start goes alone; the rest wait for it and go together
    assert transactions <= 3, transactions
    for i in range(100):
        assert (await store.get_run(f"t{i}")) is not None
