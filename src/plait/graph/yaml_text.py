"""YAML text to plain data, duplicate keys noted rather than the last one winning.

A module of its own so that PyYAML is imported only when a graph is written in YAML: it
costs every process that imports plait (a worker restarting after a crash included)
about a tenth of its start-up.
"""

# PyYAML's stubs leave a node's type open: what a node holds is only known at run time.
# pyright: reportUnknownMemberType=false

from __future__ import annotations

from typing import Any

import yaml


class InvalidYAML(ValueError):
    """The text is not YAML; the message says where."""


class _Loader(yaml.SafeLoader):
    """Safe YAML that notes duplicate keys instead of letting the last one win silently."""

    duplicates: list[str]


def _construct_mapping(loader: _Loader, node: yaml.MappingNode, deep: bool = False) -> Any:
    seen: set[Any] = set()
    for key_node, _ in node.value:
        key = loader.construct_object(key_node, deep=True)
        try:
            is_duplicate = key in seen
        except TypeError:
            continue
        if is_duplicate:
            line = key_node.start_mark.line + 1
            loader.duplicates.append(f"duplicate key {key!r} in the YAML definition (line {line})")
        seen.add(key)
    return yaml.SafeLoader.construct_mapping(loader, node, deep=deep)


_Loader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _construct_mapping)


def parse(text: str) -> tuple[Any, list[str]]:
    """The data of ``text`` (safe loading) and its duplicate keys, each described."""
    loader = _Loader(text)
    loader.duplicates = []
    try:
        return loader.get_single_data(), loader.duplicates
    except yaml.YAMLError as exc:
        raise InvalidYAML(f"invalid YAML: {exc}") from None
    finally:
        loader.dispose()
