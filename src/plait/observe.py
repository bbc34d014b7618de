"""What a run does, told to traces, metrics and logs: the seam the runtime reports through.

A pass, an attempt and a worker report the moments of a run's life to one ``Telemetry``
object: a run started, a pass began, an attempt began and how it ended, a run ended, a
timer fired, a step was taken over from a worker that died. ``Telemetry`` fans them out to
what is switched on: OpenTelemetry spans (``plait.tracing``, extra ``otel``), Prometheus
metrics (``plait.metrics``, extra ``metrics``) and lines on the ``plait.worker`` logger
(INFO; a failed attempt at WARNING and a failed run at ERROR, with the error's type,
message and traceback). With none of them on, an engine has no ``Telemetry`` at all (``None``), the
runtime skips every report with one ``is None`` test, and neither library is imported.

Counts come from what this process did, never from what a replay read back: an attempt is
counted when its body ran here, a run when a pass here ended it.
"""

from __future__ import annotations

import contextlib
import contextvars
import json
import logging
import time
from collections.abc import Generator
from typing import TYPE_CHECKING, Any, cast

from plait.store.rows import RunRow, StepRow

if TYPE_CHECKING:
    from plait.metrics import Metrics
    from plait.runtime.attempt import Outcome
    from plait.tracing import Tracing

log = logging.getLogger("plait.worker")


class _StoredTraceback(logging.Filter):
    """Gives a line about a failure the traceback its error record stored (passed as
    ``extra={"error_traceback": ...}``) as the record's exception text, which every
    ``logging.Formatter`` prints after the message like a live exception's."""

    def filter(self, record: logging.LogRecord) -> bool:
        text = record.__dict__.get("error_traceback")
        if text and not record.exc_info and not record.exc_text:
            record.exc_text = str(text).rstrip("\n")
        return True


log.addFilter(_StoredTraceback())

#: the run, its workflow, the step and the attempt the current task works on, for every
#: log line it writes (``plait.logs``): set around passes and attempts whenever telemetry
#: is on
WORKING_ON: contextvars.ContextVar[tuple[str, str | None, str | None, int | None] | None] = (
    contextvars.ContextVar("plait_working_on", default=None)
)


def _error_text(error: dict[str, Any] | None) -> tuple[str, dict[str, Any]]:
    """``": Type: message"`` for a log line about a failure, and the ``extra`` that gives
    the line the error's stored traceback."""
    if not error:
        return "", {}
    kind, message = error.get("type"), error.get("message")
    text = ": " + ": ".join(str(part) for part in (kind, message) if part)
    if error.get("code") and error.get("code") != kind:
        text += f" [{error['code']}]"
    traceback = error.get("traceback")
    return text, ({"error_traceback": traceback} if traceback else {})


def _decode_error(error: str | dict[str, Any] | None) -> dict[str, Any] | None:
    if error is None or isinstance(error, dict):
        return error
    try:
        decoded: Any = json.loads(error)
    except ValueError:
        return {"message": error}
    if isinstance(decoded, dict):
        return cast(dict[str, Any], decoded)
    return {"message": str(decoded)}


class Telemetry:
    """The reports of one engine or worker process; see the module docstring."""

    def __init__(
        self,
        *,
        tracing: Tracing | None = None,
        metrics: Metrics | None = None,
        log_work: bool = False,
    ) -> None:
        self.tracing = tracing
        self.metrics = metrics
        #: log attempts, retries, timer fires and takeovers at INFO (``plait worker``)
        self.log_work = log_work

    # -- runs ---------------------------------------------------------------------------------
    def run_created(self, run_id: str, workflow: str) -> str | None:
        """A run is being started: the trace context to store with it (None: untraced)."""
        if self.tracing is None:
            return None
        return self.tracing.run_created(run_id, workflow)

    def child_trace(self, inherited: str | None) -> str | None:
        """The trace context a child run started now stores: the current span's (the
        parent's pass), else the parent's own."""
        if self.tracing is None:
            return inherited
        return self.tracing.current() or inherited

    def run_ended(
        self,
        run_id: str,
        workflow: str,
        status: str,
        error: str | dict[str, Any] | None = None,
    ) -> None:
        """A pass (or a cancel) of this process moved the run to ``status``; ``error`` is
        its stored error (JSON text or decoded), logged with a failure."""
        if self.metrics is not None:
            self.metrics.run_ended(workflow, status)
        if not self.log_work:
            return
        extra: dict[str, Any] = {"run_id": run_id, "workflow": workflow}
        if status == "failed":
            text, more = _error_text(_decode_error(error))
            log.error(
                "run %s (%s) is now failed%s", run_id, workflow, text, extra={**extra, **more}
            )
        elif status == "needs_attention":
            record = _decode_error(error)
            text, more = _error_text(record)
            log.error(
                "run %s (%s) is parked needs_attention: step %r failed its last attempt "
                "(plait retry %s gives it a new budget, plait cancel %s ends the run)%s",
                run_id,
                workflow,
                (record or {}).get("step", "?"),
                run_id,
                run_id,
                text,
                extra={**extra, **more},
            )
        else:
            log.info("run %s (%s) is now %s", run_id, workflow, status, extra=extra)

    @contextlib.contextmanager
    def passing(self, run: RunRow) -> Generator[PassReport, None, None]:
        """Around one orchestrator pass of ``run``; the worker tells the report how the
        run stands after it."""
        report = PassReport()
        token = WORKING_ON.set((run.id, run.workflow, None, None))
        try:
            if self.tracing is None:
                yield report
            else:
                with self.tracing.pass_span(run) as span:
                    try:
                        yield report
                    finally:
                        self.tracing.pass_outcome(span, report.status)
        finally:
            WORKING_ON.reset(token)

    # -- attempts -----------------------------------------------------------------------------
    def attempting(
        self, run_id: str, workflow: str, trace: str | None, step: StepRow
    ) -> AttemptReport:
        """Around one attempt's body (``with telemetry.attempting(...) as report``); the
        caller hands the attempt's outcome to the report. ``trace`` is the run's stored
        context for an attempt outside any pass (a job step); None inside a pass, whose
        span is the parent."""
        return AttemptReport(self, run_id, workflow, trace, step)

    def log_attempt(
        self, step: StepRow, status: str, took: float, error: dict[str, Any] | None = None
    ) -> None:
        """An attempt's end: INFO, or WARNING with the error's type, message and
        traceback when it failed (whether or not a retry follows)."""
        if status != "failed":
            log.info("step %s attempt %d %s after %.3fs", step.key, step.attempts, status, took)
            return
        text, extra = _error_text(error)
        if step.status == "scheduled":
            log.warning(
                "step %s attempt %d failed after %.3fs; retry %d of %d at %s%s",
                step.key,
                step.attempts,
                took,
                step.failures - step.retried_failures,
                step.retries,
                _when(step.wake_at),
                text,
                extra=extra,
            )
        else:
            log.warning(
                "step %s attempt %d failed after %.3fs%s",
                step.key,
                step.attempts,
                took,
                text,
                extra=extra,
            )

    def taken_over(self, run_id: str, step: StepRow) -> None:
        """An attempt of ``step`` was in flight in a worker that lost its lease (it died,
        or stalled past it); this process runs the next one."""
        if self.metrics is not None:
            self.metrics.takeover()
        if self.log_work:
            log.info(
                "run %s: took over step %s after attempt %d was lost with its worker",
                run_id,
                step.key,
                step.attempts,
                extra={"run_id": run_id, "step": step.key, "attempt": step.attempts},
            )

    def timer_fired(self, run_id: str, key: str, what: str) -> None:
        """A durable timer of a run fired in a pass of this process: a sleep ended, an
        event wait timed out, an approval expired."""
        if self.log_work:
            log.info(
                "run %s: %s %s fired", run_id, what, key, extra={"run_id": run_id, "step": key}
            )


class PassReport:
    """How the run stands after a pass (``running`` while it waits)."""

    __slots__ = ("status",)

    def __init__(self) -> None:
        self.status: str | None = None


class AttemptReport:
    """One attempt's report, a context manager around its body (a class rather than a
    generator: it runs once per attempt)."""

    __slots__ = (
        "_began",
        "_span",
        "_token",
        "outcome",
        "run_id",
        "step",
        "telemetry",
        "trace",
        "workflow",
    )

    def __init__(
        self, telemetry: Telemetry, run_id: str, workflow: str, trace: str | None, step: StepRow
    ) -> None:
        self.telemetry = telemetry
        self.run_id = run_id
        self.workflow = workflow
        self.trace = trace
        self.step = step
        #: how the attempt ended; None if it was cut short
        self.outcome: Outcome | None = None
        self._span: Any = None

    def __enter__(self) -> AttemptReport:
        telemetry, step = self.telemetry, self.step
        self._token = WORKING_ON.set((self.run_id, self.workflow, step.key, step.attempts))
        if telemetry.log_work:
            log.info("step %s attempt %d started", step.key, step.attempts)
        if telemetry.tracing is not None:
            self._span = telemetry.tracing.begin_step(self.run_id, self.workflow, self.trace, step)
        self._began = time.perf_counter()
        return self

    def __exit__(self, *exc: object) -> None:
        took = time.perf_counter() - self._began
        telemetry, step = self.telemetry, self.step
        if self._span is not None:
            # a span is begun only when tracing is on
            telemetry.tracing.end_step(self._span, self.outcome)  # type: ignore[union-attr]
        status = self.status()
        if telemetry.metrics is not None:
            telemetry.metrics.attempt_ended(step.function or "(inline)", status, took)
        if telemetry.log_work:
            error = None if self.outcome is None else self.outcome.error
            telemetry.log_attempt(step, status, took, error)
        WORKING_ON.reset(self._token)

    def status(self) -> str:
        if self.outcome is None:
            return "interrupted"
        return "succeeded" if self.outcome.ok else "failed"


class _NoReport:
    """The report of an attempt nobody listens to: a context manager that does nothing
    (cheaper than a branch around the attempt's code)."""

    __slots__ = ("outcome",)
    #: set by the attempt like ``AttemptReport.outcome``, and never read
    outcome: Outcome | None

    def __enter__(self) -> _NoReport:
        return self

    def __exit__(self, *exc: object) -> None:
        return None


#: used in place of ``Telemetry.attempting`` when telemetry is off
NO_REPORT = _NoReport()


def _when(at: float | None) -> str:
    if at is None:
        return "once due"
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(at))


def make_telemetry(*, tracing: bool, metrics: bool, log_work: bool) -> Telemetry | None:
    """The telemetry an engine asked for, or None when nothing is on. The libraries are
    imported here, only when their part is switched on."""
    if not (tracing or metrics or log_work):
        return None
    tracer = None
    if tracing:
        from plait.tracing import Tracing

        tracer = Tracing()
    meter = None
    if metrics:
        from plait.metrics import Metrics

        meter = Metrics()
    return Telemetry(tracing=tracer, metrics=meter, log_work=log_work)


__all__ = [
    "NO_REPORT",
    "WORKING_ON",
    "AttemptReport",
    "PassReport",
    "Telemetry",
    "make_telemetry",
]
