"""The stream writer of a process: the entries step bodies write (``ctx.stream``) go to
the store in shared commits.

A step that streams a model's tokens writes hundreds of small entries, each of which must
reach its readers at once. Committing each alone would cost a transaction an entry, so
``write`` only queues the entry and wakes one flusher task; while a flush is being
committed the next entries gather, and the next flush takes them all (on SQLite the
flushes of every run share the writer's group commit as well). An attempt's end waits
for its entries (``flush``), so a failed attempt's ``reset`` always follows them.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence
from typing import get_args

from plait import serde
from plait.statuses import TERMINAL, RunStatusName
from plait.store.rows import StreamWrite

#: the statuses of a run whose steps may still write to its streams
LIVE: tuple[RunStatusName, ...] = tuple(s for s in get_args(RunStatusName) if s not in TERMINAL)
#: entries queued for one run past which ``write`` waits for them to commit (a body that
#: writes faster than the store commits is held back instead of filling memory)
MAX_QUEUED = 1000

Append = Callable[[str, Sequence[StreamWrite], Sequence[RunStatusName]], Awaitable[int]]


class StreamWriter:
    """Queues the entries step attempts write, and commits them in batches."""

    def __init__(
        self, append: Append, written: Callable[[str], None], limits: serde.Limits
    ) -> None:
        #: ``Store.append_stream``
        self._append = append
        #: told of each run whose entries just committed (its watchers wake)
        self._written = written
        self.limits = limits
        #: per run, the entries not yet handed to the store
        self._queued: dict[str, list[StreamWrite]] = {}
        #: the runs whose entries the flush in progress is committing
        self._flushing: set[str] = set()
        #: per run, why its last flush failed (raised by the next ``flush`` of the run)
        self._failed: dict[str, BaseException] = {}
        self._task: asyncio.Task[None] | None = None
        #: set at the end of each flush
        self._flushed = asyncio.Event()

    async def write(
        self, run_id: str, stream: str, value: str | None, step_key: str, attempt: int
    ) -> None:
        queued = self._queued.setdefault(run_id, [])
        queued.append(StreamWrite(stream, value, step_key, attempt))
        self._start()
        if len(queued) >= MAX_QUEUED:
            await self.flush(run_id)

    async def flush(self, run_id: str) -> None:
        """Wait until every entry written for ``run_id`` so far has been committed;
        raise what kept a flush of them out."""
        while run_id in self._queued or run_id in self._flushing:
            self._start()
            self._flushed.clear()
            await self._flushed.wait()
        error = self._failed.pop(run_id, None)
        if error is not None:
            raise error

    def pending(self) -> int:
        """How many entries wait to be committed (for shutdown checks and tests)."""
        return sum(len(q) for q in self._queued.values())

    def _start(self) -> None:
        if self._task is None or self._task.done():
            self._task = asyncio.get_running_loop().create_task(
                self._run(), name="plait-stream-writer"
            )

    async def _run(self) -> None:
        while self._queued:
            batch, self._queued = self._queued, {}
            self._flushing = set(batch)
            try:
                results = await asyncio.gather(
                    *(self._append(run_id, writes, LIVE) for run_id, writes in batch.items()),
                    return_exceptions=True,
                )
                for run_id, result in zip(batch, results, strict=True):
                    if isinstance(result, BaseException):
                        self._failed[run_id] = result
                    elif result:
                        self._written(run_id)
            finally:
                self._flushing = set()
                self._flushed.set()


__all__ = ["LIVE", "MAX_QUEUED", "StreamWriter"]
