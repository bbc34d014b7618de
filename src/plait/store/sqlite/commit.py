"""A pass's batch of writes on SQLite: the fence checked, the ops applied and the lease
released in one write transaction.
"""

from __future__ import annotations

import sqlite3

from plait.errors import LeaseLostError
from plait.records import TERMINAL
from plait.store.ops import Batch, ended_elsewhere
from plait.store.sqlite import apply
from plait.store.sqlite.part import Part
from plait.store.sqlite.writer import SQL

_RUN_LEASE_OWNER = SQL["run_lease_owner"]


class Commits(Part):
    """``commit`` and ``release_run``: a pass's writes, fenced by its lease."""

    async def commit(self, batch: Batch) -> bool:
        def go(conn: sqlite3.Connection) -> bool | None:
            """True or False: due again at once; None: the run had ended, and only its
            step records were written."""
            ended = False
            ops = batch.ops
            run = apply.statements(conn)
            now = self._now()
            fence = batch.fence
            if (
                fence is not None
                and ops
                and apply.finish_fenced(run, batch.run_id, ops[0], fence, now)
            ):
                ops = ops[1:]  # the fence held, and the first op is written
            elif fence is not None:
                row = run.execute(_RUN_LEASE_OWNER, (batch.run_id,)).fetchone()
                if row is None or row[0] != batch.fence:
                    raise LeaseLostError(f"lost the lease on run {batch.run_id}")
                if row[1] in TERMINAL:
                    ops, ended = apply.records_only(batch.ops), True
            apply.apply_ops(conn, batch.run_id, ops, now, run)
            if batch.release_wakeups_seen is None or batch.fence is None:
                return None if ended else False
            return apply.release(conn, batch.run_id, batch.fence, batch.release_wakeups_seen, now)

        due = await self._write(go)
        if due is None:
            error = ended_elsewhere(batch.run_id, batch.ops)
            if error is not None:
                raise error
            return False
        return due

    async def release_run(self, run_id: str, owner: str, wakeups_seen: int) -> bool:
        return await self._write(
            lambda conn: apply.release(conn, run_id, owner, wakeups_seen, self._now())
        )
