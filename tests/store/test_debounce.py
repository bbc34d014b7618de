"""Debounced starts and starts that replace the holder of their de-duplication key, at the
store, on every store: one waiting run per debounce key (its input and start moved by
each start, never past its limit), a new run once the window has closed, and a replace
that ends the live holder as a cancel does in the transaction that creates the new run."""

from __future__ import annotations

import asyncio

from plait.clock import VirtualClock
from plait.runtime import runs
from plait.store import Store, make_store
from plait.store.ops import EndRun
from plait.store.rows import NewRun, RunFilter

from .rows import write

T0 = 1_900_000_000.0


def debounced(run_id: str, data: str, now: float, **fields: object) -> NewRun:
    """A start debounced by 10 s with key ``k`` (at most 30 s after the first), at ``now``."""
    fields.setdefault("debounce_key", "k")
    fields.setdefault("not_before", now + 10)
    fields.setdefault("debounce_until", now + 30)
    return NewRun(run_id, "wf", "workflow", None, data, status="queued", **fields)  # type: ignore[arg-type]


def clocked(store: Store) -> VirtualClock:
    clock = VirtualClock(T0)
    store.clock = clock
    return clock


async def test_debounced_starts_share_the_waiting_run(store: Store) -> None:
    clock = clocked(store)
    first, created = await store.create_run(debounced("r1", '"a"', T0))
    assert created and first.status == "queued"
    clock.move_to(T0 + 4)
    joined, created = await store.create_run(debounced("r2", '"b"', T0 + 4))
    assert not created and joined.id == "r1" and joined.input == "b"
    assert joined.start_at is not None and joined.start_at.timestamp() == T0 + 14
    assert await store.get_run("r2") is None
    # the first start's limit holds: 30 s after it, however late the next start
    clock.move_to(T0 + 13)
    capped, _ = await store.create_run(debounced("r3", '"c"', T0 + 13, debounce_until=T0 + 99))
    assert capped.id == "r1" and capped.input == "c"
    assert capped.start_at is not None and capped.start_at.timestamp() == T0 + 23
    clock.move_to(T0 + 22)
    last, _ = await store.create_run(debounced("r4", '"d"', T0 + 22))
    assert last.id == "r1" and last.input == "d"
    assert last.start_at is not None and last.start_at.timestamp() == T0 + 30


async def test_a_run_whose_start_time_passed_leaves_the_window(store: Store) -> None:
    clock = clocked(store)
    await store.create_run(debounced("r1", '"a"', T0))
    clock.move_to(T0 + 10)  # its start time: due, waiting for admission
    later, created = await store.create_run(debounced("r2", '"b"', T0 + 10))
    assert created and later.id == "r2"
    kept = await store.get_run("r1")
    assert kept is not None and kept.input == "a" and kept.status == "queued"
    # the next start joins the new run, not the old one
    again, _ = await store.create_run(debounced("r3", '"c"', T0 + 11))
    assert again.id == "r2" and again.input == "c"
    assert await store.admit_runs("w1", 60.0, 10, [], "running") == ["r1"]


async def test_an_admitted_run_takes_no_more_starts(store: Store) -> None:
    clock = clocked(store)
    await store.create_run(debounced("r1", '"a"', T0))
    clock.move_to(T0 + 10)
    assert await store.admit_runs("w1", 60.0, 10, [], "running") == ["r1"]
    later, created = await store.create_run(debounced("r2", '"b"', T0 + 10))
    assert created and later.id == "r2"


async def test_keys_workflows_and_owners_debounce_apart(store: Store) -> None:
    clocked(store)
    await store.create_run(debounced("r1", "1", T0))
    other_key, created = await store.create_run(debounced("r2", "2", T0, debounce_key="j"))
    assert created and other_key.id == "r2"
    other_owner, created = await store.create_run(debounced("r3", "3", T0, owner="bob"))
    assert created and other_owner.id == "r3"
    same_owner, created = await store.create_run(debounced("r4", "4", T0, owner="bob"))
    assert not created and same_owner.id == "r3"
    other_workflow, created = await store.create_run(
        NewRun(
            "r5",
            "other",
            "workflow",
            None,
            "5",
            status="queued",
            debounce_key="k",
            not_before=T0 + 10,
        )
    )
    assert created and other_workflow.id == "r5"


async def test_a_start_time_moves_the_deadline_with_it(store: Store) -> None:
    clock = clocked(store)
    await store.create_run(debounced("r1", "1", T0, timeout=60.0, deadline_at=T0 + 70))
    clock.move_to(T0 + 5)
    joined, _ = await store.create_run(debounced("r2", "2", T0 + 5, timeout=60.0))
    assert joined.deadline_at is not None and joined.deadline_at.timestamp() == T0 + 75


async def test_debounced_starts_in_one_batch_share_one_run(store: Store) -> None:
    clocked(store)
    outcomes = await store.create_runs([debounced(f"r{n}", str(n), T0) for n in range(5)])
    assert [run.id for run, _ in outcomes] == ["r0"] * 5
    assert [created for _, created in outcomes] == [True, False, False, False, False]
    run = await store.get_run("r0")
    assert run is not None and run.input == 4


async def test_stores_debouncing_one_key_at_once_make_one_run(database: str) -> None:
    # four stores (four transactions at once on PostgreSQL), ten keys in turn: without
    # the unique index, two of them insert a run for one key (tried: it happens)
    stores = [make_store(database) for _ in range(4)]
    clock = VirtualClock(T0)
    for one in stores:
        one.clock = clock
        await one.open()
    try:
        for key in range(10):
            outcomes = await asyncio.gather(
                *(
                    one.create_run(debounced(f"{key}-{i}-{n}", str(n), T0, debounce_key=f"k{key}"))
                    for n in range(3)
                    for i, one in enumerate(stores)
                )
            )
            assert len({run.id for run, _ in outcomes}) == 1
            assert sum(created for _, created in outcomes) == 1
        listed, total = await stores[0].list_runs(_all_runs())
        assert total == 10 and len({run.input for run in listed}) <= 3
    finally:
        for one in stores:
            await one.close()


def _all_runs() -> RunFilter:
    return RunFilter(limit=100, offset=0)


# -- replace --------------------------------------------------------------------------------


def deduped(run_id: str, **fields: object) -> NewRun:
    fields.setdefault("dedup", "job")
    return NewRun(run_id, "wf", "workflow", None, "null", status="running", **fields)  # type: ignore[arg-type]


def replaced_by(run_id: str) -> EndRun:
    cut = runs.cancel(f"replaced by run {run_id}")
    return EndRun(cut.status, None, cut.error, cut.parent, cut.cut)


async def test_replace_ends_the_holder_and_creates_the_run(store: Store) -> None:
    await store.create_run(deduped("r1"))
    run, created, moved = await store.replace_run(deduped("r2"), replaced_by("r2"))
    assert created and run.id == "r2" and run.status == "running" and moved == ["r1"]
    old = await store.get_run("r1")
    assert old is not None and old.status == "cancelled"
    assert old.error is not None and "replaced by run r2" in old.error["message"]
    # with no holder, a replace is a start
    await write(store, "r2", EndRun("completed", "null"))
    run, created, moved = await store.replace_run(deduped("r3"), replaced_by("r3"))
    assert created and run.id == "r3" and moved == []


async def test_replace_keeps_an_existing_id_and_another_owners_run(store: Store) -> None:
    await store.create_run(deduped("r1"))
    run, created, moved = await store.replace_run(deduped("r1"), replaced_by("r1"))
    assert not created and run.id == "r1" and run.status == "running" and moved == []
    theirs, created, moved = await store.replace_run(deduped("r2", owner="bob"), replaced_by("r2"))
    assert not created and theirs.id == "r1" and moved == []
    assert await store.get_run("r2") is None


async def test_two_stores_replacing_one_key_at_once_leave_one_live_run(database: str) -> None:
    stores = [make_store(database), make_store(database)]
    for one in stores:
        await one.open()
    try:
        await stores[0].create_run(deduped("r0"))
        results = await asyncio.gather(
            *(
                one.replace_run(deduped(f"{i}-{n}"), replaced_by(f"{i}-{n}"))
                for n in range(6)
                for i, one in enumerate(stores)
            )
        )
        assert all(created for _, created, _ in results)
        listed, total = await stores[0].list_runs(_all_runs())
        live = [run.id for run in listed if run.status == "running"]
        assert total == 13 and len(live) == 1
    finally:
        for one in stores:
            await one.close()
