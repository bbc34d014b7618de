"""Control flow of a pass: the exceptions that stop a step, the workflow's code or the
whole pass (a pause, a suspend, an aborted pass, an unwind). They derive from
``BaseException`` so that a user's ``except Exception:`` around a step can never swallow
them and run the fallback branch while the real step is still in flight."""

from __future__ import annotations


class PauseSignal(BaseException):
    """The run can go no further in this pass (a timer, a job step, a child run)."""

    def __init__(self, key: str, until: float | None = None) -> None:
        super().__init__(f"paused at step {key!r}")
        self.key = key
        self.until = until


class SuspendSignal(BaseException):
    """The run must stop ``suspended`` until someone calls ``resume``."""

    def __init__(self, message: str, code: str) -> None:
        super().__init__(message)
        self.message = message
        self.code = code


class ParkSignal(SuspendSignal):
    """A step that parks on exhausted retries (``on_exhausted="park"``) failed its last
    attempt: the run stops ``needs_attention`` with the step's error (``error``, a stored
    error record) instead of handing the failure to the workflow. It waits as a suspend
    waits, so the pass handles it wherever it handles one."""

    def __init__(self, key: str, error: str | None) -> None:
        super().__init__(
            f"step {key!r} failed its last attempt and waits for a retry or a cancel",
            "NEEDS_ATTENTION",
        )
        self.key = key
        self.error = error


class PassAborted(BaseException):
    """The store failed under this pass (a lost lease, a database that went away). The
    pass stops without recording an outcome; the run is retried by whoever holds it next,
    never failed because of the database."""

    def __init__(self, cause: BaseException) -> None:
        super().__init__(f"orchestrator pass aborted: {cause}")
        self.cause = cause


class Unwind(BaseException):
    """Raised by a step taken while a pass unwinds the workflow's code (a ``finally`` or
    ``async with`` exit reached because the pass is ending, not because the code got
    there). Nothing is recorded; the step is taken for real when the run gets there."""

    def __init__(self) -> None:
        super().__init__("the pass is ending; this step is taken when the run gets here")


class StepCancelled(BaseException):
    """The workflow cancelled the task awaiting a step: its cancel is recorded (the
    pass side of the step raises this once it has written it, or the pass wrote it
    itself while the body ran on), and nothing the step does is recorded after it."""

    def __init__(self, key: str) -> None:
        super().__init__(f"step {key!r} was cancelled by the workflow")
        self.key = key
