"""Requests with a reply on PostgreSQL: store one for a run, read it back, withdraw it.
A pass takes and answers requests with its batch (``commit``)."""

from __future__ import annotations

from collections.abc import Sequence

from plait.statuses import RequestStatusName, RunStatusName
from plait.store.postgres.actions import Actions
from plait.store.postgres.codec import request_row
from plait.store.rows import RequestRow


class Requests(Actions):
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
        found = await self._action(
            f"send request {name!r} to",
            run_id,
            "fetchval",
            self._q["send_request"],
            name,
            data,
            status,
            refusal,
            deadline,
            list(live),
            self._now(),
        )
        return int(found)

    async def get_request(self, request_id: int) -> RequestRow | None:
        rec = await self._call("fetchrow", self._q["get_request"], request_id, read=True)
        return None if rec is None else request_row(rec)

    async def withdraw_request(
        self, request_id: int, from_status: RequestStatusName, status: RequestStatusName
    ) -> bool:
        found = await self._call(
            "fetchval",
            self._q["withdraw_request"],
            request_id,
            from_status,
            status,
            self._now(),
        )
        return found is not None
