"""The store's part in operating runs, on every store: published values, the guard and
decision ops, decisions from outside a pass, gates across runs, forks and prune batches."""

from __future__ import annotations

import json
import time

import pytest

from plait.errors import GateClosedError, RunIdTakenError, RunNotFoundError, RunStateError
from plait.store import Store
from plait.store.ops import (
    CreateChildRun,
    EndRun,
    FinishAttempt,
    GuardStep,
    PutStep,
    RecordVersion,
    SetValue,
    StartAttempt,
    TakeDecision,
)
from plait.store.rows import DecisionRow, NewRun

from .rows import CUT, new_run, step, wakeups, write

GATE = "__approval:ok"


def gate_step(run_id: str, deadline: float | None = None) -> object:
    info = {"name": "ok", "schema": None, "approvers": "any", "expires_at": deadline}
    return step(
        run_id,
        GATE,
        kind="approval",
        function=None,
        input=json.dumps(info),
        attempts=1,
        wake_at=deadline,
    )


def decision(outcome: str, at: float, key: str | None = None, **more: object) -> DecisionRow:
    payload = json.dumps({"data": {"yes": True}, "decided_by": "bob", "decided_at": at})
    return DecisionRow("ok", payload, "bob", at, outcome, key=key, **more)  # type: ignore[arg-type]


async def test_set_value_publishes_and_the_last_write_wins(store: Store) -> None:
    await new_run(store, "r1")
    await write(store, "r1", SetValue("p", "0.5"), SetValue("q", '"x"'))
    await write(store, "r1", SetValue("p", "1.0"))
    assert {k: json.loads(v) for k, v in (await store.get_values("r1")).items()} == {
        "p": 1.0,
        "q": "x",
    }


async def test_guard_step_refuses_the_whole_batch_when_the_status_moved(store: Store) -> None:
    await new_run(store, "r1")
    gate = gate_step("r1")
    await write(store, "r1", StartAttempt(gate, 1, "running"))  # type: ignore[arg-type]
    await write(store, "r1", GuardStep(GATE, "pending"), SetValue("ok", "1"))
    with pytest.raises(GateClosedError):
        await write(store, "r1", GuardStep(GATE, "succeeded"), SetValue("nope", "1"))
    assert set(await store.get_values("r1")) == {"ok"}


async def test_submit_decision_outcomes(store: Store) -> None:
    await new_run(store, "r1")
    now = time.time()
    gate = gate_step("r1", deadline=now + 60)
    await write(store, "r1", StartAttempt(gate, 1, "running"))  # type: ignore[arg-type]
    before = await wakeups(store, "r1")

    assert await store.submit_decision("r1", decision("held", now), ()) == "held"
    assert (
        await store.submit_decision(
            "r1", decision("refused", now, GATE, reason='{"code": "X"}'), ()
        )
        == "refused"
    )
    late = decision("accepted", now + 61, GATE, if_closed='{"c": 1}', if_expired='{"e": 1}')
    assert await store.submit_decision("r1", late, ()) == "expired"
    closed = gate.copy()  # type: ignore[attr-defined]
    closed.status, closed.output = "succeeded", '{"data": 1}'
    ops = [GuardStep(GATE, "pending"), FinishAttempt(closed, 1, "succeeded", closed.output)]
    on_time = decision("accepted", now, GATE, if_closed='{"c": 1}', if_expired='{"e": 1}')
    assert await store.submit_decision("r1", on_time, ops) == "accepted"
    assert await store.submit_decision("r1", on_time, ops) == "closed"
    assert await wakeups(store, "r1") == before + 2  # the held and the accepted one

    found = await store.get_decisions("r1")
    assert [(d["outcome"], json.loads(d["reason"]) if d["reason"] else None) for d in found] == [
        ("held", None),
        ("refused", {"code": "X"}),
        ("refused", {"e": 1}),
        ("accepted", None),
        ("refused", {"c": 1}),
    ]
    snapshot = await store.load_pass("r1")
    assert snapshot is not None
    assert snapshot.steps[GATE].status == "succeeded"
    assert [e.name for e in snapshot.events] == [GATE]  # only the held one reaches a pass

    held = snapshot.events[0].id
    await write(store, "r1", TakeDecision(GATE, "refused", '{"why": 1}', held))
    with pytest.raises(GateClosedError):
        await write(store, "r1", TakeDecision(GATE, "accepted", None, held))
    await write(store, "r1", TakeDecision(GATE, "refused", '{"schema": 1}'))
    assert [d["outcome"] for d in await store.get_decisions("r1")] == [
        "refused",
        "refused",
        "refused",
        "refused",
        "refused",
    ]

    with pytest.raises(RunNotFoundError):
        await store.submit_decision("nope", decision("held", now), ())
    await write(store, "r1", EndRun("completed", "1"))
    with pytest.raises(RunStateError):
        await store.submit_decision("r1", decision("held", now), ())


async def test_list_gates_reads_gates_of_live_runs(store: Store) -> None:
    await new_run(store, "r1", owner="alice")
    await new_run(store, "r2")
    await write(store, "r1", StartAttempt(gate_step("r1"), 1, "running"))  # type: ignore[arg-type]
    await write(store, "r2", StartAttempt(gate_step("r2"), 1, "running"))  # type: ignore[arg-type]
    await write(store, "r2", EndRun("cancelled", cut=CUT))
    gates = await store.list_gates("pending", 10)
    assert [(g.step.run_id, g.owner, g.workflow, g.run_status) for g in gates] == [
        ("r1", "alice", "wf", "running")
    ]
    assert await store.list_gates("succeeded", 10) == []


#: the statuses the tests below let a fork's source be in (the engine decides which)
ANY_STATUS = ("queued", "running", "suspended", "completed", "failed", "cancelled")
ENDED = ("completed", "failed", "cancelled")


async def test_fork_run_creates_the_run_with_its_kept_steps(store: Store) -> None:
    await new_run(store, "src")
    kept = step("copy", "a", status="succeeded", output="1")
    run, moved = await store.fork_run(
        NewRun("copy", "wf", "workflow", None, "{}", status="running"),
        "src",
        [PutStep(kept)],
        ANY_STATUS,
    )
    assert run.forked_from == "src" and run.status == "running" and moved == []
    assert [s.key for s in await store.get_steps("copy")] == ["a"]
    assert (await store.get_run("src")).status == "running"  # type: ignore[union-attr]
    with pytest.raises(RunIdTakenError):
        await store.fork_run(
            NewRun("copy", "wf", "workflow", None, "{}", status="running"), "src", [], ANY_STATUS
        )


async def test_fork_run_of_a_queue_waits_with_its_values(store: Store) -> None:
    await new_run(store, "src")
    kept = step("q-copy", "__value:v", kind="set_value", status="succeeded", output='"x"')
    new = NewRun(
        "q-copy",
        "wf",
        "workflow",
        None,
        "{}",
        status="queued",
        queue="work",
        queue_key="k1",
        priority=4,
    )
    run, _ = await store.fork_run(new, "src", [PutStep(kept), SetValue("v", '"x"')], ANY_STATUS)
    assert (run.status, run.queue, run.key, run.priority) == ("queued", "work", "k1", 4)
    assert run.forked_from == "src" and run.admitted_at is None
    assert await store.get_values("q-copy") == {"v": '"x"'}
    (depth,) = [d for d in await store.queue_depths() if d.queue == "work"]
    assert (depth.queued, depth.active) == (1, 0)


async def test_fork_run_refuses_a_source_in_another_status_and_writes_nothing(
    store: Store,
) -> None:
    await new_run(store, "src", status="suspended")
    kept = step("copy", "a", status="succeeded", output="1")
    new = NewRun("copy", "wf", "workflow", None, "{}", status="running")
    with pytest.raises(RunStateError, match="cannot fork run 'src': it is suspended"):
        await store.fork_run(new, "src", [PutStep(kept)], ENDED)
    with pytest.raises(RunNotFoundError):
        await store.fork_run(new, "nope", [PutStep(kept)], ANY_STATUS)
    assert await store.get_run("copy") is None
    assert await store.get_steps("copy") == []


async def test_fork_run_replacing_cancels_a_live_source_in_the_same_transaction(
    store: Store,
) -> None:
    await new_run(store, "src")
    await new_run(store, "kid", parent_run_id="src", parent_step_key="k")
    await write(store, "src", StartAttempt(step("src", "slow", attempts=1), 1, "running"))
    error = json.dumps({"message": "replaced by fork copy", "code": "WORKFLOW_CANCELLED"})
    end = EndRun("cancelled", error=error, parent=None, cut=CUT)
    new = NewRun("copy", "wf", "workflow", None, "{}", status="running")
    run, moved = await store.fork_run(new, "src", [], ANY_STATUS, end)
    assert run.id == "copy" and sorted(moved) == ["kid", "src"]
    source = await store.get_run("src")
    assert source is not None and source.status == "cancelled"
    assert source.error == {"message": "replaced by fork copy", "code": "WORKFLOW_CANCELLED"}
    assert (await store.get_run("kid")).status == "cancelled"  # type: ignore[union-attr]
    (slow,) = await store.get_steps("src")
    assert slow.status != "running"  # cut short, as a cancel cuts it
    # an ended source is not moved again
    _, again = await store.fork_run(
        NewRun("copy-2", "wf", "workflow", None, "{}", status="running"), "src", [], ANY_STATUS, end
    )
    assert again == []


async def test_fork_run_replacing_is_undone_with_a_fork_that_cannot_be_made(store: Store) -> None:
    await new_run(store, "src", status="suspended")
    await new_run(store, "taken")
    end = EndRun("cancelled", error='{"message": "x"}', parent=None, cut=CUT)
    with pytest.raises(RunIdTakenError):
        await store.fork_run(
            NewRun("taken", "wf", "workflow", None, "{}", status="running"),
            "src",
            [],
            ANY_STATUS,
            end,
        )
    assert (await store.get_run("src")).status == "suspended"  # type: ignore[union-attr]


async def test_record_version_fills_in_a_run_without_one_only(store: Store) -> None:
    await new_run(store, "none")
    await new_run(store, "some", version="v1")
    await write(store, "none", RecordVersion("v2"))
    await write(store, "some", RecordVersion("v2"))
    assert (await store.get_run("none")).version == "v2"  # type: ignore[union-attr]
    assert (await store.get_run("some")).version == "v1"  # type: ignore[union-attr]


async def test_prune_batch_walks_ended_trees_with_a_cursor(store: Store) -> None:
    for n in range(3):
        await new_run(store, f"old{n}")
        await write(store, f"old{n}", SetValue("v", "1"), EndRun("completed", "1"))
    await new_run(store, "parent")
    child = NewRun(
        "kid",
        "wf",
        "workflow",
        None,
        "{}",
        parent_run_id="parent",
        parent_step_key="c",
        status="running",
    )
    await write(store, "parent", CreateChildRun(child), EndRun("failed", None, '{"message": "x"}'))
    await new_run(store, "live")
    cutoff = time.time() + 1
    first = await store.prune_batch(("completed",), cutoff, None, 2)
    assert first.deleted == 2 and first.cursor is not None
    second = await store.prune_batch(("completed",), cutoff, first.cursor, 2)
    assert second.deleted == 1
    assert (await store.prune_batch(("completed",), cutoff, second.cursor, 2)).cursor is None
    # a failed parent whose child still runs is kept, then pruned with it once it ended
    kept = await store.prune_batch(("failed",), cutoff, None, 10)
    assert kept.deleted == 0 and await store.get_run("kid") is not None
    await write(store, "kid", EndRun("completed", "1"))
    assert (await store.prune_batch(("failed",), time.time() + 1, None, 10)).deleted == 2
    for gone in ("old0", "old1", "old2", "parent", "kid"):
        assert await store.get_run(gone) is None
        assert await store.get_values(gone) == {}
    assert (await store.get_run("live")) is not None
