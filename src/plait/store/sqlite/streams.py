"""Streams on SQLite: append the entries step attempts wrote, read a stream. The one
writer connection gives every stream's offsets in commit order; a workflow's own writes
ride with its pass's batch (``apply``), resets and ends are written by triggers."""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence

from plait.records import StreamEntry
from plait.statuses import RunStatusName, StepStatusName
from plait.store import convert
from plait.store.rows import StreamWrite
from plait.store.sqlite.part import Part
from plait.store.sqlite.writer import SQL


class Streams(Part):
    """``append_stream``, ``read_stream`` and ``stream_names``."""

    async def append_stream(
        self, run_id: str, writes: Sequence[StreamWrite], live: Sequence[RunStatusName]
    ) -> int:
        # one write of the file's writer: its group commit shares a commit among the
        # flushes of every run that writes at the same time
        def go(conn: sqlite3.Connection) -> int:
            row = conn.execute(SQL["run_status"], (run_id,)).fetchone()
            if row is None or row[0] not in live:
                return 0
            # one look per attempt and per stream, then one insert statement for all; an
            # attempt that ended has had its reset already, or had nothing to reset
            attempts = {(w.step_key, w.attempt) for w in writes}
            ended = {
                a
                for a in attempts
                if conn.execute(SQL["attempt_running"], (run_id, *a)).fetchone() is None
            }
            offsets = {
                stream: conn.execute(SQL["next_stream_offset"], (run_id, stream)).fetchone()[0]
                for stream in {w.stream for w in writes}
            }
            now = self._now()
            rows: list[tuple[object, ...]] = []
            for w in writes:
                if (w.step_key, w.attempt) in ended:
                    continue
                offset = offsets[w.stream]
                offsets[w.stream] = offset + 1
                rows.append((run_id, w.stream, offset, w.value, w.step_key, w.attempt, now))
            conn.executemany(SQL["insert_stream_entry"], rows)
            return len(rows)

        return await self._write(go)

    async def read_stream(
        self, run_id: str, stream: str, after: int, limit: int, settled: StepStatusName | None
    ) -> list[StreamEntry]:
        def go(conn: sqlite3.Connection) -> list[StreamEntry]:
            if settled is None:
                rows = conn.execute(SQL["read_stream"], (run_id, stream, after, limit))
            else:
                rows = conn.execute(
                    SQL["read_stream_settled"], (run_id, stream, after, settled, limit)
                )
            return [convert.stream_entry(r) for r in rows.fetchall()]

        return await self._read(go)

    async def stream_names(self, run_id: str) -> list[str]:
        def go(conn: sqlite3.Connection) -> list[str]:
            return [r[0] for r in conn.execute(SQL["stream_names"], (run_id,)).fetchall()]

        return await self._read(go)


__all__ = ["Streams"]
