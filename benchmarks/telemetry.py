"""What tracing and metrics cost a step: the sequential workload three ways, side by side.

    .venv/bin/python benchmarks/telemetry.py              # SQLite, about a minute
    .venv/bin/python benchmarks/telemetry.py --postgres   # and a throwaway cluster

One run of 1,000 steps (after a warm-up run of as many) on a fresh SQLite file with
plait's durable defaults (and, with ``--postgres``, on a fresh database of a throwaway
PostgreSQL cluster with fsync on), in a fresh process each time, measured as:

* ``off``: no telemetry (the libraries are not even imported);
* ``metrics``: ``metrics=True`` alone (prometheus-client);
* ``api``: ``tracing=True, metrics=True`` with only ``opentelemetry-api`` in play, as in
  a process whose application configured no tracer provider;
* ``sdk``: the same with the OpenTelemetry SDK configured as an application would (a
  ``BatchSpanProcessor`` in front of an exporter that drops the spans).

The three alternate, round after round, so a slow moment of the machine falls on all of
them. The figures are medians of microseconds per step and each one's growth over ``off``.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path

HERE = Path(__file__).resolve().parent
VARIANTS = ("off", "metrics", "api", "sdk")


def measure(variant: str, steps: int, db: str) -> float:
    """Microseconds per step of one fresh process."""
    params = {"workload": "sequential", "steps": steps, "db": db, "telemetry": variant}
    out = subprocess.run(
        [sys.executable, str(HERE / "bench_plait.py"), json.dumps(params)],
        capture_output=True,
        text=True,
        check=True,
        timeout=600,
    ).stdout
    line = next(x for x in out.splitlines() if x.startswith("BENCH-RESULT "))
    return float(json.loads(line.removeprefix("BENCH-RESULT "))["us_per_step"])


def rounds(store: str, fresh_db: Callable[[Path], str], count: int, steps: int) -> None:
    """``count`` rounds of the three variants in turns, then the store's table."""
    figures: dict[str, list[float]] = {v: [] for v in VARIANTS}
    for n in range(count):
        turn = n % len(VARIANTS)
        for variant in VARIANTS[turn:] + VARIANTS[:turn]:
            with tempfile.TemporaryDirectory(prefix="plait-bench-") as where:
                figures[variant].append(measure(variant, steps, fresh_db(Path(where))))
    base = statistics.median(figures["off"])
    print(f"{store}, 1 sequential run of {steps:,} steps, {count} rounds")
    print(f"{'telemetry':<10} {'us/step (median)':>17} {'range':>15} {'vs off':>8}")
    for variant in VARIANTS:
        values = figures[variant]
        median = statistics.median(values)
        spread = f"{min(values):.0f}-{max(values):.0f}"
        growth = f"{(median / base - 1) * 100:+.1f}%"
        print(f"{variant:<10} {median:>17.0f} {spread:>15} {growth:>8}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5, help="measurements of each (5)")
    parser.add_argument("--steps", type=int, default=1000, help="steps per run (1000)")
    parser.add_argument("--postgres", action="store_true", help="also on a throwaway cluster")
    args = parser.parse_args(argv)
    if args.rounds < 1 or args.steps < 1:
        parser.error("--rounds and --steps must be at least 1")
    rounds("SQLite", lambda where: f"sqlite:///{where / 'bench.db'}", args.rounds, args.steps)
    if args.postgres:
        from plait.testing.postgres import TemporaryCluster

        made = iter(range(1_000_000))
        with TemporaryCluster(fsync=True) as pg:
            print()
            rounds(
                "PostgreSQL",
                lambda _where: pg.create_database(f"telemetry_{next(made)}"),
                args.rounds,
                args.steps,
            )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
