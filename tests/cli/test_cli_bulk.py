"""``plait runs cancel|retry|resume`` with filter options: a count without ``--yes`` that
changes nothing, the action with it, a cancel's ``--reason``, and bad input refused by
name before anything is done."""

from __future__ import annotations

import asyncio
import json
from typing import Any

from typer.testing import CliRunner

import plait
from plait.cli import cli

app = plait.App("cli-bulk")


@app.workflow
async def held(wf: plait.Workflow, data: Any) -> str:
    await wf.suspend("hold")
    return "resumed"


async def plait_cli(*args: str) -> Any:
    """The CLI in a thread (it runs its own event loop)."""
    return await asyncio.to_thread(CliRunner().invoke, cli, list(args))


async def _held_runs(engine: plait.Engine, count: int, tag: str) -> list[str]:
    ids = [await engine.start(held, None, tags={"batch": tag}) for _ in range(count)]
    for run_id in ids:
        assert (await engine.wait(run_id, timeout=30)).status == "suspended"
    return ids


async def test_a_count_without_yes_then_the_action_with_it(
    engine_factory: Any, database: str
) -> None:
    async with engine_factory(app) as engine:
        ids = await _held_runs(engine, 3, "a")
        other = await _held_runs(engine, 1, "b")
        counted = await plait_cli("runs", "resume", "--tag", "batch=a", "--database", database)
        assert counted.exit_code == 2, counted.output
        assert "3 runs match; nothing done" in counted.output
        assert all([(await engine.get_run(r)).status == "suspended" for r in ids])

        done = await plait_cli(
            "runs", "resume", "--tag", "batch=a", "--yes", "--rate", "500", "--json",
            "--database", database,
        )  # fmt: skip
        assert done.exit_code == 0, done.output
        assert json.loads(done.output) == {"action": "resume", "matched": 3, "acted": 3}
        for run_id in ids:
            assert (await engine.wait(run_id, timeout=30)).output == "resumed"
        assert (await engine.get_run(other[0])).status == "suspended"


async def test_a_bulk_cancel_keeps_its_reason(engine_factory: Any, database: str) -> None:
    async with engine_factory(app) as engine:
        ids = await _held_runs(engine, 2, "c")
        done = await plait_cli(
            "runs", "cancel", "--tag", "batch=c", "--reason", "partner down", "--yes",
            "--database", database,
        )  # fmt: skip
        assert done.exit_code == 0, done.output
        assert "2 runs matched; cancel: 2" in done.output
        for run_id in ids:
            run = await engine.get_run(run_id)
            assert run.status == "cancelled" and "partner down" in str(run.error)


async def test_bad_bulk_input_is_refused_by_name(engine_factory: Any, database: str) -> None:
    async with engine_factory(app) as engine:
        ids = await _held_runs(engine, 1, "d")
        for rate in ("0", "-3", "nan", "inf"):
            bad = await plait_cli(
                "runs", "cancel", "--tag", "batch=d", "--rate", rate, "--yes",
                "--database", database,
            )  # fmt: skip
            assert bad.exit_code != 0 and "--rate" in bad.output, (rate, bad.output)
        word = await plait_cli("runs", "cancel", "--tag", "batch=d", "--rate", "fast")
        assert word.exit_code != 0 and "--rate" in word.output
        both = await plait_cli("runs", "cancel", ids[0], "--tag", "batch=d", "-d", database)
        assert both.exit_code != 0 and "not both" in both.output
        zoneless = await plait_cli(
            "runs", "retry", "--since", "2026-12-04T10:00", "--database", database
        )
        assert zoneless.exit_code == 2, zoneless.output
        assert "--since '2026-12-04T10:00' has no time zone" in zoneless.output
        not_a_time = await plait_cli("runs", "resume", "--until", "noon", "-d", database)
        assert not_a_time.exit_code == 2 and "--until is not an ISO 8601 time" in not_a_time.output
        bad_tag = await plait_cli("runs", "cancel", "--tag", "nokey", "--yes", "-d", database)
        assert bad_tag.exit_code == 2 and "--tag" in bad_tag.output, bad_tag.output
        twice = await plait_cli(
            "runs", "cancel", "--tag", "batch=x", "--tag", "batch=d", "--yes", "-d", database
        )  # fmt: skip
        assert twice.exit_code == 2 and "key 'batch' given twice" in twice.output, twice.output
        none = await plait_cli("runs", "retry", "--database", database)
        assert none.exit_code != 0 and "name the runs to retry" in none.output
        assert (await engine.get_run(ids[0])).status == "suspended"
