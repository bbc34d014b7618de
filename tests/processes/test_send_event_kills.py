"""``wf.send_event`` under SIGKILLs: a ``plait worker`` running senders is killed at random
points 20 times (restarted with its own worker id and with a new one in turn), and every
receiver still gets each event exactly once: the send and the step's record are one
commit, and the event's key is the step's invocation id."""

from __future__ import annotations

import asyncio
import os
import random
from pathlib import Path

import pytest

import plait
from support import send_app
from support.ledger import LedgerTail, WorkerProcess, ready
from support.polling import eventually

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]

KILLS = 20
#: events each sender sends before its ``done``
COUNT = 40
#: senders kept in flight while the kills go on
IN_FLIGHT = 2
LEASE = 1.0
APP = "support.send_app:app"


class Pairs:
    """Senders and their receivers, started as the kills go on."""

    def __init__(self, engine: plait.Engine) -> None:
        self.engine = engine
        self.pairs: dict[str, str] = {}  # sender -> receiver

    async def top_up(self) -> None:
        running = await self.engine.list_runs(workflow="sender", status="running", limit=1000)
        for _ in range(IN_FLIGHT - len(running)):
            n = len(self.pairs)
            to = await self.engine.start("receiver", run_id=f"receiver-{n:03d}")
            sender = await self.engine.start(
                "sender", {"to": to, "count": COUNT}, run_id=f"sender-{n:03d}"
            )
            self.pairs[sender] = to

    async def sends_made(self) -> dict[str, int]:
        """Per sender still running, how many of its sends are recorded."""
        made: dict[str, int] = {}
        for run in await self.engine.list_runs(workflow="sender", status="running", limit=1000):
            steps = await self.engine.get_steps(run.id)
            made[run.id] = sum(1 for s in steps if s.kind == "send_event")
        return made


async def _at_work(tail: LedgerTail, worker: WorkerProcess, pairs: Pairs) -> None:
    """Wait until ``worker`` started a step body, topping up senders meanwhile."""

    async def working() -> bool:
        if not worker.alive():
            raise AssertionError(f"worker {worker.worker_id} exited:\n{worker.log_tail()}")
        await pairs.top_up()
        return any(line["pid"] == worker.pid for line in tail.refresh())

    await eventually(working, timeout=30, what=f"worker {worker.worker_id} at work")


async def test_each_event_is_delivered_once_under_20_sigkills(
    database: str, tmp_path: Path
) -> None:
    rng = random.Random(int(os.environ.get("CRASH_SEED", str(random.randrange(1 << 30)))))
    ledger = tmp_path / "ledger.jsonl"
    tail = LedgerTail(ledger)
    workers: list[WorkerProcess] = []

    def start_worker(worker_id: str) -> WorkerProcess:
        log = tmp_path / f"worker-{len(workers):03d}.log"
        worker = WorkerProcess(database, ledger, log, worker_id=worker_id, lease=LEASE, app=APP)
        workers.append(worker)
        return worker

    async with plait.Engine(send_app.app, database, workers=False) as engine:
        pairs = Pairs(engine)
        mid_way = 0  # kills that found a sender with some of its sends made, not all
        try:
            worker = start_worker("send-w0")
            for kill in range(KILLS):
                await _at_work(tail, worker, pairs)
                await asyncio.sleep(rng.uniform(0.05, 0.4))  # a random point to kill at
                worker.sigkill()
                made = await pairs.sends_made()
                mid_way += any(0 < n <= COUNT for n in made.values())
                same = kill % 2 == 0
                worker = start_worker(worker.worker_id if same else f"send-w{kill + 1}")

            async def senders_done() -> bool:
                if not worker.alive():
                    raise AssertionError(f"worker exited:\n{worker.log_tail()}")
                runs = [await engine.get_run(s) for s in pairs.pairs]
                return all(r.status == "completed" for r in runs)

            await eventually(senders_done, timeout=120, what="every sender to complete")
            for to in pairs.pairs.values():
                await engine.send_event(to, "end")
            received = {to: await engine.wait(to, timeout=60) for to in pairs.pairs.values()}
            await eventually(ready(worker), timeout=15, what="the worker to be ready")
            worker.sigterm()
            assert worker.wait_exit(15) == 0, worker.log_tail()
        finally:
            for w in workers:
                w.stop()

        expected = {str(i): 1 for i in range(COUNT)}
        wrong = [
            f"{to}: {run.status} {run.output} {run.error}"
            for to, run in received.items()
            if run.status != "completed" or run.output != expected
        ]
        assert not wrong, "receivers that did not get each event once:\n" + "\n".join(wrong)
        for sender, to in pairs.pairs.items():
            snapshot = await engine.store.load_pass(to)
            assert snapshot is not None
            assert snapshot.events == [], f"{to} holds events nobody took: {snapshot.events}"
            sends = [s for s in await engine.get_steps(sender) if s.kind == "send_event"]
            assert len(sends) == COUNT + 1 and all(s.status == "succeeded" for s in sends)
        print(
            f"\n{KILLS} kills, {len(pairs.pairs)} senders of {COUNT + 1} events each, "
            f"{mid_way} kills with a sender mid-way"
        )
        assert mid_way >= KILLS // 2, f"only {mid_way} kills found a sender mid-way"
