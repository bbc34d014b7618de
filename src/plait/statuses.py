"""Every status a run, a step and an attempt can have, named once.

The stored values are these strings, in both stores. Code names a status by its
``Literal`` type (``RunStatusName``, ``StepStatusName``, ``AttemptStatusName``), so a
type checker refuses a value that is not one; the public records carry the run's and
the step's as str-enums (``RunStatus``, ``StepStatus``), equal to the plain strings.
Which status a run or a step moves to is chosen in ``runtime.runs`` and
``runtime.steps`` alone.

One word per concept: ``queued`` is a run's status only (a run waiting for admission by
its queue, or for its start time). A step whose attempts the step worker runs from the
job table is a *job step* (``StepRow.queued`` in the stored row); the module that runs
one of its attempts is ``runtime.job``.
"""

from __future__ import annotations

import enum
from typing import Literal

#: a run: ``queued`` (waiting for admission or its start time), ``running`` (passes
#: drive it), ``suspended`` (until a resume), ``paused`` (its workflow or queue is
#: paused: it goes on when they are resumed), ``needs_attention`` (a step that parks on
#: exhausted retries failed its last attempt: until a retry or a cancel), then ended
#: ``completed`` | ``failed`` |
#: ``cancelled`` | ``continued`` (its workflow continued as new: a new run of the same
#: workflow, ``Run.continued_to``, goes on in its place)
RunStatusName = Literal[
    "queued",
    "running",
    "suspended",
    "paused",
    "needs_attention",
    "completed",
    "failed",
    "cancelled",
    "continued",
]
#: a step: ``pending`` (no attempt yet, or an open suspend or gate), ``scheduled`` (a
#: timer or the job table), ``running`` (an attempt or a child run in flight), then
#: ``succeeded`` | ``failed``
StepStatusName = Literal["pending", "scheduled", "running", "succeeded", "failed"]
#: one attempt of a step: ``running``, then ``succeeded`` | ``failed`` | ``interrupted``
#: (its process died or shut down: no retry budget spent) | ``cancelled`` (its run or
#: its workflow cancelled it)
AttemptStatusName = Literal["running", "succeeded", "failed", "interrupted", "cancelled"]
#: a request (``engine.request``): ``sent`` (waiting for the workflow to take it),
#: ``taken`` (by a ``wf.wait_for_request``), then ``replied`` | ``refused`` |
#: ``withdrawn`` (its sender gave up before the workflow took it)
RequestStatusName = Literal["sent", "taken", "replied", "refused", "withdrawn"]


class RunStatus(enum.StrEnum):
    #: waiting for admission by its queue, or for its start time
    QUEUED = "queued"
    RUNNING = "running"
    SUSPENDED = "suspended"
    #: its workflow or its queue is paused (``Engine.pause_workflow``): not ended, no
    #: worker claims it; it goes on where it stopped once they are resumed
    PAUSED = "paused"
    #: a step with ``on_exhausted="park"`` failed its last attempt: not ended, no worker
    #: drives it, and it holds no queue slot; ``retry`` gives the step a new budget,
    #: ``cancel`` ends it. Its error is the step's
    NEEDS_ATTENTION = "needs_attention"
    COMPLETED = "completed"
    FAILED = "failed"
    CANCELLED = "cancelled"
    #: ended by ``wf.continue_as_new``: its successor (``Run.continued_to``) goes on
    CONTINUED = "continued"

    @property
    def is_terminal(self) -> bool:
        return self in TERMINAL


class StepStatus(enum.StrEnum):
    PENDING = "pending"
    SCHEDULED = "scheduled"
    RUNNING = "running"
    SUCCEEDED = "succeeded"
    FAILED = "failed"


#: Run statuses at which a wait for the run wakes: ``Engine.wait`` returns at each of them
#: but ``continued``, where it goes on waiting for the run that continues it. A run that
#: waits for a person (``suspended``, ``needs_attention``) is settled without having ended.
SETTLED: frozenset[RunStatusName] = frozenset(
    {"completed", "failed", "cancelled", "continued", "suspended", "needs_attention"}
)
#: Run statuses of a run that ended (only a retry moves one on: ``failed`` to ``running``).
TERMINAL: frozenset[RunStatusName] = frozenset({"completed", "failed", "cancelled", "continued"})
#: Step statuses of a step not ended yet.
STEP_IN_FLIGHT: frozenset[StepStatusName] = frozenset({"pending", "scheduled", "running"})
