"""What every concern of the Engine shares.

``Engine`` is put together from one mixin per concern (``actions``, ``approvals``,
``definitions``, ``fork``, ``operations``, ``queues``, ``schedules``, ``values``), so
that ``engine.approve(...)`` stays a method of the one object a user holds while its code
lives with its concern. Each mixin
is an ``EngineBase``: the collaborators ``Engine.__init__`` sets, declared once here so
every concern is type-checked against them, and the steps every concern takes (read a
run, tell this process and the others that work for a run arrived).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from datetime import timedelta
from typing import Any

from plait import serde
from plait.app import App
from plait.catalog import Catalog
from plait.clock import Clock
from plait.errors import RunNotFoundError
from plait.notify import Notifier
from plait.observe import Telemetry
from plait.records import Run
from plait.store.contract import Store
from plait.worker import Worker

#: a duration: seconds, a string such as ``"30s"``, or a ``timedelta``
Duration = float | str | timedelta
#: a workflow by name, or as the function ``@app.workflow`` registered
WorkflowRef = str | Callable[..., Awaitable[Any]]


def workflow_name(workflow: WorkflowRef) -> str:
    """The name ``workflow`` is registered under: a name is itself, a function is the
    name ``@app.workflow`` gave it (``TypeError`` for one it never registered)."""
    if isinstance(workflow, str):
        return workflow
    name = getattr(workflow, "__plait_workflow__", None)
    if not isinstance(name, str):
        raise TypeError(
            f"workflow name must be a string or a function registered with @app.workflow, "
            f"got {type(workflow).__name__} {workflow!r}"
        )
    return name


class EngineBase:
    """The state every concern of the Engine works with; ``Engine.__init__`` sets it and
    ``Engine.open`` builds the worker."""

    app: App
    store: Store
    #: where every stored time comes from; a test engine's clock is virtual
    clock: Clock
    limits: serde.Limits
    notifier: Notifier
    catalog: Catalog
    telemetry: Telemetry | None
    _worker: Worker | None

    @property
    def worker(self) -> Worker:
        """The loops of this process (only driving inline runs when ``workers=False``)."""
        if self._worker is None:
            raise RuntimeError("the engine is not open: use `async with Engine(...)`")
        return self._worker

    async def get_run(self, run_id: str) -> Run:
        run = await self.store.get_run(existing_id(run_id))
        if run is None:
            raise RunNotFoundError(run_id)
        return run

    def _wake(self, run_id: str) -> None:
        """The store just woke ``run_id`` (an event, a decision, a request, a reopen):
        wake the loops of every process, and the watchers of the run (the change did not
        end it)."""
        self.notifier.run_woken(run_id)

    async def _cancelled(self, moved: list[str]) -> None:
        """The store just cancelled the runs ``moved`` (a cancel, a fork that replaces
        its source): stop their work in this process, free their queues' slots, and
        tell their watchers once that work recorded how it ended."""
        self.worker.cancel_local(moved)
        # a cancelled run of a queue frees its slot (or its place in the line)
        self.notifier.publish_work()
        if self.telemetry is not None:
            for rid in moved:
                ended = await self.store.get_run(rid)
                self.telemetry.run_ended(rid, ended.workflow if ended else "?", "cancelled")
        # give this process's cancelled work a moment to record how it ended
        local = [t for rid in moved if (t := self.worker.driving.get(rid)) is not None]
        if local:
            await asyncio.wait(local, timeout=5.0)
        for rid in moved:
            self.notifier.run_changed(rid)


def existing_id(run_id: str) -> str:
    """``run_id`` if a run could have it, else ``RunNotFoundError``: no store even takes a
    NUL as part of a key, and an id that is not a string names no run."""
    if not isinstance(run_id, str) or "\x00" in run_id:
        raise RunNotFoundError(repr(run_id) if not isinstance(run_id, str) else run_id)
    return run_id
