"""The README's first command runs the order demo; it must keep working."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from support.paths import ROOT


def test_the_order_demo_runs_to_its_end(tmp_path: Path) -> None:
    env = {**os.environ, "PLAIT_DATABASE_URL": f"sqlite:///{tmp_path / 'demo.db'}"}
    done = subprocess.run(
        [sys.executable, str(ROOT / "examples" / "order_demo.py")],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    assert "manager approves the order" in done.stdout
    assert "(ship_order) completed" in done.stdout


def test_the_agent_example_runs_offline_to_its_end(tmp_path: Path) -> None:
    pytest.importorskip("pydantic_ai", reason="the pydantic-ai extra is not installed")
    env = {**os.environ, "PLAIT_DATABASE_URL": f"sqlite:///{tmp_path / 'agent.db'}"}
    done = subprocess.run(
        [sys.executable, str(ROOT / "examples" / "agent.py")],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    assert "plait approve " in done.stdout and " agent:support:tool:refund:call-2 " in done.stdout
    assert "agent:support:tool:look_up_order" in done.stdout
    assert "completed: Sorry about that. Refunded 240 on order A-1001." in done.stdout
