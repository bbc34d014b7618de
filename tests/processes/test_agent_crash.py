"""A Pydantic AI agent run survives a SIGKILL: the ``plait worker`` running it is killed
after the first tool call committed, while the model is answering the second request;
the worker that takes the run over calls the model only for the requests not recorded,
runs no recorded tool again, and ends with what an uninterrupted run returns."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

pytest.importorskip("pydantic_ai", reason="the pydantic-ai extra is not installed")

import plait
from support import agent_app
from support.ledger import WorkerProcess
from support.polling import eventually

pytestmark = [pytest.mark.slow, pytest.mark.timeout(180)]

APP = "support.agent_app:app"


def _lines(path: Path) -> list[dict[str, object]]:
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line]


async def test_a_killed_agent_run_calls_the_model_only_for_what_was_not_recorded(
    database: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    ledger = tmp_path / "agent.jsonl"
    gate = tmp_path / "gate"
    monkeypatch.setenv("AGENT_LEDGER", str(ledger))
    monkeypatch.setenv("AGENT_GATE", str(gate))
    workers: list[WorkerProcess] = []
    try:
        async with plait.Engine(agent_app.app, database, workers=False) as engine:
            first = WorkerProcess(
                database, tmp_path / "crash.log", tmp_path / "w0.log", worker_id="a0", app=APP
            )
            workers.append(first)
            run_id = await engine.start("support", "Z9 5")

            async def second_request_asked() -> bool:
                if not first.alive():
                    raise AssertionError(f"the worker exited:\n{first.log_tail()}")
                return {"what": "model", "seen": 1, "pid": first.pid} in _lines(ledger)

            await eventually(second_request_asked, timeout=60, what="the second model request")
            steps = {s.key: s.status for s in await engine.get_steps(run_id)}
            assert steps["agent:support:tool:lookup"] == "succeeded"
            assert "agent:support:model_request#1" not in steps or (
                steps["agent:support:model_request#1"] != "succeeded"
            )
            first.sigkill()

            gate.touch()
            second = WorkerProcess(
                database, tmp_path / "crash.log", tmp_path / "w1.log", worker_id="a1", app=APP
            )
            workers.append(second)
            run = await engine.wait(run_id, timeout=60)
            assert run.status == "completed", run.error
            for worker in workers:
                worker.stop()

            # an uninterrupted run of the same prompt, in this process
            agent_app.model_calls.clear()
            async with plait.Engine(agent_app.app, database, workers=True) as local:
                other = await local.wait(await local.start("support", "Z9 5"), timeout=60)
            assert other.status == "completed", other.error
            assert run.output == other.output
            assert agent_app.model_calls == [0, 1, 2]
    finally:
        for worker in workers:
            worker.stop()

    calls = [
        (line["what"], line.get("seen", line.get("tool")), line["pid"])
        for line in _lines(ledger)
        if line["pid"] != os.getpid()
    ]
    killed, taker = workers[0].pid, workers[1].pid
    assert calls == [
        ("model", 0, killed),
        ("tool", "lookup", killed),
        ("model", 1, killed),
        # the take-over: the first response and the lookup come from the record
        ("model", 1, taker),
        ("tool", "refund", taker),
        ("model", 2, taker),
    ]
