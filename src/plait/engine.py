"""The Engine: start runs, wait for them, read them, and act on them."""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import math
import os
import socket
import time
import uuid
from collections.abc import Awaitable, Callable, Iterable
from datetime import UTC, datetime, timedelta
from types import TracebackType
from typing import Any, Literal, Self, TypedDict, TypeVar, Unpack, cast, overload

from plait import approval, errors, ids, queues, retention, schedules, serde
from plait.app import App
from plait.catalog import Catalog
from plait.clock import SYSTEM_CLOCK, Clock
from plait.durations import parse_duration, timeout_seconds
from plait.errors import (
    ApprovalForbiddenError,
    ApprovalResolvedError,
    RunIdTakenError,
    RunNotFoundError,
    RunStateError,
    ScheduleNotFoundError,
    ValidationError,
    ValueNotSetError,
    WorkflowCancelledError,
    WorkflowFailedError,
    WorkflowNotFoundError,
    WorkflowSuspendedError,
)
from plait.ids import check_name, check_run_id, new_run_id
from plait.notify import EndLook, Notifier, wait_event
from plait.observe import Telemetry, make_telemetry
from plait.records import (
    SETTLED,
    TERMINAL,
    Approval,
    ApprovalDecision,
    ApprovalStatus,
    GraphStatus,
    Run,
    RunStatus,
    RunStatusName,
    RunSummary,
    Schedule,
    Step,
    StepAttempt,
)
from plait.runtime import steps
from plait.runtime.steps import MAX_AFTER
from plait.runtime.workflow import Workflow
from plait.store import convert, make_store, resolve_url
from plait.store.base import (
    DecisionRow,
    NewRun,
    Op,
    PassSnapshot,
    PutStep,
    RunFilter,
    ScheduleRow,
    SetValue,
    StepRow,
    Store,
)
from plait.store.convert import ts, ts_or_none
from plait.worker import Worker, spec_of

log = logging.getLogger("plait.engine")
#: reads of a run that ``resume`` and ``retry`` make before giving up on one that
#: keeps changing under them
_REOPEN_TRIES = 20
#: the milliseconds a schedule trigger tries, from now on, for a run id not yet taken
_TRIGGER_TRIES = 100

#: runs (and, separately, queued steps) one process drives at once unless told. A hundred,
#: as the workers of Temporal's Python SDK and of Hatchet default to: on PostgreSQL the
#: passes of a process share commits, and a hundred runs at once cost the server about a
#: fifth less a step than 64 (larger groups); a pass holds no connection while its step runs
DEFAULT_CONCURRENCY = 100

In = TypeVar("In")
Out = TypeVar("Out")
#: a workflow by name, or as the function ``@app.workflow`` registered
WorkflowRef = str | Callable[..., Awaitable[Any]]
#: a duration: seconds, a string such as ``"30s"``, or a ``timedelta``
Duration = float | str | timedelta


class StartOptions(TypedDict, total=False):
    """The keyword arguments of ``Engine.start`` that ``Engine.run`` passes on."""

    run_id: str | None
    inline: bool
    owner: str | None
    start_node: str | None
    queue: str | None
    key: str | None
    priority: int
    dedup: str | None
    delay: Duration | None
    start_at: datetime | None


def workflow_name(workflow: WorkflowRef) -> str:
    """The name ``workflow`` is registered under: a name is itself, a function is the
    name ``@app.workflow`` gave it (``TypeError`` for one it never registered)."""
    if isinstance(workflow, str):
        return workflow
    name = getattr(workflow, "__plait_workflow__", None)
    if not isinstance(name, str):
        raise TypeError(
            f"workflow name must be a string or a function registered with @app.workflow, "
            f"got {type(workflow).__name__} {workflow!r}"
        )
    return name


class Engine:
    """A handle on one database plus (with ``workers=True``) the loops that work it.

    Use it as ``async with plait.Engine(app, url) as engine:``. Several engines and
    ``plait worker`` processes may share one database; the database is the only truth.

    ``tracing=True`` emits OpenTelemetry spans (extra ``otel``), ``metrics=True`` keeps
    Prometheus metrics (extra ``metrics``, ``metrics_text()``), ``log_work=True`` logs
    every attempt, retry, takeover and timer fire at INFO; all off by default, and then
    free (docs/observability.md). ``clock`` is where stored times come from (the system
    clock; ``plait.testing.TestEngine`` passes a virtual one).
    """

    def __init__(
        self,
        app: App,
        database: str | None = None,
        *,
        workers: bool = True,
        concurrency: int = DEFAULT_CONCURRENCY,
        lease_seconds: float = 2.0,
        poll_interval: float = 1.0,
        worker_id: str | None = None,
        store: Store | None = None,
        log_runs: bool = False,
        max_payload: int = serde.DEFAULT_MAX_PAYLOAD,
        retain: float | str | timedelta | None = None,
        clock: Clock | None = None,
        tracing: bool = False,
        metrics: bool = False,
        log_work: bool = False,
        **store_options: Any,
    ) -> None:
        if not isinstance(app, App):
            raise TypeError(f"Engine needs a plait.App, got {type(app).__name__}")
        if isinstance(concurrency, bool) or not isinstance(concurrency, int) or concurrency < 1:
            raise ValueError(f"invalid concurrency: {concurrency!r} (a whole number >= 1)")
        if lease_seconds <= 0:
            raise ValueError(f"invalid lease_seconds: {lease_seconds!r} (must be > 0)")
        #: how large and deep a stored value may be: run inputs, step inputs and results,
        #: run outputs, events and state values (``max_payload`` bytes, 64 levels)
        self.limits = serde.Limits(max_payload=max_payload)
        self.app = app
        if store is not None:
            if clock is not None:
                store.clock = clock
            self.store: Store = store
            self.url = store.url
        else:
            self.url = resolve_url(database)
            self.store = make_store(self.url, clock=clock or SYSTEM_CLOCK, **store_options)
        #: where every stored time comes from; a test engine's clock is virtual
        self.clock: Clock = self.store.clock
        self.workers = workers
        self.concurrency = concurrency
        self.lease_seconds = float(lease_seconds)
        self.poll_interval = float(poll_interval)
        self.worker_id = worker_id or f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"
        self.notifier = Notifier()
        #: one read a look for every caller of ``wait``, under the notifications
        self._end_look = EndLook(self.notifier, lambda ids: self.store.run_statuses(ids), SETTLED)
        self.catalog = Catalog(app, self.store)
        self.log_runs = log_runs
        #: with workers: ended runs older than this many seconds are pruned in the background
        self.retain = None if retain is None else parse_duration(retain, what="retain")
        if self.retain is not None and self.retain <= 0:
            raise ValueError(f"invalid retain: {retain!r} (must be more than 0)")
        #: spans (``tracing``, extra ``otel``), Prometheus metrics (``metrics``, extra
        #: ``metrics``) and INFO lines per attempt (``log_work``); None when all are off,
        #: and then neither library is imported
        self.telemetry: Telemetry | None = make_telemetry(
            tracing=tracing, metrics=metrics, log_work=log_work
        )
        self._worker: Worker | None = None
        self._opened = False

    # -- lifecycle -----------------------------------------------------------------------------
    async def __aenter__(self) -> Self:
        await self.open()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.close()

    async def open(self) -> None:
        """Connect, create or migrate the schema, and start the worker loops."""
        if self._opened:
            return
        for spec in self.app.schedules.values():
            self.catalog.describe(spec.workflow)  # a schedule of an unknown workflow
            if self.workers:
                # held to the limits of an engine that fires schedules: ``app.schedule``
                # ran before any engine said what they are, and every run of the schedule
                # gets this input (a command that only reads or starts does not fire it)
                serde.dumps(
                    spec.input, what=f"the input of schedule {spec.name!r}", limits=self.limits
                )
        await self.store.open()
        await self.catalog.record_versions()
        self._worker = Worker(
            self.store,
            self.catalog,
            self.notifier,
            worker_id=self.worker_id,
            lease_seconds=self.lease_seconds,
            concurrency=self.concurrency,
            poll_interval=self.poll_interval,
            take_work=self.workers,
            log_runs=self.log_runs,
            limits=self.limits,
            retain=self.retain if self.workers else None,
            clock=self.clock,
            telemetry=self.telemetry,
        )
        if self.telemetry is not None and self.telemetry.metrics is not None:
            worker = self._worker
            self.telemetry.metrics.watch_active(lambda: len(worker.driving))
        self.notifier.on_work(self._worker.kick)
        await self._store_app_schedules()
        await self.store.attach_notifier(self.notifier)
        self._worker.start_loops(passes=self.workers, steps=self.workers)
        self._opened = True

    async def close(self, *, drain: float = 0.0) -> None:
        """Stop the loops (work in hand gets ``drain`` seconds) and close the store."""
        if not self._opened:
            return
        self._opened = False
        if self._worker is not None:
            await self._worker.stop(drain=drain)
        await self._end_look.stop()
        await self.store.close()

    @property
    def is_open(self) -> bool:
        return self._opened

    @property
    def worker(self) -> Worker:
        """The loops of this process (only driving inline runs when ``workers=False``)."""
        if self._worker is None:
            raise RuntimeError("the engine is not open: use `async with Engine(...)`")
        return self._worker

    # -- definitions ----------------------------------------------------------------------------
    def describe(self, name: str) -> tuple[str, str | None]:
        """(kind, version) a new run of ``name`` records."""
        return self.catalog.describe(name)

    async def register_graph(
        self,
        name: str,
        definition: Any,
        *,
        status: GraphStatus = "active",
        registered_by: str | None = None,
    ) -> str:
        """Store a graph definition at run time; every process on this database can start
        it once it is ``active``. Returns its content hash (the version runs record).

        ``registered_by`` names the user it is registered for (the HTTP API passes the
        caller): a graph name then belongs to the first user who registered it, and
        nobody else may register versions of it, nor of a name the app's code defines
        (``plait.GraphOwnerError``). Without it the caller is trusted code."""
        return await self.catalog.register_graph(name, definition, status, registered_by)

    async def list_graphs(
        self, status: GraphStatus | Literal["deployed"] | None = None
    ) -> list[dict[str, Any]]:
        """Graphs registered at run time (newest first), with their status and hash."""
        if status not in (None, "draft", "active", "deployed"):
            raise ValueError(f"invalid graph status: {status!r} (use draft, active or deployed)")
        versions = await self.store.list_versions(status=status)
        return [dataclasses.asdict(v) for v in versions if v.kind == "graph"]

    async def graph_for(self, name: str, version: str | None) -> Any:
        """The graph definition a run started on, even if the graph changed since."""
        return await self.catalog.graph_for(name, version)

    # -- starting runs --------------------------------------------------------------------------
    async def start(
        self,
        name: WorkflowRef,
        data: Any = None,
        *,
        run_id: str | None = None,
        inline: bool = False,
        owner: str | None = None,
        start_node: str | None = None,
        queue: str | None = None,
        key: str | None = None,
        priority: int = 0,
        dedup: str | None = None,
        delay: float | str | timedelta | None = None,
        start_at: datetime | None = None,
    ) -> str:
        """Create a durable run and return its id. ``run_id`` is an idempotency key: the
        same id again returns the existing run without a second one.

        Flow control: ``queue`` (default: the workflow's own) admits the run through that
        queue's limits, ``key`` is its key for ``per_key``, higher ``priority`` is admitted
        first, ``dedup`` returns the id of a live run holding the same key instead of
        starting another, ``delay`` / ``start_at`` hold the start until then. Such a run
        is ``queued`` until a worker admits it. ``name`` may be the workflow's function.
        """
        run_id, _fresh = await self._start(
            name,
            data,
            run_id=run_id,
            inline=inline,
            owner=owner,
            start_node=start_node,
            queue=queue,
            key=key,
            priority=priority,
            dedup=dedup,
            delay=delay,
            start_at=start_at,
        )
        return run_id

    async def _start(
        self, name: WorkflowRef, data: Any, **options: Unpack[StartOptions]
    ) -> tuple[str, bool]:
        """``start``, also telling whether the run is one it made and drives here (inline):
        such a run cannot have ended before its starter looks, so ``run`` need not read
        it before it waits."""
        run_id = options.get("run_id")
        inline = options.get("inline", False)
        owner = options.get("owner")
        start_node = options.get("start_node")
        name = workflow_name(name)
        kind, version = await self.catalog.resolve(name)
        if run_id is not None:
            check_run_id(run_id)
        if owner is not None and not isinstance(owner, str):
            raise TypeError(f"owner must be a string, got {type(owner).__name__}")
        if start_node is not None and kind != "graph":
            raise ValueError(f"start_node applies to graph workflows; {name!r} is code")
        flow = self._flow_options(
            name,
            options.get("queue"),
            options.get("key"),
            options.get("priority", 0),
            options.get("dedup"),
            options.get("delay"),
            options.get("start_at"),
        )
        if inline and flow["status"] == "queued":
            raise ValueError(
                "inline=True cannot start a queued run (a queue, delay or start_at): "
                "a worker admits it"
            )
        if kind == "graph":
            graph = await self.graph_for(name, version)
            from plait.graph import validate_or_raise  # graphs only (see plait.graph)

            validate_or_raise(graph, start_node=start_node)
        payload = serde.dumps(data, what=f"the input of workflow {name!r}", limits=self.limits)
        wdef = self.app.workflows.get(name) if kind == "workflow" else None
        if wdef is not None and wdef.input_codec is not None:
            wdef.decode_input(payload)  # bad input is refused here, not by a failed run
        if not self._opened:
            raise RuntimeError("the engine is closed: use `async with Engine(...)`")
        worker = self.worker
        run_id = run_id or new_run_id()
        telemetry = self.telemetry
        new = NewRun(
            id=run_id,
            workflow=name,
            kind=kind,
            version=version,
            input=payload,
            owner=owner,
            start_node=start_node,
            lease_owner=worker.owner if inline else None,
            lease_seconds=self.lease_seconds,
            trace=None if telemetry is None else telemetry.run_created(run_id, name),
            **flow,
        )
        run, created = await self.store.create_run(new)
        if not created:
            if run.id != new.id:
                return run.id, False  # the live run that holds the de-duplication key
            if run.workflow != name:
                raise RunIdTakenError(run.id, run.workflow, name)
            return run.id, False
        if inline:
            worker.drive(run.id, claimed=True, follow=not self.workers)
        else:
            self.notifier.publish_work()
        return run.id, inline

    def _flow_options(
        self,
        name: str,
        queue: object,
        key: object,
        priority: object,
        dedup: object,
        delay: object,
        start_at: object,
    ) -> dict[str, Any]:
        """The queue fields of a new run (``NewRun``'s), each checked and named when
        wrong."""
        wdef = self.app.workflows.get(name)
        if queue is None and wdef is not None:
            queue = wdef.queue
        qname = None if queue is None else queues.check_queue_name(queue)
        qkey = None if key is None else queues.check_text(key, "key")
        if qkey is not None and qname is None:
            raise ValueError(f"key={qkey!r} needs a queue: the key counts against per_key")
        not_before = queues.start_time(delay, start_at, self.clock.now())
        queued = qname is not None or not_before is not None
        return {
            "status": "queued" if queued else "running",
            "queue": qname,
            "queue_key": qkey,
            "priority": queues.check_priority(priority),
            "dedup": None if dedup is None else queues.check_text(dedup, "dedup"),
            "not_before": not_before,
        }

    # Given the workflow's function, ``run`` is typed by it: its data must be what the
    # workflow takes, and the output is what it returns. By name, both are ``Any``.
    @overload
    async def run(
        self,
        name: Callable[[Workflow, In], Awaitable[Out]],
        data: In,
        *,
        timeout: Duration | None = None,
        **start_kw: Unpack[StartOptions],
    ) -> Out: ...
    @overload
    async def run(
        self,
        name: Callable[[Workflow], Awaitable[Out]],
        data: None = None,
        *,
        timeout: Duration | None = None,
        **start_kw: Unpack[StartOptions],
    ) -> Out: ...
    @overload
    async def run(
        self,
        name: str,
        data: Any = None,
        *,
        timeout: Duration | None = None,
        **start_kw: Unpack[StartOptions],
    ) -> Any: ...

    async def run(
        self,
        name: WorkflowRef,
        data: Any = None,
        *,
        timeout: Duration | None = None,
        **start_kw: Any,
    ) -> Any:
        """Start a run and wait for its output."""
        seconds = timeout_seconds(timeout)
        run_id, fresh = await self._start(name, data, **start_kw)
        run = await self._wait(run_id, seconds, None, fresh=fresh)
        output = _output_or_raise(run)
        wdef = self.app.workflows.get(workflow_name(name))
        codec = None if wdef is None else wdef.output_codec
        if codec is None or output is None:
            return output
        return codec.check(output, f"the output of workflow {run.workflow!r}")

    @overload
    async def wait(self, run_id: str, *, timeout: Duration | None = None) -> Run: ...
    @overload
    async def wait(
        self,
        run_id: str,
        *,
        timeout: Duration | None = None,
        workflow: Callable[..., Awaitable[Out]],
    ) -> Run[Out]: ...

    async def wait(
        self,
        run_id: str,
        *,
        timeout: Duration | None = None,
        workflow: WorkflowRef | None = None,
    ) -> Run[Any]:
        """Wait until the run is completed, failed, cancelled or suspended. ``timeout``
        is seconds, a string such as ``"30s"`` or a ``timedelta``.

        With ``workflow`` (the function ``@app.workflow`` registered), the ``Run`` is
        typed by what that workflow returns, and a run of another workflow is a
        ``ValueError`` rather than a wrongly typed output."""
        expected = None if workflow is None else workflow_name(workflow)
        return await self._wait(run_id, timeout_seconds(timeout), expected)

    async def _wait(
        self, run_id: str, seconds: float | None, workflow: str | None, *, fresh: bool = False
    ) -> Run:
        """``wait`` with its arguments checked: ``TestEngine`` moves its clock here. A
        ``fresh`` run (just made and driven here, its pass not begun) is not read before
        the first wait: it is running, and its end is told to the watch set up first."""
        deadline = None if seconds is None else time.monotonic() + seconds
        status = "running"
        while True:
            event = self.notifier.watch(run_id, end_only=True)
            try:
                if fresh:
                    fresh = False
                else:
                    run = await self.get_run(run_id)
                    if workflow is not None and run.workflow != workflow:
                        raise ValueError(
                            f"run {run_id} is a run of workflow {run.workflow!r}, not {workflow!r}"
                        )
                    if run.status in SETTLED:
                        return run
                    status = run.status
                wait_for = EndLook.MOST * 60  # the end look wakes it sooner if it ended
                if deadline is not None:
                    left = deadline - time.monotonic()
                    if left <= 0:
                        raise TimeoutError(f"run {run_id} still {status} after {seconds}s")
                    wait_for = min(wait_for, left)
                self._end_look.watching()
                await wait_event(event, wait_for)
            finally:
                self.notifier.unwatch(run_id, event)

    # -- reading --------------------------------------------------------------------------------
    async def get_run(self, run_id: str) -> Run:
        run = await self.store.get_run(_existing_id(run_id))
        if run is None:
            raise RunNotFoundError(run_id)
        return run

    async def list_runs(
        self,
        *,
        workflow: str | None = None,
        status: RunStatus | RunStatusName | None = None,
        version: str | None = None,
        owner: str | None = None,
        visible_to: str | None = None,
        limit: int = 50,
        offset: int = 0,
    ) -> list[Run]:
        runs, _total = await self.count_runs(
            workflow=workflow,
            status=status,
            version=version,
            owner=owner,
            visible_to=visible_to,
            limit=limit,
            offset=offset,
        )
        return runs

    async def count_runs(self, **filters: Any) -> tuple[list[Run], int]:
        """Runs newest first plus the total that match the filters (for paging)."""
        return await self.store.list_runs(_run_filter(filters))

    async def run_summaries(self, **filters: Any) -> tuple[list[RunSummary], int]:
        """Like ``count_runs``, but each run without its input, output and error: a page
        of these costs the same whatever the runs carry (lists, dashboards)."""
        return await self.store.list_run_summaries(_run_filter(filters))

    async def get_steps(self, run_id: str) -> list[Step]:
        await self.get_run(run_id)
        return await self.store.get_steps(run_id)

    async def get_history(self, run_id: str) -> list[StepAttempt]:
        await self.get_run(run_id)
        return await self.store.get_history(run_id)

    async def get_children(self, run_id: str) -> list[Run]:
        return await self.store.get_children(run_id)

    # -- acting on runs -------------------------------------------------------------------------
    async def resume(self, run_id: str, reason: str | None = None) -> Run:
        """A suspended run continues (status back to ``running``). With ``reason`` only
        ``wf.suspend(reason)`` is released; without, every open suspend. A run suspended
        for a missing function tries it again either way."""
        if reason is not None and not isinstance(reason, str):
            raise TypeError(f"reason must be a string, got {type(reason).__name__}")

        def reopen(snapshot: PassSnapshot, now: float) -> list[Op]:
            return steps.resume_ops(snapshot.steps.values(), now, reason)

        return await self._reopen(run_id, "suspended", "resume", reopen)

    async def retry(self, run_id: str) -> Run:
        """A failed run goes on from the failed step; succeeded steps are kept.

        A failed step gets a fresh retry budget only if the workflow did not go on past
        its failure: one it caught (or gathered with ``return_exceptions=True``) and then
        reached another step after stays failed and replays as the same error, so its
        body never runs twice; the step the run's error names always runs again (the
        rule: ``steps.reopened``). Steps that were still waiting on a timer when the
        run failed (sleeps, event timeouts, retry back-offs, approval deadlines) get
        their timers back."""

        def reopen(snapshot: PassSnapshot, now: float) -> list[Op]:
            recorded = snapshot.steps.values()
            return steps.retry_ops(recorded, now, snapshot.run.error, after_cap=MAX_AFTER)

        return await self._reopen(run_id, "failed", "retry", reopen)

    async def _reopen(
        self,
        run_id: str,
        from_status: str,
        action: str,
        reopen: Callable[[PassSnapshot, float], list[Op]],
    ) -> Run:
        """Read the run, decide what reopening it writes, and write that if nothing woke
        the run in between (a queued step finishing, an event); else read it again."""
        _existing_id(run_id)
        for _ in range(_REOPEN_TRIES):
            snapshot = await self.store.load_pass(run_id)
            if snapshot is None:
                raise RunNotFoundError(run_id)
            if snapshot.run.status != from_status:
                raise RunStateError(run_id, snapshot.run.status, action)
            ops = reopen(snapshot, self.clock.now())
            run = await self.store.reopen_run(run_id, from_status, snapshot.run.wakeups, ops)
            if run is not None:
                self._poke(run_id)
                return run
        raise RuntimeError(f"cannot {action} run {run_id!r}: it kept changing while read")

    async def cancel(self, run_id: str, reason: str | None = None) -> Run:
        """End the run ``cancelled`` with its children; running steps are cancelled and
        its timers never fire."""
        error = steps.run_cancelled_error(reason)
        parent = steps.child_step_end(None, "cancelled", None, error)
        moved = await self.store.cancel_run(_existing_id(run_id), error, parent)
        self.worker.cancel_local(moved)
        # a cancelled run of a queue frees its slot (or its place in the line)
        self.notifier.publish_work()
        if self.telemetry is not None:
            for rid in moved:
                ended = await self.store.get_run(rid)
                self.telemetry.run_ended(rid, ended.workflow if ended else "?", "cancelled")
        # give this process's cancelled work a moment to record how it ended
        local = [t for rid in moved if (t := self.worker.driving.get(rid)) is not None]
        if local:
            await asyncio.wait(local, timeout=5.0)
        for rid in moved:
            self.notifier.run_changed(rid)
        return await self.get_run(run_id)

    async def send_event(self, run_id: str, name: str, payload: Any = None) -> bool:
        """Deliver to ``wf.wait_for_event(name)``; kept until the run waits for it.
        Returns whether the run was waiting for it: False means the event is held for a
        wait the run has not reached, or may never reach (its wait timed out already)."""
        if not isinstance(name, str) or not name:
            raise TypeError(f"event name must be a non-empty string, got {name!r}")
        check_name(name, "event name")
        _existing_id(run_id)
        if name.startswith("__"):
            raise ValueError(
                f"event name {name!r} starts with '__', which plait keeps for its own "
                "messages (an approval is decided with engine.approve)"
            )
        payload_text = serde.dumps(payload, what=f"event {name!r}", limits=self.limits)
        waiting = await self.store.send_event(run_id, name, payload_text)
        self._poke(run_id)
        return waiting

    # -- queues ---------------------------------------------------------------------------------
    async def queue_depths(self) -> list[dict[str, Any]]:
        """Per queue: runs waiting (``queued``), runs holding a slot (``active``) and the
        limits this app declares for it. ``queue`` None counts runs only delayed."""
        depths = {d.queue: d for d in await self.store.queue_depths()}
        names = sorted({*(q for q in depths if q is not None), *self.app.queues})
        items: list[dict[str, Any]] = []
        for qname in [*names, *([None] if None in depths else [])]:
            depth = depths.get(qname)
            declared = self.app.queues.get(qname) if qname is not None else None
            items.append(
                {
                    "queue": qname,
                    "queued": depth.queued if depth else 0,
                    "active": depth.active if depth else 0,
                    "limits": declared.to_dict() if declared else None,
                }
            )
        return items

    # -- schedules ------------------------------------------------------------------------------
    async def _store_app_schedules(self) -> None:
        """Store the schedules this app declares; an unchanged one is left as it is (its
        status, next tick and last run), a changed one gets its new definition."""
        for spec in self.app.schedules.values():
            await self._put_schedule(spec, "app", None)

    async def _put_schedule(
        self, spec: schedules.ScheduleSpec, source: str, owner: str | None
    ) -> bool:
        """Store a schedule with the queue its workflow is registered with here (both
        callers resolved the workflow first), so a process without the workflow's code
        starts a tick's run through that queue too."""
        wdef = self.app.workflows.get(spec.workflow)
        spec = dataclasses.replace(spec, queue=None if wdef is None else wdef.queue)
        now = self.clock.now()
        row = ScheduleRow(
            name=spec.name,
            workflow=spec.workflow,
            definition=spec.definition(),
            status="active",
            source=source,
            owner=owner,
            next_tick=spec.next_tick(now),
            last_tick=None,
            last_run_id=None,
            created_at=now,
            updated_at=now,
        )
        changed = await self.store.put_schedule(row)
        if changed and self._worker is not None:
            self._worker.wake_schedules.set()
        return changed

    async def create_schedule(
        self,
        name: str,
        *,
        workflow: str,
        cron: str | None = None,
        every: float | str | timedelta | None = None,
        input: Any = None,
        timezone: str = "UTC",
        overlap: str = "skip",
        catchup: float | str | timedelta = "0s",
        owner: str | None = None,
    ) -> Schedule:
        """Store a schedule at run time; every worker on the database fires it. A schedule
        of that name gets the new definition (its paused or active status is kept). An
        input over this engine's limits is refused before anything is stored
        (``PayloadTooLargeError``, ``PayloadTooDeepError``)."""
        spec = schedules.make_spec(
            name,
            workflow=workflow,
            input=input,
            cron=cron,
            every=every,
            timezone=timezone,
            overlap=overlap,
            catchup=catchup,
            limits=self.limits,
        )
        await self.catalog.resolve(spec.workflow)
        if owner is not None and not isinstance(owner, str):
            raise TypeError(f"owner must be a string, got {type(owner).__name__}")
        await self._put_schedule(spec, "api", owner)
        return await self.get_schedule(spec.name)

    async def list_schedules(self) -> list[Schedule]:
        """Every stored schedule, by name, with its next tick and its last run."""
        return [convert.schedule_record(r) for r in await self.store.get_schedules()]

    async def get_schedule(self, name: str) -> Schedule:
        rows = await self.store.get_schedules(self._schedule_name(name))
        if not rows:
            raise ScheduleNotFoundError(name)
        return convert.schedule_record(rows[0])

    async def pause_schedule(self, name: str) -> Schedule:
        """No tick starts until ``resume_schedule``; ticks that pass meanwhile never do."""
        await self.get_schedule(name)
        row = await self.store.set_schedule_status(name, "paused", None)
        if row is None:
            raise ScheduleNotFoundError(name)
        return convert.schedule_record(row)

    async def resume_schedule(self, name: str) -> Schedule:
        """Fire again from the next tick after now (ticks missed while paused are not
        caught up)."""
        current = await self.get_schedule(name)
        spec = schedules.make_spec(
            current.name,
            workflow=current.workflow,
            input=current.input,
            cron=current.cron,
            every=current.every,
            timezone=current.timezone,
            overlap=current.overlap,
            catchup=current.catchup,
        )
        row = await self.store.set_schedule_status(name, "active", spec.next_tick(self.clock.now()))
        if row is None:
            raise ScheduleNotFoundError(name)
        self.worker.wake_schedules.set()
        return convert.schedule_record(row)

    async def trigger_schedule(self, name: str) -> str:
        """Start the schedule's workflow now, whatever its status and overlap policy; the
        run counts as its last run. Returns the run id. The run goes through the
        workflow's queue even from a process that lacks the workflow's code (the command
        line): the schedule stored the queue with its definition."""
        rows = await self.store.get_schedules(self._schedule_name(name))
        if not rows:
            raise ScheduleNotFoundError(name)
        current = spec_of(rows[0])
        kind, version = await self._describe_stored(current.workflow)
        # A run id names the moment to the millisecond: a trigger that finds its id taken
        # (another trigger in the same millisecond, or a tick at that very moment) takes
        # the next millisecond, so every trigger starts a run of its own.
        moment = math.floor(self.clock.now() * 1000)
        for later in range(_TRIGGER_TRIES):
            run = self.worker.scheduled_run(
                current.name,
                current.workflow,
                current.input,
                kind,
                version,
                (moment + later) / 1000,
                rows[0].owner,
                stored_queue=current.queue,
            )
            started = await self.store.fire_schedule(name, None, None, [run], False)
            if started is None:
                raise ScheduleNotFoundError(name)
            if started:
                self.notifier.publish_work()
                return started[0]
        raise RuntimeError(
            f"schedule {name!r}: the runs of the {_TRIGGER_TRIES} milliseconds from "
            f"{schedules.run_id_for(name, moment / 1000)} exist already"
        )

    async def _describe_stored(self, workflow: str) -> tuple[str, str | None]:
        """(kind, version) of a new run of ``workflow``: this app's, or, for a process
        that does not load the app (the command line), the version its deployment
        recorded last."""
        try:
            return await self.catalog.resolve(workflow)
        except WorkflowNotFoundError:
            recorded = await self.store.list_versions(workflow=workflow)
            if not recorded:
                raise
            return recorded[0].kind, recorded[0].version

    async def delete_schedule(self, name: str) -> None:
        """Remove the schedule; its runs are left alone. A schedule declared with
        ``app.schedule`` is stored again when a process that declares it opens."""
        if not await self.store.delete_schedule(self._schedule_name(name)):
            raise ScheduleNotFoundError(name)

    @staticmethod
    def _schedule_name(name: object) -> str:
        """A name to look a schedule up by, held to the rule names are stored by: one no
        schedule can have is refused here, naming it, before a store sees text it may not
        take (PostgreSQL has no NUL character)."""
        return check_name(name, "schedule name", limit=schedules.MAX_NAME)

    # -- approvals ------------------------------------------------------------------------------
    async def approve(
        self, run_id: str, name: str, data: Any = None, *, decided_by: str | None = None
    ) -> ApprovalDecision:
        """Decide approval gate ``name`` of the run with ``data``, as ``decided_by``.

        An open gate takes the decision at once if its policy admits ``decided_by`` and
        ``data`` fits its schema (else ``ApprovalForbiddenError`` /
        ``plait.ValidationError``, and the gate stays open); a gate already decided or
        past its deadline refuses it (``ApprovalResolvedError``): the decision that
        commits first wins. A decision for a gate the run has not reached is held and
        judged when it gets there (outcome ``held``). Every decision is kept, accepted
        or refused, with who sent it and when (``get_decisions``)."""
        if not isinstance(name, str) or not name:
            raise TypeError(f"approval name must be a non-empty string, got {name!r}")
        check_name(name, "approval name")
        if decided_by is not None and (not isinstance(decided_by, str) or not decided_by):
            raise TypeError(
                f"decided_by must be a user id (a non-empty string), got {decided_by!r}"
            )
        # to the microsecond, as PostgreSQL keeps it: the workflow reads the time from the
        # decision's payload and get_decisions from the stored column, the same instant
        now = round(self.clock.now(), 6)
        payload = approval.envelope(data, decided_by, now, self.limits)
        snapshot = await self.store.load_pass(run_id)
        if snapshot is None:
            raise RunNotFoundError(run_id)
        run = snapshot.run
        gates = sorted(
            (
                s
                for s in snapshot.steps.values()
                if s.kind == "approval"
                and approval.gate_info(s.input).get("name") == name
                # a gate the workflow gave up is not one it waits at: a decision for
                # its name is held for the next gate of that name
                and not steps.cancelled_wait(s)
            ),
            key=lambda s: s.seq,
        )
        gate = next((g for g in gates if g.status == "pending"), None)

        def row(outcome: str, reason: str | None = None, **more: Any) -> DecisionRow:
            return DecisionRow(name, payload, decided_by, now, outcome, reason, **more)

        async def refuse(code: str, message: str, found: Any = None) -> None:
            why = approval.reason(code, message, found)
            key = gate.key if gate is not None else (gates[-1].key if gates else None)
            await self.store.submit_decision(run_id, row("refused", why, key=key), ())

        if run.status in TERMINAL and (gate is not None or not gates):
            raise RunStateError(run_id, run.status, f"decide approval {name!r} of")
        if gate is None and gates:
            outcome = _gate_outcome(gates[-1])
            await refuse(errors.APPROVAL_RESOLVED, f"the approval was already {outcome}")
            raise ApprovalResolvedError(run_id, name, outcome)
        if gate is None:
            await self.store.submit_decision(run_id, row("held"), ())
            self._poke(run_id)
            return _decision_record(run_id, name, data, decided_by, now, "held", None, None)
        info = approval.gate_info(gate.input)
        policy = info.get("approvers", "any")
        if not approval.may_decide(policy, run.owner, decided_by):
            forbidden = ApprovalForbiddenError(run_id, name, decided_by, policy)
            await refuse(errors.APPROVAL_FORBIDDEN, str(forbidden))
            raise forbidden
        found = approval.problems(info.get("schema"), data)
        if found:
            invalid = ValidationError(f"the decision on approval {name!r}", found)
            await refuse(errors.APPROVAL_INVALID, "the data is invalid", found)
            raise invalid
        closed = approval.reason(errors.APPROVAL_RESOLVED, "the approval was already decided")
        expired = approval.reason(errors.APPROVAL_RESOLVED, "the approval was already expired")
        result = await self.store.submit_decision(
            run_id,
            row("accepted", key=gate.key, if_closed=closed, if_expired=expired),
            steps.decide_gate(gate, payload, now),
        )
        if result in ("closed", "expired"):
            outcome = "expired" if result == "expired" else await self._closed_how(run_id, gate)
            raise ApprovalResolvedError(run_id, name, outcome)
        self._poke(run_id)
        return _decision_record(run_id, name, data, decided_by, now, "accepted", None, now)

    async def _closed_how(self, run_id: str, gate: StepRow) -> Literal["expired", "decided"]:
        for step in await self.store.get_steps(run_id):
            if step.key == gate.key:
                recorded = step.output
                output = cast(dict[str, Any], recorded) if isinstance(recorded, dict) else {}
                return "expired" if output.get("expired") else "decided"
        return "decided"

    async def list_approvals(
        self,
        *,
        status: ApprovalStatus | None = "open",
        user: str | None = None,
        limit: int = 100,
    ) -> list[Approval]:
        """Approval gates of live runs, oldest first: ``open`` ones (default),
        ``decided``, ``expired`` or all (None); with ``user``, only those that user may
        decide. Each carries the JSON Schema its decision must fit."""
        if status not in (None, "open", "decided", "expired"):
            raise ValueError(f"invalid approval status {status!r}: use open, decided or expired")
        if isinstance(limit, bool) or not isinstance(limit, int) or limit < 1:
            raise ValueError(f"invalid limit: {limit!r}")
        step_status = {"open": "pending", None: None}.get(status, "succeeded")
        found: list[Approval] = []
        for gate in await self.store.list_gates(step_status, limit):
            info = approval.gate_info(gate.step.input)
            state = "open" if gate.step.status == "pending" else _gate_outcome(gate.step)
            if status is not None and state != status:
                continue
            policy = info.get("approvers", "any")
            if user is not None and not approval.may_decide(policy, gate.owner, user):
                continue
            expires = info.get("expires_at")
            found.append(
                Approval(
                    run_id=gate.step.run_id,
                    workflow=gate.workflow,
                    name=info.get("name", gate.step.key.removeprefix(approval.PREFIX)),
                    key=gate.step.key,
                    status=state,
                    schema=info.get("schema"),
                    approvers=policy,
                    owner=gate.owner,
                    opened_at=ts(gate.step.created_at),
                    expires_at=ts_or_none(expires),
                )
            )
        return found

    async def get_decisions(self, run_id: str) -> list[ApprovalDecision]:
        """Every decision sent to the run's approval gates, oldest first: accepted,
        refused (with why) or still held, with who sent it and when."""
        await self.get_run(run_id)
        found: list[ApprovalDecision] = []
        for item in await self.store.get_decisions(run_id):
            payload: dict[str, Any] = serde.loads(item["payload"]) or {}
            found.append(
                _decision_record(
                    run_id,
                    item["name"].removeprefix(approval.PREFIX),
                    payload.get("data"),
                    item["decided_by"],
                    item["decided_at"],
                    item["outcome"],
                    serde.loads(item["reason"]),
                    item["judged_at"],
                )
            )
        return found

    # -- values ---------------------------------------------------------------------------------
    async def get_values(self, run_id: str) -> dict[str, Any]:
        """Every value the run published (``wf.set_value``), by key."""
        await self.get_run(run_id)
        return {k: serde.loads(v) for k, v in (await self.store.get_values(run_id)).items()}

    async def get_value(
        self, run_id: str, key: str, *, wait: bool = False, timeout: Duration | None = None
    ) -> Any:
        """The value the run published under ``key`` (None while there is none). With
        ``wait``, waits until it is published: woken by the commit that publishes it,
        not by polling. ``TimeoutError`` after ``timeout`` seconds;
        ``ValueNotSetError`` if the run ends without publishing it."""
        if not isinstance(key, str) or not key:
            raise TypeError(f"value key must be a non-empty string, got {key!r}")
        seconds = timeout_seconds(timeout)
        deadline = None if seconds is None else time.monotonic() + seconds
        safety = _VALUE_SAFETY
        while True:
            event = self.notifier.watch(run_id)
            try:
                run = await self.get_run(run_id)
                values = await self.store.get_values(run_id)
                if key in values:
                    return serde.loads(values[key])
                if not wait:
                    return None
                if run.status in TERMINAL:
                    raise ValueNotSetError(run_id, key, str(run.status))
                wait_for = safety
                if deadline is not None:
                    left = deadline - time.monotonic()
                    if left <= 0:
                        raise TimeoutError(
                            f"run {run_id} published no value {key!r} in {seconds:g}s"
                        )
                    wait_for = min(wait_for, left)
                await wait_event(event, wait_for)
                safety = min(_VALUE_SAFETY_MAX, safety * 2)
            finally:
                self.notifier.unwatch(run_id, event)

    # -- fork and retention ---------------------------------------------------------------------
    async def fork(
        self, source_run_id: str, /, *, from_step: str, run_id: str | None = None
    ) -> str:
        """A new run of the same workflow and input that keeps the results of the steps
        the source reached before ``from_step`` (first-reached order) and runs
        ``from_step`` and everything after again, on the code deployed now. Its
        ``forked_from`` names the source. The source must not be running (cancel it
        first); ``from_step`` must be one of its own steps, not a step of a child run.

        The fork is admitted like a start of the workflow: through the source's stored
        queue, with its key and priority (and its ``wf.scheduled_at``), ``queued`` until
        the queue has room. The source's stored flow options are used, not this
        process's registration: they are what the source was started with (a
        ``start(queue=...)`` included), and they are the same in every process, the
        command line that loads no app too. A fork takes no de-duplication key (the
        source's belongs to the source, or to a later run that took it) and no delay.

        The values the kept ``wf.set_value`` steps published are published again for
        the fork, in the same transaction (the last one reached of each key wins);
        values published at ``from_step`` or after are not."""
        if not isinstance(from_step, str) or not from_step:
            raise TypeError(f"from_step must be a step key (a non-empty string), got {from_step!r}")
        if run_id is not None:
            check_run_id(run_id)  # as a start's: it must fit in a URL and a CLI argument
        snapshot = await self.store.load_pass(source_run_id)
        if snapshot is None:
            raise RunNotFoundError(source_run_id)
        source = snapshot.run
        if source.status in ("running", "queued"):
            raise RunStateError(source_run_id, source.status, "fork (cancel it first)")
        if source.kind == "graph":
            raise ValueError(
                f"run {source_run_id!r} is a graph run; fork reruns code workflows "
                "(start a graph run again with start_node=...)"
            )
        start = snapshot.steps.get(from_step)
        if start is None:
            raise ValueError(await self._no_such_step(source_run_id, from_step, snapshot.steps))
        new_id = run_id or new_run_id()
        if self.app.is_runnable(source.workflow):
            kind, version = self.catalog.describe(source.workflow)
        else:  # this process lacks the code: the run goes on what the workers have
            kind, version = source.kind, source.version
        now = self.clock.now()
        ops: list[Op] = []
        values: list[Op] = []
        for step in sorted(snapshot.steps.values(), key=lambda s: s.seq):
            if step.seq >= start.seq or step.status not in ("succeeded", "failed"):
                continue
            kept = step.copy()
            kept.run_id, kept.wake_at, kept.updated_at = new_id, None, now
            kept.invocation_id = ids.invocation_id(new_id, step.key)
            ops.append(PutStep(kept))
            if step.kind == "set_value" and step.status == "succeeded":
                values.append(SetValue(_value_key(step), step.output))
        new = NewRun(
            id=new_id,
            workflow=source.workflow,
            kind=kind,
            version=version,
            input=source.input,
            owner=source.owner,
            status="queued" if source.queue is not None else "running",
            queue=source.queue,
            queue_key=source.queue_key,
            priority=source.priority,
            scheduled_at=source.scheduled_at,
            trace=None
            if self.telemetry is None
            else self.telemetry.run_created(new_id, source.workflow),
        )
        await self.store.fork_run(new, source_run_id, ops + values)
        self.notifier.publish_work()
        return new_id

    async def _no_such_step(self, run_id: str, key: str, recorded: dict[str, StepRow]) -> str:
        """Why ``key`` is no step to fork from: a step of a child run, or none at all."""
        queue = [(run_id, child) for child in await self.store.get_children(run_id)]
        while queue:
            top, child = queue.pop(0)
            if any(s.key == key for s in await self.store.get_steps(child.id)):
                via = next((s.key for s in recorded.values() if s.child_run_id == child.id), None)
                hint = f"; fork run {run_id!r} from step {via!r}" if via else ""
                return (
                    f"step {key!r} is a step of child run {child.id!r} "
                    f"(workflow {child.workflow!r}), not of run {run_id!r}{hint}"
                )
            queue += [(top, grandchild) for grandchild in await self.store.get_children(child.id)]
        known = ", ".join(repr(k) for k in sorted(recorded, key=lambda k: recorded[k].seq))
        return f"run {run_id!r} has no step {key!r} (its steps: {known or 'none'})"

    async def prune(
        self,
        *,
        older_than: float | str | timedelta | datetime,
        statuses: Iterable[retention.EndedStatus] = retention.ENDED,
    ) -> int:
        """Delete ended runs (with their steps, attempts, events, values and child runs)
        last updated before ``older_than`` (a duration back from now, or an aware
        datetime), in short batches; returns how many runs went. Running and suspended
        runs, and runs whose child runs have not all ended, are kept."""
        if isinstance(older_than, datetime):
            if older_than.tzinfo is None:
                raise ValueError("older_than must be an aware datetime (with a time zone)")
            cutoff = older_than.timestamp()
        else:
            cutoff = self.clock.now() - parse_duration(older_than, what="older_than")
        chosen = retention.check_statuses(tuple(statuses))
        return await retention.prune(self.store, cutoff=cutoff, statuses=chosen)

    async def metrics_text(self) -> bytes | None:
        """This process's metrics in the Prometheus text format (the queue depths read
        now), or None when the engine was opened without ``metrics=True``."""
        metrics = None if self.telemetry is None else self.telemetry.metrics
        if metrics is None:
            return None
        await metrics.refresh(self.store)
        return metrics.render()

    def _poke(self, run_id: str) -> None:
        """Work for a run arrived (an event, a decision, a reopen): it did not end it."""
        self.notifier.run_changed(run_id, settled=False)
        self.notifier.publish_work()


def _existing_id(run_id: str) -> str:
    """``run_id`` if a run could have it, else ``RunNotFoundError``: no store even takes a
    NUL as part of a key, and an id that is not a string names no run."""
    if not isinstance(run_id, str) or "\x00" in run_id:
        raise RunNotFoundError(repr(run_id) if not isinstance(run_id, str) else run_id)
    return run_id


_RUN_STATUSES = tuple(RunStatus)
#: the largest ``offset`` and ``limit`` a store is asked for (both stores count in 64 bits)
_MAX_PAGE_NUMBER = 2**62


def _run_filter(filters: dict[str, Any]) -> RunFilter:
    """The store's filter for ``filters``, or ``ValueError`` naming a bad one."""
    status = filters.get("status")
    if status is not None and status not in _RUN_STATUSES:
        raise ValueError(
            f"invalid status filter: {status!r} (use one of {', '.join(_RUN_STATUSES)})"
        )
    for name, default in (("limit", 50), ("offset", 0)):
        value = filters.get(name, default)
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise ValueError(f"invalid {name}: {value!r}")
        if value > _MAX_PAGE_NUMBER:
            raise ValueError(f"invalid {name}: {value!r} (at most {_MAX_PAGE_NUMBER})")
    for name in ("workflow", "version", "owner", "visible_to", "parent_run_id", "id_contains"):
        value = filters.get(name)
        if value is not None and (not isinstance(value, str) or "\x00" in value):
            raise ValueError(f"invalid {name} filter: {value!r}")
    for name in ("created_after", "created_before"):
        value = filters.get(name)
        if isinstance(value, datetime):
            # a time without a zone is UTC, as every time plait stores
            stamp = value if value.tzinfo else value.replace(tzinfo=UTC)
            try:
                filters[name] = stamp.timestamp()
            except (OverflowError, ValueError):
                raise ValueError(f"invalid {name} filter: {value!r} (out of range)") from None
        elif value is not None and (
            isinstance(value, bool) or not isinstance(value, int | float) or value != value
        ):
            raise ValueError(f"invalid {name} filter: {value!r} (a datetime or epoch seconds)")
    if not isinstance(filters.get("top_level", False), bool):
        raise ValueError(f"invalid top_level filter: {filters['top_level']!r}")
    return RunFilter(**filters)


#: the slow look a waiting ``get_value`` takes in case a wake-up was lost (it doubles)
_VALUE_SAFETY = 1.0
_VALUE_SAFETY_MAX = 5.0


def _value_key(step: StepRow) -> str:
    """The key a ``wf.set_value`` step published under: its input is ``{"key": ...}``,
    as every such step has recorded since the first."""
    return cast(str, cast(dict[str, Any], serde.loads(step.input))["key"])


def _gate_outcome(step: StepRow) -> Literal["expired", "decided"]:
    output = serde.loads(step.output)
    expired = isinstance(output, dict) and cast(dict[str, Any], output).get("expired")
    return "expired" if expired else "decided"


def _decision_record(
    run_id: str,
    name: str,
    data: Any,
    decided_by: str | None,
    decided_at: float,
    outcome: str,
    reason: Any,
    judged_at: float | None,
) -> ApprovalDecision:
    return ApprovalDecision(
        run_id=run_id,
        name=name,
        data=data,
        decided_by=decided_by,
        decided_at=ts(decided_at),
        outcome=outcome,
        reason=reason,
        judged_at=ts_or_none(judged_at),
    )


def _output_or_raise(run: Run) -> Any:
    if run.status == "completed":
        return run.output
    if run.status == "failed":
        raise WorkflowFailedError(run)
    if run.status == "cancelled":
        raise WorkflowCancelledError(run)
    raise WorkflowSuspendedError(run)
