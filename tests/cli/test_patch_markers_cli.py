"""``runs show`` says which patches a run took, once, not as rows of its steps."""

from __future__ import annotations

import asyncio
from pathlib import Path

from typer.testing import CliRunner

import plait
from plait.cli import cli


def _patched_run(db: str) -> str:
    app = plait.App("shop")

    @app.workflow
    async def order(wf: plait.Workflow, data: None) -> str:
        if wf.patched("fee"):
            await wf.do("charge fee", lambda: "fee")
        return "done"

    async def go() -> str:
        async with plait.Engine(app, db) as engine:
            run_id = await engine.start("order")
            run = await engine.wait(run_id, timeout=10)
            assert run.status == "completed", run.error
            return run_id

    return asyncio.run(go())


def test_runs_show_lists_patch_markers_beside_the_run_not_as_steps(tmp_path: Path) -> None:
    db = f"sqlite:///{tmp_path / 'plait.db'}"
    run_id = _patched_run(db)
    result = CliRunner().invoke(cli, ["runs", "show", run_id, "-d", db], env={"COLUMNS": "200"})
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    assert any(line.split() == ["patches", "fee"] for line in lines), result.output
    assert "__patch" not in result.output and "patch: fee" not in result.output
    assert "charge fee" in result.output
