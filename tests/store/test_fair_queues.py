"""Fair queues at the store: admission takes the keys with runs waiting in turn (by
priority first), weights give a key more admissions per turn, and the turns are kept in
the database, so every admitter ranks from the same state, on every store."""

from __future__ import annotations

import dataclasses

from plait.queues import TURN
from plait.store import Store
from plait.store.rows import NewRun, QueueLimits

from .test_queues import end, queued


def fair(concurrency: int | None = 1, **weights: int) -> list[QueueLimits]:
    costs = tuple((key, TURN // weight) for key, weight in sorted(weights.items()))
    return [QueueLimits("q", concurrency=concurrency, turn=TURN, key_costs=costs)]


async def enqueue(store: Store, key: str | None, count: int, **fields: object) -> None:
    for n in range(count):
        await store.create_run(queued(f"{key or 'none'}{n:03}", queue="q", queue_key=key, **fields))


async def admit_one_by_one(
    store: Store, limits: list[QueueLimits], count: int, owner: str = "w1"
) -> list[str]:
    """Admit ``count`` runs one at a time, each ended before the next is admitted; the
    keys in the order they were admitted (the run ids start with their key)."""
    order: list[str] = []
    for _ in range(count):
        (run_id,) = await store.admit_runs(owner, 60.0, 10, limits, "running")
        order.append(run_id)
        await end(store, run_id)
    return order


async def test_keys_take_turns_where_start_order_would_serve_one_key_first(
    store: Store,
) -> None:
    await enqueue(store, "a", 12)
    await enqueue(store, "b", 3)
    order = await admit_one_by_one(store, fair(), 8)
    assert [run_id[0] for run_id in order] == list("ababab" + "aa")
    # within a key, start order
    assert order[:4] == ["a000", "b000", "a001", "b001"]


async def test_without_fair_the_backlog_of_one_key_goes_first(store: Store) -> None:
    await enqueue(store, "a", 5)
    await enqueue(store, "b", 2)
    order = await admit_one_by_one(store, [QueueLimits("q", concurrency=1)], 7)
    assert [run_id[0] for run_id in order] == list("aaaaabb")


async def test_a_weight_gives_a_key_that_many_admissions_per_turn(store: Store) -> None:
    """Turns are where admissions start: both keys' first runs tie at the clock (start
    order, ``a`` first), then ``a`` takes three turns to each of ``b``'s."""
    await enqueue(store, "a", 20)
    await enqueue(store, "b", 20)
    order = await admit_one_by_one(store, fair(a=3), 16)
    assert [run_id[0] for run_id in order] == list("ab" + "aaab" * 3 + "aa")


async def test_one_admission_of_many_runs_takes_keys_in_turn(store: Store) -> None:
    """A fair queue without a concurrency limit: the worker's free slots decide how many
    runs one admission takes, and those are shared by turn too."""
    await enqueue(store, "a", 10)
    await enqueue(store, "b", 10)
    await enqueue(store, None, 10)
    first = await store.admit_runs("w1", 60.0, 6, fair(None), "running")
    assert sorted(run_id[0] for run_id in first) == list("aabbnn")
    second = await store.admit_runs("w1", 60.0, 3, fair(None), "running")
    assert sorted(run_id[0] for run_id in second) == list("abn")


async def test_turns_are_shared_by_every_admitter(store: Store) -> None:
    """The turn order comes from the database: admitters taking turns alternately (two
    workers, two processes) continue one round robin, not one each."""
    await enqueue(store, "a", 6)
    await enqueue(store, "b", 6)
    order: list[str] = []
    for n in range(6):
        order += await admit_one_by_one(store, fair(), 1, owner=f"w{n % 2}")
    assert [run_id[0] for run_id in order] == list("ababab")


async def test_a_key_back_after_a_pause_saves_no_turns_up(store: Store) -> None:
    """A key that had no runs waiting while others were admitted comes back at the
    current turn: it does not get the turns it missed in a row."""
    await enqueue(store, "a", 20)
    assert [r[0] for r in await admit_one_by_one(store, fair(), 6)] == list("aaaaaa")
    await enqueue(store, "b", 5)
    order = await admit_one_by_one(store, fair(), 6)
    assert sorted(run_id[0] for run_id in order[:2]) == ["a", "b"]
    assert [run_id[0] for run_id in order[2:]] in (list("abab"), list("baba"))


async def test_higher_priority_first_then_keys_in_turn(store: Store) -> None:
    await enqueue(store, "a", 4)
    await enqueue(store, "b", 2)
    await store.create_run(queued("urgent", queue="q", queue_key="a", priority=5))
    order = await admit_one_by_one(store, fair(), 5)
    assert order[0] == "urgent"
    assert [run_id[0] for run_id in order[1:]] in (list("abab"), list("baba"))


async def test_per_key_still_holds_in_a_fair_queue(store: Store) -> None:
    await enqueue(store, "a", 4)
    await enqueue(store, "b", 1)
    limits = [
        QueueLimits("q", concurrency=3, per_key=1, turn=TURN),
    ]
    first = await store.admit_runs("w1", 60.0, 10, limits, "running")
    assert sorted(first) == ["a000", "b000"]
    assert await store.admit_runs("w1", 60.0, 10, limits, "running") == []


async def test_queue_keys_counts_each_key_and_its_turn(store: Store) -> None:
    await enqueue(store, "a", 3)
    await enqueue(store, "b", 1)
    await enqueue(store, None, 1)
    await store.create_run(queued("other", queue="elsewhere", queue_key="a"))
    (first,) = await store.admit_runs("w1", 60.0, 1, fair(), "running")
    assert first == "a000"
    keys = {row.key: row for row in await store.queue_keys("q")}
    assert (keys["a"].queued, keys["a"].active) == (2, 1)
    assert (keys["b"].queued, keys["b"].active, keys[None].queued) == (1, 0, 1)
    # a has had one turn past the clock; b and the runs without a key wait at the clock
    assert keys["a"].ahead == TURN
    assert keys["b"].ahead == 0 and keys[None].ahead == 0
    # a queue that is not fair keeps no turns
    assert [(r.key, r.queued, r.ahead) for r in await store.queue_keys("elsewhere")] == [
        ("a", 1, None)
    ]


async def test_a_key_held_back_saves_up_no_turns_for_a_burst(store: Store) -> None:
    """A key a budget held while the others took their turns comes back at the queue's
    clock: it takes its turn beside them, not a run of its own admissions."""
    for key in "abc":
        await enqueue(store, key, 30)
    order: list[str] = []
    for n in range(32):
        held = [("q", "a")] if n < 20 else []
        (run_id,) = await store.admit_runs("w1", 60.0, 10, fair(), "running", held=held)
        order.append(run_id[0])
        await end(store, run_id)
    assert "".join(order[:20]) == "bc" * 10
    after = "".join(order[20:])
    # it joins the round the others are in (first on a tie: its runs are older), then
    # takes one turn a round; held, it had saved up ten (a burst of a's before)
    assert "aaa" not in after and after.count("a") <= 5, after
    assert all(after[n : n + 3].count("a") <= 2 for n in range(len(after) - 2)), after


async def test_a_key_whose_workflow_was_paused_saves_up_no_turns_for_a_burst(
    store: Store,
) -> None:
    """A key a brake held (its runs' workflow paused) while the others took their turns
    comes back at the queue's clock, as a key a budget held does."""
    for n in range(30):
        for key, workflow in (("a", "wa"), ("b", "wb"), ("c", "wb")):
            run = NewRun(f"{key}{n:03}", workflow, "workflow", None, "null", status="queued")
            await store.create_run(dataclasses.replace(run, queue="q", queue_key=key))
    await store.pause("workflow", "wa", "paused", "running")
    order = await admit_one_by_one(store, fair(), 20)
    await store.unpause("workflow", "wa", "running", "paused")
    order += await admit_one_by_one(store, fair(), 12)
    assert "".join(r[0] for r in order[:20]) in ("bc" * 10, "cb" * 10)
    after = "".join(r[0] for r in order[20:])
    assert "aaa" not in after and after.count("a") <= 5, after
