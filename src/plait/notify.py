"""Wake-ups: who is told when a run changes or new work is queued.

Inside one process these are asyncio events, so ``Engine.wait`` returns the moment a pass
settles a run. Stores that span processes add their own channel (PostgreSQL's
LISTEN/NOTIFY, a socket beside a SQLite file) and feed it into the same methods; a slow
poll remains only as a safety net.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable


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


class Notifier:
    def __init__(self) -> None:
        self._watchers: dict[str, set[asyncio.Event]] = {}
        self._work_callbacks: list[Callable[[], None]] = []
        #: set by cross-process channels: called with ("run", run_id) or ("work", "")
        self.remote: Callable[[str, str], None] | None = None

    # -- runs -------------------------------------------------------------------------------
    def watch(self, run_id: str) -> asyncio.Event:
        event = asyncio.Event()
        self._watchers.setdefault(run_id, set()).add(event)
        return event

    def unwatch(self, run_id: str, event: asyncio.Event) -> None:
        events = self._watchers.get(run_id)
        if events is not None:
            events.discard(event)
            if not events:
                del self._watchers[run_id]

    def watched_runs(self) -> int:
        """How many runs someone waits on right now (for shutdown checks and tests)."""
        return len(self._watchers)

    def local_run_changed(self, run_id: str) -> None:
        for event in self._watchers.get(run_id, ()):
            event.set()

    def everything_changed(self) -> None:
        """Another process changed something we cannot name: every waiter looks again."""
        for run_id in list(self._watchers):
            self.local_run_changed(run_id)
        self.local_work()

    def run_changed(self, run_id: str) -> None:
        self.local_run_changed(run_id)
        if self.remote is not None:
            self.remote("run", run_id)

    # -- work -------------------------------------------------------------------------------
    def on_work(self, callback: Callable[[], None]) -> None:
        self._work_callbacks.append(callback)

    def local_work(self) -> None:
        for callback in self._work_callbacks:
            callback()

    def publish_work(self) -> None:
        self.local_work()
        if self.remote is not None:
            self.remote("work", "")
