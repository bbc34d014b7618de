"""Requests with a reply on SQLite: store one for a run, read it back, withdraw it. A
pass takes and answers requests with its batch (``apply``)."""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence

from plait.statuses import RequestStatusName, RunStatusName
from plait.store.rows import RequestRow
from plait.store.sqlite import apply
from plait.store.sqlite.part import Part
from plait.store.sqlite.writer import SQL


class Requests(Part):
    """``send_request``, ``get_request`` and ``withdraw_request``."""

    async def send_request(
        self,
        run_id: str,
        name: str,
        data: str | None,
        status: RequestStatusName,
        refusal: str | None,
        deadline: float,
        live: Sequence[RunStatusName],
    ) -> int:
        # one writer: ids follow commit order, the order a workflow takes requests in
        def go(conn: sqlite3.Connection) -> int:
            now = self._now()
            apply.require_status(conn, run_id, tuple(live), f"send request {name!r} to")
            cur = conn.execute(
                SQL["insert_request"], (run_id, name, data, status, refusal, now, deadline)
            )
            apply.wake(conn, run_id, now, now)
            return int(cur.lastrowid or 0)

        return await self._write(go)

    async def get_request(self, request_id: int) -> RequestRow | None:
        def go(conn: sqlite3.Connection) -> RequestRow | None:
            row = conn.execute(SQL["get_request"], (request_id,)).fetchone()
            return None if row is None else RequestRow(*row)

        return await self._read(go)

    async def withdraw_request(
        self, request_id: int, from_status: RequestStatusName, status: RequestStatusName
    ) -> bool:
        def go(conn: sqlite3.Connection) -> bool:
            cur = conn.execute(
                SQL["withdraw_request"], (status, self._now(), request_id, from_status)
            )
            return cur.rowcount == 1

        return await self._write(go)
