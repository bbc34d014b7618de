"""Which queues a worker admits through: a declared queue and its flat form agree on
whether anything holds its runs back, and ``merge_limits`` keeps only those."""

from __future__ import annotations

import plait
from plait.store.rows import QueueLimits, StoredQueueLimits
from plait.worker.admission import limits_of, merge_limits


def test_a_queue_and_its_flat_limits_agree_on_being_limited() -> None:
    app = plait.App("limits")
    queues = [
        app.queue("open"),
        app.queue("narrow", concurrency=2),
        app.queue("keyed", per_key=1),
        app.queue("paced", rate="5/s"),
        app.queue("fair", fair=True),
        app.queue("spend", budget={"tokens": "1000/10s"}),
    ]
    assert [q.limited for q in queues] == [False, True, True, True, True, True]
    assert [limits_of(q).limited for q in queues] == [q.limited for q in queues]


def test_merge_keeps_limited_queues_stored_or_declared() -> None:
    app = plait.App("merge")
    app.queue("declared", concurrency=1)
    app.queue("plain")
    stored = [
        StoredQueueLimits(QueueLimits("elsewhere", per_key=2), "other-app", 0.0),
        StoredQueueLimits(QueueLimits("cleared"), "other-app", 0.0),
    ]
    assert [q.name for q in merge_limits(stored, app)] == ["declared", "elsewhere"]
