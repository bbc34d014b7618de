"""Rows built by hand, and rows read back made comparable across stores."""

from __future__ import annotations

import dataclasses
import json
from typing import Any

from plait.store import Store
from plait.store.ops import Batch, CancelCut, Op
from plait.store.rows import NewRun, StepRow

#: a fixed instant for the times a test writes itself: whole seconds survive every store's
#: time encoding exactly
T0 = 1_700_000_000.0

_JSON_FIELDS = ("input", "output", "error", "reached_after")

#: how a cancel ends the steps in flight, as the runtime says (``steps.CANCEL_CUT``)
CUT = CancelCut(step="failed", attempt="cancelled", open_attempt="running")


def step(run_id: str, key: str, **changes: Any) -> StepRow:
    """A step row as the runtime would create it; ``changes`` override any column."""
    row = StepRow(
        run_id=run_id,
        key=key,
        seq=0,
        name=key,
        kind="do",
        function="fn",
        status="pending",
        input='{"n": 1}',
        output=None,
        error=None,
        attempts=0,
        failures=0,
        retries=0,
        retry_delay=None,
        timeout=None,
        invocation_id=f"inv:{run_id}:{key}",
        child_run_id=None,
        branch=None,
        from_key=None,
        queued=False,
        wake_at=None,
        created_at=T0,
        updated_at=T0,
    )
    return dataclasses.replace(row, **changes)


def plain(row: Any) -> dict[str, Any]:
    """A row's fields with its JSON columns decoded: a store may re-encode JSON text."""
    values = dataclasses.asdict(row)
    for name in _JSON_FIELDS:
        if isinstance(values.get(name), str):
            values[name] = json.loads(values[name])
    return values


def error(message: str, code: str = "BOOM") -> str:
    return json.dumps({"message": message, "type": "Boom", "code": code})


async def new_run(
    store: Store, run_id: str, workflow: str = "wf", version: str | None = None, **fields: Any
) -> None:
    fields.setdefault("input", "{}")
    fields.setdefault("status", "running")
    _, created = await store.create_run(NewRun(run_id, workflow, "workflow", version, **fields))
    assert created


async def write(store: Store, run_id: str, *ops: Op) -> None:
    """Commit ``ops`` for ``run_id`` unfenced, as an action from outside a pass does."""
    await store.commit(Batch(run_id, list(ops)))


async def wakeups(store: Store, run_id: str) -> int:
    snapshot = await store.load_pass(run_id)
    assert snapshot is not None
    return snapshot.run.wakeups


async def wake_at(store: Store, run_id: str) -> float | None:
    snapshot = await store.load_pass(run_id)
    assert snapshot is not None
    return snapshot.run.wake_at


async def idle(store: Store, run_id: str, owner: str = "idler") -> None:
    """Make a running run not due: claim it and give it back with nothing to wake it."""
    assert await store.claim_run(run_id, owner, 60.0)
    assert not await store.release_run(run_id, owner, await wakeups(store, run_id))
    assert await wake_at(store, run_id) is None
