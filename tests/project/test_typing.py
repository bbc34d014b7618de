"""The public API's types, as mypy and pyright see them, and the run-time checks behind them.

A type checker that says ``Any`` where a user expects a step's type is a silent
regression, so the revealed types are asserted as text: ``wf.do`` is typed by the
function it runs, the decorators hand the function back unchanged, ``engine.run`` is
typed by the workflow object, and a wrong argument for a step is an error.
"""

from __future__ import annotations

import asyncio
import importlib.util
import json
import re
import subprocess
import sys
import textwrap
from datetime import timedelta
from pathlib import Path

import pytest

import plait
from plait.durations import timeout_seconds
from support.paths import ROOT

SNIPPET = textwrap.dedent(
    """\
    from typing import reveal_type

    import plait

    app = plait.App("typing")


    @app.function
    async def fetch(order_id: int) -> dict[str, float]:
        return {"total": float(order_id)}


    @app.function(retries=1)
    def price(sku: str, ctx: plait.StepContext) -> float:
        return 1.0


    @app.workflow
    async def flow(wf: plait.Workflow, n: int) -> list[str]:
        reveal_type(await wf.do("fetch", fetch, n))
        reveal_type(await wf.do("price", price, "sku-1", timeout="5s"))
        reveal_type(await wf.do("inline", lambda: "text"))
        reveal_type(await wf.do("by name", "fetch", n))
        reveal_type(fetch)
        await wf.do("wrong", fetch, "not an int")
        return []


    async def main(engine: plait.Engine) -> None:
        reveal_type(await engine.run(flow, 3))
        reveal_type(await engine.wait("some-run", workflow=flow))
    """
)
#: the line of ``wf.do("wrong", ...)`` in SNIPPET (1-based)
WRONG_LINE = SNIPPET.splitlines().index('    await wf.do("wrong", fetch, "not an int")') + 1

pytestmark = pytest.mark.slow


def _write(tmp_path: Path) -> Path:
    path = tmp_path / "snippet.py"
    path.write_text(SNIPPET)
    return path


def test_mypy_reveals_the_step_types_and_refuses_a_wrong_argument(tmp_path: Path) -> None:
    if importlib.util.find_spec("mypy") is None:
        pytest.skip("mypy is not installed (the dev extra installs it)")
    snippet = _write(tmp_path)
    (tmp_path / "mypy.ini").write_text("[mypy]\nstrict = True\n")
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "mypy",
            "--config-file",
            str(tmp_path / "mypy.ini"),
            "--cache-dir",
            str(tmp_path / ".mypy_cache"),
            "--no-error-summary",
            snippet.name,
        ],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env={"MYPYPATH": str(ROOT / "src"), "PATH": "/usr/bin:/bin"},
        timeout=300,
    )
    # older mypy releases spell names in full (``builtins.dict``)
    revealed = [
        re.sub(r"\b(?:builtins|typing|plait\.records)\.", "", line.split('is "', 1)[1])[:-1]
        for line in result.stdout.splitlines()
        if "Revealed type is" in line
    ]
    assert revealed == [
        "dict[str, float]",
        "float",
        "str",
        "Any",
        "def (order_id: int) -> Coroutine[Any, Any, dict[str, float]]",
        "list[str]",
        "Run[list[str]]",
    ], result.stdout + result.stderr
    errors = [line for line in result.stdout.splitlines() if ": error:" in line]
    assert len(errors) == 1, result.stdout
    assert errors[0].startswith(f"{snippet.name}:{WRONG_LINE}:"), errors
    assert "[arg-type]" in errors[0]


def test_pyright_reveals_the_step_types_and_refuses_a_wrong_argument(tmp_path: Path) -> None:
    if importlib.util.find_spec("pyright") is None:
        pytest.skip("pyright is not installed (the dev extra installs it)")
    snippet = _write(tmp_path)
    config = {
        "include": [snippet.name],
        "extraPaths": [str(ROOT / "src")],
        "pythonVersion": "3.11",
        "typeCheckingMode": "strict",
    }
    (tmp_path / "pyrightconfig.json").write_text(json.dumps(config))
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "pyright",
            "--outputjson",
            "--pythonpath",
            sys.executable,
            "-p",
            str(tmp_path / "pyrightconfig.json"),
        ],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        timeout=300,
    )
    report = json.loads(result.stdout)
    diagnostics = report["generalDiagnostics"]
    # releases before 1.1.390 or so spell a coroutine ``Coroutine``, later ``CoroutineType``
    revealed = [
        d["message"].rsplit(' is "', 1)[1].rstrip('"').replace("CoroutineType[", "Coroutine[")
        for d in diagnostics
        if d["severity"] == "information" and d["message"].startswith("Type of")
    ]
    assert revealed == [
        "dict[str, float]",
        "float",
        "str",
        "Any",
        "(order_id: int) -> Coroutine[Any, Any, dict[str, float]]",
        "list[str]",
        "Run[list[str]]",
    ], diagnostics
    errors = [d for d in diagnostics if d["severity"] == "error"]
    assert errors, diagnostics
    # every error is about the wrong argument (pyright reports the call and the argument)
    assert {d["range"]["start"]["line"] + 1 for d in errors} == {WRONG_LINE}, errors


def test_the_typed_example_runs() -> None:
    """The program the checkers read in ``make test`` is also a working program."""
    spec = importlib.util.spec_from_file_location("typed_example", ROOT / "examples" / "typed.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    confirmation = asyncio.run(module.main())
    assert confirmation["total_with_shipping"] == 47
    assert confirmation["items"] == ["o-1-item-1", "o-1-item-2"]


# -- the run-time side of the typed surface ---------------------------------------------


def test_timeouts_take_seconds_strings_and_timedeltas() -> None:
    assert timeout_seconds(None) is None
    assert timeout_seconds(2) == 2.0
    assert timeout_seconds(0) == 0.0
    assert timeout_seconds("1m30s") == 90.0
    assert timeout_seconds(timedelta(milliseconds=1500)) == 1.5
    with pytest.raises(ValueError, match="invalid timeout"):
        timeout_seconds("soon")


def _app() -> tuple[plait.App, object, object]:
    app = plait.App("typed")

    @app.function
    async def double(n: int) -> int:
        return n * 2

    @app.workflow
    async def twice(wf: plait.Workflow, n: int) -> int:
        return await wf.do("double", double, n)

    @app.workflow
    async def other(wf: plait.Workflow) -> str:
        return "other"

    return app, twice, other


async def test_a_workflow_object_runs_and_waits_like_its_name(tmp_path: Path) -> None:
    app, twice, other = _app()
    async with plait.Engine(app, f"sqlite:///{tmp_path / 'typed.db'}") as engine:
        assert await engine.run(twice, 21, timeout=timedelta(seconds=30)) == 42
        run_id = await engine.start(twice, 5)
        run = await engine.wait(run_id, workflow=twice, timeout="30s")
        assert run.output == 10
        with pytest.raises(ValueError, match="is a run of workflow 'twice', not 'other'"):
            await engine.wait(run_id, workflow=other, timeout=5)
        with pytest.raises(TypeError, match=r"registered with @app\.workflow"):
            await engine.start(lambda wf: None)
        with pytest.raises(TimeoutError):
            await engine.wait(await engine.start(other, delay="1h"), timeout=timedelta(0))


async def test_unknown_status_filters_are_refused_by_name(tmp_path: Path) -> None:
    app, _twice, _other = _app()
    async with plait.Engine(app, f"sqlite:///{tmp_path / 'status.db'}") as engine:
        with pytest.raises(ValueError, match=r"invalid status filter: 'faild' \(use one of"):
            await engine.list_runs(status="faild")
        assert await engine.list_runs(status=plait.RunStatus.FAILED) == []
        with pytest.raises(ValueError, match="invalid graph status: 'actve'"):
            await engine.list_graphs("actve")
        with pytest.raises(ValueError, match="invalid approval status"):
            await engine.list_approvals(status="opne")
        with pytest.raises(ValueError, match="prune deletes ended runs only"):
            await engine.prune(older_than="1d", statuses=["running"])
