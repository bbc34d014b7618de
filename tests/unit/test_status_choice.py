"""``runtime/runs.py`` and ``runtime/steps.py`` are the only places of the runtime, the
graph package, the stores, the engine and the worker where a run's, a step's or an
attempt's status is chosen. Elsewhere a status is read (compared, filtered on) or handed
on, never written as a literal: a status set on a row (``x.status = "failed"``), passed as
``status=`` or to an op that moves a row (``EndRun("failed")``), returned, or a field's
default (``status: str = "running"``). The stores' SQL chooses none either
(``sql_choices``)."""

from __future__ import annotations

import ast
from pathlib import Path
from typing import get_args

import pytest

from plait import statuses
from plait.store import queries

from .sql_choices import chosen_in_sql

SRC = Path(__file__).resolve().parents[2] / "src" / "plait"
SCOPE = [SRC / "runtime", SRC / "graph", SRC / "store", SRC / "engine", SRC / "worker"]
CHOOSERS = {SRC / "runtime" / "runs.py", SRC / "runtime" / "steps.py"}
#: ops and records whose first argument is the status they write
MOVERS = {"EndRun", "StepEnd", "FinishAttempt", "GuardStep", "CancelChildren"}
#: ops whose third argument is the status they write
THIRD = {"StartAttempt"}
VALUES = (
    set(get_args(statuses.RunStatusName))
    | set(get_args(statuses.StepStatusName))
    | set(get_args(statuses.AttemptStatusName))
)


def _literals(node: ast.expr | None) -> list[str]:
    """The status literals an expression can evaluate to (through ``a if c else b``)."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value in VALUES:
        return [node.value]
    if isinstance(node, ast.IfExp):
        return _literals(node.body) + _literals(node.orelse)
    return []


def _chosen(tree: ast.AST) -> list[tuple[int, str]]:
    found: list[tuple[int, str]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Assign):
            for target in node.targets:
                pairs: list[tuple[ast.expr, ast.expr | None]] = []
                if isinstance(target, ast.Tuple) and isinstance(node.value, ast.Tuple):
                    pairs = list(zip(target.elts, node.value.elts, strict=False))
                else:
                    pairs = [(target, node.value)]
                for left, right in pairs:
                    if isinstance(left, ast.Attribute) and left.attr == "status":
                        found += [(node.lineno, f".status = {v!r}") for v in _literals(right)]
        elif isinstance(node, ast.Call):
            for keyword in node.keywords:
                if keyword.arg == "status":
                    found += [(node.lineno, f"status={v!r}") for v in _literals(keyword.value)]
            name = getattr(node.func, "id", getattr(node.func, "attr", None))
            if name in MOVERS and node.args:
                found += [(node.lineno, f"{name}({v!r})") for v in _literals(node.args[0])]
            if name in THIRD and len(node.args) > 2:
                found += [(node.lineno, f"{name}(.., {v!r})") for v in _literals(node.args[2])]
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            if node.target.id.endswith("status"):
                found += [
                    (node.lineno, f"{node.target.id}: ... = {v!r}") for v in _literals(node.value)
                ]
        elif isinstance(node, ast.Return):
            found += [(node.lineno, f"return {v!r}") for v in _literals(node.value)]
    return found


def test_only_the_state_machines_choose_a_status() -> None:
    files = [f for root in SCOPE for f in sorted(root.rglob("*.py")) if f not in CHOOSERS]
    assert len(files) > 10
    chosen = [
        f"{f.relative_to(SRC)}:{line}: {what}"
        for f in files
        for line, what in _chosen(ast.parse(f.read_text()))
    ]
    assert chosen == []


def test_the_scan_sees_a_status_chosen() -> None:
    """The check is not vacuous: the state machines themselves choose statuses."""
    for f in sorted(CHOOSERS):
        assert _chosen(ast.parse(f.read_text())), f
    sample = (
        'step.status, step.error = "failed", e\n'
        'EndRun("completed")\n'
        'def f():\n  return "x" if a else "queued"\n'
        'class NewRun:\n  status: str = "running"\n'
        'StartAttempt(row, 1, "running", "w1")\n'
    )
    assert [what for _, what in _chosen(ast.parse(sample))] == [
        ".status = 'failed'",
        "EndRun('completed')",
        "return 'queued'",
        "status: ... = 'running'",
        "StartAttempt(.., 'running')",
    ]


def _sql_statements() -> list[tuple[str, str]]:
    """Every SQL text of the stores: each named query of a ``queries.sql`` on its own,
    every other file (PostgreSQL's functions, the migrations, ``schema.sql``) whole."""
    texts: list[tuple[str, str]] = []
    for f in sorted((SRC / "store" / "sql").rglob("*.sql")):
        where = str(f.relative_to(SRC))
        if f.name == "queries.sql":
            texts += [(f"{where}:{n}", sql) for n, sql in queries.parse(f.read_text()).items()]
        else:
            texts.append((where, f.read_text()))
    return texts


def test_no_sql_of_the_stores_chooses_a_status() -> None:
    texts = _sql_statements()
    assert len(texts) > 100
    chosen = [f"{where}: {what}" for where, sql in texts for what in chosen_in_sql(sql)]
    assert chosen == []


@pytest.mark.parametrize(
    ("sql", "chosen"),
    [
        ("UPDATE runs SET status = 'running', owner = $1 WHERE status = 'queued'", 1),
        ("UPDATE runs SET status = CASE WHEN queue IS NULL THEN 'running' END", 1),
        ("UPDATE s SET attempt_status = CASE WHEN attempt_status = 'running' THEN $1 END", 1),
        ("SELECT CASE WHEN done THEN 'failed' ELSE 'succeeded' END FROM s", 2),
        ("INSERT INTO runs (id, status) VALUES ($1, 'queued')", 1),
        ("PERFORM end_run(p_run, 'cancelled', NULL)", 1),
        ("SELECT coalesce(n.status, 'running')", 1),
        ("UPDATE runs SET status = $1 WHERE id = $2 AND status IN ('queued', 'running')", 0),
        ("UPDATE runs SET wake_at = CASE WHEN status <> 'running' THEN NULL END", 0),
        ("UPDATE s SET failures = failures + CASE WHEN e.status = 'failed' THEN 1 END", 0),
        ("SELECT end_run(r, s, ARRAY['running', 'suspended'])", 0),
        ("IF v IS DISTINCT FROM 'pending' THEN RAISE; END IF", 0),
        (
            "UPDATE r SET dedup = CASE WHEN EXISTS (SELECT 1 FROM r o WHERE o.status = 'queued')"
            " THEN NULL END, status = $1",
            0,
        ),
    ],
)
def test_the_sql_scan_tells_a_status_chosen_from_one_read(sql: str, chosen: int) -> None:
    assert len(chosen_in_sql(sql)) == chosen, chosen_in_sql(sql)
