"""Flow control: the queue fields of a new run, each checked, and how deep each queue
is."""

from __future__ import annotations

from typing import Any

from plait import queues
from plait.engine.base import EngineBase
from plait.runtime import runs


class QueuesMixin(EngineBase):
    """``Engine.queue_depths`` and ``queue_keys``, and the flow options ``start``
    checks."""

    def _flow_options(
        self,
        name: str,
        queue: object,
        key: object,
        priority: object,
        dedup: object,
        delay: object,
        start_at: object,
        *,
        debounce: object = None,
        debounce_key: object = None,
        debounce_max: object = None,
        dedup_policy: object = "skip",
    ) -> dict[str, Any]:
        """The queue fields of a new run (``NewRun``'s), each checked and named when
        wrong; ``dedup_policy`` is checked against them (it is not a field: it decides
        which write creates the run)."""
        wdef = self.app.workflows.get(name)
        if queue is None and wdef is not None:
            queue = wdef.queue
        qname = None if queue is None else queues.check_queue_name(queue)
        qkey = None if key is None else queues.check_text(key, "key")
        if qkey is not None and qname is None:
            raise ValueError(f"key={qkey!r} needs a queue: the key counts against per_key")
        if qkey is not None and qname is not None:
            queues.check_key_in_queue(qkey, qname)
        now = self.clock.now()
        not_before = queues.start_time(delay, start_at, now)
        dkey = None if dedup is None else queues.check_text(dedup, "dedup")
        policy = queues.check_dedup_policy(dedup_policy, dkey)
        window = queues.check_debounce(debounce, debounce_key, debounce_max, name)
        until = None
        if window is not None:
            if delay is not None or start_at is not None:
                raise ValueError("debounce sets the start time: give debounce or delay / start_at")
            if policy == "replace":
                raise ValueError("dedup_policy='replace' does not combine with debounce")
            not_before = now + window.seconds
            until = None if window.most is None else now + window.most
        queued = qname is not None or not_before is not None
        return {
            "status": runs.initial_status(queued),
            "queue": qname,
            "queue_key": qkey,
            "priority": queues.check_priority(priority),
            "dedup": dkey,
            "not_before": not_before,
            "debounce_key": None if window is None else window.key,
            "debounce_until": until,
        }

    async def queue_depths(self) -> list[dict[str, Any]]:
        """Per queue: runs waiting (``queued``), runs holding a slot (``active``) and the
        limits this app declares for it. ``queue`` None counts runs only delayed."""
        depths = {d.queue: d for d in await self.store.queue_depths()}
        names = sorted({*(q for q in depths if q is not None), *self.app.queues})
        items: list[dict[str, Any]] = []
        for qname in [*names, *([None] if None in depths else [])]:
            depth = depths.get(qname)
            declared = self.app.queues.get(qname) if qname is not None else None
            items.append(
                {
                    "queue": qname,
                    "queued": depth.queued if depth else 0,
                    "active": depth.active if depth else 0,
                    "limits": declared.to_dict() if declared else None,
                }
            )
        return items

    async def queue_keys(self, queue: str) -> list[dict[str, Any]]:
        """Per key of ``queue`` with runs waiting (``queued``) or holding a slot
        (``active``); ``key`` None for runs without one. In a fair queue ``ahead`` is how
        many turns of a weight-1 key the key has been served past the queue's clock (0:
        it is next in its turn; None: no turn kept, as a key that arrives is at the clock),
        so the key with the least ``ahead`` and runs waiting is admitted first."""
        qname = queues.check_queue_name(queue)
        return [
            {
                "key": row.key,
                "queued": row.queued,
                "active": row.active,
                "ahead": None if row.ahead is None else round(row.ahead / queues.TURN, 2),
            }
            for row in await self.store.queue_keys(qname)
        ]
