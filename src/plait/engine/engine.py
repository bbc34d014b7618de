"""The Engine: open and close it, its definitions, start runs, wait for them and read
them. What it does to runs, schedules, approval gates, values, queues and forks is each
in a module of its own in this package, mixed into ``Engine`` (``check``, a dry replay
of live runs on this code, too)."""

from __future__ import annotations

import os
import socket
import time
import uuid
from collections.abc import Awaitable, Callable, Mapping, Sequence
from datetime import datetime, timedelta
from types import TracebackType
from typing import Any, Self, TypedDict, TypeVar, Unpack, overload

from plait import serde
from plait import tags as tags_rules
from plait.app import App, WorkflowDef
from plait.catalog import Catalog
from plait.clock import SYSTEM_CLOCK, Clock
from plait.durations import parse_duration, run_timeout, timeout_seconds
from plait.engine.approvals import ApprovalsMixin
from plait.engine.base import Duration, WorkflowRef, workflow_name
from plait.engine.bulk import BulkMixin
from plait.engine.check import CheckMixin
from plait.engine.definitions import DefinitionsMixin
from plait.engine.fork import ForkMixin
from plait.engine.operations import OperationsMixin, worker_scope
from plait.engine.queues import QueuesMixin
from plait.engine.reads import ReadsMixin
from plait.engine.requests import RequestsMixin
from plait.engine.schedules import SchedulesMixin
from plait.engine.starts import StartsMixin
from plait.engine.streams import StreamsMixin
from plait.engine.values import ValuesMixin
from plait.errors import (
    WorkflowCancelledError,
    WorkflowFailedError,
    WorkflowNeedsAttentionError,
    WorkflowSuspendedError,
)
from plait.ids import check_caller_run_id, new_run_id
from plait.notify import ADMIT, DUE, JOB, Notifier, RunEndPoll, wait_event
from plait.observe import make_telemetry
from plait.records import (
    SETTLED,
    Run,
    RunStatus,
)
from plait.runtime import runs
from plait.runtime.workflow import Workflow
from plait.store import make_store, resolve_url
from plait.store.contract import Store
from plait.store.rows import NewRun
from plait.worker import Worker

#: runs (and, separately, job steps) one process drives at once unless told. A hundred,
#: as the workers of Temporal's Python SDK and of Hatchet default to: on PostgreSQL the
#: passes of a process share commits, and a hundred runs at once cost the server about a
#: fifth less a step than 64 (larger groups); a pass holds no connection while its step runs
DEFAULT_CONCURRENCY = 100

#: the options of a debounced start, which ``start`` hands to ``_flow_options`` as given
_DEBOUNCE_OPTIONS = ("debounce", "debounce_key", "debounce_max")

In = TypeVar("In")
Out = TypeVar("Out")


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
    dedup_policy: str
    delay: Duration | None
    start_at: datetime | None
    tags: Mapping[str, str] | None
    debounce: Duration | None
    debounce_key: str | None
    debounce_max: Duration | None


class Engine(
    StartsMixin,
    ReadsMixin,
    BulkMixin,  # and ActionsMixin, whose single-run actions it repeats
    ApprovalsMixin,
    CheckMixin,
    DefinitionsMixin,
    ForkMixin,
    OperationsMixin,
    QueuesMixin,
    RequestsMixin,
    SchedulesMixin,
    StreamsMixin,
    ValuesMixin,
):
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
        worker_workflows: Sequence[str] | None = None,
        worker_queues: Sequence[str] | None = None,
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
            self.store = store
            self.url = store.url
        else:
            self.url = resolve_url(database)
            self.store = make_store(self.url, clock=clock or SYSTEM_CLOCK, **store_options)
        self.clock = self.store.clock
        self.workers = workers
        self.concurrency = concurrency
        self.lease_seconds = float(lease_seconds)
        self.poll_interval = float(poll_interval)
        self.worker_id = worker_id or f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"
        self.notifier = Notifier()
        #: one read a poll for every caller of ``wait``, under the notifications
        self._run_end_poll = RunEndPoll(
            self.notifier, lambda ids: self.store.run_statuses(ids), SETTLED
        )
        self.catalog = Catalog(app, self.store)
        self.log_runs = log_runs
        #: with workers: ended runs older than this many seconds are pruned in the background
        self.retain = None if retain is None else parse_duration(retain, what="retain")
        if self.retain is not None and self.retain <= 0:
            raise ValueError(f"invalid retain: {retain!r} (must be more than 0)")
        #: spans (``tracing``, extra ``otel``), Prometheus metrics (``metrics``, extra
        #: ``metrics``) and INFO lines per attempt (``log_work``); None when all are off,
        #: and then neither library is imported
        self.telemetry = make_telemetry(tracing=tracing, metrics=metrics, log_work=log_work)
        #: the only workflows and queues its worker works (None: all the app has)
        self.worker_workflows, self.worker_queues = worker_scope(
            app, worker_workflows, worker_queues
        )
        self._worker = None
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
                # checked against the limits of an engine that fires schedules: ``app.schedule``
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
            only_workflows=self.worker_workflows,
            only_queues=self.worker_queues,
        )
        worker = self._worker
        if self.telemetry is not None and self.telemetry.metrics is not None:
            self.telemetry.metrics.watch_active(lambda: len(worker.driving))
        self.notifier.on_work(worker.told_of_runs, DUE)
        self.notifier.on_work(worker.wake_admissions.set, ADMIT)
        self.notifier.on_work(worker.wake_steps.set, JOB)
        await self._store_app_schedules()
        await self._store_app_queues()
        await self.store.attach_notifier(self.notifier)
        await self._worker.announce()
        self._worker.start_loops(passes=self.workers, steps=self.workers)
        self._opened = True

    async def close(self, *, drain: float = 0.0) -> None:
        """Stop the loops (work in hand gets ``drain`` seconds) and close the store."""
        if not self._opened:
            return
        self._opened = False
        if self._worker is not None:
            await self._worker.stop(drain=drain)
        await self._run_end_poll.stop()
        await self.store.close()

    @property
    def is_open(self) -> bool:
        return self._opened

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
        timeout: float | str | timedelta | None = None,
        tags: Mapping[str, str] | None = None,
        dedup_policy: str = "skip",
        debounce: float | str | timedelta | None = None,
        debounce_key: str | None = None,
        debounce_max: float | str | timedelta | None = None,
        connection: object = None,
    ) -> str:
        """Create a durable run and return its id. ``run_id`` is an idempotency key: the
        same id again returns the existing run without a second one.

        Flow control: ``queue`` (default: the workflow's own) admits the run through that
        queue's limits, ``key`` is its key for ``per_key``, higher ``priority`` is admitted
        first, ``dedup`` returns the id of a live run holding the same key instead of
        starting another (``dedup_policy="replace"``: cancels it, starts this one),
        ``delay`` / ``start_at`` hold the start until then. ``debounce``: starts with one
        ``debounce_key`` (default: the workflow's name) share one waiting run, which takes
        each one's input, merges in each one's ``tags`` and starts ``debounce`` after the
        last (at most ``debounce_max`` after the first). Such a run is ``queued`` until a
        worker admits it. So is a run of a paused workflow or queue (``pause_workflow``,
        ``pause_queue``), even with ``inline=True``: the start reads the brakes in its own
        transaction, so a pause another process committed counts at once. ``name`` may be
        the workflow's function.

        ``timeout`` (default: the workflow's own ``timeout``) is the run's deadline,
        counted from its start (a delayed run: from its start time): once it passes, the
        run fails ``RUN_TIMEOUT`` wherever it is, queued, running, waiting or suspended.

        ``connection``: write the run in the caller's open transaction on it (an asyncpg
        connection to this engine's PostgreSQL database, or a ``sqlite3`` connection to
        its SQLite file), so the run exists exactly when the application's own writes of
        that transaction do: rolled back, there is no run; committed, workers see it (on
        PostgreSQL they are woken by the commit). Not with ``inline=True``."""
        options = StartOptions(
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
            tags=tags,
            dedup_policy=dedup_policy,
            debounce=debounce,
            debounce_key=debounce_key,
            debounce_max=debounce_max,
        )
        if connection is not None:
            return await self._start_in(connection, name, data, deadline=timeout, **options)
        run_id, _fresh = await self._start(name, data, deadline=timeout, **options)
        return run_id

    async def _start(
        self,
        name: WorkflowRef,
        data: Any,
        *,
        deadline: Duration | None = None,
        **options: Unpack[StartOptions],
    ) -> tuple[str, bool]:
        """``start``, also telling whether the run is one it made and drives here (inline):
        such a run cannot have ended before its starter looks, so ``run`` need not read
        it before it waits."""
        new = await self._new_run(name, data, deadline=deadline, **options)
        since = time.monotonic()  # an inline run is created leased to this process
        run, created = await self._create(new, options.get("dedup_policy", "skip"))
        return self._started(new, run, created, since=since)

    async def _new_run(
        self,
        name: WorkflowRef,
        data: Any,
        *,
        deadline: Duration | None = None,
        what: str | None = None,
        **options: Unpack[StartOptions],
    ) -> NewRun:
        """The run ``start`` creates, every option and the input (``what``) checked."""
        run_id = options.get("run_id")
        inline = options.get("inline", False)
        owner = options.get("owner")
        start_node = options.get("start_node")
        name = workflow_name(name)
        kind, version = await self.catalog.resolve(name)
        if run_id is not None:
            check_caller_run_id(run_id)  # ``schedule:...`` ids are the ticks' own
            if options.get("debounce") is not None:
                raise ValueError("run_id does not combine with debounce: the run may be another's")
        if owner is not None and not isinstance(owner, str):
            raise TypeError(f"owner must be a string, got {type(owner).__name__}")
        if owner == "" or (isinstance(owner, str) and "\x00" in owner):
            raise ValueError(f"owner must be a user's name or None, got {owner!r}")
        if not isinstance(inline, bool):
            raise TypeError(f"inline must be True or False, got {inline!r}")
        if start_node is not None and kind != "graph":
            raise ValueError(f"start_node applies to graph workflows; {name!r} is code")
        timeout = run_timeout(deadline, what="timeout")
        flow = self._flow_options(
            name,
            options.get("queue"),
            options.get("key"),
            options.get("priority", 0),
            options.get("dedup"),
            options.get("delay"),
            options.get("start_at"),
            **{option: options.get(option) for option in _DEBOUNCE_OPTIONS},
            dedup_policy=options.get("dedup_policy", "skip"),
        )
        if inline and flow["status"] == "queued":
            raise ValueError(
                "inline=True cannot start a queued run (a queue, delay, start_at or "
                "debounce): a worker admits it"
            )
        if kind == "graph":
            graph = await self.graph_for(name, version)
            from plait.graph import validate_or_raise  # graphs only (see plait.graph)

            validate_or_raise(graph, start_node=start_node)
        what = what or f"the input of workflow {name!r}"
        payload = serde.dumps(data, what=what, limits=self.limits)
        wdef = self.app.workflows.get(name) if kind == "workflow" else None
        if timeout is None and wdef is not None:
            timeout = wdef.timeout
        starts = flow["not_before"] or self.clock.now()
        if wdef is not None and wdef.input_codec is not None:
            wdef.decode_input(payload)  # bad input is refused here, not by a failed run
        if not self._opened:
            raise RuntimeError("the engine is closed: use `async with Engine(...)`")
        worker = self.worker
        run_id = run_id or new_run_id()
        telemetry = self.telemetry
        return NewRun(
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
            deadline_at=runs.deadline(starts, timeout),
            timeout=timeout,
            tags=_run_tags(wdef, options.get("tags"), name),
            **flow,
        )

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
        """Wait until the run is completed, failed, cancelled, suspended or
        needs_attention (it waits for a person: ``engine.run`` raises
        ``WorkflowNeedsAttentionError``). ``timeout`` is seconds, a string such as
        ``"30s"`` or a ``timedelta``. A run that continued as new is followed along its
        chain (``Run.continued_to``) within that timeout: the ``Run`` returned is the
        last one, whose id may not be ``run_id``.

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
        the first wait: it is running, and its end is told to the watch set up first. A
        run that continued as new hands the wait on to the run that continues it."""
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
                    if run.status == RunStatus.CONTINUED and run.continued_to is not None:
                        run_id = run.continued_to
                        continue  # the wait goes on with the next run of the chain
                    if run.status in SETTLED:
                        return run
                    status = run.status
                wait_for = RunEndPoll.MOST * 60  # the run-end poll wakes it sooner if it ended
                if deadline is not None:
                    left = deadline - time.monotonic()
                    if left <= 0:
                        raise TimeoutError(f"run {run_id} still {status} after {seconds}s")
                    wait_for = min(wait_for, left)
                self._run_end_poll.watching()
                await wait_event(event, wait_for)
            finally:
                self.notifier.unwatch(run_id, event)

    async def metrics_text(self) -> bytes | None:
        """This process's metrics in the Prometheus text format (the queue depths read
        now), or None when the engine was opened without ``metrics=True``."""
        metrics = None if self.telemetry is None else self.telemetry.metrics
        if metrics is None:
            return None
        await metrics.refresh(self.store)
        return metrics.render()


def _run_tags(wdef: WorkflowDef | None, given: Any, name: str) -> str | None:
    """A new run's tags as stored: ``given`` (a start's ``tags=``, checked here) merged
    over its workflow's own (``@app.workflow(tags=)``)."""
    merged = tags_rules.merge(None if wdef is None else wdef.tags, tags_rules.check(given))
    tags_rules.limit(merged, f"the tags of a run of {name!r}")
    return tags_rules.dumps(merged)


def _output_or_raise(run: Run) -> Any:
    if run.status == "completed":
        return run.output
    if run.status == "failed":
        raise WorkflowFailedError(run)
    if run.status == "cancelled":
        raise WorkflowCancelledError(run)
    if run.status == "needs_attention":
        raise WorkflowNeedsAttentionError(run)
    raise WorkflowSuspendedError(run)
