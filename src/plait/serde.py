"""JSON in and out of the store. Nothing is ever pickled.

Pydantic models are dumped to JSON-mode dicts at the edge so users may return them;
anything else that ``json`` refuses (sets, bytes, arbitrary objects, NaN) is an error
naming the offending thing. So is text that one of the stores cannot hold (a NUL
character, half of a surrogate pair): every store refuses the same values.

Values that come from outside (run inputs, step results, events, state values) are also
held to ``Limits``: a size and a depth, checked on the encoded text.
"""

from __future__ import annotations

import dataclasses
import json
import re
import traceback
from typing import Any, cast

from pydantic import BaseModel

from plait.errors import NotJSONError, PayloadTooDeepError, PayloadTooLargeError

#: levels of nested arrays and objects a stored value may have
MAX_DEPTH = 64
#: bytes of encoded JSON a stored value may have, unless the engine is told otherwise
DEFAULT_MAX_PAYLOAD = 1 << 20


@dataclasses.dataclass(frozen=True, slots=True)
class Limits:
    """How large (``max_payload`` bytes of UTF-8 JSON) and how deep (``max_depth``
    levels) a value that plait stores may be."""

    max_payload: int = DEFAULT_MAX_PAYLOAD
    max_depth: int = MAX_DEPTH

    def __post_init__(self) -> None:
        for name in ("max_payload", "max_depth"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"invalid {name}: {value!r} (a whole number >= 1)")

    def check(self, text: str, what: str) -> None:
        """Raise ``PayloadTooLargeError`` / ``PayloadTooDeepError`` for ``text``."""
        size = size_over(text, self.max_payload)
        if size is not None:
            raise PayloadTooLargeError(what, size, self.max_payload)
        if too_deep(text, self.max_depth):
            raise PayloadTooDeepError(what, self.max_depth)


def dumps(value: Any, *, what: str = "value", limits: Limits | None = None) -> str | None:
    """Encode for storage; ``None`` stays SQL NULL so a missing value costs nothing.
    With ``limits``, the value must also fit them."""
    if value is None:
        return None
    try:
        text = _ENCODER.encode(value)
    except RecursionError:
        raise PayloadTooDeepError(what, (limits or Limits()).max_depth) from None
    except (TypeError, ValueError) as exc:
        raise NotJSONError(what, _describe(value, exc)) from None
    problem = unstorable(text)
    if problem is not None:
        raise NotJSONError(what, problem)
    if limits is not None:
        limits.check(text, what)
    return text


# A JSON string literal, and the brackets that nest (outside strings).
_STRING = re.compile(r'"(?:[^"\\]|\\.)*"', re.DOTALL)
_BRACKET = re.compile(r"[\[\]{}]")
# An escaped NUL: ``\u0000`` after an even number of backslashes (an odd number means the
# backslash itself is escaped and "u0000" is plain text).
_NUL = re.compile(r"(?<!\\)(?:\\\\)*\\u0000")
_SURROGATE = re.compile("[\ud800-\udfff]")


def too_deep(text: str, limit: int) -> bool:
    """Whether JSON ``text`` nests arrays and objects more than ``limit`` levels deep.

    Works on the text, so a value too deep for Python's own recursion is judged without
    parsing it; the count of opening brackets settles most values at C speed."""
    if text.count("[") + text.count("{") <= limit:
        return False
    level = 0
    for match in _BRACKET.finditer(_STRING.sub("", text)):
        if match.group() in "[{":
            level += 1
            if level > limit:
                return True
        else:
            level -= 1
    return False


def size_over(text: str, limit: int) -> int | None:
    """The UTF-8 size of ``text`` if it is over ``limit``, else None. Short texts are
    judged by their length alone (a character takes at most four bytes)."""
    if len(text) * 4 <= limit:
        return None
    size = len(text.encode("utf-8", "surrogatepass"))
    return size if size > limit else None


def unstorable(text: str) -> str | None:
    """Why a store could not hold JSON ``text`` (None: every store can): PostgreSQL's
    jsonb has no NUL character, and neither store takes half of a surrogate pair."""
    if "\\u0000" in text and _NUL.search(text):
        return "it contains a NUL character (\\u0000), which plait does not store"
    if _SURROGATE.search(text):
        return "it contains an unpaired surrogate (a broken UTF-16 character)"
    return None


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


#: characters of an exception's message kept in its error record
_MAX_MESSAGE = 4000


def _storable_text(text: str) -> str:
    """``text`` with what no store holds (NUL, unpaired surrogates) replaced: an error
    record must always be storable, even when the error is about such text."""
    if "\x00" in text or _SURROGATE.search(text):
        text = text.replace("\x00", "\ufffd")
        text = text.encode("utf-8", "replace").decode("utf-8")
    return text


def error_record(exc: BaseException, *, code: str | None = None) -> dict[str, Any]:
    """The stored form of an exception: message, type, code, and a short traceback."""
    record: dict[str, Any] = {
        "message": _storable_text(str(exc) or type(exc).__name__)[:_MAX_MESSAGE],
        "type": type(exc).__name__,
        "code": code or getattr(exc, "code", None),
    }
    tb = traceback.format_exception(type(exc), exc, exc.__traceback__, limit=8)
    record["traceback"] = _storable_text("".join(tb)[-4000:])
    extra = getattr(exc, "error", None)
    if isinstance(extra, dict) and cast(dict[str, Any], extra).get("code") and not record["code"]:
        record["code"] = extra["code"]
    if not isinstance(record["code"], str):
        record["code"] = None
    return record
