"""Streams on PostgreSQL: append the entries step attempts wrote, read a stream. Offsets
are given under the run's row and stream lock (``functions/streams.sql``); a workflow's
own writes ride with its pass's batch (``commit``), resets and ends are written by
triggers."""

from __future__ import annotations

from collections.abc import Sequence

from plait.records import StreamEntry
from plait.statuses import RunStatusName, StepStatusName
from plait.store import convert
from plait.store.postgres.part import Part
from plait.store.rows import StreamWrite


class Streams(Part):
    """``append_stream``, ``read_stream`` and ``stream_names``."""

    async def append_stream(
        self, run_id: str, writes: Sequence[StreamWrite], live: Sequence[RunStatusName]
    ) -> int:
        written = await self._call(
            "fetchval",
            self._q["append_stream"],
            run_id,
            [w.stream for w in writes],
            [w.value for w in writes],
            [w.step_key for w in writes],
            [w.attempt for w in writes],
            list(live),
            self._now(),
        )
        return int(written or 0)

    async def read_stream(
        self, run_id: str, stream: str, after: int, limit: int, settled: StepStatusName | None
    ) -> list[StreamEntry]:
        if settled is None:
            rows = await self._call(
                "fetch", self._q["read_stream"], run_id, stream, after, limit, read=True
            )
        else:
            rows = await self._call(
                "fetch",
                self._q["read_stream_settled"],
                run_id,
                stream,
                after,
                limit,
                settled,
                read=True,
            )
        return [convert.stream_entry(tuple(r)) for r in rows]

    async def stream_names(self, run_id: str) -> list[str]:
        rows = await self._call("fetch", self._q["stream_names"], run_id, read=True)
        return [r[0] for r in rows]


__all__ = ["Streams"]
