"""The command line and a chain of runs continued as new: ``runs show`` names both
links, ``runs list --hide-continued`` lists the last run of each chain."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

from typer.testing import CliRunner

import plait
from plait.cli import cli

app = plait.App("cli-continue")


@app.workflow
async def hops(wf: plait.Workflow, n: int) -> int:
    if n < 2:
        await wf.continue_as_new(n + 1)
    return n


def test_runs_show_and_list_show_the_chain(tmp_path: Path) -> None:
    db = f"sqlite:///{tmp_path / 'chain.db'}"

    async def chain() -> tuple[str, plait.Run]:
        async with plait.Engine(app, db, poll_interval=0.2) as engine:
            first = await engine.start("hops", 0)
            return first, await engine.wait(first, timeout=30)

    first, last = asyncio.run(chain())
    runner = CliRunner()
    out = runner.invoke(cli, ["runs", "show", last.id, "-d", db]).output
    assert f"continues run {last.continued_from}" in out
    out = runner.invoke(cli, ["runs", "show", first, "-d", db]).output
    assert "continued as new in run" in out and "continued" in out
    out = runner.invoke(cli, ["runs", "list", "--hide-continued", "--json", "-d", db]).output
    assert [r["id"] for r in json.loads(out)["runs"]] == [last.id]
    out = runner.invoke(cli, ["runs", "list", "--json", "-d", db]).output
    assert [r["status"] for r in json.loads(out)["runs"]].count("continued") == 2
