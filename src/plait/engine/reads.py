"""Reading runs: lists, pages with totals, a run's steps, attempts and children, and the
marks a follower compares (``get_run``, which every concern reads first, is
``EngineBase``'s)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from plait.engine.base import EngineBase
from plait.engine.filters import run_filter
from plait.records import Run, RunStatus, RunSummary, Step, StepAttempt
from plait.statuses import RunStatusName


class ReadsMixin(EngineBase):
    """``Engine.list_runs``, ``count_runs``, ``run_summaries``, ``get_steps``,
    ``get_history``, ``get_children`` and ``run_marks``."""

    async def list_runs(
        self,
        *,
        workflow: str | None = None,
        status: RunStatus | RunStatusName | None = None,
        version: str | None = None,
        owner: str | None = None,
        visible_to: str | None = None,
        hide_continued: bool = False,
        tags: Mapping[str, str] | None = None,
        queue: str | None = None,
        limit: int = 50,
        offset: int = 0,
    ) -> list[Run]:
        """Runs newest first. ``hide_continued`` leaves out the runs that continued as
        new: of each chain, only its last run is listed. ``tags``: every pair given."""
        runs, _total = await self.count_runs(
            workflow=workflow,
            status=status,
            version=version,
            owner=owner,
            visible_to=visible_to,
            hide_continued=hide_continued,
            tags=tags,
            queue=queue,
            limit=limit,
            offset=offset,
        )
        return runs

    async def count_runs(self, **filters: Any) -> tuple[list[Run], int]:
        """Runs newest first plus the total that match the filters (for paging)."""
        return await self.store.list_runs(run_filter(filters))

    async def run_summaries(self, **filters: Any) -> tuple[list[RunSummary], int]:
        """Like ``count_runs``, but each run without its input, output and error: a page
        of these costs the same whatever the runs carry (lists, dashboards)."""
        return await self.store.list_run_summaries(run_filter(filters))

    async def get_steps(self, run_id: str) -> list[Step]:
        await self.get_run(run_id)
        return await self.store.get_steps(run_id)

    async def get_history(self, run_id: str) -> list[StepAttempt]:
        await self.get_run(run_id)
        return await self.store.get_history(run_id)

    async def get_children(self, run_id: str) -> list[Run]:
        return await self.store.get_children(run_id)

    async def run_marks(self, run_id: str) -> tuple[Any, ...] | None:
        """Marks that change whenever the run, its steps, values, decisions or children
        change (None: no such run), read without reading any of them. Compare two for
        equality only: a follower reads the run again only when they differ."""
        return await self.store.run_marks(run_id)
