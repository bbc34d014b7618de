"""What a live run waits on inside itself (``plait.engine.waits.run_wait``), status by
status and step by step, without a database."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from plait.engine.waits import run_wait
from plait.records import RunStatus, RunSummary, Step, StepStatus, WaitingOn

NOW = datetime(2026, 5, 1, 9, 30, tzinfo=UTC)
LATER = NOW + timedelta(hours=2)


def run(status: str, **fields: Any) -> RunSummary:
    return RunSummary(
        id="r1",
        workflow="wf",
        kind="workflow",
        status=RunStatus(status),
        version=None,
        owner=None,
        parent_run_id=None,
        created_at=NOW,
        updated_at=NOW,
        **fields,
    )


def step(kind: str, key: str, status: str = "pending", **fields: Any) -> Step:
    return Step(
        run_id="r1",
        key=key,
        name=key,
        function=None,
        status=StepStatus(status),
        input=fields.pop("input", None),
        output=None,
        error=None,
        attempts=0,
        retries=0,
        invocation_id="i",
        child_run_id=fields.pop("child_run_id", None),
        created_at=NOW,
        updated_at=NOW,
        kind=kind,
        **fields,
    )


@pytest.mark.parametrize(
    ("listed", "steps", "expected"),
    [
        (
            run("queued"),
            [],
            WaitingOn("admission", "default", "waiting for queue 'default' to admit it"),
        ),
        (
            run("queued", queue="imports", start_at=LATER),
            [],
            WaitingOn("start", "imports", "starts at 2026-05-01 11:30:00 UTC", LATER),
        ),
        (
            run("queued", queue="imports", start_at=NOW - timedelta(seconds=1)),
            [],
            WaitingOn("admission", "imports", "waiting for queue 'imports' to admit it"),
        ),
        (run("suspended"), [], WaitingOn("resume", "r1", "suspended until it is resumed")),
        (run("running"), [], None),
        (run("completed"), [step("event", "__event:go")], None),
        (run("paused"), [step("sleep", "nap", "scheduled", wake_at=LATER)], None),
        (
            run("running"),
            [step("event", "__event:go#2", "scheduled", input={"event": "go"}, wake_at=LATER)],
            WaitingOn("event", "go", "waiting for event 'go' until 2026-05-01 11:30:00 UTC", LATER),
        ),
        (
            run("running"),
            [step("event", "__event:paid")],
            WaitingOn("event", "paid", "waiting for event 'paid'"),
        ),
        (
            run("running"),
            [step("approval", "__approval:refund")],
            WaitingOn("approval", "refund", "waiting for approval 'refund'"),
        ),
        (
            run("running"),
            [step("sleep", "nap", "scheduled", wake_at=LATER)],
            WaitingOn("sleep", "nap", "sleeping until 2026-05-01 11:30:00 UTC", LATER),
        ),
        (
            run("running"),
            [step("child", "kid", "running", child_run_id="c9")],
            WaitingOn("child", "c9", "waiting for child run c9"),
        ),
        # the first open wait in step order says it
        (
            run("running"),
            [step("approval", "__approval:a"), step("event", "__event:b")],
            WaitingOn("approval", "a", "waiting for approval 'a'"),
        ),
    ],
)
def test_what_a_run_waits_on(
    listed: RunSummary, steps: list[Step], expected: WaitingOn | None
) -> None:
    assert run_wait(listed, steps, NOW) == expected
