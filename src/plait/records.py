"""The records plait returns: frozen, JSON-serialisable snapshots of stored rows."""

from __future__ import annotations

import dataclasses
import enum
from datetime import datetime
from typing import Any, Generic, Literal

from typing_extensions import TypeVar

from plait.statuses import SETTLED as SETTLED
from plait.statuses import TERMINAL as TERMINAL
from plait.statuses import AttemptStatusName
from plait.statuses import RunStatus as RunStatus
from plait.statuses import RunStatusName as RunStatusName
from plait.statuses import StepStatus as StepStatus
from plait.statuses import StepStatusName as StepStatusName

T = TypeVar("T")
#: a run's output: what its workflow returns where that is known (``Engine.run`` and
#: ``Engine.wait(..., workflow=fn)``), else ``Any``
Output = TypeVar("Output", default=Any)

#: where an approval gate stands (``Engine.list_approvals(status=...)``)
ApprovalStatus = Literal["open", "decided", "expired"]
#: a graph registered at run time: ``draft`` is stored but not started by name
GraphStatus = Literal["draft", "active"]


def _jsonable(value: Any) -> Any:
    if isinstance(value, datetime):
        return value.isoformat()
    if isinstance(value, enum.Enum):
        return value.value
    return value


def step_label(key: str, kind: str) -> str:
    """The name ``plait runs show`` and the dashboard display for a step: plait's own
    keys said in words (``__event:approval`` of an event wait reads ``wait for event:
    approval``), a user's key as it is. ``Engine.fork`` takes this name as well as the
    key, so it is written once, here."""
    if kind == "approval":
        return f"approval: {key.removeprefix('__approval:')}"
    if kind == "set_tags":
        return "set tags"
    if kind == "set_value":
        return f"set value: {key.removeprefix('__value:')}"
    if kind == "suspend":
        return f"suspend: {key.removeprefix('__suspend:')}"
    if kind == "event":
        return f"wait for event: {key.removeprefix('__event:')}"
    if kind == "value":
        return key.removeprefix("__")
    if kind == "patch":
        return f"patch: {key.removeprefix('__patch:')}"
    if kind == "send_event":
        return f"send event: {key.removeprefix('__send:')}"
    if kind == "sleep":
        return f"sleep: {key}"
    if kind == "stream":
        return f"stream: {key.removeprefix('__stream:')}"
    if kind == "child":
        return f"{key} (child run)"
    return key


class _Record:
    def to_dict(self) -> dict[str, Any]:
        """A plain dict with datetimes as ISO strings, ready for ``json.dumps``."""
        # every record class is a dataclass; this base is not one
        fields = dataclasses.fields(self)  # type: ignore[arg-type]
        return {f.name: _jsonable(getattr(self, f.name)) for f in fields}


@dataclasses.dataclass(frozen=True)
class Run(_Record, Generic[Output]):
    """A run. ``Run[Out]`` is one whose workflow is known to return ``Out``; its
    ``output`` is that value once the run completed (None before)."""

    id: str
    workflow: str
    status: RunStatus
    input: Any
    output: Output
    error: dict[str, Any] | None
    created_at: datetime
    updated_at: datetime
    parent_run_id: str | None
    owner: str | None
    version: str | None
    kind: str = "workflow"
    queue: str | None = None
    key: str | None = None
    priority: int = 0
    dedup: str | None = None
    #: the schedule tick the run was started for
    scheduled_at: datetime | None = None
    #: when its queue admitted it
    admitted_at: datetime | None = None
    #: a queued run's earliest start
    start_at: datetime | None = None
    #: the run this one was forked from (``Engine.fork``), else None
    forked_from: str | None = None
    #: the run this one continues (``wf.continue_as_new``), else None
    continued_from: str | None = None
    #: the run that continues this one, once it ended ``continued``, else None
    continued_to: str | None = None
    #: when the run fails ``RUN_TIMEOUT`` unless it ended before (``timeout=``), else None
    deadline_at: datetime | None = None
    #: the seconds from the run's start to its deadline, which a retry counts again from
    #: the retry (a child's is its own deadline's, its parent's cap included), else None
    timeout: float | None = None
    #: its tags (``engine.start(tags=)``, the workflow's, ``wf.set_tags``, its parent's)
    tags: dict[str, str] = dataclasses.field(default_factory=dict[str, str])


@dataclasses.dataclass(frozen=True)
class RunSummary(_Record):
    """A run without its input, output and error: what a list of runs shows. A page of
    summaries costs the same however large the runs' values are."""

    id: str
    workflow: str
    kind: str
    status: RunStatus
    version: str | None
    owner: str | None
    parent_run_id: str | None
    created_at: datetime
    updated_at: datetime
    queue: str | None = None
    key: str | None = None
    priority: int = 0
    scheduled_at: datetime | None = None
    admitted_at: datetime | None = None
    start_at: datetime | None = None
    #: how many child runs it has (that the reader may see)
    children: int = 0
    #: its tags
    tags: dict[str, str] = dataclasses.field(default_factory=dict[str, str])


@dataclasses.dataclass(frozen=True)
class Step(_Record):
    run_id: str
    key: str
    name: str
    function: str | None
    status: StepStatus
    input: Any
    output: Any
    error: dict[str, Any] | None
    attempts: int
    retries: int
    invocation_id: str
    child_run_id: str | None
    created_at: datetime
    updated_at: datetime
    kind: str = "do"
    wake_at: datetime | None = None
    #: keys of the steps whose outcomes the workflow had received, in the task that
    #: reached this step, when it did: what this step came after (None: not recorded)
    reached_after: list[str] | None = None

    @property
    def label(self) -> str:
        """The name the dashboard and ``plait runs show`` display (``step_label``)."""
        return step_label(self.key, self.kind)

    def to_dict(self) -> dict[str, Any]:
        """As every record's, with the ``label`` the dashboard displays."""
        return {**super().to_dict(), "label": self.label}


@dataclasses.dataclass(frozen=True)
class StepAttempt(_Record):
    run_id: str
    key: str
    attempt: int
    status: AttemptStatusName
    output: Any
    error: dict[str, Any] | None
    started_at: datetime
    finished_at: datetime | None
    #: the worker that ran it (``WorkerInfo.id``: its lease name; an inline run's is its
    #: engine's), None where no worker was recorded
    worker: str | None = None


@dataclasses.dataclass(frozen=True)
class WorkerInfo(_Record):
    """A worker process as it recorded itself (``Engine.list_workers``). ``live``: its
    last heartbeat is recent enough that it is working now."""

    id: str
    host: str
    pid: int
    app: str
    version: str
    #: the queues it works (None: every queue)
    queues: list[str] | None
    #: the workflows it works (a worker never claims a run of any other)
    workflows: list[str]
    started_at: datetime
    last_seen: datetime
    live: bool


#: why a run that has not ended is not moving (``Engine.waiting_on``): its workflow or
#: its queue is paused, no live worker works its workflow (or its queue), or its queue
#: (or its key in the queue) spent its budget in the window; else what it waits on
#: itself: an ``event``, an ``approval``, a ``sleep``, a ``child`` run, a ``resume``
#: (suspended), its queue's ``admission``, or its ``start`` time
WaitingKind = Literal[
    "paused_workflow",
    "paused_queue",
    "no_worker",
    "budget",
    "event",
    "approval",
    "sleep",
    "child",
    "resume",
    "admission",
    "start",
]


@dataclasses.dataclass(frozen=True)
class WaitingOn(_Record):
    """What a live run waits on (``Engine.waiting_on``)."""

    kind: WaitingKind
    #: the paused workflow's or queue's name, the workflow no live worker works, the
    #: queue whose budget holds the run, the event's or the approval's name, the sleep's
    #: step key, the child run's id, the suspended run's id, or the queue that admits it
    name: str
    #: said in words, as ``plait runs show`` prints it
    message: str
    #: when the wait ends by itself (a sleep's end, an event's or an approval's timeout,
    #: a delayed start), else None
    until: datetime | None = None


#: what a stream entry is: a written value, the ``reset`` of a step attempt that failed or
#: was interrupted (its readers drop that attempt's entries), or the ``end`` of the stream
StreamEntryKind = Literal["data", "reset", "end"]


@dataclasses.dataclass(frozen=True)
class StreamEntry(_Record):
    """One entry of a run's stream (``wf.stream`` / ``ctx.stream``). ``offset`` counts
    from 0 in each stream, with no gap. ``attempt`` (and ``step``, the step key) name the
    step attempt that wrote a ``data`` entry, or that a ``reset`` drops; both are None for
    a write of the workflow itself and for the ``end``."""

    offset: int
    kind: StreamEntryKind
    value: Any
    attempt: int | None
    at: datetime
    step: str | None = None


@dataclasses.dataclass(frozen=True)
class Schedule(_Record):
    """A stored schedule and where it stands."""

    name: str
    workflow: str
    input: Any
    cron: str | None
    every: float | None
    timezone: str
    overlap: str
    catchup: float
    status: str
    #: ``app`` (declared with ``app.schedule``) or ``api`` (made at run time)
    source: str
    owner: str | None
    next_tick: datetime | None
    last_tick: datetime | None
    last_run_id: str | None
    last_run_status: str | None
    created_at: datetime
    updated_at: datetime


@dataclasses.dataclass(frozen=True)
class Decision(Generic[T]):
    """What ``await wf.approval(...)`` returns: the decision's data (an instance of the
    gate's schema, or the JSON sent when it has none), who decided and when; or, for a
    gate whose deadline passed first, ``expired`` with no data."""

    name: str
    expired: bool
    data: T | None = None
    decided_by: str | None = None
    decided_at: datetime | None = None


@dataclasses.dataclass(frozen=True)
class Approval(_Record):
    """An approval gate a run reached (``Engine.list_approvals``)."""

    run_id: str
    workflow: str
    name: str
    key: str
    status: ApprovalStatus
    #: the JSON Schema of the decision's data (None: any JSON)
    schema: dict[str, Any] | None
    approvers: str | list[str]
    owner: str | None
    opened_at: datetime
    expires_at: datetime | None


@dataclasses.dataclass(frozen=True)
class ApprovalDecision(_Record):
    """One decision sent to a run's gate, kept whatever became of it: ``held`` (the
    gate was not reached yet), ``accepted`` or ``refused`` (``reason`` says why)."""

    run_id: str
    name: str
    data: Any
    decided_by: str | None
    decided_at: datetime
    outcome: str
    reason: dict[str, Any] | None
    judged_at: datetime | None


@dataclasses.dataclass(frozen=True)
class CheckResult(_Record):
    """What ``Engine.check`` found of one run replayed on the code deployed now.

    ``ok`` is True when the code still follows what the run recorded; otherwise ``step``
    is the key of the first step where it takes another path or passes other input,
    ``step_name`` that step as ``plait runs show`` names it, and ``reason`` says what
    the run recorded and what the code does now (a run whose workflow the app does not
    register has no ``step``)."""

    run_id: str
    workflow: str
    ok: bool
    step: str | None = None
    step_name: str | None = None
    reason: str | None = None
