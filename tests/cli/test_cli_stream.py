"""``plait stream RUN NAME``: text values run on as a chat reply does, other values one
per line; ``--json`` prints one entry per line; ``--follow`` waits for entries as they
commit, in a process of its own, until the run ends; ``--settled-only`` drops a failed
attempt's entries; a bad name exits 2 saying so."""

from __future__ import annotations

import asyncio
import json
import os
import sys
from pathlib import Path

import plait
from support.paths import ROOT

app = plait.App("cli-streams")


@app.function(retries=1, retry_delay=0)
async def say(data: None, ctx: plait.StepContext) -> None:
    out = ctx.stream("reply")
    if ctx.attempt == 1:
        await out.write("never mind ")
        raise RuntimeError("try again")
    for word in ("Hello", " there", "\x1b[31m!"):
        await out.write(word)


@app.workflow
async def chat(wf: plait.Workflow) -> None:
    await wf.stream("reply").write({"turn": 1})
    await wf.wait_for_event("go")
    await wf.do("say", say)


async def _plait(*args: str) -> asyncio.subprocess.Process:
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    env.pop("PLAIT_DATABASE_URL", None)
    return await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "plait",
        *args,
        env=env,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )


async def _done(process: asyncio.subprocess.Process) -> tuple[int, str, str]:
    out, err = await asyncio.wait_for(process.communicate(), timeout=60)
    return process.returncode or 0, out.decode(), err.decode()


async def test_plait_stream_prints_and_follows_a_runs_stream(tmp_path: Path) -> None:
    db = f"sqlite:///{tmp_path / 'cli.db'}"
    async with plait.Engine(app, db, poll_interval=0.2) as engine:
        run_id = await engine.start("chat")

        follower = await _plait("stream", run_id[:8], "reply", "--follow", "-d", db)
        settled = await _plait("stream", run_id, "reply", "-f", "--settled-only", "-d", db)
        firsts = []
        for process in (follower, settled):  # both print what is there, then wait
            assert process.stdout is not None
            firsts.append(await asyncio.wait_for(process.stdout.readline(), 60))
        assert firsts == [b'{"turn": 1}\n'] * 2
        assert (await engine.get_run(run_id)).status == "running"
        await engine.send_event(run_id, "go")
        await engine.wait(run_id, timeout=30)
        code, out, err = await _done(follower)
        assert code == 0, err
        # the failed attempt's text, then the line that says to drop it
        assert out == (
            "never mind \n[reset: drop attempt 1 of step say]\nHello there\\x1b[31m!\n"
        ), out
        code, out, err = await _done(settled)
        assert code == 0, err
        assert out == "Hello there\\x1b[31m!\n", out

        code, out, err = await _done(await _plait("stream", run_id, "reply", "--json", "-d", db))
        assert code == 0, err
        lines = [json.loads(line) for line in out.splitlines()]
        assert [(e["offset"], e["kind"]) for e in lines] == [
            (0, "data"),
            (1, "data"),
            (2, "reset"),
            (3, "data"),
            (4, "data"),
            (5, "data"),
            (6, "end"),
        ]
        assert lines[2]["attempt"] == 1 and lines[2]["step"] == "say"

        code, out, err = await _done(await _plait("stream", run_id, "", "-d", db))
        assert code == 2 and "invalid stream name ''" in err, (out, err)
