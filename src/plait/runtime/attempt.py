"""Running one attempt of a step body, the same way inline and as a job."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
from collections.abc import Callable
from typing import Any, cast

from plait import serde
from plait.app import FinishedAfterCancel, FunctionDef, call_maybe_async, data_param, wants_data
from plait.cancel_guard import uncancelled
from plait.context import CURRENT_STEP, StepContext
from plait.errors import NotJSONError, StepTimeoutError, TypeMismatchError
from plait.retry import NoRetryOn
from plait.runtime.control_flow import PauseSignal, SuspendSignal

#: ``Outcome.value`` of an outcome whose value was not decoded (no annotation to decode by)
NOT_DECODED: Any = object()


@dataclasses.dataclass
class Outcome:
    ok: bool
    output: str | None = None
    error: dict[str, Any] | None = None
    #: False for failures that would only repeat (bad input, a result that is not JSON)
    retryable: bool = True
    #: a success's result decoded from ``output`` as the body's annotation names
    value: Any = NOT_DECODED

    def __post_init__(self) -> None:
        # a failure that is not retried says so in its stored record
        if not self.ok and not self.retryable and self.error is not None:
            self.error = {**self.error, "retryable": False}


async def run_attempt(
    body: FunctionDef | Callable[..., Any],
    data: Any,
    ctx: StepContext,
    timeout: float | None,
    limits: serde.Limits | None = None,
    no_retry_on: NoRetryOn | None = None,
) -> Outcome:
    """Call the body once (``_call_body``), with ``plait.current_step()`` answering
    ``ctx`` inside it. What the body wrote to streams is committed before the attempt
    ends, so a ``reset`` of a failed attempt follows all its entries: a success whose
    entries cannot be written fails (and is retried)."""
    token = CURRENT_STEP.set(ctx)
    try:
        outcome = await _call_body(body, data, ctx, timeout, limits, no_retry_on)
    except BaseException:
        if ctx._streamed:  # pyright: ignore[reportPrivateUsage]
            # interrupted: what it wrote is committed before the interruption is (the
            # cancel that interrupts it is the one raised here, whatever comes meanwhile)
            with contextlib.suppress(asyncio.CancelledError):
                await _flush_streams(ctx)
        raise
    finally:
        CURRENT_STEP.reset(token)
        ctx._ended = True  # pyright: ignore[reportPrivateUsage]
    if ctx._streamed:  # pyright: ignore[reportPrivateUsage]
        error = await _flush_streams(ctx)
        if error is not None and outcome.ok:
            return _failed(error)
    return outcome


async def _flush_streams(ctx: StepContext) -> BaseException | None:
    """Wait for the attempt's stream entries to commit (a cancel of the caller waits for
    that too); the error that kept them out, if any."""
    sink = ctx._streams  # pyright: ignore[reportPrivateUsage]
    if sink is None:
        return None
    try:
        await uncancelled(sink.flush(ctx.run_id))
    except Exception as exc:
        return exc
    return None


async def _call_body(
    body: FunctionDef | Callable[..., Any],
    data: Any,
    ctx: StepContext,
    timeout: float | None,
    limits: serde.Limits | None = None,
    no_retry_on: NoRetryOn | None = None,
) -> Outcome:
    """Call the body once; never raises except for cancellation.

    At ``timeout`` the body is cancelled and the attempt fails with ``STEP_TIMEOUT``. A
    sync body runs in a thread, which cannot be stopped: its attempt ends (timed out, its
    result discarded) only when the thread returns, so that no next attempt ever runs
    beside it. An exception of a class in ``no_retry_on`` (by default the function's
    own) fails the attempt for good, as a ``NonRetryableError`` does."""

    if no_retry_on is None:
        no_retry_on = body.no_retry_on if isinstance(body, FunctionDef) else ()
    call = body.invoke(data, ctx) if isinstance(body, FunctionDef) else _call_closure(body, data)
    deadline = None if timeout is None else asyncio.timeout(timeout)
    try:
        try:
            if deadline is None:
                result = await call
            else:
                try:
                    async with deadline:
                        result = await call
                    if deadline.expired():
                        # the body caught the deadline's cancel and returned after it:
                        # timed out all the same, its late result discarded
                        raise StepTimeoutError(ctx.step_key, timeout or 0.0)
                except TimeoutError:
                    if not deadline.expired():
                        raise  # the body's own TimeoutError: an ordinary failure
                    raise StepTimeoutError(ctx.step_key, timeout or 0.0) from None
        except FinishedAfterCancel as finished:
            if deadline is not None and deadline.expired():
                raise StepTimeoutError(ctx.step_key, timeout or 0.0) from None
            # cancelled from outside after all: the caller records what the body did
            if finished.error is not None:
                finished.outcome = _failed(finished.error, no_retry_on)
            else:
                finished.outcome = _finished(finished.result, ctx, limits, result_codec(body))
            raise
    except (PauseSignal, SuspendSignal):
        raise RuntimeError(
            f"step {ctx.step_key!r} called a workflow method inside a step body; "
            "call wf.do/wf.sleep from the workflow, not from inside a step"
        ) from None
    except asyncio.CancelledError as exc:
        task = asyncio.current_task()
        if isinstance(exc, FinishedAfterCancel) or task is None or task.cancelling():
            raise  # a stop or a cancel of this task: the caller tells which
        # nobody cancelled this task: the body raised it (a client library whose own
        # inner task was cancelled), a failure like any other. Taken for an interruption
        # it would use up no attempt and run again at once, for ever
        return _failed(exc, no_retry_on)
    except Exception as exc:
        return _failed(exc, no_retry_on)
    return _finished(result, ctx, limits, result_codec(body))


def _finished(
    result: Any, ctx: StepContext, limits: serde.Limits | None, codec: serde.Codec | None
) -> Outcome:
    """A success, stored as JSON. With an annotation the stored text is decoded here,
    before it is stored, so the workflow sees on this first run exactly what every
    replay will decode, and a result that breaks the annotation fails the step now
    rather than every replay after it."""
    try:
        what = f"the result of step {ctx.step_key!r}"
        output = serde.dumps(result, what=what, limits=limits)
        if codec is None:
            return Outcome(True, output)
        return Outcome(True, output, value=codec.decode(output, what))
    except Exception as exc:
        return _failed(exc)


def result_codec(body: FunctionDef | Callable[..., Any]) -> serde.Codec | None:
    """How the body's results come back: its return annotation, or JSON (None)."""
    if isinstance(body, FunctionDef):
        return body.result_codec
    return serde.result_codec(body, "a step closure")


def _failed(exc: BaseException, no_retry_on: NoRetryOn = ()) -> Outcome:
    return Outcome(ok=False, error=serde.error_record(exc), retryable=_retryable(exc, no_retry_on))


def _retryable(exc: BaseException, no_retry_on: NoRetryOn) -> bool:
    """A body that fans out (a TaskGroup, ``gather``) raises a group: one branch that says
    no retry makes the whole attempt final, as it would have alone."""
    if isinstance(exc, BaseExceptionGroup):
        group = cast("BaseExceptionGroup[BaseException]", exc)
        return all(_retryable(inner, no_retry_on) for inner in group.exceptions)
    return bool(getattr(exc, "retryable", True)) and not isinstance(
        exc, (NotJSONError, TypeMismatchError, *no_retry_on)
    )


async def _call_closure(fn: Callable[..., Any], data: Any) -> Any:
    if wants_data(data_param(fn), data):
        return await call_maybe_async(fn, data)
    return await call_maybe_async(fn)


def finished_on_stop(exc: BaseException, cancelled: bool) -> Outcome | None:
    """What a sync body did when its thread returned after a stop (not a cancel of its
    run) cut its task short: recorded, so a body that ran to its end never runs again."""
    if isinstance(exc, FinishedAfterCancel) and not cancelled:
        return exc.outcome if isinstance(exc.outcome, Outcome) else None
    return None
