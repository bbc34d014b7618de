"""The dependency rule of docs/architecture.md, read from the code on every test run."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from support.paths import ROOT

SRC = ROOT / "src"


def _modules() -> dict[str, Path]:
    found = {}
    for path in (SRC / "plait").rglob("*.py"):
        parts = path.relative_to(SRC).with_suffix("").parts
        found[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return found


def _imports() -> dict[str, set[str]]:
    """Module -> the plait modules it imports (anywhere in the file, type-only too)."""
    modules = _modules()
    graph: dict[str, set[str]] = {name: set() for name in modules}
    for name, path in modules.items():
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        for node in ast.walk(ast.parse(path.read_text())):
            targets: list[str] = []
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    anchor = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                    base = ".".join([*anchor, base] if base else anchor)
                targets = [base, *(f"{base}.{alias.name}" for alias in node.names)]
            for target in targets:
                while target and target not in modules:
                    target = target.rpartition(".")[0]
                if not target or target == name:
                    continue
                # importing a sibling through its package's __init__ is not a dependency
                # on the whole package
                if modules[target].name == "__init__.py" and name.startswith(target + "."):
                    continue
                graph[name].add(target)
    return graph


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in graph:
        if v not in index:
            visit(v)
    return found


@pytest.fixture(scope="module")
def imports() -> dict[str, set[str]]:
    return _imports()


def test_no_module_imports_another_in_a_loop(imports) -> None:
    assert _cycles(imports) == []


def test_the_runtime_and_the_worker_never_import_the_engine(imports) -> None:
    offenders = [
        m
        for m, targets in imports.items()
        if m.startswith(("plait.runtime", "plait.worker"))
        and any(t == "plait.engine" or t.startswith("plait.engine.") for t in targets)
    ]
    assert offenders == []


def test_the_runtime_never_imports_the_worker(imports) -> None:
    offenders = [
        m
        for m, targets in imports.items()
        if m.startswith("plait.runtime") and any(t.startswith("plait.worker") for t in targets)
    ]
    assert offenders == []


def test_stores_only_move_rows_and_import_no_higher_floor(imports) -> None:
    high = ("plait.runtime", "plait.engine", "plait.worker")
    offenders = {
        m: sorted(t for t in targets if t.startswith(high))
        for m, targets in imports.items()
        if m.startswith("plait.store")
    }
    assert {m: t for m, t in offenders.items() if t} == {}


def test_no_class_is_a_room_of_many_concerns() -> None:
    """A class over 500 lines holds several concerns: split it into a file each."""
    big = [
        f"{path.relative_to(SRC)}:{node.name} ({node.end_lineno - node.lineno + 1} lines)"
        for path in (SRC / "plait").rglob("*.py")
        for node in ast.walk(ast.parse(path.read_text()))
        if isinstance(node, ast.ClassDef)
        and node.end_lineno is not None
        and node.end_lineno - node.lineno + 1 > 500
    ]
    assert big == []


def test_graph_workflows_are_data_and_never_import_the_runtime(imports) -> None:
    offenders = {
        m: sorted(t for t in targets if t.startswith("plait.runtime"))
        for m, targets in imports.items()
        if m.startswith("plait.graph")
    }
    assert {m: t for m, t in offenders.items() if t} == {}


def test_low_floors_import_nothing_above_them(imports) -> None:
    floor_1 = (
        "plait.app",
        "plait.context",
        "plait.loading",
        "plait.store.rows",
        "plait.store.ops",
        "plait.store.contract",
    )
    high = ("plait.runtime", "plait.worker", "plait.engine", "plait.cli", "plait.http")
    offenders = {
        m: sorted(t for t in imports[m] if t.startswith(high))
        for m in imports
        if m in floor_1 or m.startswith("plait.graph")
    }
    assert {m: t for m, t in offenders.items() if t} == {}


def test_the_checker_sees_a_cycle() -> None:
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def _third_party(path: Path) -> set[str]:
    """The top-level names of the modules a file imports from outside plait."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found |= {alias.name.split(".")[0] for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            found.add(node.module.split(".")[0])
    return found


def test_only_the_integrations_import_the_libraries_they_integrate(imports) -> None:
    """plait's core never imports an agent framework; its integration module does, and
    nothing in plait imports that module (a user imports it, with its extra)."""
    integrated = {"pydantic_ai": "plait.integrations.pydantic_ai"}
    for name, path in _modules().items():
        for library, home in integrated.items():
            if library in _third_party(path):
                assert name == home, f"{name} imports {library}: only {home} may"
    users = [m for m, targets in imports.items() if "plait.integrations.pydantic_ai" in targets]
    assert users == []
