"""The command line as a new user meets it: ``--version``, ``send-event``, ``--json`` on
every command that reads runs, ``start --wait`` showing steps as they happen (and what a
run waits on), full results and tracebacks in ``runs show``, no database files made by
reading, one-line errors, and run data that cannot reach the terminal as markup or
escape sequences."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from typer.testing import CliRunner

from plait import __version__
from plait.cli import cli

ROOT = Path(__file__).resolve().parent.parent

SHOP = """
import plait

app = plait.App("shop")


@app.function(retries=0)
async def charge(order: dict) -> dict:
    if order.get("fail"):
        raise ValueError("card declined: " + "x" * 60)
    return {"charged": order["amount"], "note": "a result well over forty characters long"}


@app.workflow
async def checkout(wf: plait.Workflow, order: dict) -> dict:
    receipt = await wf.do("charge", charge, order)
    await wf.sleep("cooling off", "10ms")
    if order.get("approval"):
        approval = await wf.wait_for_event("approval", timeout="1h")
        receipt["by"] = approval["by"]
    return receipt


@app.workflow
async def odd(wf: plait.Workflow, data: None) -> str:
    await wf.do("a[/b]", lambda: "\\x1b[31mred\\x1b[0m [bold]not bold[/bold] \\x9b2J")
    return "\\x1b]0;owned\\x07"
"""


@pytest.fixture
def shop(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A folder with the user's module and no database yet; the command runs there."""
    (tmp_path / "shop.py").write_text(SHOP)
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delenv("PLAIT_DATABASE_URL", raising=False)
    for name in [m for m in sys.modules if m in ("shop", "loop_at_import", "broken")]:
        del sys.modules[name]
    return tmp_path


def run(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(cli, list(args))
    return result.exit_code, result.output


def plait_process(*args: str, cwd: Path) -> subprocess.Popen[str]:
    env = {**os.environ, "PYTHONUNBUFFERED": "1", "PYTHONPATH": str(ROOT / "src")}
    env.pop("PLAIT_DATABASE_URL", None)
    return subprocess.Popen(
        [sys.executable, "-m", "plait", *args],
        cwd=cwd,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def _lines_until(process: subprocess.Popen[str], text: str) -> list[str]:
    """The lines ``process`` printed up to the first that holds ``text``."""
    assert process.stdout is not None
    lines: list[str] = []
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        line = process.stdout.readline()
        if not line:
            break
        lines.append(line.rstrip("\n"))
        if text in line:
            break
    return lines


def test_version() -> None:
    code, out = run("--version")
    assert code == 0 and out.strip() == f"plait {__version__}"


def test_start_wait_shows_steps_then_what_the_run_waits_for(shop: Path) -> None:
    """Not silent while the run waits for an event: the run id first, each step as it
    ends, then what it waits on and the command that sends it."""
    db = f"sqlite:///{shop / 'shop.db'}"
    order = json.dumps({"amount": 42, "approval": True})
    follower = plait_process(
        "start", "shop:app", "checkout", "-i", order, "--wait", "-d", db, cwd=shop
    )
    lines = _lines_until(follower, "waiting for event 'approval'")
    run_id = lines[0]
    assert len(run_id) == 36, lines
    assert any("charge" in line and "succeeded" in line for line in lines), lines
    assert any("cooling off" in line for line in lines), lines
    assert f"plait send-event {run_id} approval --data JSON" in lines[-1], lines
    code, out = run("send-event", run_id, "approval", "--data", '{"by": "dana"}', "-d", db)
    assert code == 0, out
    rest, errors = follower.communicate(timeout=60)
    assert follower.returncode == 0, rest + errors
    assert f"run {run_id} completed" in rest
    assert '"by": "dana"' in rest


def test_start_wait_says_a_queued_child_waits_for_a_worker(tmp_path: Path) -> None:
    """``start --wait`` runs the parent here, but a child of a queued workflow is admitted
    by a worker: the follower says so (not only "waiting for child run"), and goes on
    once a worker has run the child."""
    (tmp_path / "nested.py").write_text(
        textwrap.dedent(
            """
            import plait

            app = plait.App("nested")
            app.queue("work", concurrency=1)

            @app.workflow(queue="work")
            async def leaf(wf: plait.Workflow, n: int) -> int:
                return await wf.do("double", lambda: n * 2)

            @app.workflow
            async def parent(wf: plait.Workflow, n: int) -> int:
                return await wf.do("child", "leaf", n)
            """
        )
    )
    db = f"sqlite:///{tmp_path / 'nested.db'}"
    follower = plait_process(
        "start", "nested:app", "parent", "-i", "21", "--wait", "-d", db, cwd=tmp_path
    )
    lines = _lines_until(follower, "queued: waiting for a worker")
    run_id = lines[0]
    assert "waiting for child run" in lines[-1] and "plait worker APP" in lines[-1], lines
    worker = plait_process("worker", "nested:app", "-d", db, cwd=tmp_path)
    try:
        rest, errors = follower.communicate(timeout=60)
    finally:
        for process in (follower, worker):
            if process.poll() is None:
                process.terminate()
                process.communicate(timeout=30)
    assert follower.returncode == 0, rest + errors
    assert f"run {run_id} completed" in rest and "42" in rest


def test_send_event_and_json_documents(shop: Path) -> None:
    db = f"sqlite:///{shop / 'shop.db'}"
    code, out = run(
        "start", "shop:app", "checkout", "-i", '{"amount": 5, "approval": true}', "-d", db, "--json"
    )
    assert code == 0, out
    run_id = json.loads(out)["run_id"]
    code, out = run("send-event", run_id, "approval", "--data", '{"by": "eve"}', "-d", db, "--json")
    assert code == 0 and json.loads(out) == {
        "run_id": run_id,
        "event": "approval",
        "waiting": False,
    }
    code, out = run(
        "start", "shop:app", "checkout", "-i", '{"amount": 7}', "--wait", "-d", db, "--json"
    )
    assert code == 0, out
    document = json.loads(out)
    assert document["run"]["status"] == "completed"
    assert document["run"]["output"]["charged"] == 7
    assert [s["key"] for s in document["steps"]] == ["charge", "cooling off"]
    code, out = run("runs", "list", "-d", db, "--json")
    listed = json.loads(out)
    assert code == 0 and listed["total"] == 2
    assert {r["id"] for r in listed["runs"]} == {run_id, document["run"]["id"]}
    code, out = run("runs", "show", document["run"]["id"], "-d", db, "--json")
    shown = json.loads(out)
    assert code == 0 and shown["run"]["id"] == document["run"]["id"]
    assert set(shown) == {"run", "steps", "attempts", "children", "values", "decisions"}
    code, out = run("cancel", run_id, "-d", db, "--json")
    assert code == 0 and json.loads(out)["run"]["status"] == "cancelled"
    code, out = run("runs", "prune", "--older-than", "30d", "-d", db, "--json")
    assert code == 0 and json.loads(out) == {"pruned": 0}
    for command in (["queues"], ["schedules", "list"], ["approvals", "list"]):
        code, out = run(*command, "-d", db, "--json")
        assert code == 0, out
        json.loads(out)


def test_runs_show_has_full_results_and_the_traceback(shop: Path) -> None:
    db = f"sqlite:///{shop / 'shop.db'}"
    code, out = run("start", "shop:app", "checkout", "-i", '{"amount": 1}', "--wait", "-d", db)
    assert code == 0, out
    ok = out.splitlines()[0]
    code, out = run(
        "start", "shop:app", "checkout", "-i", '{"amount": 1, "fail": 1}', "--wait", "-d", db
    )
    assert code == 1, out
    failed = out.splitlines()[0]
    code, out = run("runs", "show", ok, "-d", db)
    assert code == 0, out
    # in full, however the table wraps it
    assert "aresultwelloverfortycharacterslong" in "".join(out.split())
    code, out = run("runs", "show", failed, "-d", db)
    assert code == 0, out
    assert "Traceback (most recent call last)" in out
    assert 'raise ValueError("card declined: "' in out
    flat = "".join(out.split())
    assert "carddeclined:" + "x" * 60 in flat


def test_run_data_is_escaped_before_it_is_printed(shop: Path) -> None:
    db = f"sqlite:///{shop / 'shop.db'}"
    code, out = run("start", "shop:app", "odd", "--wait", "-d", db)
    assert code == 0, out
    run_id = out.splitlines()[0]
    code, out = run("runs", "show", run_id, "-d", db)
    assert code == 0, out
    assert "a[/b]" in out
    assert "[bold]not bold[/bold]" in out
    for raw in ("\x1b", "\x9b", "\x07"):
        assert raw not in out
    assert "\\x1b[31mred" in out and "\\x9b2J" in out


def test_reading_never_creates_a_database(shop: Path) -> None:
    for args in (["runs", "list"], ["runs", "list", "-d", "sqlite:///typo.db"], ["queues"]):
        code, out = run(*args)
        assert code == 2 and out.count("\n") == 1, out
        assert "no database at" in out
    code, out = run("runs", "show", "some-id", "-d", "sqlite:///nowhere/plait.db")
    assert code == 2 and "nowhere/plait.db" in out and out.count("\n") == 1
    code, out = run("start", "shop:app", "checkout", "-d", "sqlite:///nowhere/plait.db")
    assert code == 2 and out.count("\n") == 1, out
    assert "the folder nowhere does not exist" in out
    assert sorted(p.name for p in shop.iterdir()) == ["shop.py"]


@pytest.mark.filterwarnings("ignore:coroutine 'main' was never awaited")
def test_a_module_that_fails_at_import_is_one_line(shop: Path) -> None:
    (shop / "loop_at_import.py").write_text(
        textwrap.dedent(
            """
            import asyncio
            import plait

            app = plait.App("x")

            async def main() -> None:
                pass

            asyncio.run(main())
            """
        )
    )
    (shop / "broken.py").write_text("import plait\napp = plait.App()\n{}['missing']\n")
    code, out = run("start", "loop_at_import:app", "checkout")
    assert code == 2 and out.count("\n") == 1, out
    assert "cannot import module 'loop_at_import'" in out
    assert 'if __name__ == "__main__":' in out
    code, out = run("graph", "broken:app", "x")
    assert code == 2 and out.count("\n") == 1, out
    assert "cannot import module 'broken': KeyError: 'missing'" in out
    result = CliRunner().invoke(cli, ["--debug", "graph", "broken:app", "x"])
    assert isinstance(result.exception, ImportError) and isinstance(
        result.exception.__cause__, KeyError
    )


def test_other_errors_are_one_line(shop: Path) -> None:
    db = f"sqlite:///{shop / 'shop.db'}"
    for args in (
        ["start", "shop:app", "nope", "-d", db],
        ["start", "shop:app", "checkout", "-i", "{bad", "-d", db],
        ["runs", "show", "no-such-run", "-d", db],
        ["send-event", "no-such-run", "x", "-d", db],
        ["runs", "show"],
        ["start", "shop:app", "checkout", "--wait", "--bogus"],
    ):
        code, out = run(*args)
        assert code in (1, 2), (args, out)
        assert out.startswith("error: ") and out.count("\n") == 1, (args, out)
