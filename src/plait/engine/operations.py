"""Operating a database many processes work: brakes (pausing a workflow or a queue
everywhere), the worker registry, why a run waits, and how many runs a filter matches in
each status.

A brake is a row (``plait_brakes``) every claim reads, so every process obeys it as
soon as it commits: no worker claims, admits or starts a job of a paused workflow's or
queue's runs. A run a pass holds stops before its next step (``runtime.drive``), and
every run it holds waits ``paused`` until the brake is released; new runs are accepted
and wait ``queued`` (every start reads the brakes in its own transaction, inline ones
too). A run started on no queue is in ``DEFAULT_QUEUE``, for a brake as for a worker's
scope.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from datetime import UTC, datetime
from typing import Any

from plait import ids
from plait.app import App
from plait.engine.base import EngineBase
from plait.engine.filters import run_filter
from plait.engine.waits import OPEN_STATUSES, STEPPED, WAIT_KINDS, run_wait
from plait.queues import DEFAULT_QUEUE, check_queue_name
from plait.records import Run, RunStatus, RunSummary, Step, WaitingOn, WorkerInfo
from plait.runtime import runs
from plait.store.rows import Brake, WorkerRow
from plait.worker.admission import merge_limits
from plait.worker.budgets import NO_HOLDS, Holds, budget_holds
from plait.worker.registry import live_after

#: what a brake holds: a workflow or a queue
BRAKE_KINDS = ("workflow", "queue")
#: how long a worker that stopped beating is still listed by ``list_workers``
RECENT = 3600.0


class OperationsMixin(EngineBase):
    """``pause_workflow`` / ``resume_workflow``, ``pause_queue`` / ``resume_queue``,
    ``list_paused``, ``list_workers``, ``waiting_on`` and ``status_counts``."""

    lease_seconds: float

    async def pause_workflow(self, name: str) -> list[str]:
        """Pause workflow ``name`` in every process that works this database: new runs
        are accepted and wait ``queued``; running runs stop after the step they are in
        and wait ``paused`` until ``resume_workflow``. Returns the runs it paused at
        once (those no pass held; a held one follows when its pass stops)."""
        return await self._pause("workflow", await self._known_workflow(name))

    async def resume_workflow(self, name: str) -> list[str]:
        """Release ``pause_workflow``: its paused runs go on where they stopped (unless
        their queue is paused too); returns them."""
        return await self._resume("workflow", await self._known_workflow(name))

    async def pause_queue(self, name: str) -> list[str]:
        """Pause queue ``name`` everywhere, as ``pause_workflow`` pauses a workflow: a
        run started on the queue waits ``queued``, a running one stops after its step."""
        return await self._pause("queue", check_queue_name(name))

    async def resume_queue(self, name: str) -> list[str]:
        """Release ``pause_queue``; returns the runs that go on."""
        return await self._resume("queue", check_queue_name(name))

    async def list_paused(self) -> list[dict[str, str]]:
        """The paused workflows and queues: ``kind`` (workflow or queue), ``name`` and
        ``paused_at`` (ISO time)."""
        return [
            {"kind": b.kind, "name": b.name, "paused_at": _iso(b.paused_at)}
            for b in await self.store.list_brakes()
        ]

    async def _known_workflow(self, name: object) -> str:
        """``name`` if a workflow of that name is known to this database: this app's, or
        one whose version any process recorded (another app's, a stored graph); else
        ``WorkflowNotFoundError``."""
        checked = ids.check_name(name, "workflow")
        if checked in self.app.workflows or checked in self.app.graphs:
            return checked
        if await self.store.list_versions(workflow=checked):
            return checked
        raise self.catalog.not_found(checked)

    async def _pause(self, kind: str, name: str) -> list[str]:
        moved = await self.store.pause(kind, name, runs.PAUSED, runs.BRAKED_FROM)
        worker = self.worker
        worker.brakes = worker.brakes | {(kind, name)}  # this process obeys at once
        for run_id in moved:
            self.notifier.run_changed(run_id, settled=False)
        return moved

    async def _resume(self, kind: str, name: str) -> list[str]:
        moved = await self.store.unpause(kind, name, runs.RELEASED, runs.PAUSED)
        worker = self.worker
        worker.brakes = worker.brakes - {(kind, name)}
        for run_id in moved:
            self.notifier.run_changed(run_id, settled=False)
        self.notifier.publish_work()
        worker.wake()
        return moved

    # -- the worker registry ---------------------------------------------------------------
    async def list_workers(self, *, recent: float = RECENT) -> list[WorkerInfo]:
        """The workers that recorded themselves: live ones (a heartbeat within a few
        seconds) and those seen in the last ``recent`` seconds, oldest first."""
        now = self.clock.now()
        rows = await self.store.list_workers(now - max(recent, 0.0))
        alive = live_after(now, self.lease_seconds)
        return [_worker_info(row, row.seen_at >= alive) for row in rows]

    # -- why a run waits -------------------------------------------------------------------
    async def waiting_on(self, run: Run | RunSummary | str) -> WaitingOn | None:
        """What ``run`` (or the run of that id) waits on: first what holds it whatever
        it waits on (its workflow or its queue is paused, no live worker works its
        workflow in its queue), else what it waits on itself (an event, an approval, a
        sleep, a child run, a resume, its queue's admission, its start time). None while
        it moves, or once it has ended."""
        if isinstance(run, str):
            run = await self.get_run(run)
        found = await self.waiting_on_runs([run])
        return found.get(run.id)

    async def waiting_on_runs(self, listed: Iterable[Run | RunSummary]) -> dict[str, WaitingOn]:
        """``waiting_on`` for many runs (a page of a list), in three reads."""
        live = [r for r in listed if r.status in ("queued", "running", "paused", "suspended")]
        if not live:
            return {}
        brakes = await self.store.list_brakes()
        # the workers seen within the live window (each says whether it is still live)
        at = self.clock.now()
        recent = at - live_after(at, self.lease_seconds)
        workers = [w for w in await self.list_workers(recent=recent) if w.live]
        holds = NO_HOLDS
        if any(r.status == "queued" and r.queue is not None for r in live):
            holds = await self.budget_holds()
        stepped = [r.id for r in live if r.status in STEPPED]
        open_steps: dict[str, list[Step]] = {}
        if stepped:
            for step in await self.store.waiting_steps(stepped, WAIT_KINDS, OPEN_STATUSES):
                open_steps.setdefault(step.run_id, []).append(step)
        jobs = await self._held_jobs(stepped, brakes)
        now = self.clock.datetime()
        found: dict[str, WaitingOn] = {}
        for run in live:
            why = None
            if run.status != "suspended":  # a resume, not a worker, moves it on
                why = waiting(run.workflow, run.kind, run.queue, brakes, workers)
            budget = run.status == "queued" and holds.holds(run.queue, run.key)
            if budget and (why is None or why.kind == "no_worker"):
                # a brake says more than a budget; a budget more than a missing worker
                why = held_by_budget(run.queue or "", run.key, holds)
            if why is None:
                why = jobs.get(run.id) or run_wait(run, open_steps.get(run.id, []), now)
            if why is not None:
                found[run.id] = why
        return found

    async def _held_jobs(self, run_ids: list[str], brakes: Sequence[Brake]) -> dict[str, WaitingOn]:
        """Of ``run_ids``, those with a job step waiting for a paused queue (its function
        is admitted through it), said in words: one read, only while a queue is paused."""
        paused = {b.name for b in brakes if b.kind == "queue"}
        if not paused or not run_ids:
            return {}
        functions = self.app.functions
        held: dict[str, WaitingOn] = {}
        for step in await self.store.waiting_steps(run_ids, ("do",), ("scheduled",)):
            f = functions.get(step.function or "")
            queue = (f.queue or DEFAULT_QUEUE) if f is not None and f.queued else None
            if queue in paused and step.run_id not in held:
                said = f"step {step.key!r} is admitted through queue {queue!r}, which is paused"
                held[step.run_id] = WaitingOn("paused_queue", queue, said)
        return held

    async def budget_holds(self) -> Holds:
        """What the spend budgets hold now: the stored limits (and this app's), read
        with the spend of their windows."""
        limits = merge_limits(await self.store.list_queue_limits(), self.app)
        return await budget_holds(self.store, limits, self.clock.now())

    async def status_counts(self, **filters: Any) -> dict[str, int]:
        """How many runs the filters (``run_summaries``'s, without ``status``) match in
        each status, in one read: a list's counts beside its page. A status no run has
        is left out."""
        if "status" in filters:
            raise ValueError("status_counts counts every status: give no status filter")
        where = run_filter({**filters, "limit": len(RunStatus), "offset": 0})
        return await self.store.count_by_status(where)


def worker_scope(
    app: App, workflows: Sequence[str] | None, queues: Sequence[str] | None
) -> tuple[tuple[str, ...] | None, tuple[str, ...] | None]:
    """The workflows and queues a worker works (``plait worker --workflows --queues``),
    each checked against ``app``: a workflow it registers, a queue it names (declared, or
    a workflow's or a function's; ``DEFAULT_QUEUE`` for runs of none). None: all."""
    if workflows is not None:
        known = sorted([*app.workflows, *app.graphs])
        for name in workflows:
            if name not in known:
                raise ValueError(
                    f"unknown workflow {name!r} in --workflows: the app registers "
                    f"{', '.join(known) or 'none'}"
                )
        if not workflows:
            raise ValueError("--workflows names no workflow")
    if queues is not None:
        named = {DEFAULT_QUEUE, *app.queues}
        named |= {w.queue for w in app.workflows.values() if w.queue is not None}
        named |= {f.queue for f in app.functions.values() if f.queue is not None}
        for name in queues:
            if name not in named:
                raise ValueError(
                    f"unknown queue {name!r} in --queues: the app names {', '.join(sorted(named))}"
                )
        if not queues:
            raise ValueError("--queues names no queue")
    return (
        None if workflows is None else tuple(sorted(set(workflows))),
        None if queues is None else tuple(sorted(set(queues))),
    )


def waiting(
    workflow: str,
    kind: str,
    queue: str | None,
    brakes: Sequence[Brake],
    workers: Sequence[WorkerInfo],
) -> WaitingOn | None:
    """Why a live run of ``workflow`` in ``queue`` waits, given the brakes and the live
    workers (None: nothing outside its steps holds it)."""
    held = {(b.kind, b.name) for b in brakes}
    if ("workflow", workflow) in held:
        return WaitingOn("paused_workflow", workflow, f"workflow {workflow!r} is paused")
    in_queue = queue or DEFAULT_QUEUE
    if ("queue", in_queue) in held:
        return WaitingOn("paused_queue", in_queue, f"queue {in_queue!r} is paused")
    for w in workers:
        works = kind == "graph" or workflow in w.workflows
        if works and (w.queues is None or in_queue in w.queues):
            return None
    where = "" if queue is None else f" in queue {queue!r}"
    return WaitingOn(
        "no_worker", workflow, f"no live worker registers workflow {workflow!r}{where}"
    )


def held_by_budget(queue: str, key: str | None, holds: Holds) -> WaitingOn:
    """A run of ``queue`` (with ``key``) that a spend budget holds, said in words."""
    if (queue, None) in holds.held:
        return WaitingOn("budget", queue, f"queue {queue!r} spent its budget in the window")
    return WaitingOn(
        "budget", queue, f"key {key!r} spent its budget of queue {queue!r} in the window"
    )


def _worker_info(row: WorkerRow, live: bool) -> WorkerInfo:
    return WorkerInfo(
        id=row.id,
        host=row.host,
        pid=row.pid,
        app=row.app,
        version=row.version,
        queues=None if row.queues is None else list(row.queues),
        workflows=list(row.workflows),
        started_at=datetime.fromtimestamp(row.started_at, UTC),
        last_seen=datetime.fromtimestamp(row.seen_at, UTC),
        live=live,
    )


def _iso(at: float) -> str:
    return datetime.fromtimestamp(at, UTC).isoformat()
