"""``plait send-event --dedup KEY``: the run takes one event of each key; a bad key is a
one-line usage error naming ``--dedup``."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

from typer.testing import CliRunner

import plait
from plait.cli import cli

app = plait.App("send-event-dedup-cli")


@app.workflow
async def later(wf: plait.Workflow) -> Any:
    await wf.wait_for_event("go")
    return await wf.wait_for_event("item")


def run(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(cli, list(args))
    return result.exit_code, result.output


def _held(db: str, run_id: str) -> list[str | None]:
    async def go() -> list[str | None]:
        async with plait.Engine(app, db) as engine:
            snapshot = await engine.store.load_pass(run_id)
            assert snapshot is not None
            return [e.payload for e in snapshot.events if e.name == "item"]

    return asyncio.run(go())


def test_send_event_with_a_key_is_taken_once(tmp_path: Path) -> None:
    db = f"sqlite:///{tmp_path / 't.db'}"

    async def start() -> str:
        async with plait.Engine(app, db) as engine:
            return await engine.start("later")

    run_id = asyncio.run(start())
    for _ in range(3):
        code, out = run("send-event", run_id, "item", "--data", "1", "--dedup", "k", "-d", db)
        assert code == 0, out
    assert "took an event of key 'k' already" in out
    code, out = run(
        "send-event", run_id, "item", "--data", "2", "--dedup", "k2", "-d", db, "--json"
    )
    assert code == 0, out
    assert json.loads(out) == {"run_id": run_id, "event": "item", "waiting": False}
    assert _held(db, run_id) == ["1", "2"]


def test_a_bad_key_is_a_usage_error_naming_dedup(tmp_path: Path) -> None:
    db = f"sqlite:///{tmp_path / 't.db'}"
    for bad in ("", "x" * 513, "a\tb", "__send:1"):
        code, out = run("send-event", "some-run", "item", "--dedup", bad, "-d", db)
        assert code == 2, out
        assert "--dedup" in out and "dedup" in out.split("--dedup", 1)[1], out
    assert not (tmp_path / "t.db").exists()  # refused before the database was opened


@app.workflow
async def notify(wf: plait.Workflow, to: str) -> None:
    await wf.send_event(to, "item", "hello")


def test_runs_show_names_a_send_and_the_run_it_went_to(tmp_path: Path) -> None:
    db = f"sqlite:///{tmp_path / 't.db'}"

    async def start() -> str:
        async with plait.Engine(app, db) as engine:
            to = await engine.start("later")
            sender = await engine.start("notify", to)
            await engine.wait(sender, timeout=30)
            return sender

    sender = asyncio.run(start())
    code, out = run("runs", "show", sender, "-d", db)
    assert code == 0, out
    (line,) = [ln for ln in out.splitlines() if "send event: item" in ln]
    assert "succeeded" in line and "to run" in line, out
