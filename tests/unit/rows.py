"""Rows built by hand for the state machines' tests (no database)."""

from __future__ import annotations

import dataclasses
from typing import Any

from plait.store.ops import EndRun, FinishAttempt, GuardStep, Op, SetTimer
from plait.store.rows import RunRow, StepRow

#: the time every test row is made at
T0 = 1_700_000_000.0


def step(key: str = "s", **changes: Any) -> StepRow:
    """A step row as the runtime would create it; ``changes`` override any column."""
    row = StepRow(
        run_id="r",
        key=key,
        seq=0,
        name=key,
        kind="do",
        function="fn",
        status="pending",
        input=None,
        output=None,
        error=None,
        attempts=0,
        failures=0,
        retries=0,
        retry_delay=None,
        timeout=None,
        invocation_id=f"inv:{key}",
        child_run_id=None,
        branch=None,
        from_key=None,
        queued=False,
        wake_at=None,
        created_at=T0,
        updated_at=T0,
    )
    return dataclasses.replace(row, **changes)


def run(**changes: Any) -> RunRow:
    row = RunRow(
        id="r",
        workflow="wf",
        kind="workflow",
        version=None,
        status="running",
        input=None,
        output=None,
        error=None,
        parent_run_id=None,
        parent_step_key=None,
        owner=None,
        start_node=None,
        created_at=T0,
        updated_at=T0,
        wake_at=None,
        wakeups=0,
        lease_owner=None,
        lease_until=None,
    )
    return dataclasses.replace(row, **changes)


def shape(ops: list[Op] | None) -> list[tuple[str, ...]] | None:
    """Each op as its type and the status (or timer purpose) it writes: what a table of
    transitions compares."""
    if ops is None:
        return None
    out: list[tuple[str, ...]] = []
    for op in ops:
        name = type(op).__name__
        if isinstance(op, FinishAttempt | EndRun | GuardStep):
            out.append((name, op.status))
        elif isinstance(op, SetTimer):
            out.append((name, op.purpose))
        else:
            out.append((name,))
    return out
