"""The stores' SQL lives in named queries, numbered migrations and (PostgreSQL) functions:
every name the code runs exists, the files parse, the scripts are numbered without gaps,
and the typed seams (RunFilter, Lease) behave the same on every store."""

from __future__ import annotations

import re
import sqlite3
from pathlib import Path

import pytest

from plait.store import make_store, queries
from plait.store.migrations import migrations
from support.paths import ROOT

STORE_DIR = ROOT / "src" / "plait" / "store"


@pytest.mark.parametrize(
    ("dialect", "package", "pattern"),
    [
        ("sqlite", "sqlite", r"SQL\[\s*\"([a-z_0-9]+)\"\s*\]"),
        ("postgres", "postgres", r"(?:_q|\bq)\[\s*\"([a-z_0-9]+)\"\s*\]"),
    ],
    ids=["sqlite", "postgres"],
)
def test_every_query_the_code_names_exists(dialect: str, package: str, pattern: str) -> None:
    values = {"schema": '"plait"'} if dialect == "postgres" else {}
    known = queries.load(dialect, **values)
    named: set[str] = set()
    for path in (STORE_DIR / package).glob("*.py"):
        named |= set(re.findall(pattern, path.read_text()))
    if dialect == "sqlite":
        named |= {f"synchronous_{level}" for level in ("off", "normal", "full", "extra")}
    else:
        named |= {"load_passes", "commit_batch", "release_run", "claim_due_runs"}
    assert named - set(known) == set()
    assert set(known) - named == set(), "queries no code runs"


def test_no_sql_is_left_in_python() -> None:
    keywords = re.compile(r"\b(SELECT|INSERT|UPDATE|DELETE|PRAGMA|BEGIN|COMMIT|ROLLBACK)\b")
    for path in STORE_DIR.rglob("*.py"):
        for number, line in enumerate(path.read_text().splitlines(), 1):
            code = re.sub(r"\b_?[A-Z_]+\s*=\s*SQL\[.*", "", line)  # a query bound to a name
            code = re.sub(r"\b_[A-Z_]+\b", "", code)  # the name of such a constant
            assert not keywords.search(code), f"{path.name}:{number}: {line.strip()}"


def test_the_loader_parses_name_blocks() -> None:
    text = "-- header\n\n-- name: one\n-- a comment\nSELECT 1\n\n-- name: two\nSELECT\n  2\n"
    assert queries.parse(text) == {"one": "SELECT 1", "two": "SELECT\n  2"}
    with pytest.raises(ValueError, match="defined twice"):
        queries.parse("-- name: a\nSELECT 1\n-- name: a\nSELECT 2\n")
    with pytest.raises(ValueError, match="no statement"):
        queries.parse("-- name: a\n-- only a comment\n-- name: b\nSELECT 2\n")
    assert queries.substitute("SELECT * FROM @schema@.runs", {"schema": '"x"'}) == (
        'SELECT * FROM "x".runs'
    )
    with pytest.raises(KeyError, match="@schema@"):
        queries.substitute("SELECT * FROM @schema@.runs", {})


def test_postgres_queries_are_filled_once_per_schema() -> None:
    a = queries.load("postgres", schema='"a"')
    assert queries.load("postgres", schema='"a"') is a
    assert '"a".runs' in a["select_run"] and "@" not in "".join(a.values())


def test_migrations_are_numbered_without_gaps() -> None:
    sqlite, postgres = migrations("sqlite"), migrations("postgres")
    assert [m.version for m in sqlite.scripts] == list(range(1, len(sqlite.scripts) + 1))
    assert [m.version for m in postgres.scripts] == list(range(1, len(postgres.scripts) + 1))
    assert [m.name for m in sqlite.scripts] == [m.name for m in postgres.scripts]
    assert sqlite.pending(0, where="x") == sqlite.scripts
    latest = len(sqlite.scripts)
    assert sqlite.pending(latest, where="x") == ()
    assert postgres.scripts[0].description() == (
        "runs, steps, attempts, jobs, timers, events, state, values, versions, graph owners,"
        " queues, schedules"
    )
    with pytest.raises(RuntimeError, match=f"x has schema version {latest + 1}, newer than"):
        sqlite.pending(latest + 1, where="x")


async def test_a_newer_sqlite_file_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "new.db"
    conn = sqlite3.connect(path)
    conn.execute("CREATE TABLE plait_schema (id INTEGER PRIMARY KEY, version INTEGER)")
    conn.execute("INSERT INTO plait_schema VALUES (1, 99)")
    conn.commit()
    conn.close()
    store = make_store(f"sqlite:///{path}")
    with pytest.raises(RuntimeError, match="has schema version 99, newer than this plait"):
        await store.open()


def test_an_unknown_synchronous_level_is_refused() -> None:
    make_store("sqlite://", synchronous="normal")
    make_store("sqlite://", synchronous="1")
    with pytest.raises(ValueError, match="invalid synchronous level"):
        make_store("sqlite://", synchronous="FAST")


@pytest.mark.parametrize(
    ("name", "first"),
    [("commit_first_attempts", 3), ("commit_first_attempts_consuming", 5)],
    ids=["steps", "taking an event"],
)
def test_first_attempts_write_steps_as_apply_step_ops_does(name: str, first: int) -> None:
    """``commit_first_attempts`` (a sequential step's write, one statement) and its form
    that also takes an event write step rows into the same columns with the same conflict
    rules as ``apply_step_ops``, the schema's function every other batch of step writes
    goes through. Written more than once, they must not drift: a change to the function
    must change the queries too. (The rows themselves are compared on a server in
    test_postgres_store.py.)"""
    body = (STORE_DIR / "sql" / "postgres" / "functions" / "steps.sql").read_text()
    body = body.split("FUNCTION @schema@.apply_step_ops(", 1)[1].split("END $$;")[0]
    function = body[body.index("INSERT INTO @schema@.steps") :].strip().removesuffix(";")
    query = queries.load("postgres", schema="@schema@")[name]
    statement = query[query.index("INSERT INTO @schema@.steps") : query.index("\n)\nSELECT")]

    def words(text: str) -> str:
        return " ".join(text.split())

    def columns(text: str) -> str:
        return words(text).split(") SELECT", 1)[0]

    def conflict(text: str) -> str:
        return words(text)[words(text).index("ON CONFLICT") :]

    assert columns(statement) == columns(function)
    assert conflict(statement) == conflict(function)
    # one row of typed parameters after the run, the fence (and the event): a column
    # each, in order
    typed = [int(n) for n in re.findall(r"\$(\d+)::", statement)]
    assert typed == list(range(first, first + columns(function).count(",") + 1))
