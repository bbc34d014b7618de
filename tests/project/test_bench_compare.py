"""benchmarks/compare.py refuses what it cannot measure before it checks anything out."""

from __future__ import annotations

import subprocess
import sys

from support.paths import ROOT

SCRIPT = ROOT / "benchmarks" / "compare.py"


def _compare(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(SCRIPT), *args], capture_output=True, text=True, check=False
    )


def test_an_unknown_workload_is_named_and_nothing_runs() -> None:
    out = _compare("HEAD", "sqlite/sequential", "sqlite/nope")
    assert out.returncode == 2
    assert "unknown workload(s): sqlite/nope" in out.stderr


def test_repetitions_must_be_at_least_one() -> None:
    out = _compare("HEAD", "--reps", "0")
    assert out.returncode == 2
    assert "--reps must be 1 or more, got 0" in out.stderr
