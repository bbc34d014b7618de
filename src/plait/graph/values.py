"""Values in graph definitions: literals, ``$ref`` and ``$template`` expressions.

A value is JSON data in which two dict shapes are expressions:

* ``{"$ref": root, "path": "a.b.0", "default": ...}``: the value at ``path`` inside
  ``root``. ``root`` is ``"trigger"`` (the run's input), ``"$item"`` (the current item of a
  ``for_each`` node), ``"$state"`` (the run's state variables) or a node id (that node's
  output). ``path`` and ``default`` are optional.
* ``{"$template": "Hi ${trigger.name}"}``: a string with ``${root.path}`` placeholders.
  ``$${`` writes a literal ``${``.

Paths are dot-separated; a segment of digits indexes a list; ``\\.`` is a literal dot
(``\\\\`` a backslash, ``\\}`` a brace). A missing key or index gives ``None`` (or the
``default``), but a ``$ref`` to a node that has not succeeded raises ``GraphValueError``:
a silent ``None`` from an untaken branch is how the original engine lost data.
"""

# This module walks JSON and YAML values whose every part is ``Any`` by nature: what
# each part is, it checks at run time, so pyright's rules about unknown types (not its
# other strict rules) are off here.
# pyright: reportUnknownVariableType=false, reportUnknownMemberType=false
# pyright: reportUnknownArgumentType=false

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from plait.graph.errors import GraphValueError

REF = "$ref"
TEMPLATE = "$template"
TRIGGER = "trigger"
ITEM = "$item"
STATE = "$state"
SPECIAL_ROOTS = frozenset({TRIGGER, ITEM, STATE})

_REF_KEYS = frozenset({REF, "path", "default"})
_ESCAPABLE = frozenset(".\\}")

Path = tuple[str, ...]
TemplatePart = str | Path


# -- syntax ---------------------------------------------------------------------------


def parse_path(path: str) -> Path:
    """Split a path into segments; ``ValueError`` says what is wrong with a bad one.

    An empty string is the empty path (the whole value).
    """
    if not isinstance(path, str):
        raise ValueError(f"path must be a string, got {type(path).__name__}")
    if path == "":
        return ()
    segments: list[str] = []
    current: list[str] = []
    i = 0
    while i < len(path):
        char = path[i]
        if char == "\\":
            if i + 1 >= len(path):
                raise ValueError(f"path {path!r} ends with a lone backslash")
            escaped = path[i + 1]
            if escaped not in _ESCAPABLE:
                raise ValueError(
                    f"path {path!r} has an unknown escape '\\{escaped}' "
                    "(only '\\.', '\\\\' and '\\}' are allowed)"
                )
            current.append(escaped)
            i += 2
            continue
        if char == ".":
            if not current:
                raise ValueError(f"path {path!r} has an empty segment")
            segments.append("".join(current))
            current = []
        else:
            current.append(char)
        i += 1
    if not current:
        raise ValueError(f"path {path!r} has an empty segment")
    segments.append("".join(current))
    return tuple(segments)


def format_path(segments: Sequence[str]) -> str:
    """The inverse of ``parse_path``: escapes what needs escaping."""
    return ".".join(
        s.replace("\\", "\\\\").replace(".", "\\.").replace("}", "\\}") for s in segments
    )


def parse_template(text: str) -> list[TemplatePart]:
    """Split a template into literal strings and paths (whose first segment is the root)."""
    if not isinstance(text, str):
        raise ValueError(f"$template must be a string, got {type(text).__name__}")
    parts: list[TemplatePart] = []
    literal: list[str] = []
    i = 0
    n = len(text)
    while i < n:
        if text.startswith("$${", i):
            literal.append("${")
            i += 3
            continue
        if text.startswith("${", i):
            j = i + 2
            while j < n and text[j] != "}":
                j += 2 if text[j] == "\\" else 1
            if j >= n:
                raise ValueError(f"template {text!r} has an unclosed '${{' at position {i}")
            expression = text[i + 2 : j].strip()
            if not expression:
                raise ValueError(f"template {text!r} has an empty '${{}}' at position {i}")
            try:
                segments = parse_path(expression)
            except ValueError as exc:
                raise ValueError(f"template {text!r}: {exc}") from None
            if literal:
                parts.append("".join(literal))
                literal = []
            parts.append(segments)
            i = j + 1
            continue
        literal.append(text[i])
        i += 1
    if literal:
        parts.append("".join(literal))
    return parts


def is_ref(value: Any) -> bool:
    """Whether ``value`` is a ``$ref`` expression (well-formed or not)."""
    return isinstance(value, Mapping) and REF in value


def is_template(value: Any) -> bool:
    """Whether ``value`` is a ``$template`` expression (well-formed or not)."""
    return isinstance(value, Mapping) and TEMPLATE in value and REF not in value


def check_syntax(value: Any, where: str = "value") -> list[str]:
    """Every syntax problem in ``value``, each prefixed with its location (``where`` for the
    top level, then ``.key`` and ``[index]``)."""
    problems: list[str] = []
    _check(value, where, problems)
    return problems


def _check(value: Any, where: str, problems: list[str]) -> None:
    if isinstance(value, Mapping):
        if REF in value:
            if TEMPLATE in value:
                problems.append(f"{where}: a value cannot be both $ref and $template")
            root = value[REF]
            if not isinstance(root, str) or not root:
                problems.append(f"{where}: $ref must be a non-empty string, got {root!r}")
            for key in value:
                if key not in _REF_KEYS and key != TEMPLATE:
                    problems.append(
                        f"{where}: unexpected key {key!r} in $ref (allowed: $ref, path, default)"
                    )
            if "path" in value:
                try:
                    parse_path(value["path"])
                except ValueError as exc:
                    problems.append(f"{where}: {exc}")
            return
        if TEMPLATE in value:
            for key in value:
                if key != TEMPLATE:
                    problems.append(f"{where}: unexpected key {key!r} next to $template")
            try:
                parse_template(value[TEMPLATE])
            except ValueError as exc:
                problems.append(f"{where}: {exc}")
            return
        for key, item in value.items():
            _check(item, f"{where}.{key}", problems)
    elif isinstance(value, list | tuple):
        for index, item in enumerate(value):
            _check(item, f"{where}[{index}]", problems)


def references(
    value: Any, *, include_special: bool = False, required_only: bool = False
) -> set[str]:
    """The node ids ``value`` reads; with ``include_special`` also ``trigger``, ``$item``
    and ``$state``; with ``required_only`` leaving out ``$ref``s that have a ``default``
    (those may point to a node that did not run). Malformed parts are skipped
    (``check_syntax`` reports them)."""
    roots: set[str] = set()
    _collect(value, roots, required_only)
    return roots if include_special else roots - SPECIAL_ROOTS


def _collect(value: Any, roots: set[str], required_only: bool) -> None:
    if isinstance(value, Mapping):
        if REF in value:
            root = value[REF]
            if isinstance(root, str) and root and not (required_only and "default" in value):
                roots.add(root)
            return
        if TEMPLATE in value:
            try:
                parts = parse_template(value[TEMPLATE])
            except ValueError:
                return
            roots.update(part[0] for part in parts if isinstance(part, tuple))
            return
        for item in value.values():
            _collect(item, roots, required_only)
    elif isinstance(value, list | tuple):
        for item in value:
            _collect(item, roots, required_only)


# -- resolution -----------------------------------------------------------------------


@dataclass(frozen=True)
class Scope:
    """What expressions may read while one value is resolved.

    ``nodes`` holds the outputs of the nodes that succeeded (the latest instance of each);
    a node absent from it did not run. ``node`` is the id of the node whose value is being
    resolved, ``where`` a description used instead when no node asks (the graph output).
    """

    trigger: Any = None
    nodes: Mapping[str, Any] = field(default_factory=dict)
    state: Mapping[str, Any] = field(default_factory=dict)
    item: Any = None
    has_item: bool = False
    node: str | None = None
    where: str | None = None

    @property
    def subject(self) -> str:
        if self.where is not None:
            return self.where
        if self.node is not None:
            return f"node {self.node!r}"
        return "a value"


_MISSING = object()


def lookup(value: Any, segments: Sequence[str]) -> Any:
    """The value at ``segments`` inside ``value``, or a private sentinel when absent."""
    current = value
    for segment in segments:
        if isinstance(current, Mapping):
            if segment not in current:
                return _MISSING
            current = current[segment]
        elif isinstance(current, list | tuple) and segment.isdigit() and segment.isascii():
            index = int(segment)
            if index >= len(current):
                return _MISSING
            current = current[index]
        else:
            return _MISSING
    return current


def get_path(value: Any, path: str | Sequence[str], default: Any = None) -> Any:
    """The value at ``path`` inside ``value``, or ``default`` when any part is missing."""
    segments = parse_path(path) if isinstance(path, str) else path
    found = lookup(value, segments)
    return default if found is _MISSING else found


def _root_value(root: str, scope: Scope) -> Any:
    if root == TRIGGER:
        return scope.trigger
    if root == STATE:
        return scope.state
    if root == ITEM:
        if not scope.has_item:
            raise GraphValueError(
                f"{scope.subject} uses $item, which only exists in a for_each node's input",
                node=scope.node,
            )
        return scope.item
    if root not in scope.nodes:
        raise GraphValueError(
            f"{scope.subject} references node {root!r}, which has not succeeded in this run "
            "(it did not run, failed, or is on a branch that was not taken)",
            node=scope.node,
            missing=root,
        )
    return scope.nodes[root]


def _resolve_ref(expr: Mapping[str, Any], scope: Scope) -> Any:
    problems = check_syntax(expr, "$ref")
    if problems:
        raise GraphValueError(f"{scope.subject}: {problems[0]}", node=scope.node)
    root = expr[REF]
    has_default = "default" in expr
    if has_default and root not in SPECIAL_ROOTS and root not in scope.nodes:
        return expr["default"]
    base = _root_value(root, scope)
    found = lookup(base, parse_path(expr.get("path", "")))
    if found is _MISSING:
        return expr["default"] if has_default else None
    return found


def to_json_text(value: Any) -> str:
    """Compact JSON, the form in which non-strings are spliced into templates."""
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False, default=str)


def _resolve_template(expr: Mapping[str, Any], scope: Scope) -> str:
    try:
        parts = parse_template(expr[TEMPLATE])
    except ValueError as exc:
        raise GraphValueError(f"{scope.subject}: {exc}", node=scope.node) from None
    out: list[str] = []
    for part in parts:
        if isinstance(part, str):
            out.append(part)
            continue
        found = lookup(_root_value(part[0], scope), part[1:])
        value = None if found is _MISSING else found
        out.append(value if isinstance(value, str) else to_json_text(value))
    return "".join(out)


def resolve(value: Any, scope: Scope) -> Any:
    """``value`` with every expression replaced by what it points to; literals are copied,
    so the result never aliases the definition."""
    if isinstance(value, Mapping):
        if REF in value:
            return _resolve_ref(value, scope)
        if TEMPLATE in value:
            return _resolve_template(value, scope)
        return {key: resolve(item, scope) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [resolve(item, scope) for item in value]
    return value
