"""Prometheus metrics of one engine or worker process (the ``metrics`` extra).

Imported only by an engine started with ``metrics=True``. Each engine keeps its own
registry, so two engines in one process (tests) never mix their counts:

* ``plait_runs_total{workflow,status}``: runs this process moved to ``completed``,
  ``failed``, ``cancelled`` or ``suspended`` (a pass that ended them, or a cancel);
* ``plait_steps_total{function,status}``: attempts whose body ran here, by how they ended
  (``succeeded``, ``failed``, ``interrupted``); a replay reads recorded outcomes back and
  runs nothing, so it counts nothing;
* ``plait_step_seconds{function}``: how long those bodies ran (real time);
* ``plait_runs_active``: runs this process is driving right now;
* ``plait_queue_depth{queue}``: queued steps waiting for a worker, per function, read
  from the database when the metrics are scraped;
* ``plait_lease_takeovers_total``: attempts this process took over from a worker that
  lost its lease.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from plait.errors import extra_needed
from plait.store.base import Store

with extra_needed("metrics", "Prometheus metrics"):
    from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
    from prometheus_client.exposition import CONTENT_TYPE_LATEST, generate_latest

#: the media type of ``Metrics.render``
CONTENT_TYPE = CONTENT_TYPE_LATEST
_STEP_BUCKETS = (0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1.0, 5.0, 10.0, 60.0, 300.0)


class Metrics:
    """The metrics of one process, in a registry of their own."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        r = self.registry
        self.runs = Counter(
            "plait_runs", "Runs moved to an end state here", ["workflow", "status"], registry=r
        )
        self.steps = Counter(
            "plait_steps", "Attempts run here, by outcome", ["function", "status"], registry=r
        )
        self.step_seconds = Histogram(
            "plait_step_seconds",
            "Seconds a step body ran",
            ["function"],
            buckets=_STEP_BUCKETS,
            registry=r,
        )
        self.active = Gauge("plait_runs_active", "Runs this process drives now", registry=r)
        self.queue_depth = Gauge(
            "plait_queue_depth", "Queued steps waiting for a worker", ["queue"], registry=r
        )
        self.takeovers = Counter(
            "plait_lease_takeovers",
            "Attempts taken over from a worker that lost its lease",
            registry=r,
        )
        self._queues: set[str] = set()
        #: per function, its labelled series (``labels()`` looks them up under a lock)
        self._series: dict[str, tuple[Any, Any, Any, Any]] = {}

    def run_ended(self, workflow: str, status: str) -> None:
        self.runs.labels(workflow, status).inc()

    def attempt_ended(self, function: str, status: str, seconds: float) -> None:
        series = self._series.get(function)
        if series is None:
            series = self._series[function] = (
                self.steps.labels(function, "succeeded"),
                self.steps.labels(function, "failed"),
                self.steps.labels(function, "interrupted"),
                self.step_seconds.labels(function),
            )
        succeeded, failed, interrupted, seconds_of = series
        if status == "succeeded":
            succeeded.inc()
        elif status == "failed":
            failed.inc()
        else:
            interrupted.inc()
        seconds_of.observe(seconds)

    def takeover(self) -> None:
        self.takeovers.inc()

    def watch_active(self, count: Callable[[], int]) -> None:
        """Read ``plait_runs_active`` from ``count`` whenever the metrics are scraped."""
        self.active.set_function(count)

    async def refresh(self, store: Store) -> None:
        """Read what is read from the database (the queue depths) before a scrape."""
        depths = await store.job_depths()
        for queue in self._queues - set(depths):
            self.queue_depth.labels(queue).set(0)
        for queue, depth in depths.items():
            self.queue_depth.labels(queue).set(depth)
        self._queues |= set(depths)

    def render(self) -> bytes:
        """The Prometheus text format."""
        return generate_latest(self.registry)


__all__ = ["CONTENT_TYPE", "Metrics"]
