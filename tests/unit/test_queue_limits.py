"""Which queues a worker admits through: a declared queue and its flat form agree on
whether anything holds its runs back, and ``merge_limits`` keeps only those; stored limits
read back as they were declared."""

from __future__ import annotations

import json

import plait
from plait.engine.queues import limits_dict
from plait.store.convert import limits_params, stored_limits
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


def test_stored_fair_limits_keep_two_elements_and_show_weights_from_costs() -> None:
    """A fair queue's row holds its turn and costs only, the form every plait of a rolling
    deploy reads; a weight is shown from its cost as the smallest weight of that cost, so
    round weights near the maximum come back as declared. A row with a third element (the
    weights, as some versions wrote) is read too."""
    limits = limits_of(plait.App("w").queue("q", fair=True, weights={"big": 1000, "b": 3}))
    params = limits_params(limits, "w", 1.0)
    assert len(json.loads(str(params[7]))) == 2
    kept = stored_limits(params).limits
    assert kept == limits and kept.weights == ()
    assert limits_dict(kept)["weights"] == {"b": 3, "big": 1000}
    assert limits_dict(limits)["weights"] == {"b": 3, "big": 1000}
    near = limits_of(plait.App("w").queue("q", fair=True, weights={"x": 998, "y": 900}))
    assert limits_dict(stored_limits(limits_params(near, "w", 1.0)).limits)["weights"] == {
        "x": 997,
        "y": 900,
    }
    wider = json.dumps([limits.turn, [list(c) for c in limits.key_costs], [["big", 1000]]])
    read = stored_limits((*params[:7], wider, *params[8:])).limits
    assert read.key_costs == limits.key_costs and read.weights == (("big", 1000),)
