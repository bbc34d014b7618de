"""Holding back steps the record does not have until a replay has caught up with it.

With the code that recorded a run, every step called before the last recorded outcome is
handed back again was recorded: a step the run never recorded, called earlier, is code
that changed (a deploy). Started at once, its body could run before another branch of
the workflow reaches a step inserted before a recorded one, a ``VERSION_CONFLICT`` that
stops the run: the pass would have done work the run then never goes on from. So such
steps wait until every recorded outcome is handed back (or nothing else can go on), and
then, if one of them comes before a recorded step, it alone is reached: its conflict
stops the run and nothing else starts.
"""

from __future__ import annotations

import collections
from collections.abc import Callable, Coroutine
from typing import Any

from plait.runtime.ledger import Ledger
from plait.runtime.workflow import StepCall


class CatchUp:
    """The recorded outcomes a pass has yet to hand back, and the new steps held meanwhile."""

    def __init__(self, ledger: Ledger) -> None:
        self.ledger = ledger
        #: the recorded outcomes this pass has yet to hand back to the workflow
        self.to_replay = sum(1 for s in ledger.steps.values() if s.delivered is not None)
        #: steps the run never recorded, called while ``to_replay`` was not 0
        self.held: collections.deque[StepCall[Any]] = collections.deque()

    def holds(self, call: StepCall[Any]) -> bool:
        """Whether ``call`` waits (it is held): a step the run did not record, called
        while recorded outcomes are still to be handed back."""
        if self.to_replay and call.key not in self.ledger.steps:
            self.held.append(call)
            return True
        return False

    def handed_back(self) -> None:
        """A recorded outcome was handed back to the workflow."""
        if self.to_replay:
            self.to_replay -= 1

    def due(self, inflight: bool) -> bool:
        """Whether the held steps go on now: every recorded outcome is handed back, or
        nothing in flight can hand back more."""
        return bool(self.held) and (not self.to_replay or not inflight)

    async def release(
        self, resolve: Callable[[StepCall[Any]], Coroutine[Any, Any, None]]
    ) -> list[StepCall[Any]] | None:
        """The held steps, to start now; None when one of them came before a recorded
        step: it alone was reached (``resolve``), and the run stops with its conflict."""
        ledger = self.ledger
        calls = [call for call in self.held if not call.late]
        self.held.clear()
        # the replay goes no further without them: from now on no step is held
        self.to_replay = 0
        if ledger.ordered and ledger.unreached:
            for call in calls:
                if ledger.ahead(ledger.reached.get(call.key, ())) is not None:
                    await resolve(call)  # its step records the conflict
                    return None if ledger.conflict is not None else []
        return calls
