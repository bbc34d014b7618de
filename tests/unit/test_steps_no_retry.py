"""The step state machine and the attempt runner on errors that will not get better: a
failure whose record says ``"retryable": false`` fails the step for good with retries
left, whichever process built its outcome. No database."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest

import plait
from plait.context import StepContext
from plait.runtime import steps
from plait.runtime.attempt import Outcome, run_attempt

from .rows import T0, shape, step

NOW = T0 + 10
RETRIES_LEFT = {"status": "running", "attempts": 1, "retries": 3, "retry_delay": 5.0}
#: an outcome decided in another process: only its error record says it is final
RECORDED = Outcome(
    ok=False, error={"message": "no", "type": "Declined", "code": None, "retryable": False}
)
FINAL = Outcome(
    ok=False, error={"message": "no", "type": "Declined", "code": None}, retryable=False
)
AGAIN = Outcome(ok=False, error={"message": "down", "type": "Outage", "code": None})

#: (case, the step before, the outcome, its status after, the writes)
CASES: list[tuple[str, dict[str, Any], Outcome, str, Any]] = [
    ("an error record that says not retryable", RETRIES_LEFT, RECORDED, "failed", None),
    ("an outcome that says not retryable", RETRIES_LEFT, FINAL, "failed", None),
    (
        "a job step's error record that says not retryable",
        {**RETRIES_LEFT, "queued": True},
        RECORDED,
        "failed",
        None,
    ),
    ("a retryable failure with retries left", RETRIES_LEFT, AGAIN, "scheduled", "SetTimer"),
]


@pytest.mark.parametrize(
    ("before", "outcome", "status", "then"), [c[1:] for c in CASES], ids=[c[0] for c in CASES]
)
def test_end_attempt_reads_retryable_from_the_outcome_and_its_record(
    before: dict[str, Any], outcome: Outcome, status: str, then: str | None
) -> None:
    row = step(**before)
    ops = steps.end_attempt(row, outcome, NOW)
    assert row.status == status
    writes = [("FinishAttempt", "failed")] + ([(then, "retry")] if then else [])
    assert shape(ops) == writes
    stored = json.loads(row.error or "{}")
    assert stored.get("retryable") is (None if then else False)


def test_a_final_outcome_records_retryable_false() -> None:
    assert FINAL.error and FINAL.error["retryable"] is False
    assert AGAIN.error and "retryable" not in AGAIN.error
    assert steps.retryable(AGAIN) and not steps.retryable(RECORDED)


class Declined(Exception):
    pass


def _raises(exc: Exception) -> Callable[[], Any]:
    def body() -> Any:
        raise exc

    return body


#: (case, what the body raises, no_retry_on, retryable)
ATTEMPTS: list[tuple[str, Exception, tuple[type[BaseException], ...], bool]] = [
    ("NonRetryableError", plait.NonRetryableError("no"), (), False),
    ("a class in no_retry_on", Declined("no"), (Declined,), False),
    ("a subclass of one", Declined("no"), (Exception,), False),
    ("a class not in it", KeyError("no"), (Declined,), True),
    ("no no_retry_on", Declined("no"), (), True),
]


@pytest.mark.parametrize(
    ("raised", "no_retry_on", "retryable"), [c[1:] for c in ATTEMPTS], ids=[c[0] for c in ATTEMPTS]
)
async def test_an_attempt_decides_retryable_from_the_exceptions_class(
    raised: Exception, no_retry_on: tuple[type[BaseException], ...], retryable: bool
) -> None:
    ctx = StepContext(run_id="r", step_key="s", invocation_id="i", attempt=1, workflow="w")
    outcome = await run_attempt(_raises(raised), None, ctx, None, None, no_retry_on)
    assert not outcome.ok and outcome.retryable is retryable
    assert outcome.error and outcome.error.get("retryable", True) is retryable
