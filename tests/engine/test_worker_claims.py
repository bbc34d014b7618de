"""How a worker looks for due runs and queued steps: a busy one claims without asking first."""

from __future__ import annotations

import asyncio
from typing import Any

import plait
from support.polling import eventually


async def test_a_claim_that_filled_every_slot_is_followed_by_a_claim_not_a_read(
    database: str,
) -> None:
    """A read of when work is due spares a claim's write when nothing is due, but a
    worker kept busy would pay it before every claim. After a claim that took as many runs
    as it had free slots, the next claim goes at once; after one that came back short,
    the read comes first again. Every run still completes."""
    app = plait.App()

    @app.workflow
    async def quick(wf: plait.Workflow, i: int) -> int:
        return await wf.do("s", lambda: i)

    async with plait.Engine(app, database, workers=False) as starter:
        run_ids = [await starter.start("quick", i) for i in range(12)]

    engine = plait.Engine(app, database, concurrency=2, poll_interval=0.2)
    store: Any = engine.store
    log: list[tuple[str, int, int]] = []
    next_due, claim = store.next_due, store.claim_due_passes

    async def reading(functions: Any = None, *scope: Any) -> Any:
        if functions is None:
            log.append(("read", 0, 0))
        return await next_due(functions, *scope)

    async def claiming(owner: str, lease: float, limit: int, *scope: Any) -> list[Any]:
        got = await claim(owner, lease, limit, *scope)
        log.append(("claim", limit, len(got)))
        return got

    store.next_due, store.claim_due_passes = reading, claiming
    async with engine:
        runs = [await engine.wait(r, timeout=30) for r in run_ids]
    assert [r.status for r in runs] == ["completed"] * 12
    assert [r.output for r in runs] == list(range(12))

    took = _full_claims_followed_by_claims(log, 12)
    # until the last run was claimed (later reads are the idle worker's polls): one read to
    # find the first runs, and at most one after each claim that came back short
    busy = log[: took[-1] + 1]
    short = sum(1 for kind, asked, got in busy if kind == "claim" and got < asked)
    assert sum(1 for kind, _, _ in busy if kind == "read") <= short + 1, log


async def test_a_step_job_claim_that_filled_every_slot_is_followed_by_a_claim(
    database: str,
) -> None:
    """The same rule for queued steps: a worker working a fan-out of queued steps claims
    again at once after a claim that filled its free slots, and reads when work is due
    only after a claim that came back short."""
    app = plait.App()

    @app.function(queued=True)
    async def double(item: dict[str, int]) -> int:
        return item["n"] * 2

    @app.workflow
    async def fan(wf: plait.Workflow) -> list[int]:
        return list(await asyncio.gather(*(wf.do(f"s{n}", "double", {"n": n}) for n in range(12))))

    async with plait.Engine(app, database, workers=False) as starter:
        run_id = await starter.start("fan")

    engine = plait.Engine(app, database, concurrency=2, poll_interval=0.2)
    store: Any = engine.store
    log: list[tuple[str, int, int]] = []
    next_due, claim = store.next_due, store.claim_step_jobs

    async def reading(functions: Any = None, *scope: Any) -> Any:
        if functions is not None:
            log.append(("read", 0, 0))
        return await next_due(functions, *scope)

    async def claiming(owner: str, lease: float, limit: int, *functions: Any) -> list[Any]:
        got = await claim(owner, lease, limit, *functions)
        log.append(("claim", limit, len(got)))
        return got

    store.next_due, store.claim_step_jobs = reading, claiming
    async with engine:
        run = await engine.wait(run_id, timeout=30)
    assert run.status == "completed"
    assert run.output == [n * 2 for n in range(12)]

    took = _full_claims_followed_by_claims(log, 12)
    # the first jobs appear only once the run's pass has made them, so reads before the
    # first claim are the idle worker's; from then on, one read at most per short claim
    busy = log[took[0] : took[-1] + 1]
    short = sum(1 for kind, asked, got in busy if kind == "claim" and got < asked)
    assert sum(1 for kind, _, _ in busy if kind == "read") <= short, log


def _full_claims_followed_by_claims(log: list[tuple[str, int, int]], count: int) -> list[int]:
    """Check a worker's log of reads and claims (kind, asked, got): ``count`` taken in all,
    and every claim that filled its free slots followed by a claim, not a read. Returns
    where the claims that took something are in the log."""
    took = [i for i, entry in enumerate(log) if entry[0] == "claim" and entry[2]]
    assert sum(log[i][2] for i in took) == count
    full = [i for i, entry in enumerate(log) if entry[0] == "claim" and entry[1] == entry[2]]
    assert full, log
    for i in full:
        if i + 1 < len(log):
            assert log[i + 1][0] == "claim", f"a read came after the full claim at {i}: {log}"
    return took


async def test_a_run_that_ends_with_nothing_for_the_loops_costs_no_read_of_the_queue(
    database: str,
) -> None:
    """A run ended with no parent to wake, no timer and no queued step leaves the worker's
    loops nothing new: they are not woken to read the queue after it (a process running
    runs back to back would pay that read for every run). A run that pauses on a timer,
    and a child whose parent waits, still wake them: both runs end well before the loops'
    own poll would have found them."""
    app = plait.App()

    @app.workflow
    async def alone(wf: plait.Workflow, i: int) -> int:
        return await wf.do("s", lambda: i)

    @app.workflow
    async def napper(wf: plait.Workflow) -> str:
        await wf.sleep("nap", 0.01)
        return "rested"

    @app.workflow
    async def parent(wf: plait.Workflow) -> int:
        return await wf.do("child", "alone", 7)

    engine = plait.Engine(app, database, poll_interval=30)
    store: Any = engine.store
    reads: list[int] = []
    next_due = store.next_due

    async def reading(functions: Any = None, *scope: Any) -> Any:
        reads.append(1)
        return await next_due(functions, *scope)

    store.next_due = reading
    async with engine:
        await engine.run("alone", 0, inline=True, timeout=10)  # the loops settle
        before = len(reads)
        for i in range(10):
            assert await engine.run("alone", i, inline=True, timeout=10) == i
        assert len(reads) - before <= 1, reads
        # the loops' poll is 30 s away: these end only if the passes wake them
        assert await engine.run("napper", inline=True, timeout=10) == "rested"
        assert await engine.run("parent", inline=True, timeout=10) == 7


async def test_a_full_worker_claims_the_next_run_when_one_ends(database: str) -> None:
    """A worker with every slot taken claims again when a run ends, woken by that run's
    pass: with its loops' own timeouts taken away (they would hide a missing wake-up), a
    queue of runs longer than its slots still drains."""
    app = plait.App()

    @app.workflow
    async def quick(wf: plait.Workflow, i: int) -> int:
        return await wf.do("s", lambda: i)

    async with plait.Engine(app, database, workers=False) as starter:
        run_ids = [await starter.start("quick", i) for i in range(6)]

    async def only_when_woken(wake: asyncio.Event) -> None:
        await wake.wait()

    async with plait.Engine(app, database, concurrency=2, poll_interval=30) as engine:
        worker: Any = engine.worker
        worker._idle = only_when_woken
        runs = [await engine.wait(r, timeout=10) for r in run_ids]
    assert [r.output for r in runs] == list(range(6))


async def test_a_worker_told_of_new_work_claims_without_reading_first(database: str) -> None:
    """A start in another engine tells the worker (NOTIFY on PostgreSQL, a datagram on
    SQLite). The worker's read of what is due would only say what it was just told, and
    costs a round trip before the run's first step: told, it claims at once."""
    app = plait.App()

    @app.workflow
    async def quick(wf: plait.Workflow, i: int) -> int:
        return await wf.do("s", lambda: i)

    engine = plait.Engine(app, database, poll_interval=30)
    store: Any = engine.store
    log: list[tuple[str, int]] = []
    next_due, claim = store.next_due, store.claim_due_passes

    async def reading(functions: Any = None, *scope: Any) -> Any:
        if functions is None:
            log.append(("read", 0))
        return await next_due(functions, *scope)

    async def claiming(owner: str, lease: float, limit: int, *scope: Any) -> list[Any]:
        got = await claim(owner, lease, limit, *scope)
        log.append(("claim", len(got)))
        return got

    store.next_due, store.claim_due_passes = reading, claiming
    async with engine, plait.Engine(app, database, workers=False) as starter:
        assert await engine.run("quick", 0, inline=True, timeout=10) == 0
        for i in range(1, 4):
            await _quiet(log)  # after a claim that came back short, the loop reads
            mark = len(log)
            run_id = await starter.start("quick", i)
            assert (await starter.wait(run_id, timeout=10)).output == i
            told = log[mark:]
            took = next(n for n, (kind, got) in enumerate(told) if kind == "claim" and got)
            assert ("read", 0) not in told[:took], told


async def _quiet(log: list[Any]) -> None:
    """Until the worker's loops have settled: nothing logged for a while."""
    seen, still = -1, 0
    for _ in range(200):
        if len(log) == seen:
            still += 1
            if still == 5:
                return
        else:
            seen, still = len(log), 0
        await asyncio.sleep(0.02)
    raise AssertionError(f"the worker's loops never settled: {log}")


async def test_a_claim_whose_read_fails_still_claims_and_runs(database: str) -> None:
    """A claim reads each run's pass with it; if that read fails (a statement timeout on a
    huge history), the claim wrote nothing and the worker claims the runs without it, so
    one run that cannot be read in a claim holds up no other."""
    app = plait.App()

    @app.workflow
    async def quick(wf: plait.Workflow, i: int) -> int:
        return await wf.do("s", lambda: i)

    engine = plait.Engine(app, database, poll_interval=0.2)
    store: Any = engine.store
    failed: list[int] = []

    async def failing(*_args: Any) -> list[Any]:
        failed.append(1)
        raise RuntimeError("canceling statement due to statement timeout")

    store.claim_due_passes = failing
    async with engine, plait.Engine(app, database, workers=False) as starter:
        run_ids = [await starter.start("quick", i) for i in range(3)]
        runs = [await starter.wait(r, timeout=20) for r in run_ids]
    assert [r.output for r in runs] == [0, 1, 2]
    assert failed


async def test_a_pass_that_waited_for_a_slot_reads_its_run_again(database: str) -> None:
    """What a claim read of a run is used by a pass that starts at once (a told worker's
    first step, one round trip sooner); one that waited for a slot (a worker full of job
    steps) reads the run again, since an event may have come meanwhile and the pass judges
    its waits' timeouts by the clock."""
    app = plait.App()

    @app.workflow
    async def waits(wf: plait.Workflow) -> Any:
        return await wf.wait_for_event("go", timeout=600)

    async with plait.Engine(app, database, concurrency=1) as engine:
        worker: Any = engine.worker
        passes: list[tuple[str, bool]] = []
        one_pass = worker._one_pass

        async def recording(run_id: str, snapshot: Any = None) -> bool:
            passes.append((run_id, snapshot is not None))
            return bool(await one_pass(run_id, snapshot))

        worker._one_pass = recording
        async with plait.Engine(app, database, workers=False) as starter:
            await starter.start("waits")  # unmeasured: the worker's first claim warms it
            await eventually(lambda: passes, what="the first pass")
            passes.clear()
            run_id = await starter.start("waits")
            await eventually(lambda: _waits(engine, run_id), what="the run waits")
            # told of the new run with a free slot: the pass uses what the claim read
            assert passes[0] == (run_id, True), passes
            # its pass has given it back (the driver is gone), so a driver of it from now
            # on is one the event's claim made
            await eventually(lambda: run_id not in worker.driving, what="its driver ends")
            passes.clear()
            async with worker.slots:  # the worker is full
                await starter.send_event(run_id, "go", "payload")
                await eventually(lambda: run_id in worker.driving, what="a claim of it")
                await asyncio.sleep(0)  # its driver's task starts, and waits for the slot
            assert (await starter.wait(run_id, timeout=10)).output == "payload"
        assert passes[0] == (run_id, False), passes


async def _waits(engine: plait.Engine, run_id: str) -> bool:
    steps = await engine.get_steps(run_id)
    return any(s.kind == "event" and s.status == "scheduled" for s in steps)
