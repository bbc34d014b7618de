"""A dry pass: a run replayed on the code deployed here, to tell whether that code still
follows what the run recorded, with no step body run and nothing written (``Engine.check``,
``plait check``).

It is the real pass (``runtime.replay.CodeReplay`` over a ``Ledger`` and a ``Driver``) in
dry mode, so that a check and a pass cannot drift apart: recorded outcomes are resolved as
a pass resolves them (a timer that is due fires, an event that was sent is taken), and
whatever would start something pauses instead: an attempt, a job, a child run, and so
every new step. The ledger keeps its writes to itself (``finish`` commits nothing) and the
host refuses every commit: a write in a dry pass is a bug, and it fails the check loudly.
The rule that a new step may not come before a recorded one holds on every version
(``Ledger.check_new``).

A run diverges at the first of:

* a conflict the ledger finds: a recorded step the code now asks for with another kind,
  function or input (``Ledger.check_same``), or a new step reached while recorded steps
  of its branch are not reached yet (``Ledger.check_new``);
* a removed step: a recorded step the code did not reach though it should have by now:
  any, once the code has ended or waits only on new steps; while it waits on recorded
  steps (an event, a timer, an attempt in flight), one the run reached before them.

An error the workflow's own code raises is no divergence when every recorded step was
reached before it: the run ends as its recorded history has it end (a step that failed,
raised again), on the old code as on the new. Raised before a recorded step, it is that
step's removal, and the error is named in the reason.
"""

from __future__ import annotations

from collections.abc import Awaitable, Sequence
from typing import Any, get_args

from plait import serde
from plait.catalog import Catalog
from plait.clock import Clock
from plait.context import StreamSink
from plait.records import TERMINAL, CheckResult, Run, step_label
from plait.runtime.control_flow import PassAborted, SuspendSignal
from plait.runtime.host import Host
from plait.runtime.ledger import Ledger, PassResult
from plait.runtime.replay import CodeReplay
from plait.serde import Limits
from plait.statuses import STEP_IN_FLIGHT, RunStatusName
from plait.store.ops import Batch, EndRun
from plait.store.rows import PassSnapshot, Spend, StepRow

#: the runs a check expects not to fail: live ones, and completed ones (include_ended)
_GOES_ON = frozenset(s for s in get_args(RunStatusName) if s not in TERMINAL) | {"completed"}

#: the lease owner a dry pass names in the ops it never writes
DRY_OWNER = "plait-check"


class DryHost:
    """The host of dry passes: the definitions, limits and clock of the process that
    checks, and no way to write or to touch another process's work."""

    telemetry = None
    stopping = False

    def __init__(self, catalog: Catalog, limits: Limits, clock: Clock) -> None:
        self.catalog = catalog
        self.limits = limits
        self.clock = clock

    def cancelling(self, run_id: str) -> bool:
        return False

    def braked(self, workflow: str, queue: str | None) -> bool:
        return False

    def queue_braked(self, queue: str) -> bool:
        return False

    def commit(self, batch: Batch, /) -> Awaitable[bool]:
        raise AssertionError(f"a dry pass of run {batch.run_id!r} tried to commit a write")

    def ended_elsewhere(self, run_id: str) -> None:
        raise AssertionError(f"a dry pass of run {run_id!r} committed nothing to be refused")

    def giving_back(self, run_id: str) -> None:
        pass

    @property
    def streams(self) -> StreamSink:
        raise AssertionError("a dry pass ran a step body that could write to a stream")

    def published(self, run_id: str) -> None:
        raise AssertionError(f"a dry pass of run {run_id!r} published a value")

    def sent_event(self, run_id: str) -> None:
        raise AssertionError(f"a dry pass sent an event to run {run_id!r}")

    async def keep_lease(self, run_id: str, key: str | None = None) -> bool:
        raise AssertionError(f"a dry pass of run {run_id!r} was about to start a step body")

    async def read_run(self, run_id: str) -> Run | None:
        raise AssertionError(f"a dry pass read run {run_id!r} to send it an event")

    async def read_state(self, run_id: str) -> dict[str, Any]:
        raise AssertionError(f"a dry pass of run {run_id!r} ran a graph node")

    async def record_spend(self, spend: Sequence[Spend]) -> None:
        raise AssertionError("a dry pass ran a step body that reported spend")

    async def lineage_queues(self, run_id: str) -> frozenset[str]:
        raise AssertionError(f"a dry pass under run {run_id!r} started a child run")


class DryLedger(Ledger):
    """The ledger of a dry pass: it notes where the replay diverged and how the run would
    end, and its last commit commits nothing."""

    dry = True

    def __init__(self, host: Host, snapshot: PassSnapshot) -> None:
        super().__init__(host, snapshot, DRY_OWNER)
        self.foreign_version = True  # it is checked against the code deployed here
        #: the steps the run had recorded before this pass
        self.recorded = tuple(sorted(self.steps.values(), key=lambda s: s.seq))
        #: (key, kind, reason) of the first conflict
        self.diverged: tuple[str, str, str] | None = None
        #: how the pass would end the run (None: it would wait)
        self.ended: EndRun | None = None

    def check_same(self, step: StepRow, *args: Any, **kwargs: Any) -> None:
        try:
            super().check_same(step, *args, **kwargs)
        except SuspendSignal:
            self._diverged(step.key, step.kind)
            raise

    def new_step(self, key: str, name: str, kind: str, **options: Any) -> StepRow:
        try:
            return super().new_step(key, name, kind, **options)
        except SuspendSignal:
            self._diverged(key, kind)
            raise

    def conflict_at(self, key: str) -> None:
        self._diverged(key, self.steps[key].kind)

    def undecodable(self, step: StepRow, error: Exception) -> None:
        if self.diverged is None:
            reason = f"the recorded result of step {step.key!r} no longer decodes: {error}"
            self.diverged = (step.key, step.kind, reason)

    def _diverged(self, key: str, kind: str) -> None:
        if self.diverged is None and self.conflict is not None:
            self.diverged = (key, kind, self.conflict)

    async def continued_deadline(self, end: EndRun) -> EndRun:
        return end  # a dry pass commits nothing and reads no other run

    def end(self, end: EndRun) -> None:
        self.ended = end
        super().end(end)

    async def finish(self, status: RunStatusName) -> PassResult:
        self.ops.clear()
        return PassResult(status)


async def check_run(host: DryHost, snapshot: PassSnapshot) -> CheckResult:
    """Replay the run in ``snapshot`` dry on the code a pass of it would take here."""
    run = snapshot.run
    wdef, _foreign = host.catalog.workflow_for(run.workflow, run.version)
    if wdef is None:
        registered = ", ".join(repr(n) for n in sorted(host.catalog.app.workflows)) or "none"
        reason = (
            f"workflow {run.workflow!r} is not registered in this app (it registers "
            f"{registered}): the run cannot go on on this code"
        )
        return CheckResult(run.id, run.workflow, False, reason=reason)
    ledger = DryLedger(host, snapshot)
    try:
        await CodeReplay(host, snapshot, DRY_OWNER, ledger).execute(wdef)
    except PassAborted as exc:
        raise exc.cause from exc  # only a write aborts a dry pass: a bug, said loudly
    if ledger.diverged is not None:
        key, kind, reason = ledger.diverged
        return CheckResult(run.id, run.workflow, False, key, step_label(key, kind), reason)
    if ledger.conflict is not None:
        return CheckResult(run.id, run.workflow, False, reason=ledger.conflict)
    removed = _removed(ledger)
    if removed is not None:
        step, waits_at = removed
        return CheckResult(
            run.id,
            run.workflow,
            False,
            step.key,
            step_label(step.key, step.kind),
            _removed_reason(step, waits_at, ledger.ended),
        )
    ended = ledger.ended
    if ended is not None and ended.status == "failed" and run.status in _GOES_ON:
        # on the recorded outcomes alone (no new step body runs here) the code now fails a
        # run that its history has going on or completed: an error the deploy brings (a
        # run that ended otherwise, cancelled say, may fail on its cut steps, as it did)
        record: dict[str, Any] = serde.loads(ended.error) if ended.error else {}
        message = record.get("message") or record.get("type") or "an error"
        return CheckResult(
            run.id,
            run.workflow,
            False,
            reason=f"the workflow code now fails the run after its recorded steps: {message}",
        )
    return CheckResult(run.id, run.workflow, True)


def _removed(ledger: DryLedger) -> tuple[StepRow, StepRow | None] | None:
    """The first recorded step the code did not reach though it should have by now, and
    the recorded step the code waits at instead (None: it ended, or waits on new steps
    only). Any recorded step, once the code has ended or waits on new steps only; while
    it waits on recorded steps, one the run reached before the last of them (recorded
    outcomes are handed back in the order the run first saw them, so the code reaches
    recorded steps in the order the run did; one reached after them may still come),
    and one whose outcome the workflow was handed, wherever the run reached it: every
    such outcome is handed back before the pass waits, so code that still takes the
    step has taken it by then (a branch that goes on while another waits). A step's
    ``on_error`` handler is reached with its step."""
    unreached, steps = ledger.unreached, ledger.steps
    waits = [
        s
        for s in ledger.recorded
        if s.key not in unreached and steps[s.key].status in STEP_IN_FLIGHT
    ]
    last = waits[-1] if waits else None
    for step in ledger.recorded:
        if step.key not in unreached:
            continue
        if step.kind == "on_error" and step.key.removesuffix(":on_error") not in unreached:
            continue
        if last is not None and step.seq >= last.seq and step.delivered is None:
            continue  # reached after the steps the code waits at: it may still come
        return step, last
    return None


def _removed_reason(step: StepRow, waits_at: StepRow | None, ended: EndRun | None) -> str:
    what = f"{step.kind} {step.function!r}" if step.function else step.kind
    if waits_at is not None:
        how = f"reaches step {waits_at.key!r} without it"
    elif ended is None:
        how = "goes on to new steps without it"
    elif ended.status == "completed":
        how = "returns before reaching it"
    else:
        record: dict[str, Any] = serde.loads(ended.error) if ended.error else {}
        message = record.get("message")
        verb = "suspends" if ended.status == "suspended" else "fails"
        how = f"{verb} before reaching it ({message})" if message else f"{verb} before reaching it"
    return f"the run recorded step {step.key!r} ({what}) but the workflow code now {how}"
