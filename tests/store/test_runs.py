"""Runs and their records: creating, reading, listing."""

from __future__ import annotations

import asyncio
import json
import time

import pytest

from plait.clock import VirtualClock
from plait.errors import RunIdTakenError
from plait.store import Store
from plait.store.ops import CreateChildRun, EndRun, FinishAttempt, PutStep, StartAttempt
from plait.store.rows import NewRun, RunFilter

from .rows import new_run, step, write


async def test_create_run_creates_a_running_run(store: Store) -> None:
    before = time.time()
    run, created = await store.create_run(
        NewRun("r1", "wf", "workflow", "v1", '{"n": 1}', owner="ann", status="running")
    )
    assert created
    assert (run.id, run.workflow, run.kind, run.version, run.status) == (
        "r1",
        "wf",
        "workflow",
        "v1",
        "running",
    )
    assert (run.input, run.output, run.error, run.owner, run.parent_run_id) == (
        {"n": 1},
        None,
        None,
        "ann",
        None,
    )
    assert before - 1 <= run.created_at.timestamp() <= time.time() + 1
    assert await store.get_run("r1") == run


async def test_the_run_create_run_returns_is_the_run_as_read_back(store: Store) -> None:
    # a store may build the created run from what it wrote rather than read it: every
    # field, down to a float's type, must be what a read gives
    now = time.time()
    await new_run(store, "parent")
    shapes = [
        NewRun("plain", "wf", "workflow", None, None, status="running"),
        NewRun(
            "queued",
            "wf",
            "graph",
            "v2",
            '{"deep": [1, {"x": null}]}',
            status="queued",
            owner="ann",
            start_node="begin",
            queue="q",
            queue_key="k",
            priority=3,
            dedup="d1",
            not_before=now + 60,
            scheduled_at=now - 5,
            trace='{"traceparent": "00-x-y-01"}',
            deadline_at=now + 120,
            timeout=120,  # an int: stored as a real
            tags='{"team": "a"}',
        ),
        NewRun(
            "child",
            "wf",
            "workflow",
            "v1",
            "[1, 2]",
            status="running",
            parent_run_id="parent",
            parent_step_key="s",
            lease_owner="w1",
            lease_seconds=30.0,
            debounce_key=None,
        ),
    ]
    for new in shapes:
        made, created = await store.create_run(new)
        assert created
        read = await store.get_run(new.id)
        assert read is not None
        assert json.dumps(made.to_dict()) == json.dumps(read.to_dict()), new.id
    (made, created), (again, twice) = await store.create_runs(
        [NewRun("many", "wf", "workflow", None, "{}", status="running", timeout=7)] * 2
    )
    assert (created, twice) == (True, False)
    assert json.dumps(made.to_dict()) == json.dumps(again.to_dict())


async def test_create_runs_writes_none_when_an_id_is_another_workflow_s(store: Store) -> None:
    await store.create_run(NewRun("held", "other", "workflow", None, "{}", status="running"))
    news = [NewRun(i, "wf", "workflow", None, "{}", status="running") for i in ("a", "held", "b")]
    with pytest.raises(RunIdTakenError, match=r"'held'.*'other'"):
        await store.create_runs(news)
    assert await store.get_run("a") is None and await store.get_run("b") is None


async def test_create_run_is_idempotent_on_its_id(store: Store) -> None:
    first, _ = await store.create_run(
        NewRun("r1", "wf", "workflow", None, '{"n": 1}', status="running")
    )
    again, created = await store.create_run(
        NewRun("r1", "wf", "workflow", None, '{"n": 2}', status="running")
    )
    assert not created
    assert again == first and again.input == {"n": 1}


async def test_a_run_created_with_a_lease_is_held(store: Store) -> None:
    await new_run(store, "r1", lease_owner="w1", lease_seconds=60.0)
    assert not await store.claim_run("r1", "w2", 60.0)
    assert await store.claim_due_runs("w2", 60.0, 10) == []


async def test_a_start_a_brake_holds_waits_queued_and_leased_to_no_one(store: Store) -> None:
    """Every way a start writes its run reads the brakes in its own transaction: a run of a
    paused workflow, or on no queue while the default queue is paused, waits ``queued``
    even if its starter asked to drive it (a lease); admission lets it in once resumed."""

    def start(run_id: str, workflow: str = "braked", **fields: object) -> NewRun:
        fields.setdefault("lease_owner", "w1")
        fields.setdefault("lease_seconds", 60.0)
        fields.setdefault("held_status", "queued")  # runtime.runs.BRAKED_START
        return NewRun(run_id, workflow, "workflow", None, "null", status="running", **fields)  # type: ignore[arg-type]

    await store.pause("workflow", "braked", "paused", "running")
    one, created = await store.create_run(start("one"))
    assert created and one.status == "queued"
    many = await store.create_runs([start("two"), start("free", "wf")])
    assert [(run.id, run.status) for run, _created in many] == [
        ("two", "queued"),
        ("free", "running"),
    ]
    replaced, created, _moved = await store.replace_run(
        start("three", dedup="d"), EndRun("cancelled")
    )
    assert created and replaced.status == "queued"
    await store.pause("queue", "default", "paused", "running")
    held, _ = await store.create_run(start("four", "wf"))
    queued, _ = await store.create_run(start("five", "wf", queue="q", lease_owner=None))
    assert (held.status, queued.status) == ("queued", "running")
    assert await store.admit_runs("w2", 60.0, 10, [], "running") == []
    await store.unpause("workflow", "braked", "running", "paused")
    await store.unpause("queue", "default", "running", "paused")
    admitted = await store.admit_runs("w2", 60.0, 10, [], "running")
    assert sorted(admitted) == ["four", "one", "three", "two"]


async def test_get_run_of_an_unknown_id_is_none(store: Store) -> None:
    assert await store.get_run("nope") is None


async def _some_runs(store: Store) -> None:
    await new_run(store, "r0", "a", version="v1")
    await new_run(store, "r1", "a", version="v2", owner="ann")
    await new_run(store, "r2", "b", version="v1", owner="bob")
    await new_run(store, "r3", "b", version="v1", parent_run_id="r2", parent_step_key="k")
    await write(store, "r3", EndRun("completed", '"done"'))


async def test_count_by_status_counts_the_filters_runs_in_each_status(store: Store) -> None:
    await _some_runs(store)
    assert await store.count_by_status(RunFilter()) == {"running": 3, "completed": 1}
    assert await store.count_by_status(RunFilter(workflow="b")) == {
        "running": 1,
        "completed": 1,
    }
    assert await store.count_by_status(RunFilter(visible_to="bob", top_level=True)) == {
        "running": 2
    }
    assert await store.count_by_status(RunFilter(workflow="none")) == {}


async def test_waiting_steps_reads_the_open_waits_of_many_runs(store: Store) -> None:
    for run_id in ("r1", "r2", "r3"):
        await new_run(store, run_id)
    await write(store, "r1", PutStep(step("r1", "a", seq=0)))
    await write(store, "r1", PutStep(step("r1", "__event:go", seq=1, kind="event")))
    await write(store, "r2", PutStep(step("r2", "nap", kind="sleep", status="scheduled")))
    await write(store, "r2", PutStep(step("r2", "old", seq=1, kind="sleep", status="succeeded")))
    await write(store, "r3", PutStep(step("r3", "__event:x", kind="event")))
    found = await store.waiting_steps(
        ["r1", "r2", "missing"], ["event", "sleep"], ["pending", "scheduled"]
    )
    assert [(s.run_id, s.key, s.kind) for s in found] == [
        ("r1", "__event:go", "event"),
        ("r2", "nap", "sleep"),
    ]
    assert await store.waiting_steps([], ["event"], ["pending"]) == []


async def test_runs_read_at_once_each_get_their_own(store: Store) -> None:
    """Reads made at once may share a statement (PostgreSQL): each caller still gets its
    own run, None for an id that names none, and a run read twice at once twice."""
    for i in range(12):
        await new_run(store, f"r{i}", workflow=f"wf{i}")
    wanted = [f"r{i % 12}" for i in range(30)] + ["missing", "r3"]
    runs = await asyncio.gather(*(store.get_run(run_id) for run_id in wanted))
    for run_id, run in zip(wanted, runs, strict=True):
        if run_id == "missing":
            assert run is None
        else:
            assert run is not None and (run.id, run.workflow) == (run_id, "wf" + run_id[1:])


async def test_list_runs_without_a_filter_pages_newest_first(store: Store) -> None:
    await _some_runs(store)
    runs, total = await store.list_runs(RunFilter())
    assert total == 4 and [r.id for r in runs] == ["r3", "r2", "r1", "r0"]
    runs, total = await store.list_runs(RunFilter(limit=2))
    assert total == 4 and [r.id for r in runs] == ["r3", "r2"]
    runs, total = await store.list_runs(RunFilter(limit=2, offset=2))
    assert total == 4 and [r.id for r in runs] == ["r1", "r0"]
    runs, total = await store.list_runs(RunFilter(offset=4))
    assert total == 4 and runs == []


async def test_list_runs_filters_on_each_field(store: Store) -> None:
    await _some_runs(store)

    async def ids(where: RunFilter) -> tuple[list[str], int]:
        runs, total = await store.list_runs(where)
        return [r.id for r in runs], total

    assert await ids(RunFilter(workflow="a")) == (["r1", "r0"], 2)
    assert await ids(RunFilter(status="completed")) == (["r3"], 1)
    assert await ids(RunFilter(version="v1")) == (["r3", "r2", "r0"], 3)
    assert await ids(RunFilter(owner="ann")) == (["r1"], 1)
    assert await ids(RunFilter(parent_run_id="r2")) == (["r3"], 1)
    assert await ids(RunFilter(workflow="b", status="running")) == (["r2"], 1)
    assert await ids(RunFilter(workflow="nope")) == ([], 0)


async def test_list_runs_by_part_of_the_id_by_time_and_top_level(store: Store) -> None:
    await new_run(store, "0190aaaa-0000-7000-8000-00000000beef", "a")
    await new_run(store, "Order-42", "a", owner="ann")
    await new_run(store, "kid", "a", parent_run_id="Order-42", parent_step_key="k")
    await new_run(store, "bobs-kid", "a", owner="bob", parent_run_id="Order-42")
    await new_run(store, "grandkid", "a", parent_run_id="kid", parent_step_key="k")
    runs, _ = await store.list_runs(RunFilter())
    created = {r.id: r.created_at.timestamp() for r in runs}

    async def ids(where: RunFilter) -> tuple[list[str], int]:
        found, total = await store.list_runs(where)
        summaries, count = await store.list_run_summaries(where)
        assert ([s.id for s in summaries], count) == ([r.id for r in found], total)
        return [r.id for r in found], total

    assert await ids(RunFilter(id_contains="BEEF")) == (
        ["0190aaaa-0000-7000-8000-00000000beef"],
        1,
    )
    assert await ids(RunFilter(id_contains="order-")) == (["Order-42"], 1)
    assert await ids(RunFilter(id_contains="%")) == ([], 0)  # no wildcards
    assert await ids(RunFilter(id_contains="kid", top_level=True)) == ([], 0)
    assert await ids(RunFilter(top_level=True)) == (
        ["Order-42", "0190aaaa-0000-7000-8000-00000000beef"],
        2,
    )
    cut = created["kid"]
    after, total = await ids(RunFilter(created_after=cut))
    assert set(after) == {"kid", "bobs-kid", "grandkid"} and total == 3
    before, total = await ids(RunFilter(created_before=cut))
    assert set(before) == {"Order-42", "0190aaaa-0000-7000-8000-00000000beef"} and total == 2
    assert await ids(RunFilter(created_after=cut + 3600)) == ([], 0)
    # a summary counts the children its reader may see
    summaries, _ = await store.list_run_summaries(RunFilter(top_level=True))
    assert {s.id: s.children for s in summaries} == {
        "Order-42": 2,
        "0190aaaa-0000-7000-8000-00000000beef": 0,
    }
    summaries, _ = await store.list_run_summaries(RunFilter(visible_to="ann", top_level=True))
    assert {s.id: s.children for s in summaries}["Order-42"] == 1


async def test_a_time_bound_taken_from_a_runs_created_at_holds_that_run(store: Store) -> None:
    """A run shows its time rounded to the microsecond; a bound read from it must put the
    run after it and not before it, whichever way the clock's float was rounded."""
    for n, at in enumerate((1733029919.1234567, 1733029919.1234564, 1733029919.0000005)):
        store.clock = VirtualClock(0)
        store.clock.now = lambda at=at: at  # type: ignore[method-assign]
        run, _ = await store.create_run(
            NewRun(f"r{n}", "wf", "workflow", "v1", "{}", status="running")
        )
        cut = run.created_at.timestamp()
        after, _ = await store.list_runs(RunFilter(created_after=cut))
        before, _ = await store.list_runs(RunFilter(created_before=cut))
        assert f"r{n}" in {r.id for r in after}, at
        assert f"r{n}" not in {r.id for r in before}, at


async def test_list_runs_visible_to_shows_own_and_unowned_runs(store: Store) -> None:
    await _some_runs(store)
    runs, total = await store.list_runs(RunFilter(visible_to="bob"))
    assert total == 3 and [r.id for r in runs] == ["r3", "r2", "r0"]
    runs, total = await store.list_runs(RunFilter(visible_to="bob", limit=1, offset=1))
    assert total == 3 and [r.id for r in runs] == ["r2"]


async def test_run_summaries_page_and_filter_like_list_runs(store: Store) -> None:
    await _some_runs(store)
    later = time.time() + 3600
    await new_run(
        store,
        "q1",
        "a",
        status="queued",
        queue="work",
        queue_key="k",
        priority=3,
        not_before=later,
        scheduled_at=later - 60,
    )
    for where in (
        RunFilter(),
        RunFilter(limit=2, offset=1),
        RunFilter(workflow="b"),
        RunFilter(status="completed"),
        RunFilter(visible_to="bob"),
        RunFilter(parent_run_id="r2"),
        RunFilter(status="queued"),
    ):
        runs, total = await store.list_runs(where)
        summaries, count = await store.list_run_summaries(where)
        assert count == total
        assert [s.id for s in summaries] == [r.id for r in runs]
        for summary, run in zip(summaries, runs, strict=True):
            fields = (
                "workflow",
                "kind",
                "status",
                "version",
                "owner",
                "parent_run_id",
                "queue",
                "key",
                "priority",
                "scheduled_at",
                "admitted_at",
                "start_at",
            )
            assert [getattr(summary, f) for f in fields] == [getattr(run, f) for f in fields]
            assert (summary.created_at, summary.updated_at) == (run.created_at, run.updated_at)
            assert not hasattr(summary, "input") and not hasattr(summary, "output")


async def test_get_children_lists_child_runs_oldest_first(store: Store) -> None:
    await new_run(store, "p")
    await new_run(store, "other")
    for key in ("a", "b"):
        child = NewRun(
            f"p:{key}",
            "child",
            "workflow",
            None,
            "{}",
            parent_run_id="p",
            parent_step_key=key,
            status="running",
        )
        await write(store, "p", CreateChildRun(child))
    children = await store.get_children("p")
    assert [(c.id, c.parent_run_id, c.status) for c in children] == [
        ("p:a", "p", "running"),
        ("p:b", "p", "running"),
    ]
    assert await store.get_children("other") == []


async def test_get_steps_orders_steps_by_seq(store: Store) -> None:
    await new_run(store, "r1")
    await write(
        store,
        "r1",
        PutStep(step("r1", "c", seq=2)),
        PutStep(step("r1", "a", seq=0)),
        PutStep(step("r1", "b", seq=1)),
    )
    steps = await store.get_steps("r1")
    assert [s.key for s in steps] == ["a", "b", "c"]
    assert steps[0].input == {"n": 1} and steps[0].invocation_id == "inv:r1:a"
    assert await store.get_steps("nope") == []


async def test_get_history_orders_attempts_by_start(store: Store) -> None:
    await new_run(store, "r1")
    late, early = step("r1", "late", seq=0), step("r1", "early", seq=1)
    early.attempts, early.status = 1, "running"
    await write(store, "r1", StartAttempt(early, 1, "running", "w1"))
    await asyncio.sleep(0.002)
    late.attempts, late.status = 1, "running"
    await write(store, "r1", StartAttempt(late, 1, "running", "w1"))
    late.status, late.output = "succeeded", '"ok"'
    await write(store, "r1", FinishAttempt(late, 1, "succeeded", '"ok"'))
    history = await store.get_history("r1")
    assert [(a.key, a.attempt, a.status) for a in history] == [
        ("early", 1, "running"),
        ("late", 1, "succeeded"),
    ]
    assert history[0].finished_at is None and history[1].finished_at is not None
    assert history[1].output == "ok"
    assert await store.get_history("nope") == []
