"""plait's side of every workload; run by ``run.py`` with the project's interpreter.

One process measures one thing on a fresh database and exits, so nothing one measurement
leaves behind (caches, threads, a large WAL) colours the next. The workflows are the
smallest that exercise the engine: trivial steps whose cost is the engine's own.
"""

from __future__ import annotations

import asyncio
import os
import time
from typing import Any

import _common

import plait

app = plait.App("bench")
_side: _common.SideFile | None = None


@app.function
async def noop(data: Any) -> Any:
    """A step that does nothing, so what is measured is the engine and the database."""
    return data


@app.function
async def slow(step: int) -> int:
    """A recovery step: long enough that a kill lands inside the run, and visible from
    outside through the side file (start and end of each body, with this process's pid)."""
    assert _side is not None
    _side.mark("start", step)
    await asyncio.sleep(_common.RECOVERY_STEP_SECONDS)
    _side.mark("end", step)
    return step


@app.workflow
async def chain(wf: plait.Workflow, data: dict[str, int]) -> int:
    """``data["n"]`` trivial steps one after the other (names repeat: ordinals apply)."""
    for i in range(data["n"]):
        await wf.do("s", noop, i)
    return data["n"]


@app.workflow
async def recover(wf: plait.Workflow, data: dict[str, int]) -> int:
    for i in range(data["n"]):
        await wf.do("slow", slow, i)
    return data["n"]


@app.workflow
async def nap(wf: plait.Workflow, data: dict[str, float]) -> None:
    """A run that holds nothing but a durable timer for the idle-cost workload."""
    await wf.sleep("nap", data["seconds"])


def _engine(p: dict[str, Any], **options: Any) -> plait.Engine:
    telemetry = p.get("telemetry", "off")
    if telemetry == "metrics":
        options.update(metrics=True)
    elif telemetry != "off":
        options.update(tracing=True, metrics=True)
    if telemetry == "sdk":
        _otel_sdk()
    return plait.Engine(app, p["db"], **options)


def _otel_sdk() -> None:
    """The OpenTelemetry SDK as an application would set it up: a batch processor in
    front of an exporter (one that drops the spans, so no network is measured)."""
    from opentelemetry import trace
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter, SpanExportResult

    class Drop(SpanExporter):
        def export(self, spans: Any) -> SpanExportResult:
            return SpanExportResult.SUCCESS

    provider = TracerProvider()
    provider.add_span_processor(BatchSpanProcessor(Drop()))
    trace.set_tracer_provider(provider)


def _settings(engine: plait.Engine, p: dict[str, Any]) -> dict[str, Any]:
    """What durability the store actually ran with, read back rather than assumed."""
    out: dict[str, Any] = {
        "lease_seconds": engine.lease_seconds,
        "concurrency": engine.concurrency,
    }
    if p["db"].startswith("sqlite:"):
        path = p["db"].split("sqlite:///", 1)[1]
        out.update(_common.sqlite_settings(path))
        out["synchronous"] = _common.sync_name(getattr(engine.store, "synchronous", "?"))
    return out


def _commits(engine: plait.Engine) -> int | None:
    value = getattr(engine.store, "commits", None)
    return value if isinstance(value, int) else None


async def sequential(p: dict[str, Any]) -> dict[str, Any]:
    """One run of ``steps`` steps; microseconds per step and commits per step."""
    steps = int(p["steps"])
    async with _engine(p) as engine:
        # warm-up, the same length as the measured run (see run.py)
        await engine.run("chain", {"n": steps}, timeout=600)
        c0 = _commits(engine)
        t0 = time.perf_counter()
        out = await engine.run("chain", {"n": steps}, timeout=600)
        elapsed = time.perf_counter() - t0
        c1 = _commits(engine)
        assert out == steps, out
        result = {"us_per_step": elapsed / steps * 1e6, "seconds": elapsed}
        if c0 is not None and c1 is not None:
            result["commits_per_step"] = (c1 - c0) / steps
        result["settings"] = _settings(engine, p)
    return result


async def statements(p: dict[str, Any]) -> dict[str, Any]:
    """The statements plait's SQLite store runs for one step of a sequential run, back to
    back on one connection with no engine around them: the end of the step before (with
    the lease's fence), the start of the next, in one transaction, as the store writes
    them (the texts are the store's own), in runs of ``steps`` steps as the sequential
    workload's. What a step would cost if plait's Python cost nothing, to set beside the
    floor's one-row commit."""
    import sqlite3
    import uuid

    from plait.store.sqlite import apply

    end = apply._FINISH_STEP_SUCCEEDED_FENCED  # pyright: ignore[reportPrivateUsage]
    start = apply._INSERT_STEP_START_PLAIN  # pyright: ignore[reportPrivateUsage]
    per_run = int(p.get("steps", 1000))
    async with _engine(p, workers=False) as engine:  # the runs the steps belong to
        runs = [await engine.start("chain", {"n": per_run}) for _ in range(100)]
    path = p["db"].split("sqlite:///", 1)[1]
    conn = sqlite3.connect(path, isolation_level=None)
    owner = "bench:1:0123abcd#bench:1:4567cdef"
    worker = "bench:1:0123abcd"
    try:
        conn.execute("UPDATE plait_runs SET lease_owner = ?, lease_until = 1e12", (owner,))
        settings = _settings_of(conn)

        def step(n: int) -> None:
            run_id, i = runs[n // per_run], n % per_run
            now = time.time()
            conn.execute("BEGIN IMMEDIATE")
            if i:
                before = f"s#{i - 1}" if i > 1 else "s"
                done = ("succeeded", str(i - 1), 1, 0, now, i - 1, "succeeded", now)
                conn.execute(end, (*done, run_id, before, owner))
            key = f"s#{i}" if i else "s"
            fresh = (run_id, key, i, "s", "do", "noop", "running", str(i), 1, 0, 3)
            conn.execute(
                start, (*fresh, str(uuid.uuid4()), 0, now, now, 0, None, worker, "running", now)
            )
            conn.execute("COMMIT")

        i = 0
        while i < 50:  # warm-up, as the floor's
            step(i)
            i += 1
        seconds = float(p["seconds"])
        t0 = time.perf_counter()
        while time.perf_counter() - t0 < seconds and i < len(runs) * per_run:
            step(i)
            i += 1
        elapsed = time.perf_counter() - t0
    finally:
        conn.close()
    done = i - 50
    return {"us_per_step": elapsed / done * 1e6, "steps": done, "settings": settings}


def _settings_of(conn: Any) -> dict[str, Any]:
    """The connection set as plait's store sets its own (WAL, ``synchronous=FULL``), read
    back."""
    conn.execute("PRAGMA synchronous = FULL")
    mode = conn.execute("PRAGMA journal_mode").fetchone()[0]
    sync = conn.execute("PRAGMA synchronous").fetchone()[0]
    return {"journal_mode": str(mode).upper(), "synchronous": _common.sync_name(sync)}


async def throughput(p: dict[str, Any]) -> dict[str, Any]:
    """Runs of ``steps`` steps, each started when the previous one finished, for a
    fixed time: the latency of the whole start-to-output path, turned into a rate. Runs
    start in this process (``inline=True``), as DBOS's ``start_workflow_async`` does."""
    steps, seconds = int(p["steps"]), float(p["seconds"])
    async with _engine(p) as engine:
        await engine.run("chain", {"n": steps}, timeout=120, inline=True)
        c0 = _commits(engine)
        result = await _common.back_to_back(
            seconds, steps, lambda: engine.run("chain", {"n": steps}, timeout=120, inline=True)
        )
        c1 = _commits(engine)
        if c0 is not None and c1 is not None:
            result["commits_per_step"] = (c1 - c0) / (result["workflows"] * steps)
    return result


async def concurrency(p: dict[str, Any]) -> dict[str, Any]:
    """``workflows`` runs started at once through ``engine.start``; time until all ended.
    A round of the same size goes first, unmeasured, as the sequential workload's warm-up
    run does: what is measured is the engine at work, not its first statements."""
    n, steps = int(p["workflows"]), int(p["steps"])
    async with _engine(p) as engine:
        warm = await asyncio.gather(*(engine.start("chain", {"n": steps}) for _ in range(n)))
        await asyncio.gather(*(engine.wait(r, timeout=600) for r in warm))
        c0 = _commits(engine)
        t0 = time.perf_counter()
        run_ids = await asyncio.gather(*(engine.start("chain", {"n": steps}) for _ in range(n)))
        started = time.perf_counter() - t0
        runs = await asyncio.gather(*(engine.wait(r, timeout=600) for r in run_ids))
        elapsed = time.perf_counter() - t0
        c1 = _commits(engine)
        bad = [r.status for r in runs if r.status != "completed"]
        assert not bad, bad[:5]
        result: dict[str, Any] = {
            "seconds": elapsed,
            "start_seconds": started,
            "steps_per_s": n * steps / elapsed,
        }
        if c0 is not None and c1 is not None:
            result["commits_per_step"] = (c1 - c0) / (n * steps)
    return result


async def recovery(p: dict[str, Any]) -> dict[str, Any]:
    """One process of the kill-and-recover experiment; the driver does the timing.

    ``run``: start the run and work on it until killed. ``resume``: a restarted process
    with the killed one's ``worker_id``. ``peer``: a live process with its own id that
    is already running when the other one dies.
    """
    global _side
    _side = _common.SideFile(p["side"])
    role = p["role"]
    async with _engine(p, worker_id=p["worker_id"]) as engine:
        if role == "run":
            await engine.start("recover", {"n": _common.RECOVERY_STEPS}, run_id=p["run_id"])
        else:
            _side.mark("ready", -1)
        run = await engine.wait(p["run_id"], timeout=120)
        return {"status": str(run.status)}


async def idle(p: dict[str, Any]) -> dict[str, Any]:
    """Load ``runs`` sleeping runs, tell the driver, and sit idle until it says stop."""
    n, seconds = int(p["runs"]), float(p["sleep_seconds"])
    async with _engine(p) as engine:
        base_rss = _common.self_rss_mib()
        t0 = time.perf_counter()
        await asyncio.gather(*(engine.start("nap", {"seconds": seconds}) for _ in range(n)))
        horizon = time.time() + seconds / 2
        deadline = time.monotonic() + 600
        # Settled when no run is being driven and the next due time is the timers' (far
        # away): every run has recorded its sleep and released its lease.
        while True:
            due = await engine.store.next_due()
            if not engine.worker.driving and due is not None and due > horizon:
                break
            if time.monotonic() > deadline:
                raise TimeoutError("the sleeping runs did not settle within 600 s")
            await asyncio.sleep(0.05)
        _common.ready({"setup_seconds": time.perf_counter() - t0, "base_rss_mib": base_rss})
        await asyncio.to_thread(_common.wait_for_stdin_line)
        return {"settings": _settings(engine, p)}


WORKLOADS = {
    "sequential": sequential,
    "throughput": throughput,
    "concurrency": concurrency,
    "recovery": recovery,
    "idle": idle,
    "statements": statements,
}


def main() -> None:
    p = _common.params()
    try:
        # Constructing the engine picks the store; a store that is not written yet (the
        # PostgreSQL one, for now) is a skip with a reason, not a failed benchmark.
        plait.Engine(app, p["db"])
    except (ImportError, ModuleNotFoundError) as exc:
        _common.emit({"skipped": f"plait cannot open {p['db'].split(':')[0]}: {exc}"})
        return
    result = asyncio.run(WORKLOADS[p["workload"]](p))
    result["pid"] = os.getpid()
    _common.emit(result)


if __name__ == "__main__":
    main()
