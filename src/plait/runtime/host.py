"""The seam between one pass (or one attempt of a job step) and the process that runs it.

A pass needs a few things from outside: which definitions exist (the catalog), a way to
commit its writes, the clock its times come from, whether its process is stopping,
whether a user cancelled its run, and someone to tell when it published a value.
It gets them as a ``Host`` when it is built and never reaches for the Engine or the
Worker, so a pass can be driven by a test with a stand-in host and no database.
"""

from __future__ import annotations

from collections.abc import Awaitable, Sequence
from typing import Any, Protocol

from plait.catalog import Catalog
from plait.clock import Clock
from plait.context import StreamSink
from plait.observe import Telemetry
from plait.records import Run
from plait.serde import Limits
from plait.store.ops import Batch
from plait.store.rows import Spend


class Host(Protocol):
    """What the runtime asks of whoever drives it."""

    @property
    def catalog(self) -> Catalog:
        """Which workflows, graphs and functions this deployment has."""
        ...

    @property
    def limits(self) -> Limits:
        """How large and deep the values a pass stores may be (step inputs and results,
        run outputs, state values)."""
        ...

    @property
    def clock(self) -> Clock:
        """Where every time a pass records comes from (virtual in a test engine)."""
        ...

    @property
    def telemetry(self) -> Telemetry | None:
        """Where attempts, timers and takeovers are reported; None when nothing listens
        (then the runtime reports nothing and pays nothing)."""
        ...

    @property
    def stopping(self) -> bool:
        """The process is shutting down: start no new attempt."""
        ...

    def braked(self, workflow: str, queue: str | None) -> bool:
        """The workflow or the queue is paused (``Engine.pause_workflow``, as this
        process last read the brakes): a pass starts no new attempt of its runs."""
        ...

    def queue_braked(self, queue: str) -> bool:
        """The queue ``queue`` is paused (as this process last read the brakes): a job
        step of a function admitted through it starts no body."""
        ...

    def cancelling(self, run_id: str) -> bool:
        """A user cancelled ``run_id``: a step cut short now failed, it was not merely
        interrupted."""
        ...

    def commit(self, batch: Batch, /) -> Awaitable[bool]:
        """Commit a pass's writes (see ``Store.commit``)."""
        ...

    def ended_elsewhere(self, run_id: str) -> None:
        """``run_id`` ended in another process (a cancel) while this one's pass had its lease,
        as a commit found: stop its work here as a cancel here does."""
        ...

    def giving_back(self, run_id: str) -> None:
        """The pass of ``run_id`` is about to give its lease back in its last commit. A
        renewal that finds the run released from then on saw that commit, not another
        worker's takeover, and must not stop the pass while it counts what it wrote."""
        ...

    @property
    def streams(self) -> StreamSink:
        """Where step bodies' stream entries go (``runtime.streams.StreamWriter``)."""
        ...

    def published(self, run_id: str) -> None:
        """``run_id`` published a value (``wf.set_value``) in a commit that just ended:
        tell whoever watches the run."""
        ...

    def sent_event(self, run_id: str) -> None:
        """A commit that just ended stored an event for ``run_id`` (``wf.send_event``),
        and woke it in the database: wake this process's loops and watchers too."""
        ...

    async def keep_lease(self, run_id: str, key: str | None = None) -> bool:
        """Whether this process still holds the lease on ``run_id`` (on its job ``key``
        for a job step), asked right before a step body starts: False when it lost it (a
        freeze outlived it and another worker took over), and then no body starts.
        True means the caller may start the body at once, with no await in between."""
        ...

    async def read_run(self, run_id: str) -> Run | None:
        """The run ``run_id`` as stored now (None: no such run), for a pass that sends
        it an event."""
        ...

    async def read_state(self, run_id: str) -> dict[str, Any]:
        """The run-state variables of ``run_id`` (graph nodes read them in attempts
        of job steps)."""
        ...

    async def record_spend(self, spend: Sequence[Spend]) -> None:
        """Record what a step attempt reported spent (``ctx.spend``), before its end is
        committed: the next admission counts it."""
        ...

    async def lineage_queues(self, run_id: str) -> frozenset[str]:
        """The queues of ``run_id`` and of the runs above it, up to the first that has
        ended: each holds a slot of its queue and waits for the one below, so a
        descendant of the same queue admitted through it would wait for a slot its own
        ancestor keeps until it ends."""
        ...
