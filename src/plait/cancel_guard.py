"""Tasks whose cancel waits until the write they have on its way has ended.

A pass commits a write and goes on only once the database has answered. If the task that
waits were cancelled mid-write, PostgreSQL's driver would cancel the statement, and what
had already happened (a step body that finished) would be lost with it. The store can
always hand a write to a task of its own and wait on an outcome that no cancel cuts short,
but that costs a task and two more turns of the event loop per write. A ``GuardedTask``
lets the store send a lone write from the caller's own task instead: while the write is on
its way (``hold_cancel``), a cancel is only noted, and the store raises it once the write
has ended, as it does for a write it handed off.

The worker runs its passes and job steps in such tasks; any other task takes the handed
off way, so nothing depends on every task being one.

``uncancelled`` is the handed off way for any write that must end before its caller
does: a pass's last flush once it was cancelled, a job step's end, a lease given back.
A second cancel (a shutdown on top of a cancel of the run) must not leave such a write
running on its own while the caller returns: the engine would close the store under it,
and what it carried (a step's result) would be lost and its body run again.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable
from typing import Any, TypeVar

T = TypeVar("T")


class HeldCancel:
    """A ``with`` block of a ``GuardedTask`` in which a cancel is noted, not delivered;
    ``requested`` says whether one came."""

    __slots__ = ("_task", "requested")

    def __init__(self, task: GuardedTask[Any]) -> None:
        self.requested = False
        self._task = task

    def __enter__(self) -> HeldCancel:
        if self._task.held is not None:
            raise RuntimeError("a task holds one cancel back at a time")
        self._task.held = self
        return self

    def __exit__(self, *exc: object) -> None:
        self._task.held = None


class GuardedTask(asyncio.Task[T]):
    """An ``asyncio.Task`` that notes, rather than delivers, a cancel that arrives inside
    ``hold_cancel``. Whoever holds it must raise ``CancelledError`` once the write ended
    if a cancel was noted."""

    #: the hold in force, if any
    held: HeldCancel | None = None
    #: cancels noted in holds and not taken back (``uncancel``): counted by
    #: ``cancelling()`` as the cancels asyncio delivered are, so that ``asyncio.timeout``
    #: and task groups around a write tell their own cancel from another one
    _noted = 0

    def cancel(self, msg: Any = None) -> bool:
        held = self.held
        if held is None or self.done():
            return super().cancel(msg)
        held.requested = True
        self._noted += 1
        return True

    def cancelling(self) -> int:
        return super().cancelling() + self._noted

    def uncancel(self) -> int:
        if self._noted:
            self._noted -= 1
            return self.cancelling()
        return super().uncancel()

    def hold_cancel(self) -> HeldCancel:
        """Note cancels for a ``with`` block of this task's own code."""
        return HeldCancel(self)


def guarded_task(coro: Any, *, name: str | None = None) -> asyncio.Task[Any]:
    """``asyncio.create_task`` for a ``GuardedTask``."""
    return GuardedTask(coro, loop=asyncio.get_running_loop(), name=name)


def cut_short(task: asyncio.Task[Any]) -> None:
    """Cancel ``task`` at once, even while it holds a cancel back: for a write that has
    run out of time, whose outcome is unknown whatever happens next."""
    asyncio.Task[Any].cancel(task)


def take_back(task: asyncio.Task[Any]) -> int:
    """Take back the cancel ``cut_short`` made, once it has been raised; returns how many
    cancels asyncio still counts for ``task`` (any noted in a hold are apart)."""
    return asyncio.Task[Any].uncancel(task)


def holding_task() -> GuardedTask[Any] | None:
    """The running task if it can hold a cancel back, else None. Not one with a cancel
    requested already: that one is delivered at the task's next wait, which a write must
    not be (and a task that is handling its cancel writes the handed off way too)."""
    task = asyncio.current_task()
    if isinstance(task, GuardedTask) and not task.cancelling():
        return task
    return None


async def uncancelled(write: Awaitable[T]) -> T:
    """Await ``write`` to its end even when the caller is cancelled meanwhile (once or
    more), then pass the cancel on. A write cut short loses what already happened: the
    result of a step whose body finished, which would then run again."""
    task = asyncio.ensure_future(write)
    interrupted = False
    while not task.done():
        try:
            await asyncio.shield(task)
        except asyncio.CancelledError:
            if task.cancelled():
                raise
            interrupted = True
        except BaseException:
            break
    if interrupted:
        raise asyncio.CancelledError()
    return task.result()
