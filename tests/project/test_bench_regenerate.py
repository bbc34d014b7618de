"""benchmarks/regenerate.py: the figures of a ``make bench`` run go into their regions of
docs/benchmarks.md, the prose stays, a region the run did not measure keeps its figures,
and marks that do not pair up are refused by name."""

from __future__ import annotations

import importlib.util
import re
import sys
from pathlib import Path
from types import ModuleType

import pytest

from support.paths import ROOT


@pytest.fixture(scope="module")
def regen() -> ModuleType:
    """benchmarks/ is not a package: load regenerate.py from its path."""
    spec = importlib.util.spec_from_file_location(
        "bench_regenerate", ROOT / "benchmarks" / "regenerate.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["bench_regenerate"] = module
    spec.loader.exec_module(module)
    return module


PAGE = """# Benchmarks

Prose before.

<!-- bench:latency -->
old latency table
<!-- /bench:latency -->

Prose between, with figures of its own.

<!-- bench:instructions -->
old instruction count
<!-- /bench:instructions -->

Prose after.
"""


def test_regions_with_figures_are_replaced_and_the_rest_is_kept(
    regen: ModuleType, tmp_path: Path
) -> None:
    (tmp_path / "latency.md").write_text("| a | b |\n|---|---|\n| 1 | 2 |\n")
    (tmp_path / "spare.txt").write_text("nobody asked\n")
    text, filled, kept = regen.regenerate(PAGE, tmp_path, "make bench at commit abc")
    assert filled == ["latency"] and kept == ["instructions"]
    assert "old latency table" not in text
    assert "_make bench at commit abc_\n\n| a | b |\n|---|---|\n| 1 | 2 |" in text
    assert "old instruction count" in text
    for prose in ("Prose before.", "Prose between, with figures of its own.", "Prose after."):
        assert prose in text
    # a second run replaces the first one's figures, not adds to them
    (tmp_path / "instructions.txt").write_text("per step  454,300\n")
    again, filled, kept = regen.regenerate(text, tmp_path, "make bench at commit def")
    assert filled == ["latency", "instructions"] and kept == []
    assert again.count("| 1 | 2 |") == 1 and "abc" not in again
    assert "```text\nper step  454,300\n```" in again


@pytest.mark.parametrize(
    ("page", "says"),
    [
        ("<!-- bench:a -->\n<!-- bench:b -->\n<!-- /bench:b -->\n", "'b' opens inside region 'a'"),
        ("<!-- bench:a -->\nx\n", "region 'a' (line 1) is never closed"),
        ("x\n<!-- /bench:a -->\n", "region 'a' closes but none is open"),
        ("<!-- bench:a -->\n<!-- /bench:b -->\n", "region 'b' closes but 'a' is open"),
        (
            "<!-- bench:a -->\n<!-- /bench:a -->\n<!-- bench:a -->\n<!-- /bench:a -->\n",
            "region 'a' appears twice",
        ),
    ],
)
def test_marks_that_do_not_pair_up_are_refused_by_name(
    regen: ModuleType, tmp_path: Path, page: str, says: str
) -> None:
    with pytest.raises(regen.RegionError, match=re.escape(says)):
        regen.regenerate(page, tmp_path, "stamp")


def test_the_page_and_the_command_agree(regen: ModuleType, tmp_path: Path) -> None:
    """The real page's marks pair up, and the command rewrites only what it was given."""
    page = tmp_path / "benchmarks.md"
    page.write_text((ROOT / "docs" / "benchmarks.md").read_text())
    _text, filled, kept = regen.regenerate(page.read_text(), tmp_path, "stamp")
    assert filled == [] and {"results", "latency", "instructions"} <= set(kept)
    figures = tmp_path / "figures"
    figures.mkdir()
    (figures / "latency.md").write_text("| new | table |\n")
    assert regen.main([str(page), str(figures)]) == 0
    assert "| new | table |" in page.read_text()
    with pytest.raises(SystemExit):
        regen.main([str(page), str(tmp_path / "missing")])
