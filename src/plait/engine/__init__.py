"""The Engine: start runs, wait for them, read them, and act on them.

``engine.py`` holds the class (its lifecycle, start, run, wait and the reads); each other
concern it offers is a module of its own: ``actions`` (resume, retry, cancel, events,
prune), ``requests`` (requests with a reply), ``schedules``, ``approvals``, ``fork``,
``check``, ``values`` and ``queues``.
"""

from plait.engine.base import Duration
from plait.engine.engine import (
    DEFAULT_CONCURRENCY,
    Engine,
    StartOptions,
    WorkflowRef,
    workflow_name,
)

__all__ = [
    "DEFAULT_CONCURRENCY",
    "Duration",
    "Engine",
    "StartOptions",
    "WorkflowRef",
    "workflow_name",
]
