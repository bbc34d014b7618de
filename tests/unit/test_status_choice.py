"""``runtime/runs.py`` and ``runtime/steps.py`` are the only places of the runtime and
the graph package where a run's or a step's status is chosen. Elsewhere a status is read
(compared, filtered on) or handed on, never written as a literal: a status set on a row
(``x.status = "failed"``), passed as ``status=`` or to an op that moves a row
(``EndRun("failed")``), or returned."""

from __future__ import annotations

import ast
from pathlib import Path
from typing import get_args

from plait import statuses

SRC = Path(__file__).resolve().parents[2] / "src" / "plait"
SCOPE = [SRC / "runtime", SRC / "graph"]
CHOOSERS = {SRC / "runtime" / "runs.py", SRC / "runtime" / "steps.py"}
#: ops and records whose first argument is the status they write
MOVERS = {"EndRun", "StepEnd", "FinishAttempt", "GuardStep", "CancelChildren"}
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
    )
    assert [what for _, what in _chosen(ast.parse(sample))] == [
        ".status = 'failed'",
        "EndRun('completed')",
        "return 'queued'",
    ]
