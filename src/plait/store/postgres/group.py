"""Group commit: the writes of a process's concurrent callers share one transaction.

``GroupCommit`` groups the batches of passes; ``Together`` groups calls of one other kind
(run starts) the same way, without leases.

Every pass commits at least twice per step (an attempt's start before its body runs, its
end with the next), and each commit on PostgreSQL is a round trip and a WAL flush. A
hundred runs in flight would pay a hundred of each. Instead, batches handed in while a
group is on its way to the server wait and go together in the next one: one statement
(``commit_group``), one transaction, one flush. A batch handed in while nothing is on its
way goes at once, alone, so a process with one run in flight waits for nobody.

Each caller hears its own outcome only once the transaction that holds its batch has
committed. A group never waits on a lock: a batch whose run row another transaction
holds is left out and committed alone afterwards, so groups of different processes can
never deadlock, nor keep a row locked for long. A batch whose pass lost its lease is left
out too (nothing of it is written) and its caller alone gets ``LeaseLostError``. Any
other error rolled the whole group back, so the batches are then committed one by one,
each with its own outcome, exactly as if they had never been grouped. A group whose
outcome is unknown (the connection broke) is reported to every one of its callers as
unavailable.
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Awaitable, Callable
from typing import Any, Generic, TypeVar

import asyncpg

from plait.errors import LeaseLostError
from plait.store.postgres.pool import Pool, is_connection_error

#: the most batches in one group (a bound on one transaction's size and lock count)
GROUP_LIMIT = 200

#: commit one batch on its own: (run_id, fence, ops, release) -> due again at once
CommitOne = Callable[[str, "str | None", list[Any], "int | None"], Awaitable[bool]]


@dataclasses.dataclass(slots=True)
class _Batch:
    run_id: str
    fence: str | None
    ops: list[Any]
    release: int | None
    done: asyncio.Future[bool]


W = TypeVar("W")
R = TypeVar("R")


class _OneInFlight(Generic[W]):
    """One send on its way at a time. A call handed in while nothing is on its way goes
    at once, alone, so a lone caller waits for nobody; the calls handed in meanwhile wait
    (as ``W``, each with the future its caller awaits) and go as one group when it is
    answered, then the next group, until none waits."""

    def __init__(self) -> None:
        #: a call or a group is on its way to the server
        self._busy = False
        self._waiting: list[W] = []
        self._sender: asyncio.Task[None] | None = None

    async def _call(
        self, alone: Callable[[], Awaitable[R]], waiting: Callable[[asyncio.Future[R]], W]
    ) -> R:
        if self._busy:
            done: asyncio.Future[R] = asyncio.get_running_loop().create_future()
            self._waiting.append(waiting(done))
            return await done
        self._busy = True
        try:
            return await alone()
        finally:
            self._next()

    async def close(self) -> None:
        """Wait for the calls already handed in (their callers are owed an answer)."""
        while self._sender is not None:
            await asyncio.shield(self._sender)

    def _next(self) -> None:
        """Send what waits, or go idle."""
        if self._waiting:
            self._sender = asyncio.create_task(self._send())
        else:
            self._busy = False
            self._sender = None

    async def _send(self) -> None:
        group = self._waiting[:GROUP_LIMIT]
        del self._waiting[:GROUP_LIMIT]
        try:
            await self._send_group(group)
        finally:
            self._next()

    async def _send_group(self, group: list[W]) -> None:
        raise NotImplementedError


class GroupCommit(_OneInFlight[_Batch]):
    """Collects batches and commits them in groups, one group in flight at a time."""

    def __init__(
        self,
        pool: Pool,
        query: str,
        commit_one: CommitOne,
        now: Callable[[], float],
        commit_beside: CommitOne,
    ):
        super().__init__()
        self._pool = pool
        self._query = query
        #: commits a batch alone on the connection the groups use (one send in flight)
        self._commit_one = commit_one
        #: commits a batch alone beside whatever is in flight (on another connection)
        self._commit_beside = commit_beside
        self._now = now

    async def commit(
        self, run_id: str, fence: str | None, ops: list[Any], release: int | None
    ) -> bool:
        """Commit one batch with whatever else is waiting; True if the released run is due
        again at once. Raises what committing it alone would raise."""
        if fence is None:
            # an action from outside a pass takes no lease and locks nothing first: it
            # goes alone, beside whatever is in flight
            return await self._commit_beside(run_id, fence, ops, release)
        return await self._call(
            lambda: self._commit_one(run_id, fence, ops, release),
            lambda done: _Batch(run_id, fence, ops, release, done),
        )

    async def _send_group(self, group: list[_Batch]) -> None:
        if len(group) == 1:
            await self._alone(group[0])
        else:
            await self._together(group)

    async def _alone(self, batch: _Batch) -> None:
        try:
            due = await self._commit_one(batch.run_id, batch.fence, batch.ops, batch.release)
        except BaseException as exc:  # the caller's to handle, whatever it is
            _settle(batch.done, exc=exc)
            if not isinstance(exc, Exception):
                raise
        else:
            _settle(batch.done, due)

    async def _together(self, group: list[_Batch]) -> None:
        runs: list[str] = []
        fences: list[str | None] = []
        ends: list[int] = []
        seen: list[int | None] = []
        ops: list[Any] = []
        for batch in group:
            runs.append(batch.run_id)
            fences.append(batch.fence)
            ops.extend(batch.ops)
            ends.append(len(ops))
            seen.append(batch.release)
        try:
            outcome = await self._pool.call_held(
                "fetchval", self._query, runs, fences, ends, seen, ops, self._now()
            )
        except Exception as exc:
            if _refused(exc):
                # the group was rolled back (or never sent): commit each batch on its
                # own, so each gets its own outcome, as if never grouped
                for batch in group:
                    await self._alone(batch)
            else:  # unknown outcome: the connection broke
                for batch in group:
                    _settle(batch.done, exc=exc)
            return
        except BaseException as exc:  # the process is stopping
            for batch in group:
                _settle(batch.done, exc=exc)
            raise
        busy: list[_Batch] = []
        for batch, result in zip(group, outcome, strict=True):
            if result == "lost":
                _settle(batch.done, exc=LeaseLostError(f"lost the lease on run {batch.run_id}"))
            elif result == "busy":
                busy.append(batch)
            else:
                _settle(batch.done, result == "due")
        for batch in busy:  # a row it needs is held elsewhere: it waits for it alone
            await self._alone(batch)


T = TypeVar("T")


class Together(_OneInFlight[tuple[T, "asyncio.Future[R]"]], Generic[T, R]):
    """Calls of one kind sent as one statement and one transaction while another is on
    its way (``one`` sends a call alone, ``many`` a group, answering each in order). If
    the server refused a group, it wrote nothing, so each call is then made alone and gets
    its own outcome; a group whose outcome is unknown (the connection broke) reports that
    to all of its callers."""

    def __init__(
        self,
        one: Callable[[T], Awaitable[R]],
        many: Callable[[list[T]], Awaitable[list[R]]],
    ) -> None:
        super().__init__()
        self._one = one
        self._many = many

    async def __call__(self, item: T) -> R:
        return await self._call(lambda: self._one(item), lambda done: (item, done))

    async def _send_group(self, group: list[tuple[T, asyncio.Future[R]]]) -> None:
        if len(group) == 1:
            await self._alone(*group[0])
            return
        try:
            answers = await self._many([item for item, _ in group])
        except Exception as exc:
            if not _refused(exc):
                for _, done in group:
                    _settle(done, exc=exc)
                return
            for item, done in group:  # rolled back: each on its own
                await self._alone(item, done)
        except BaseException as exc:  # the process is stopping
            for _, done in group:
                _settle(done, exc=exc)
            raise
        else:
            for (_, done), answer in zip(group, answers, strict=True):
                _settle(done, answer)

    async def _alone(self, item: T, done: asyncio.Future[R]) -> None:
        try:
            answer = await self._one(item)
        except BaseException as exc:  # the caller's to handle, whatever it is
            _settle(done, exc=exc)
            if not isinstance(exc, Exception):
                raise
        else:
            _settle(done, answer)


def _refused(exc: Exception) -> bool:
    """The server (or the driver, before sending) refused the statement: nothing of it
    was written."""
    return isinstance(exc, asyncpg.PostgresError | asyncpg.InterfaceError) and not (
        is_connection_error(exc)
    )


def _settle(
    done: asyncio.Future[Any], value: Any = False, *, exc: BaseException | None = None
) -> None:
    if done.done():
        return
    if isinstance(exc, asyncio.CancelledError):
        done.cancel()
    elif exc is not None:
        done.set_exception(exc)
    else:
        done.set_result(value)
