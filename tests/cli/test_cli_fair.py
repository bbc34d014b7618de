"""``plait queues`` and fair queues: the limits an app declares (fairness and weights
too), and per key of one queue its runs and its turns."""

from __future__ import annotations

import json
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


def test_queues_shows_the_limits_an_app_declares(db: str) -> None:
    code, out = run(
        "start", APP, "export", "--input", '{"tenant": "a", "n": 1}', "--key", "a", "--database", db
    )
    assert code == 0, out
    code, out = run("queues", APP, "--database", db)
    assert code == 0, out
    assert "fair (weights enterprise=3)" in out and "concurrency 2" in out
    code, out = run("queues", APP, "--json", "--database", db)
    limits = {q["queue"]: q["limits"] for q in json.loads(out)["queues"]}
    assert limits["exports"]["fair"] is True
    assert limits["exports"]["weights"] == {"enterprise": 3}
    assert limits["imports"]["fair"] is False


def test_queues_keys_shows_each_key_of_a_queue(db: str) -> None:
    for key in ("a", "a", "b"):
        code, out = run(
            "start",
            APP,
            "export",
            "--input",
            '{"tenant": "x", "n": 1}',
            "--key",
            key,
            "--database",
            db,
        )
        assert code == 0, out
    code, out = run("queues", "--keys", "exports", "--json", "--database", db)
    assert code == 0, out
    keys = {row["key"]: row for row in json.loads(out)["keys"]}
    assert (keys["a"]["queued"], keys["b"]["queued"]) == (2, 1)
    assert keys["a"]["active"] == 0 and keys["a"]["ahead"] is None
    code, out = run("queues", "--keys", "exports", "--database", db)
    assert code == 0 and "Keys of queue exports" in out and "turns ahead" in out


def test_queues_keys_names_a_bad_queue(db: str) -> None:
    code, out = run("queues", "--keys", "", "--database", db)
    assert code != 0 and "queue" in out and "Traceback" not in out
