"""``plait start --debounce / --debounce-key / --debounce-max`` and ``--dedup-policy``,
on every store: debounced starts share one waiting run, a replace cancels the live run,
and bad values are one line naming the option."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from plait.cli import cli
from support.paths import ROOT

APP = "examples.flow_control:app"


@pytest.fixture
def db(database: str, monkeypatch: pytest.MonkeyPatch) -> str:
    monkeypatch.chdir(ROOT)
    return database


def run(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(cli, list(args))
    return result.exit_code, result.output


def started(db: str, *options: str) -> str:
    code, out = run("start", APP, "report", *options, "--json", "--database", db)
    assert code == 0, out
    return str(json.loads(out)["run_id"])


def shown(db: str, run_id: str) -> dict[str, object]:
    code, out = run("runs", "show", run_id, "--json", "--database", db)
    assert code == 0, out
    record: dict[str, object] = json.loads(out)["run"]
    return record


def test_debounced_starts_share_one_waiting_run(db: str) -> None:
    window = ["--debounce", "1h", "--debounce-key", "nightly", "--debounce-max", "2h"]
    first = started(db, "--input", '{"kind": "a"}', *window)
    second = started(db, "--input", '{"kind": "b"}', *window)
    assert second == first
    record = shown(db, first)
    assert record["status"] == "queued" and record["input"] == {"kind": "b"}


def test_dedup_policy_replace_cancels_the_live_run(db: str) -> None:
    old = started(db, "--dedup", "d", "--delay", "1h")
    assert started(db, "--dedup", "d") == old
    new = started(db, "--dedup", "d", "--dedup-policy", "replace", "--delay", "1h")
    assert new != old
    assert shown(db, old)["status"] == "cancelled"
    assert shown(db, new)["status"] == "queued"


@pytest.mark.parametrize(
    ("options", "names"),
    [
        (["--debounce", "soon"], "debounce"),
        (["--debounce", "5s", "--debounce-max", "1s"], "debounce_max"),
        (["--debounce-key", "k"], "debounce_key"),
        (["--dedup-policy", "newest"], "dedup_policy"),
        (["--dedup-policy", "replace"], "dedup_policy"),
    ],
)
def test_bad_debounce_and_dedup_options_are_one_line(
    db: str, options: list[str], names: str
) -> None:
    code, out = run("start", APP, "report", *options, "--database", db)
    assert code != 0
    assert names in out and len(out.strip().splitlines()) == 1
