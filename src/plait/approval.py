"""Approval gates as data: who may decide one, whether a decision's data fits, and the
records a decision leaves behind.

A gate (``wf.approval``) stores what it needs to judge a decision on its step row when
it is first reached: its name, the JSON Schema of its schema, its approver policy and its
deadline. So a decision can be judged wherever it arrives (the engine, the HTTP server,
the CLI), without the workflow's code, and the pass judges a decision that arrived before
the gate with the same rules. Nothing here touches a database.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any, cast

from plait import errors, serde

#: approver policies by name; a list of user ids is the fourth kind
POLICIES = ("any", "owner", "not_owner")
#: the prefix of a gate's step key, and of the name its decisions are stored under
PREFIX = "__approval:"

Policy = str | list[str]


def check_policy(approvers: object, name: str) -> Policy:
    """The policy as stored, or ``ValueError`` naming the gate."""
    if isinstance(approvers, str):
        if approvers in POLICIES:
            return approvers
        raise ValueError(
            f"approval {name!r}: approvers must be one of {', '.join(POLICIES)} "
            f"or a list of user ids, got {approvers!r}"
        )
    if isinstance(approvers, Sequence) and approvers:
        users: list[object] = list(cast(Sequence[object], approvers))
        if all(isinstance(u, str) and u for u in users):
            return cast(list[str], users)
    raise ValueError(
        f"approval {name!r}: approvers must be one of {', '.join(POLICIES)} "
        f"or a non-empty list of user ids, got {approvers!r}"
    )


def may_decide(
    approvers: Policy, owner: str | None, user: str | None, *, reader: bool = True
) -> bool:
    """Whether ``user`` may decide a gate of a run owned by ``owner``.

    A gate is decided by someone who may read its run (``reader``), unless its policy
    names user ids: ``any`` admits every reader, ``owner`` the owner alone, ``not_owner``
    (four eyes) every reader but the owner, and a list exactly the users it names,
    whether they may read the run or not. Trusted code (the engine, the CLI) vouches
    for its decider, so ``reader`` is True unless the HTTP API found the caller may not
    read the run. ``owner`` and ``not_owner`` need a known decider: four eyes mean two
    named people."""
    if approvers == "any":
        return reader
    if approvers == "owner":
        return user is not None and owner is not None and user == owner
    if approvers == "not_owner":
        return reader and user is not None and user != owner
    return user is not None and user in approvers


def names(approvers: object, user: str | None) -> bool:
    """Whether the policy names ``user`` (a list of user ids that holds it): the one way
    a user who may not read a run may still decide its gate."""
    return user is not None and isinstance(approvers, list) and user in approvers


def problems(schema: dict[str, Any] | None, data: Any) -> list[dict[str, str]]:
    """Every way ``data`` fails the gate's JSON Schema (none when it has no schema)."""
    if schema is None:
        return []
    import jsonschema  # only here: it costs ~40 ms to import, and most engines never decide

    validator = jsonschema.Draft202012Validator(schema)
    found: list[dict[str, str]] = []
    # the stubs type a deprecated second form of ``iter_errors`` with an untyped parameter
    errors: list[jsonschema.ValidationError] = list(
        validator.iter_errors(data)  # pyright: ignore[reportUnknownMemberType]
    )
    for error in sorted(errors, key=lambda e: list(e.absolute_path)):
        path = [str(part) for part in error.absolute_path]
        missing = _missing(error)
        if missing is not None:
            path.append(missing)  # the field that is missing, as pydantic names it
        found.append({"field": ".".join(path), "message": error.message})
    return found


def _missing(error: Any) -> str | None:
    """The property a ``required`` error is about (its message quotes it), or None."""
    names: object = error.validator_value
    instance: object = error.instance
    if error.validator != "required" or not isinstance(instance, dict):
        return None
    if not isinstance(names, list):
        return None
    present = cast(dict[object, object], instance)
    return next(
        (
            name
            for name in cast(list[object], names)
            if isinstance(name, str)
            and name not in present
            and error.message.startswith(repr(name))
        ),
        None,
    )


def gate_info(step_input: str | None) -> dict[str, Any]:
    """What a gate stored when reached: name, schema, approvers, expires_at."""
    info = serde.loads(step_input)
    return cast(dict[str, Any], info) if isinstance(info, dict) else {}


def envelope(
    data: Any,
    decided_by: str | None,
    decided_at: float,
    limits: serde.Limits | None = None,
    *,
    reader: bool = True,
) -> str:
    """A decision as its stored message, which the pass reads back. Its data comes from
    outside, like an event's payload, so it is held to ``limits``. ``reader`` False
    (the sender may not read the run: the policy names her) is kept, so a pass judges
    the decision as the engine would have."""
    serde.dumps(data, what="the data of the decision", limits=limits)
    record: dict[str, Any] = {"data": data, "decided_by": decided_by, "decided_at": decided_at}
    if not reader:
        record["reader"] = False
    text = serde.dumps(record, what="the data of the decision")
    return cast(str, text)  # None only for None, never for a dict


def without_data(decided_by: str | None, decided_at: float) -> str:
    """The stored message of a refused decision: who sent it and when, never its data
    (a refused sender must not grow the run by what she sends)."""
    text = serde.dumps({"data": None, "decided_by": decided_by, "decided_at": decided_at})
    return cast(str, text)


@dataclasses.dataclass(frozen=True, slots=True)
class Refusal:
    """Why a decision is refused: its ``code`` and ``message`` (with the data's
    ``problems``, for data that does not fit), and the error a caller deciding the gate
    at once raises for it."""

    code: str
    message: str
    error: errors.PlaitError
    problems: list[dict[str, str]] | None = None

    def reason(self) -> str:
        """The refusal as stored with the decision."""
        return reason(self.code, self.message, self.problems)


def judge(
    info: dict[str, Any],
    owner: str | None,
    user: str | None,
    data: Any,
    *,
    run_id: str,
    name: str,
    reader: bool = True,
) -> Refusal | None:
    """Why a decision on gate ``name`` of run ``run_id`` (owned by ``owner``) is refused,
    or None to take it: the gate's approver policy must admit ``user``, and ``data``
    must fit the gate's JSON Schema (``info`` is what the gate stored, ``gate_info``).
    ``reader``: whether ``user`` may read the run (``may_decide``).
    The same rules judge a decision the engine takes at once and one held until the run
    reaches its gate."""
    policy = info.get("approvers", "any")
    if not may_decide(policy, owner, user, reader=reader):
        forbidden = errors.ApprovalForbiddenError(run_id, name, user, policy)
        return Refusal(errors.APPROVAL_FORBIDDEN, str(forbidden), forbidden)
    found = problems(info.get("schema"), data)
    if found:
        invalid = errors.ValidationError(f"the decision on approval {name!r}", found)
        return Refusal(errors.APPROVAL_INVALID, INVALID, invalid, found)
    return None


#: the message of a refusal for data that does not fit the gate's schema
INVALID = "the data is invalid"


def resolved(outcome: str) -> str:
    """The stored refusal of a decision for a gate already ``outcome`` (decided or
    expired)."""
    return reason(errors.APPROVAL_RESOLVED, f"the approval was already {outcome}")


def reason(code: str, message: str, found: list[dict[str, str]] | None = None) -> str:
    """Why a decision was refused, as stored with it: which fields did not fit, never
    how (a schema's message quotes the value it refused, and a refused decision stores
    none of its data; its sender was told the whole of it)."""
    record: dict[str, Any] = {"code": code, "message": message}
    if found:
        record["problems"] = [
            {"field": problem["field"][:_MOST_FIELD], "message": _NOT_FITTING} for problem in found
        ]
    return cast(str, serde.dumps(record))  # None only for None, never for a dict


#: a refused field as stored: the message the sender got may quote its data
_NOT_FITTING = "does not fit the gate's schema"
#: the longest field path stored (a path may hold keys the sender made up)
_MOST_FIELD = 200


__all__ = [
    "INVALID",
    "POLICIES",
    "PREFIX",
    "Policy",
    "Refusal",
    "check_policy",
    "envelope",
    "gate_info",
    "judge",
    "may_decide",
    "names",
    "problems",
    "reason",
    "resolved",
    "without_data",
]
