"""Group commit: the writes of a process's concurrent callers share one transaction.

``GroupCommit`` groups the batches of passes; ``Together`` groups calls of one other kind
(run starts) the same way, without leases.

Every pass commits at least twice per step (an attempt's start before its body runs, its
end with the next), and each commit on PostgreSQL is a round trip and a WAL flush. A
hundred runs in flight would pay a hundred of each. Instead, batches handed in while a
group is on its way to the server wait and go together in the next one: one statement
(``commit_group``), one transaction, one flush. A batch handed in while nothing is on its
way leaves at the next turn of the event loop, so a process with one run in flight waits
for nobody; a caller whose task can hold a cancel back (``plait.cancel_guard``: the
worker's passes) sends it itself, without that turn or a task (``now``).

Most batches hold only step writes (one attempt's end, the next one's start), or step
writes and the end of their run (a pass's last). The group fences all such batches with
one statement that locks their runs, and writes their steps and attempts as sets, one
statement however many batches, then ends the runs that end. Its outcomes are handed out in
two parts: the first third's callers make their next writes while the others go on, and
those writes leave as the next group at once, so the server commits one group while this
process works on the next.

Each caller hears its own outcome only once the transaction that holds its batch has
committed. A group never waits on a lock: a batch whose run row another transaction
holds is left out and committed alone afterwards, and a batch that cancels child runs
(whose rows it must wait for: a run's end that takes its children, or a cancel) never
joins one, so groups of different processes can never deadlock, nor keep a row locked for
long. A batch whose pass lost its lease is left out too (nothing of it is written) and its
caller alone gets ``LeaseLostError``. Any other error rolled the whole group back, so the
batches are then committed one by one, each with its own outcome, exactly as if they had
never been grouped. A group whose outcome is unknown (the connection broke) is reported to
every one of its callers as unavailable.
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Awaitable, Callable
from typing import Any, Generic, TypeVar

import asyncpg

from plait.errors import LeaseLostError
from plait.store.ops import (
    CancelChildren,
    EndRun,
    FinishAttempt,
    Op,
    PutStep,
    StartAttempt,
    ended_elsewhere,
)
from plait.store.postgres.pool import Pool, is_connection_error

#: the most batches in one group (a bound on one transaction's size and lock count)
GROUP_LIMIT = 200

#: the ops a group writes as sets (``apply_step_ops``): a batch of these only, each of its
#: own step of the batch's run, is fenced and written together with the group's other such
#: batches
STEP_WRITES = (PutStep, StartAttempt, FinishAttempt)

#: commit one batch on its own: (run_id, fence, ops, release_wakeups_seen) -> due again at once
CommitOne = Callable[[str, "str | None", list[Op], "int | None"], Awaitable[bool]]


@dataclasses.dataclass(slots=True)
class _Batch:
    run_id: str
    fence: str
    ops: list[Op]
    release_wakeups_seen: int | None
    done: asyncio.Future[bool]


W = TypeVar("W")
R = TypeVar("R")


class Outcome(asyncio.Future[R]):
    """The outcome of a write handed to a group, which its waiter cannot cancel.

    A caller cancelled while its write is on the way must not return before the write has
    ended: what already happened (a step body that finished) would be lost, and its next
    write could overtake this one. Cancelling the task that awaits an ``Outcome`` only
    marks it: the cancel is raised in it once the outcome is in (the write then ended
    either way, and ``result()`` says how). This costs nothing per write, where a shield
    costs a task of its own and two more turns of the event loop."""

    def cancel(self, msg: Any = None) -> bool:
        return False

    def abandon(self) -> None:
        """Cancel for real: the process is stopping and the outcome will never be known."""
        super().cancel()


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
    """Collects fenced batches and commits them in groups, one group in flight at a time,
    on a connection of its own. A group sends its ops as ``encode`` makes each a value of
    the schema's op type."""

    def __init__(
        self,
        pool: Pool,
        query: str,
        commit_one: CommitOne,
        encode: Callable[[Op], Any],
        now: Callable[[], float],
    ) -> None:
        super().__init__()
        self._pool = pool
        self._query = query
        #: commits a batch alone on the connection the groups use (one send in flight)
        self._commit_one = commit_one
        self._encode = encode
        self._now = now
        #: a write of ``now`` is on its way
        self._sending_now = False
        #: what ``close`` awaits while that write is on its way
        self._now_done: asyncio.Future[None] | None = None

    def idle(self) -> bool:
        """Nothing is on its way (and so nothing waits): a batch handed in now goes alone."""
        return not self._busy

    async def now(
        self, run_id: str, fence: str, ops: list[Op], release_wakeups_seen: int | None
    ) -> bool:
        """Commit one batch alone from the caller's own task, when ``idle``: no task of
        its own, no future and no turn of the event loop on either side of the round
        trip, which a sequential run pays on every step. Batches handed in meanwhile wait
        and go as the next group. Returns or raises what committing the batch alone does.

        The caller must not be cancelled mid-write (see ``plait.cancel_guard``)."""
        self._busy = True
        self._sending_now = True
        try:
            return await self._commit_one(run_id, fence, ops, release_wakeups_seen)
        finally:
            self._sending_now = False
            if self._now_done is not None:
                self._now_done.set_result(None)
                self._now_done = None
            self._next()

    def submit(
        self, run_id: str, fence: str, ops: list[Op], release_wakeups_seen: int | None
    ) -> Outcome[bool]:
        """Hand in one batch to commit with whatever else is waiting. Its outcome is True
        if the released run is due again at once, or what committing it alone would
        raise."""
        loop = asyncio.get_running_loop()
        done: Outcome[bool] = Outcome(loop=loop)
        self._waiting.append(_Batch(run_id, fence, ops, release_wakeups_seen, done))
        if not self._busy:
            # nothing on its way: a group leaves at the next turn of the event loop, with
            # whatever else was handed in by then
            self._busy = True
            self._sender = loop.create_task(self._send())
        return done

    async def close(self) -> None:
        if self._sending_now:
            if self._now_done is None:
                self._now_done = asyncio.get_running_loop().create_future()
            await asyncio.shield(self._now_done)
        await super().close()

    async def _send(self) -> None:
        """Groups one after the other while batches wait. The next group leaves as soon as
        the last one is answered, with the writes its first callers made meanwhile."""
        try:
            while self._waiting:
                group = self._waiting[:GROUP_LIMIT]
                del self._waiting[:GROUP_LIMIT]
                await self._send_group(group)
        finally:
            self._next()

    async def _send_group(self, group: list[_Batch]) -> None:
        # a batch that cancels child runs waits for their rows, which a group never does:
        # it goes alone, after the others
        together: list[_Batch] = []
        apart: list[_Batch] = []
        for batch in group:
            (apart if cancels_children(batch.ops) else together).append(batch)
        if len(together) == 1:
            await self._alone(together[0])
        elif together:
            await self._together(together)
        for batch in apart:
            await self._alone(batch)

    async def _alone(self, batch: _Batch) -> None:
        try:
            due = await self._commit_one(
                batch.run_id, batch.fence, batch.ops, batch.release_wakeups_seen
            )
        except BaseException as exc:  # the caller's to handle, whatever it is
            _settle(batch.done, exc=exc)
            if not isinstance(exc, Exception):
                raise
        else:
            _settle(batch.done, due)

    async def _together(self, group: list[_Batch]) -> None:
        runs: list[str] = []
        fences: list[str] = []
        ends: list[int] = []
        seen: list[int | None] = []
        as_sets: list[bool] = []
        ops: list[Any] = []
        for batch in group:
            runs.append(batch.run_id)
            fences.append(batch.fence)
            ops.extend(map(self._encode, batch.ops))
            ends.append(len(ops))
            seen.append(batch.release_wakeups_seen)
            as_sets.append(written_as_sets(batch.run_id, batch.ops))
        if len(set(runs)) < len(runs):
            # the set-based writes take each run once: a run twice goes op by op
            as_sets = [False] * len(runs)
        try:
            outcome = await self._pool.call_held(
                "fetchval", self._query, runs, fences, ends, seen, as_sets, ops, self._now()
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
        busy = [batch for batch, result in zip(group, outcome, strict=True) if result == "busy"]
        answered = [
            (batch, result)
            for batch, result in zip(group, outcome, strict=True)
            if result != "busy"
        ]
        # A third of the callers hear first and go on to their next writes, which leave
        # as the next group (see _send) while the others go on: the server commits one
        # group while this process works on the next, where handing out every outcome at
        # once would leave each side idle while the other works. (A third measured a
        # little faster than a half; a quarter no faster.)
        first = (len(answered) + 2) // 3
        _answer(answered[:first])
        try:
            await asyncio.sleep(0)
        finally:
            _answer(answered[first:])
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


def steps_only(run_id: str, ops: list[Op]) -> bool:
    """Whether a batch of ``run_id`` is step writes only, each of its own step of that
    run: such batches are written as sets, and fenced together."""
    keys: set[str] = set()
    for op in ops:
        if not isinstance(op, STEP_WRITES) or op.step.run_id != run_id or op.step.key in keys:
            return False
        keys.add(op.step.key)
    return True


def written_as_sets(run_id: str, ops: list[Op]) -> bool:
    """Whether a group fences a batch of ``run_id`` with its other step writes and writes
    its steps as sets: step writes only, or step writes and then the end of a run that
    is no child (a child's end locks its parent first, so it is committed op by op) and
    starts no successor (a run continued as new is committed op by op too)."""
    if ops and isinstance(end := ops[-1], EndRun):
        return end.parent is None and end.successor is None and steps_only(run_id, ops[:-1])
    return steps_only(run_id, ops)


def cancels_children(ops: list[Op]) -> bool:
    """Whether a batch cancels child runs, and so waits for their rows: the children of
    an ended run (``CancelChildren``), or those of a run whose end is a cancel (it has a
    cut)."""
    return any(
        isinstance(op, CancelChildren) or (isinstance(op, EndRun) and op.cut is not None)
        for op in ops
    )


def _answer(answered: list[tuple[_Batch, str]]) -> None:
    for batch, result in answered:
        if result == "lost":
            _settle(batch.done, exc=LeaseLostError(f"lost the lease on run {batch.run_id}"))
        elif result == "ended":
            _settle(batch.done, exc=ended_elsewhere(batch.run_id, batch.ops))
        else:
            _settle(batch.done, result == "due")


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
        if isinstance(done, Outcome):
            done.abandon()
        else:
            done.cancel()
    elif exc is not None:
        done.set_exception(exc)
    else:
        done.set_result(value)
