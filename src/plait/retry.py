"""Retry policy: how many attempts a step gets and how long to wait between them.

The default is 3 retries (4 attempts) with exponential back-off starting at 1 s, doubling,
capped at 5 minutes. A step that fails for a transient reason usually recovers within a few
seconds, while a deterministic bug fails the run within about 7 s instead of hammering a
dependency. ``retries=0`` means exactly one attempt, on every path.

Exponential delays are jittered (each is drawn between 75% and 125% of its nominal
value): a dependency that failed a thousand runs at once would otherwise see all their
retries arrive together, again and again. A fixed ``retry_delay`` is kept exact, since the
user chose it. The delay drawn is stored with the step's timer, so a replay never draws
again.
"""

from __future__ import annotations

import dataclasses
import random
from typing import Any, cast

from plait.durations import parse_duration

DEFAULT_RETRIES = 3
EXPONENTIAL_BASE = 1.0
EXPONENTIAL_CAP = 300.0
#: exponential delays are drawn from [1 - JITTER, 1 + JITTER] times their nominal value
JITTER = 0.25


@dataclasses.dataclass(frozen=True)
class RetryPolicy:
    retries: int = DEFAULT_RETRIES
    #: seconds between attempts, or None for exponential back-off
    delay: float | None = None

    def delay_after(self, failures: int, *, draw: float | None = None) -> float:
        """Seconds to wait after the ``failures``-th failed attempt (1-based). ``draw``
        (0 to 1) places an exponential delay in its jitter range; random if not given."""
        if self.delay is not None:
            return self.delay
        nominal = min(EXPONENTIAL_CAP, EXPONENTIAL_BASE * (2 ** max(0, failures - 1)))
        if draw is None:
            draw = random.random()
        return float(nominal * (1 - JITTER + 2 * JITTER * draw))

    @property
    def delay_spec(self) -> str | float:
        return "exponential" if self.delay is None else self.delay


def parse_retries(value: Any, *, what: str = "retries") -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ValueError(f"invalid {what}: {value!r} (a whole number >= 0)")
    return value


def parse_retry_delay(value: Any, *, what: str = "retry_delay") -> float | None:
    """Seconds, or ``None`` for the exponential policy."""
    if value is None or value == "exponential":
        return None
    return parse_duration(value, what=what)


#: exception classes that fail a step at once, without a retry (``no_retry_on``)
NoRetryOn = tuple[type[BaseException], ...]


def parse_no_retry_on(value: Any, *, what: str = "no_retry_on") -> NoRetryOn:
    """A tuple (or list) of exception classes; anything else is a ``TypeError`` naming
    ``what`` and the item that is not a class."""
    hint = "a tuple of exception classes, such as (ValueError, KeyError)"
    if isinstance(value, type):
        raise TypeError(f"{what} must be {hint}, got the class {value.__name__} alone")
    if not isinstance(value, tuple | list):
        raise TypeError(f"{what} must be {hint}, got {type(value).__name__} {value!r}")
    items: list[Any] = list(cast(Any, value))
    for item in items:
        if not (isinstance(item, type) and issubclass(item, BaseException)):
            raise TypeError(f"{what} must be {hint}: {item!r} is not an exception class")
    return tuple(items)


def resolve_policy(*layers: dict[str, Any]) -> RetryPolicy:
    """Merge option layers (later wins) into one policy, validated once up front."""
    retries: Any = DEFAULT_RETRIES
    delay: Any = None
    for layer in layers:
        if layer.get("retries") is not None:
            retries = layer["retries"]
        if layer.get("retry_delay") is not None:
            delay = layer["retry_delay"]
    return RetryPolicy(parse_retries(retries), parse_retry_delay(delay))
