"""Durations as users write them: seconds as a number, strings like "500ms", "2s", "1h",
or a ``datetime.timedelta``; and durations as people read them, one formatter for every
place that shows a time taken."""

from __future__ import annotations

import math
import re
from datetime import datetime, timedelta
from typing import TypeAlias

#: what every duration parameter of plait accepts
Duration: TypeAlias = float | str | timedelta

#: the longest duration accepted: a sleep, timeout or back-off becomes a stored time of
#: day, and one much further off is beyond what a timestamp holds (years past 9999)
MAX_DURATION = 100 * 365.25 * 86400.0

_UNITS = {
    "ms": 0.001,
    "millisecond": 0.001,
    "milliseconds": 0.001,
    "s": 1.0,
    "sec": 1.0,
    "second": 1.0,
    "seconds": 1.0,
    "m": 60.0,
    "min": 60.0,
    "minute": 60.0,
    "minutes": 60.0,
    "h": 3600.0,
    "hour": 3600.0,
    "hours": 3600.0,
    "d": 86400.0,
    "day": 86400.0,
    "days": 86400.0,
    "w": 604800.0,
    "week": 604800.0,
    "weeks": 604800.0,
}
_PART = re.compile(r"(\d+(?:\.\d+)?)\s*([a-z]+)")
_WHOLE = re.compile(r"^(?:\s*\d+(?:\.\d+)?\s*[a-z]+)+\s*$")


def parse_duration(value: object, *, what: str = "duration") -> float:
    """Seconds for ``value``; a ``ValueError`` naming ``what`` and the bad value otherwise.

    Compound strings ("1m30s") are accepted because people write them; negative, NaN and
    boolean values are refused because they are always a mistake, and so is a time past
    ``MAX_DURATION`` (100 years), which would be stored and then be unreadable.
    """
    if isinstance(value, bool):
        raise ValueError(f"invalid {what}: {value!r} (use seconds or a string like '2s')")
    if isinstance(value, int | float):
        seconds = float(value)
    elif isinstance(value, timedelta):
        seconds = value.total_seconds()
    elif isinstance(value, str):
        text = value.strip().lower()
        if not _WHOLE.match(text):
            raise ValueError(
                f"invalid {what}: {value!r} (use seconds or a string like '500ms', '2s', '5m')"
            )
        seconds = 0.0
        for number, unit in _PART.findall(text):
            if unit not in _UNITS:
                raise ValueError(f"invalid {what}: {value!r} (unknown unit {unit!r})")
            seconds += float(number) * _UNITS[unit]
    else:
        raise ValueError(
            f"invalid {what}: {value!r} (use seconds, a string like '2s' or a timedelta)"
        )
    if math.isnan(seconds) or math.isinf(seconds) or seconds < 0:
        raise ValueError(f"invalid {what}: {value!r} (must be a finite, non-negative time)")
    if seconds > MAX_DURATION:
        raise ValueError(f"invalid {what}: {value!r} (longer than 100 years)")
    return seconds


def require_aware(moment: datetime, *, what: str) -> datetime:
    """``moment`` if it has a time zone, else a ``ValueError`` naming ``what``: a
    datetime without one is a different instant on every machine (read as UTC, a "now"
    west of it reaches hours back), so it is refused rather than guessed."""
    if moment.tzinfo is None or moment.utcoffset() is None:
        raise ValueError(
            f"{what} {moment.isoformat()} has no time zone: pass an aware datetime "
            "(e.g. datetime(..., tzinfo=UTC))"
        )
    return moment


def format_duration(seconds: float) -> str:
    """Short human durations: ``850 ms``, ``4.2 s``, ``3 m 5 s``, ``2 h 4 m``.

    The shapes match the dashboard script's ``duration`` so a step reads the same in the
    server-drawn graph and in the browser-drawn timeline beside it.
    """
    if seconds < 1:
        return f"{max(0, round(seconds * 1000))} ms"
    if seconds < 60:
        return f"{seconds:.1f} s"
    if seconds < 3600:
        return f"{int(seconds // 60)} m {int(seconds % 60)} s"
    return f"{int(seconds // 3600)} h {int(seconds % 3600 // 60)} m"


def timeout_seconds(
    value: float | str | timedelta | None, *, what: str = "timeout"
) -> float | None:
    """Seconds for a ``timeout=`` given as a number, a string like ``"30s"`` or a
    ``timedelta`` (None: no limit). A number or a ``timedelta`` is taken as it is, zero or
    negative included (the wait then times out at once), as ``timeout=`` always took it."""
    if isinstance(value, timedelta):
        return value.total_seconds()
    if isinstance(value, str):
        return parse_duration(value, what=what)
    return None if value is None else float(value)


def run_timeout(value: object, *, what: str) -> float | None:
    """Seconds for a run's ``timeout=`` (its deadline, counted from its start), None for
    None; a ``ValueError`` naming ``what`` for a bad duration or one of no time at all."""
    if value is None:
        return None
    seconds = parse_duration(value, what=what)
    if seconds <= 0:
        raise ValueError(f"invalid {what}: {value!r} (must be more than 0)")
    return seconds
