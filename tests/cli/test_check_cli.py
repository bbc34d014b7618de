"""``plait check APP``: lists exactly the runs v2 would diverge on and exits 1, exits 0
when none does, and leaves the database as it found it (the SQLite file byte for byte,
every row on PostgreSQL)."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import asyncpg
from typer.testing import CliRunner

from plait.cli import cli
from support.check_cases import CASES, shop_app, start_v1
from support.counter import Counter

COUNTER = Counter()
#: the apps the command loads (``test_check_cli:v2``): v2 of every case, and a v2 that
#: changed nothing
v2 = shop_app(COUNTER, "2", CASES)
same = shop_app(COUNTER, "2", [c for c in CASES if c.step is None])


async def plait_check(*args: str) -> Any:
    """The command in a thread (it runs its own event loop)."""
    return await asyncio.to_thread(CliRunner().invoke, cli, ["check", *args])


def _sqlite_files(database: str) -> dict[str, bytes]:
    path = Path(database.removeprefix("sqlite:///"))
    files = [path, path.with_name(path.name + "-wal")]
    return {f.name: f.read_bytes() for f in files if f.exists()}


async def _postgres_rows(database: str) -> dict[str, list[str]]:
    conn = await asyncpg.connect(database)
    try:
        tables = await conn.fetch(
            "SELECT table_schema, table_name FROM information_schema.tables"
            " WHERE table_schema NOT IN ('pg_catalog', 'information_schema')"
            " AND table_type = 'BASE TABLE'"
        )
        rows: dict[str, list[str]] = {}
        for t in tables:
            name = f'"{t["table_schema"]}"."{t["table_name"]}"'
            rows[name] = sorted(r[0] for r in await conn.fetch(f"SELECT t::text FROM {name} t"))
        return rows
    finally:
        await conn.close()


async def _stored(database: str) -> Any:
    if database.startswith("sqlite"):
        return _sqlite_files(database)
    return await _postgres_rows(database)


async def test_check_lists_the_diverging_runs_and_changes_nothing(
    engine_factory, database: str
) -> None:
    runs = await start_v1(engine_factory, Counter(), CASES)
    before = await _stored(database)
    assert before

    result = await plait_check("test_check_cli:v2", "--database", database)
    assert result.exit_code == 1, result.output
    lines = result.output.strip().splitlines()
    diverging = [c for c in CASES if c.step is not None]
    assert lines[-1] == f"{len(CASES)} runs checked, {len(diverging)} diverge"
    listed = lines[:-1]
    assert len(listed) == len(diverging), lines
    for case in diverging:
        (line,) = [line for line in listed if line.startswith(runs[case.name][-8:] + " ")]
        assert f"  {case.name}  {case.step_name}: " in line, line
    assert await _stored(database) == before

    as_json = await plait_check("test_check_cli:v2", "--json", "--database", database)
    assert as_json.exit_code == 1, as_json.output
    results = {r["run_id"]: r for r in json.loads(as_json.output)}
    assert set(results) == set(runs.values())
    for case in CASES:
        result_of = results[runs[case.name]]
        assert result_of["ok"] is (case.step is None)
        assert (result_of["step"], result_of["step_name"]) == (case.step, case.step_name)
    assert await _stored(database) == before

    fine = await plait_check("test_check_cli:v2", "--workflow", "unchanged", "-d", database)
    assert fine.exit_code == 0, fine.output
    assert fine.output.strip() == "1 runs checked, 0 diverge"
    all_fine = await plait_check("test_check_cli:same", "--include-ended", "3", "-d", database)
    assert all_fine.exit_code == 1  # the runs of the workflows "same" lacks are not ok
    assert "is not registered in this app" in all_fine.output
    assert await _stored(database) == before


async def test_check_exits_0_when_no_run_diverges(engine_factory, database: str) -> None:
    fine = [c for c in CASES if c.step is None]
    await start_v1(engine_factory, Counter(), fine)
    result = await plait_check("test_check_cli:same", "--database", database)
    assert result.exit_code == 0, result.output
    assert result.output.strip() == f"{len(fine)} runs checked, 0 diverge"


async def test_check_refuses_bad_input(engine_factory, database: str) -> None:
    async with engine_factory(same):
        pass
    negative = await plait_check("test_check_cli:v2", "--include-ended", "-1", "-d", database)
    assert negative.exit_code == 2
    assert "--include-ended must be 0 or more, got -1" in negative.output
    unknown = await plait_check("test_check_cli:v2", "--workflow", "nope", "-d", database)
    assert unknown.exit_code == 2
    assert "unknown workflow 'nope' (registered: changed_input" in unknown.output
    no_app = await plait_check("test_check_cli:missing", "-d", database)
    assert no_app.exit_code == 2, no_app.output
