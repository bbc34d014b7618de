"""The command line of flow control: queue options on ``plait start``, ``runs list
--status queued``, ``plait schedules ...`` and ``plait queues``; bad input is one line."""

from __future__ import annotations

import asyncio
import json
from datetime import datetime
from pathlib import Path

import pytest
from typer.testing import CliRunner

from plait.cli import cli
from support.paths import ROOT

APP = "examples.flow_control:app"


@pytest.fixture
def db(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    monkeypatch.chdir(ROOT)
    return f"sqlite:///{tmp_path / 'cli.db'}"


def run(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(cli, list(args))
    return result.exit_code, result.output


def test_start_with_queue_options_and_list_queued(db: str) -> None:
    code, out = run(
        "start",
        APP,
        "import_user",
        "--input",
        '{"user": 7}',
        "--key",
        "user-7",
        "--priority",
        "5",
        "--dedup",
        "import:7",
        "--delay",
        "1h",
        "--database",
        db,
    )
    assert code == 0, out
    run_id = out.splitlines()[0].strip()  # then a note: no worker runs it yet
    code, again = run(
        "start",
        APP,
        "import_user",
        "--input",
        '{"user": 7}',
        "--dedup",
        "import:7",
        "--database",
        db,
    )
    assert code == 0 and again.splitlines()[0].strip() == run_id
    code, out = run("runs", "list", "--status", "queued", "--database", db)
    assert code == 0 and run_id in out
    code, out = run("queues", "--json", "--database", db)
    depths = {q["queue"]: q for q in json.loads(out)["queues"]}
    assert depths["imports"]["queued"] == 1


@pytest.mark.parametrize(
    ("options", "names"),
    [
        (["--start-at", "2030-01-01T00:00:00"], "time zone"),
        (["--start-at", "tomorrow"], "--start-at"),
        (["--delay", "soon"], "delay"),
        (["--queue", ""], "queue"),
    ],
)
def test_bad_start_options_are_one_line(db: str, options: list[str], names: str) -> None:
    code, out = run("start", APP, "report", *options, "--database", db)
    assert code != 0
    assert names in out and len(out.strip().splitlines()) == 1


def test_start_timeout_sets_the_deadline_runs_show_prints(db: str) -> None:
    code, out = run("start", APP, "report", "--timeout", "2h", "--database", db)
    assert code == 0, out
    run_id = out.splitlines()[0].strip()  # then a note: no worker runs it yet
    code, out = run("runs", "show", run_id, "--json", "--database", db)
    shown = json.loads(out)["run"]
    created = datetime.fromisoformat(shown["created_at"])
    deadline = datetime.fromisoformat(shown["deadline_at"])
    assert abs((deadline - created).total_seconds() - 7200) < 5
    assert shown["timeout"] == 7200
    code, out = run("runs", "show", run_id, "--database", db)
    assert code == 0, out
    line = next(line for line in out.splitlines() if line.startswith("deadline"))
    assert f"{deadline:%Y-%m-%d %H:%M:%S} UTC" in line and "left" in line
    assert "(timeout 2 h 0 m)" in line


@pytest.mark.parametrize("bad", ["soon", "0s", "-1h"])
def test_a_bad_start_timeout_is_one_line(db: str, bad: str) -> None:
    code, out = run("start", APP, "report", "--timeout", bad, "--database", db)
    assert code != 0
    assert "--timeout" in out and len(out.strip().splitlines()) == 1


def test_schedules_commands(db: str) -> None:
    # the worker-less engine of `plait start` stores the app's schedules when it opens
    assert run("start", APP, "report", "--delay", "1h", "--database", db)[0] == 0
    code, out = run("schedules", "list", "--json", "--database", db)
    assert code == 0, out
    (nightly,) = json.loads(out)["schedules"]
    assert nightly["name"] == "nightly" and nightly["timezone"] == "Europe/Helsinki"
    code, out = run("schedules", "list", "--database", db)
    assert "nightly" in out and "0 3 * * *" in out
    assert "paused" in run("schedules", "pause", "nightly", "--database", db)[1]
    assert "active" in run("schedules", "resume", "nightly", "--database", db)[1]
    code, out = run("schedules", "trigger", "nightly", "--database", db)
    assert code == 0 and out.strip().startswith("schedule:nightly:")
    assert run("schedules", "delete", "nightly", "--database", db)[0] == 0
    code, out = run("schedules", "pause", "nightly", "--database", db)
    assert code != 0 and "no schedule named 'nightly'" in out


def test_a_schedule_triggered_from_the_command_line_goes_through_its_queue(db: str) -> None:
    import asyncio

    from examples.flow_control import app

    import plait

    async def make() -> None:
        async with plait.Engine(app, db, workers=False) as engine:
            await engine.create_schedule("imports", workflow="import_user", every="1h")

    asyncio.run(make())
    # the command line loads no app: the queue comes with the stored schedule
    code, out = run("schedules", "trigger", "imports", "--database", db)
    assert code == 0, out
    code, shown = run("runs", "show", out.splitlines()[0].strip(), "--json", "--database", db)
    assert code == 0, shown
    run_json = json.loads(shown)["run"]
    assert (run_json["status"], run_json["queue"]) == ("queued", "imports")


def test_start_at_through_a_named_queue_and_a_start_by_hand(db: str) -> None:
    """``--queue`` and ``--start-at`` as given: the run waits in that queue until that
    time; a run started by hand has no ``wf.scheduled_at``."""
    at = "2031-06-01T12:00:00+03:00"
    code, out = run("start", APP, "report", "--queue", "emails", "--start-at", at, "--database", db)
    assert code == 0, out
    code, shown = run("runs", "show", out.splitlines()[0].strip(), "--json", "--database", db)
    document = json.loads(shown)["run"]
    assert code == 0 and document["status"] == "queued" and document["queue"] == "emails"
    assert datetime.fromisoformat(document["start_at"]) == datetime.fromisoformat(at)
    code, out = run("start", APP, "report", "-i", '{"kind": "x"}', "--wait", "--json", "-d", db)
    assert code == 0, out
    assert json.loads(out)["run"]["output"] == {"kind": "x", "tick": None}


def test_the_flow_control_example_runs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    from examples import flow_control

    asyncio.run(flow_control.main())
    assert (tmp_path / "flow-control.db").exists()


def test_queues_shows_the_stored_limits_and_where_they_came_from(db: str) -> None:
    """``plait queues`` loads no app: the limits it shows are those an engine of the app
    stored when it opened."""
    code, out = run("start", APP, "import_user", "--input", '{"user": 1}', "--database", db)
    assert code == 0, out
    code, out = run("queues", "--json", "--database", db)
    depths = {q["queue"]: q for q in json.loads(out)["queues"]}
    assert depths["imports"]["limits"]["concurrency"] == 4
    assert depths["imports"]["limits"]["rate"] == "100/m"
    assert (depths["emails"]["source"], depths["emails"]["stored_by"]) == ("stored", "flow-control")
    code, out = run("queues", "--database", db)
    assert code == 0, out
    assert "concurrency 4, per_key 1, rate 100/m" in out
    assert "stored by app flow-control" in out
