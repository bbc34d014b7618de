"""The Engine: start runs, wait for them, read them, and act on them.

``engine.py`` holds the class (its lifecycle, start, run, wait and the reads); each other
concern it offers is a module of its own: ``actions`` (resume, retry, cancel, events,
prune), ``requests`` (requests with a reply), ``schedules``, ``approvals``, ``fork``,
``check``, ``values``, ``queues`` and ``starts`` (``start_many``).
"""

from plait.engine.base import Duration, WorkflowRef, workflow_name
from plait.engine.engine import DEFAULT_CONCURRENCY, Engine, StartOptions

__all__ = [
    "DEFAULT_CONCURRENCY",
    "Duration",
    "Engine",
    "StartOptions",
    "WorkflowRef",
    "workflow_name",
]
