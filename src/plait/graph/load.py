"""Turning graph definitions (dict, JSON, YAML, ``Graph``, builder) into one model.

The loaders sit above the model and the checks and below the builder: a builder is taken
as anything that can give the dict form (``DictDefinition``), so this module never imports
the builder that imports it.

Problems that the model cannot even hold (a ``next`` that is a number, a node that is a
list) are collected here; everything the model can hold is left to ``validate``. When
there is anything of the first kind, the error also carries what ``validate`` finds in the
rest, so one round of edits fixes a definition.
"""

# This module walks JSON and YAML definitions whose every part is ``Any`` by nature: what
# each part is, it checks at run time, so pyright's rules about unknown types (not its
# other strict rules) are off here.
# pyright: reportUnknownVariableType=false, reportUnknownMemberType=false
# pyright: reportUnknownArgumentType=false

from __future__ import annotations

import json
import math
import os
from collections.abc import Mapping
from datetime import timedelta
from difflib import get_close_matches
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

from plait.graph.checks import validate, validate_function
from plait.graph.errors import GraphValidationError
from plait.graph.model import Branch, Graph, Next, Node

GRAPH_KEYS = ("nodes", "entry", "output")
NODE_KEYS = (
    "function",
    "input",
    "next",
    "on_error",
    "retries",
    "retry_delay",
    "timeout",
    "for_each",
    "mode",
)
_FILE_SUFFIXES = (".json", ".yaml", ".yml")


@runtime_checkable
class DictDefinition(Protocol):
    """A definition that can give its dict form, such as a ``GraphBuilder``; named by what
    ``load_graph`` needs so the loader does not have to import the builder."""

    def to_dict(self) -> Mapping[str, Any]: ...


def graph_from_dict(name: str, data: Any) -> Graph:
    """The model of a dict definition; ``GraphValidationError`` with every problem found."""
    return _build(name, data, [])


def graph_from_json(name: str, text_or_path: str | os.PathLike[str]) -> Graph:
    """The model of JSON text or a .json file; duplicate keys are problems, not overrides."""
    text = _read(text_or_path)
    duplicates: list[str] = []

    def pairs(items: list[tuple[str, Any]]) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for key, value in items:
            if key in out:
                duplicates.append(f"duplicate key {key!r} in the JSON definition")
            out[key] = value
        return out

    try:
        data = json.loads(text, object_pairs_hook=pairs)
    except json.JSONDecodeError as exc:
        raise GraphValidationError(
            name, [f"invalid JSON: {exc.msg} (line {exc.lineno}, column {exc.colno})"]
        ) from None
    return _build(name, data, duplicates)


def graph_from_yaml(name: str, text_or_path: str | os.PathLike[str]) -> Graph:
    """The model of YAML text or a .yaml/.yml file (safe loading; duplicate keys are
    problems, not overrides)."""
    from plait.graph import yaml_text  # PyYAML is loaded for graphs written in YAML only

    text = _read(text_or_path)
    try:
        data, duplicates = yaml_text.parse(text)
    except yaml_text.InvalidYAML as exc:
        raise GraphValidationError(name, [str(exc)]) from None
    return _build(name, data, duplicates)


def load_graph(name: str, definition: Any) -> Graph:
    """Any supported definition as a ``Graph`` named ``name``: a ``Graph`` (renamed if
    needed), a builder, a mapping, a path to a .json/.yaml/.yml file, or JSON/YAML text."""
    if isinstance(definition, Graph):
        if definition.name == name:
            return definition
        return Graph(name, definition.nodes, definition.entry, definition.output)
    if isinstance(definition, DictDefinition):
        return graph_from_dict(name, definition.to_dict())
    if isinstance(definition, Mapping):
        return graph_from_dict(name, definition)
    if isinstance(definition, os.PathLike) or (
        isinstance(definition, str) and _looks_like_path(definition)
    ):
        suffix = Path(definition).suffix.lower()
        if suffix == ".json":
            return graph_from_json(name, Path(definition))
        return graph_from_yaml(name, Path(definition))
    if isinstance(definition, str):
        if definition.lstrip().startswith("{"):
            return graph_from_json(name, definition)
        return graph_from_yaml(name, definition)
    raise TypeError(
        f"graph {name!r}: a definition must be a dict, a Graph, a GraphBuilder, a file path "
        f"or JSON/YAML text, got {type(definition).__name__}"
    )


def _looks_like_path(text: str) -> bool:
    if "\n" in text or text.lstrip().startswith("{"):
        return False
    return text.lower().endswith(_FILE_SUFFIXES) or os.path.isfile(text)


def _read(text_or_path: str | os.PathLike[str]) -> str:
    if isinstance(text_or_path, os.PathLike) or _looks_like_path(text_or_path):
        return Path(text_or_path).read_text(encoding="utf-8")
    return text_or_path


# -- the dict form ----------------------------------------------------------------------


def _build(name: str, data: Any, problems: list[str]) -> Graph:
    if not isinstance(name, str) or not name:
        raise TypeError(f"a graph name must be a non-empty string, got {name!r}")
    problems = list(problems)
    if not isinstance(data, Mapping):
        problems.append(f"the definition must be a mapping with 'nodes', got {type(data).__name__}")
        raise GraphValidationError(name, problems)
    for key in data:
        if key not in GRAPH_KEYS:
            problems.append(f"unknown top-level key {key!r}{_hint(key, GRAPH_KEYS)}")

    nodes: dict[str, Node] = {}
    no_function: set[str] = set()
    raw_nodes = data.get("nodes")
    if raw_nodes is None:
        problems.append("the definition has no 'nodes'")
    elif not isinstance(raw_nodes, Mapping):
        problems.append(f"'nodes' must be a mapping of node id to node, got {_kind(raw_nodes)}")
    else:
        for node_id, raw in raw_nodes.items():
            if not isinstance(node_id, str):
                problems.append(f"node id {node_id!r} must be a string")
                continue
            node = _parse_node(node_id, raw, problems, no_function)
            if node is not None:
                nodes[node_id] = node

    entry = _parse_ids(data.get("entry"), "entry", problems)
    output = _json_value(data.get("output"), "output", problems)
    graph = Graph(name, nodes, entry, output)
    if problems:
        # A function of the wrong type was reported above; "has no function" again
        # would only repeat it.
        repeated = {validate_function(nid, None) for nid in no_function}
        more = [p for p in validate(graph) if p not in problems and p not in repeated]
        raise GraphValidationError(name, problems + more)
    return graph


def _parse_node(node_id: str, raw: Any, problems: list[str], no_function: set[str]) -> Node | None:
    where = f"node {node_id!r}"
    if isinstance(raw, str):  # shorthand: "alert": "page_oncall"
        raw = {"function": raw}
    if raw is None:
        raw = {}
    if not isinstance(raw, Mapping):
        problems.append(f"{where} must be a mapping (or a function name), got {_kind(raw)}")
        return None
    for key in raw:
        if key not in NODE_KEYS:
            problems.append(f"{where}: unknown key {key!r}{_hint(key, NODE_KEYS)}")

    function = raw.get("function")
    if function is not None and not isinstance(function, str):
        problems.append(f"{where}: function must be a string, got {_kind(function)}")
        no_function.add(node_id)
        function = None

    retries = raw.get("retries")
    if retries is not None and (isinstance(retries, bool) or not isinstance(retries, int)):
        problems.append(f"{where}: retries must be a whole number, got {retries!r}")
        retries = None

    timing: dict[str, float | str | None] = {}
    for key in ("retry_delay", "timeout"):
        value = raw.get(key)
        if isinstance(value, timedelta):
            value = value.total_seconds()  # a definition is JSON: stored as seconds
        if value is not None and (
            isinstance(value, bool) or not isinstance(value, int | float | str)
        ):
            problems.append(f"{where}: {key} must be seconds or a duration string, got {value!r}")
            value = None
        timing[key] = value

    mode = raw.get("mode")
    if mode is not None and not isinstance(mode, str):
        problems.append(f"{where}: mode must be 'parallel' or 'sequential', got {mode!r}")
        mode = None
    for_each = _json_value(raw.get("for_each"), f"{where} for_each", problems)
    if for_each is not None and mode is None:
        mode = "parallel"

    on_error = _parse_ids(raw.get("on_error"), f"{where} on_error", problems)
    return Node(
        id=node_id,
        function=function,
        input=_json_value(raw.get("input"), f"{where} input", problems),
        next=_parse_next(raw.get("next"), where, problems),
        on_error=on_error or (),
        retries=retries,
        retry_delay=timing["retry_delay"],
        timeout=timing["timeout"],
        for_each=for_each,
        mode=mode,
    )


def _parse_ids(raw: Any, where: str, problems: list[str]) -> tuple[str, ...] | None:
    """A node id or a list of them; None when absent."""
    if raw is None:
        return None
    if isinstance(raw, str):
        return (raw,)
    if isinstance(raw, list | tuple):
        ids: list[str] = []
        for item in raw:
            if isinstance(item, str):
                if item not in ids:
                    ids.append(item)
            else:
                problems.append(f"{where}: {item!r} is not a node id (a string)")
        return tuple(ids)
    problems.append(f"{where} must be a node id or a list of node ids, got {_kind(raw)}")
    return None


def _parse_next(raw: Any, where: str, problems: list[str]) -> Next:
    if raw is None:
        return None
    if not isinstance(raw, Mapping):
        ids = _parse_ids(raw, f"{where} next", problems)
        return ids or None
    if "$branch" in raw:
        return _parse_value_branch(raw, where, problems)
    cases: dict[str, tuple[str, ...]] = {}
    for key, targets in raw.items():
        if not isinstance(key, str):
            problems.append(
                f"{where}: branch key {key!r} in next must be a string (quote it in YAML)"
            )
            continue
        cases[key] = _parse_ids(targets, f"{where} next (branch {key!r})", problems) or ()
    return Branch(cases) if cases else None


def _parse_value_branch(raw: Mapping[str, Any], where: str, problems: list[str]) -> Next:
    for key in raw:
        if key not in ("$branch", "cases", "default"):
            problems.append(
                f"{where}: unknown key {key!r} in a $branch next (allowed: $branch, cases, default)"
            )
    path = raw["$branch"]
    if not isinstance(path, str):
        problems.append(f"{where}: $branch must be a path string, got {_kind(path)}")
        return None
    raw_cases = raw.get("cases", {})
    if not isinstance(raw_cases, Mapping):
        problems.append(f"{where}: $branch cases must be a mapping, got {_kind(raw_cases)}")
        return None
    cases: dict[str, tuple[str, ...]] = {}
    for key, targets in raw_cases.items():
        if isinstance(key, bool) or key is None or isinstance(key, int | float):
            key = json.dumps(key)  # YAML turns `true:` and `3:` into non-strings
        if not isinstance(key, str):
            problems.append(f"{where}: $branch case {key!r} must be a string")
            continue
        cases[key] = _parse_ids(targets, f"{where} next (case {key!r})", problems) or ()
    if "default" in raw:
        if "default" in cases:
            problems.append(f"{where}: $branch has a default both in cases and beside them")
        else:
            cases["default"] = _parse_ids(raw["default"], f"{where} next default", problems) or ()
    return Branch(cases, path=path)


def _json_value(value: Any, where: str, problems: list[str]) -> Any:
    """A fresh copy of ``value`` as plain JSON data (tuples become lists), so the model
    never shares mutable state with the caller and always hashes."""
    if value is None or isinstance(value, str | bool | int):
        return value
    if isinstance(value, float):
        if not math.isfinite(value):
            problems.append(f"{where}: {value!r} is not a JSON number")
        return value
    if isinstance(value, Mapping):
        out: dict[str, Any] = {}
        for key, item in value.items():
            if not isinstance(key, str):
                problems.append(f"{where}: key {key!r} is not a string (JSON keys are)")
                continue
            out[key] = _json_value(item, f"{where}.{key}", problems)
        return out
    if isinstance(value, list | tuple):
        return [_json_value(item, f"{where}[{i}]", problems) for i, item in enumerate(value)]
    problems.append(f"{where}: {_kind(value)} is not JSON data")
    return None


def _kind(value: Any) -> str:
    return type(value).__name__


def _hint(key: Any, allowed: tuple[str, ...]) -> str:
    if not isinstance(key, str):
        return ""
    snake = "".join(f"_{c.lower()}" if c.isupper() else c for c in key)
    if snake in allowed:
        return f" (did you mean {snake!r}?)"
    close = get_close_matches(key, allowed, n=1)
    return f" (did you mean {close[0]!r}?)" if close else f" (allowed: {', '.join(allowed)})"
