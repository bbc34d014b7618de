"""DBOS Transact's side of every workload; run by ``run.py`` with the interpreter of
``benchmarks/.venv-dbos`` so that DBOS and its dependencies stay out of plait's environment.

The workflows mirror ``bench_plait.py`` one for one, written the way DBOS documents them:
``@DBOS.step`` functions called from a ``@DBOS.workflow``. DBOS has two APIs, and either
may be its faster on a workload, so both are measured (``mode``): ``async`` starts
``async def`` workflows with ``DBOS.start_workflow_async`` and awaits the handle; ``sync``
calls plain ``def`` workflows directly (the workflow runs in the calling thread), or, for
many at once, starts them with ``DBOS.start_workflow`` and waits on each handle.
"""

from __future__ import annotations

import asyncio
import os
import sqlite3
import time
from typing import Any

import _common
from dbos import DBOS, DBOSConfig, SetWorkflowID

_side: _common.SideFile | None = None


@DBOS.step()
async def noop(data: Any) -> Any:
    """A step that does nothing, so what is measured is DBOS and the database."""
    return data


@DBOS.step()
async def slow(step: int) -> int:
    """The recovery step, identical to plait's: visible from outside via the side file."""
    assert _side is not None
    _side.mark("start", step)
    await asyncio.sleep(_common.RECOVERY_STEP_SECONDS)
    _side.mark("end", step)
    return step


@DBOS.workflow()
async def chain(n: int) -> int:
    for i in range(n):
        await noop(i)
    return n


@DBOS.step()
def noop_sync(data: Any) -> Any:
    """``noop`` for the synchronous API."""
    return data


@DBOS.workflow()
def chain_sync(n: int) -> int:
    for i in range(n):
        noop_sync(i)
    return n


@DBOS.workflow()
async def recover(n: int) -> int:
    for i in range(n):
        await slow(i)
    return n


@DBOS.workflow()
async def nap(seconds: float) -> None:
    await DBOS.sleep_async(seconds)


def _launch(p: dict[str, Any]) -> None:
    """Configure DBOS for this measurement's database and launch it.

    On SQLite the file is created in WAL mode first unless ``journal`` is ``default``:
    DBOS sets no journal mode of its own (out of the box it runs in SQLite's rollback
    journal), and WAL is a property of the file, so this gives it the same journal as
    plait. ``synchronous`` is left at the connection default, FULL, which is what plait
    uses too; :func:`_settings` reads both back from DBOS's own connection.
    """
    url = p["db"]
    if url.startswith("sqlite:") and p.get("journal", "wal") == "wal":
        _common.prepare_sqlite_wal(url.split("sqlite:///", 1)[1])
    config: DBOSConfig = {
        "name": "bench",
        "system_database_url": url,
        "log_level": "WARNING",
    }
    if p.get("executor_id"):
        config["executor_id"] = p["executor_id"]
    DBOS(config=config)
    DBOS.launch()


def _settings(p: dict[str, Any]) -> dict[str, Any]:
    """The journal mode and synchronous level of a connection from DBOS's own pool."""
    if not p["db"].startswith("sqlite:"):
        return {}
    try:
        from dbos._dbos import _get_dbos_instance

        engine = _get_dbos_instance()._sys_db.engine
        with engine.connect() as conn:
            sync = conn.exec_driver_sql("PRAGMA synchronous").fetchone()[0]
            mode = conn.exec_driver_sql("PRAGMA journal_mode").fetchone()[0]
        return {"journal_mode": str(mode).upper(), "synchronous": _common.sync_name(sync)}
    except Exception as exc:  # private API: report, do not fail the measurement
        return {"settings_error": repr(exc)}


async def _run(fn: Any, *args: Any) -> Any:
    handle = await DBOS.start_workflow_async(fn, *args)
    return await handle.get_result()


async def sequential(p: dict[str, Any]) -> dict[str, Any]:
    steps = int(p["steps"])
    _launch(p)
    await _run(chain, steps)  # warm-up: the same length as the measured run (see run.py)
    t0 = time.perf_counter()
    out = await _run(chain, steps)
    elapsed = time.perf_counter() - t0
    assert out == steps, out
    return {"us_per_step": elapsed / steps * 1e6, "seconds": elapsed, "settings": _settings(p)}


async def throughput(p: dict[str, Any]) -> dict[str, Any]:
    steps, seconds = int(p["steps"]), float(p["seconds"])
    _launch(p)
    await _run(chain, steps)
    return await _common.back_to_back(seconds, steps, lambda: _run(chain, steps))


async def concurrency(p: dict[str, Any]) -> dict[str, Any]:
    n, steps = int(p["workflows"]), int(p["steps"])
    _launch(p)
    # a round of the same size first, unmeasured, as plait's side does
    warm = await asyncio.gather(*(DBOS.start_workflow_async(chain, steps) for _ in range(n)))
    await asyncio.gather(*(h.get_result() for h in warm))
    t0 = time.perf_counter()
    handles = await asyncio.gather(*(DBOS.start_workflow_async(chain, steps) for _ in range(n)))
    started = time.perf_counter() - t0
    outs = await asyncio.gather(*(h.get_result() for h in handles))
    elapsed = time.perf_counter() - t0
    assert all(o == steps for o in outs)
    return {"seconds": elapsed, "start_seconds": started, "steps_per_s": n * steps / elapsed}


async def recovery(p: dict[str, Any]) -> dict[str, Any]:
    """``run``: start and work until killed. ``resume``: the restarted process (same
    executor id), whose launch re-enqueues the executor's pending workflows."""
    global _side
    _side = _common.SideFile(p["side"])
    if p["role"] == "peer":
        return {"skipped": "DBOS does not take over a live peer's workflows"}
    _launch(p)
    if p["role"] == "run":
        with SetWorkflowID(p["run_id"]):
            handle = await DBOS.start_workflow_async(recover, _common.RECOVERY_STEPS)
    else:
        _side.mark("ready", -1)
        handle = await DBOS.retrieve_workflow_async(p["run_id"])
    out = await handle.get_result()
    return {"status": "completed" if out == _common.RECOVERY_STEPS else repr(out)}


async def idle(p: dict[str, Any]) -> dict[str, Any]:
    """Load ``runs`` workflows sleeping in ``DBOS.sleep_async``, then sit idle."""
    n, seconds = int(p["runs"]), float(p["sleep_seconds"])
    _launch(p)
    base_rss = _common.self_rss_mib()
    t0 = time.perf_counter()
    # A bounded number of starts in flight: all 10,000 at once exhaust DBOS's connection
    # pool and spend most of the time in its retry back-off, which is set-up, not idle cost.
    gate = asyncio.Semaphore(16)

    async def start_one() -> None:
        async with gate:
            await DBOS.start_workflow_async(nap, seconds)

    await asyncio.gather(*(start_one() for _ in range(n)))
    path = p["db"].split("sqlite:///", 1)[1]
    deadline = time.monotonic() + 600
    conn = sqlite3.connect(path)
    try:
        # Settled when every workflow has recorded its sleep: from then on it only waits.
        while True:
            (count,) = conn.execute(
                "SELECT count(*) FROM operation_outputs WHERE function_name = 'DBOS.sleep'"
            ).fetchone()
            if count >= n:
                break
            if time.monotonic() > deadline:
                raise TimeoutError("the sleeping workflows did not settle within 600 s")
            await asyncio.sleep(0.05)
    finally:
        conn.close()
    _common.ready({"setup_seconds": time.perf_counter() - t0, "base_rss_mib": base_rss})
    await asyncio.to_thread(_common.wait_for_stdin_line)
    return {"settings": _settings(p)}


def sequential_sync(p: dict[str, Any]) -> dict[str, Any]:
    steps = int(p["steps"])
    _launch(p)
    chain_sync(steps)  # warm-up, as for the async form
    t0 = time.perf_counter()
    out = chain_sync(steps)
    elapsed = time.perf_counter() - t0
    assert out == steps, out
    return {"us_per_step": elapsed / steps * 1e6, "seconds": elapsed, "settings": _settings(p)}


def throughput_sync(p: dict[str, Any]) -> dict[str, Any]:
    steps, seconds = int(p["steps"]), float(p["seconds"])
    _launch(p)
    chain_sync(steps)

    def once() -> None:
        assert chain_sync(steps) == steps

    return _common.back_to_back_sync(seconds, steps, once)


def concurrency_sync(p: dict[str, Any]) -> dict[str, Any]:
    n, steps = int(p["workflows"]), int(p["steps"])
    _launch(p)
    warm = [DBOS.start_workflow(chain_sync, steps) for _ in range(n)]
    for h in warm:
        h.get_result()
    t0 = time.perf_counter()
    handles = [DBOS.start_workflow(chain_sync, steps) for _ in range(n)]
    started = time.perf_counter() - t0
    outs = [h.get_result() for h in handles]
    elapsed = time.perf_counter() - t0
    assert all(o == steps for o in outs)
    return {"seconds": elapsed, "start_seconds": started, "steps_per_s": n * steps / elapsed}


SYNC_WORKLOADS = {
    "sequential": sequential_sync,
    "throughput": throughput_sync,
    "concurrency": concurrency_sync,
}

WORKLOADS = {
    "sequential": sequential,
    "throughput": throughput,
    "concurrency": concurrency,
    "recovery": recovery,
    "idle": idle,
}


def main() -> None:
    p = _common.params()
    if p.get("mode") == "sync":
        result = SYNC_WORKLOADS[p["workload"]](p)
    else:
        result = asyncio.run(WORKLOADS[p["workload"]](p))
    result["pid"] = os.getpid()
    _common.emit(result)
    # DBOS.destroy() waits on background threads and, in the idle workload, on 10,000
    # sleeping workflows; the result is out and the database is thrown away, so leave now.
    os._exit(0)


if __name__ == "__main__":
    main()
