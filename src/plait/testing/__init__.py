"""Testing workflows: ``TestEngine`` (an Engine on a virtual clock), helpers that assert
a run's steps, and a pytest plugin (``plait.testing.pytest_plugin``, registered through
an entry point) with the fixtures ``plait_engine`` and ``plait_database_url``.

``plait.testing.postgres`` starts throwaway PostgreSQL clusters for tests and benchmarks.

The names are loaded when first used: the pytest plugin lives in this package and is
loaded into every pytest session where plait is installed, which must not pay for the
engine.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from plait.testing.asserts import assert_steps, step_keys
    from plait.testing.engine import TestEngine

_WHERE = {
    "TestEngine": "plait.testing.engine",
    "assert_steps": "plait.testing.asserts",
    "step_keys": "plait.testing.asserts",
}


def __getattr__(name: str) -> Any:
    module = _WHERE.get(name)
    if module is None:
        raise AttributeError(f"module 'plait.testing' has no attribute {name!r}")
    return getattr(importlib.import_module(module), name)


__all__ = ["TestEngine", "assert_steps", "step_keys"]
