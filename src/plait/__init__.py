"""plait: durable workflows for Python.

A workflow is ordinary async code made of named steps; every step's result is stored, so
after a crash, a restart or a deploy the run replays and goes on where it stopped.
"""

from plait.app import App, FunctionDef, WorkflowDef
from plait.context import StepContext
from plait.engine import Engine
from plait.errors import (
    ApprovalForbiddenError,
    ApprovalResolvedError,
    Cancel,
    EventTimeout,
    FunctionNotFoundError,
    GraphOwnerError,
    InputValidationError,
    MissingExtraError,
    NonRetryableError,
    NotJSONError,
    PayloadTooDeepError,
    PayloadTooLargeError,
    PlaitError,
    RequestRefused,
    RequestTimeout,
    RunIdTakenError,
    RunNotFoundError,
    RunStateError,
    ScheduleNotFoundError,
    StepError,
    StepFunctionMismatchError,
    StepTimeoutError,
    TypeMismatchError,
    ValidationError,
    ValueNotSetError,
    WorkflowCancelledError,
    WorkflowFailedError,
    WorkflowNotFoundError,
    WorkflowSuspendedError,
)
from plait.graph.errors import GraphValidationError
from plait.queues import Queue
from plait.records import (
    Approval,
    ApprovalDecision,
    CheckResult,
    Decision,
    Run,
    RunStatus,
    RunSummary,
    Schedule,
    Step,
    StepAttempt,
    StepStatus,
)
from plait.runtime.workflow import Request, Workflow
from plait.schedules import ScheduleSpec

__version__ = "0.1.0"

__all__ = [
    "App",
    "Approval",
    "ApprovalDecision",
    "ApprovalForbiddenError",
    "ApprovalResolvedError",
    "Cancel",
    "CheckResult",
    "Decision",
    "Engine",
    "EventTimeout",
    "FunctionDef",
    "FunctionNotFoundError",
    "GraphOwnerError",
    "GraphValidationError",
    "InputValidationError",
    "MissingExtraError",
    "NonRetryableError",
    "NotJSONError",
    "PayloadTooDeepError",
    "PayloadTooLargeError",
    "PlaitError",
    "Queue",
    "Request",
    "RequestRefused",
    "RequestTimeout",
    "Run",
    "RunIdTakenError",
    "RunNotFoundError",
    "RunStateError",
    "RunStatus",
    "RunSummary",
    "Schedule",
    "ScheduleNotFoundError",
    "ScheduleSpec",
    "Step",
    "StepAttempt",
    "StepContext",
    "StepError",
    "StepFunctionMismatchError",
    "StepStatus",
    "StepTimeoutError",
    "TypeMismatchError",
    "ValidationError",
    "ValueNotSetError",
    "Workflow",
    "WorkflowCancelledError",
    "WorkflowDef",
    "WorkflowFailedError",
    "WorkflowNotFoundError",
    "WorkflowSuspendedError",
    "__version__",
]
