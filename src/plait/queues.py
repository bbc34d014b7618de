"""Queues: how much of a kind of work may run at once, and how fast it may start.

A queue is a name with limits. Runs started with ``queue=`` (or of a workflow declared
with one) wait as ``queued`` until a worker admits them; job steps of a function
declared with ``queue=`` wait as jobs until a worker claims them. Admission is the claim
itself: one conditional write that counts what the queue has active and takes only what
fits, so the limits hold across every process on the database with no coordinator. This
module only describes queues and checks what users write; the stores do the counting.
"""

from __future__ import annotations

import dataclasses
import math
import re
from collections.abc import Mapping
from datetime import datetime
from typing import Any, cast

from plait.durations import parse_duration
from plait.ids import NAME_FORBIDDEN, check_name, shown

#: the window of each rate unit, in seconds
_RATE_UNITS = {"s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}
_RATE = re.compile(r"^\s*(\d+)\s*/\s*(\d*)\s*([smhd])\s*$")
#: priorities are stored as 32-bit integers on both stores
PRIORITY_RANGE = (-(2**31), 2**31 - 1)
#: the longest ``key`` or ``dedup`` of a start, in characters: room for an id or two of the
#: caller's own, and short enough for every store's indexes (PostgreSQL's take at most
#: about 2.7 KB a row, and a character may take 4 bytes)
MAX_KEY = 512
#: the most UTF-8 bytes a queue's name and a run's ``key`` take together: PostgreSQL
#: indexes the two in one row of at most 2,704 bytes. Room for any key of ``MAX_KEY``
#: characters in a queue with a name of up to 200 ASCII characters.
MAX_QUEUE_AND_KEY_BYTES = 2400


def check_key_in_queue(key: str, queue: str) -> str:
    """``key`` if it fits with the name of its ``queue`` in one index row (see
    ``MAX_QUEUE_AND_KEY_BYTES``); else ``ValueError`` naming the key."""
    size = len(key.encode()) + len(queue.encode())
    if size > MAX_QUEUE_AND_KEY_BYTES:
        raise ValueError(
            f"invalid key {shown(key)}: together with its queue's name it takes {size} bytes of"
            f" UTF-8, over {MAX_QUEUE_AND_KEY_BYTES}"
        )
    return key


_CONTROL = re.compile(f"[{NAME_FORBIDDEN}]")
#: a unit of spend (``ctx.spend(tokens=...)``, ``budget={"tokens": ...}``): a Python
#: identifier, since ``ctx.spend`` takes the units as keyword arguments
_UNIT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,63}$")


@dataclasses.dataclass(frozen=True)
class Rate:
    """At most ``count`` admissions in any ``window`` seconds (a sliding window)."""

    count: int
    window: float

    def __str__(self) -> str:
        for unit, seconds in _RATE_UNITS.items():
            if self.window == seconds:
                return f"{self.count}/{unit}"
        return f"{self.count}/{self.window:g}s"


@dataclasses.dataclass(frozen=True)
class Budget:
    """At most ``amount`` of ``unit`` spent (``ctx.spend``) in any ``window`` seconds."""

    unit: str
    amount: int
    window: float

    def __str__(self) -> str:
        return str(Rate(self.amount, self.window))


@dataclasses.dataclass(frozen=True)
class Queue:
    """A named queue and its limits; a limit left None does not apply.

    * ``concurrency``: at most this many runs (from admission until they end) and steps
      (while an attempt holds the job) of the queue at once, across every process.
    * ``per_key``: at most this many runs of one ``key`` at once (steps have no key).
    * ``rate``: at most this many admissions in any sliding window.
    * ``budget``: per unit, the most the steps of the queue may report spent
      (``ctx.spend``) in a sliding window; a queue that reached one admits nothing new
      until the window lets it. With ``budget_per_key`` each run ``key`` has its own.
    """

    name: str
    concurrency: int | None = None
    per_key: int | None = None
    rate: Rate | None = None
    budget: tuple[Budget, ...] = ()
    budget_per_key: bool = False

    @property
    def limited(self) -> bool:
        return (
            self.concurrency is not None
            or self.per_key is not None
            or self.rate is not None
            or bool(self.budget)
        )

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "concurrency": self.concurrency,
            "per_key": self.per_key,
            "rate": None if self.rate is None else str(self.rate),
            "budget": {b.unit: str(b) for b in self.budget} or None,
            "budget_per_key": self.budget_per_key,
        }


#: the queue of a run started on none, as ``plait worker --queues`` names it
DEFAULT_QUEUE = "default"


def check_queue_name(name: object, what: str = "queue") -> str:
    """A queue name: a non-empty string without control characters (``ids.check_name``)."""
    return check_name(name, what)


def parse_rate(value: object, *, what: str = "rate") -> Rate:
    """``"10/s"``, ``"100/m"``, ``"5/h"``, ``"1000/d"`` or ``"20/10s"`` (N per window)."""
    if isinstance(value, Rate):
        return value
    if not isinstance(value, str):
        raise ValueError(f"invalid {what}: {value!r} (write it like '10/s', '100/m' or '5/h')")
    match = _RATE.match(value)
    if match is None:
        raise ValueError(f"invalid {what}: {value!r} (write it like '10/s', '100/m' or '5/h')")
    count = int(match[1])
    window = float(match[2] or 1) * _RATE_UNITS[match[3]]
    if count < 1 or window <= 0:
        raise ValueError(f"invalid {what}: {value!r} (the count and the window must be >= 1)")
    return Rate(count, window)


def _positive(value: object, what: str) -> int | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"invalid {what}: {value!r} (a whole number >= 1, or None)")
    return value


def check_unit(value: object, what: str = "unit") -> str:
    """A unit of spend: an identifier of at most 64 characters (``tokens``, ``usd``)."""
    if not isinstance(value, str) or _UNIT.match(value) is None:
        raise ValueError(
            f"invalid {what} {shown(value) if isinstance(value, str) else repr(value)}: a unit"
            " is a name of letters, digits and _ (not starting with a digit), at most 64"
        )
    return value


def parse_budget(value: object, queue: str) -> tuple[Budget, ...]:
    """``{"tokens": "2000000/h", "usd": "50/d"}``: per unit, an amount per window,
    written as a rate is."""
    if value is None:
        return ()
    if not isinstance(value, dict) or not value:
        raise ValueError(
            f"invalid budget of queue {queue!r}: {value!r} (a dict of unit to amount per"
            " window, like {'tokens': '2000000/h'})"
        )
    given = cast(dict[object, object], value)
    budgets: list[Budget] = []
    for name, limit in sorted(given.items(), key=lambda item: str(item[0])):
        unit = check_unit(name, f"budget unit of queue {queue!r}")
        rate = parse_rate(limit, what=f"budget {unit!r} of queue {queue!r}")
        budgets.append(Budget(unit, rate.count, rate.window))
    return tuple(budgets)


def make_queue(
    name: object,
    *,
    concurrency: object = None,
    per_key: object = None,
    rate: object = None,
    budget: object = None,
    budget_per_key: object = False,
) -> Queue:
    """A ``Queue`` from what a user wrote, or an error naming the bad field."""
    qname = check_queue_name(name)
    if not isinstance(budget_per_key, bool):
        raise ValueError(f"invalid budget_per_key of queue {qname!r}: {budget_per_key!r} (a bool)")
    budgets = parse_budget(budget, qname)
    if budget_per_key and not budgets:
        raise ValueError(f"budget_per_key of queue {qname!r} needs a budget")
    return Queue(
        qname,
        _positive(concurrency, f"concurrency of queue {qname!r}"),
        _positive(per_key, f"per_key of queue {qname!r}"),
        None if rate is None else parse_rate(rate, what=f"rate of queue {qname!r}"),
        budgets,
        budget_per_key,
    )


def check_spend(amounts: Mapping[str, object]) -> dict[str, float]:
    """What ``ctx.spend`` was given: units (see ``check_unit``) with finite numbers >= 0."""
    checked: dict[str, float] = {}
    for unit, amount in amounts.items():
        check_unit(unit, "spend unit")
        if (
            isinstance(amount, bool)
            or not isinstance(amount, int | float)
            or not math.isfinite(amount)
            or amount < 0
        ):
            raise ValueError(f"invalid spend of {unit!r}: {amount!r} (a finite number >= 0)")
        checked[unit] = float(amount)
    return checked


def check_priority(value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"priority must be a whole number, got {type(value).__name__} {value!r}")
    low, high = PRIORITY_RANGE
    if not low <= value <= high:
        raise ValueError(f"invalid priority {value!r}: between {low} and {high}")
    return value


def check_text(value: object, what: str) -> str:
    """A key or de-duplication key: a non-empty string of at most ``MAX_KEY`` characters
    without control characters, as names are (no store takes a NUL, and keys show in
    logs and on the dashboard). Longer than a name may be (callers build keys from their
    own data), but bounded: both are indexed, and an index refuses a row too long for it,
    which would stop the admission of every queued run, not only this one."""
    if not isinstance(value, str):
        raise TypeError(f"{what} must be a string, got {type(value).__name__} {shown(value)}")
    if not value:
        raise ValueError(f"{what} must not be empty")
    if len(value) > MAX_KEY:
        raise ValueError(f"invalid {what} {shown(value)}: at most {MAX_KEY} characters")
    if _CONTROL.search(value) is not None:
        raise ValueError(f"invalid {what} {shown(value)}: no control characters")
    return value


def start_time(delay: object, start_at: object, now: float) -> float | None:
    """When a run may start (unix seconds), from ``delay`` or ``start_at``; None for now.

    ``start_at`` must be an aware datetime: a naive one means a different instant on
    every machine, so it is refused rather than guessed.
    """
    if delay is not None and start_at is not None:
        raise ValueError("give delay or start_at, not both")
    if delay is not None:
        seconds = parse_duration(delay, what="delay")
        return now + seconds if seconds > 0 else None
    if start_at is not None:
        if not isinstance(start_at, datetime):
            raise TypeError(
                f"start_at must be a datetime, got {type(start_at).__name__} {start_at!r}"
            )
        if start_at.tzinfo is None or start_at.utcoffset() is None:
            raise ValueError(
                f"start_at {start_at.isoformat()} has no time zone: pass an aware datetime "
                "(e.g. datetime(..., tzinfo=UTC))"
            )
        at = start_at.timestamp()
        return at if at > now else None
    return None


__all__ = [
    "MAX_KEY",
    "PRIORITY_RANGE",
    "Budget",
    "Queue",
    "Rate",
    "check_key_in_queue",
    "check_priority",
    "check_queue_name",
    "check_spend",
    "check_text",
    "check_unit",
    "make_queue",
    "parse_budget",
    "parse_rate",
    "start_time",
]
