"""Flow control: the queue fields of a new run, each checked, and how deep each queue
is."""

from __future__ import annotations

from typing import Any

from plait import queues
from plait.engine.base import EngineBase
from plait.runtime import runs
from plait.store.rows import QueueLimits
from plait.worker.admission import limits_of


class QueuesMixin(EngineBase):
    """``Engine.queue_depths``, and the flow options ``start`` checks."""

    def _flow_options(
        self,
        name: str,
        queue: object,
        key: object,
        priority: object,
        dedup: object,
        delay: object,
        start_at: object,
    ) -> dict[str, Any]:
        """The queue fields of a new run (``NewRun``'s), each checked and named when
        wrong."""
        wdef = self.app.workflows.get(name)
        if queue is None and wdef is not None:
            queue = wdef.queue
        qname = None if queue is None else queues.check_queue_name(queue)
        qkey = None if key is None else queues.check_text(key, "key")
        if qkey is not None and qname is None:
            raise ValueError(f"key={qkey!r} needs a queue: the key counts against per_key")
        if qkey is not None and qname is not None:
            queues.check_key_in_queue(qkey, qname)
        not_before = queues.start_time(delay, start_at, self.clock.now())
        queued = qname is not None or not_before is not None
        return {
            "status": runs.initial_status(queued),
            "queue": qname,
            "queue_key": qkey,
            "priority": queues.check_priority(priority),
            "dedup": None if dedup is None else queues.check_text(dedup, "dedup"),
            "not_before": not_before,
        }

    async def _store_app_queues(self) -> None:
        """Store the limits of the queues this app declares, replacing what was stored
        for them: every process on the database enforces the stored limits, whether its
        own app declares the queue or not."""
        declared = [limits_of(q) for q in self.app.queues.values()]
        if declared:
            await self.store.put_queue_limits(declared, self.app.name)

    async def queue_depths(self) -> list[dict[str, Any]]:
        """Per queue: runs waiting (``queued``), runs holding a slot (``active``), the
        limits every process enforces for it (``limits``: those stored in the database,
        or this app's declaration when none are stored) and where they came from
        (``source``: ``"declared"`` when this app declares those limits, ``"stored"``
        when they were stored by another app's engine or an older declaration, with
        ``stored_by`` naming that app). ``queue`` None counts runs only delayed."""
        depths = {d.queue: d for d in await self.store.queue_depths()}
        stored = {s.limits.name: s for s in await self.store.list_queue_limits()}
        names = sorted({*(q for q in depths if q is not None), *self.app.queues, *stored})
        items: list[dict[str, Any]] = []
        for qname in [*names, *([None] if None in depths else [])]:
            depth = depths.get(qname)
            declared = self.app.queues.get(qname) if qname is not None else None
            kept = stored.get(qname) if qname is not None else None
            limits: dict[str, Any] | None = None
            source: str | None = None
            if kept is not None:
                limits = limits_dict(kept.limits)
                mine = declared is not None and limits_of(declared) == kept.limits
                source = "declared" if mine else "stored"
            elif declared is not None:
                limits, source = declared.to_dict(), "declared"
            items.append(
                {
                    "queue": qname,
                    "queued": depth.queued if depth else 0,
                    "active": depth.active if depth else 0,
                    "limits": limits,
                    "source": source,
                    "stored_by": None if kept is None else kept.app,
                }
            )
        return items


def limits_dict(limits: QueueLimits) -> dict[str, Any]:
    """Stored limits as ``Queue.to_dict`` shows declared ones."""
    return {
        "name": limits.name,
        "concurrency": limits.concurrency,
        "per_key": limits.per_key,
        "rate": None
        if limits.rate is None or limits.window is None
        else str(queues.Rate(limits.rate, limits.window)),
        "budget": {
            unit: str(queues.Rate(int(amount), window)) for unit, amount, window in limits.budget
        }
        or None,
        "budget_per_key": limits.budget_per_key,
    }
