"""One name, one thing: a second function, workflow or graph under a taken name is
refused with where the first was defined, unless it is the same definition registered
again (the same object; its module imported twice) or a new version of a workflow."""

from __future__ import annotations

import importlib.util
import sys
import textwrap
from pathlib import Path

import pytest

import plait


def test_a_second_function_under_one_name_is_refused() -> None:
    app = plait.App()

    @app.function
    def charge(data: int) -> int:
        return data

    def other(data: int) -> int:
        return -data

    with pytest.raises(ValueError, match=r"function 'charge' is already registered") as err:
        app.function(name="charge")(other)
    assert f"{__file__}:" in str(err.value) and "name=..." in str(err.value)
    assert app.functions["charge"].fn is charge
    # every lambda has one name: two of them are still two functions
    app.function(name="inline")(lambda data: 1)
    with pytest.raises(ValueError, match="'inline' is already registered"):
        app.function(name="inline")(lambda data: 2)


def test_the_same_function_again_is_a_no_op_unless_its_options_change() -> None:
    app = plait.App()

    def charge(data: int) -> int:
        return data

    app.function(retries=2)(charge)
    assert app.function(retries=2)(charge) is charge
    assert app.functions["charge"].retries == 2
    with pytest.raises(ValueError, match="registered twice with different options"):
        app.function(retries=5)(charge)


def test_a_second_workflow_needs_another_name_or_a_version() -> None:
    app = plait.App()

    @app.workflow
    async def checkout(wf: plait.Workflow, data: None) -> int:
        return 1

    async def impostor(wf: plait.Workflow, data: None) -> int:
        return 2

    with pytest.raises(ValueError, match="workflow 'checkout' is already registered") as err:
        app.workflow(name="checkout")(impostor)
    assert "version=" in str(err.value)
    assert app.workflows["checkout"].fn is checkout
    app.workflow(name="checkout", version="2")(impostor)  # a new version beside the first
    assert app.workflows["checkout"].fn is impostor
    assert len(app.workflow_versions["checkout"]) == 2

    async def third(wf: plait.Workflow, data: None) -> int:
        return 3

    with pytest.raises(ValueError, match="version '2' of workflow 'checkout' is already"):
        app.workflow(name="checkout", version="2")(third)
    assert app.workflow(checkout) is checkout  # the same one again


def test_graphs_and_workflows_share_their_names() -> None:
    app = plait.App()
    app.function(name="step")(lambda data: data)
    definition = {"nodes": {"only": {"function": "step"}}}
    app.graph("pipeline", definition)
    app.graph("pipeline", definition)  # the same definition again
    with pytest.raises(ValueError, match="graph 'pipeline' is already registered") as err:
        app.graph("pipeline", {"nodes": {"other": {"function": "step"}}})
    assert f"registered at {__file__}:" in str(err.value)

    async def pipeline(wf: plait.Workflow, data: None) -> None: ...

    with pytest.raises(ValueError, match="a graph is already registered under that name"):
        app.workflow(pipeline)

    @app.workflow
    async def flow(wf: plait.Workflow, data: None) -> None: ...

    with pytest.raises(ValueError, match="a workflow is already registered under that name"):
        app.graph("flow", definition)


def test_a_module_imported_twice_registers_its_names_again(tmp_path: Path) -> None:
    """The app lives in one module, its workflows in another that is imported twice
    (run as a script, then imported by name): the second import registers the same
    definitions, not new ones."""
    (tmp_path / "twice_app.py").write_text("import plait\napp = plait.App('twice')\n")
    (tmp_path / "twice_flows.py").write_text(
        textwrap.dedent(
            """
            import plait
            from twice_app import app

            @app.function
            def charge(data: int) -> int:
                return data

            @app.workflow
            async def checkout(wf: plait.Workflow, data: int) -> int:
                return await wf.do("charge", charge, data)
            """
        )
    )
    sys.path.insert(0, str(tmp_path))
    try:
        import twice_flows  # type: ignore[import-not-found]  # noqa: F401

        spec = importlib.util.spec_from_file_location("__main__", tmp_path / "twice_flows.py")
        assert spec is not None and spec.loader is not None
        spec.loader.exec_module(importlib.util.module_from_spec(spec))
        app = sys.modules["twice_app"].app
        assert set(app.functions) == {"charge"} and set(app.workflows) == {"checkout"}
    finally:
        sys.path.remove(str(tmp_path))
        for name in ("twice_app", "twice_flows"):
            sys.modules.pop(name, None)
