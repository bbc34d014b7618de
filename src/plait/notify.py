"""Wake-ups: who is told when a run changes or new work may be due.

Inside one process these are asyncio events, so ``Engine.wait`` returns the moment a pass
settles a run. Stores that span processes add their own channel (PostgreSQL's
LISTEN/NOTIFY, a watch on a SQLite file's data version) and feed it into the same
methods; a slow poll remains only as a safety net.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
from collections.abc import Awaitable, Callable, Sequence


async def wait_event(event: asyncio.Event, timeout: float) -> bool:
    """Wait until ``event`` is set (True) or ``timeout`` seconds pass (False).

    A cancel of the caller always goes through. ``asyncio.wait_for`` on Python 3.11 can
    swallow a cancel that arrives just as the event is set, and a loop around it (such as
    ``Engine.wait``) then never ends: a request whose client went away would wait on."""
    try:
        async with asyncio.timeout(timeout):
            await event.wait()
    except TimeoutError:
        return False
    return True


#: what kind of work a notice of new work is about. A store that can tell (PostgreSQL's
#: functions) says which; ``WORK`` is any of them, and wakes every loop
WORK = "work"
#: a running run to claim (started, woken by an event or a timer)
DUE = "due"
#: a queued run to admit
ADMIT = "admit"
#: a queued step's job to claim
JOB = "job"
WORK_KINDS = frozenset({WORK, DUE, ADMIT, JOB})


class Notifier:
    """Who waits on which run, and on what.

    A watcher of every change (a stream, a value being waited for) wakes at each commit
    of its run; a watcher of the run's end (``Engine.wait``) wakes only when a change may
    have settled it. A run of ten steps commits twenty times, and a thousand callers of
    ``wait`` that each read their run again at every commit would cost the store more
    reads than the runs cost it writes.
    """

    def __init__(self) -> None:
        self._watchers: dict[str, set[asyncio.Event]] = {}
        self._end_watchers: dict[str, set[asyncio.Event]] = {}
        self._work_callbacks: list[tuple[Callable[[], None], str | None]] = []
        #: set by cross-process channels: called with ("run", run_id) for a change that
        #: may have settled the run, ("busy", run_id) for one that did not, ("work", "")
        self.remote: Callable[[str, str], None] | None = None
        #: set by a channel whose store tells the other processes of a new run in the
        #: transaction that creates it, of a run an event, a decision, a request or a
        #: reopen woke in the transaction that stores it, and of a run's end in the
        #: transaction that ends it (PostgreSQL NOTIFYs in its functions): a second notice
        #: would only wake their workers for a claim the first one made already, and
        #: their waiters for a read the first one led to
        self.commits_tell = False

    # -- runs -------------------------------------------------------------------------------
    def watch(self, run_id: str, *, end_only: bool = False) -> asyncio.Event:
        """An event set when ``run_id`` changes; with ``end_only``, only by a change that
        may have settled it (and by any change this process cannot name)."""
        event = asyncio.Event()
        watchers = self._end_watchers if end_only else self._watchers
        watchers.setdefault(run_id, set()).add(event)
        return event

    def unwatch(self, run_id: str, event: asyncio.Event) -> None:
        for watchers in (self._watchers, self._end_watchers):
            events = watchers.get(run_id)
            if events is not None:
                events.discard(event)
                if not events:
                    del watchers[run_id]

    def watched_runs(self) -> int:
        """How many runs someone waits on right now (for shutdown checks and tests)."""
        return len(self._watchers.keys() | self._end_watchers.keys())

    def end_watched(self) -> list[str]:
        """The runs someone waits to see end."""
        return list(self._end_watchers)

    def local_run_changed(self, run_id: str, *, settled: bool | None = None) -> None:
        """Wake the watchers of ``run_id``; ``settled=False`` says the run has certainly
        not settled, so those who wait for its end sleep on."""
        for event in self._watchers.get(run_id, ()):
            event.set()
        if settled is not False:
            for event in self._end_watchers.get(run_id, ()):
                event.set()

    def everything_changed(self) -> None:
        """Another process changed something we cannot name: every waiter looks again."""
        for run_id in list(self._watchers.keys() | self._end_watchers.keys()):
            self.local_run_changed(run_id)
        self.local_work()

    def run_changed(self, run_id: str, *, settled: bool | None = None) -> None:
        """``run_id`` changed here: tell this process and the others. ``settled`` is
        whether the change settled it, None when the caller does not know. A run is
        settled by the commit that ends it, which told the other processes itself where
        commits tell."""
        self.local_run_changed(run_id, settled=settled)
        if self.remote is not None and not (settled is True and self.commits_tell):
            self.remote("busy" if settled is False else "run", run_id)

    # -- work -------------------------------------------------------------------------------
    def on_work(self, callback: Callable[[], None], kind: str | None = None) -> None:
        """Call ``callback`` at each notice of new work of ``kind`` (and at each that does
        not say its kind); None: at every notice. A worker's loops each wait for their own
        kind: a start wakes the loop that claims runs, not the one that admits queued
        runs, which would only read that nothing is queued."""
        self._work_callbacks.append((callback, kind))

    def local_work(self, kind: str = WORK) -> None:
        for callback, wanted in self._work_callbacks:
            if kind == WORK or wanted is None or wanted == kind:
                callback()

    def publish_work(self) -> None:
        self.local_work()
        if self.remote is not None:
            self.remote("work", "")

    def runs_created(self) -> None:
        """Runs to take were committed (not leased to this process): tell this process,
        and the others unless the commit told them itself (``commits_tell``)."""
        self.local_work()
        if self.remote is not None and not self.commits_tell:
            self.remote("work", "")

    def run_woken(self, run_id: str) -> None:
        """A commit woke ``run_id`` (an event, a decision, a request for it, a reopen):
        tell this process's watchers of the run (it has not settled) and its workers, and
        the other processes' as well unless the commit told them itself
        (``commits_tell``): a second notice of work would wake every loop of every worker,
        whose claim, made as the run's pass starts, would find nothing, and it costs a
        statement of its own."""
        self.local_run_changed(run_id, settled=False)
        self.local_work()
        if self.remote is not None and not self.commits_tell:
            self.remote("busy", run_id)
            self.remote("work", "")


class RunEndPoll:
    """The safety net under the watchers of runs' ends: a slow poll for runs that ended,
    one read of the status of every watched run per poll, however many callers wait.

    A wake-up can be missed (a notification lost while a LISTEN connection reconnected, a
    change made by a tool that tells nobody), so a waiter cannot trust notifications
    alone. Each waiter reading its own run on a timer made a thousand waiting callers a
    thousand reads per poll; this makes them one. The polls come quickly after a new run
    is watched and then slow down to one a second, as each waiter's did.
    """

    FIRST = 0.05
    MOST = 1.0

    def __init__(
        self,
        notifier: Notifier,
        statuses: Callable[[Sequence[str]], Awaitable[dict[str, str]]],
        settled: frozenset[str],
    ) -> None:
        self._notifier = notifier
        self._statuses = statuses
        self._settled = settled
        self._task: asyncio.Task[None] | None = None
        self._interval = self.FIRST
        #: when the next poll is due (loop time)
        self._due = math.inf
        self._sooner = asyncio.Event()

    def watching(self) -> None:
        """A run was just watched: poll it soon, and keep polling while anyone waits."""
        loop = asyncio.get_running_loop()
        soon = loop.time() + self.FIRST
        if soon < self._due:
            self._due, self._interval = soon, self.FIRST
            self._sooner.set()
        if self._task is None or self._task.done():
            # named, so a shutdown that leaves it running says so
            self._task = loop.create_task(self._poll(), name="plait-run-end-poll")

    async def _poll(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            self._sooner.clear()
            wait = self._due - loop.time()
            if wait > 0:
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(wait):
                        await self._sooner.wait()
                continue
            watched = self._notifier.end_watched()
            if not watched:
                self._due = math.inf
                return
            self._interval = min(self.MOST, self._interval * 2)
            self._due = loop.time() + self._interval
            try:
                statuses = await self._statuses(watched)
            except Exception:
                # the store is unreachable: each waiter reads it and hears why
                statuses = {}
            for run_id in watched:
                if statuses.get(run_id, "") in self._settled or run_id not in statuses:
                    self._notifier.local_run_changed(run_id)

    async def stop(self) -> None:
        """Stop polling, and wake every waiter so that each reads its run once more."""
        task, self._task = self._task, None
        self._due = math.inf
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
        for run_id in self._notifier.end_watched():
            self._notifier.local_run_changed(run_id)
