"""Requests with a reply as data: the statuses a request moves through, how long a sender
may wait, and the records a refusal leaves behind.

A sender (``engine.request``) stores a request for a run and waits for its answer; the
workflow takes requests of a name in arrival order (``wf.wait_for_request``) and answers
each once (``req.reply`` / ``req.refuse``). A wait stores the JSON Schema of its schema on
its step row when it is reached, so a request sent while the workflow waits is judged at
once, wherever it arrives, without the workflow's code; one sent before is judged by the
pass that takes it. Nothing here touches a database.
"""

from __future__ import annotations

import math
from datetime import timedelta
from typing import Any, cast

from plait import approval, errors, serde
from plait.durations import parse_duration
from plait.statuses import RequestStatusName

#: waiting for the workflow to take it
SENT: RequestStatusName = "sent"
#: taken by a ``wf.wait_for_request`` step, not answered yet
TAKEN: RequestStatusName = "taken"
REPLIED: RequestStatusName = "replied"
REFUSED: RequestStatusName = "refused"
#: its sender stopped waiting before the workflow took it: no wait ever sees it
WITHDRAWN: RequestStatusName = "withdrawn"

#: the prefix of a wait's step key, and of the step key of an answer
PREFIX = "__request:"
ANSWER_PREFIX = "__reply:"

#: how long a sender waits by default, and at most (seconds)
DEFAULT_TIMEOUT = 30.0
MAX_TIMEOUT = 300.0


def check_timeout(timeout: object) -> float:
    """The sender's timeout in seconds, more than 0 and at most ``MAX_TIMEOUT``, or an
    error naming it."""
    if isinstance(timeout, bool) or not isinstance(timeout, int | float | str | timedelta):
        raise TypeError(
            f"request timeout must be seconds, a duration such as '30s' or a timedelta, "
            f"got {timeout!r}"
        )
    seconds = parse_duration(timeout, what="request timeout")
    if not math.isfinite(seconds) or seconds <= 0 or seconds > MAX_TIMEOUT:
        raise ValueError(
            f"request timeout must be more than 0 and at most {MAX_TIMEOUT:g} seconds, "
            f"got {timeout!r}"
        )
    return seconds


def wait_info(step_input: str | None) -> dict[str, Any]:
    """What a wait stored when reached: the request name and the JSON Schema (or None)."""
    info = serde.loads(step_input)
    return cast(dict[str, Any], info) if isinstance(info, dict) else {}


def invalid(problems: list[dict[str, str]]) -> str:
    """The stored refusal of a request whose data does not fit the wait's schema."""
    record = {
        "code": errors.REQUEST_INVALID,
        "message": "the data is invalid",
        "problems": problems,
    }
    return cast(str, serde.dumps(record))  # None only for None, never for a dict


def refused(reason: str) -> str:
    """The stored refusal of a request the workflow refused."""
    return cast(str, serde.dumps({"code": errors.REQUEST_REFUSED, "message": reason}))


def problems(schema: dict[str, Any] | None, data: Any) -> list[dict[str, str]]:
    """Every way ``data`` fails the wait's JSON Schema (none without one): the same
    check as an approval's."""
    return approval.problems(schema, data)


def refusal_error(run_id: str, name: str, refusal: str | None) -> errors.PlaitError:
    """What the sender of a refused request raises: ``ValidationError`` for data that
    did not fit the schema, ``RequestRefused`` with the workflow's reason otherwise."""
    record = serde.loads(refusal)
    found = cast(dict[str, Any], record) if isinstance(record, dict) else {}
    if found.get("code") == errors.REQUEST_INVALID:
        return errors.ValidationError(
            f"the data of request {name!r}",
            list(found.get("problems") or []),
            code=errors.REQUEST_INVALID,
        )
    return errors.RequestRefused(run_id, name, str(found.get("message", "refused")))


__all__ = [
    "ANSWER_PREFIX",
    "DEFAULT_TIMEOUT",
    "MAX_TIMEOUT",
    "PREFIX",
    "REFUSED",
    "REPLIED",
    "SENT",
    "TAKEN",
    "WITHDRAWN",
    "check_timeout",
    "invalid",
    "problems",
    "refusal_error",
    "refused",
    "wait_info",
]
