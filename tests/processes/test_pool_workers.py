"""Brakes, worker scope and the worker registry with real ``plait worker`` processes, on
every store: pausing a workflow three workers run stops every step body from starting
within a lease of the pause, and the resume finishes every run with no step run twice;
two apps sharing a database each work only their own runs; a ``--queues`` worker never
claims a run of another queue.

The step bodies (``pool_app``) write a ledger outside the database: it is the witness of
which process started which body, and when. Every wait polls with a deadline.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import plait
from support import pool_app
from support.ledger import WorkerProcess, read_ledger
from support.polling import eventually

pytestmark = [pytest.mark.slow, pytest.mark.timeout(240)]

LEASE = 1.0
STEPS = 40


class Pool:
    """Worker processes on one database, and the ledger their bodies write."""

    def __init__(self, database: str, tmp_path: Path) -> None:
        self.database = database
        self.tmp_path = tmp_path
        self.ledger = tmp_path / "ledger.jsonl"
        self.workers: list[WorkerProcess] = []

    def start(self, app: str, worker_id: str, *extra: str) -> WorkerProcess:
        worker = WorkerProcess(
            self.database,
            self.ledger,
            self.tmp_path / f"{worker_id}.log",
            worker_id=worker_id,
            lease=LEASE,
            drain=2.0,
            app=app,
            extra=extra,
        )
        self.workers.append(worker)
        return worker

    async def ready(self) -> None:
        async def all_ready() -> bool:
            for w in self.workers:
                if not w.alive():
                    raise AssertionError(f"worker {w.worker_id} exited:\n{w.log_tail()}")
            return all(w.ready() for w in self.workers)

        await eventually(all_ready, timeout=30, what="workers ready")

    def starts(self) -> list[dict[str, Any]]:
        return [line for line in read_ledger(self.ledger) if line["event"] == "start"]

    def stop(self) -> None:
        for w in self.workers:
            w.stop()


@pytest.fixture
def pool(database: str, tmp_path: Path) -> Iterator[Pool]:
    made = Pool(database, tmp_path)
    try:
        yield made
    finally:
        made.stop()


async def test_pausing_a_workflow_three_workers_run(pool: Pool, database: str) -> None:
    for n in range(3):
        # two runs at once each: the six runs are shared, whichever worker claims first
        pool.start("support.pool_app:app_a", f"brake{n}", "--concurrency", "2")
    await pool.ready()
    async with plait.Engine(pool_app.app_a, database, workers=False) as engine:
        ids = [await engine.start("steps", {"n": STEPS}) for _ in range(6)]
        await eventually(lambda: len(pool.starts()) >= 30, timeout=60, what="steps running")
        await engine.pause_workflow("steps")
        paused_at = time.time()  # the pause has committed

        async def all_paused() -> bool:
            runs = [await engine.get_run(run_id) for run_id in ids]
            return all(r.status == "paused" for r in runs)

        await eventually(all_paused, timeout=30, what="every run paused")
        at_pause = pool.starts()
        late = [s for s in at_pause if s["t"] > paused_at + LEASE]
        last = max(s["t"] for s in at_pause) - paused_at
        print(f"the last body started {last:+.3f}s after the pause committed (lease {LEASE}s)")
        assert late == [], f"{len(late)} bodies started more than a lease after the pause"
        assert len(at_pause) < 6 * STEPS  # the brake stopped them half way
        for run_id in ids:
            why = await engine.waiting_on(run_id)
            assert why is not None and why.kind == "paused_workflow"

        await engine.resume_workflow("steps")
        runs = [await engine.wait(run_id, timeout=90) for run_id in ids]
    assert [r.status for r in runs] == ["completed"] * 6
    assert all(r.output == sum(range(STEPS)) for r in runs)
    ran = Counter((s["run_id"], s["step"]) for s in pool.starts())
    assert len(ran) == 6 * STEPS
    assert set(ran.values()) == {1}, "a step body ran twice"
    assert len({s["pid"] for s in pool.starts()}) >= 2  # the workers shared the runs


async def test_two_apps_on_one_database_work_their_own_runs(pool: Pool, database: str) -> None:
    worker_a = pool.start("support.pool_app:app_a", "app-a")
    worker_b = pool.start("support.pool_app:app_b", "app-b")
    await pool.ready()
    async with (
        plait.Engine(pool_app.app_a, database, workers=False) as engine_a,
        plait.Engine(pool_app.app_b, database, workers=False) as engine_b,
    ):
        ids_a = [await engine_a.start("flow_a", {"i": i}) for i in range(10)]
        ids_b = [await engine_b.start("flow_b", {"i": i}) for i in range(10)]
        runs = [await engine_a.wait(run_id, timeout=60) for run_id in ids_a + ids_b]
        assert [r.status for r in runs] == ["completed"] * 20  # none suspended
        workers = {w.app: w for w in await engine_a.list_workers() if w.live}
        assert workers["pool-a"].workflows == ["flow_a", "flow_gpu", "steps"]
        assert workers["pool-b"].workflows == ["flow_b"]
        history = await engine_a.get_history(ids_b[0])
        assert history[0].worker == workers["pool-b"].id
    pids = {s["workflow"]: set() for s in pool.starts()}
    for s in pool.starts():
        pids[s["workflow"]].add(s["pid"])
    assert pids == {"flow_a": {worker_a.pid}, "flow_b": {worker_b.pid}}


async def test_a_queues_worker_claims_only_its_queue(pool: Pool, database: str) -> None:
    gpu = pool.start("support.pool_app:app_a", "gpu", "--queues", "gpu")
    plain = pool.start("support.pool_app:app_a", "plain", "--queues", "default")
    await pool.ready()
    async with plait.Engine(pool_app.app_a, database, workers=False) as engine:
        on_gpu = [await engine.start("flow_gpu", {"i": i}) for i in range(10)]
        on_default = [await engine.start("flow_a", {"i": i}) for i in range(10)]
        runs = [await engine.wait(run_id, timeout=60) for run_id in on_gpu + on_default]
        assert [r.status for r in runs] == ["completed"] * 20
    by_run = {s["run_id"]: s["pid"] for s in pool.starts()}
    assert {by_run[r] for r in on_gpu} == {gpu.pid}
    assert {by_run[r] for r in on_default} == {plain.pid}
