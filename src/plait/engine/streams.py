"""The streams a run writes (``wf.stream``, ``ctx.stream``): read them, or follow them as
their entries commit."""

from __future__ import annotations

from collections.abc import AsyncGenerator

from plait.context import check_stream_name
from plait.engine.base import EngineBase
from plait.notify import wait_event
from plait.records import TERMINAL, StreamEntry
from plait.statuses import StepStatusName

#: the status of a step whose latest attempt succeeded: a settled read keeps its entries
_SUCCEEDED: StepStatusName = "succeeded"
#: the most entries one read returns
MAX_READ = 10_000
#: the entries a follower reads at a time
_FOLLOW_PAGE = 1000
#: the slow look a follower takes in case a wake-up was lost (it doubles, up to the most)
_FOLLOW_SAFETY = 0.05
_FOLLOW_SAFETY_MAX = 2.0
#: the last offset a stream can hold (PostgreSQL stores offsets as a 32-bit integer)
MAX_OFFSET = 2**31 - 1


def _check_read(name: object, after: object, limit: object) -> str:
    stream = check_stream_name(name)
    if isinstance(after, bool) or not isinstance(after, int) or not -1 <= after <= MAX_OFFSET:
        raise ValueError(
            f"stream {stream!r}: after must be an offset (an int from -1 to {MAX_OFFSET}), "
            f"got {after!r}"
        )
    if isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= MAX_READ:
        raise ValueError(
            f"stream {stream!r}: limit must be an int from 1 to {MAX_READ}, got {limit!r}"
        )
    return stream


class StreamsMixin(EngineBase):
    """``Engine.read_stream``, ``follow_stream`` and ``stream_names``."""

    async def read_stream(
        self,
        run_id: str,
        name: str,
        *,
        after: int = -1,
        limit: int = 1000,
        settled_only: bool = False,
    ) -> list[StreamEntry]:
        """Up to ``limit`` entries of the run's stream ``name`` with offsets above
        ``after``, in order. ``settled_only`` leaves out the entries of step attempts that
        did not succeed (yet, or ever) and the resets: what is left never changes."""
        stream = _check_read(name, after, limit)
        await self.get_run(run_id)
        settled = _SUCCEEDED if settled_only else None
        return await self.store.read_stream(run_id, stream, after, limit, settled)

    async def stream_names(self, run_id: str) -> list[str]:
        """The names of the streams the run has written to."""
        await self.get_run(run_id)
        return await self.store.stream_names(run_id)

    async def follow_stream(
        self, run_id: str, name: str, *, after: int = -1, settled_only: bool = False
    ) -> AsyncGenerator[StreamEntry, None]:
        """The entries of the run's stream ``name`` after ``after`` as they commit, until
        its ``end`` (the run ended; a stream never written ends with its run, with no
        entry). The end of a run that was retried since is passed over: the retry's
        entries follow it. Woken by the commits that write them, not by polling. With
        ``settled_only``, an attempt's entries come once it succeeded (never, if it did
        not), the workflow's own at once, still in offset order."""
        stream = _check_read(name, after, 1)
        await self.get_run(run_id)
        cursor, safety = after, _FOLLOW_SAFETY
        ahead = _Ahead(after)
        while True:
            event = self.notifier.watch(run_id)
            try:
                before = cursor
                if settled_only:
                    entries, cursor = await self._settled_page(run_id, stream, cursor, ahead)
                else:
                    entries = await self.store.read_stream(
                        run_id, stream, cursor, _FOLLOW_PAGE, None
                    )
                    if entries:
                        cursor = entries[-1].offset
                for entry in entries:
                    if entry.kind == "end":
                        if await self._reopened(run_id, stream, entry):
                            continue  # a retry's entries follow: read on
                        yield entry
                        return
                    yield entry
                if entries or cursor != before:
                    safety = _FOLLOW_SAFETY
                    continue
                run = await self.get_run(run_id)
                if run.status in TERMINAL and not await self.store.read_stream(
                    run_id, stream, cursor, 1, None
                ):
                    return  # ended, and never written to: no end entry will come
                await wait_event(event, safety)
                safety = min(_FOLLOW_SAFETY_MAX, safety * 2)
            finally:
                self.notifier.unwatch(run_id, event)

    async def _reopened(self, run_id: str, stream: str, end: StreamEntry) -> bool:
        """Whether an ``end`` of the stream is not where it ends: the run was retried
        after it (an end keeps its offset, which clients resume after), so entries follow
        it, or will."""
        run = await self.get_run(run_id)
        if run.status not in TERMINAL:
            return True
        return bool(await self.store.read_stream(run_id, stream, end.offset, 1, None))

    async def _settled_page(
        self, run_id: str, stream: str, cursor: int, ahead: _Ahead
    ) -> tuple[list[StreamEntry], int]:
        """The settled entries after ``cursor`` up to the first entry of an attempt not
        decided yet (neither succeeded nor reset), and the cursor after them. An attempt
        whose entries fill the page may have its reset beyond it (one that wrote more
        than a read returns): the entries after the page are read, once each, for it."""
        raw = await self.store.read_stream(run_id, stream, cursor, _FOLLOW_PAGE, None)
        if not raw:
            return [], cursor
        settled = {
            e.offset
            for e in await self.store.read_stream(run_id, stream, cursor, len(raw), _SUCCEEDED)
        }
        ahead.note(raw)
        out: list[StreamEntry] = []
        for entry in raw:
            if entry.kind == "end":
                out.append(entry)
                return out, entry.offset
            if entry.kind == "reset":
                cursor = entry.offset
            elif entry.step is None or entry.offset in settled:
                out.append(entry)
                cursor = entry.offset
            elif ahead.decided(entry) or (
                len(raw) == _FOLLOW_PAGE and await self._look_ahead(run_id, stream, ahead, entry)
            ):
                cursor = entry.offset  # its attempt failed, or the run ended without it
            else:
                return out, cursor  # wait for its attempt to end
        return out, cursor

    async def _look_ahead(
        self, run_id: str, stream: str, ahead: _Ahead, entry: StreamEntry
    ) -> bool:
        """Read the stream on from where ``ahead`` stopped, for the reset of ``entry``'s
        attempt (or the end): whether it was found."""
        while not ahead.decided(entry):
            more = await self.store.read_stream(run_id, stream, ahead.offset, MAX_READ, None)
            ahead.note(more)
            if not more or more[-1].kind == "end":
                return ahead.decided(entry)
        return True


class _Ahead:
    """What a settled follower saw of its stream past its cursor: the attempts reset, and
    the stream's end, up to ``offset``. Entries never change once written, so each is
    read for this once, however long an undecided attempt keeps writing. (An end is not
    passed: a retry of the run takes it away and writes on from its offset.)"""

    def __init__(self, offset: int) -> None:
        self.offset = offset
        self.resets: set[tuple[str | None, int | None]] = set()
        self.end: int | None = None

    def note(self, entries: list[StreamEntry]) -> None:
        for entry in entries:
            if entry.kind == "end":
                self.end = entry.offset
                return
            if entry.offset > self.offset:
                if entry.kind == "reset":
                    self.resets.add((entry.step, entry.attempt))
                self.offset = entry.offset

    def decided(self, entry: StreamEntry) -> bool:
        """Whether ``entry``'s attempt failed (its reset was seen) or the run ended
        after it without deciding it."""
        if self.end is not None and entry.offset < self.end:
            return True
        return (entry.step, entry.attempt) in self.resets


__all__ = ["MAX_READ", "StreamsMixin"]
