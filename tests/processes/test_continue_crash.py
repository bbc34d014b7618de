"""Crash suite for ``wf.continue_as_new``: real ``plait worker`` processes SIGKILLed at
random moments while loops continue as new, then restarted. A run's end and its
successor's start are one commit, so every chain stays whole: each continued run has
exactly one successor, no chain ever has two live runs, and each ends with the output
its input decides. On every store.

Set ``CONTINUE_CRASH_SEED`` to replay one sequence of kill delays.
"""

from __future__ import annotations

import asyncio
import os
import random
from collections import Counter
from pathlib import Path

import pytest

import plait
from plait.records import Run
from support import continue_app
from support.ledger import WorkerProcess, ready
from support.polling import eventually

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]

CHAINS = 6
#: turns per chain: with ``continue_app.TURNS`` per run, forty runs a chain, long enough
#: that the chains are still going through most of the kills
UNTIL = 120
KILLS = 8
LIVE = ("queued", "running", "suspended")


async def every_run(engine: plait.Engine) -> list[Run]:
    return await engine.list_runs(workflow="chain_loop", limit=10_000)


def check_links(runs: list[Run]) -> None:
    """Each continued run has exactly one successor, which names it back; no run but a
    chain's first lacks its predecessor; no chain has two live runs."""
    by_id = {r.id: r for r in runs}
    successors = Counter(r.continued_from for r in runs if r.continued_from is not None)
    for run in runs:
        if run.status == "continued":
            assert run.continued_to is not None, f"{run.id} continued without a successor"
            assert successors[run.id] == 1, f"{run.id} has {successors[run.id]} successors"
            assert by_id[run.continued_to].continued_from == run.id
        else:
            assert run.continued_to is None and successors[run.id] == 0
        if run.continued_from is not None:
            assert by_id[run.continued_from].continued_to == run.id
    live: Counter[str] = Counter()
    for run in runs:
        if run.status in LIVE:
            live[first_of(run, by_id)] += 1
    assert all(n == 1 for n in live.values()), f"chains with two live runs: {live}"


def first_of(run: Run, by_id: dict[str, Run]) -> str:
    while run.continued_from is not None:
        run = by_id[run.continued_from]
    return run.id


async def test_sigkill_while_runs_continue_as_new_leaves_every_chain_whole(
    tmp_path: Path, database: str
) -> None:
    seed = int(os.environ.get("CONTINUE_CRASH_SEED", random.randrange(2**32)))
    rng = random.Random(seed)
    print(f"CONTINUE_CRASH_SEED={seed}")
    ledger = tmp_path / "ledger.jsonl"
    workers: list[WorkerProcess] = []

    def start_worker(worker_id: str) -> WorkerProcess:
        log = tmp_path / f"worker-{len(workers):02d}.log"
        worker = WorkerProcess(
            database, ledger, log, worker_id=worker_id, lease=1.0, app="support.continue_app:app"
        )
        workers.append(worker)
        return worker

    async with plait.Engine(continue_app.app, database, workers=False) as engine:
        firsts = [
            await engine.start("chain_loop", {"i": 0, "total": 0, "until": UNTIL, "chain": n})
            for n in range(CHAINS)
        ]
        try:
            worker = start_worker("cont-w0")
            await eventually(ready(worker), timeout=30, what="the first worker up")
            live_at_kill = 0
            for kill in range(KILLS):
                await asyncio.sleep(rng.uniform(0.05, 0.4))
                worker.sigkill()
                left = await every_run(engine)  # as the kill left the database
                check_links(left)
                live_at_kill += any(r.status in LIVE for r in left)
                # the same id takes its runs over at once; a new id after the lease
                worker = start_worker("cont-w0" if kill % 2 else f"cont-w{kill + 1}")
                await eventually(ready(worker), timeout=30, what="a restarted worker up")
            lasts = [await engine.wait(first, timeout=120) for first in firsts]
            assert live_at_kill >= KILLS // 2, "the chains ended before most kills"
        finally:
            for each in workers:
                each.stop()
        runs = await every_run(engine)
    check_links(runs)
    assert [last.output for last in lasts] == [
        continue_app.expected(UNTIL, n) for n in range(CHAINS)
    ]
    by_id = {r.id: r for r in runs}
    for first, last in zip(firsts, lasts, strict=True):
        assert first_of(last, by_id) == first
        assert last.status == "completed"
    assert sum(r.status == "continued" for r in runs) == CHAINS * (UNTIL // continue_app.TURNS)
