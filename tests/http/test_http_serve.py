"""``plait serve`` (and ``plait worker``) as real processes: what they print, what they
never print, who may read ``/metrics``, and how fast they stop on SIGTERM with streams and
waits open (the soak)."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from support.paths import TESTS
from support.ports import free_port

httpx = pytest.importorskip("httpx", reason="httpx is needed to call the server")
pytest.importorskip("uvicorn", reason="the http extra (uvicorn) is not installed")

TOKEN = "soak-token-1"
AUTH = {"Authorization": f"Bearer {TOKEN}"}
#: exit codes of a server that stopped cleanly on SIGTERM
CLEAN_STOP = (0, -signal.SIGTERM)
#: and on either signal it stops on (130: the shell's code for a Ctrl-C)
CLEAN_EXITS = {signal.SIGTERM: CLEAN_STOP, signal.SIGINT: (0, 130, -signal.SIGINT)}


class Process:
    """A ``plait`` command run from the tests directory (so ``support.http_app`` imports), its
    output in a file."""

    def __init__(self, args: list[str], log: Path, env: dict[str, str] | None = None) -> None:
        self.log = log
        self._out = log.open("ab")
        environ = {**os.environ, "PYTHONUNBUFFERED": "1", **(env or {})}
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "plait.cli", *args],
            cwd=TESTS,
            env=environ,
            stdout=self._out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
        )

    def text(self) -> str:
        return self.log.read_text(errors="replace")

    def wait_for_text(self, needle: str, timeout: float = 30.0) -> None:
        deadline = time.monotonic() + timeout
        while needle not in self.text():
            if self.proc.poll() is not None:
                raise AssertionError(f"exited with {self.proc.returncode}:\n{self.text()}")
            if time.monotonic() > deadline:
                raise AssertionError(f"no {needle!r} after {timeout}s:\n{self.text()}")
            time.sleep(0.02)

    def sigterm(self, timeout: float = 30.0) -> tuple[int, float]:
        """SIGTERM; (exit code, seconds until the process was gone). uvicorn raises the
        signal again once it has shut down cleanly, so a clean stop of ``plait serve``
        ends with -SIGTERM, like any process the signal ended; ``plait worker`` with 0."""
        return self.stop(signal.SIGTERM, timeout)

    def stop(self, sig: signal.Signals, timeout: float = 30.0) -> tuple[int, float]:
        """Send ``sig``; (exit code, seconds until the process was gone)."""
        began = time.monotonic()
        self.proc.send_signal(sig)
        code = self.proc.wait(timeout)
        return code, time.monotonic() - began

    def finish(self, timeout: float = 30.0) -> int:
        return self.proc.wait(timeout)

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        self._out.close()


@contextlib.contextmanager
def plait_serve(
    tmp_path: Path, database: str, *extra: str, env: dict[str, str] | None = None
) -> Iterator[tuple[Process, str]]:
    """``plait serve support.http_app:app`` on a free port, ready to answer."""
    port = free_port()
    process = Process(
        ["serve", "support.http_app:app", "--port", str(port), "--database", database, *extra],
        tmp_path / f"serve-{port}.log",
        env={"PLAIT_TOKENS": f"soaker:{TOKEN}", **(env or {})},
    )
    try:
        process.wait_for_text("Application startup complete")
        yield process, f"http://127.0.0.1:{port}"
    finally:
        process.close()


# -- what the processes print --------------------------------------------------------------------
def test_the_access_log_never_shows_a_token(tmp_path: Path) -> None:
    with plait_serve(tmp_path, f"sqlite:///{tmp_path / 'p.db'}") as (server, url):
        with httpx.Client(base_url=url) as web:
            assert web.get("/?token=visible-secret-1&status=failed").status_code == 303
            assert web.get("/api/runs", params={"token": "visible-secret-2"}).status_code == 401
        code, _took = server.sigterm()
    assert code in CLEAN_STOP
    log = server.text()
    assert "token=***" in log and "status=failed" in log
    assert "visible-secret" not in log


@pytest.mark.parametrize("where", ["option", "environment"])
def test_a_bad_database_url_is_one_line_without_its_password(tmp_path: Path, where: str) -> None:
    url = "mysql://root:topsecret@db.example/app?password=other-secret"
    args = ["serve", "support.http_app:app", "--port", str(free_port())]
    env = {"PLAIT_TOKENS": f"a:{TOKEN}"}
    if where == "option":
        args += ["--database", url]
    else:
        env["PLAIT_DATABASE_URL"] = url
    process = Process(args, tmp_path / "bad-url.log", env)
    try:
        assert process.finish() == 1
    finally:
        process.close()
    output = process.text()
    assert "Traceback" not in output
    assert "topsecret" not in output and "other-secret" not in output
    assert output.strip().splitlines() == [
        "error: unsupported database URL 'mysql://root:***@db.example/app?password=***': use"
        " sqlite:///path/to/file.db or postgresql://..."
    ]


def test_a_malformed_tokens_entry_is_one_line_without_its_token(tmp_path: Path) -> None:
    process = Process(
        [
            "serve",
            "support.http_app:app",
            "--port",
            str(free_port()),
            "--database",
            "sqlite:///x.db",
        ],
        tmp_path / "bad-tokens.log",
        {"PLAIT_TOKENS": "alice:very-secret-token:nosuchscope"},
    )
    try:
        assert process.finish() == 1
    finally:
        process.close()
    output = process.text()
    assert "very-secret-token" not in output and "Traceback" not in output
    assert (
        "invalid PLAIT_TOKENS entry 1 (user 'alice'): unknown scope (allowed: admin, graphs"
        in output
    )
    assert "nosuchscope" not in output  # it may be the second half of a token with a ":"
    assert not (TESTS / "x.db").exists()


def test_the_worker_log_masks_a_password_in_the_query_string(
    tmp_path: Path, pg_cluster: Any
) -> None:
    url = pg_cluster.create_database(f"w{os.getpid()}_pw")
    separator = "&" if "?" in url else "?"
    worker = Process(
        [
            "worker",
            "support.http_app:app",
            "--database",
            f"{url}{separator}password=hunter2-secret",
        ],
        tmp_path / "worker.log",
    )
    try:
        worker.wait_for_text(" working ")
        code, _took = worker.sigterm()
    finally:
        worker.close()
    assert code == 0
    log = worker.text()
    assert "password=***" in log and "hunter2" not in log


# -- /metrics ------------------------------------------------------------------------------------
def _samples(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    from prometheus_client.parser import text_string_to_metric_families

    return {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }


def test_serve_metrics_are_scraped_without_a_token_while_the_api_needs_one(
    tmp_path: Path, database: str
) -> None:
    """docs/observability.md: ``plait serve`` serves ``/metrics`` without a token, like
    ``/openapi.json``; tokens still guard everything under ``/api``."""
    pytest.importorskip("prometheus_client", reason="the metrics extra is not installed")
    completed = ("plait_runs_total", (("status", "completed"), ("workflow", "echo")))
    with (
        plait_serve(tmp_path, database) as (_server, url),
        httpx.Client(base_url=url, timeout=30) as web,
    ):
        assert web.get("/api/runs").status_code == 401
        done = web.post("/api/workflows/echo/runs", json={"input": 7, "wait": True}, headers=AUTH)
        assert done.status_code == 200 and done.json()["status"] == "completed"
        # the run's end is counted, and its driver gone, once its pass has finished,
        # which may be just after the wait saw the run completed
        deadline = time.monotonic() + 10
        while True:
            scraped = web.get("/metrics")
            assert scraped.status_code == 200, scraped.text
            samples = _samples(scraped.text)
            settled = samples.get(completed) and samples[("plait_runs_active", ())] == 0
            if settled or time.monotonic() > deadline:
                break
            time.sleep(0.02)
        assert scraped.headers["content-type"].startswith("text/plain")
        # a scraper that sends the token is served the same
        assert web.get("/metrics", headers=AUTH).status_code == 200
    assert samples[completed] == 1
    assert samples[("plait_steps_total", (("function", "echo_step"), ("status", "succeeded")))] == 1
    assert samples[("plait_runs_active", ())] == 0


def test_serve_no_metrics_turns_metrics_off(tmp_path: Path) -> None:
    database = f"sqlite:///{tmp_path / 'p.db'}"
    with (
        plait_serve(tmp_path, database, "--no-metrics") as (_server, url),
        httpx.Client(base_url=url, timeout=30) as web,
    ):
        assert web.get("/metrics").status_code == 404
        assert web.get("/metrics", headers=AUTH).status_code == 404
        # the server itself is up and answering
        assert web.get("/api/runs", headers=AUTH).status_code == 200


# -- the soak ------------------------------------------------------------------------------------
async def _raw(port: int, request: bytes) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(request)
    await writer.drain()
    return reader, writer


def _get(path: str) -> bytes:
    lines = [f"GET {path} HTTP/1.1", "Host: 127.0.0.1", f"Authorization: Bearer {TOKEN}"]
    return ("\r\n".join(lines) + "\r\n\r\n").encode()


def _post(path: str, body: Any) -> bytes:
    data = json.dumps(body)
    lines = [
        f"POST {path} HTTP/1.1",
        "Host: 127.0.0.1",
        f"Authorization: Bearer {TOKEN}",
        "Content-Type: application/json",
        f"Content-Length: {len(data)}",
    ]
    return ("\r\n".join(lines) + "\r\n\r\n" + data).encode()


@pytest.mark.slow
@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT], ids=["sigterm", "sigint"])
async def test_soak_200_streams_and_200_abandoned_waits_then_sigterm(
    tmp_path: Path, database: str, sig: signal.Signals
) -> None:
    """200 clients stream a run and disconnect; 200 start a run with ``wait`` and walk
    away; then, with a few of each still open, SIGTERM (or SIGINT, a Ctrl-C): the server
    is gone within 2 s, the open ones were ended cleanly, and nothing was left behind
    (the server looks for tasks of its own, all named plait*, and logs any it finds)."""
    # one user holds up to 50 streams at once: above the default share of one user
    limits = ("--max-streams", "100", "--max-streams-per-user", "100")
    with plait_serve(tmp_path, database, *limits) as (server, url):
        port = int(url.rsplit(":", 1)[1])
        async with httpx.AsyncClient(base_url=url, headers=AUTH, timeout=30) as api:
            started = await api.post("/api/workflows/waiter/runs", json={})
            run_id = started.json()["run_id"]
            gate = asyncio.Semaphore(50)

            async def stream_and_leave() -> None:
                async with gate:
                    reader, writer = await _raw(port, _get(f"/api/runs/{run_id}/stream"))
                    await asyncio.wait_for(reader.readuntil(b"event: run"), 30)
                    writer.close()

            await asyncio.gather(*(stream_and_leave() for _ in range(200)))

            abandoned = [
                (await _raw(port, _post("/api/workflows/waiter/runs", {"wait": True})))[1]
                for _ in range(200)
            ]
            deadline = time.monotonic() + 60
            while (await api.get("/api/runs", params={"limit": 1})).json()["total"] < 201:
                assert time.monotonic() < deadline, "the waits did not all start their runs"
                await asyncio.sleep(0.05)
            for writer in abandoned:
                writer.close()

            kept_streams = []
            for _ in range(5):
                reader, writer = await _raw(port, _get(f"/api/runs/{run_id}/stream"))
                await asyncio.wait_for(reader.readuntil(b"event: run"), 30)
                kept_streams.append((reader, writer))
            kept_waits = [
                await _raw(port, _post("/api/workflows/waiter/runs", {"wait": True}))
                for _ in range(5)
            ]
            while (await api.get("/api/runs", params={"limit": 1})).json()["total"] < 206:
                assert time.monotonic() < deadline, "the kept waits did not start their runs"
                await asyncio.sleep(0.05)

        code, took = await asyncio.to_thread(server.stop, sig)
        for reader, _writer in kept_streams:
            tail = await asyncio.wait_for(reader.read(), 5)
            assert b"event: close" in tail
        for reader, _writer in kept_waits:
            answer = await asyncio.wait_for(reader.read(), 5)
            assert answer.startswith(b"HTTP/1.1 202"), answer[:200]
    log = server.text()
    assert code in CLEAN_EXITS[sig], log[-3000:]
    assert took < 2.0, f"the server took {took:.2f}s to exit after {sig.name}"
    # the 400 that left had ended already: only the ones still connected were open
    assert "shutting down: ending 5 open streams and 5 waits" in log, log[-3000:]
    assert "shutdown complete: no stream, wait, watcher or task left" in log, log[-3000:]
    assert "shutdown left work behind" not in log
    assert "timeout graceful shutdown exceeded" not in log
    assert "Traceback" not in log
