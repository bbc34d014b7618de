"""The command line of brakes and workers: plait pause / unpause, plait queues showing
what is paused, plait workers, runs show and runs list saying why a run waits and which
worker ran each attempt, and plait start telling that no worker will run a workflow."""

from __future__ import annotations

import asyncio
import json
from typing import Any

from typer.testing import CliRunner

import plait
from plait.cli import cli
from support.polling import eventually

app = plait.App("cli-brakes")


@app.workflow
async def quick(wf: plait.Workflow, data: Any) -> Any:
    return await wf.do("only", lambda: "done")


async def plait_cli(*args: str) -> Any:
    """The CLI in a thread (it runs its own event loop)."""
    return await asyncio.to_thread(CliRunner().invoke, cli, list(args))


async def test_pause_and_unpause_a_workflow(engine_factory: Any, database: str) -> None:
    async with engine_factory(app) as engine:
        paused = await plait_cli("pause", "workflow", "quick", "--database", database)
        assert paused.exit_code == 0, paused.output
        assert "paused workflow quick" in paused.output
        await eventually(lambda: ("workflow", "quick") in engine.worker.brakes, what="brake")
        run_id = await engine.start("quick")
        assert (await engine.get_run(run_id)).status == "queued"

        queues = await plait_cli("queues", "--json", "--database", database)
        assert [(p["kind"], p["name"]) for p in json.loads(queues.output)["paused"]] == [
            ("workflow", "quick")
        ]
        shown = await plait_cli("runs", "show", run_id, "--database", database)
        assert "workflow 'quick' is paused" in shown.output
        listed = await plait_cli("runs", "list", "--json", "--database", database)
        (row,) = json.loads(listed.output)["runs"]
        assert row["waiting_on"]["kind"] == "paused_workflow"

        resumed = await plait_cli("unpause", "workflow", "quick", "--database", database)
        assert resumed.exit_code == 0, resumed.output
        run = await engine.wait(run_id, timeout=20)
        assert run.status == "completed"

        shown = await plait_cli("runs", "show", run_id, "--json", "--database", database)
        (attempt,) = json.loads(shown.output)["attempts"]
        assert attempt["worker"] == engine.worker.owner  # the worker that ran it
        assert json.loads(shown.output)["waiting_on"] is None
        text = await plait_cli("runs", "show", run_id, "--database", database)
        assert engine.worker.owner.split("#")[0] in text.output

        workers = await plait_cli("workers", "--json", "--database", database)
        (me,) = json.loads(workers.output)["workers"]
        assert me["id"] == engine.worker.owner and me["live"] and me["app"] == "cli-brakes"
        assert me["workflows"] == ["quick"] and me["queues"] is None
        table = await plait_cli("workers", "--database", database)
        assert "1 live workers" in table.output


async def test_bad_brakes_are_named(engine_factory: Any, database: str) -> None:
    async with engine_factory(app, workers=False):
        kind = await plait_cli("pause", "thing", "quick", "--database", database)
        assert kind.exit_code == 2 and "unknown kind 'thing'" in kind.output
        unknown = await plait_cli("pause", "workflow", "nope", "--database", database)
        assert unknown.exit_code != 0 and "nope" in unknown.output
        idle = await plait_cli("unpause", "queue", "slow", "--database", database)
        assert idle.exit_code == 2 and "queue 'slow' is not paused" in idle.output


async def test_start_without_a_worker_says_nothing_will_run_it(database: str) -> None:
    started = await plait_cli("start", "test_cli_brakes:app", "quick", "--database", database)
    assert started.exit_code == 0, started.output
    assert "no live worker registers workflow 'quick'" in started.output
    assert "nothing will run workflow 'quick' until a worker starts" in started.output
    run_id = started.output.splitlines()[0].strip()
    listed = await plait_cli("runs", "list", "--json", "--database", database)
    (row,) = json.loads(listed.output)["runs"]
    assert row["waiting_on"] == {
        "kind": "no_worker",
        "name": "quick",
        "message": "no live worker registers workflow 'quick'",
        "until": None,
    }
    table = await plait_cli("runs", "list", "--database", database)
    assert "waiting on" in table.output
    shown = await plait_cli("runs", "show", run_id, "--database", database)
    assert "no live worker registers workflow 'quick'" in shown.output
