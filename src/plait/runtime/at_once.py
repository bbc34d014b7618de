"""Steps a code workflow takes at once, where they are reached, with no await: a value
(``wf.now()``, ``wf.uuid()``), a published value (``wf.set_value``), tags
(``wf.set_tags``), a stream write (``wf.stream(name).write``).

Each is recorded once, when the run first gets there; a replay finds it recorded, checks
it is the same kind of step, and writes nothing again (so it never publishes an older
value, merges older tags or writes an entry twice). A new one is taken through the pass's
``NewStepHold``, which judges its place against the run's history when a new ``wf.do``
would be judged.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from plait import serde
from plait import tags as tag_rules
from plait.runtime import steps
from plait.runtime.ledger import Ledger
from plait.runtime.order import NewStepHold
from plait.serde import Limits


def value(hold: NewStepHold, key: str, make: Callable[[], Any]) -> Any:
    """A value recorded once and replayed ever after."""
    ledger = hold.ledger
    step = ledger.steps.get(key)
    if step is not None:
        ledger.reach(key)
        hold.reached_early(step)
        return serde.loads(step.output)
    made = make()
    step = hold.take_at_once(
        key, "value", lambda step: steps.record_value(step, made, ledger.now())
    )
    return serde.loads(step.output)


def set_value(hold: NewStepHold, limits: Limits, key: str, name: str, value: str | None) -> None:
    """Publish ``value`` under ``name``, checked against the engine's ``limits`` when it
    is first taken; a replay never judges a recorded value again."""
    ledger = hold.ledger
    if replayed(ledger, key, "set_value", hold):
        return
    if value is not None:
        limits.check(value, f"value {name!r}")
    hold.take_at_once(
        key,
        "set_value",
        lambda step: steps.publish_value(step, name, value, ledger.now()),
        input=serde.dumps({"key": name}),
        publishes=True,
    )


def set_tags(hold: NewStepHold, key: str, tags: dict[str, str]) -> None:
    """Merge ``tags`` into the run's tags. ``ValueError`` if the run would carry more
    than ``plait.tags.MAX_TAGS``."""
    ledger = hold.ledger
    if replayed(ledger, key, "set_tags", hold):
        return
    merged = tag_rules.merge(tag_rules.loads(ledger.run.tags), tags)
    tag_rules.limit(merged, "the run's tags")
    text = tag_rules.dumps(tags) or "{}"
    hold.take_at_once(
        key, "set_tags", lambda step: steps.record_tags(step, text, ledger.now()), input=text
    )
    ledger.run.tags = tag_rules.dumps(merged)


def stream_write(hold: NewStepHold, key: str, name: str, value: str | None) -> None:
    """Append ``value`` to the run's stream ``name``."""
    ledger = hold.ledger
    if replayed(ledger, key, "stream", hold):
        return
    hold.take_at_once(
        key,
        "stream",
        lambda step: steps.write_stream(step, name, value, ledger.now()),
        input=serde.dumps({"stream": name}),
        publishes=True,
    )


def replayed(ledger: Ledger, key: str, kind: str, hold: NewStepHold | None = None) -> bool:
    """Whether the run recorded the step ``key`` (it must be of ``kind``): a replay takes
    nothing again (a patch marker too: ``runtime.patches``, which names its markers by
    patch, not by count, and gives no ``hold`` to note one reached early)."""
    step = ledger.steps.get(key)
    if step is None:
        return False
    ledger.check_same(step, kind, None)
    if hold is not None:
        hold.reached_early(step)
    return True
