"""Testing workflows: ``TestEngine`` (an Engine on a virtual clock), helpers that assert
a run's steps, and a pytest plugin (``plait.testing.pytest_plugin``, registered through
an entry point) with the fixtures ``plait_engine`` and ``plait_database_url``.

``plait.testing.postgres`` starts throwaway PostgreSQL clusters for tests and benchmarks.
"""

from plait.testing.asserts import assert_steps, step_keys
from plait.testing.engine import TestEngine

__all__ = ["TestEngine", "assert_steps", "step_keys"]
