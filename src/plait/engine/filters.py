"""The filters of ``Engine.count_runs`` and ``run_summaries`` (and so ``list_runs``),
checked and turned into the store's ``RunFilter`` before any store sees them."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from plait import tags as tag_rules
from plait.records import RunStatus
from plait.store.rows import RunFilter

_RUN_STATUSES = tuple(RunStatus)
#: the largest ``offset`` and ``limit`` a store is asked for (both stores count in 64 bits)
_MAX_PAGE_NUMBER = 2**62


def run_filter(filters: dict[str, Any]) -> RunFilter:
    """The store's filter for ``filters``, or ``ValueError`` naming a bad one."""
    status = filters.get("status")
    if status is not None and status not in _RUN_STATUSES:
        raise ValueError(
            f"invalid status filter: {status!r} (use one of {', '.join(_RUN_STATUSES)})"
        )
    for name, default in (("limit", 50), ("offset", 0)):
        value = filters.get(name, default)
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise ValueError(f"invalid {name}: {value!r}")
        if value > _MAX_PAGE_NUMBER:
            raise ValueError(f"invalid {name}: {value!r} (at most {_MAX_PAGE_NUMBER})")
    tags = filters.get("tags")
    if tags is not None:
        checked = tag_rules.check(tags, "tags filter")
        filters["tags"] = tuple(sorted(checked.items())) or None
    for name in (
        "workflow",
        "version",
        "owner",
        "visible_to",
        "parent_run_id",
        "id_contains",
        "queue",
    ):
        value = filters.get(name)
        if value is not None and (not isinstance(value, str) or "\x00" in value):
            raise ValueError(f"invalid {name} filter: {value!r}")
        if value == "" and name != "id_contains":
            # no name is empty: the filter would match nothing, and a bulk action
            # meant for "every run" (the unnamed default) would quietly do nothing
            raise ValueError(f"invalid {name} filter: '' (no run has an empty {name})")
    for name in ("created_after", "created_before"):
        value = filters.get(name)
        if isinstance(value, datetime):
            # a time without a zone is UTC, as every time plait stores
            stamp = value if value.tzinfo else value.replace(tzinfo=UTC)
            try:
                filters[name] = stamp.timestamp()
            except (OverflowError, ValueError):
                raise ValueError(f"invalid {name} filter: {value!r} (out of range)") from None
        elif value is not None and (
            isinstance(value, bool) or not isinstance(value, int | float) or value != value
        ):
            raise ValueError(f"invalid {name} filter: {value!r} (a datetime or epoch seconds)")
    for name in ("top_level", "hide_continued", "visible_schedule_runs"):
        if not isinstance(filters.get(name, False), bool):
            raise ValueError(f"invalid {name} filter: {filters[name]!r} (True or False)")
    return RunFilter(**filters)
