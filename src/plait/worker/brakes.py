"""What a worker may claim: its scope (the workflows its app registers, the queues it
was told to work) and the brakes (paused workflows and queues) as it last read them.

The claims themselves leave out what is out of scope or paused, in the database, so
every process obeys a brake the moment it commits. A pass that is already running a
run learns of a brake from this worker's copy of the brakes, read with every lease
renewal (a quarter of a lease): it starts no new attempt once its run is braked
(``runtime.drive``), so no step body starts later than a lease after the pause. A copy
older than a lease (the process was frozen, or its loop held up) is read again before a
body starts (``Leases.keep_lease``).
"""

from __future__ import annotations

import logging
import time

from plait.queues import DEFAULT_QUEUE
from plait.runtime import runs
from plait.store.rows import ClaimScope
from plait.worker.state import WorkerState

log = logging.getLogger("plait.worker")


class Brakes(WorkerState):
    """The claim scope and the brakes."""

    def claim_scope(self) -> ClaimScope:
        """The runs this worker claims: those of the workflows its app registers now
        (read each time, like the functions) or of ``only_workflows``; any graph stored
        at run time unless ``only_workflows`` names what to work; ``only_queues``."""
        if self.only_workflows is not None:
            return ClaimScope(self.only_workflows, False, self.only_queues)
        workflows = tuple(sorted(self.catalog.app.workflows))
        return ClaimScope(workflows, True, self.only_queues)

    def job_functions(self) -> list[str]:
        """The queued functions whose jobs this worker claims: the app's, in the queues
        it works (a function of no queue is in ``DEFAULT_QUEUE``) and not paused: a
        function's steps are admitted through its queue, and a brake on the queue holds
        them as it holds the queue's runs."""
        app = self.catalog.app
        queues, brakes = self.only_queues, self.brakes
        return [
            name
            for name, f in app.functions.items()
            if f.queued
            and (queues is None or (f.queue or DEFAULT_QUEUE) in queues)
            and ("queue", f.queue or DEFAULT_QUEUE) not in brakes
        ]

    def queues_of(self, functions: list[str]) -> list[str]:
        """The queue of each of ``functions`` (``DEFAULT_QUEUE`` for one of none): a
        claim leaves their jobs alone while it is paused, as the brakes stand when it
        commits (this worker's copy may be a little old)."""
        known = self.catalog.app.functions
        return [(f.queue if (f := known.get(n)) else None) or DEFAULT_QUEUE for n in functions]

    def queue_braked(self, queue: str) -> bool:
        """Whether the queue ``queue`` is paused, as this worker last read the brakes."""
        return ("queue", queue) in self.brakes

    async def fresh_brakes(self) -> None:
        """Read the brakes again if this worker's copy is older than a lease (a freeze, a
        loop held up): what it claims next obeys a pause as the claims of runs do."""
        if time.monotonic() - self.brakes_read_at >= self.lease:
            await self.refresh_brakes()

    def braked(self, workflow: str, queue: str | None) -> bool:
        brakes = self.brakes
        if not brakes:
            return False
        # a run started on no queue is in ``DEFAULT_QUEUE``, for a brake as for a scope
        return ("workflow", workflow) in brakes or ("queue", queue or DEFAULT_QUEUE) in brakes

    async def refresh_brakes(self) -> None:
        """Read the brakes again; while any is set, stop the runs it holds that no pass
        holds now (a pass that stopped for it gave its run back)."""
        since = time.monotonic()
        try:
            found = await self.store.list_brakes()
        except Exception:
            log.exception("reading the paused workflows and queues failed")
            return
        self.brakes = frozenset((b.kind, b.name) for b in found)
        self.brakes_read_at = since
        if self.brakes and self.take_work:
            await self.park_braked()

    async def announce(self) -> None:
        """As the worker starts: read the brakes and the stored queue limits, and record
        itself (``Registry``)."""
        await self.refresh_brakes()
        await self.refresh_limits(force=True)
        await self.beat(force=True)

    async def park_braked(self) -> None:
        """Runs of a paused workflow or queue that no pass holds become ``paused``."""
        try:
            parked = await self.store.park_braked(runs.PAUSED, runs.BRAKED_FROM)
        except Exception:
            log.exception("pausing the runs of paused workflows and queues failed")
            return
        for run_id in parked:
            self.notifier.run_changed(run_id, settled=False)
