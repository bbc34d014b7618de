"""An attempt's start and end write, whichever of a step's values are missing, the row the
statements that bind every value write (the texts with some written as NULL included)."""

from __future__ import annotations

import dataclasses
import itertools
import sqlite3
from collections.abc import Iterator

import pytest

from plait.store import convert
from plait.store.ops import FinishAttempt
from plait.store.rows import StepRow
from plait.store.sqlite import apply
from plait.store.sqlite.nulls import null_at
from plait.store.sqlite.store import SQLiteStore
from plait.store.sqlite.writer import SQL

from .rows import T0, step
from .sql_choices import STATUSES

#: a value for each column a step's first start or its end may find missing
_GIVEN = {
    "output": '"out"',
    "error": '"boom"',
    "child_run_id": "child",
    "wake_at": T0 + 5,
    "delivered": 3,
    "retry_delay": 2,
    "timeout": 1.5,
    "branch": "b",
    "from_key": "k0",
}
_NOW = T0 + 10


def _database() -> sqlite3.Connection:
    conn = sqlite3.connect(":memory:", isolation_level=None)
    SQLiteStore("sqlite:///:memory:")._migrate(conn)
    return conn


@pytest.fixture
def conns() -> Iterator[tuple[sqlite3.Connection, sqlite3.Connection]]:
    """Two databases: the one the store's functions write, and the one the statements
    binding every value write."""
    ours, plain = _database(), _database()
    yield ours, plain
    ours.close()
    plain.close()


def _steps() -> Iterator[StepRow]:
    """A step for each pattern of missing values among ``_GIVEN``'s columns."""
    names = list(_GIVEN)
    for n, present in enumerate(itertools.product((False, True), repeat=len(names))):
        given = {name: _GIVEN[name] for name, there in zip(names, present, strict=True) if there}
        yield step(
            f"s{n}",
            status="running",
            attempts=1,
            updated_at=T0 + 1,
            reached_after='["a"]',
            queued=n % 2,
            **given,
        )


def _rows(conn: sqlite3.Connection) -> list[tuple[object, ...]]:
    cols = [row[1] for row in conn.execute("PRAGMA table_info(plait_steps)")]
    typed = ", ".join(f'"{c}", typeof("{c}")' for c in cols)
    return conn.execute(f"SELECT {typed} FROM plait_steps ORDER BY key").fetchall()


def test_a_first_start_writes_the_row_binding_every_value_writes(
    conns: tuple[sqlite3.Connection, sqlite3.Connection],
) -> None:
    ours, plain = conns
    for s in _steps():
        apply.start_attempt(ours, s, 1, "running", "w1", _NOW)
        plain.execute(SQL["insert_step_start"], (*convert.step_params(s), "w1", "running", _NOW))
    assert len(_rows(ours)) == 2 ** len(_GIVEN)
    assert _rows(ours) == _rows(plain)


def test_a_success_writes_the_row_binding_every_value_writes(
    conns: tuple[sqlite3.Connection, sqlite3.Connection],
) -> None:
    ours, plain = conns
    for conn in conns:
        # rows that hold every value first, so that each NULL the end writes shows
        for s in _steps():
            full = dataclasses.replace(s, **_GIVEN)
            conn.execute(SQL["insert_step_start"], (*convert.step_params(full), "w", "running", T0))
    for s in _steps():
        ended = dataclasses.replace(s, status="succeeded", updated_at=_NOW)
        apply.finish_attempt(ours, ended, "succeeded", None, _NOW)
        head = (
            ended.status,
            ended.output,
            ended.error,
            ended.attempts,
            ended.failures,
            ended.wake_at,
            ended.branch,
            ended.child_run_id,
            ended.updated_at,
            ended.delivered,
        )
        plain.execute(SQL["finish_step_succeeded"], (*head, "succeeded", _NOW, s.run_id, s.key))
    assert _rows(ours) == _rows(plain)


def test_null_at_refuses_names_that_do_not_match_the_placeholders() -> None:
    with pytest.raises(ValueError, match="placeholders"):
        null_at("UPDATE t SET a = ?, b = ?", ("a",), ())
    with pytest.raises(ValueError, match="placeholders"):
        null_at("UPDATE t SET a = ?", ("a",), ("b",))
    assert null_at("UPDATE t SET a = ?, b = ?", ("a", "b"), ("a",)) == (
        "UPDATE t SET a = NULL, b = ?"
    )


def test_the_fenced_success_writes_only_in_a_running_run_its_worker_holds() -> None:
    """Anything else (an ended run above all) is left to the commit's own fence."""
    conn = _database()
    row = step("a", run_id="r", status="running", attempts=1)
    conn.execute(SQL["insert_step_start"], (*convert.step_params(row), "w", "running", T0))
    conn.execute(
        "INSERT INTO plait_runs (id, workflow, kind, status, created_at, updated_at, lease_owner)"
        " VALUES ('r', 'wf', 'workflow', 'running', 0, 0, 'w')"
    )
    done = dataclasses.replace(row, status="succeeded", output='"ok"')
    for status in sorted(STATUSES):
        conn.execute("UPDATE plait_runs SET status = ? WHERE id = 'r'", (status,))
        wrote = apply.finish_fenced(conn, "r", FinishAttempt(done, 1, "succeeded"), "w", _NOW)
        assert wrote is (status == "running"), status
    assert not apply.finish_fenced(conn, "r", FinishAttempt(done, 1, "succeeded"), "x", _NOW)
    conn.close()
