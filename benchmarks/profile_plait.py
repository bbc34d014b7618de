"""Where plait spends its time on the sequential and throughput workloads.

    python benchmarks/profile_plait.py                    # both workloads, cProfile
    python benchmarks/profile_plait.py --py-spy PATH      # also sample with py-spy
    python benchmarks/profile_plait.py --callgrind        # instructions per step (valgrind)
    python benchmarks/profile_plait.py --callgrind --callgrind-of concurrency   # or starts

plait does its work on two kinds of threads: the event loop (workflow code, replay, the
engine's bookkeeping) and the SQLite writer (statements, commits, fsync). A plain
``cProfile`` run sees only the thread that started it, so this script profiles every
thread separately (each thread's ``run`` is wrapped in its own profiler) and prints, per
thread, the functions with the most time of their own. plait's code is not touched.

With ``--callgrind`` nothing is timed: one sequential run of 10 steps and one of 1,010 on
``sqlite:///:memory:`` are each run under ``valgrind --tool=callgrind`` in a process of
their own, and the difference of their instruction counts over the 1,000 extra steps is
what one step costs. Instructions do not depend on what else the machine does, so this is
the figure to compare on a busy machine; start-up, imports and the engine's opening and
closing are in both runs and cancel out. The functions (C level: the interpreter, sqlite3,
json) that the extra steps spent the most instructions in are listed after it.
``--callgrind-of concurrency`` counts a step of 100 runs at once (runs of 10 and of 20
steps, on a file), and ``--callgrind-of starts`` a ``start`` call (200 and 1,200 of them,
100 at once, with no worker), the same way.

With ``--py-spy`` the same workload is also run under py-spy (a sampling profiler that
sees native frames such as the fsync inside ``sqlite3``), and the samples are summed by
function: "self" is where a thread was when sampled, "total" is how often the function
was anywhere on the stack.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import cProfile
import io
import os
import pstats
import re
import shutil
import sqlite3
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import bench_plait  # noqa: E402  (the benchmarks folder is not a package)

_profiles: dict[str, cProfile.Profile] = {}
_lock = threading.Lock()


def _profile_threads() -> None:
    """Give every thread started from now on a profiler of its own."""
    original = threading.Thread.run

    def run(self: threading.Thread) -> None:
        prof = cProfile.Profile()
        with _lock:
            _profiles[f"{self.name}#{len(_profiles)}"] = prof
        prof.enable()
        try:
            original(self)
        finally:
            prof.disable()

    threading.Thread.run = run  # type: ignore[method-assign]


class _TimedConnection(sqlite3.Connection):
    """A connection that clocks every ``execute`` by statement, to split the writer's
    time between plait's statements and the COMMIT (where the fsync happens)."""

    def execute(self, sql: str, *args: Any) -> sqlite3.Cursor:  # type: ignore[override]
        t0 = time.perf_counter()
        try:
            return super().execute(sql, *args)
        finally:
            elapsed = time.perf_counter() - t0
            key = re.sub(r"\s+", " ", sql).strip()[:72]
            thread = _thread_group(threading.current_thread().name)
            with _lock:
                entry = _statements[(thread, key)]
                entry[0] += 1
                entry[1] += elapsed


_statements: dict[tuple[str, str], list[float]] = collections.defaultdict(lambda: [0, 0.0])


def _time_statements() -> None:
    original = sqlite3.connect

    def connect(*args: Any, **kwargs: Any) -> sqlite3.Connection:
        kwargs.setdefault("factory", _TimedConnection)
        return original(*args, **kwargs)

    sqlite3.connect = connect  # type: ignore[assignment]


def _thread_cpu() -> dict[str, float]:
    """CPU seconds of each live thread of this process, by thread group (Linux /proc)."""
    names = {t.native_id: _thread_group(t.name) for t in threading.enumerate()}
    ticks = os.sysconf("SC_CLK_TCK")
    out: dict[str, float] = collections.defaultdict(float)
    for task in Path("/proc/self/task").iterdir():
        try:
            stat = (task / "stat").read_text()
        except OSError:
            continue
        fields = stat[stat.rindex(")") + 2 :].split()
        tid = int(task.name)
        group = names.get(tid, "main (event loop)" if tid == os.getpid() else "other")
        out[group] += (int(fields[11]) + int(fields[12])) / ticks
    return out


async def _cpu_split(name: str, db: str, steps: int, seconds: float) -> dict[str, Any]:
    """Run the workload and sample per-thread CPU just before the engine closes."""
    import plait

    box: dict[str, Any] = {}
    original = plait.Engine.close

    async def close(self: Any, *args: Any, **kwargs: Any) -> None:
        box["cpu"] = _thread_cpu()
        await original(self, *args, **kwargs)

    plait.Engine.close = close  # type: ignore[method-assign]
    try:
        box["before"] = _thread_cpu()
        t0 = time.perf_counter()
        box["result"] = await _workload(name, db, steps, seconds)
        box["wall"] = time.perf_counter() - t0
    finally:
        plait.Engine.close = original  # type: ignore[method-assign]
    return box


def run_cpu_split(name: str, steps: int, seconds: float) -> None:
    """Wall time per step against CPU per step on each thread, without a profiler's
    overhead: how much of a step is Python work and how much is waiting (fsync, wake-ups)."""
    with tempfile.TemporaryDirectory(prefix="plait-cpu-") as tmp:
        box = asyncio.run(_cpu_split(name, f"sqlite:///{tmp}/cpu.db", steps, seconds))
    result = box["result"]
    done = steps + 10 if name == "sequential" else (int(result["workflows"]) + 1) * steps
    print(f"\n=== CPU per step by thread, {name}: {summary(result)}")
    wall_us = box["wall"] / done * 1e6
    print(f"   wall (whole process run, incl. warm-up): {wall_us:8.1f} us per step")
    for group, cpu in sorted(box["cpu"].items(), key=lambda kv: -kv[1]):
        used = cpu - box["before"].get(group, 0.0)
        if used > 0.005:
            print(f"   {group:<28} {used / done * 1e6:8.1f} us CPU per step")


def run_statements(name: str, steps: int, seconds: float, top: int) -> None:
    """Time each SQL statement plait issues during the workload, per executed step."""
    _statements.clear()
    with tempfile.TemporaryDirectory(prefix="plait-sql-") as tmp:
        result = asyncio.run(_workload(name, f"sqlite:///{tmp}/sql.db", steps, seconds))
    done = steps if name == "sequential" else int(result.get("workflows", 0)) * steps
    done = max(done, 1)
    print(f"\n=== SQL statements, {name}: {summary(result)} (per step of the measured part)")
    print(f"   {'per step':>9} {'us/step':>8} {'us/call':>8}  thread / statement")
    with _lock:
        ranked = sorted(_statements.items(), key=lambda kv: kv[1][1], reverse=True)[:top]
    for (thread, sql), (count, total) in ranked:
        print(
            f"   {count / done:9.2f} {total / done * 1e6:8.1f} {total / count * 1e6:8.1f}"
            f"  {thread}: {sql}"
        )


def _thread_group(name: str) -> str:
    """Threads of one pool are reported together (``plait-read_0``, ``_1``...)."""
    base = name.split("#", 1)[0]
    for prefix in ("plait-sqlite-writer", "plait-read", "asyncio_", "ThreadPoolExecutor"):
        if base.startswith(prefix):
            return prefix
    return base


async def _workload(name: str, db: str, steps: int, seconds: float) -> dict[str, Any]:
    p = {"db": db, "steps": steps, "seconds": seconds}
    if name == "sequential":
        return await bench_plait.sequential(p)
    return await bench_plait.throughput(p)


def run_cprofile(name: str, steps: int, seconds: float, top: int, out: Path | None) -> None:
    _profiles.clear()
    with tempfile.TemporaryDirectory(prefix="plait-profile-") as tmp:
        db = f"sqlite:///{tmp}/profile.db"
        main = cProfile.Profile()
        t0 = time.perf_counter()
        main.enable()
        result = asyncio.run(_workload(name, db, steps, seconds))
        main.disable()
        wall = time.perf_counter() - t0
    print(f"\n=== {name}: {summary(result)}; wall {wall:.2f} s (profiled, so slower) ===")
    groups: dict[str, list[cProfile.Profile]] = collections.defaultdict(list)
    groups["main (event loop)"].append(main)
    with _lock:
        for tname, prof in _profiles.items():
            groups[_thread_group(tname)].append(prof)
    for group, profs in groups.items():
        stats = pstats.Stats(profs[0], stream=io.StringIO())
        for extra in profs[1:]:
            stats.add(extra)
        total = stats.total_tt  # type: ignore[attr-defined]
        if total < 0.01:
            continue
        print(f"\n-- thread {group}: {total:.2f} s of profiled time ({len(profs)} thread(s))")
        print(f"   {'self s':>8} {'self %':>7} {'cum s':>8} {'calls':>9}  function")
        entries = stats.stats  # type: ignore[attr-defined]
        ranked = sorted(entries.items(), key=lambda kv: kv[1][2], reverse=True)[:top]
        for (file, line, func), (_cc, nc, tt, ct, _callers) in ranked:
            where = _short(file, line)
            print(f"   {tt:8.3f} {tt / total * 100:6.1f}% {ct:8.3f} {nc:9d}  {func}  {where}")
        if out is not None:
            out.mkdir(parents=True, exist_ok=True)
            stats.dump_stats(str(out / f"{name}-{group.split()[0]}.prof"))


def _short(file: str, line: int) -> str:
    if file == "~":
        return "(builtin)"
    for marker in ("/site-packages/", "/src/", "/lib/python3"):
        if marker in file:
            file = file.split(marker, 1)[1]
            break
    return f"{file}:{line}"


def summary(result: dict[str, Any]) -> str:
    keys = ("us_per_step", "workflows_per_s", "steps_per_s", "commits_per_step")
    return ", ".join(f"{k}={result[k]:.3g}" for k in keys if k in result)


def run_py_spy(py_spy: str, name: str, steps: int, seconds: float, top: int) -> None:
    """Sample a separate run of the workload with py-spy (all threads, native frames)."""
    with tempfile.TemporaryDirectory(prefix="plait-pyspy-") as tmp:
        raw = Path(tmp) / "stacks.txt"
        db = f"sqlite:///{tmp}/spy.db"
        code = (
            f"import asyncio, sys; sys.path.insert(0, {str(HERE)!r}); import profile_plait as p;"
            f" asyncio.run(p._workload({name!r}, {db!r}, {steps}, {seconds}))"
        )
        cmd = [py_spy, "record", "--format", "raw", "--rate", "500", "--threads", "--native"]
        cmd += ["--output", str(raw), "--", sys.executable, "-c", code]
        proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
        if proc.returncode != 0 or not raw.exists():
            # --native needs unwinding support; retry without it rather than give up.
            cmd.remove("--native")
            proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
        if proc.returncode != 0 or not raw.exists():
            print(f"py-spy failed: {proc.stderr.strip()[-500:]}")
            return
        by_thread: dict[str, collections.Counter[str]] = collections.defaultdict(
            collections.Counter
        )
        total_by_thread: dict[str, collections.Counter[str]] = collections.defaultdict(
            collections.Counter
        )
        samples: collections.Counter[str] = collections.Counter()
        for line in raw.read_text().splitlines():
            stack, _, count = line.rpartition(" ")
            if not stack or "_find_and_load" in stack:
                continue  # interpreter start-up and imports are not the workload
            frames = stack.split(";")
            # The first frame is "thread (TID): NAME" (the name is missing for threads
            # that are gone by the time py-spy looks them up).
            head = frames[0]
            thread = _thread_group(head.split(": ", 1)[1] if ": " in head else head)
            n = int(count)
            samples[thread] += n
            by_thread[thread][_frame(frames[-1])] += n
            for f in {_frame(fr) for fr in frames[1:]}:
                total_by_thread[thread][f] += n
    print(f"\n=== py-spy, {name} (500 Hz, all threads) ===")
    for thread, count in samples.most_common():
        print(f"\n-- thread {thread}: {count} samples")
        print(f"   {'self %':>7} {'total %':>8}  function")
        for func, n in by_thread[thread].most_common(top):
            tot = total_by_thread[thread][func]
            print(f"   {n / count * 100:6.1f}% {tot / count * 100:7.1f}%  {func}")


def _frame(frame: str) -> str:
    # py-spy raw frames look like "function (path/file.py:123)".
    name, _, where = frame.partition(" (")
    where = where.rstrip(")")
    file = where.rsplit(":", 1)[0]
    for marker in ("/site-packages/", "/src/", "/lib/python3.11/"):
        if marker in file:
            file = file.split(marker, 1)[1]
            break
    return f"{name} ({file})" if file else name


#: what ``--callgrind`` can count: per kind, the two sizes whose difference is measured,
#: and how many steps (or starts) that difference holds
CALLGRIND_SIZES = {
    # one sequential run of 10 and of 1,010 steps, on an in-memory database
    "sequential": ((10, 1010), 1000),
    # the concurrency workload: 100 runs at once of 10 and of 20 steps, on a file
    "concurrency": ((10, 20), 1000),
    # 200 and 1,200 ``start`` calls, 100 at once, with no worker to run them
    "starts": ((200, 1200), 1000),
}


#: the engine's clocks (lease renewals, polls) wake rarely under callgrind: valgrind
#: runs a process some fifty times slower, and what they do in that time would be
#: charged to the steps, more of it the busier the machine
CALLGRIND_ENGINE = {"lease_seconds": 600.0, "poll_interval": 600.0}


async def _callgrind_run(size: int, kind: str = "sequential") -> None:
    """What runs under callgrind: an engine, the work of ``kind`` at ``size`` (see
    ``CALLGRIND_SIZES``), and its close."""
    from plait.store.sqlite import writer

    # Valgrind makes each commit some fifty times slower: the store would take that for a
    # slow disk and hand its commits to the writer thread, as it never does on a real
    # in-memory database. The count is of the path that runs there.
    writer._INLINE_LIMIT = float("inf")  # pyright: ignore[reportPrivateUsage]
    if kind == "sequential":
        params = {"db": "sqlite:///:memory:"}
        async with bench_plait._engine(params, **CALLGRIND_ENGINE) as engine:
            out = await engine.run("chain", {"n": size}, timeout=3600)
            assert out == size, out
        return
    with tempfile.TemporaryDirectory(dir=_memory_folder()) as tmp:
        params = {"db": f"sqlite:///{tmp}/callgrind.db"}
        if kind == "concurrency":
            async with bench_plait._engine(params, **CALLGRIND_ENGINE) as engine:
                runs = [engine.start("chain", {"n": size}) for _ in range(100)]
                ids = await asyncio.gather(*runs)
                ended = await asyncio.gather(*(engine.wait(r, timeout=3600) for r in ids))
                assert all(r.status == "completed" for r in ended), ended
        else:
            async with bench_plait._engine(params, workers=False) as engine:
                for _ in range(size // 100):
                    await asyncio.gather(*(engine.start("chain", {"n": 1}) for _ in range(100)))


def _memory_folder() -> Path | None:
    """Where the counted workloads keep their database file: memory-backed storage when
    there is one, so that the count is of the engine's work and not of the disk's."""
    shm = Path("/dev/shm")
    return shm if shm.is_dir() else None


def _callgrind_start(
    size: int, out: Path, valgrind: str, kind: str = "sequential"
) -> subprocess.Popen[str]:
    """Start the work of ``kind`` at ``size`` under callgrind, writing into ``out``."""
    code = (
        f"import asyncio, sys; sys.path.insert(0, {str(HERE)!r}); import profile_plait as p;"
        f" asyncio.run(p._callgrind_run({size}, {kind!r}))"
    )
    cmd = [valgrind, "--tool=callgrind", f"--callgrind-out-file={out}", sys.executable]
    return subprocess.Popen(
        [*cmd, "-c", code], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True
    )


def _callgrind_count(steps: int, proc: subprocess.Popen[str], out: Path) -> int:
    """The instructions the callgrind run of ``steps`` steps counted, once it ended."""
    _, err = proc.communicate()
    if proc.returncode != 0:
        raise SystemExit(f"callgrind run of {steps} steps failed:\n{err[-2000:]}")
    for line in out.read_text(errors="replace").splitlines():
        if line.startswith(("summary:", "totals:")):
            return int(line.split()[1])
    raise SystemExit(f"no instruction count in {out}")


def _annotate(path: Path, inclusive: bool) -> dict[str, int]:
    """Instructions by function (``file:function``) that callgrind_annotate reports."""
    cmd = ["callgrind_annotate", f"--inclusive={'yes' if inclusive else 'no'}"]
    cmd += ["--threshold=100", str(path)]
    text = subprocess.run(cmd, capture_output=True, text=True, check=True).stdout
    counts: dict[str, int] = {}
    for line in text.splitlines():
        match = re.match(r"\s*([\d,]+)\s+(?:\([^)]*\)\s+)?(\S.*?)(?:\s+\[.*\])?$", line)
        if match and ":" in match.group(2):
            # a cycle's inner entries (``fn'2``) and unnamed code only repeat the outer ones
            file, _, func = match.group(2).rpartition(":")
            if "'" in func or func.startswith("0x"):
                continue
            name = f"{Path(file).name}:{func}"
            counts[name] = counts.get(name, 0) + int(match.group(1).replace(",", ""))
    return counts


def run_callgrind(
    top: int, keep: Path | None, markdown: Path | None = None, kind: str = "sequential"
) -> int:
    """Instructions per step (per start for ``starts``): the difference of the two sizes
    of ``kind`` over the steps it holds, e.g. (I(1010) - I(10)) / 1000 sequential."""
    valgrind = shutil.which("valgrind")
    if valgrind is None:
        raise SystemExit("--callgrind needs valgrind on the PATH")
    sizes, extra = CALLGRIND_SIZES[kind]
    short, long = sizes
    unit = "starts" if kind == "starts" else "steps"
    with tempfile.TemporaryDirectory(prefix="plait-callgrind-") as tmp:
        folder = keep or Path(tmp)
        folder.mkdir(parents=True, exist_ok=True)
        files = {n: folder / f"callgrind.{kind}.{n}.out" for n in sizes}
        # side by side: the counts do not depend on what else runs
        procs = {n: _callgrind_start(n, files[n], valgrind, kind) for n in sizes}
        counts = {n: _callgrind_count(n, procs[n], files[n]) for n in sizes}
        per_step = (counts[long] - counts[short]) // extra
        print(f"\n=== callgrind, {kind} (instructions) ===")
        print(f"   {short:>5} {unit}: {counts[short]:>15,}")
        print(f"   {long:>5} {unit}: {counts[long]:>15,}")
        print(f"   per {unit[:-1]}: {per_step:,}  (the difference over {extra:,} {unit})")
        if markdown is not None:
            markdown.write_text(
                "| in-memory sequential run | instructions (callgrind) |\n|---|---:|\n"
                f"| {short:,} steps | {counts[short]:,} |\n| {long:,} steps | {counts[long]:,} |\n"
                f"| per step (difference / {extra:,}) | {per_step:,} |\n"
            )
        for inclusive in (True, False):
            few = _annotate(files[short], inclusive)
            many = _annotate(files[long], inclusive)
            diff = {f: (many[f] - few.get(f, 0)) / extra for f in many}
            ranked = sorted(diff.items(), key=lambda kv: -kv[1])[:top]
            kind = "inclusive" if inclusive else "self"
            print(f"\n-- {kind} instructions per step, by function")
            for func, n in ranked:
                print(f"   {n:10,.0f} {n / per_step * 100:6.1f}%  {func}")
    return per_step


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n", 1)[0])
    ap.add_argument("--workload", choices=("sequential", "throughput", "both"), default="both")
    ap.add_argument("--steps", type=int, help="steps per run (default 1000 / 10)")
    ap.add_argument("--seconds", type=float, default=5.0, help="throughput window")
    ap.add_argument("--top", type=int, default=20, help="functions shown per thread")
    ap.add_argument("--save", type=Path, help="write .prof files (snakeviz, pstats) here")
    ap.add_argument("--py-spy", dest="py_spy", help="path to py-spy: also sample with it")
    ap.add_argument("--statements", action="store_true", help="time plait's SQL statements instead")
    ap.add_argument(
        "--callgrind", action="store_true", help="count instructions per step (valgrind) only"
    )
    ap.add_argument(
        "--callgrind-of",
        dest="callgrind_of",
        choices=tuple(CALLGRIND_SIZES),
        default="sequential",
        help="with --callgrind: what to count (default: a sequential step)",
    )
    ap.add_argument("--keep", type=Path, help="with --callgrind: keep the callgrind files here")
    ap.add_argument(
        "--markdown", type=Path, help="with --callgrind: also write the counts as Markdown here"
    )
    args = ap.parse_args()
    if args.markdown is not None and args.callgrind_of != "sequential":
        ap.error("--markdown writes the sequential count (the table of docs/benchmarks.md)")
    if args.callgrind:
        run_callgrind(args.top, args.keep, args.markdown, args.callgrind_of)
        return
    names = ("sequential", "throughput") if args.workload == "both" else (args.workload,)
    for name in names:
        steps = args.steps or (1000 if name == "sequential" else 10)
        if args.py_spy:
            run_py_spy(args.py_spy, name, steps, args.seconds, args.top)
    for name in names:
        steps = args.steps or (1000 if name == "sequential" else 10)
        run_cpu_split(name, steps, args.seconds)
    if args.statements:
        _time_statements()
        for name in names:
            steps = args.steps or (1000 if name == "sequential" else 10)
            run_statements(name, steps, args.seconds, args.top)
        return
    _profile_threads()
    for name in names:
        steps = args.steps or (1000 if name == "sequential" else 10)
        run_cprofile(name, steps, args.seconds, args.top, args.save)


if __name__ == "__main__":
    main()
