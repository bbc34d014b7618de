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

from plait.durations import parse_duration, require_aware
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
#: what one admission costs a key of weight 1 in a fair queue's virtual time; a key of
#: weight w pays ``TURN // w``. Whole numbers keep turns exact on every store (no float
#: sums drifting apart), and 720720 is divisible by every weight from 1 to 16, so those
#: share turns without rounding
TURN = 720720
#: the largest weight of a key in a fair queue: its admissions still cost over 700
#: units, so the rounding of ``TURN // w`` moves its share by well under one percent
MAX_WEIGHT = 1000


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


def _no_weights() -> dict[str, int]:
    return {}


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
    * ``fair``: runs are admitted taking their keys in turn (within a priority), so a key
      with many runs waiting does not hold back one with few; ``weights`` gives a key
      that many admissions per turn (a key not named has weight 1, runs without a key
      share one turn as if they had one key).
    * ``budget``: per unit, the most the steps of the queue may report spent
      (``ctx.spend``) in a sliding window; a queue that reached one admits nothing new
      until the window lets it. With ``budget_per_key`` each run ``key`` has its own.
    """

    name: str
    concurrency: int | None = None
    per_key: int | None = None
    rate: Rate | None = None
    fair: bool = False
    weights: dict[str, int] = dataclasses.field(default_factory=lambda: _no_weights(), hash=False)
    budget: tuple[Budget, ...] = ()
    budget_per_key: bool = False

    @property
    def limited(self) -> bool:
        return (
            self.concurrency is not None
            or self.per_key is not None
            or self.rate is not None
            or self.fair
            or bool(self.budget)
        )

    def key_costs(self) -> tuple[tuple[str, int], ...]:
        """What one admission costs each weighted key in virtual time (see ``TURN``); a
        key not named pays ``TURN``."""
        return tuple((key, TURN // weight) for key, weight in sorted(self.weights.items()))

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "concurrency": self.concurrency,
            "per_key": self.per_key,
            "rate": None if self.rate is None else str(self.rate),
            "fair": self.fair,
            "weights": dict(self.weights) if self.weights else None,
            "budget": {b.unit: str(b) for b in self.budget} or None,
            "budget_per_key": self.budget_per_key,
        }

    def describe(self) -> str:
        """The declared limits in one line (``concurrency=2 fair weights {big: 3}``).
        ``plait queues`` writes them its own way (``cli.queues.format_limits``), from
        ``to_dict``, since what it shows may be stored limits with no ``Queue``."""
        parts = [
            f"{name}={value}"
            for name, value in (
                ("concurrency", self.concurrency),
                ("per_key", self.per_key),
                ("rate", self.rate),
            )
            if value is not None
        ]
        if self.fair:
            parts.append("fair")
        if self.weights:
            shown_weights = ", ".join(f"{k}: {w}" for k, w in sorted(self.weights.items()))
            parts.append(f"weights {{{shown_weights}}}")
        return " ".join(parts)


#: the queue of a run started on none, as ``plait worker --queues`` and the brakes name it
#: (``pause_queue("default")``; the SQL of both stores matches brakes on this name)
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


def check_weights(weights: object, fair: bool, queue: str) -> dict[str, int]:
    """The ``weights`` of fair queue ``queue``: a dict of keys (as ``key=`` takes them) to
    whole numbers from 1 to ``MAX_WEIGHT``; else an error naming the bad key or value.
    Weights without ``fair=True`` are refused rather than taken to mean it: a queue that
    changes its admission order should say so where it is declared."""
    if weights is None:
        return {}
    if not isinstance(weights, Mapping):
        raise TypeError(
            f"weights of queue {queue!r} must be a dict of key to weight, got "
            f"{type(weights).__name__} {shown(weights)}"
        )
    if weights and not fair:
        raise ValueError(f"weights of queue {queue!r} need fair=True")
    given = cast("Mapping[object, object]", weights)
    checked: dict[str, int] = {}
    for named, weight in given.items():
        key = check_key_in_queue(check_text(named, f"key in the weights of queue {queue!r}"), queue)
        if isinstance(weight, bool) or not isinstance(weight, int) or not 1 <= weight <= MAX_WEIGHT:
            raise ValueError(
                f"invalid weight of key {shown(key)} in queue {queue!r}: {weight!r} (a whole"
                f" number from 1 to {MAX_WEIGHT})"
            )
        checked[key] = weight
    return checked


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
    fair: object = False,
    weights: object = None,
    budget: object = None,
    budget_per_key: object = False,
) -> Queue:
    """A ``Queue`` from what a user wrote, or an error naming the bad field."""
    qname = check_queue_name(name)
    if not isinstance(fair, bool):
        raise TypeError(
            f"fair of queue {qname!r} must be True or False, got {type(fair).__name__} {fair!r}"
        )
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
        fair,
        check_weights(weights, fair, qname),
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
        at = require_aware(start_at, what="start_at").timestamp()
        return at if at > now else None
    return None


#: what a start with a de-duplication key does when a live run holds that key: ``skip``
#: returns the live run, ``replace`` cancels it and starts this one
DEDUP_POLICIES = ("skip", "replace")


def check_dedup_policy(policy: object, dedup: str | None) -> str:
    """A start's ``dedup_policy``, or an error naming it: one of ``DEDUP_POLICIES``, and
    ``replace`` only with a ``dedup`` key (it is the key that names the run to replace)."""
    if not isinstance(policy, str) or policy not in DEDUP_POLICIES:
        raise ValueError(
            f"invalid dedup_policy: {shown(policy)} ('skip' returns the live run holding the "
            "dedup key, 'replace' cancels it and starts this one)"
        )
    if policy == "replace" and dedup is None:
        raise ValueError("dedup_policy='replace' needs a dedup key: it names the run to replace")
    return policy


@dataclasses.dataclass(frozen=True)
class Debounce:
    """A debounced start: starts of one workflow with one ``key`` (and owner) share the
    run that waits to start; each moves its start to ``seconds`` after itself and gives it
    its input, and the run starts at most ``most`` seconds after the first (None: no
    limit)."""

    key: str
    seconds: float
    most: float | None = None


def check_debounce(debounce: object, key: object, most: object, workflow: str) -> Debounce | None:
    """The ``debounce``, ``debounce_key`` and ``debounce_max`` of a start, each checked and
    named when wrong; None when the start is not debounced. Without a key, every debounced
    start of the workflow shares one window: the key is the workflow's name."""
    if debounce is None:
        for value, what in ((key, "debounce_key"), (most, "debounce_max")):
            if value is not None:
                raise ValueError(f"{what}={shown(value)} needs debounce (the window, e.g. '5s')")
        return None
    seconds = parse_duration(debounce, what="debounce")
    if seconds <= 0:
        raise ValueError(f"invalid debounce: {debounce!r} (must be more than 0)")
    limit = None
    if most is not None:
        limit = parse_duration(most, what="debounce_max")
        if limit < seconds:
            raise ValueError(
                f"invalid debounce_max: {most!r} (must be at least debounce, {debounce!r})"
            )
    return Debounce(workflow if key is None else check_text(key, "debounce_key"), seconds, limit)


__all__ = [
    "DEDUP_POLICIES",
    "MAX_KEY",
    "MAX_WEIGHT",
    "PRIORITY_RANGE",
    "TURN",
    "Budget",
    "Debounce",
    "Queue",
    "Rate",
    "check_debounce",
    "check_dedup_policy",
    "check_key_in_queue",
    "check_priority",
    "check_queue_name",
    "check_spend",
    "check_text",
    "check_unit",
    "check_weights",
    "make_queue",
    "parse_budget",
    "parse_rate",
    "start_time",
]
