"""Retry policy: how many attempts a step gets and how long to wait between them.

The default is 3 retries (4 attempts) with exponential back-off starting at 1 s, doubling,
capped at 5 minutes. A step that fails for a transient reason usually recovers within a few
seconds, while a deterministic bug fails the run within about 7 s instead of hammering a
dependency. ``retries=0`` means exactly one attempt, on every path.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from plait.durations import parse_duration

DEFAULT_RETRIES = 3
EXPONENTIAL_BASE = 1.0
EXPONENTIAL_CAP = 300.0


@dataclasses.dataclass(frozen=True)
class RetryPolicy:
    retries: int = DEFAULT_RETRIES
    #: seconds between attempts, or None for exponential back-off
    delay: float | None = None

    def delay_after(self, failures: int) -> float:
        """Seconds to wait after the ``failures``-th failed attempt (1-based)."""
        if self.delay is not None:
            return self.delay
        return min(EXPONENTIAL_CAP, EXPONENTIAL_BASE * (2 ** max(0, failures - 1)))

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
