"""Inline and queued steps go through one state machine: the same workflow, with its
functions queued or not, records the same steps and attempts on every store."""

from __future__ import annotations

import asyncio
import re
from typing import Any

import pytest

import plait

SCENARIOS = ["retry_then_succeed", "timeout_then_succeed", "on_error", "child", "gather"]


def make_app(queued: bool) -> plait.App:
    """One app per path; the workflow code is the same, only ``queued`` differs."""
    app = plait.App("parity")

    @app.function(queued=queued, retries=2, retry_delay=0)
    def flaky(data: dict[str, Any], ctx: plait.StepContext) -> dict[str, Any]:
        if ctx.attempt == 1:
            raise ValueError(f"first try of {data['n']} fails")
        return {"n": data["n"], "attempt": ctx.attempt}

    @app.function(queued=queued, retries=1, retry_delay=0, timeout=0.2)
    async def slow_first(data: dict[str, Any], ctx: plait.StepContext) -> str:
        if ctx.attempt == 1:
            await asyncio.sleep(5)
        return "fast enough"

    @app.function(queued=queued, retries=0, on_error="handler")
    def broken(data: Any) -> None:
        raise RuntimeError("broken for good")

    @app.function(queued=queued, retries=0)
    def handler(data: dict[str, Any]) -> str:
        return f"handled {data['error']['message']}"

    @app.workflow
    async def inner(wf: plait.Workflow, data: dict[str, Any]) -> Any:
        return await wf.do("flaky", "flaky", data)

    @app.workflow
    async def scenario(wf: plait.Workflow, data: dict[str, Any]) -> Any:
        kind = data["kind"]
        if kind == "retry_then_succeed":
            return await wf.do("flaky", "flaky", {"n": 1})
        if kind == "timeout_then_succeed":
            return await wf.do("slow", "slow_first", {})
        if kind == "on_error":
            return await wf.do("broken", "broken", {"x": 1})
        if kind == "child":
            return await wf.do("child", "inner", {"n": 7})
        # siblings that all settle in the pass that starts them, inline or queued; a
        # failure in a gather ends the run before queued siblings could finish
        both = await asyncio.gather(wf.do("a", "flaky", {"n": 1}), wf.do("b", "flaky", {"n": 2}))
        return [*both, await wf.do("c", "handler", {})]

    return app


def _normalise(value: Any, run_ids: dict[str, str]) -> Any:
    """Ids differ from run to run; everything else must match."""
    if isinstance(value, str):
        for real, alias in run_ids.items():
            value = value.replace(real, alias)
        return re.sub(
            r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}", "<id>", value
        )
    if isinstance(value, dict):
        return {k: _normalise(v, run_ids) for k, v in value.items()}
    if isinstance(value, list):
        return [_normalise(v, run_ids) for v in value]
    return value


_STEP_FIELDS = ("key", "name", "function", "status", "input", "output", "error", "attempts")
_ATTEMPT_FIELDS = ("key", "attempt", "status", "output", "error")


async def _record(engine: plait.Engine, kind: str) -> dict[str, Any]:
    run_id = await engine.start("scenario", {"kind": kind})
    run = await engine.wait(run_id, timeout=30)
    ids = {run_id: "<run>"}
    children = await engine.get_children(run_id)
    for n, child in enumerate(children):
        ids[child.id] = f"<child{n}>"
    runs = [run_id, *(c.id for c in children)]
    steps, history = [], []
    for rid in runs:
        for s in await engine.get_steps(rid):
            row = {f: getattr(s, f) for f in _STEP_FIELDS}
            row["retries"], row["child"] = s.retries, s.child_run_id is not None
            steps.append((ids[rid], _normalise(row, ids)))
        for a in await engine.get_history(rid):
            history.append((ids[rid], _normalise({f: getattr(a, f) for f in _ATTEMPT_FIELDS}, ids)))
    return {
        "status": run.status,
        "output": _normalise(run.output, ids),
        "error": _normalise(run.error, ids),
        "steps": steps,
        "history": sorted(history, key=lambda h: (h[0], h[1]["key"], h[1]["attempt"])),
    }


@pytest.mark.parametrize("kind", SCENARIOS)
async def test_inline_and_queued_steps_record_the_same_rows(engine_factory, kind: str) -> None:
    recorded = {}
    for queued in (False, True):
        async with engine_factory(make_app(queued)) as engine:
            recorded[queued] = await _record(engine, kind)
    inline, queued = recorded[False], recorded[True]
    assert inline["steps"], "the scenario recorded no steps"
    assert inline == queued


async def test_a_queued_step_that_succeeds_after_a_failure_keeps_no_error(engine_factory) -> None:
    async with engine_factory(make_app(True)) as engine:
        run_id = await engine.start("scenario", {"kind": "retry_then_succeed"})
        run = await engine.wait(run_id, timeout=30)
        (step,) = await engine.get_steps(run_id)
        history = await engine.get_history(run_id)
    assert run.status == "completed"
    assert step.status == "succeeded" and step.attempts == 2
    assert step.error is None
    assert [a.status for a in history] == ["failed", "succeeded"]
    assert "first try of 1 fails" in history[0].error["message"]
