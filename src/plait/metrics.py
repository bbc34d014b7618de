"""Prometheus metrics of one engine or worker process (the ``metrics`` extra).

Imported only by an engine started with ``metrics=True``. Each engine keeps its own
registry, so two engines in one process (tests) never mix their counts:

* ``plait_runs_total{workflow,status}``: runs this process moved to ``completed``,
  ``failed``, ``cancelled``, ``suspended`` or ``needs_attention`` (a pass that ended or
  parked them, or a cancel);
* ``plait_steps_total{function,status}``: attempts whose body ran here, by how they ended
  (``succeeded``, ``failed``, ``interrupted``); a replay reads recorded outcomes back and
  runs nothing, so it counts nothing;
* ``plait_step_seconds{function}``: how long those bodies ran (real time);
* ``plait_runs_active``: runs this process is driving right now;
* ``plait_queue_depth{queue}``: job steps a worker could start now (due, held by no
  live lease), labelled with their function, read from the database when the metrics are
  scraped. A step in a retry's back-off waits for time, not for a worker, so it is left
  out: an operator reads the gauge as the backlog the workers have not caught up with;
* ``plait_lease_takeovers_total``: attempts this process took over from a worker that
  lost its lease.
"""

from __future__ import annotations

import threading
from bisect import bisect_left
from collections.abc import Callable, Iterator

from plait.errors import extra_needed
from plait.store.contract import Store

with extra_needed("metrics", "Prometheus metrics"):
    from prometheus_client import CollectorRegistry, Counter, Gauge
    from prometheus_client.core import CounterMetricFamily, HistogramMetricFamily, Metric
    from prometheus_client.exposition import CONTENT_TYPE_LATEST, generate_latest

#: the media type of ``Metrics.render``
CONTENT_TYPE = CONTENT_TYPE_LATEST
_STEP_BUCKETS = (0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1.0, 5.0, 10.0, 60.0, 300.0)
_BUCKET_LABELS = [*(repr(float(b)) for b in _STEP_BUCKETS), "+Inf"]
_ATTEMPT_STATUSES = ("succeeded", "failed", "interrupted")


class Metrics:
    """The metrics of one process, in a registry of their own."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        r = self.registry
        self.runs = Counter(
            "plait_runs", "Runs moved to an end state here", ["workflow", "status"], registry=r
        )
        #: per function: attempts by status (as ``_ATTEMPT_STATUSES``), then the
        #: histogram's counts per bucket (not cumulative; the last is +Inf), then its sum
        self._attempts: dict[str, list[float]] = {}
        self._lock = threading.Lock()
        r.register(_AttemptCollector(self))
        self.active = Gauge("plait_runs_active", "Runs this process drives now", registry=r)
        self.queue_depth = Gauge(
            "plait_queue_depth", "Job steps a worker could start now", ["queue"], registry=r
        )
        self.takeovers = Counter(
            "plait_lease_takeovers",
            "Attempts taken over from a worker that lost its lease",
            registry=r,
        )
        self._queues: set[str] = set()

    def attempt_ended(self, function: str, status: str, seconds: float) -> None:
        """Count one attempt. It runs once per step, so it counts into plain numbers under
        one lock; the Prometheus families are built from them only when scraped."""
        bucket = 3 + bisect_left(_STEP_BUCKETS, seconds)
        index = 0 if status == "succeeded" else 1 if status == "failed" else 2
        with self._lock:
            counts = self._attempts.get(function)
            if counts is None:
                counts = self._attempts[function] = [0] * (4 + len(_STEP_BUCKETS)) + [0.0]
            counts[index] += 1
            counts[bucket] += 1
            counts[-1] += seconds

    def attempt_counts(self) -> dict[str, list[float]]:
        """A copy of the attempt counts (see ``__init__``), for a scrape."""
        with self._lock:
            return {function: list(c) for function, c in self._attempts.items()}

    def run_ended(self, workflow: str, status: str) -> None:
        self.runs.labels(workflow, status).inc()

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


class _AttemptCollector:
    """``plait_steps_total`` and ``plait_step_seconds``, read from ``Metrics``' counts."""

    def __init__(self, metrics: Metrics) -> None:
        self._metrics = metrics

    def collect(self) -> Iterator[Metric]:
        counts = self._metrics.attempt_counts()
        steps = CounterMetricFamily(
            "plait_steps", "Attempts run here, by outcome", labels=["function", "status"]
        )
        seconds = HistogramMetricFamily(
            "plait_step_seconds", "Seconds a step body ran", labels=["function"]
        )
        for function, c in sorted(counts.items()):
            for index, status in enumerate(_ATTEMPT_STATUSES):
                steps.add_metric([function, status], c[index])
            cumulative = 0.0
            buckets: list[tuple[str, float]] = []
            for label, count in zip(_BUCKET_LABELS, c[3:-1], strict=True):
                cumulative += count
                buckets.append((label, cumulative))
            seconds.add_metric([function], buckets, sum_value=c[-1])
        yield steps
        yield seconds


__all__ = ["CONTENT_TYPE", "Metrics"]
