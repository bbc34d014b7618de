"""The command line of operating runs: approve, approvals list, fork, runs prune, worker
--retain, and what runs show tells of values and decisions."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pydantic
from typer.testing import CliRunner

import plait
from plait.cli import cli
from support.paths import TESTS
from support.polling import eventually, run_gone
from test_cli import plait_process

HERE = Path(__file__).resolve().parent
app = plait.App("cli-operating")


class Verdict(pydantic.BaseModel):
    approved: bool


@app.workflow
async def gated(wf: plait.Workflow, data: Any) -> Any:
    await wf.set_value("progress", 0.5)
    decision = await wf.approval("ship", schema=Verdict, approvers="not_owner")
    await wf.do("after", lambda: "done")
    return {"approved": decision.data.approved, "by": decision.decided_by}


@app.workflow
async def quick(wf: plait.Workflow, data: Any) -> Any:
    return await wf.do("only", lambda: "done")


@app.workflow
async def held(wf: plait.Workflow, data: Any) -> Any:
    await wf.do("first", lambda: "first")
    await wf.suspend("review")
    return await wf.do("last", lambda: "last")


async def plait_cli(*args: str) -> Any:
    """The CLI in a thread (it runs its own event loop)."""
    return await asyncio.to_thread(CliRunner().invoke, cli, list(args))


async def test_approve_from_the_command_line(engine_factory, database: str) -> None:
    async with engine_factory(app) as engine:
        run_id = await engine.start("gated", owner="alice")

        async def listed() -> Any:
            result = await plait_cli("approvals", "list", "--json", "--database", database)
            return result.exit_code == 0 and json.loads(result.output)

        gates = await eventually(listed, what="the gate to be listed")
        assert gates[0]["run_id"] == run_id and gates[0]["approvers"] == "not_owner"
        mine = await plait_cli("approvals", "list", "--user", "alice", "--database", database)
        assert "0 open approvals" in mine.output

        owner = await plait_cli(
            "approve",
            run_id,
            "ship",
            "--data",
            '{"approved": true}',
            "--by",
            "alice",
            "--database",
            database,
        )
        assert owner.exit_code == 1 and "'alice' may not decide" in owner.output
        bad = await plait_cli(
            "approve",
            run_id,
            "ship",
            "--data",
            '{"approved": "y"}',
            "--by",
            "bob",
            "--database",
            database,
        )
        assert bad.exit_code == 1 and "is not of type 'boolean'" in bad.output
        broken = await plait_cli("approve", run_id, "ship", "--data", "{", "--database", database)
        assert broken.exit_code == 2 and "--data is not valid JSON" in broken.output
        ok = await plait_cli(
            "approve",
            run_id,
            "ship",
            "--data",
            '{"approved": true}',
            "--by",
            "bob",
            "--database",
            database,
        )
        assert ok.exit_code == 0, ok.output
        assert "accepted" in ok.output
        assert (await engine.wait(run_id, timeout=10)).output == {"approved": True, "by": "bob"}
        again = await plait_cli(
            "approve",
            run_id,
            "ship",
            "--data",
            '{"approved": true}',
            "--by",
            "bob",
            "--database",
            database,
        )
        assert again.exit_code == 1 and "already decided" in again.output

        shown = await plait_cli("runs", "show", run_id, "--database", database)
        assert shown.exit_code == 0, shown.output
        assert "Published values" in shown.output and "progress" in shown.output
        assert "Approval decisions" in shown.output
        assert "refused" in shown.output and "accepted" in shown.output
        assert "approval: ship" in shown.output


async def test_fork_and_prune_from_the_command_line(engine_factory, database: str) -> None:
    async with engine_factory(app) as engine:
        run_id = await engine.start("gated", owner="alice")

        async def at_the_gate() -> bool:
            return any(s.key == "__approval:ship" for s in await engine.get_steps(run_id))

        # the fork below starts from the gate: the run must have reached it before the
        # cancel, or it is cancelled with no step to fork from
        await eventually(at_the_gate, what="the run to reach its gate")
        running = await plait_cli("fork", run_id, "--from", "after", "--database", database)
        assert running.exit_code == 1 and "it is running" in running.output
        await engine.cancel(run_id)
        unknown = await plait_cli("fork", run_id, "--from", "nope", "--database", database)
        assert unknown.exit_code == 1 and "has no step 'nope'" in unknown.output
        missing = await plait_cli("fork", run_id, "--database", database)
        assert missing.exit_code == 2

        forked = await plait_cli(
            "fork", run_id, "--from", "__approval:ship", "--run-id", "again", "--database", database
        )
        assert forked.exit_code == 0, forked.output
        assert forked.output.strip() == "again"
        assert (await engine.get_run("again")).forked_from == run_id
        shown = await plait_cli("runs", "show", "again", "--database", database)
        assert f"forked   from run {run_id}" in shown.output

        bad = await plait_cli("runs", "prune", "--older-than", "soon", "--database", database)
        assert bad.exit_code == 2 and "older-than" in bad.output
        wrong = await plait_cli(
            "runs", "prune", "--older-than", "1s", "--status", "running", "--database", database
        )
        assert wrong.exit_code == 1 and "statuses must be among" in wrong.output
        pruned = await plait_cli("runs", "prune", "--older-than", "1ms", "--database", database)
        assert pruned.exit_code == 0, pruned.output
        assert "pruned 1 runs" in pruned.output  # the cancelled one; the fork still runs
        await engine.get_run("again")


async def test_a_worker_started_with_retain_prunes_ended_runs(
    engine_factory, database: str
) -> None:
    """``plait worker --retain`` as an operator starts it: a process of its own that
    deletes the runs ended longer ago than the window and leaves the live one alone."""
    async with engine_factory(app, workers=False) as engine:
        ended = await engine.start("quick", inline=True)
        assert (await engine.wait(ended, timeout=10)).status == "completed"
        live = await engine.start("gated", owner="alice")
        args = ("worker", "test_cli_operating:app", "--retain", "300ms", "-d", database)
        # this module imports support.* from tests/
        worker = plait_process(*args, cwd=HERE, path=[TESTS])
        try:

            async def pruned() -> bool:
                assert worker.poll() is None, worker.communicate()[1]
                return await run_gone(engine, ended)

            await eventually(pruned, timeout=30, what="the worker to prune the ended run")
            assert (await engine.get_run(live)).status == "running"
        finally:
            worker.terminate()
            worker.communicate(timeout=30)


def test_worker_retain_refuses_a_bad_duration(tmp_path: Path) -> None:
    result = CliRunner().invoke(
        cli,
        [
            "worker",
            "tests.test_cli_operating:app",
            "--retain",
            "forever",
            "--database",
            f"sqlite:///{tmp_path / 'w.db'}",
        ],
    )
    assert result.exit_code == 2 and "--retain" in result.output
    zero = CliRunner().invoke(
        cli,
        [
            "worker",
            "tests.test_cli_operating:app",
            "--retain",
            "0s",
            "--database",
            f"sqlite:///{tmp_path / 'w.db'}",
        ],
    )
    assert zero.exit_code == 2 and "more than 0" in zero.output


async def test_fork_replace_from_the_command_line(engine_factory, database: str) -> None:
    async with engine_factory(app) as engine:
        run_id = await engine.start("held")
        assert (await engine.wait(run_id, timeout=10)).status == "suspended"
        refused = await plait_cli("fork", run_id, "--from", "last", "--database", database)
        assert refused.exit_code == 1 and "it is suspended; only an ended run forks" in (
            refused.output
        )
        for bad in ("", "  ", "suspend:\x01review"):
            malformed = await plait_cli(
                "fork", run_id, "--from", bad, "--replace", "--database", database
            )
            assert malformed.exit_code == 2, malformed.output
            assert "--from" in malformed.output and "control characters" in malformed.output
        unknown = await plait_cli(
            "fork", "no-such-run", "--from", "last", "--replace", "--database", database
        )
        assert unknown.exit_code == 1 and "no run matches 'no-such-run'" in unknown.output
        assert (await engine.get_run(run_id)).status == "suspended"

        forked = await plait_cli(
            "fork",
            run_id,
            "--from",
            "suspend: review",
            "--replace",
            "--json",
            "--database",
            database,
        )
        assert forked.exit_code == 0, forked.output
        answer = json.loads(forked.output)
        assert answer["forked_from"] == run_id and answer["replaced"] is True
        source = await engine.get_run(run_id)
        assert source.status == "cancelled"
        assert source.error["message"] == f"replaced by fork {answer['run_id']}"
        fork = await engine.wait(answer["run_id"], timeout=10)
        assert fork.status == "suspended" and fork.forked_from == run_id
