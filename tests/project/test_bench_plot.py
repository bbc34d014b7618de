"""benchmarks/plot.py's data shaping: run.py's JSON into one series per contender and store.

The drawing needs matplotlib, which lives only in benchmarks/.venv-plot; the shaping must
not, so these tests run in plait's own environment.
"""

from __future__ import annotations

import importlib.util
import sys
from types import ModuleType
from typing import Any

import pytest

from support.paths import ROOT

PLOT = ROOT / "benchmarks" / "plot.py"


@pytest.fixture(scope="module")
def plot() -> ModuleType:
    """benchmarks/ is not a package: load plot.py from its path, as a module of its own."""
    had_matplotlib = "matplotlib" in sys.modules
    spec = importlib.util.spec_from_file_location("bench_plot", PLOT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["bench_plot"] = module
    try:
        spec.loader.exec_module(module)
    finally:
        del sys.modules["bench_plot"]
    if not had_matplotlib:
        assert "matplotlib" not in sys.modules, "importing plot.py must not import matplotlib"
    return module


def _seq(*us: float) -> list[dict[str, Any]]:
    return [
        {"us_per_step": u, "seconds": u * 1000 / 1e6, "settings": {"journal_mode": "WAL"}}
        for u in us
    ]


def _conc(*seconds: float, steps_per_run: int = 10, runs: int = 100) -> list[dict[str, Any]]:
    return [
        {"seconds": s, "start_seconds": s / 10, "steps_per_s": runs * steps_per_run / s}
        for s in seconds
    ]


# Shaped exactly like `run.py --json`: {"info": {...}, "samples": {key: {contender: [...]}},
# "failures": [...]}, with keys "<store>/<workload>" and one result dict per repetition.
SAMPLE: dict[str, Any] = {
    "info": {
        "machine": {"cpus": "2", "cpu_model": "AMD EPYC", "plait_commit": "fa53707"},
        "plait_interpreter": {"python": "3.11.7", "sqlite": "3.40.1", "plait": "0.1.0"},
        "dbos_interpreter": {"python": "3.11.7", "dbos": "3.4.0"},
        "config": {
            "reps": 3,
            "sequential_steps": 1000,
            "workflow_steps": 10,
            "concurrency_sizes": [100, 1000],
            "postgres": True,
            "sqlite": True,
            "temporal": False,
        },
        "settings": {},
        "skipped": {"postgres/concurrency-100:plait": "plait cannot open postgresql"},
    },
    "samples": {
        "sqlite/sequential": {
            "plait": _seq(300.0, 200.0, 250.0),
            "dbos": _seq(4000.0, 5000.0, 4500.0),
            "dbos-sync": _seq(3000.0, 3500.0, 2500.0),
        },
        "sqlite/floor": {
            "floor": [
                {"commits_per_s": 1e6 / us, "us_per_commit": us, "settings": {}}
                for us in (120.0, 100.0, 110.0)
            ]
        },
        "sqlite/throughput": {
            "plait": [{"workflows_per_s": 300.0, "steps_per_s": 3000.0, "workflows": 600}]
        },
        "sqlite/concurrency-100": {
            # 1,000 steps: 0.2 s is 200 us per step
            "plait": _conc(0.2, 0.1, 0.3),
            "dbos": _conc(5.0, 4.0, 6.0),
        },
        "sqlite/concurrency-1000": {
            # 10,000 steps: 1 s is 100 us per step
            "plait": _conc(1.0, 2.0, 1.5, runs=1000),
        },
        "sqlite/recovery-restart": {"plait": [{"kill_to_next_end": 0.4}]},
        "sqlite/idle": {"plait": [{"rss_mib": 80.0, "cpu_percent": 0.5}]},
        "postgres/sequential": {"dbos": _seq(7000.0)},
        "postgres/concurrency-100": {"dbos-sync": _conc(3.0)},
        "postgres/floor": {"floor": [{"commits_per_s": 2000.0, "us_per_commit": 500.0}]},
    },
    "failures": [],
}


def _by_label(panel: Any) -> dict[str, Any]:
    return {s.contender: s for s in panel.series}


def test_one_panel_per_store_in_order(plot: ModuleType) -> None:
    panels = plot.series(SAMPLE)
    assert [(p.store, p.label) for p in panels] == [
        ("sqlite", "SQLite"),
        ("postgres", "PostgreSQL"),
    ]


def test_sequential_is_one_run_in_flight_in_us_per_step(plot: ModuleType) -> None:
    sqlite = _by_label(plot.series(SAMPLE)[0])
    assert [s.label for s in plot.series(SAMPLE)[0].series] == [
        "plait",
        "DBOS (async API)",
        "DBOS (sync API)",
    ]
    first = sqlite["plait"].points[0]
    assert (first.runs_in_flight, first.median, first.low, first.high, first.n) == (
        1,
        250.0,
        200.0,
        300.0,
        3,
    )
    sync = sqlite["dbos-sync"].points
    assert [(p.runs_in_flight, p.median, p.low, p.high) for p in sync] == [
        (1, 3000.0, 2500.0, 3500.0)
    ]


def test_concurrency_is_seconds_over_all_steps(plot: ModuleType) -> None:
    plait = _by_label(plot.series(SAMPLE)[0])["plait"]
    got = [(p.runs_in_flight, p.median, p.low, p.high) for p in plait.points]
    want = [(1, 250.0, 200.0, 300.0), (100, 200.0, 100.0, 300.0), (1000, 150.0, 100.0, 200.0)]
    assert [x for x, *_ in got] == [x for x, *_ in want]
    for g, w in zip(got, want, strict=True):
        assert g[1:] == pytest.approx(w[1:])
    dbos = _by_label(plot.series(SAMPLE)[0])["dbos"]
    assert [p.runs_in_flight for p in dbos.points] == [1, 100]
    assert dbos.points[1].median == pytest.approx(5000.0)
    assert (dbos.points[1].low, dbos.points[1].high) == pytest.approx((4000.0, 6000.0))


def test_floor_is_one_commit_in_us(plot: ModuleType) -> None:
    sqlite, postgres = plot.series(SAMPLE)
    assert (sqlite.floor.median, sqlite.floor.low, sqlite.floor.high) == (110.0, 100.0, 120.0)
    assert (postgres.floor.median, postgres.floor.low, postgres.floor.high, postgres.floor.n) == (
        500.0,
        500.0,
        500.0,
        1,
    )


def test_a_contender_keeps_only_the_points_it_has(plot: ModuleType) -> None:
    postgres = _by_label(plot.series(SAMPLE)[1])
    assert set(postgres) == {"dbos", "dbos-sync"}  # plait skipped on PostgreSQL
    assert [p.runs_in_flight for p in postgres["dbos"].points] == [1]
    assert [p.runs_in_flight for p in postgres["dbos-sync"].points] == [100]
    assert postgres["dbos-sync"].points[0].median == pytest.approx(3000.0)


def test_stores_without_plotted_workloads_are_left_out(plot: ModuleType) -> None:
    only_idle = {
        "info": SAMPLE["info"],
        "samples": {"sqlite/idle": SAMPLE["samples"]["sqlite/idle"]},
    }
    assert plot.series(only_idle) == []
    no_floor = {
        "info": SAMPLE["info"],
        "samples": {"sqlite/sequential": SAMPLE["samples"]["sqlite/sequential"]},
    }
    (panel,) = plot.series(no_floor)
    assert panel.floor is None


def test_temporal_gets_its_own_line(plot: ModuleType) -> None:
    data = {
        "info": SAMPLE["info"],
        "samples": {
            "sqlite/sequential": {"plait": _seq(250.0), "temporal": _seq(9000.0, 11000.0)},
        },
    }
    (panel,) = plot.series(data)
    temporal = _by_label(panel)["temporal"]
    assert temporal.label == "Temporal"
    assert (temporal.points[0].median, temporal.points[0].low) == (10000.0, 9000.0)
