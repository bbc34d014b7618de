"""Every package plait imports is one pyproject.toml asks for.

A package that only arrives with a test tool works on a developer's machine and fails on a
user's: ``import plait`` must load nothing beyond the core dependencies (and what they
bring), and every third-party module anywhere in ``src`` must be declared, in the core or
in an extra.
"""

from __future__ import annotations

import ast
import json
import re
import subprocess
import sys
import tomllib
from importlib import metadata

from support.paths import ROOT


def _name(requirement: str) -> str:
    return re.split(r"[\s<>=!~;\[]", requirement, maxsplit=1)[0].lower().replace("_", "-")


def _project() -> dict:
    return tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]


def _closure(names: set[str], extras: bool = False) -> set[str]:
    """The distributions these bring with them (installed ones only).

    With ``extras``, a dependency's own extras count too: jsonschema, say, imports idna
    when it happens to be installed, for its format checks.
    """
    seen: set[str] = set()
    todo = list(names)
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        seen.add(name)
        try:
            requires = metadata.requires(name) or []
        except metadata.PackageNotFoundError:
            continue
        todo.extend(_name(r) for r in requires if extras or "extra ==" not in r)
    return seen


def _distributions(module: str) -> set[str]:
    return {d.lower().replace("_", "-") for d in metadata.packages_distributions().get(module, [])}


def test_import_plait_loads_only_core_dependencies() -> None:
    core = _closure({_name(r) for r in _project()["dependencies"]}, extras=True)
    loaded = subprocess.run(
        [
            sys.executable,
            "-c",
            "import json, sys, plait, plait.cli; print(json.dumps(sorted(sys.modules)))",
        ],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    third_party = {
        m.split(".")[0]
        for m in json.loads(loaded)
        if m.split(".")[0] not in sys.stdlib_module_names and not m.startswith(("plait", "_"))
    }
    undeclared = {m: _distributions(m) for m in third_party if not _distributions(m) & core}
    undeclared = {m: d for m, d in undeclared.items() if d}  # namespace leftovers have none
    assert not undeclared, (
        f"import plait loads packages outside the core dependencies: {undeclared}"
    )


def test_a_process_running_code_workflows_loads_no_graph_machinery() -> None:
    """A worker restarting after a crash pays, before its first step, for every module it
    imports: the graph planner and the YAML reader wait until a graph is met."""
    code = (
        "import asyncio, json, sys, tempfile, plait\n"
        "app = plait.App()\n"
        "@app.workflow\n"
        "async def hello(wf, data):\n"
        "    return await wf.do('greet', lambda d: 'hi ' + d, data)\n"
        "async def main():\n"
        "    url = 'sqlite:///' + tempfile.mkdtemp() + '/t.db'\n"
        "    async with plait.Engine(app, url) as engine:\n"
        "        assert await engine.run('hello', 'you', timeout=10) == 'hi you'\n"
        "asyncio.run(main())\n"
        "print(json.dumps(sorted(sys.modules)))\n"
    )
    loaded = json.loads(
        subprocess.run(
            [sys.executable, "-c", code], capture_output=True, text=True, check=True
        ).stdout
    )
    graph = [m for m in loaded if m.startswith(("plait.graph.", "plait.runtime.graph", "yaml"))]
    assert graph == ["plait.graph.errors"]


def test_every_third_party_import_in_src_is_declared() -> None:
    project = _project()
    declared = {_name(r) for r in project["dependencies"]}
    for extra, requirements in project["optional-dependencies"].items():
        if extra != "dev":
            declared |= {_name(r) for r in requirements}
    declared = _closure(declared)
    missing: dict[str, str] = {}
    for path in (ROOT / "src").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                modules = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                modules = [node.module]
            else:
                continue
            for module in modules:
                top = module.split(".")[0]
                if top in sys.stdlib_module_names or top == "plait":
                    continue
                if top in {"pytest", "pytest_asyncio"} and path.parent.name == "testing":
                    continue  # the pytest plugin runs only inside pytest
                if not _distributions(top) & declared:
                    missing[top] = str(path.relative_to(ROOT))
    assert not missing, f"modules imported in src but not declared in pyproject.toml: {missing}"
