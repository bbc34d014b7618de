"""Where things are in the repository, so a test finds them however deep its folder is."""

from __future__ import annotations

from pathlib import Path

#: the repository (or unpacked source distribution) the tests run from
ROOT = Path(__file__).resolve().parents[2]
#: the tests' own folder: on ``sys.path``, and the working folder of the worker processes
#: that load ``support.*`` apps
TESTS = ROOT / "tests"
#: the package's source tree
SRC = ROOT / "src"
