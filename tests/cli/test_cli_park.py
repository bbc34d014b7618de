"""Parked runs on the command line: ``plait runs list --status needs_attention`` lists
them, ``plait retry`` lets one go on and ``plait cancel`` ends one."""

from __future__ import annotations

import asyncio
import json
from typing import Any

from typer.testing import CliRunner

import plait
from plait.cli import cli

app = plait.App("cli-park")
BROKEN = {"now": True}


@app.function(retries=0)
def partner(data: str) -> str:
    if BROKEN["now"]:
        raise RuntimeError("partner API down")
    return data


@app.workflow(on_exhausted="park")
async def sync(wf: plait.Workflow, data: str) -> str:
    return str(await wf.do("call", partner, data))


async def plait_cli(*args: str) -> Any:
    """The CLI in a thread (it runs its own event loop)."""
    return await asyncio.to_thread(CliRunner().invoke, cli, list(args))


async def test_runs_list_by_needs_attention_then_retry_and_cancel(
    engine_factory: Any, database: str
) -> None:
    BROKEN["now"] = True
    async with engine_factory(app) as engine:
        ids = [await engine.start(sync, name) for name in ("a", "b")]
        done = await engine.start(sync, "c")
        for run_id in ids:
            assert (await engine.wait(run_id, timeout=30)).status == "needs_attention"
        await engine.wait(done, timeout=30)
        await engine.cancel(done)  # another status: not listed

        listed = await plait_cli(
            "runs", "list", "--status", "needs_attention", "--json", "--database", database
        )
        assert listed.exit_code == 0, listed.output
        runs = json.loads(listed.output)["runs"]
        assert sorted(r["id"] for r in runs) == sorted(ids)
        table = await plait_cli(
            "runs", "list", "--status", "needs_attention", "--database", database
        )
        assert table.exit_code == 0 and "needs_attention" in table.output

        bad = await plait_cli("runs", "list", "--status", "parked", "--database", database)
        assert bad.exit_code != 0 and "needs_attention" in bad.output

        BROKEN["now"] = False
        retried = await plait_cli("retry", ids[0], "--database", database)
        assert retried.exit_code == 0, retried.output
        assert (await engine.wait(ids[0], timeout=30)).output == "a"
        cancelled = await plait_cli("cancel", ids[1], "--database", database)
        assert cancelled.exit_code == 0, cancelled.output
        assert (await engine.get_run(ids[1])).status == "cancelled"
