"""Check: replay live runs (and the last ended ones) on the code deployed here, with no
step body run and nothing written, and say where each diverges (``runtime.check``).

Runs are read a page at a time, each page in one read (``Store.list_passes``), and
replayed one after the other. Graph runs are not checked: a graph run replays on the
definition it started on, stored with it, whatever the code registers now.
"""

from __future__ import annotations

import asyncio
from typing import get_args

from plait import serde
from plait.catalog import Catalog
from plait.engine.base import EngineBase
from plait.errors import WorkflowNotFoundError
from plait.records import TERMINAL, CheckResult, RunStatusName
from plait.runtime.check import DryHost, check_run
from plait.store.contract import Store
from plait.store.rows import RunFilter

#: runs read at once
PAGE = 500
#: the statuses of a run that has not ended (a queued run is checked once it has steps)
LIVE: tuple[RunStatusName, ...] = tuple(s for s in get_args(RunStatusName) if s not in TERMINAL)


class CheckMixin(EngineBase):
    """``Engine.check``."""

    async def check(
        self, *, workflow: str | None = None, include_ended: int = 0
    ) -> list[CheckResult]:
        """Replay every live run of a code workflow (running, suspended, and queued with
        recorded steps) on this engine's app, as a pass would (the version a run started
        on where the app still registers it, else the current code), with no step body
        run and nothing written: no lease is taken, no row changes, and workers running
        those runs are not disturbed. One result per run, in run id order: ``ok``, or the
        first step where the code takes another path or passes other input, and why.

        ``include_ended=N`` also replays the last N ended runs of each workflow (a
        regression check of recorded history); ``workflow`` checks that workflow only.
        Graph runs are not checked (they replay on the definition they started on)."""
        return await check_runs(
            self.store, self.catalog, self.limits, workflow=workflow, include_ended=include_ended
        )


async def check_runs(
    store: Store,
    catalog: Catalog,
    limits: serde.Limits,
    *,
    workflow: str | None = None,
    include_ended: int = 0,
) -> list[CheckResult]:
    """``Engine.check`` on ``store`` with the definitions of ``catalog`` (``plait check``
    opens a store for the command and checks it against the app it loaded)."""
    if isinstance(include_ended, bool) or not isinstance(include_ended, int) or include_ended < 0:
        raise ValueError(f"include_ended must be a whole number >= 0, got {include_ended!r}")
    registered = sorted(catalog.app.workflows)
    if workflow is not None and workflow not in catalog.app.workflows:
        raise WorkflowNotFoundError(workflow, registered)
    host = DryHost(catalog, limits, store.clock)
    others = await _other_apps_workflows(store, catalog)
    results: list[CheckResult] = []
    after = ""
    while True:
        page = await store.list_passes(LIVE, "workflow", workflow, after, PAGE)
        for snapshot in page:
            if snapshot.run.status == "queued" and not snapshot.steps:
                continue  # nothing recorded yet: it starts on the code deployed then
            if snapshot.run.workflow in others:
                continue  # another app's run on a shared database: that app checks it
            results.append(await check_run(host, snapshot))
        if len(page) < PAGE:
            break
        after = page[-1].run.id
    if include_ended:
        for name in [workflow] if workflow is not None else registered:
            for run_id in await _last_ended(store, name, include_ended):
                ended = await store.load_pass(run_id)
                if ended is not None and ended.run.kind == "workflow":
                    results.append(await check_run(host, ended))
    return results


async def _other_apps_workflows(store: Store, catalog: Catalog) -> frozenset[str]:
    """The workflows that only workers of other apps (by name) recorded themselves as
    working, and this app does not register: apps sharing a database each check their
    own runs. A workflow this app's own workers worked, or that no worker recorded, is
    this app's to answer for, so a release that drops a workflow with live runs is
    still named."""
    workers = await store.list_workers(0.0)
    own = catalog.app.name
    ours = {name for w in workers if w.app == own for name in w.workflows}
    theirs = {name for w in workers if w.app != own for name in w.workflows}
    return frozenset(theirs - ours - set(catalog.app.workflows))


async def _last_ended(store: Store, workflow: str, count: int) -> list[str]:
    """The ids of the last ``count`` ended runs of ``workflow``, newest first."""
    pages = await asyncio.gather(
        *(
            store.list_runs(RunFilter(workflow=workflow, status=status, limit=count))
            for status in sorted(TERMINAL)
        )
    )
    ended = sorted(
        (run for runs, _total in pages for run in runs),
        key=lambda run: (run.created_at, run.id),
        reverse=True,
    )
    return [run.id for run in ended[:count]]
