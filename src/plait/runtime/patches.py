"""Patches in a code replay: ``wf.patched`` and ``wf.deprecate_patch``.

A patch marker is a step of kind ``patch`` that records that a run took the patched path.
It is no point of the delivery order (``runtime.order``): what follows it comes after what
came before it, so runs with and without the marker line up. With no marker recorded, a
run takes the patched path only where its history, on the branch that asks, ends here
(``Ledger.ahead``): an old run that older code took past this point keeps to the path it
recorded, and its replay matches.
"""

from __future__ import annotations

from plait import serde
from plait.runtime import steps
from plait.runtime.at_once import replayed
from plait.runtime.ledger import Ledger
from plait.runtime.order import NewStepHold


def patched(hold: NewStepHold, known: tuple[str, ...], key: str, patch_id: str) -> bool:
    """Whether the run at ``key`` takes the patched path; ``known``: the outcomes the
    calling task has received, the point it is at. The marker is taken at once, as a
    value is (``NewStepHold.take_at_once``): taken after a value not judged yet, it is
    written only if that value proves to be in its place."""
    ledger = hold.ledger
    if replayed(ledger, key, steps.PATCH_KIND):
        return True
    if ledger.ahead(known) is not None:
        return False
    ledger.reached[key] = known  # recorded with the marker, which changes no one's point
    hold.take_at_once(
        key,
        steps.PATCH_KIND,
        lambda step: steps.mark_patch(step, ledger.now()),
        input=serde.dumps({"patch": patch_id}),
        point=False,
    )
    return True


def deprecate(ledger: Ledger, key: str) -> None:
    """A recorded marker is reached; none is recorded."""
    replayed(ledger, key, steps.PATCH_KIND)
