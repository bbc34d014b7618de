"""A run's tags: the rules every way of giving one checks (``engine.start(tags=)``,
``@app.workflow(tags=)``, ``wf.set_tags``, the CLI's ``--tag k=v``, HTTP's ``?tag=k:v``).

A tag is a short key and a string value that says what a run is for (``customer:
acme``), so that runs can be found by it: ``list_runs(tags={...})`` matches the runs that
carry every pair given, through an index on (key, value) in both stores. The limits keep
that index small and a run's tags readable in a list: at most ``MAX_TAGS`` tags, keys of
1 to ``MAX_KEY`` characters of ``[a-z0-9_.-]``, values strings of at most ``MAX_VALUE``.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Any, cast

#: the most tags a run carries
MAX_TAGS = 16
#: the longest key
MAX_KEY = 64
#: the longest value
MAX_VALUE = 256
_KEY = re.compile(r"[a-z0-9_.-]{1,64}\Z")


def check(tags: Any, what: str = "tags") -> dict[str, str]:
    """``tags`` as a plain dict, or ``ValueError`` naming the key (or the value) that
    breaks a rule. ``what`` names where they came from in the message."""
    if tags is None:
        return {}
    if not isinstance(tags, Mapping):
        raise ValueError(f"{what} must be a dict of str to str, got {type(tags).__name__}")
    checked: dict[str, str] = {}
    for key, value in cast("Mapping[object, object]", tags).items():
        if not isinstance(key, str) or not _KEY.match(key):
            raise ValueError(
                f"invalid tag key {key!r} in {what}: 1 to {MAX_KEY} characters of [a-z0-9_.-]"
            )
        if not isinstance(value, str):
            raise ValueError(
                f"invalid value of tag {key!r} in {what}: a str, got {type(value).__name__}"
            )
        if len(value) > MAX_VALUE or "\x00" in value:
            raise ValueError(
                f"invalid value of tag {key!r} in {what}: at most {MAX_VALUE} characters, no NUL"
            )
        checked[key] = value
    limit(checked, what)
    return checked


def limit(tags: Mapping[str, str], what: str = "tags") -> None:
    """``ValueError`` if ``tags`` (a run's tags once merged) are more than ``MAX_TAGS``."""
    if len(tags) > MAX_TAGS:
        raise ValueError(f"too many tags in {what}: {len(tags)} (at most {MAX_TAGS})")


def merge(*layers: Mapping[str, str] | None) -> dict[str, str]:
    """The tags of ``layers`` merged, a later layer's value winning for a key."""
    merged: dict[str, str] = {}
    for layer in layers:
        if layer:
            merged.update(layer)
    return merged


def add_pair(found: dict[str, str], key: str, value: str, sep: str, what: str) -> None:
    """Put one parsed pair into ``found``; a key given twice with two values is refused
    (``ValueError`` naming ``what``): a filter matches all its pairs, and a run holds one
    value per key, so one of the two would be dropped without a word."""
    before = found.get(key)
    if before is not None and before != value:
        raise ValueError(
            f"invalid {what}: key {key!r} given twice ({key}{sep}{before}, {key}{sep}{value})"
        )
    found[key] = value


def parse_pair(text: str, sep: str, what: str) -> tuple[str, str]:
    """One ``key<sep>value`` pair as the CLI (``k=v``) or HTTP (``k:v``) gives it, checked;
    ``ValueError`` naming ``what`` (the argument) and the text otherwise."""
    key, found, value = text.partition(sep)
    if not found:
        raise ValueError(f"invalid {what} {text!r}: expected key{sep}value")
    check({key: value}, what)
    return key, value


def dumps(tags: Mapping[str, str]) -> str | None:
    """Tags as stored (sorted JSON), or None for none."""
    return json.dumps(dict(sorted(tags.items())), separators=(",", ":")) if tags else None


def loads(text: str | None) -> dict[str, str]:
    """Stored tags as a dict."""
    if not text:
        return {}
    value = json.loads(text) if isinstance(text, str) else text
    return {str(k): str(v) for k, v in value.items()}
