"""Exceptions that users catch, and the codes plait stores on runs.

Control-flow signals that stop a replay live in ``runtime.control_flow`` and derive from
``BaseException``; everything here is an ordinary ``Exception`` so user code may catch it.
"""

from __future__ import annotations

import contextlib
from collections.abc import Generator
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from plait.records import Run

WORKFLOW_CANCELLED = "WORKFLOW_CANCELLED"
WORKFLOW_SUSPENDED = "WORKFLOW_SUSPENDED"
FUNCTION_NOT_FOUND = "FUNCTION_NOT_FOUND"
VERSION_CONFLICT = "VERSION_CONFLICT"
GRAPH_NODE_FAILED = "GRAPH_NODE_FAILED"
STEP_TIMEOUT = "STEP_TIMEOUT"
STEP_INTERRUPTED = "STEP_INTERRUPTED"
STEP_FAILED = "STEP_FAILED"
NOT_JSON = "NOT_JSON"
EVENT_TIMEOUT = "EVENT_TIMEOUT"
#: the run's deadline (``@app.workflow(timeout=)``, ``start(timeout=)``) passed first
RUN_TIMEOUT = "RUN_TIMEOUT"
CHILD_FAILED = "CHILD_FAILED"
#: the workflow waits on something that is not a step and can never be woken
WORKFLOW_BLOCKED = "WORKFLOW_BLOCKED"
PAYLOAD_TOO_LARGE = "PAYLOAD_TOO_LARGE"
PAYLOAD_TOO_DEEP = "PAYLOAD_TOO_DEEP"
#: a value that does not fit the annotation it is decoded as
TYPE_MISMATCH = "TYPE_MISMATCH"
INVALID_INPUT = "INVALID_INPUT"
#: a request the workflow refused (``req.refuse``), or whose data failed its schema
REQUEST_REFUSED = "REQUEST_REFUSED"
REQUEST_INVALID = "REQUEST_INVALID"
#: ``wf.wait_for_request`` saw no request before its timeout
REQUEST_TIMEOUT = "REQUEST_TIMEOUT"
#: ``wf.send_event`` found no run it may send to, or the run had ended
EVENT_NOT_SENT = "EVENT_NOT_SENT"
#: a step whose task the workflow cancelled (``task.cancel()``, a failing task group
#: sibling, a loser of ``asyncio.wait``): its attempt was cut short, or it never started
CANCELLED = "CANCELLED"


class PlaitError(Exception):
    """Base of every error plait raises on purpose."""


#: the modules each optional extra of the distribution brings
EXTRAS: dict[str, tuple[str, ...]] = {
    "postgres": ("asyncpg",),
    "http": ("starlette", "uvicorn"),
    "otel": ("opentelemetry",),
    "metrics": ("prometheus_client",),
    "pydantic-ai": ("pydantic_ai",),
}


class MissingExtraError(PlaitError, ImportError):
    """A part of plait that needs an optional extra which is not installed. An
    ``ImportError``, so code that tries an import and falls back still works; its message
    is the one line to act on."""

    def __init__(self, extra: str, what: str, module: str) -> None:
        super().__init__(
            f"{what} needs the '{extra}' extra ({module} is not installed): "
            f"pip install 'plait[{extra}]'",
            name=module,
        )
        self.extra = extra


@contextlib.contextmanager
def extra_needed(extra: str, what: str) -> Generator[None]:
    """Turn the import error of a module of ``extra`` into a ``MissingExtraError`` naming
    the install; any other import error stays as it is (a real bug must show)."""
    try:
        yield
    except ModuleNotFoundError as exc:
        top = (exc.name or "").partition(".")[0]
        if top not in EXTRAS[extra]:
            raise
        raise MissingExtraError(extra, what, top) from None


class WorkflowNotFoundError(PlaitError, LookupError):
    """A workflow or graph name that this app does not register."""

    def __init__(self, name: str, known: list[str] | None = None) -> None:
        hint = f" (registered: {', '.join(sorted(known))})" if known else ""
        super().__init__(f"unknown workflow {name!r}{hint}")
        self.name = name


class FunctionNotFoundError(PlaitError, LookupError):
    """A function name that this app does not register."""

    def __init__(self, name: str) -> None:
        super().__init__(f"unknown function {name!r}")
        self.name = name


class RunNotFoundError(PlaitError, LookupError):
    def __init__(self, run_id: str) -> None:
        super().__init__(f"no run with id {run_id!r}")
        self.run_id = run_id


class ScheduleNotFoundError(PlaitError, LookupError):
    def __init__(self, name: str) -> None:
        super().__init__(f"no schedule named {name!r}")
        self.name = name


class ScheduleChangedError(PlaitError):
    """``create_schedule(..., replaces=...)`` found another schedule of that name stored
    than the one the caller decided on (another caller stored it meanwhile): nothing was
    stored; read it again and decide again."""

    def __init__(self, name: str) -> None:
        super().__init__(f"schedule {name!r} changed since it was read: nothing was stored")
        self.name = name


class RunStateError(PlaitError):
    """An action that the run's current status does not allow (HTTP 409)."""

    def __init__(self, run_id: str, status: str, action: str, hint: str | None = None) -> None:
        said = f"; {hint}" if hint else ""
        super().__init__(f"cannot {action} run {run_id!r}: it is {status}{said}")
        self.run_id = run_id
        self.status = status
        self.action = action


class RunIdTakenError(PlaitError, ValueError):
    """``start(run_id=...)`` with the id of a run of another workflow: the id is an
    idempotency key, so handing back that run would silently start nothing (HTTP 409).
    Also ``fork(..., run_id=...)`` with the id of any run: a fork is always a new run."""

    def __init__(self, run_id: str, workflow: str, wanted: str) -> None:
        if workflow == wanted:  # a fork: a run of its own workflow holds the id
            message = f"run id {run_id!r} is already used by another run"
        else:
            message = (
                f"run id {run_id!r} is already used by a run of workflow {workflow!r}, "
                f"not {wanted!r}"
            )
        super().__init__(message)
        self.run_id = run_id
        self.workflow = workflow


class StepFunctionMismatchError(PlaitError):
    """A job that names another function than the step was created with."""


class _RunEndedError(PlaitError):
    """Raised by ``Engine.run`` when the run ended some other way than ``completed``."""

    def __init__(self, run: Run, message: str) -> None:
        super().__init__(message)
        self.run = run


class WorkflowFailedError(_RunEndedError):
    def __init__(self, run: Run) -> None:
        err = run.error or {}
        super().__init__(run, f"run {run.id} failed: {err.get('message', 'unknown error')}")


class WorkflowCancelledError(_RunEndedError):
    def __init__(self, run: Run) -> None:
        err = run.error or {}
        super().__init__(run, f"run {run.id} was cancelled: {err.get('message', '')}".rstrip(": "))


class WorkflowSuspendedError(_RunEndedError):
    def __init__(self, run: Run) -> None:
        err = run.error or {}
        super().__init__(run, f"run {run.id} is suspended: {err.get('message', '')}".rstrip(": "))


class WorkflowNeedsAttentionError(_RunEndedError):
    """The run waits ``needs_attention``: a step with ``on_exhausted="park"`` failed its
    last attempt. Not ended: ``Engine.retry`` lets it go on, ``Engine.cancel`` ends it."""

    def __init__(self, run: Run) -> None:
        err = run.error or {}
        step = f" at step {err['step']!r}" if err.get("step") else ""
        message = err.get("message", "unknown error")
        super().__init__(run, f"run {run.id} needs attention{step}: {message}")


class StepError(PlaitError):
    """A step failed after its last attempt; raised inside the workflow at ``wf.do``.

    It carries the stored error record so user code can branch on ``code`` or ``type``,
    and so an uncaught one fails the run with the step's own error.
    """

    def __init__(self, step_key: str, error: dict[str, Any]) -> None:
        super().__init__(f"step {step_key!r} failed: {error.get('message', 'unknown error')}")
        self.step_key = step_key
        self.error = error
        self.code = error.get("code")


class NonRetryableError(PlaitError):
    """Raise in a step body to fail the step at once: no further attempt, no back-off,
    whatever retries are left. Its ``on_error`` handler still runs, and the step's error
    record says ``"retryable": false``. ``code`` is stored as the error's code."""

    retryable = False

    def __init__(self, message: str = "", *, code: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.code = code


class StepTimeoutError(PlaitError, TimeoutError):
    def __init__(self, step_key: str, seconds: float) -> None:
        super().__init__(f"step {step_key!r} timed out after {seconds:g}s")
        self.code = STEP_TIMEOUT


class NotJSONError(PlaitError, TypeError):
    """A value that plait must store is not JSON; nothing is ever pickled instead."""

    def __init__(self, what: str, detail: str) -> None:
        super().__init__(f"{what} is not JSON-serialisable: {detail}")
        self.code = NOT_JSON


class TypeMismatchError(PlaitError, TypeError):
    """A value does not fit the annotation it comes back as (a step result and the
    function's return annotation, a run's output and the workflow's). Checked before the
    value is stored, so a replay never meets a value that cannot be decoded; never
    retried, since the same body would return the same kind of value."""

    retryable = False

    def __init__(self, what: str, expected: str, problems: str) -> None:
        super().__init__(f"{what} does not fit its annotation {expected}: {problems}")
        self.what = what
        self.expected = expected
        self.code = TYPE_MISMATCH


class InputValidationError(PlaitError, ValueError):
    """The data given to a function or a workflow does not fit its annotation. Never
    retried: the same input would fail the same way."""

    code = INVALID_INPUT
    retryable = False


class PayloadTooLargeError(PlaitError, ValueError):
    """A JSON value plait would store is bigger than the engine's ``max_payload``.

    Inputs, outputs, events and state values all count against the one limit, so no
    single value can take a server's memory or a reader's bandwidth. A step whose result
    is too large fails at once: another attempt would only produce it again."""

    retryable = False

    def __init__(self, what: str, size: int, limit: int) -> None:
        super().__init__(
            f"{what} is {_size(size)}, over the limit max_payload ({_size(limit)} = {limit} bytes)"
        )
        self.what = what
        self.size = size
        self.limit = limit
        self.code = PAYLOAD_TOO_LARGE


class PayloadTooDeepError(PlaitError, ValueError):
    """A JSON value nested deeper than plait stores (64 levels of arrays and objects):
    deeper values break JSON readers and writers far from where they came in."""

    retryable = False

    def __init__(self, what: str, limit: int) -> None:
        super().__init__(f"{what} is nested deeper than {limit} levels of arrays and objects")
        self.what = what
        self.limit = limit
        self.code = PAYLOAD_TOO_DEEP


class GraphOwnerError(PlaitError, PermissionError):
    """A graph name that the registering user may not change: it belongs to the app's
    code, or another user registered it first."""

    def __init__(self, name: str, reason: str) -> None:
        super().__init__(f"graph {name!r} {reason}")
        self.name = name


class EventTimeout(PlaitError, TimeoutError):
    """``wf.wait_for_event`` saw no event before its timeout."""

    def __init__(self, name: str, step_key: str) -> None:
        super().__init__(f"no event {name!r} arrived before the timeout (step {step_key!r})")
        self.name = name
        self.code = EVENT_TIMEOUT


class RequestTimeout(PlaitError, TimeoutError):
    """``wf.wait_for_request`` saw no request before its timeout."""

    def __init__(self, name: str, step_key: str) -> None:
        super().__init__(f"no request {name!r} arrived before the timeout (step {step_key!r})")
        self.name = name
        self.code = REQUEST_TIMEOUT


class RequestRefused(PlaitError):
    """The workflow refused the request (``req.refuse(reason)``); ``reason`` is what it
    said (HTTP 409)."""

    def __init__(self, run_id: str, name: str, reason: str) -> None:
        super().__init__(f"run {run_id!r} refused request {name!r}: {reason}")
        self.run_id = run_id
        self.name = name
        self.reason = reason
        self.code = REQUEST_REFUSED


class Cancel(Exception):
    """Raise inside a workflow to end its run ``cancelled`` with this reason."""

    def __init__(self, reason: str = "cancelled") -> None:
        super().__init__(reason)
        self.reason = reason


class LeaseLostError(PlaitError):
    """This process no longer holds the lease it needs; another worker took over."""


class RunEndedElsewhereError(PlaitError):
    """The run ended in another process (a cancel) while this process's pass still held
    it. The pass's batch was committed, except the start of the attempt it was about to
    run: no step starts in an ended run, so the pass must stop before that step's body."""


def _size(n: int) -> str:
    """``1048576`` -> ``1 MiB``: sizes in messages people read."""
    for unit, scale in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= scale:
            return f"{n / scale:.3g} {unit}"
    return f"{n} bytes"


APPROVAL_FORBIDDEN = "APPROVAL_FORBIDDEN"
APPROVAL_RESOLVED = "APPROVAL_RESOLVED"
APPROVAL_INVALID = "APPROVAL_INVALID"


class ValidationError(PlaitError, ValueError):
    """Data that does not fit the schema it was sent for (an approval's decision, a
    request's data).
    ``problems`` lists every problem as ``{"field": "a.b", "message": ...}``."""

    def __init__(
        self, what: str, problems: list[dict[str, str]], *, code: str = APPROVAL_INVALID
    ) -> None:
        listed = "; ".join(f"{p['field'] or '(root)'}: {p['message']}" for p in problems)
        super().__init__(f"{what} is invalid: {listed}")
        self.problems = problems
        self.code = code


class ApprovalForbiddenError(PlaitError, PermissionError):
    """The gate's approver policy does not let this user decide it (HTTP 403)."""

    def __init__(self, run_id: str, name: str, user: str | None, policy: Any) -> None:
        who = f"user {user!r}" if user is not None else "an anonymous decider"
        super().__init__(
            f"{who} may not decide approval {name!r} of run {run_id!r} (approvers: {policy!r})"
        )
        self.run_id = run_id
        self.name = name
        self.user = user
        self.code = APPROVAL_FORBIDDEN


class ApprovalResolvedError(PlaitError):
    """The gate was already decided or expired; the decision was not taken (HTTP 409).
    ``outcome`` is what the gate ended with: ``decided`` or ``expired``."""

    def __init__(self, run_id: str, name: str, outcome: str) -> None:
        super().__init__(f"approval {name!r} of run {run_id!r} is already {outcome}")
        self.run_id = run_id
        self.name = name
        self.outcome = outcome
        self.code = APPROVAL_RESOLVED


class GateClosedError(PlaitError):
    """A pass's write met an approval gate (or a held decision) that changed since the
    pass read it: the batch is not written and the run is replayed from what is stored."""


class EventNotStoredError(PlaitError):
    """A pass's write sends an event (``wf.send_event``) to a run that has ended, or no
    longer exists, since the pass read it: the store takes no event, and writes nothing
    of the batch, so the pass can fail the send (``EVENT_NOT_SENT``) instead of telling
    the workflow it was sent."""


class ValueNotSetError(PlaitError, LookupError):
    """``engine.get_value(..., wait=True)`` on a run that ended without publishing it."""

    def __init__(self, run_id: str, key: str, status: str) -> None:
        super().__init__(f"run {run_id!r} is {status} and never published a value {key!r}")
        self.run_id = run_id
        self.key = key
