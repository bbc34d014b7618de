"""Draw run.py's samples as one PNG: wall time per step against the number of runs in flight.

    python benchmarks/plot.py results.json benchmarks.png

``results.json`` is what ``run.py --json`` writes; ``run.py --plot FILE.png`` calls this
script itself, under the interpreter of ``benchmarks/.venv-plot`` (created on first use with
matplotlib in it), so matplotlib never becomes a dependency of plait or of its tests.

The table prints each workload in its own unit; the plot puts the ones that share a unit on
one scale: microseconds of wall time per step. Sequential (one run of 1,000 steps) is the
point at 1 run in flight; concurrency-N (N runs of 10 steps started at once, timed until all
completed) is the point at N, as ``seconds / (N * steps) * 1e6``. With one durable commit
per step and nothing shared, a contender would sit on the floor (one durable commit's time,
the dashed line) at every N; below it means commits are shared between steps. Throughput is
left out: it also runs one run at a time, so it would sit at x = 1 beside sequential and
measure the start-to-output path instead.

The part that turns the JSON into series (``series``) imports only the standard library, so
it is testable where matplotlib is not installed; only ``draw`` imports matplotlib.
"""

from __future__ import annotations

import dataclasses
import json
import statistics
import sys
from pathlib import Path
from typing import Any

#: Contender keys in run.py's samples, in legend order, with the legend's names.
CONTENDERS = {
    "plait": "plait",
    "dbos": "DBOS (async API)",
    "dbos-sync": "DBOS (sync API)",
    "temporal": "Temporal",
}
#: Stores in panel order, with the panels' names.
STORES = {"sqlite": "SQLite", "postgres": "PostgreSQL"}
#: run.py's workflow_steps, for JSON written before the config recorded it.
DEFAULT_WORKFLOW_STEPS = 10


@dataclasses.dataclass(frozen=True)
class Point:
    """One workload's figure for one contender: the median over the repetitions and the
    min-max spread (the table's ``median (min-max)``), in microseconds per step."""

    runs_in_flight: int
    median: float
    low: float
    high: float
    n: int

    @classmethod
    def of(cls, runs_in_flight: int, values: list[float]) -> Point | None:
        if not values:
            return None
        return cls(runs_in_flight, statistics.median(values), min(values), max(values), len(values))


@dataclasses.dataclass(frozen=True)
class Series:
    """One contender's line in a panel, points in increasing runs in flight."""

    contender: str
    label: str
    points: tuple[Point, ...]


@dataclasses.dataclass(frozen=True)
class Panel:
    """One store's panel: the contenders' lines and the floor (one durable commit, in
    microseconds, with ``runs_in_flight`` 1 as a placeholder), if it was measured."""

    store: str
    label: str
    series: tuple[Series, ...]
    floor: Point | None


def _numbers(results: list[dict[str, Any]], field: str) -> list[float]:
    return [
        float(r[field])
        for r in results
        if isinstance(r.get(field), int | float) and not isinstance(r.get(field), bool)
    ]


def series(data: dict[str, Any]) -> list[Panel]:
    """run.py's JSON (``{"info": ..., "samples": {"sqlite/sequential": {"plait": [result,
    ...], ...}, ...}}``) as one panel per store that has a sequential or concurrency sample.

    Every repetition is converted to microseconds per step before the median and min-max
    are taken, so the spread is the one the table shows. Keys of other workloads
    (throughput, recovery, idle) are ignored."""
    samples: dict[str, dict[str, list[dict[str, Any]]]] = data.get("samples", {})
    config = data.get("info", {}).get("config", {})
    steps = int(config.get("workflow_steps") or DEFAULT_WORKFLOW_STEPS)
    panels: list[Panel] = []
    for store, store_label in STORES.items():
        # runs in flight -> contender -> us per step of each repetition
        by_x: dict[int, dict[str, list[float]]] = {}
        sequential = samples.get(f"{store}/sequential", {})
        for contender, results in sequential.items():
            by_x.setdefault(1, {})[contender] = _numbers(results, "us_per_step")
        prefix = f"{store}/concurrency-"
        for key, by in samples.items():
            if not key.startswith(prefix) or not key[len(prefix) :].isdigit():
                continue
            n = int(key[len(prefix) :])
            for contender, results in by.items():
                per_step = [s / (n * steps) * 1e6 for s in _numbers(results, "seconds")]
                by_x.setdefault(n, {})[contender] = per_step
        lines = []
        for contender, label in CONTENDERS.items():
            points = [
                p
                for x in sorted(by_x)
                if (p := Point.of(x, by_x[x].get(contender, []))) is not None
            ]
            if points:
                lines.append(Series(contender, label, tuple(points)))
        if not lines:
            continue
        floor_results = samples.get(f"{store}/floor", {}).get("floor", [])
        floor = Point.of(1, _numbers(floor_results, "us_per_commit"))
        panels.append(Panel(store, store_label, tuple(lines), floor))
    return panels


def workloads(data: dict[str, Any], runs_in_flight: list[int]) -> str:
    """What each x stands for, in the sizes the run used."""
    config = data.get("info", {}).get("config", {})
    parts = []
    if 1 in runs_in_flight:
        parts.append(f"1 = one run of {int(config.get('sequential_steps') or 1000):,} steps")
    sizes = " and ".join(f"{x:,}" for x in runs_in_flight if x != 1)
    if sizes:
        steps = int(config.get("workflow_steps") or DEFAULT_WORKFLOW_STEPS)
        parts.append(
            f"{sizes} = that many {steps}-step runs started together, timed until all completed"
        )
    return "; ".join(parts) + "."


def subtitle(data: dict[str, Any]) -> str:
    """Versions, repetitions and machine, so a PNG found on its own says what it shows."""
    info = data.get("info", {})
    plait = info.get("plait_interpreter", {})
    dbos = info.get("dbos_interpreter", {})
    machine = info.get("machine", {})
    reps = info.get("config", {}).get("reps")
    parts = [
        f"plait {plait.get('plait', '?')} ({machine.get('plait_commit', '?')})",
        f"DBOS {dbos.get('dbos', '?')}",
    ]
    temporal = info.get("temporal_interpreter")
    if temporal:
        parts.append(f"Temporal dev server {temporal.get('server', '?')}")
    text = " vs ".join(parts)
    if machine.get("cpus"):
        text += f"; {machine['cpus']} x {machine.get('cpu_model', 'CPU')}"
    if reps == 1:
        text += "; 1 repetition, so no spread"
    elif reps:
        text += f"; point = median of {reps} repetitions, bar = min-max"
    return text


# -- drawing (matplotlib only from here on) -------------------------------------------------

#: Fixed colours and markers, so a contender looks the same in every panel and every PNG.
STYLE = {
    "plait": ("#1f77b4", "o"),
    "dbos": ("#d62728", "s"),
    "dbos-sync": ("#ff7f0e", "D"),
    "temporal": ("#2ca02c", "^"),
}
#: Each contender's points sit slightly left or right of the true x (a factor, the axis is
#: logarithmic) so that error bars at the same x do not cover each other.
NUDGE = {"plait": 0.88, "dbos": 0.96, "dbos-sync": 1.04, "temporal": 1.12}


def _us(value: float, _pos: Any = None) -> str:
    """A tick or figure in microseconds, to three significant digits at most."""
    if value >= 1000:
        return f"{value:,.0f}"
    return f"{value:.3g}"


def _runs(value: float, _pos: Any = None) -> str:
    return "1\n(sequential)" if value == 1 else f"{value:,.0f}"


def draw(data: dict[str, Any], out: Path) -> None:
    """Write the PNG. Panels share the y axis so the stores can be compared by eye."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.lines import Line2D
    from matplotlib.ticker import FixedLocator, FuncFormatter, LogLocator, NullLocator

    panels = series(data)
    if not panels:
        raise SystemExit("no sequential or concurrency samples to plot")
    # Sizes in inches: the margins hold the titles, two-line tick labels and the legend
    # whatever the number of panels, so they are fixed rather than left to tight_layout.
    width, height = 6.0 * len(panels) + 2.0, 6.4
    fig, axes = plt.subplots(1, len(panels), figsize=(width, height), sharey=True, squeeze=False)
    xs = sorted({p.runs_in_flight for panel in panels for s in panel.series for p in s.points})
    values = [
        v
        for panel in panels
        for v in (
            [x for s in panel.series for p in s.points for x in (p.low, p.high)]
            + ([panel.floor.low, panel.floor.high] if panel.floor else [])
        )
    ]
    for ax, panel in zip(axes[0], panels, strict=True):
        for s in panel.series:
            colour, marker = STYLE.get(s.contender, ("#7f7f7f", "v"))
            nudge = NUDGE.get(s.contender, 1.0)
            x = [p.runs_in_flight * nudge for p in s.points]
            y = [p.median for p in s.points]
            below = [p.median - p.low for p in s.points]
            above = [p.high - p.median for p in s.points]
            ax.errorbar(
                x,
                y,
                yerr=[below, above],
                color=colour,
                marker=marker,
                markersize=6,
                linewidth=1.6,
                capsize=4,
                label=s.label,
            )
        if panel.floor is not None:
            f = panel.floor
            ax.axhline(f.median, color="black", linestyle="--", linewidth=1.2)
            if f.high > f.low:
                ax.axhspan(f.low, f.high, color="black", alpha=0.07, linewidth=0)
            ax.annotate(
                f"floor: one durable commit, {_us(f.median)} µs",
                xy=(0.02, f.median),
                xycoords=("axes fraction", "data"),
                xytext=(0, -4),
                textcoords="offset points",
                va="top",
                fontsize=8.5,
            )
        ax.set_title(panel.label, fontsize=12, fontweight="bold")
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlim(min(xs) / 2, max(xs) * 2)
        ax.xaxis.set_major_locator(FixedLocator(xs))
        ax.xaxis.set_major_formatter(FuncFormatter(_runs))
        ax.xaxis.set_minor_locator(NullLocator())
        ax.set_xlabel("runs in flight at once (log scale)")
        ax.grid(True, which="major", alpha=0.35)
        ax.grid(True, which="minor", axis="y", alpha=0.12)
    first = axes[0][0]
    if values:
        first.set_ylim(min(values) / 1.6, max(values) * 1.6)
    first.yaxis.set_major_locator(LogLocator(base=10))
    first.yaxis.set_minor_locator(LogLocator(base=10, subs=(2.0, 5.0)))
    first.yaxis.set_major_formatter(FuncFormatter(_us))
    first.yaxis.set_minor_formatter(FuncFormatter(_us))
    first.tick_params(axis="y", which="major", labelsize=9)
    first.tick_params(axis="y", which="minor", labelsize=8)
    first.set_ylabel("µs of wall time per step\n(log scale, lower is better)")
    handles: list[Any] = []
    labels: list[str] = []
    for ax in axes[0]:
        for handle, label in zip(*ax.get_legend_handles_labels(), strict=True):
            if label not in labels:
                handles.append(handle)
                labels.append(label)
    if any(panel.floor is not None for panel in panels):
        handles.append(Line2D([], [], color="black", linestyle="--", linewidth=1.2))
        spread = any(p.floor is not None and p.floor.n > 1 for p in panels)
        labels.append(
            "storage floor: one durable single-row commit" + (" (band: min-max)" if spread else "")
        )
    # One row under two panels; two rows under one, which is too narrow for one.
    columns = len(labels) if len(panels) > 1 else (len(labels) + 1) // 2
    rows = -(-len(labels) // columns)
    fig.legend(
        handles,
        labels,
        loc="lower center",
        bbox_to_anchor=(0.5, 0.08 / height),
        ncol=columns,
        frameon=False,
        fontsize=9,
    )
    fig.suptitle(
        "Durable workflow steps: wall time per step as more runs share the store",
        y=1 - 0.15 / height,
        va="top",
    )
    fig.text(
        0.5,
        1 - 0.5 / height,
        f"{workloads(data, xs)}\n{subtitle(data)}",
        ha="center",
        va="top",
        fontsize=8.5,
        color="#444444",
    )
    fig.subplots_adjust(
        left=1.1 / width,
        right=1 - 0.3 / width,
        top=1 - 1.15 / height,
        bottom=(1.0 + 0.22 * rows) / height,
        wspace=0.06,
    )
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=130)
    plt.close(fig)


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 2:
        print("usage: plot.py RESULTS.json OUT.png", file=sys.stderr)
        return 2
    data = json.loads(Path(args[0]).read_text(encoding="utf-8"))
    draw(data, Path(args[1]))
    print(f"wrote {args[1]}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
