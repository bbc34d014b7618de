"""Queues and schedules with real ``plait worker`` processes, on every store: the limits
hold across processes, a SIGKILLed worker's slot comes back within a lease, each schedule
tick starts exactly one run, and a catch-up starts only the ticks inside its window.

The step bodies (``queue_app``) write a ledger outside the database; it is the witness of
how many bodies ran at once. Every wait polls with a deadline.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import plait
from plait.schedules import run_id_for
from support import queue_app
from support.ledger import WorkerProcess, read_ledger
from support.polling import eventually

pytestmark = [pytest.mark.slow, pytest.mark.timeout(240)]

LEASE = 1.0


class Cluster:
    """Worker processes of ``queue_app`` on one database, and the ledger they write."""

    def __init__(self, database: str, tmp_path: Path) -> None:
        self.database = database
        self.tmp_path = tmp_path
        self.ledger = tmp_path / "ledger.jsonl"
        self.workers: list[WorkerProcess] = []

    def start(self, count: int = 1, concurrency: int = 64) -> list[WorkerProcess]:
        started = []
        for _ in range(count):
            n = len(self.workers)
            worker = WorkerProcess(
                self.database,
                self.ledger,
                self.tmp_path / f"worker-{n}.log",
                worker_id=f"qw{n}",
                lease=LEASE,
                drain=2.0,
                concurrency=concurrency,
                app="support.queue_app:app",
            )
            self.workers.append(worker)
            started.append(worker)
        return started

    async def ready(self, workers: list[WorkerProcess]) -> None:
        async def all_ready() -> bool:
            for w in workers:
                if not w.alive():
                    raise AssertionError(f"worker {w.worker_id} exited:\n{w.log_tail()}")
            return all(w.ready() for w in workers)

        await eventually(all_ready, timeout=30, what="workers ready")

    def lines(self, event: str | None = None) -> list[dict[str, Any]]:
        return [line for line in read_ledger(self.ledger) if event in (None, line["event"])]

    def stop(self) -> None:
        for w in self.workers:
            w.stop()


@pytest.fixture
def cluster(database: str, tmp_path: Path) -> Iterator[Cluster]:
    made = Cluster(database, tmp_path)
    try:
        yield made
    finally:
        made.stop()


async def wait_all(engine: plait.Engine, ids: list[str], timeout: float = 90) -> list[plait.Run]:
    return [await engine.wait(run_id, timeout=timeout) for run_id in ids]


def most_at_once(lines: list[dict[str, Any]], group: str | None = None) -> int:
    """The most bodies between their start and end lines at one moment (per ``group``
    value, if given). Bodies that never ended (killed) are left out."""
    spans: dict[tuple[str, int], list[float]] = {}
    for line in lines:
        spans.setdefault((line["run_id"], line["attempt"]), []).append(line["t"])
    groups: dict[Any, list[tuple[float, int]]] = {}
    keys = {(line["run_id"], line["attempt"]): line.get(group) for line in lines} if group else {}
    for span_key, times in spans.items():
        if len(times) != 2:
            continue
        edges = groups.setdefault(keys.get(span_key), [])
        edges += [(min(times), 1), (max(times), -1)]
    most = 0
    for edges in groups.values():
        level = 0
        for _t, step in sorted(edges, key=lambda e: (e[0], e[1])):
            level += step
            most = max(most, level)
    return most


async def test_three_workers_hold_concurrency_two(cluster: Cluster, database: str) -> None:
    # One slot each: no worker can take both of the queue's slots, so the second is always
    # left to another process (a worker with room would take it back as it ends each run,
    # and the others, polling, might never see it free)
    await cluster.ready(cluster.start(3, concurrency=1))
    async with plait.Engine(queue_app.app, database, workers=False) as engine:
        ids = [await engine.start("in_pair", {"n": n}) for n in range(60)]
        runs = await wait_all(engine, ids)
    assert all(r.status == "completed" for r in runs)
    starts = cluster.lines("start")
    assert len({line["run_id"] for line in starts}) == 60
    assert len({line["pid"] for line in starts}) >= 2  # the work was shared
    assert most_at_once(cluster.lines()) == 2  # and three processes never ran three


async def test_per_key_one_with_four_keys(cluster: Cluster, database: str) -> None:
    await cluster.ready(cluster.start(3))
    async with plait.Engine(queue_app.app, database, workers=False) as engine:
        ids = []
        for n in range(40):
            key = f"user-{n % 4}"
            ids.append(await engine.start("in_keyed", {"n": n, "key": key}, key=key))
        runs = await wait_all(engine, ids)
    assert all(r.status == "completed" for r in runs)
    assert most_at_once(cluster.lines(), group="key") == 1
    assert most_at_once(cluster.lines()) >= 2  # keys ran beside each other


async def test_rate_ten_per_second(cluster: Cluster, database: str) -> None:
    await cluster.ready(cluster.start(3))
    async with plait.Engine(queue_app.app, database, workers=False) as engine:
        ids = [await engine.start("in_rated", {"n": n}) for n in range(30)]
        runs = await wait_all(engine, ids)
    admitted = sorted(r.admitted_at.timestamp() for r in runs if r.admitted_at is not None)
    assert len(admitted) == 30
    for i, first in enumerate(admitted):
        in_window = [t for t in admitted[i:] if t < first + 1.0]
        assert len(in_window) <= 10, f"{len(in_window)} admissions within 1s of {first}"
    # and it did not crawl either: 30 at 10/s is about 2 seconds of admissions
    assert admitted[-1] - admitted[0] < 10


async def test_priorities_are_admitted_highest_first(cluster: Cluster, database: str) -> None:
    async with plait.Engine(queue_app.app, database, workers=False) as engine:
        # queued before any worker runs, so admission order is priority order alone
        blocker = await engine.start("in_single", {"n": "first", "seconds": 0.3}, priority=100)
        ids = [await engine.start("in_single", {"n": p}, priority=p) for p in (3, 7, -1, 7, 0, 12)]
        await cluster.ready(cluster.start(3))
        await wait_all(engine, [blocker, *ids])
    order = [line["n"] for line in sorted(cluster.lines("start"), key=lambda x: x["t"])]
    assert order == ["first", 12, 7, 7, 3, 0, -1]


async def test_a_killed_workers_slot_returns_within_a_lease(
    cluster: Cluster, database: str
) -> None:
    workers = cluster.start(3)
    await cluster.ready(workers)
    async with plait.Engine(queue_app.app, database, workers=False) as engine:
        stuck = await engine.start("in_single", {"n": "stuck", "hang_first": True})
        behind = await engine.start("in_single", {"n": "behind"})

        async def holder() -> int | None:
            lines = [x for x in cluster.lines("start") if x["run_id"] == stuck]
            return lines[0]["pid"] if lines else None

        pid = await eventually(holder, timeout=30, what="the stuck body running")
        victim = next(w for w in workers if w.pid == pid)
        await asyncio.sleep(0.2)
        assert (await engine.get_run(behind)).status == "queued"  # the slot is taken
        killed_at = victim.sigkill()
        runs = await wait_all(engine, [stuck, behind])
    assert [r.status for r in runs] == ["completed", "completed"]
    starts = {(x["run_id"], x["attempt"]): x for x in cluster.lines("start")}
    retaken = starts[(stuck, 2)]
    assert retaken["pid"] != pid
    # the slot came back: taken over within a lease (plus the workers' poll and a pass)
    assert retaken["t"] - killed_at < LEASE + 3.0
    assert starts[(behind, 1)]["t"] > retaken["t"]
    assert most_at_once(cluster.lines()) == 1


async def test_a_delayed_start_survives_a_restart_and_never_runs_early(
    cluster: Cluster, database: str
) -> None:
    (first,) = cluster.start(1)
    await cluster.ready([first])
    async with plait.Engine(queue_app.app, database, workers=False) as engine:
        started = time.time()
        run_id = await engine.start("plain", {"n": "later"}, delay="3s")
        await asyncio.sleep(0.5)
        first.sigkill()
        assert (await engine.get_run(run_id)).status == "queued"
        await cluster.ready(cluster.start(1))
        run = await engine.wait(run_id, timeout=60)
    assert run.status == "completed"
    (line,) = cluster.lines("start")
    assert line["t"] >= started + 3.0


async def test_dedup_across_processes_returns_the_live_run_then_frees_the_key(
    cluster: Cluster, database: str
) -> None:
    """Nine starts with one dedup key, from three engines at once (three connections),
    while three workers run the queue: one run, one body; once it has ended the key
    starts a new run."""
    await cluster.ready(cluster.start(3))
    async with contextlib.AsyncExitStack() as stack:
        engines = [
            await stack.enter_async_context(plait.Engine(queue_app.app, database, workers=False))
            for _ in range(3)
        ]
        data = {"n": "report", "seconds": 1.0}
        ids = await asyncio.gather(*(e.start("in_pair", data, dedup="report") for e in engines * 3))
        assert len(set(ids)) == 1
        (first,) = set(ids)

        async def body_started() -> bool:
            return any(x["run_id"] == first for x in cluster.lines("start"))

        await eventually(body_started, timeout=30, what="the deduplicated run's body")
        again = await engines[2].start("in_pair", data, dedup="report")
        assert again == first  # still live: the same run
        assert (await engines[0].wait(first, timeout=60)).status == "completed"
        fresh = await engines[1].start("in_pair", data, dedup="report")
        assert fresh != first  # ended: the key is free again
        assert (await engines[0].wait(fresh, timeout=60)).status == "completed"
    bodies = [x["run_id"] for x in cluster.lines("start")]
    assert sorted(bodies) == sorted([first, fresh])


# -- schedules ------------------------------------------------------------------------------


async def scheduled_runs(engine: plait.Engine, name: str) -> list[plait.Run]:
    runs = await engine.list_runs(limit=10_000)
    return sorted(
        (r for r in runs if r.id.startswith(f"schedule:{name}:")),
        key=lambda r: r.scheduled_at.timestamp() if r.scheduled_at else 0.0,
    )


async def test_a_schedule_every_second_with_three_workers_one_killed(
    cluster: Cluster, database: str
) -> None:
    workers = cluster.start(3)
    await cluster.ready(workers)
    async with plait.Engine(queue_app.app, database, workers=False) as engine:
        await engine.create_schedule(
            "beat",
            workflow="plain",
            every="1s",
            input={"n": "beat"},
            catchup="30s",
            overlap="allow",
        )
        await eventually(lambda: _count_at_least(engine, "beat", 5), timeout=30, what="five ticks")
        workers[1].sigkill()
        await eventually(
            lambda: _count_at_least(engine, "beat", 11), timeout=30, what="eleven ticks"
        )
        await engine.pause_schedule("beat")
        paused_at = time.time()
        runs = await scheduled_runs(engine, "beat")
        await wait_all(engine, [r.id for r in runs])
        await asyncio.sleep(2.0)  # a paused schedule starts nothing, however long it waits
        later = [
            r
            for r in await scheduled_runs(engine, "beat")
            if r.scheduled_at and r.scheduled_at.timestamp() > paused_at + 0.01
        ]
        final = await scheduled_runs(engine, "beat")
    assert later == []
    ticks = [r.scheduled_at.timestamp() for r in final if r.scheduled_at]
    # exactly one run per tick, none missing: consecutive whole seconds
    assert ticks == [ticks[0] + n for n in range(len(ticks))]
    assert [r.id for r in final] == [run_id_for("beat", t) for t in ticks]
    assert all(r.status == "completed" for r in final)
    # each on time, the kill included: the live workers fire every tick (the catch-up
    # window of 30 s would hide ticks fired late)
    late = [r.created_at.timestamp() - r.scheduled_at.timestamp() for r in final if r.scheduled_at]
    assert max(late) < 3.0, late
    bodies: dict[str, set[int]] = {}
    for line in cluster.lines("end"):
        bodies.setdefault(line["run_id"], set()).add(line["attempt"])
    assert set(bodies) == {r.id for r in final}


async def _count_at_least(engine: plait.Engine, name: str, n: int) -> bool:
    return len(await scheduled_runs(engine, name)) >= n


async def test_catchup_after_a_stop_starts_ticks_in_the_window_only(
    cluster: Cluster, database: str
) -> None:
    (first,) = cluster.start(1)
    await cluster.ready([first])
    async with plait.Engine(queue_app.app, database, workers=False) as engine:
        await engine.create_schedule(
            "catch", workflow="plain", every="1s", catchup="3s", overlap="allow"
        )
        await eventually(lambda: _count_at_least(engine, "catch", 2), timeout=30, what="two ticks")
        stopped_at = first.sigkill()
        await asyncio.sleep(6.0)  # the downtime being tested: nobody fires for 6 seconds
        (second,) = cluster.start(1)
        await cluster.ready([second])

        async def caught_up() -> list[plait.Run]:
            return [
                r
                for r in await scheduled_runs(engine, "catch")
                if r.created_at.timestamp() > stopped_at
            ]

        after = await eventually(caught_up, timeout=30, what="the catch-up")
        await engine.pause_schedule("catch")
        every_run = await scheduled_runs(engine, "catch")
    first_look = min(r.created_at.timestamp() for r in after)
    ticks = sorted(r.scheduled_at.timestamp() for r in every_run if r.scheduled_at)
    missed = [t for t in ticks if stopped_at < t < first_look - 3.0 - 0.5]
    assert missed == []  # ticks older than the window were skipped...
    caught = [t for t in ticks if first_look - 3.0 - 0.5 <= t < first_look - 0.5]
    assert len(caught) >= 2  # ...and those inside it started, oldest first
    skipped = [t for t in range(int(ticks[0]), int(first_look)) if float(t) not in ticks]
    assert skipped, "a 6-second stop with a 3-second window must skip some ticks"


async def test_workers_whose_app_does_not_declare_the_queue_enforce_the_stored_limit(
    cluster: Cluster, database: str
) -> None:
    # queue_app declares "single" with concurrency=1 and stores it as its engine opens;
    # the three workers run an app that names the queue but declares no limits
    async with plait.Engine(queue_app.app, database, workers=False) as engine:
        workers = [
            WorkerProcess(
                database,
                cluster.ledger,
                cluster.tmp_path / f"undeclared-{n}.log",
                worker_id=f"uw{n}",
                lease=LEASE,
                drain=2.0,
                app="support.undeclared_app:app",
            )
            for n in range(3)
        ]
        cluster.workers += workers
        await cluster.ready(workers)
        ids = [await engine.start("in_single", {"n": n}) for n in range(30)]
        runs = await wait_all(engine, ids)
    assert all(r.status == "completed" for r in runs)
    assert len({line["run_id"] for line in cluster.lines("start")}) == 30
    assert most_at_once(cluster.lines()) == 1
