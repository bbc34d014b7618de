"""Approval gates in a code replay: a gate reached, the decisions held for it judged, its
deadline, and the decision the workflow sees; and what a wait (a gate, an event wait)
found, which it takes only when its outcome is delivered.

A gate (``wf.approval``) is a step that stays open until a decision its approver policy
and schema accept, or until its deadline. A decision sent before the run reached the
gate is held; the pass judges it when the gate's outcome reaches the workflow (the
delivery order's ``_take``), with the same rules as one the engine takes at once
(``approval.judge``), and then against the workflow's own schema. The step's status
changes are the step state machine's (``steps.open_gate``, ``decide_gate``,
``expire_gate``, ``reopen_gate``).
"""

from __future__ import annotations

import dataclasses
from datetime import UTC, datetime
from typing import Any

import pydantic

from plait import approval, errors, serde
from plait.errors import StepError
from plait.records import Decision
from plait.runtime import steps
from plait.runtime.host import Host
from plait.runtime.ledger import Ledger
from plait.store.ops import TakeDecision
from plait.store.rows import EventRow, RequestRow, StepRow


@dataclasses.dataclass(frozen=True, slots=True)
class Gate:
    """What judging a gate's held decisions needs beside them (its schema may be None)."""

    schema: type[pydantic.BaseModel] | None


@dataclasses.dataclass(frozen=True, slots=True)
class Found:
    """What a wait returns when it finds what it waits for: an event for a wait of
    ``name``, the decisions held for a gate (``gate`` set), or a request (``request``
    set, with its ``data`` as the wait's schema made it), not taken yet."""

    name: str
    events: tuple[EventRow, ...]
    gate: Gate | None = None
    request: RequestRow | None = None
    data: Any = None


class Gates:
    """The approval gates of one pass."""

    def __init__(self, ledger: Ledger, host: Host) -> None:
        self.ledger = ledger
        self.host = host

    async def approval(
        self,
        key: str,
        name: str,
        schema: type[pydantic.BaseModel] | None,
        expires: float | None,
        approvers: approval.Policy,
    ) -> Decision[Any] | Found:
        """A gate: closed until a decision the policy and the schema accept, or until
        its deadline. Decisions held for it (sent before the run got here) are judged
        when its outcome reaches the workflow (``_take``); one accepted on arrival is
        checked against the workflow's own schema."""
        ledger = self.ledger
        step = ledger.steps.get(key)
        now = ledger.now()
        if step is None:
            expires_at = None if expires is None else now + expires
            info = {
                "name": name,
                "schema": schema.model_json_schema() if schema is not None else None,
                "approvers": approvers,
                "expires_at": expires_at,
            }
            step = ledger.new_step(key, key, "approval", input=serde.dumps(info))
            ledger.add(steps.open_gate(step, ledger.owner, expires_at, now))
        else:
            ledger.check_same(step, "approval", None)
            raise_if_cancelled(step)
        if step.status == "succeeded":
            decided: dict[str, Any] = serde.loads(step.output) or {}
            if decided.get("expired"):
                self._refuse_held(key, name, "expired")
                return Decision(name, True)
            try:
                decision = _decision(name, schema, decided)
            except pydantic.ValidationError as exc:
                why = _invalid(exc)
                ledger.add([TakeDecision(key, "refused", why)])
                ledger.add(steps.reopen_gate(step, ledger.owner, now))
            else:
                self._refuse_held(key, name, "decided")
                return decision
        held = self._held(name)
        if held:
            return Found(name, tuple(held), Gate(schema))  # judged when delivered (``_take``)
        if self._expire(step, now):
            return Decision(name, True)
        raise ledger.pause(key, step.wake_at)

    def decide(
        self,
        step: StepRow,
        name: str,
        found: tuple[EventRow, ...],
        schema: type[pydantic.BaseModel] | None,
    ) -> Decision[Any] | None:
        """Judge the decisions held for a gate, oldest first: the first one accepted
        decides it, and those held after it find it decided. With none accepted, the
        gate expires if its deadline has passed, else it waits on (None)."""
        ledger, key, now = self.ledger, step.key, self.ledger.now()
        held = list(found)
        for at, event in enumerate(held):
            payload: dict[str, Any] = serde.loads(event.payload) or {}
            refusal = self._judge(step, name, schema, payload)
            if refusal is not None:
                ledger.add([TakeDecision(key, "refused", refusal, event.id)])
                continue
            ledger.add(steps.decide_gate(step, serde.dumps(payload), now))
            ledger.add([TakeDecision(key, "accepted", None, event.id)])
            # those held after it find the gate decided (the run may end in this pass,
            # with no later one to refuse them)
            self._refuse(key, held[at + 1 :], "decided")
            return _decision(name, schema, payload)
        if self._expire(step, now):
            return Decision(name, True)
        return None

    def _expire(self, step: StepRow, now: float) -> bool:
        """Expire the gate if its deadline has passed. The deadline is a durable timer
        like a sleep's, so its firing is told to the worker's log the same way."""
        expired = steps.expire_gate(step, now)
        if expired is None:
            return False
        self.ledger.add(expired)
        if self.host.telemetry is not None:
            self.host.telemetry.timer_fired(self.ledger.run.id, step.key, "approval expiry of")
        return True

    def _held(self, name: str) -> list[EventRow]:
        """The decisions held for gate ``name``, oldest first, taken off the snapshot."""
        wanted = approval.PREFIX + name
        found = [e for e in self.ledger.events if e.name == wanted]
        for event in found:
            self.ledger.events.remove(event)
        return found

    def _refuse_held(self, key: str, name: str, outcome: str) -> None:
        """Decisions still held for a gate that closed meanwhile are refused, not kept."""
        self._refuse(key, self._held(name), outcome)

    def _refuse(self, key: str, held: list[EventRow], outcome: str) -> None:
        if held:
            why = approval.resolved(outcome)
            self.ledger.add([TakeDecision(key, "refused", why, e.id) for e in held])

    def _judge(
        self,
        step: StepRow,
        name: str,
        schema: type[pydantic.BaseModel] | None,
        payload: dict[str, Any],
    ) -> str | None:
        """Why a held decision is refused (its reason record), or None to accept it:
        the gate's rules (``approval.judge``), then the workflow's own schema."""
        run = self.ledger.run
        refusal = approval.judge(
            approval.gate_info(step.input),
            run.owner,
            payload.get("decided_by"),
            payload.get("data"),
            run_id=run.id,
            name=name,
            reader=payload.get("reader", True) is not False,
        )
        if refusal is not None:
            return refusal.reason()
        if schema is not None:
            try:
                schema.model_validate(payload.get("data"))
            except pydantic.ValidationError as exc:
                return _invalid(exc)
        return None


def raise_if_cancelled(step: StepRow) -> None:
    """A wait the workflow cancelled on an earlier pass (see
    ``CodeReplay._close_abandoned``) ends
    the same way on this one: the workflow, which cancels it again before its outcome
    comes, never sees this."""
    if steps.cancelled_wait(step):
        raise StepError(step.key, serde.loads(step.error) or {})


def _decision(
    name: str, schema: type[pydantic.BaseModel] | None, decided: dict[str, Any]
) -> Decision[Any]:
    """The decision the workflow sees; ``pydantic.ValidationError`` if its data does not
    fit the workflow's schema."""
    data = decided.get("data")
    if schema is not None:
        data = schema.model_validate(data)
    at = decided.get("decided_at")
    return Decision(
        name,
        False,
        data,
        decided.get("decided_by"),
        None if at is None else datetime.fromtimestamp(float(at), tz=UTC),
    )


def _invalid(exc: pydantic.ValidationError) -> str:
    found = [
        {"field": ".".join(str(p) for p in err.get("loc", ())), "message": err.get("msg", "")}
        for err in exc.errors(include_url=False)
    ]
    return approval.reason(errors.APPROVAL_INVALID, approval.INVALID, found)
