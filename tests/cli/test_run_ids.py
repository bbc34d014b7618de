"""Every command that takes a run id takes a unique prefix or suffix of it too, the short
id the dashboard shows among them; a part that names several runs is refused with a few
of them listed, one that names none says so."""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

import plait
from plait.cli import cli

APP = """
import plait

app = plait.App("ids")


@app.function
def one(data: int) -> int:
    return data + 1


@app.workflow
async def flow(wf: plait.Workflow, n: int) -> int:
    return await wf.do("one", one, n)


@app.workflow
async def waiter(wf: plait.Workflow, data: None) -> dict:
    return await wf.wait_for_event("go", timeout="1h")
"""

#: runs the tests start with ids of their own choosing, waiting for an event
WAITING = ("order-alpha-123", "order-alpha-456", "invoice-beta-789")


@pytest.fixture
def folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[str, str]:
    """The user's module and a database holding one completed run of ``flow`` (a UUID
    id, returned with the URL) and the ``WAITING`` runs of ``waiter``."""
    (tmp_path / "ids_app.py").write_text(APP)
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delenv("PLAIT_DATABASE_URL", raising=False)
    sys.modules.pop("ids_app", None)
    import ids_app  # type: ignore[import-not-found]

    app: plait.App = ids_app.app
    url = f"sqlite:///{tmp_path / 'ids.db'}"

    async def make() -> str:
        async with plait.Engine(app, url) as engine:
            done = await engine.start("flow", 1)
            assert (await engine.wait(done, timeout=10)).status == "completed"
        async with plait.Engine(app, url, workers=False) as engine:
            for run_id in WAITING:
                await engine.start("waiter", run_id=run_id)
        return done

    return asyncio.run(make()), url


def run(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(cli, list(args))
    return result.exit_code, result.output


def _status(url: str, run_id: str) -> str:
    code, out = run("runs", "show", run_id, "--json", "-d", url)
    assert code == 0, out
    return str(json.loads(out)["run"]["status"])


def test_runs_show_takes_the_dashboard_s_short_id_and_a_prefix(folder: tuple[str, str]) -> None:
    done, url = folder
    for part in (done[-8:], done[-8:].upper(), done[:13]):
        code, out = run("runs", "show", part, "--json", "-d", url)
        assert code == 0, out
        assert json.loads(out)["run"]["id"] == done


def test_cancel_and_send_event_take_a_unique_part(folder: tuple[str, str]) -> None:
    _done, url = folder
    code, out = run("send-event", "invoice", "go", "--data", "{}", "-d", url)
    assert code == 0, out
    assert "run invoice-beta-789" in out
    code, out = run("cancel", "alpha-456", "-d", url)  # a suffix
    assert code == 0, out
    assert "run order-alpha-456 cancelled" in out
    assert _status(url, "order-alpha-456") == "cancelled"
    assert _status(url, "order-alpha-123") == "running"


def test_a_part_that_names_several_runs_lists_them(folder: tuple[str, str]) -> None:
    _done, url = folder
    code, out = run("cancel", "order-alpha", "-d", url)
    assert code == 1
    assert "'order-alpha' is ambiguous" in out
    assert "order-alpha-123" in out and "order-alpha-456" in out
    assert "invoice-beta-789" not in out
    # contained but neither at the start nor at the end: no run
    code, out = run("retry", "alpha", "-d", url)
    assert code == 1 and "no run matches 'alpha'" in out
    assert _status(url, "order-alpha-123") == "running"
    assert _status(url, "order-alpha-456") == "running"


def test_a_part_that_names_no_run_says_so(folder: tuple[str, str]) -> None:
    _done, url = folder
    for args in (
        ("runs", "show", "zzzz"),
        ("resume", "zzzz"),
        ("approve", "zzzz", "sign-off"),
        ("fork", "zzzz", "--from", "one"),
        ("graph", "ids_app:app", "flow", "--run", "zzzz"),
    ):
        code, out = run(*args, "-d", url)
        assert code == 1 and "no run matches 'zzzz'" in out, (args, out)


def test_approve_fork_and_graph_take_a_unique_part(folder: tuple[str, str]) -> None:
    done, url = folder
    code, out = run("approve", "invoice-b", "sign-off", "--by", "dana", "-d", url)
    assert code == 0, out
    assert "approval 'sign-off' of run invoice-beta-789: held" in out
    code, out = run("fork", done[-8:], "--from", "one", "--json", "-d", url)
    assert code == 0, out
    assert json.loads(out)["forked_from"] == done
    code, out = run("graph", "ids_app:app", "flow", "--run", done[-8:], "--json", "-d", url)
    assert code == 0, out
    assert json.loads(out)["run_id"] == done


def _start_waiter(url: str, run_id: str) -> None:
    """One more run of ``waiter`` with the id ``run_id``, by an engine that works none."""

    async def more() -> None:
        app = plait.App("ids")

        @app.workflow(name="waiter")
        async def waiter(wf: plait.Workflow, data: None) -> None: ...

        async with plait.Engine(app, url, workers=False) as engine:
            await engine.start("waiter", run_id=run_id)

    asyncio.run(more())


def test_a_whole_id_is_taken_as_it_is(folder: tuple[str, str]) -> None:
    """An id that is also the start of another run's id names itself, not both."""
    _done, url = folder

    _start_waiter(url, "order-alpha-123-again")
    assert _status(url, "order-alpha-123") == "running"
    for part, whole in (
        ("order-alpha-123", "order-alpha-123"),
        ("again", "order-alpha-123-again"),
    ):
        code, out = run("runs", "show", part, "--json", "-d", url)
        assert code == 0, out
        assert json.loads(out)["run"]["id"] == whole


def test_an_id_with_an_emoji_code_in_it_is_printed_as_it_is(folder: tuple[str, str]) -> None:
    """``:fire:`` in a run id (``order:fire:1``, a schedule named ``smile``) is text the
    operator copies into the next command, not an emoji."""
    _done, url = folder

    _start_waiter(url, "order:fire:1")
    code, out = run("runs", "list", "-d", url)
    assert code == 0, out
    assert "order:fire:1" in out and "\N{FIRE}" not in out
    code, out = run("cancel", "order:fire:1", "-d", url)
    assert code == 0, out
    assert "run order:fire:1 cancelled" in out
    code, out = run("start", "ids_app:app", "waiter", "--run-id", "schedule:a:b", "-d", url)
    assert code != 0 and "'schedule:a:b'" in out, out
