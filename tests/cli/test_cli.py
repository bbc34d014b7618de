"""The command line as a new user meets it: ``--version``, ``send-event``, ``--json`` on
every command that reads runs, ``start --wait`` showing steps as they happen (and what a
run waits on), full results and tracebacks in ``runs show``, no database files made by
reading, one-line errors, and run data that cannot reach the terminal as markup or
escape sequences."""

from __future__ import annotations

import json
import os
import re
import struct
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path

import pytest
from typer.testing import CliRunner

from plait import __version__
from plait.cli import cli
from support.paths import ROOT

SHOP = """
import plait

app = plait.App("shop")


@app.function(retries=0)
async def charge(order: dict) -> dict:
    if order.get("fail"):
        raise ValueError("card declined: " + "x" * 60)
    return {"charged": order["amount"], "note": "a result well over forty characters long"}


@app.workflow
async def checkout(wf: plait.Workflow, order: dict) -> dict:
    receipt = await wf.do("charge", charge, order)
    await wf.sleep("cooling off", "10ms")
    if order.get("approval"):
        approval = await wf.wait_for_event("approval", timeout="1h")
        receipt["by"] = approval["by"]
    return receipt


@app.workflow
async def odd(wf: plait.Workflow, data: None) -> str:
    await wf.do("a[/b]", lambda: "\\x1b[31mred\\x1b[0m [bold]not bold[/bold] \\x9b2J")
    return "\\x1b]0;owned\\x07"
"""


@pytest.fixture
def shop(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A folder with the user's module and no database yet; the command runs there."""
    (tmp_path / "shop.py").write_text(SHOP)
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delenv("PLAIT_DATABASE_URL", raising=False)
    for name in [m for m in sys.modules if m in ("shop", "loop_at_import", "broken")]:
        del sys.modules[name]
    return tmp_path


def run(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(cli, list(args))
    return result.exit_code, result.output


def plait_process(*args: str, cwd: Path, path: Sequence[Path] = ()) -> subprocess.Popen[str]:
    """``plait ARGS`` in a process of its own, run in ``cwd``; it imports this plait and,
    besides the user's modules in ``cwd``, only what is in the folders of ``path``."""
    pythonpath = os.pathsep.join(str(folder) for folder in (ROOT / "src", *path))
    env = {**os.environ, "PYTHONUNBUFFERED": "1", "PYTHONPATH": pythonpath}
    env.pop("PLAIT_DATABASE_URL", None)
    return subprocess.Popen(
        [sys.executable, "-m", "plait", *args],
        cwd=cwd,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def _lines_until(process: subprocess.Popen[str], text: str) -> list[str]:
    """The lines ``process`` printed up to the first that holds ``text``."""
    assert process.stdout is not None
    lines: list[str] = []
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        line = process.stdout.readline()
        if not line:
            break
        lines.append(line.rstrip("\n"))
        if text in line:
            break
    return lines


def test_version() -> None:
    code, out = run("--version")
    assert code == 0 and out.strip() == f"plait {__version__}"


def test_start_wait_shows_steps_then_what_the_run_waits_for(shop: Path) -> None:
    """Not silent while the run waits for an event: the run id first, each step as it
    ends, then what it waits on and the command that sends it."""
    db = f"sqlite:///{shop / 'shop.db'}"
    order = json.dumps({"amount": 42, "approval": True})
    follower = plait_process(
        "start", "shop:app", "checkout", "-i", order, "--wait", "-d", db, cwd=shop
    )
    lines = _lines_until(follower, "waiting for event 'approval'")
    run_id = lines[0]
    assert len(run_id) == 36, lines
    assert any("charge" in line and "succeeded" in line for line in lines), lines
    assert any("cooling off" in line for line in lines), lines
    assert f"plait send-event {run_id} approval --data JSON" in lines[-1], lines
    code, out = run("send-event", run_id, "approval", "--data", '{"by": "dana"}', "-d", db)
    assert code == 0, out
    rest, errors = follower.communicate(timeout=60)
    assert follower.returncode == 0, rest + errors
    assert f"run {run_id} completed" in rest
    assert '"by": "dana"' in rest


def test_start_wait_says_a_queued_child_waits_for_a_worker(tmp_path: Path) -> None:
    """``start --wait`` runs the parent here, but a child of a queued workflow is admitted
    by a worker: the follower says so (not only "waiting for child run"), and goes on
    once a worker has run the child."""
    (tmp_path / "nested.py").write_text(
        textwrap.dedent(
            """
            import plait

            app = plait.App("nested")
            app.queue("work", concurrency=1)

            @app.workflow(queue="work")
            async def leaf(wf: plait.Workflow, n: int) -> int:
                return await wf.do("double", lambda: n * 2)

            @app.workflow
            async def parent(wf: plait.Workflow, n: int) -> int:
                return await wf.do("child", "leaf", n)
            """
        )
    )
    db = f"sqlite:///{tmp_path / 'nested.db'}"
    follower = plait_process(
        "start", "nested:app", "parent", "-i", "21", "--wait", "-d", db, cwd=tmp_path
    )
    lines = _lines_until(follower, "queued: waiting for a worker")
    run_id = lines[0]
    assert "waiting for child run" in lines[-1] and "plait worker APP" in lines[-1], lines
    worker = plait_process("worker", "nested:app", "-d", db, cwd=tmp_path)
    try:
        rest, errors = follower.communicate(timeout=60)
    finally:
        for process in (follower, worker):
            if process.poll() is None:
                process.terminate()
                process.communicate(timeout=30)
    assert follower.returncode == 0, rest + errors
    assert f"run {run_id} completed" in rest and "42" in rest


LIVE = """
import asyncio
import time
from pathlib import Path

import plait

app = plait.App("live")
GATE = Path(__file__).with_name("gate")


async def paint() -> str:
    # held until the test opens the gate: the test sees the steps before this one end
    deadline = time.monotonic() + 120
    while not GATE.exists():
        if time.monotonic() > deadline:
            raise TimeoutError("the gate was never opened")
        await asyncio.sleep(0.02)
    return "\\x9b31m red"


@app.workflow
async def greet(wf: plait.Workflow, data: None) -> str:
    await wf.do("fetch title", lambda: "\\x1b]0;pwned\\x07 title")
    await wf.do("paint", paint)
    event = await wf.wait_for_event("go")
    return "done " + event["by"]
"""

#: what the run's data carries to reach a terminal: a new window title, the bell that
#: ends it, and a C1 control sequence introducer (red text)
INJECTED = ("\x1b]0;pwned", "\x07", "\x9b")
#: the display's own control sequences (colours, cursor moves), dropped to read its text
_CSI = re.compile(r"\x1b\[[0-?]*[ -/]*[@-~]")


class _Terminal:
    """A pseudo-terminal that a process writes to, read all along by a thread (a full
    terminal would stop the process), with a way to wait for what it shows."""

    def __init__(self, columns: int = 200, rows: int = 50) -> None:
        import fcntl
        import pty
        import termios

        self.master, self.slave = pty.openpty()
        fcntl.ioctl(self.slave, termios.TIOCSWINSZ, struct.pack("HHHH", rows, columns, 0, 0))
        self.raw = b""
        self.closed = False
        self.changed = threading.Condition()
        self.reader = threading.Thread(target=self._read, daemon=True)

    def start(self, *args: str, cwd: Path) -> subprocess.Popen[bytes]:
        env = {**os.environ, "PYTHONUNBUFFERED": "1", "PYTHONPATH": str(ROOT / "src")}
        # a terminal as a person has it, whatever this test's environment tells rich
        for name in ("PLAIT_DATABASE_URL", "NO_COLOR", "FORCE_COLOR", "COLUMNS", "LINES"):
            env.pop(name, None)
        for name in ("TTY_COMPATIBLE", "TTY_INTERACTIVE"):
            env.pop(name, None)
        env["TERM"] = "xterm-256color"
        process = subprocess.Popen(
            [sys.executable, "-m", "plait", *args],
            cwd=cwd,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=self.slave,
            stderr=self.slave,
        )
        os.close(self.slave)  # the process holds it now: its exit ends the reading
        self.reader.start()
        return process

    def _read(self) -> None:
        while True:
            try:
                chunk = os.read(self.master, 65536)
            except OSError:  # EIO: every writer has gone
                chunk = b""
            with self.changed:
                if not chunk:
                    self.closed = True
                    self.changed.notify_all()
                    return
                self.raw += chunk
                self.changed.notify_all()

    @property
    def text(self) -> str:
        """What the terminal was sent, without the display's colours and cursor moves."""
        return _CSI.sub("", self.raw.decode("utf-8", "replace"))

    def wait_for(self, shown: Callable[[str], bool], timeout: float = 90) -> str:
        with self.changed:
            self.changed.wait_for(lambda: shown(self.text) or self.closed, timeout)
            assert shown(self.text), self.text[-3000:]
            return self.text

    def close(self) -> None:
        if self.reader.ident is not None:
            self.reader.join(timeout=30)
        os.close(self.master)


@pytest.mark.skipif(sys.platform == "win32", reason="pseudo-terminals are POSIX")
def test_start_wait_in_a_terminal_shows_steps_live_and_escapes_run_data(
    tmp_path: Path,
) -> None:
    """On a terminal ``start --wait`` draws a live table: the run id first, each step as
    it happens, what the run waits for with the command that sends it, the ending; and
    nothing from the run's data reaches the terminal as a control sequence."""
    (tmp_path / "live.py").write_text(LIVE)
    db = f"sqlite:///{tmp_path / 'live.db'}"
    terminal = _Terminal()
    follower = terminal.start("start", "live:app", "greet", "--wait", "-d", db, cwd=tmp_path)
    try:
        # each step as it happens: the second one running while the gate holds it
        screen = terminal.wait_for(lambda text: bool(re.search(r"paint\s+running", text)))
        run_id = terminal.raw.split(b"\r\n", 1)[0].decode()
        assert re.fullmatch(r"[0-9a-f]{8}(-[0-9a-f]{4}){3}-[0-9a-f]{12}", run_id), screen
        assert re.search(r"fetch title\s+succeeded\s+[^\r\n]*\\x1b]0;pwned\\x07 title", screen)
        assert not re.search(r"paint\s+succeeded", screen) and "waiting for" not in screen
        (tmp_path / "gate").touch()
        command = f"plait send-event {run_id} go --data JSON"
        screen = terminal.wait_for(lambda text: command in text)
        assert re.search(r"paint\s+succeeded\s+[^\r\n]*\\x9b31m red", screen), screen
        assert f"waiting for event 'go': send it with {command}" in screen
        code, out = run(
            "send-event", run_id, "go", "--data", '{"by": "\\u001b]0;pwned\\u0007 dana"}', "-d", db
        )
        assert code == 0, out
        follower.wait(timeout=90)
        screen = terminal.wait_for(lambda text: terminal.closed)
    finally:
        if follower.poll() is None:
            follower.terminate()
            follower.wait(timeout=30)
        terminal.close()
    assert follower.returncode == 0, screen[-3000:]
    assert f"run {run_id} completed" in screen
    assert "done \\x1b]0;pwned\\x07 dana" in screen
    # valid UTF-8 throughout (so no lone C1 byte either), and none of the sequences
    sent = terminal.raw.decode()
    for sequence in INJECTED:
        assert sequence not in sent, sequence


def test_send_event_and_json_documents(shop: Path) -> None:
    db = f"sqlite:///{shop / 'shop.db'}"
    code, out = run(
        "start", "shop:app", "checkout", "-i", '{"amount": 5, "approval": true}', "-d", db, "--json"
    )
    assert code == 0, out
    run_id = json.loads(out)["run_id"]
    code, out = run("send-event", run_id, "approval", "--data", '{"by": "eve"}', "-d", db, "--json")
    assert code == 0 and json.loads(out) == {
        "run_id": run_id,
        "event": "approval",
        "waiting": False,
    }
    code, out = run(
        "start", "shop:app", "checkout", "-i", '{"amount": 7}', "--wait", "-d", db, "--json"
    )
    assert code == 0, out
    document = json.loads(out)
    assert document["run"]["status"] == "completed"
    assert document["run"]["output"]["charged"] == 7
    assert [s["key"] for s in document["steps"]] == ["charge", "cooling off"]
    code, out = run("runs", "list", "-d", db, "--json")
    listed = json.loads(out)
    assert code == 0 and listed["total"] == 2
    assert {r["id"] for r in listed["runs"]} == {run_id, document["run"]["id"]}
    code, out = run("runs", "show", document["run"]["id"], "-d", db, "--json")
    shown = json.loads(out)
    assert code == 0 and shown["run"]["id"] == document["run"]["id"]
    assert set(shown) == {
        "run",
        "waiting_on",
        "steps",
        "attempts",
        "children",
        "values",
        "decisions",
    }
    code, out = run("cancel", run_id, "-d", db, "--json")
    assert code == 0 and json.loads(out)["run"]["status"] == "cancelled"
    code, out = run("runs", "prune", "--older-than", "30d", "-d", db, "--json")
    assert code == 0 and json.loads(out) == {"pruned": 0}
    for command in (["queues"], ["schedules", "list"], ["approvals", "list"]):
        code, out = run(*command, "-d", db, "--json")
        assert code == 0, out
        json.loads(out)


DRAWN = """
import plait

app = plait.App("drawn")


@app.function
def add(pair: dict) -> int:
    return pair["a"] + pair["b"]


app.graph(
    "pair",
    {
        "nodes": {
            "one": {"function": "add", "input": {"a": 1, "b": 2}, "next": "two"},
            "two": {"function": "add", "input": {"a": 3, "b": 4}},
        },
    },
)
"""


def test_graph_json_names_the_run_it_draws(shop: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """``graph --json`` is one document with the Mermaid text and the run it was drawn
    from: none for a graph's definition, the named run, or a code workflow's latest."""
    (shop / "drawn.py").write_text(DRAWN)
    monkeypatch.delitem(sys.modules, "drawn", raising=False)
    db = f"sqlite:///{shop / 'shop.db'}"
    code, out = run("graph", "drawn:app", "pair", "--json")
    assert code == 0, out
    definition = json.loads(out)
    assert definition.pop("mermaid").startswith("graph TD")
    assert definition == {"workflow": "pair", "kind": "graph", "run_id": None, "status": None}
    code, plain = run("graph", "drawn:app", "pair")
    assert code == 0 and plain == json.loads(out)["mermaid"] + "\n"
    code, out = run("start", "drawn:app", "pair", "--wait", "-d", db, "--json")
    assert code == 0, out
    pair_run = json.loads(out)["run"]["id"]
    code, out = run("graph", "drawn:app", "pair", "--run", pair_run, "-d", db, "--json")
    assert code == 0, out
    coloured = json.loads(out)
    assert (coloured["kind"], coloured["run_id"], coloured["status"]) == (
        "graph",
        pair_run,
        "completed",
    )
    assert "    class n_one,n_two succeeded" in coloured["mermaid"].splitlines()
    first = run("start", "shop:app", "checkout", "-i", '{"amount": 1}', "--wait", "-d", db)[1]
    latest = run("start", "shop:app", "checkout", "-i", '{"amount": 2}', "--wait", "-d", db)[1]
    for named, expected in ((None, latest), (first, first)):
        args = ["graph", "shop:app", "checkout", "-d", db, "--json"]
        code, out = run(*args, *(["--run", named.splitlines()[0]] if named else []))
        assert code == 0, out
        document = json.loads(out)
        assert document["workflow"] == "checkout" and document["kind"] == "workflow"
        assert document["run_id"] == expected.splitlines()[0]
        assert document["status"] == "completed"
        assert document["mermaid"].startswith("graph TD")
        assert "charge" in document["mermaid"] and "cooling off" in document["mermaid"]
    # a run of another workflow is refused by name, on a graph and on a code workflow
    for drawn in (["drawn:app", "pair"], ["shop:app", "checkout"]):
        other = pair_run if drawn[1] == "checkout" else first.splitlines()[0]
        code, out = run("graph", *drawn, "--run", other, "-d", db)
        assert code == 1 and out.count("\n") == 1, out
        assert f"run {other!r} is a run of" in out and f"not of {drawn[1]!r}" in out


def test_graph_of_a_workflow_with_no_runs_yet_says_so(shop: Path) -> None:
    """A code workflow is drawn from a run: with none yet the error says that, names the
    workflow, and says how to get one, instead of calling a known name unknown."""
    for database in ([], ["-d", f"sqlite:///{shop / 'shop.db'}"]):
        if database:
            assert run("start", "shop:app", "odd", *database)[0] == 0
        for extra in ([], ["--json"]):
            code, out = run("graph", "shop:app", "checkout", *database, *extra)
            assert code == 1 and out.count("\n") == 1, out
            assert out.startswith("error: workflow 'checkout' has no run yet to draw it from")
            assert "plait start APP checkout" in out
            assert "unknown" not in out
    code, out = run("graph", "shop:app", "nope")
    assert code == 1 and out.startswith("error: unknown workflow 'nope' (registered: ")


def test_runs_show_has_full_results_and_the_traceback(shop: Path) -> None:
    db = f"sqlite:///{shop / 'shop.db'}"
    code, out = run("start", "shop:app", "checkout", "-i", '{"amount": 1}', "--wait", "-d", db)
    assert code == 0, out
    ok = out.splitlines()[0]
    code, out = run(
        "start", "shop:app", "checkout", "-i", '{"amount": 1, "fail": 1}', "--wait", "-d", db
    )
    assert code == 1, out
    failed = out.splitlines()[0]
    code, out = run("runs", "show", ok, "-d", db)
    assert code == 0, out
    # in full, however the table wraps it
    assert "aresultwelloverfortycharacterslong" in "".join(out.split())
    code, out = run("runs", "show", failed, "-d", db)
    assert code == 0, out
    assert "Traceback (most recent call last)" in out
    assert 'raise ValueError("card declined: "' in out
    flat = "".join(out.split())
    assert "carddeclined:" + "x" * 60 in flat


def test_run_data_is_escaped_before_it_is_printed(shop: Path) -> None:
    db = f"sqlite:///{shop / 'shop.db'}"
    code, out = run("start", "shop:app", "odd", "--wait", "-d", db)
    assert code == 0, out
    run_id = out.splitlines()[0]
    code, out = run("runs", "show", run_id, "-d", db)
    assert code == 0, out
    assert "a[/b]" in out
    assert "[bold]not bold[/bold]" in out
    for raw in ("\x1b", "\x9b", "\x07"):
        assert raw not in out
    assert "\\x1b[31mred" in out and "\\x9b2J" in out


def test_reading_never_creates_a_database(shop: Path) -> None:
    for args in (["runs", "list"], ["runs", "list", "-d", "sqlite:///typo.db"], ["queues"]):
        code, out = run(*args)
        assert code == 2 and out.count("\n") == 1, out
        assert "no database at" in out
    code, out = run("runs", "show", "some-id", "-d", "sqlite:///nowhere/plait.db")
    assert code == 2 and "nowhere/plait.db" in out and out.count("\n") == 1
    code, out = run("start", "shop:app", "checkout", "-d", "sqlite:///nowhere/plait.db")
    assert code == 2 and out.count("\n") == 1, out
    assert "the folder nowhere does not exist" in out
    assert sorted(p.name for p in shop.iterdir()) == ["shop.py"]


@pytest.mark.filterwarnings("ignore:coroutine 'main' was never awaited")
def test_a_module_that_fails_at_import_is_one_line(shop: Path) -> None:
    (shop / "loop_at_import.py").write_text(
        textwrap.dedent(
            """
            import asyncio
            import plait

            app = plait.App("x")

            async def main() -> None:
                pass

            asyncio.run(main())
            """
        )
    )
    (shop / "broken.py").write_text("import plait\napp = plait.App()\n{}['missing']\n")
    code, out = run("start", "loop_at_import:app", "checkout")
    assert code == 2 and out.count("\n") == 1, out
    assert "cannot import module 'loop_at_import'" in out
    assert 'if __name__ == "__main__":' in out
    code, out = run("graph", "broken:app", "x")
    assert code == 2 and out.count("\n") == 1, out
    assert "cannot import module 'broken': KeyError: 'missing'" in out
    result = CliRunner().invoke(cli, ["--debug", "graph", "broken:app", "x"])
    assert isinstance(result.exception, ImportError) and isinstance(
        result.exception.__cause__, KeyError
    )


def test_other_errors_are_one_line(shop: Path) -> None:
    db = f"sqlite:///{shop / 'shop.db'}"
    for args in (
        ["start", "shop:app", "nope", "-d", db],
        ["start", "shop:app", "checkout", "-i", "{bad", "-d", db],
        ["runs", "show", "no-such-run", "-d", db],
        ["send-event", "no-such-run", "x", "-d", db],
        ["runs", "show"],
        ["start", "shop:app", "checkout", "--wait", "--bogus"],
    ):
        code, out = run(*args)
        assert code in (1, 2), (args, out)
        assert out.startswith("error: ") and out.count("\n") == 1, (args, out)
