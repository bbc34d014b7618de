"""How plait's per-step cost on PostgreSQL grows with the round-trip time to the server.

    .venv/bin/python benchmarks/distance.py              # 5 repetitions (see below for time)
    .venv/bin/python benchmarks/distance.py --reps 1     # smoke run, about 2.5 minutes
    .venv/bin/python benchmarks/distance.py --no-dbos    # plait and the floor only
    .venv/bin/python benchmarks/distance.py --postgres-url postgresql://u@near/db \\
        --postgres-url postgresql://u@far/db             # servers at a real distance

A database on the same machine answers in tens of microseconds; one in the next rack or
zone takes a millisecond or more, and then the number of round trips per step, not the
engine's own work, sets the cost of a step. This measures it: a throwaway PostgreSQL
cluster (``fsync=on``) reached directly and through ``latency_proxy.py`` with 1 and 5 ms
added to every round trip, and at each distance, in fresh processes on fresh databases:

* **sequential**: one workflow of N trivial steps (after a warm-up run of as many);
  microseconds per step for plait and for DBOS Transact (both its APIs, the faster shown),
  and plait's durable commits per step;
* **floor**: one single-row ``INSERT`` committing on its own, back to back on one connection
  for 1 s: the least a durable step can cost at that distance (one round trip);
* **concurrency**: 100 workflows of 10 steps started at once; steps/s until all completed.

What the distance really is gets measured in every repetition beside the workloads (the
median of 200 ``SELECT 1`` on one connection, through the proxy or directly), and the growth
of a per-step figure over the first row's (loopback) is given in those measured round trips:
about 1 means one round trip per step. The workloads are the ones ``run.py`` runs
(``bench_plait.py``, ``bench_dbos.py``, ``bench_floor.py``), with the database URL pointing
at the proxy.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import dataclasses
import json
import os
import selectors
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.parse
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import run  # noqa: E402  (the benchmarks folder is not a package)

#: Round-trip times added by the proxy, in ms, unless ``--rtt-ms`` says otherwise.
DEFAULT_RTTS = (0.0, 1.0, 5.0)
#: Steps of the sequential run by added RTT. Every step costs at least a round trip (DBOS's
#: several), and each run is preceded by a warm-up run as long, and DBOS is measured once per
#: API: 1,000 steps at 5 ms would take minutes per repetition. With fewer steps, the round
#: trips of starting and ending the run are shared by fewer steps, which the per-step figure
#: shows as a few round trips divided by the number of steps.
SEQUENTIAL_STEPS = {0.0: 1000, 1.0: 200, 5.0: 50}
CONCURRENT_RUNS = 100
RUN_STEPS = 10
FLOOR_SECONDS = 1.0
RTT_SAMPLES = 200
CONTENDERS = ("plait", *run.DBOS_MODES)


def sequential_steps(rtt_ms: float, override: int | None) -> int:
    """``--sequential-steps`` if given, else the table above (the next lower entry)."""
    if override is not None:
        return override
    return SEQUENTIAL_STEPS[max(r for r in SEQUENTIAL_STEPS if r <= rtt_ms)]


# -- where the server is ----------------------------------------------------------------------


@dataclasses.dataclass
class Place:
    """One distance to the server: a PostgreSQL URL and the RTT a proxy adds in front."""

    label: str
    target: str  # the server's own URL (any database on it)
    added_ms: float
    steps: int
    proxy_port: int | None = None
    rtt_ms: float | None = None  # SELECT 1 through this place, median over the repetitions

    @property
    def key(self) -> str:
        return self.label

    @property
    def probe_url(self) -> str:
        """The target's own database, through this place's proxy if it has one."""
        return with_database(self.target, _dbname(self.target), self.proxy_port)


def masked(url: str) -> str:
    """``url`` without its password, for printing and for the JSON file."""
    parts = urllib.parse.urlsplit(url)
    if parts.password is None:
        return url
    host = parts.netloc.rsplit("@", 1)[1]
    user = parts.username or ""
    return urllib.parse.urlunsplit(parts._replace(netloc=f"{user}:***@{host}"))


def with_database(url: str, database: str, port: int | None = None) -> str:
    """``url`` naming another database and, with ``port``, reached through the proxy."""
    parts = urllib.parse.urlsplit(url)
    netloc = parts.netloc
    if port is not None:
        userinfo = netloc.rsplit("@", 1)[0] + "@" if "@" in netloc else ""
        netloc = f"{userinfo}127.0.0.1:{port}"
    path = "/" + urllib.parse.quote(database, safe="")
    return urllib.parse.urlunsplit(parts._replace(netloc=netloc, path=path))


def host_port(url: str) -> str:
    """The ``HOST:PORT`` the proxy relays to."""
    parts = urllib.parse.urlsplit(url)
    if not parts.hostname:
        raise SystemExit(f"{masked(url)}: the proxy needs a TCP host in the URL")
    host = f"[{parts.hostname}]" if ":" in parts.hostname else parts.hostname
    return f"{host}:{parts.port or 5432}"


class Databases:
    """Fresh databases on the server(s): through the throwaway cluster's ``psql`` when it is
    ours, else with ``CREATE DATABASE`` on the given server (dropped again afterwards)."""

    def __init__(self, cluster: Any) -> None:
        self.cluster = cluster
        self.counter = 0

    def create(self, place: Place) -> tuple[str, Callable[[], None]]:
        self.counter += 1
        name = f"distance_{self.counter:04d}_{uuid.uuid4().hex[:6]}"
        if self.cluster is not None:
            self.cluster.create_database(name)
            drop: Callable[[], None] = lambda: None  # noqa: E731 - the cluster goes as a whole
        else:
            asyncio.run(_admin(place.target, f'CREATE DATABASE "{name}"'))

            def drop() -> None:
                with contextlib.suppress(Exception):
                    asyncio.run(_admin(place.target, f'DROP DATABASE IF EXISTS "{name}"'))

        return with_database(place.target, name, place.proxy_port), drop


async def _admin(url: str, sql: str) -> None:
    import asyncpg

    conn = await asyncpg.connect(url)
    try:
        if sql.startswith("DROP"):
            # A worker that exited at once (DBOS leaves with os._exit) may still look
            # connected for a moment; FORCE (PostgreSQL 13+) ends such sessions.
            try:
                await conn.execute(sql + " WITH (FORCE)")
            except asyncpg.PostgresSyntaxError:
                await conn.execute(sql)
        else:
            await conn.execute(sql)
    finally:
        await conn.close()


async def _median_round_trip(url: str, samples: int) -> float:
    """Median milliseconds of ``SELECT 1`` on one connection (after a few to warm up)."""
    import asyncpg

    conn = await asyncpg.connect(url)
    try:
        for _ in range(10):
            await conn.fetchval("SELECT 1")
        took = []
        for _ in range(samples):
            t0 = time.perf_counter()
            await conn.fetchval("SELECT 1")
            took.append(time.perf_counter() - t0)
    finally:
        await conn.close()
    return statistics.median(took) * 1000


async def _settings(url: str) -> dict[str, str]:
    import asyncpg

    conn = await asyncpg.connect(url)
    try:
        names = ("server_version", "fsync", "synchronous_commit")
        return {n: str(await conn.fetchval(f"SHOW {n}")) for n in names}
    finally:
        await conn.close()


def server_settings(url: str) -> dict[str, str]:
    """The server's version and the settings a commit's cost depends on, as it reports them."""
    return asyncio.run(_settings(url))


def round_trip_ms(url: str, samples: int = RTT_SAMPLES) -> float:
    """The median ``SELECT 1`` round trip to ``url``, ms: the distance as the driver sees it."""
    return asyncio.run(_median_round_trip(url, samples))


@contextlib.contextmanager
def proxy(target: str, rtt_ms: float) -> Iterator[int]:
    """A ``latency_proxy.py`` process in front of ``target``; yields its port."""
    proc = subprocess.Popen(
        [
            sys.executable,
            str(HERE / "latency_proxy.py"),
            "--target",
            target,
            "--rtt-ms",
            str(rtt_ms),
        ],
        stdout=subprocess.PIPE,
        stdin=subprocess.DEVNULL,
        text=True,
    )
    try:
        assert proc.stdout is not None
        with selectors.DefaultSelector() as sel:
            sel.register(proc.stdout, selectors.EVENT_READ)
            if not sel.select(timeout=30):
                raise SystemExit("the latency proxy did not start within 30 s")
        line = proc.stdout.readline()
        if not line.startswith("READY "):
            raise SystemExit(f"the latency proxy failed to start (exit {proc.poll()}): {line!r}")
        yield int(line.split()[1])
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        if proc.stdout is not None:
            proc.stdout.close()


# -- measuring --------------------------------------------------------------------------------


Samples = dict[str, dict[str, list[dict[str, Any]]]]  # "place/workload" -> contender -> results


def measure(
    env: run.Env, dbs: Databases, place: Place, workload: str, contender: str
) -> dict[str, Any]:
    """One workload for one contender in a fresh process on a fresh database."""
    where = env.fresh_dir(f"{place.added_ms:g}ms-{workload}-{contender}")
    url, drop = dbs.create(place)
    params: dict[str, Any] = {"workload": workload, "db": url}
    if workload == "sequential":
        params["steps"] = place.steps
    elif workload == "concurrency":
        params.update(workflows=CONCURRENT_RUNS, steps=RUN_STEPS)
    elif workload == "floor":
        params["seconds"] = FLOOR_SECONDS
    if contender == "dbos-sync":
        params["mode"] = "sync"
    try:
        return run.run_worker(env, contender, params, where)
    finally:
        drop()


def plan(with_dbos: bool) -> list[tuple[str, tuple[str, ...]]]:
    """The workloads of one place and who runs each, in order."""
    peers = CONTENDERS if with_dbos else ("plait",)
    return [("sequential", peers), ("floor", ("floor",)), ("concurrency", peers)]


# -- the table --------------------------------------------------------------------------------


def stat(samples: Samples, key: str, contender: str, field: str) -> run.Stat | None:
    """Median and spread of one result field over the repetitions (None: never measured)."""
    return run.Stat.of(run.field_values(samples, key, contender, field))


def dbos_best(
    samples: Samples, key: str, field: str, lower_is_better: bool
) -> tuple[run.Stat | None, str]:
    """DBOS at its faster API here, and which one that was (with the other's median)."""
    measured = run.dbos_ranked(samples, key, field, lower_is_better)
    if not measured:
        return None, ""
    best, name = measured[0]
    if len(measured) == 1:
        return best, name
    return best, f"{name}; {measured[1][1]} {run.fmt(measured[1][0].median)}"


def in_rtts(value: run.Stat | None, base: run.Stat | None, place: Place, first: Place) -> str:
    """How many measured round trips ``value`` grew by over the first place's figure."""
    if value is None or base is None or place is first:
        return "-"
    if place.rtt_ms is None or first.rtt_ms is None:
        return "-"
    added_us = (place.rtt_ms - first.rtt_ms) * 1000
    if added_us <= 0:
        return "-"
    return f"{(value.median - base.median) / added_us:+.2f}"


def tables(samples: Samples, places: list[Place]) -> list[tuple[str, list[str], list[list[str]]]]:
    """The two tables as (title, header, rows) of text cells, for the terminal and Markdown."""
    first = places[0]
    seq_head = [
        "distance",
        "SELECT 1, ms",
        "steps",
        "plait us/step",
        "growth, RTTs",
        "commits/step",
        "floor us/commit",
        "growth, RTTs",
        "DBOS us/step",
        "growth, RTTs",
        "DBOS API",
    ]
    conc_head = ["distance", "plait steps/s", "commits/step", "DBOS steps/s", "DBOS API"]
    base_p = stat(samples, f"{first.key}/sequential", "plait", "us_per_step")
    base_f = stat(samples, f"{first.key}/floor", "floor", "us_per_commit")
    base_d, _ = dbos_best(samples, f"{first.key}/sequential", "us_per_step", True)
    seq_rows, conc_rows = [], []
    for place in places:
        k = f"{place.key}/sequential"
        p = stat(samples, k, "plait", "us_per_step")
        f = stat(samples, f"{place.key}/floor", "floor", "us_per_commit")
        d, which = dbos_best(samples, k, "us_per_step", True)
        rtt = run.cell(stat(samples, f"{place.key}/rtt", "probe", "ms"))
        seq_rows.append(
            [
                place.label,
                rtt,
                f"{place.steps:,}",
                run.cell(p),
                in_rtts(p, base_p, place, first),
                run.cell(stat(samples, k, "plait", "commits_per_step")),
                run.cell(f),
                in_rtts(f, base_f, place, first),
                run.cell(d),
                in_rtts(d, base_d, place, first),
                which or "-",
            ]
        )
        k = f"{place.key}/concurrency"
        d, which = dbos_best(samples, k, "steps_per_s", False)
        conc_rows.append(
            [
                place.label,
                run.cell(stat(samples, k, "plait", "steps_per_s")),
                run.cell(stat(samples, k, "plait", "commits_per_step")),
                run.cell(d),
                which or "-",
            ]
        )
    return [
        (
            "Sequential: one workflow of N trivial steps (after a warm-up run of as many)",
            seq_head,
            seq_rows,
        ),
        (
            f"Concurrency: {CONCURRENT_RUNS} workflows of {RUN_STEPS} steps started at once",
            conc_head,
            conc_rows,
        ),
    ]


def plain(title: str, head: list[str], rows: list[list[str]]) -> str:
    """A table as aligned text (numbers to the right)."""
    widths = [max(len(r[i]) for r in [head, *rows]) for i in range(len(head))]
    lines = [title]
    for r in [head, *rows]:
        cells = [r[0].ljust(widths[0])] + [
            c.rjust(w) for c, w in zip(r[1:], widths[1:], strict=True)
        ]
        lines.append("  " + "  ".join(cells))
    return "\n".join(lines)


def markdown(title: str, head: list[str], rows: list[list[str]]) -> str:
    """A table as Markdown, in the layout of ``run.py --markdown``."""
    out = [f"**{title}**", "", "| " + " | ".join(head) + " |"]
    out.append("|" + "|".join(["---"] + ["---:"] * (len(head) - 1)) + "|")
    out += ["| " + " | ".join(r) + " |" for r in rows]
    return "\n".join(out)


def verdicts(samples: Samples, places: list[Place]) -> list[str]:
    """plait's growth per step against the target: at most 1.5 round trips per step."""
    first = places[0]
    base = stat(samples, f"{first.key}/sequential", "plait", "us_per_step")
    out = []
    for place in places[1:]:
        value = stat(samples, f"{place.key}/sequential", "plait", "us_per_step")
        growth = in_rtts(value, base, place, first)
        if growth == "-":
            continue
        met = "met" if float(growth) <= 1.5 else "MISSED"
        out.append(
            f"target at {place.label}: a plait step costs at most {first.label}'s plus 1.5"
            f" round trips: {met} ({growth} round trips per step)"
        )
    return out


# -- main -------------------------------------------------------------------------------------


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--reps", type=int, default=5, help="repetitions per measurement (5)")
    ap.add_argument(
        "--rtt-ms",
        help="comma-separated round-trip times the proxy adds, ms (default 0,1,5; 0 with"
        " --postgres-url: the network supplies the distance)",
    )
    ap.add_argument(
        "--sequential-steps",
        type=int,
        help="steps of the sequential run at every distance (default: 1,000 below 1 ms,"
        " 200 from 1 ms, 50 from 5 ms)",
    )
    ap.add_argument(
        "--postgres-url",
        action="append",
        default=[],
        help="measure this server instead of a throwaway cluster (repeatable, nearest first;"
        " the user must be allowed CREATE DATABASE)",
    )
    ap.add_argument(
        "--no-dbos", action="store_true", help="plait and the floor only (a third of the time)"
    )
    ap.add_argument("--dbos-spec", default="dbos", help="pip requirement for the DBOS venv")
    ap.add_argument("--tmpdir", help="where the per-process folders go")
    ap.add_argument("--json", dest="json_path", help="also write every sample to this file")
    ap.add_argument("--markdown", help="also write the tables as Markdown here")
    args = ap.parse_args(argv)
    if args.reps < 1:
        ap.error("--reps must be at least 1")
    if args.sequential_steps is not None and args.sequential_steps < 1:
        ap.error("--sequential-steps must be at least 1")
    default = "0" if args.postgres_url else ",".join(f"{r:g}" for r in DEFAULT_RTTS)
    try:
        args.rtts = sorted({float(x) for x in (args.rtt_ms or default).split(",") if x.strip()})
    except ValueError:
        ap.error("--rtt-ms takes numbers separated by commas")
    if not args.rtts or args.rtts[0] < 0:
        ap.error("--rtt-ms needs round-trip times of 0 or more")
    return args


def make_places(
    targets: list[str], rtts: list[float], given: bool, steps: int | None
) -> list[Place]:
    """Every server at every added round trip, in the order given (the first is the base)."""
    places: list[Place] = []
    for target in targets:
        where = urllib.parse.urlsplit(target).netloc.rsplit("@", 1)[-1]
        for rtt in rtts:
            if given:
                label = where if rtt == 0 else f"{where} +{rtt:g} ms"
            else:
                label = "loopback" if rtt == 0 else f"+{rtt:g} ms"
            same = [p for p in places if p.label.split(" #")[0] == label]
            if same:  # the same server given twice: keep the rows (and their samples) apart
                label = f"{label} #{len(same) + 1}"
            places.append(Place(label, target, rtt, sequential_steps(rtt, steps)))
    return places


@contextlib.contextmanager
def server(urls: list[str]) -> Iterator[tuple[Any, list[str]]]:
    """The given servers, or a throwaway cluster with ``fsync=on`` (as ``run.py`` starts)."""
    if urls:
        yield None, urls
        return
    with run.postgres_cluster(True) as cluster:
        yield cluster, [cluster.dsn]


def proxy_overhead(targets: list[str]) -> dict[str, float]:
    """What a proxy that adds nothing costs a round trip in front of each server, ms: its
    thread hand-offs, which every proxied round trip pays on top of the delay it adds."""
    overhead: dict[str, float] = {}
    for target in targets:
        direct = round_trip_ms(target)
        with proxy(host_port(target), 0.0) as port:
            relayed = round_trip_ms(with_database(target, _dbname(target), port))
        overhead[masked(target)] = relayed - direct
        run.log(
            f"SELECT 1: {direct:.3f} ms, {relayed:.3f} ms through a proxy adding 0 ms"
            f" ({masked(target)})"
        )
    return overhead


def measure_all(
    env: run.Env,
    dbs: Databases,
    places: list[Place],
    reps: int,
    failures: list[str],
    with_dbos: bool = True,
) -> Samples:
    """Every workload for every contender at every place, ``reps`` times, in turns; a
    failed measurement is logged and added to ``failures``, and the others go on."""
    samples: Samples = {}
    for rep in range(reps):
        for place in run.rotated(places, rep):
            # The distance as it is now: load on the machine slows the proxy's wake-ups,
            # so the round trip is measured in every repetition, beside the workloads.
            ms = round_trip_ms(place.probe_url)
            samples.setdefault(f"{place.key}/rtt", {}).setdefault("probe", []).append({"ms": ms})
            run.log(f"[{rep + 1}/{reps}] {place.key}: SELECT 1 round trip {ms:.3f} ms")
            for workload, contenders in plan(with_dbos):
                for contender in run.rotated(contenders, rep):
                    tag = f"{place.key}/{workload}:{contender}"
                    t0 = time.monotonic()
                    try:
                        result = measure(env, dbs, place, workload, contender)
                    except run.BenchError as exc:
                        failures.append(f"{tag} (rep {rep + 1}): {exc}")
                        run.log(f"[{rep + 1}/{reps}] {tag}: FAILED\n{exc}")
                        continue
                    key = f"{place.key}/{workload}"
                    samples.setdefault(key, {}).setdefault(contender, []).append(result)
                    run.log(
                        f"[{rep + 1}/{reps}] {tag}: {run.summary_line(result)}"
                        f" ({time.monotonic() - t0:.1f}s)"
                    )
    return samples


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if not args.postgres_url:
        from plait.testing.postgres import find_pg_bin

        if find_pg_bin() is None:
            # `make bench` runs this after the SQLite benchmarks: a machine without a
            # PostgreSQL server has nothing to measure here, which is not a failure.
            print(
                "distance.py: skipped, no PostgreSQL server binaries (initdb, pg_ctl, postgres)"
                " on PATH or under /usr/lib/postgresql/*/bin; --postgres-url measures a server"
            )
            return 0
    dbos_python = "" if args.no_dbos else str(run.ensure_dbos(args.dbos_spec))
    plait_python = run.plait_interpreter()
    base = Path(args.tmpdir or tempfile.gettempdir()).resolve()
    root = Path(tempfile.mkdtemp(prefix="plait-distance-", dir=base))
    info: dict[str, Any] = {
        "machine": run.machine_info(),
        "plait_interpreter": run.interpreter_info(plait_python, ("plait", "asyncpg")),
        "dbos_interpreter": (
            run.interpreter_info(dbos_python, ("dbos", "sqlalchemy", "psycopg"))
            if dbos_python
            else {"dbos": "not measured"}
        ),
        "command": " ".join(["python", "benchmarks/distance.py", *(argv or sys.argv[1:])]),
        "reps": args.reps,
        "load_before": [round(x, 2) for x in os.getloadavg()],
    }
    failures: list[str] = []
    started = time.monotonic()
    env = run.Env(root=root, plait_python=plait_python, dbos_python=dbos_python)
    try:
        with server(args.postgres_url) as (cluster, targets), contextlib.ExitStack() as stack:
            places = make_places(targets, args.rtts, bool(args.postgres_url), args.sequential_steps)
            for place in places:
                if place.added_ms > 0:
                    place.proxy_port = stack.enter_context(
                        proxy(host_port(place.target), place.added_ms)
                    )
            info["servers"] = {masked(t): server_settings(t) for t in targets}
            overhead = proxy_overhead(targets)
            samples = measure_all(
                env, Databases(cluster), places, args.reps, failures, not args.no_dbos
            )
            for place in places:
                rtt = stat(samples, f"{place.key}/rtt", "probe", "ms")
                place.rtt_ms = rtt.median if rtt is not None else None
    finally:
        shutil.rmtree(root, ignore_errors=True)
    info["wall_seconds"] = round(time.monotonic() - started, 1)
    info["load_after"] = [round(x, 2) for x in os.getloadavg()]
    info["places"] = [{**dataclasses.asdict(p), "target": masked(p.target)} for p in places]
    info["proxy_overhead_ms"] = overhead
    out = tables(samples, places)
    pi, di = info["plait_interpreter"], info["dbos_interpreter"]
    header = (
        f"plait {pi['plait']} ({info['machine']['plait_commit']})"
        + ("" if args.no_dbos else f" and DBOS {di['dbos']}")
        + " on PostgreSQL at a distance;"
        f" {info['machine']['cpus']} x {info['machine']['cpu_model']};"
        f" {args.reps} repetitions, median (min-max)"
    )
    notes = [
        *(
            f"server {k}: " + ", ".join(f"{n}={v}" for n, v in settings.items())
            for k, settings in info["servers"].items()
        ),
        "distance: the round trip the proxy (benchmarks/latency_proxy.py) adds; SELECT 1:"
        f" the median of {RTT_SAMPLES} round trips on one connection, measured in each"
        " repetition",
        *(
            f"a proxy adding 0 ms costs {v * 1000:+.0f} us per round trip ({k})"
            for k, v in overhead.items()
        ),
        "growth: (figure - the first row's) / (its SELECT 1 - the first row's), i.e. round"
        " trips added per step; about 1 is one round trip per step",
        "floor: one single-row INSERT committing on its own, back to back, on one connection"
        f" for {FLOOR_SECONDS:g} s",
        "DBOS: the faster of its two APIs by median, with the other's median",
        *verdicts(samples, places),
    ]
    print()
    print(header)
    for title, head, rows in out:
        print()
        print(plain(title, head, rows))
    print()
    for line in notes:
        print(f"  {line}")
    print(
        f"\ntotal {info['wall_seconds']} s; load average before {info['load_before']},"
        f" after {info['load_after']}"
    )
    if args.json_path:
        Path(args.json_path).write_text(
            json.dumps({"info": info, "samples": samples, "failures": failures}, indent=1)
        )
    if args.markdown:
        parts = [header, *(markdown(*t) for t in out), "\n".join(f"* {n}" for n in notes)]
        Path(args.markdown).write_text("\n\n".join(parts) + "\n")
    if failures:
        run.log(f"\n{len(failures)} measurement(s) failed:")
        for f in failures:
            run.log(f"  {f.splitlines()[0]}")
        return 1
    return 0


def _dbname(url: str) -> str:
    return urllib.parse.unquote(urllib.parse.urlsplit(url).path.lstrip("/")) or "postgres"


if __name__ == "__main__":
    sys.exit(main())
