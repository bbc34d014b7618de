"""``plait request RUN NAME --data JSON``: prints the workflow's reply; a refusal exits 1
with the reason, data that is not JSON exits 2 saying so."""

from __future__ import annotations

import asyncio
import json
import os
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

import plait
from plait.cli import cli
from support.paths import ROOT

app = plait.App("cli-requests")


@app.workflow
async def tally(wf: plait.Workflow) -> int:
    total = 0
    while total < 10:
        req = await wf.wait_for_request("add")
        if not isinstance(req.data, int):
            await req.refuse(f"not a number: {req.data!r}")
            continue
        total += req.data
        await req.reply({"total": total})
    return total


async def _plait(*args: str) -> tuple[int, str, str]:
    """``plait ARGS`` in a process of its own, as a user runs it."""
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    env.pop("PLAIT_DATABASE_URL", None)
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "plait",
        *args,
        env=env,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await asyncio.wait_for(process.communicate(), timeout=60)
    return process.returncode or 0, out.decode(), err.decode()


async def test_plait_request_prints_the_reply_and_exits_1_on_a_refusal(tmp_path: Path) -> None:
    db = f"sqlite:///{tmp_path / 'cli.db'}"
    async with plait.Engine(app, db, poll_interval=0.2) as engine:
        run_id = await engine.start("tally")
        code, out, err = await _plait("request", run_id, "add", "--data", "3", "-d", db)
        assert code == 0, err
        assert json.loads(out) == {"total": 3}
        code, out, err = await _plait(
            "request", run_id, "add", "--data", '"x"', "--timeout", "20", "-d", db
        )
        assert code == 1, (out, err)
        assert "refused request 'add': not a number: 'x'" in err
        code, out, err = await _plait(
            "request", run_id[:8], "add", "--data", "7", "--json", "-d", db
        )
        assert code == 0, err
        assert json.loads(out) == {"run_id": run_id, "request": "add", "reply": {"total": 10}}
        run = await engine.wait(run_id, timeout=10)
        assert run.output == 10


def test_plait_request_with_data_that_is_not_json_exits_2(tmp_path: Path) -> None:
    db = f"sqlite:///{tmp_path / 'cli.db'}"
    result = CliRunner().invoke(cli, ["request", "some-run", "add", "--data", "{nope", "-d", db])
    assert result.exit_code == 2, result.output
    assert "--data is not valid JSON" in result.output


@pytest.mark.parametrize("timeout", ["0", "301"])
def test_plait_request_with_a_timeout_out_of_bounds_exits_1(tmp_path: Path, timeout: str) -> None:
    db = f"sqlite:///{tmp_path / 'cli.db'}"

    async def make() -> str:
        async with plait.Engine(app, db, workers=False) as engine:
            return await engine.start("tally")

    run_id = asyncio.run(make())
    result = CliRunner().invoke(
        cli, ["request", run_id, "add", "--data", "1", "--timeout", timeout, "-d", db]
    )
    assert result.exit_code == 1, result.output
    assert "request timeout must be more than 0 and at most 300 seconds" in result.output
