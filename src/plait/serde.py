"""JSON in and out of the store. Nothing is ever pickled.

Pydantic models are dumped to JSON-mode dicts at the edge so users may return them;
anything else that ``json`` refuses (sets, bytes, arbitrary objects, NaN) is an error
naming the offending thing.
"""

from __future__ import annotations

import json
import traceback
from typing import Any

from pydantic import BaseModel

from plait.errors import NotJSONError


def dumps(value: Any, *, what: str = "value") -> str | None:
    """Encode for storage; ``None`` stays SQL NULL so a missing value costs nothing."""
    if value is None:
        return None
    try:
        return _ENCODER.encode(value)
    except (TypeError, ValueError) as exc:
        raise NotJSONError(what, _describe(value, exc)) from None


def _default(value: Any) -> Any:
    """Pydantic models (at any depth) are written as their JSON form; nothing else is
    guessed at."""
    if isinstance(value, BaseModel):
        return value.model_dump(mode="json")
    raise TypeError(f"Object of type {type(value).__name__} is not JSON serializable")


_ENCODER = json.JSONEncoder(
    separators=(",", ":"), ensure_ascii=False, allow_nan=False, default=_default
)


def loads(text: str | bytes | None) -> Any:
    if text is None:
        return None
    return json.loads(text)


def roundtrip(value: Any, *, what: str = "value") -> Any:
    """The value as every later replay will see it (tuples become lists, and so on)."""
    text = dumps(value, what=what)
    return None if text is None else json.loads(text)


def _describe(value: Any, exc: Exception) -> str:
    kind = type(value).__name__
    if isinstance(value, set | frozenset):
        return f"got a {kind}; return a list instead"
    if isinstance(value, bytes | bytearray):
        return f"got {kind}; encode it (base64 or text) first"
    return f"{exc} (got {kind})"


def error_record(exc: BaseException, *, code: str | None = None) -> dict[str, Any]:
    """The stored form of an exception: message, type, code, and a short traceback."""
    record: dict[str, Any] = {
        "message": str(exc) or type(exc).__name__,
        "type": type(exc).__name__,
        "code": code or getattr(exc, "code", None),
    }
    tb = traceback.format_exception(type(exc), exc, exc.__traceback__, limit=8)
    record["traceback"] = "".join(tb)[-4000:]
    extra = getattr(exc, "error", None)
    if isinstance(extra, dict) and extra.get("code") and not record["code"]:
        record["code"] = extra["code"]
    if not isinstance(record["code"], str):
        record["code"] = None
    return record
