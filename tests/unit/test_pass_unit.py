"""A pass tested on its own: a snapshot in, batches of ops out, no database anywhere.

The runtime gets everything through its ``Host``; here the host is a list that keeps
every batch the pass commits.
"""

from __future__ import annotations

import asyncio
import dataclasses
import time
from typing import Any

import pytest

import plait
from plait import ids, serde
from plait.catalog import Catalog
from plait.clock import SYSTEM_CLOCK
from plait.errors import LeaseLostError
from plait.retry import RetryPolicy
from plait.runtime import steps
from plait.runtime.attempt import Outcome
from plait.runtime.cancels import StepCancels
from plait.runtime.control_flow import PassAborted
from plait.runtime.orchestrator import execute_pass
from plait.store.ops import (
    Batch,
    ClearTimer,
    EndRun,
    FinishAttempt,
    PutStep,
    SetTimer,
    StartAttempt,
)
from plait.store.rows import PassSnapshot, RunRow, StepRow


class ListHost:
    """A host whose commits land in a list."""

    def __init__(self, app: plait.App) -> None:
        self.catalog = Catalog(app, store=None)  # type: ignore[arg-type]
        self.batches: list[Batch] = []
        self.stopping = False
        self.limits = serde.Limits()
        self.clock = SYSTEM_CLOCK
        self.telemetry = None

    def cancelling(self, run_id: str) -> bool:
        return False

    def braked(self, workflow: str, queue: str | None) -> bool:
        return False

    async def commit(self, batch: Batch) -> bool:
        self.batches.append(batch)
        return False

    def ended_elsewhere(self, run_id: str) -> None:
        pass

    def giving_back(self, run_id: str) -> None:
        pass

    @property
    def streams(self) -> Any:
        return None  # no step of these passes writes to a stream

    def published(self, run_id: str) -> None:
        pass

    def sent_event(self, run_id: str) -> None:
        pass

    async def keep_lease(self, run_id: str, key: str | None = None) -> bool:
        return True

    async def read_run(self, run_id: str) -> Any:
        return None

    async def read_state(self, run_id: str) -> dict[str, Any]:
        return {}

    async def lineage_queues(self, run_id: str) -> frozenset[str]:
        return frozenset()

    @property
    def ops(self) -> list[Any]:
        return [op for b in self.batches for op in b.ops]


def snapshot(workflow: str, data: Any, steps: list[StepRow] = ()) -> PassSnapshot:
    now = time.time()
    run = RunRow(
        id="run-1",
        workflow=workflow,
        kind="workflow",
        version=None,
        status="running",
        input=serde.dumps(data),
        output=None,
        error=None,
        parent_run_id=None,
        parent_step_key=None,
        owner=None,
        start_node=None,
        created_at=now,
        updated_at=now,
        wake_at=None,
        wakeups=3,
        lease_owner="me",
        lease_until=now + 10,
    )
    return PassSnapshot(run, {s.key: s for s in steps}, [], {})


def recorded(key: str, seq: int, kind: str, function: str | None, **values: Any) -> StepRow:
    row = dict(
        run_id="run-1",
        key=key,
        seq=seq,
        name=key,
        kind=kind,
        function=function,
        status="succeeded",
        input=None,
        output=None,
        error=None,
        attempts=1,
        failures=0,
        retries=0,
        retry_delay=None,
        timeout=None,
        invocation_id=ids.invocation_id("run-1", key),
        child_run_id=None,
        branch=None,
        from_key=None,
        queued=False,
        wake_at=None,
        created_at=0.0,
        updated_at=0.0,
        # a finished step was seen by the workflow in first-reach order
        delivered=seq if values.get("status", "succeeded") in ("succeeded", "failed") else None,
    )
    row.update(values)
    return StepRow(**row)


def make_app(ran: list[Any]) -> plait.App:
    app = plait.App()

    @app.function(retries=0)
    def add(data: dict[str, int]) -> int:
        ran.append(data)
        return data["a"] + data["b"]

    @app.workflow
    async def nap(wf: plait.Workflow, data: dict[str, int]) -> dict[str, int]:
        total = await wf.do("add", add, data)
        await wf.sleep("nap", 60)
        return {"total": total}

    return app


async def test_a_first_pass_commits_the_attempt_before_the_body_and_pauses_on_the_timer() -> None:
    ran: list[Any] = []
    host = ListHost(make_app(ran))
    result = await execute_pass(host, snapshot("nap", {"a": 1, "b": 2}), "me")

    assert result.status == "running" and ran == [{"a": 1, "b": 2}]
    first, last = host.batches
    # the attempt's start is committed on its own, before the body ran
    assert [type(op) for op in first.ops] == [StartAttempt]
    assert first.fence == "me" and first.release_wakeups_seen is None
    # the result, the sleep and the release of the lease share the last commit
    assert last.release_wakeups_seen == 3
    finish, put, timer = last.ops
    assert isinstance(finish, FinishAttempt) and finish.status == "succeeded"
    assert finish.output == "3"
    assert isinstance(put, PutStep) and put.step.key == "nap" and put.step.status == "scheduled"
    assert isinstance(timer, SetTimer) and timer.purpose == "sleep"
    assert timer.wake_at >= time.time() + 59


async def test_a_replay_runs_no_recorded_step_and_completes_once_the_timer_fired() -> None:
    ran: list[Any] = []
    host = ListHost(make_app(ran))
    steps = [
        recorded("add", 0, "do", "add", output="3", input=serde.dumps({"a": 1, "b": 2})),
        recorded("nap", 1, "sleep", None, status="scheduled", wake_at=time.time() - 1),
    ]
    result = await execute_pass(host, snapshot("nap", {"a": 1, "b": 2}, steps), "me")

    assert ran == []
    assert result.status == "completed"
    put, clear, end = host.ops
    assert isinstance(put, PutStep) and put.step.status == "succeeded"
    assert isinstance(clear, ClearTimer) and clear.key == "nap"
    assert isinstance(end, EndRun) and serde.loads(end.output) == {"total": 3}


async def test_a_recorded_step_of_another_function_is_a_version_conflict() -> None:
    ran: list[Any] = []
    host = ListHost(make_app(ran))
    steps = [recorded("add", 0, "do", "multiply", output="3")]
    result = await execute_pass(host, snapshot("nap", {"a": 1, "b": 2}, steps), "me")

    assert ran == [] and result.status == "failed"
    (end,) = host.ops
    assert isinstance(end, EndRun)
    error = serde.loads(end.error)
    assert error["code"] == "VERSION_CONFLICT" and "'add'" in error["message"]


async def test_an_op_keeps_the_row_as_it_was_when_the_op_was_made() -> None:
    """A later change to a step must not alter what an earlier op writes."""
    ran: list[Any] = []
    host = ListHost(make_app(ran))
    await execute_pass(host, snapshot("nap", {"a": 1, "b": 2}), "me")
    (start,) = host.batches[0].ops
    assert start.step.status == "running" and start.step.output is None
    finish = host.batches[1].ops[0]
    assert finish.step.status == "succeeded" and finish.step.output == "3"


def test_a_retried_step_counts_its_earlier_failures_as_failures_not_interruptions() -> None:
    """Ten failed attempts, then a retry of the run, then one crash: the step must run
    again (one interruption), not give up as interrupted eleven times."""
    step = recorded("s", 0, "do", "f", status="failed", attempts=10, failures=10, retries=9)
    steps.reopen_failed(step, 1.0)
    ops, go = steps.begin(step, "w1", 2.0)
    assert go and step.attempts == 11
    # the process dies; the next pass finds the attempt still running
    ops, go = steps.begin(step, "w2", 3.0)
    assert go and step.attempts == 12 and step.status == "running"
    assert [type(op).__name__ for op in ops] == ["FinishAttempt", "StartAttempt"]
    # and the retry budget is fresh: nine more failures are retried, the tenth is not
    for _ in range(9):
        steps.end_attempt(step, Outcome(False, None, {"message": "x"}, True), 4.0)
        assert step.status == "scheduled"
        steps.begin(step, "w2", 5.0)
    steps.end_attempt(step, Outcome(False, None, {"message": "x"}, True), 6.0)
    assert step.status == "failed"


def test_exponential_retry_delays_are_jittered_and_a_fixed_delay_is_exact() -> None:
    """A thousand runs failing at once must not retry in lockstep; a delay the user fixed
    stays exactly what they chose."""
    exponential = RetryPolicy(retries=5)
    for failures, nominal in ((1, 1.0), (3, 4.0), (20, 300.0)):
        assert exponential.delay_after(failures, draw=0.0) == nominal * 0.75
        assert exponential.delay_after(failures, draw=1.0) == nominal * 1.25
        drawn = {exponential.delay_after(failures) for _ in range(200)}
        assert len(drawn) > 150 and all(nominal * 0.75 <= d <= nominal * 1.25 for d in drawn)
    fixed = RetryPolicy(retries=5, delay=2.0)
    assert {fixed.delay_after(n) for n in range(1, 6)} == {2.0}
    # the delay drawn is the step's timer: stored once, never drawn again on replay
    step = recorded("s", 0, "do", "f", status="running", attempts=1, retries=3)
    ops = steps.end_attempt(step, Outcome(False, None, {"message": "x"}, True), 100.0)
    (timer,) = [op for op in ops if isinstance(op, SetTimer)]
    assert step.wake_at == timer.wake_at and 100.75 <= timer.wake_at <= 101.25


class LostLeaseHost(ListHost):
    """A host whose lease check before a body says the lease is gone (a freeze outlived
    it), as a worker's does after a long stall."""

    async def keep_lease(self, run_id: str, key: str | None = None) -> bool:
        return False


async def test_a_lease_lost_before_a_body_stops_the_pass_and_not_the_workflow() -> None:
    """The workflow's code never sees a lost lease: not even a ``try/except Exception``
    around the step can catch it and fail (or go on with) the run, and the pass writes
    no outcome of its own, only the attempt's start it had committed."""
    ran: list[Any] = []
    app = plait.App()

    @app.function(retries=0)
    def add(data: dict[str, int]) -> int:
        ran.append(data)
        return data["a"] + data["b"]

    @app.workflow
    async def careful(wf: plait.Workflow, data: dict[str, int]) -> str:
        try:
            await wf.do("add", add, data)
        except Exception as exc:
            return f"caught {type(exc).__name__}"
        return "added"

    host = LostLeaseHost(app)
    with pytest.raises(PassAborted) as aborted:
        await execute_pass(host, snapshot("careful", {"a": 1, "b": 2}), "me")
    assert isinstance(aborted.value.cause, LeaseLostError)
    assert ran == []
    assert [type(op) for op in host.ops] == [StartAttempt]


class FencedHost(ListHost):
    """A host whose commits fail once ``lost`` is set: another worker took the run over
    while this one was stalled, and the store fences this pass's writes off."""

    def __init__(self, app: plait.App) -> None:
        super().__init__(app)
        self.lost = False

    async def commit(self, batch: Batch) -> bool:
        if self.lost:
            raise LeaseLostError(f"run {batch.run_id}: lease lost")
        return await super().commit(batch)


def _taken_over_beside_a_slow_body(app: plait.App, ran: list[str]) -> FencedHost:
    """Registers ``slow``, whose body waits until it is cancelled (``"slow cut"``), and
    ``quick``, during whose body another worker takes the run over: the host it returns
    fences every commit from then on."""
    host = FencedHost(app)

    @app.function
    async def slow() -> str:
        ran.append("slow")
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            ran.append("slow cut")
            raise
        return "slow"

    @app.function
    def quick() -> str:
        ran.append("quick")
        host.lost = True
        return "quick"

    return host


async def _stops_lost(host: FencedHost, start: PassSnapshot) -> None:
    """The pass ends, aborted for its lost lease, without waiting for ``slow``."""
    task = asyncio.ensure_future(execute_pass(host, start, "me"))
    done, _ = await asyncio.wait({task}, timeout=10)
    if not done:
        task.cancel()
    assert task in done, "the pass waited for the body of slow"
    aborted = task.exception()
    assert isinstance(aborted, PassAborted) and isinstance(aborted.cause, LeaseLostError)


async def test_a_pass_that_lost_its_lease_stops_its_bodies_and_does_not_wait_for_them() -> None:
    """A commit fails because the lease is gone while a step's body runs beside it. The
    pass stops at once and cancels that body: its outcome could never be written, the
    worker that has the run now runs the step again, and a body that waits for something
    would hold this worker's pass (and its slot) for ever."""
    ran: list[str] = []
    app = plait.App()
    host = _taken_over_beside_a_slow_body(app, ran)

    @app.workflow
    async def beside(wf: plait.Workflow) -> str:
        task = asyncio.create_task(wf.do("slow", "slow"))
        await wf.do("quick", "quick")
        return await task

    await _stops_lost(host, snapshot("beside", None))
    assert sorted(ran) == ["quick", "slow", "slow cut"]


async def test_a_graph_pass_that_lost_its_lease_stops_its_bodies_too() -> None:
    """The same for a graph: a node's end is fenced off while a sibling node's body
    waits; the pass stops and cancels the sibling, not held to its end."""
    ran: list[str] = []
    app = plait.App()
    host = _taken_over_beside_a_slow_body(app, ran)
    app.graph("pair", {"nodes": {"s": {"function": "slow"}, "q": {"function": "quick"}}})
    start = snapshot("pair", None)
    await _stops_lost(
        host, dataclasses.replace(start, run=dataclasses.replace(start.run, kind="graph"))
    )
    assert sorted(ran) == ["quick", "slow", "slow cut"]


class HeldLeaseHost(ListHost):
    """A host whose first lease check before a body waits until ``free`` is set: a lease
    renewal that goes to the store (a stall outlived the renewal's deadline)."""

    def __init__(self, app: plait.App) -> None:
        super().__init__(app)
        self.free = asyncio.Event()
        self.checks = 0

    async def keep_lease(self, run_id: str, key: str | None = None) -> bool:
        self.checks += 1
        if self.checks == 1:
            await self.free.wait()
        return True


async def test_a_step_cancelled_while_its_lease_is_checked_never_starts_its_body(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The workflow cancels a step while its attempt asks the store whether the lease is
    still held (after the attempt's start was written): the body must not start once the
    answer comes, and the pass must not wait for it."""
    ran: list[str] = []
    app = plait.App()

    @app.function
    async def slow() -> str:
        ran.append("slow")
        await asyncio.Event().wait()  # never ends unless cancelled
        return "slow"

    @app.function
    def quick() -> str:
        ran.append("quick")
        return "quick"

    @app.workflow
    async def cancels_it(wf: plait.Workflow) -> str:
        task = asyncio.create_task(wf.do("slow", slow))
        await wf.do("quick", quick)
        task.cancel()
        return "went on"

    host = HeldLeaseHost(app)
    sweep = StepCancels.sweep

    def swept(self: StepCancels, *args: Any) -> None:
        sweep(self, *args)
        host.free.set()  # the lease check answers once the cancel is known

    monkeypatch.setattr(StepCancels, "sweep", swept)
    result = await asyncio.wait_for(execute_pass(host, snapshot("cancels_it", None), "me"), 10)
    assert result.status == "completed"
    assert ran == ["quick"]
    (ended,) = [op for op in host.ops if isinstance(op, FinishAttempt) and op.step.key == "slow"]
    assert ended.status == "cancelled"
