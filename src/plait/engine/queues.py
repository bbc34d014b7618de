"""Flow control: the queue fields of a new run, each checked, and how deep each queue
is."""

from __future__ import annotations

from typing import Any

from plait import queues
from plait.engine.base import EngineBase
from plait.runtime import runs
from plait.store.rows import QueueLimits
from plait.worker.admission import limits_of, merge_limits
from plait.worker.budgets import Holds, budget_holds


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
            "held_status": runs.BRAKED_START,
            "queue": qname,
            "queue_key": qkey,
            "priority": queues.check_priority(priority),
            "dedup": dkey,
            "not_before": not_before,
            "debounce_key": None if window is None else window.key,
            "debounce_until": until,
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
        ``stored_by`` naming that app), the spend in the window of a queue's budget
        (``spent``, per unit) and ``waiting`` (``"budget"`` when the budget holds its
        runs); and per key with live runs or spend in the window (``keys``): runs waiting
        and active, spend, and why its runs wait. ``queue`` None counts runs only
        delayed."""
        depths = {d.queue: d for d in await self.store.queue_depths()}
        stored_rows = await self.store.list_queue_limits()
        stored = {s.limits.name: s for s in stored_rows}
        holds = await budget_holds(
            self.store, merge_limits(stored_rows, self.app), self.clock.now()
        )
        keys: dict[str, list[dict[str, Any]]] = {}
        seen: set[tuple[str, str]] = set()
        for kd in await self.store.queue_key_depths():
            seen.add((kd.queue, kd.key))
            keys.setdefault(kd.queue, []).append(
                key_item(kd.key, kd.queued, kd.active, kd.queue, holds)
            )
        for q, k in holds.spent:
            if k is not None and (q, k) not in seen:  # spent in the window, no live run now
                keys.setdefault(q, []).append(key_item(k, 0, 0, q, holds))
        names = sorted({*(q for q in depths if q is not None), *self.app.queues, *stored})
        items: list[dict[str, Any]] = []
        for qname in [*names, *([None] if None in depths else [])]:
            depth = depths.get(qname)
            declared = self.app.queues.get(qname) if qname is not None else None
            kept = stored.get(qname) if qname is not None else None
            limits: dict[str, Any] | None = None
            source: str | None = None
            if kept is not None:
                ours = limits_of(declared) if declared is not None else None
                mine = ours is not None and ours == kept.limits
                # the declaring app shows its weights as declared (the row keeps costs)
                limits = limits_dict(ours if mine and ours is not None else kept.limits)
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
                    "spent": holds.spent.get((qname, None), {}) if qname is not None else {},
                    "waiting": "budget"
                    if qname is not None and (qname, None) in holds.held
                    else None,
                    "keys": sorted(keys.get(qname, []), key=lambda k: k["key"])
                    if qname is not None
                    else [],
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


def key_item(key: str, queued: int, active: int, queue: str, holds: Holds) -> dict[str, Any]:
    """One key of a queue as ``queue_depths`` shows it: its runs waiting and holding a
    slot, what it spent in its budgets' windows, and why its runs wait (``budget``: it,
    or its queue, spent a budget)."""
    return {
        "key": key,
        "queued": queued,
        "active": active,
        "spent": holds.spent.get((queue, key), {}),
        "waiting": "budget" if holds.holds(queue, key) else None,
    }


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
        "fair": limits.turn is not None,
        "weights": _weights(limits),
    }


def _weights(limits: QueueLimits) -> dict[str, int] | None:
    """A fair queue's weights as declared; read back from their costs when the limits
    come from the database, which keeps the costs only. A cost is ``turn // weight``, so
    above about 850 two weights may share one: the smallest is shown (1000 and 900 come
    back as declared; 998 as 997)."""
    if limits.turn is None or not limits.key_costs:
        return None
    if limits.weights:
        return dict(limits.weights)
    return {key: limits.turn // (cost + 1) + 1 for key, cost in limits.key_costs}
