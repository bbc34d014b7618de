"""OpenTelemetry spans for runs, passes and attempts (the ``otel`` extra).

Only ``opentelemetry-api`` is needed: spans go to whatever tracer provider the
application configured (none: the API's no-op). Imported only by an engine started with
``tracing=True``.

A run lives longer than any process, so it cannot be one open span. Instead:

* ``plait.run``: made by ``engine.start`` inside the caller's current span. Its context
  is stored with the run (the W3C ``traceparent`` carrier, as JSON).
* ``plait.pass``: each orchestrator pass, in whichever process and after however many
  restarts, is a child of the stored context.
* ``plait.step``: each attempt: inside its pass, or, for a job step run by a step
  worker, a child of the stored context. A child run stores the context of the pass
  that started it, so its spans join the same trace.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Generator
from contextvars import Token
from typing import TYPE_CHECKING, Any

from plait.errors import extra_needed
from plait.store.rows import RunRow, StepRow

with extra_needed("otel", "tracing (OpenTelemetry spans)"):
    from opentelemetry import context, propagate, trace
    from opentelemetry.context import Context
    from opentelemetry.trace import Status, StatusCode

if TYPE_CHECKING:
    from plait.runtime.attempt import Outcome

_TRACER_NAME = "plait"
#: the API's stand-ins while the application has configured no tracer provider
_NO_PROVIDERS = (trace.ProxyTracerProvider, trace.NoOpTracerProvider)


class Tracing:
    """Spans through the global tracer provider. The API's tracer follows the provider
    set later (a proxy until then), so one configured after the engine opened is used."""

    def __init__(self) -> None:
        self._tracer = trace.get_tracer(_TRACER_NAME)
        #: whether the application has configured a tracer provider, as the last pass
        #: found it (asking the API reads the environment: too slow for every step)
        self._configured = False

    def run_created(self, run_id: str, workflow: str) -> str | None:
        attributes = {"plait.run_id": run_id, "plait.workflow": workflow}
        with self._tracer.start_as_current_span("plait.run", attributes=attributes):
            return self.current()

    def current(self) -> str | None:
        """The current context as a stored carrier, or None outside any span."""
        if not trace.get_current_span().get_span_context().is_valid:
            return None
        carrier: dict[str, str] = {}
        propagate.inject(carrier)
        return json.dumps(carrier, separators=(",", ":"), sort_keys=True)

    @contextlib.contextmanager
    def pass_span(self, run: RunRow) -> Generator[Any, None, None]:
        attributes = {"plait.run_id": run.id, "plait.workflow": run.workflow}
        self._configured = not isinstance(trace.get_tracer_provider(), _NO_PROVIDERS)
        with self._tracer.start_as_current_span(
            "plait.pass", context=_restore(run.trace), attributes=attributes
        ) as span:
            yield span

    def pass_outcome(self, span: Any, status: str | None) -> None:
        """A pass that failed its run (or was cut short) has error status."""
        span.set_attribute("plait.run_status", status or "interrupted")
        if status is None or status == "failed":
            span.set_status(Status(StatusCode.ERROR, f"run {status or 'pass interrupted'}"))

    def begin_step(
        self, run_id: str, workflow: str, trace_context: str | None, step: StepRow
    ) -> _StepSpan | None:
        """Start the attempt's span and make it current: a child of the current span
        (its pass), or with ``trace_context`` (a job step in a step worker, outside
        any pass) of the run's stored context. Started and attached by hand: it runs
        once per attempt.

        None when no tracer provider was configured at the start of the pass the step runs
        in: the API's span would only repeat the pass's context, which is current already."""
        if trace_context is None and not self._configured:
            return None
        attributes: dict[str, Any] = {
            "plait.run_id": run_id,
            "plait.workflow": workflow,
            "plait.step_key": step.key,
            "plait.attempt": step.attempts,
            "plait.invocation_id": step.invocation_id,
        }
        if step.function:
            attributes["plait.function"] = step.function
        span = self._tracer.start_span(
            "plait.step",
            context=_restore(trace_context),
            attributes=attributes,
        )
        token = context.attach(trace.set_span_in_context(span))
        return _StepSpan(span, token)

    def end_step(self, started: _StepSpan, outcome: Outcome | None) -> None:
        span = started.span
        if outcome is None:
            span.set_status(Status(StatusCode.ERROR, "interrupted"))
        elif not outcome.ok:
            error = outcome.error or {}
            span.set_status(Status(StatusCode.ERROR, str(error.get("message", "failed"))))
            span.set_attribute("plait.error_type", str(error.get("type", "")))
        context.detach(started.token)
        span.end()


class _StepSpan:
    __slots__ = ("span", "token")

    def __init__(self, span: Any, token: Token[Context]) -> None:
        self.span = span
        self.token = token


def _restore(carrier: str | None) -> context.Context | None:
    """The context stored with a run, or None (a new trace) when there is none."""
    if not carrier:
        return None
    try:
        return propagate.extract(json.loads(carrier))
    except (ValueError, TypeError):
        return None


__all__ = ["Tracing"]
