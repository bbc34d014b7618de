"""Approval gates: decide one, list them, read the decisions a run was sent. What a
gate admits (policies, schemas, the records a decision leaves) is ``plait.approval``'s;
what deciding does to the gate's step is ``runtime.steps``'s."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Literal, cast

from plait import approval, errors, serde
from plait.engine.base import EngineBase
from plait.errors import (
    ApprovalForbiddenError,
    ApprovalResolvedError,
    RunNotFoundError,
    RunStateError,
)
from plait.ids import check_name
from plait.records import (
    TERMINAL,
    Approval,
    ApprovalDecision,
    ApprovalStatus,
)
from plait.runtime import steps
from plait.store.convert import ts, ts_or_none
from plait.store.rows import DecisionRow, GateRow, StepRow

#: refused decisions kept per gate (the first ones, with who sent them and why): a sender
#: refused again and again does not grow the run's record past this
MAX_REFUSED_PER_GATE = 50
#: the most gates one listing reads to find those its caller may decide
_MOST_GATES_READ = 100_000


class ApprovalsMixin(EngineBase):
    """``Engine.approve``, ``list_approvals`` and ``get_decisions``."""

    async def approve(
        self,
        run_id: str,
        name: str,
        data: Any = None,
        *,
        decided_by: str | None = None,
        reader: bool = True,
    ) -> ApprovalDecision:
        """Decide approval gate ``name`` of the run with ``data``, as ``decided_by``.

        An open gate takes the decision at once if its policy admits ``decided_by`` and
        ``data`` fits its schema (else ``ApprovalForbiddenError`` /
        ``plait.ValidationError``, and the gate stays open); a gate already decided or
        past its deadline refuses it (``ApprovalResolvedError``): the decision that
        commits first wins. A decision for a gate the run has not reached is held and
        judged when it gets there (outcome ``held``). Every decision is kept, accepted
        or refused, with who sent it and when (``get_decisions``); a refused one without
        its data, and at most ``MAX_REFUSED_PER_GATE`` refused ones per gate.

        ``reader`` False says ``decided_by`` may not read the run (the HTTP API knows):
        then only an open gate whose policy names her takes a decision, and anything
        else is refused (``ApprovalForbiddenError``) with nothing stored."""
        if not isinstance(name, str) or not name:
            raise TypeError(f"approval name must be a non-empty string, got {name!r}")
        check_name(name, "approval name")
        if decided_by is not None and (not isinstance(decided_by, str) or not decided_by):
            raise TypeError(
                f"decided_by must be a user id (a non-empty string), got {decided_by!r}"
            )
        # to the microsecond, as PostgreSQL keeps it: the workflow reads the time from the
        # decision's payload and get_decisions from the stored column, the same instant
        now = round(self.clock.now(), 6)
        payload = approval.envelope(data, decided_by, now, self.limits, reader=reader)
        snapshot = await self.store.load_pass(run_id)
        if snapshot is None:
            raise RunNotFoundError(run_id)
        run = snapshot.run
        gates = sorted(
            (
                s
                for s in snapshot.steps.values()
                if s.kind == "approval"
                and approval.gate_info(s.input).get("name") == name
                # a gate the workflow gave up is not one it waits at: a decision for
                # its name is held for the next gate of that name
                and not steps.cancelled_wait(s)
            ),
            key=lambda s: s.seq,
        )
        gate = next((g for g in gates if g.status == "pending"), None)

        def row(outcome: str, reason: str | None = None, **more: Any) -> DecisionRow:
            return DecisionRow(name, payload, decided_by, now, outcome, reason, **more)

        async def refuse(code: str, message: str, found: Any = None) -> None:
            why = approval.reason(code, message, found)
            key = gate.key if gate is not None else (gates[-1].key if gates else None)
            stored = approval.without_data(decided_by, now)
            refused = DecisionRow(
                name,
                stored,
                decided_by,
                now,
                "refused",
                why,
                key=key,
                refused_cap=MAX_REFUSED_PER_GATE,
            )
            await self.store.submit_decision(run_id, refused, ())

        if not reader:
            policy = None if gate is None else approval.gate_info(gate.input).get("approvers")
            if policy is None or not approval.names(policy, decided_by):
                # nothing stored: a sender who may not read the run leaves no trace on it
                raise ApprovalForbiddenError(run_id, name, decided_by, policy or "any")
        if run.status in TERMINAL and (gate is not None or not gates):
            raise RunStateError(run_id, run.status, f"decide approval {name!r} of")
        if gate is None and gates:
            outcome = _gate_outcome(gates[-1])
            await refuse(errors.APPROVAL_RESOLVED, f"the approval was already {outcome}")
            raise ApprovalResolvedError(run_id, name, outcome)
        if gate is None:
            await self.store.submit_decision(run_id, row("held"), ())
            self._wake(run_id)
            return _decision_record(run_id, name, data, decided_by, now, "held", None, None)
        info = approval.gate_info(gate.input)
        refusal = approval.judge(
            info, run.owner, decided_by, data, run_id=run_id, name=name, reader=reader
        )
        if refusal is not None:
            await refuse(refusal.code, refusal.message, refusal.problems)
            raise refusal.error
        closed = approval.resolved("decided")
        expired = approval.resolved("expired")
        result = await self.store.submit_decision(
            run_id,
            # found closed or past its deadline, it is stored refused: under the cap too
            row(
                "accepted",
                key=gate.key,
                if_closed=closed,
                if_expired=expired,
                refused_cap=MAX_REFUSED_PER_GATE,
            ),
            steps.decide_gate(gate, payload, now),
        )
        if result in ("closed", "expired"):
            outcome = "expired" if result == "expired" else await self._closed_how(run_id, gate)
            raise ApprovalResolvedError(run_id, name, outcome)
        self._wake(run_id)
        return _decision_record(run_id, name, data, decided_by, now, "accepted", None, now)

    async def _closed_how(self, run_id: str, gate: StepRow) -> Literal["expired", "decided"]:
        for step in await self.store.get_steps(run_id):
            if step.key == gate.key:
                recorded = step.output
                output = cast(dict[str, Any], recorded) if isinstance(recorded, dict) else {}
                return "expired" if output.get("expired") else "decided"
        return "decided"

    async def list_approvals(
        self,
        *,
        status: ApprovalStatus | None = "open",
        user: str | None = None,
        limit: int = 100,
        reader: Callable[[str | None], bool] | None = None,
    ) -> list[Approval]:
        """Approval gates of live runs, oldest first: ``open`` ones (default),
        ``decided``, ``expired`` or all (None); with ``user``, only those that user may
        decide, ``reader(owner)`` saying whether she may read a run of that owner
        (default: trusted, she may). Each carries the JSON Schema its decision must
        fit."""
        if status not in (None, "open", "decided", "expired"):
            raise ValueError(f"invalid approval status {status!r}: use open, decided or expired")
        if isinstance(limit, bool) or not isinstance(limit, int) or limit < 1:
            raise ValueError(f"invalid limit: {limit!r}")
        step_status = {"open": "pending", None: None}.get(status, "succeeded")
        # the store reads gates oldest first, everyone's: the filter comes after, so read
        # on (more each time) until ``limit`` pass it or none are left, else another
        # user's hundred gates would hide this user's own
        asked = limit
        while True:
            gates = await self.store.list_gates(step_status, asked)
            found = self._approvals(gates, status, user, reader)
            if len(found) >= limit or len(gates) < asked or asked >= _MOST_GATES_READ:
                return found[:limit]
            asked = min(asked * 4, _MOST_GATES_READ)

    def _approvals(
        self,
        gates: list[GateRow],
        status: ApprovalStatus | None,
        user: str | None,
        reader: Callable[[str | None], bool] | None,
    ) -> list[Approval]:
        found: list[Approval] = []
        for gate in gates:
            info = approval.gate_info(gate.step.input)
            state = "open" if gate.step.status == "pending" else _gate_outcome(gate.step)
            if status is not None and state != status:
                continue
            policy = info.get("approvers", "any")
            may_read = True if reader is None else reader(gate.owner)
            if user is not None and not approval.may_decide(
                policy, gate.owner, user, reader=may_read
            ):
                continue
            expires = info.get("expires_at")
            found.append(
                Approval(
                    run_id=gate.step.run_id,
                    workflow=gate.workflow,
                    name=info.get("name", gate.step.key.removeprefix(approval.PREFIX)),
                    key=gate.step.key,
                    status=state,
                    schema=info.get("schema"),
                    approvers=policy,
                    owner=gate.owner,
                    opened_at=ts(gate.step.created_at),
                    expires_at=ts_or_none(expires),
                )
            )
        return found

    async def get_decisions(self, run_id: str) -> list[ApprovalDecision]:
        """Every decision sent to the run's approval gates, oldest first: accepted,
        refused (with why) or still held, with who sent it and when."""
        await self.get_run(run_id)
        found: list[ApprovalDecision] = []
        for item in await self.store.get_decisions(run_id):
            payload: dict[str, Any] = serde.loads(item["payload"]) or {}
            found.append(
                _decision_record(
                    run_id,
                    item["name"].removeprefix(approval.PREFIX),
                    payload.get("data"),
                    item["decided_by"],
                    item["decided_at"],
                    item["outcome"],
                    serde.loads(item["reason"]),
                    item["judged_at"],
                )
            )
        return found


def _gate_outcome(step: StepRow) -> Literal["expired", "decided"]:
    output = serde.loads(step.output)
    expired = isinstance(output, dict) and cast(dict[str, Any], output).get("expired")
    return "expired" if expired else "decided"


def _decision_record(
    run_id: str,
    name: str,
    data: Any,
    decided_by: str | None,
    decided_at: float,
    outcome: str,
    reason: Any,
    judged_at: float | None,
) -> ApprovalDecision:
    return ApprovalDecision(
        run_id=run_id,
        name=name,
        data=data,
        decided_by=decided_by,
        decided_at=ts(decided_at),
        outcome=outcome,
        reason=reason,
        judged_at=ts_or_none(judged_at),
    )
