"""JSON in and out of the store. Nothing is ever pickled.

Values are encoded with pydantic: models, dataclasses, ``datetime``, ``date``,
``Decimal``, ``UUID``, enums, sets and tuples are written as their JSON form. Only what
``json`` cannot write itself goes through pydantic, so plain JSON values cost what they
always did. Anything pydantic cannot encode either (an arbitrary object, bytes that are
not text, NaN) is an error naming the offending type. So is text that one of the stores
cannot hold (a NUL character, half of a surrogate pair): every store refuses the same
values.

Values come back as JSON unless an annotation says otherwise: ``Codec`` decodes the
stored text as the type a function's return annotation (or a workflow's data parameter)
names, with one ``pydantic.TypeAdapter`` per annotation, built once.

Values that come from outside (run inputs, step results, events, state values) are also
held to ``Limits``: a size and a depth, checked on the encoded text.
"""

from __future__ import annotations

import collections.abc
import dataclasses
import inspect
import json
import json.scanner
import logging
import re
import traceback
import types
import typing
from collections.abc import Callable
from typing import Any, cast

import pydantic
from pydantic import BaseModel
from pydantic_core import to_jsonable_python

from plait.errors import (
    NotJSONError,
    PayloadTooDeepError,
    PayloadTooLargeError,
    TypeMismatchError,
)

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
        """Raise ``PayloadTooLargeError`` / ``PayloadTooDeepError`` for ``text``. A short
        text with few brackets (most step inputs and results) is judged here, with no
        call: every step checks two of them."""
        if len(text) * 4 > self.max_payload:
            size = size_over(text, self.max_payload)
            if size is not None:
                raise PayloadTooLargeError(what, size, self.max_payload)
        if text.count("[") + text.count("{") > self.max_depth and too_deep(text, self.max_depth):
            raise PayloadTooDeepError(what, self.max_depth)


def dumps(value: Any, *, what: str = "value", limits: Limits | None = None) -> str | None:
    """Encode for storage; ``None`` stays SQL NULL so a missing value costs nothing.
    With ``limits``, the value must also fit them."""
    if value is None:
        return None
    if type(value) is int and -_PLAIN_INT < value < _PLAIN_INT:
        # the commonest result, written as json writes it, without its encoder's setup
        text = str(value)
        if limits is not None and len(text) > limits.max_payload:
            limits.check(text, what)  # no brackets: only its size can be over
        return text
    try:
        text = _ENCODER.encode(value)
    except RecursionError:
        raise PayloadTooDeepError(what, (limits or Limits()).max_depth) from None
    except (TypeError, ValueError) as exc:
        text = _encode_converted(value, what, exc)
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
    text has no NUL character (a ``\\u0000`` in a json value cannot be read out as text),
    and neither store takes half of a surrogate pair (it is no UTF-8)."""
    if "\\u0000" in text and _NUL.search(text):
        return "it contains a NUL character (\\u0000), which plait does not store"
    if _SURROGATE.search(text):
        return "it contains an unpaired surrogate (a broken UTF-16 character)"
    return None


def _default(value: Any) -> Any:
    """What ``json`` cannot write, at any depth, is written as pydantic's JSON form of it
    (a model, a dataclass, a datetime, a set...)."""
    if isinstance(value, BaseModel):
        return value.model_dump(mode="json")
    if isinstance(value, set | frozenset):
        # in one order whatever the hash seed: a replay in another process compares a
        # step's input with the recorded text
        items: list[Any] = [to_jsonable_python(item) for item in cast(set[Any], value)]
        return sorted(items, key=_ENCODER.encode)
    try:
        return to_jsonable_python(value)
    except Exception:
        if isinstance(value, bytes | bytearray):
            raise TypeError(
                f"got {type(value).__name__} that are not UTF-8 text; "
                "encode them (base64, say) first"
            ) from None
        raise TypeError(
            f"a value of type {type(value).__qualname__} is neither JSON nor something "
            "pydantic can encode (a model, a dataclass, datetime, Decimal, UUID, an enum...)"
        ) from None


def _encode_converted(value: Any, what: str, first: Exception) -> str:
    """Second chance for a value ``json`` refused even with ``_default`` (dict keys that
    are not strings, such as UUIDs or enums): pydantic converts the whole value first."""
    try:
        return _ENCODER.encode(to_jsonable_python(value))
    except RecursionError:
        raise PayloadTooDeepError(what, Limits().max_depth) from None
    except Exception:
        raise NotJSONError(what, _describe(value, first)) from None


#: ints written as text without the encoder: far from the size where ``str`` refuses one
_PLAIN_INT = 10**18
_SCAN = json.scanner.make_scanner(cast(Any, json.JSONDecoder()))
_ENCODER = json.JSONEncoder(
    separators=(",", ":"), ensure_ascii=False, allow_nan=False, default=_default
)


def loads(text: str | bytes | None) -> Any:
    if text is None:
        return None
    if type(text) is str:
        # what ``json.loads`` does for a text with no blank around it (as plait writes
        # them), without its checks and matches around the scanner: a step decodes its
        # input and its result every time
        try:
            value, end = _SCAN(text, 0)
        except StopIteration:
            pass  # blank first, or no JSON: json.loads says which
        else:
            if end == len(text):
                return value
    return json.loads(text)


def roundtrip(value: Any, *, what: str = "value", limits: Limits | None = None) -> Any:
    """The value as every later replay will see it (tuples become lists, and so on);
    with ``limits``, it must also fit them."""
    text = dumps(value, what=what, limits=limits)
    return None if text is None else json.loads(text)


def _describe(value: Any, exc: Exception) -> str:
    kind = type(value).__qualname__
    text = str(exc)
    return text if text.startswith("got ") else f"{text} (got {kind})"


# -- decoding as an annotation names -----------------------------------------------------------

_log = logging.getLogger("plait")
_EMPTY = inspect.Parameter.empty
#: annotations whose values JSON gives back as they are: no adapter, no cost
_PLAIN: frozenset[Any] = frozenset(
    {_EMPTY, Any, object, dict, list, str, int, float, bool, None, type(None)}
)
#: generic types whose values JSON gives back as they are when all their arguments are
_PLAIN_ORIGINS: frozenset[Any] = frozenset({list, typing.Union, types.UnionType})
#: mappings, which JSON gives back (as a dict) only when their keys are text
_MAPPINGS: frozenset[Any] = frozenset(
    {dict, collections.abc.Mapping, collections.abc.MutableMapping}
)
#: key types that a JSON object's keys, always text, already are
_TEXT_KEYS: frozenset[Any] = frozenset({str, Any, object})


def is_plain(annotation: Any) -> bool:
    """Whether values of ``annotation`` are JSON as they are (``dict``, ``list[Any]``,
    ``dict[str, int]``, ``str | None``...): such values are decoded by ``json`` alone.

    A JSON object's keys are text, so a mapping is plain only when its keys are (``str``,
    or unconstrained): ``dict[int, str]`` written as ``{"1": "a"}`` must come back as
    ``{1: "a"}``, which only pydantic does. The rule holds at every depth, so
    ``list[dict[int, str]]`` is not plain either. Anything else (a model, a TypedDict,
    ``tuple``, ``datetime``...) goes through pydantic.
    """
    try:
        if annotation in _PLAIN:
            return True
    except TypeError:  # an unhashable annotation
        return False
    origin = typing.get_origin(annotation)
    args = typing.get_args(annotation)
    if origin in _MAPPINGS:
        if not args:  # typing.Dict, typing.Mapping: keys unconstrained
            return True
        if len(args) != 2:  # dict[str], say: pydantic judges it
            return False
        key, value = args
        try:
            text_keys = key in _TEXT_KEYS
        except TypeError:  # an unhashable key annotation
            return False
        return text_keys and is_plain(value)
    if origin in _PLAIN_ORIGINS:
        return all(is_plain(arg) for arg in args)
    return False


class Codec:
    """Decodes stored JSON text as the type one annotation names. A value that does not
    fit is a ``TypeMismatchError`` naming ``what`` and the type."""

    __slots__ = ("adapter", "annotation")

    def __init__(self, annotation: Any, adapter: pydantic.TypeAdapter[Any]) -> None:
        self.annotation = annotation
        self.adapter = adapter

    def decode(self, text: str | bytes | None, what: str) -> Any:
        try:
            return self.adapter.validate_json("null" if text is None else text)
        except pydantic.ValidationError as exc:
            raise TypeMismatchError(what, _type_name(self.annotation), _problems(exc)) from None
        except pydantic.PydanticUserError as exc:  # the type itself is unusable: fail, once
            raise TypeMismatchError(what, _type_name(self.annotation), str(exc)) from None

    def check(self, value: Any, what: str) -> Any:
        """``value`` (JSON data already parsed) as the annotated type."""
        return self.decode(json.dumps(value), what)


#: codecs by annotation: one ``TypeAdapter`` per annotation for the life of the process
_CODECS: dict[Any, Codec | None] = {}


def codec_for(annotation: Any, owner: str) -> Codec | None:
    """The codec of ``annotation``, or None when JSON gives its values back as they are.
    An annotation pydantic has no schema for is logged once and read as JSON."""
    try:
        return _CODECS[annotation]
    except KeyError:
        pass
    except TypeError:  # unhashable: built every time, never cached
        return _make_codec(annotation, owner)
    codec = _CODECS[annotation] = _make_codec(annotation, owner)
    return codec


def _make_codec(annotation: Any, owner: str) -> Codec | None:
    if is_plain(annotation):
        return None
    try:
        adapter: pydantic.TypeAdapter[Any] = pydantic.TypeAdapter(annotation)
        if not getattr(adapter, "pydantic_complete", True):
            # a name the annotation refers to is not resolvable (its module is not in
            # sys.modules, say): pydantic would only raise on first use, inside a step
            adapter.rebuild(raise_errors=True)
        return Codec(annotation, adapter)
    except Exception as exc:
        _log.warning(
            "%s: pydantic cannot decode the annotation %r (%s); its values are read as JSON",
            owner,
            annotation,
            exc,
        )
        return None


#: return codecs of closures, by code object and annotation: a closure made anew on every
#: pass is the same code with the same annotation
_RETURN_CODECS: dict[tuple[Any, Any], Codec | None] = {}


def result_codec(fn: Callable[..., Any], owner: str) -> Codec | None:
    """The codec of ``fn``'s return annotation (None: no annotation, or a plain one).
    Cheap on the path of every step: a lambda or an unannotated function is one attribute
    read, an annotated one a dictionary hit after its first call."""
    annotations = getattr(fn, "__annotations__", None)
    if not annotations:
        return None
    raw = annotations.get("return", _EMPTY)
    if raw is _EMPTY:
        return None
    key = (getattr(fn, "__code__", None), raw)
    try:
        return _RETURN_CODECS[key]
    except KeyError:
        pass
    except TypeError:
        return codec_for(resolve_annotation(fn, "return", raw, owner), owner)
    codec = _RETURN_CODECS[key] = codec_for(resolve_annotation(fn, "return", raw, owner), owner)
    return codec


def resolve_annotation(fn: Callable[..., Any], name: str, raw: Any, owner: str) -> Any:
    """``raw`` evaluated where ``fn`` was written when it is a string (postponed
    annotations); one that cannot be evaluated is logged and read as no annotation."""
    if not isinstance(raw, str):
        return raw
    try:
        return typing.get_type_hints(fn).get(name, _EMPTY)
    except Exception as exc:
        _log.warning(
            "%s: cannot resolve the annotation %r (%s); its values are read as JSON",
            owner,
            raw,
            exc,
        )
        return _EMPTY


def _type_name(annotation: Any) -> str:
    if isinstance(annotation, type):
        return annotation.__qualname__
    return repr(annotation).replace("typing.", "")


def _problems(exc: pydantic.ValidationError) -> str:
    found: list[str] = []
    for err in exc.errors(include_url=False)[:5]:
        where = ".".join(str(p) for p in err.get("loc", ()))
        found.append(f"{where}: {err.get('msg')}" if where else str(err.get("msg")))
    return "; ".join(found)


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
