"""Acting on many runs at once: ``cancel_runs``, ``retry_runs``, ``resume_runs``.

The runs a filter matches are read first (only those created before the call: a run
started meanwhile is not one the caller saw), then acted on in batches of ``BATCH``
(``IN_FLIGHT`` at a time), each run through the same transition a single
``cancel``/``retry``/``resume`` writes. A matched run is acted on once; one that is not in
a state the action applies to by its turn (it ended, or was retried by someone else) is
skipped and not counted.

A child run whose parent is matched too goes with its parent (``grouped``): a parent's
cancel ends its children with it, and a parent's retry starts its failed child step again
as a new child run. Acted on by itself as well, a cancelled child would first fail its
parent's step (the parent compensating and ending ``failed``, not ``cancelled``), and a
retried child would run the work its parent's new child runs again. A cancel counts the
matched children its parents' cancels ended; a retry counts the runs it retried.

Batches are paced to ``rate`` runs a second (``DEFAULT_RATE``). Acting is cheap; what a
retried or resumed run does next is not: 5,000 runs made due at once would take every
worker's slots and the store's writer for as long as they run, and the live runs' steps
would wait behind them. Paced, they are worked beside the live runs instead of ahead of
them (``benchmarks/bulk_retry.py`` measures the difference).
"""

from __future__ import annotations

import asyncio
import math
import time
from collections.abc import Callable, Iterator, Mapping
from datetime import datetime
from typing import Any, Literal

from plait.durations import require_aware
from plait.engine.actions import ActionsMixin
from plait.engine.filters import run_filter
from plait.errors import RunNotFoundError, RunStateError
from plait.records import RunStatus
from plait.runtime import runs
from plait.statuses import STEP_IN_FLIGHT, RunStatusName

#: runs acted on per batch before the bulk action yields to other work
BATCH = 10
#: runs acted on per second at most, unless the caller gives another ``rate``
DEFAULT_RATE = 200.0
#: of a batch, the runs acted on at once: each action is a transaction of its own, and a
#: few at a time keep the writer's queue short for the live work's commits
IN_FLIGHT = 4
#: runs read per page while the filter's matches are collected
_PAGE = 1000
#: what each action applies to: a run in another status is skipped
BulkAction = Literal["cancel", "retry", "resume"]
APPLIES: dict[BulkAction, frozenset[RunStatusName]] = {
    "cancel": runs.CANCELLABLE,
    "retry": runs.RETRYABLE,
    "resume": frozenset({"suspended"}),
}
#: the filters a bulk action takes (``list_runs``'s and a created-time range)
FILTERS = (
    "workflow",
    "status",
    "version",
    "owner",
    "visible_to",
    "since",
    "until",
    "tags",
    "queue",
)
#: called after each batch with (done, matched)
Progress = Callable[[int, int], None]


class BulkMixin(ActionsMixin):
    """``Engine.cancel_runs``, ``retry_runs``, ``resume_runs`` and ``match_runs``."""

    async def cancel_runs(
        self,
        *,
        workflow: str | None = None,
        status: RunStatus | RunStatusName | None = None,
        version: str | None = None,
        owner: str | None = None,
        visible_to: str | None = None,
        since: datetime | float | None = None,
        until: datetime | float | None = None,
        tags: Mapping[str, str] | None = None,
        queue: str | None = None,
        reason: str | None = None,
        progress: Progress | None = None,
        rate: float | None = DEFAULT_RATE,
    ) -> int:
        """Cancel every live run the filters match (``list_runs``'s, plus ``since`` /
        ``until`` on the created time, ``tags`` and ``queue``); returns how many were
        cancelled. At most ``rate`` runs a second (None: as fast as the store takes)."""
        filters = _given(locals())
        return await self._bulk("cancel", filters, progress, rate, reason)

    async def retry_runs(
        self,
        *,
        workflow: str | None = None,
        status: RunStatus | RunStatusName | None = None,
        version: str | None = None,
        owner: str | None = None,
        visible_to: str | None = None,
        since: datetime | float | None = None,
        until: datetime | float | None = None,
        tags: Mapping[str, str] | None = None,
        queue: str | None = None,
        progress: Progress | None = None,
        rate: float | None = DEFAULT_RATE,
    ) -> int:
        """Retry every failed or needs_attention run the filters match; returns how many
        were retried. At most ``rate`` runs a second: each retried run goes to work."""
        return await self._bulk("retry", _given(locals()), progress, rate)

    async def resume_runs(
        self,
        *,
        workflow: str | None = None,
        status: RunStatus | RunStatusName | None = None,
        version: str | None = None,
        owner: str | None = None,
        visible_to: str | None = None,
        since: datetime | float | None = None,
        until: datetime | float | None = None,
        tags: Mapping[str, str] | None = None,
        queue: str | None = None,
        progress: Progress | None = None,
        rate: float | None = DEFAULT_RATE,
    ) -> int:
        """Resume every suspended run the filters match; returns how many were resumed.
        At most ``rate`` runs a second."""
        return await self._bulk("resume", _given(locals()), progress, rate)

    async def act_on_runs(
        self,
        action: BulkAction,
        *,
        progress: Progress | None = None,
        rate: float | None = DEFAULT_RATE,
        **filters: Any,
    ) -> int:
        """``cancel_runs``, ``retry_runs`` or ``resume_runs`` by the action's name."""
        if action not in APPLIES:
            raise ValueError(f"invalid action {action!r} (use cancel, retry or resume)")
        reason = filters.pop("reason", None) if action == "cancel" else None
        return await self._bulk(action, filters, progress, rate, reason)

    async def match_runs(self, action: BulkAction, **filters: Any) -> list[str]:
        """The ids of the runs ``action`` would act on now (the filters of
        ``cancel_runs``), newest first: what a bulk action counts before it asks."""
        return [run_id for run_id, _parent in await self._matched(action, filters)]

    async def _matched(
        self, action: BulkAction, filters: dict[str, Any]
    ) -> list[tuple[str, str | None]]:
        """The matches of ``match_runs``, each with its parent run's id."""
        if action not in APPLIES:
            raise ValueError(f"invalid action {action!r} (use cancel, retry or resume)")
        unknown = sorted(set(filters) - set(FILTERS))
        if unknown:
            raise ValueError(f"unknown filter {unknown[0]!r} (use {', '.join(FILTERS)})")
        given = {k: v for k, v in filters.items() if v is not None}
        given["created_after"] = _bound("since", given.pop("since", None))
        given["created_before"] = _bound("until", given.pop("until", None))
        if given["created_before"] is None:
            # not the runs started from now on, by the clock that stamps them (a test
            # engine's stands still while runs wait: the runs stamped this instant count,
            # to the microsecond that filters keep)
            given["created_before"] = self.clock.now() + 1e-6
        statuses: list[str] = sorted(APPLIES[action])
        wanted = given.pop("status", None)
        if wanted is not None:
            run_filter({"status": wanted})  # a bad status is refused naming it
            if wanted not in statuses:
                return []
            statuses = [str(wanted)]
        found: list[tuple[str, str | None]] = []
        seen: set[str] = set()
        for status in statuses:
            offset = 0
            while True:
                where = run_filter({**given, "status": status, "limit": _PAGE, "offset": offset})
                page, _total = await self.store.list_run_summaries(where)
                for run in page:
                    if run.id not in seen:
                        seen.add(run.id)
                        found.append((run.id, run.parent_run_id))
                if len(page) < _PAGE:
                    break
                offset += _PAGE
        return found

    async def _bulk(
        self,
        action: BulkAction,
        filters: dict[str, Any],
        progress: Progress | None,
        rate: float | None,
        reason: str | None = None,
    ) -> int:
        pace = checked_rate(rate)
        if progress is not None and not callable(progress):
            raise TypeError(f"progress must be callable (done, total), got {progress!r}")
        runs.check_reason(reason)
        groups = grouped(await self._with_parents(action, await self._matched(action, filters)))
        matched = {run_id for group in groups.values() for run_id in group}
        run_ids = list(groups)
        done = acted = 0
        began = time.monotonic()
        for start in range(0, len(run_ids), BATCH):
            if pace is not None:
                await wait_for_turn(began + start / pace)
            batch = run_ids[start : start + BATCH]
            lanes = iter(batch)
            counts = await asyncio.gather(
                *(self._act_on(action, lanes, reason, matched) for _ in range(IN_FLIGHT))
            )
            acted += sum(counts)
            done += sum(len(groups[run_id]) for run_id in batch)
            if progress is not None:
                progress(done, len(matched))
            await asyncio.sleep(0)  # live work of this process goes on between batches
        return acted

    async def _with_parents(
        self, action: BulkAction, matches: list[tuple[str, str | None]]
    ) -> list[tuple[str, str | None]]:
        """``matches`` with the parent kept only where the parent's action takes care of
        the child too. A cancel ends a run's children with it. A retry acts on a child of
        a matched parent only while the parent still waits for it (a parked child, say):
        any other (the child of a step that failed, which the parent's retry runs again
        as a new child; an earlier child of a step retried since) would do work whose
        result reaches no one. A resume never reaches a child: each run is resumed."""
        if action == "resume":
            return [(run_id, None) for run_id, _parent in matches]
        if action != "retry":
            return matches
        matched = {run_id for run_id, _parent in matches}
        waited: dict[str, set[str]] = {}
        kept: list[tuple[str, str | None]] = []
        for run_id, parent in matches:
            if parent is not None and parent in matched:
                if parent not in waited:
                    waited[parent] = {
                        step.child_run_id
                        for step in await self.store.get_steps(parent)
                        if step.child_run_id is not None and step.status in STEP_IN_FLIGHT
                    }
                if run_id in waited[parent]:
                    parent = None
            kept.append((run_id, parent))
        return kept

    async def _act_on(
        self, action: BulkAction, run_ids: Iterator[str], reason: str | None, matched: set[str]
    ) -> int:
        """Act on runs taken one after another from ``run_ids`` (shared by the lanes of a
        batch); how many of the ``matched`` runs were acted on."""
        acted = 0
        for run_id in run_ids:
            acted += await self._act_once(action, run_id, reason, matched)
        return acted

    async def _act_once(
        self, action: BulkAction, run_id: str, reason: str | None, matched: set[str]
    ) -> int:
        """Act on one matched run: how many of the ``matched`` runs that ended or went on
        (a cancel ends the run's children with it); 0 if it is no longer in a state the
        action applies to (or gone)."""
        try:
            if action == "cancel":
                moved = await self._cancel_one(run_id, reason)
                return len(matched.intersection(moved)) if run_id in moved else 0
            if action == "retry":
                await self.retry(run_id)
            else:
                await self.resume(run_id)
        except (RunStateError, RunNotFoundError):
            return 0
        return 1


def grouped(matches: list[tuple[str, str | None]]) -> dict[str, list[str]]:
    """The matched runs to act on (in the order matched), each with the matched runs
    that go with it: itself and its matched descendants, reached through matched
    parents. A run whose parent is matched too is left to its parent's action."""
    parents = dict(matches)
    groups: dict[str, list[str]] = {
        run_id: [] for run_id, parent in matches if parent not in parents
    }
    for run_id, _parent in matches:
        top = run_id
        while (above := parents.get(top)) is not None and above in parents:
            top = above
        groups[top].append(run_id)
    return groups


async def wait_for_turn(at: float) -> None:
    """Sleep until the monotonic clock reads ``at``: a batch's turn at the bulk's pace."""
    ahead = at - time.monotonic()
    if ahead > 0:
        await asyncio.sleep(ahead)


def _bound(name: str, value: object) -> float | None:
    """``since`` or ``until`` as epoch seconds; a datetime with no time zone is refused,
    as ``start_at`` is (``require_aware``): it would act on runs the caller meant to
    leave alone."""
    if value is None:
        return None
    if isinstance(value, datetime):
        require_aware(value, what=name)
        try:
            return value.timestamp()
        except (OverflowError, ValueError):
            raise ValueError(f"invalid {name}: {value!r} (out of range)") from None
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise ValueError(f"invalid {name}: {value!r} (an aware datetime or epoch seconds)")
    return float(value)


def checked_rate(rate: object) -> float | None:
    """``rate`` as runs per second, or None for no pacing; anything else is refused
    naming it (a rate of 0 would never finish)."""
    if rate is None:
        return None
    if (
        isinstance(rate, bool)
        or not isinstance(rate, int | float)
        or not math.isfinite(rate)
        or rate <= 0
    ):
        raise ValueError(f"invalid rate: {rate!r} (runs per second, a number above 0, or None)")
    return float(rate)


def _given(arguments: dict[str, Any]) -> dict[str, Any]:
    """The filters among a bulk method's arguments."""
    return {name: arguments[name] for name in FILTERS}
