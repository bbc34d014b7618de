"""The event loop a code workflow's own tasks run on during one pass.

A workflow body is ordinary asyncio code: it gathers steps, opens task groups, waits in
``finally`` blocks. Replay is only deterministic if that code sees the outcomes of its
steps in the same order on every pass, whatever order real attempts, timers and job
workers produced them in. So the body never runs on the process's loop. It runs here,
on a loop with nothing on it but the body's own callbacks, which the pass turns until
no callback is ready (the body is blocked on its steps). Only then does the pass hand
the body one step outcome and turn the loop again. Step bodies, database writes and
timers stay on the real loop, driven by the pass.

Time does not pass on this loop: a workflow that wants to wait uses ``wf.sleep``; an
``asyncio.sleep`` with a delay, ``asyncio.timeout`` and the like are refused with an
error that says so, rather than silently measured in wall-clock time on one pass only.
"""

from __future__ import annotations

import asyncio
import collections
import contextvars
import inspect
import sys
from asyncio import events
from collections.abc import AsyncGenerator, Callable, Coroutine, Sequence
from concurrent.futures import Executor
from types import FrameType
from typing import Any, TypeVar, TypeVarTuple, Unpack, cast

#: a callback's arguments, as asyncio's own signatures type them
Ts = TypeVarTuple("Ts")
T = TypeVar("T")

_CLOCK_REFUSED = (
    "workflow code cannot wait on the clock (asyncio.sleep with a delay, asyncio.timeout, "
    "asyncio.wait_for, a timeout= on asyncio.wait): its time is not replayed. Use "
    "wf.sleep(...) for a durable wait, or a step's timeout= option"
)


def _current_task_reader() -> Callable[[asyncio.AbstractEventLoop], asyncio.Task[Any] | None]:
    """The task running on a loop, read at the cost of one dict look-up where the
    interpreter keeps them in a dict (``asyncio.current_task`` is a Python function
    there, and every step asks it)."""
    running: object = getattr(asyncio.tasks, "_current_tasks", None)
    if isinstance(running, dict) and asyncio.current_task.__module__ == "asyncio.tasks":
        tasks = cast(dict[asyncio.AbstractEventLoop, asyncio.Task[Any]], running)
        return tasks.get
    return asyncio.current_task


#: the task running on a loop (None: none)
current_task = _current_task_reader()


def _started(agen: AsyncGenerator[Any, Any]) -> None:
    """asyncio keeps the generators it started, to close them when it shuts down; a
    pass does not outlive its generators' use, so there is nothing to keep."""


class ClockRefused(RuntimeError):
    """Workflow code asked the loop for a timer."""


class OrderUnknown(TypeError):
    """``asyncio.as_completed`` was given coroutines in a collection with no order."""


#: asyncio's own source file: ``as_completed`` is read there, never patched
_ASYNCIO_TASKS = asyncio.tasks.__file__
#: how far up from ``create_task`` the frame of ``as_completed`` can be (ensure_future,
#: its helper, the set comprehension, and ``_AsCompletedIterator`` on newer Pythons)
_CALLER_DEPTH = 8


def _place_among_siblings(coro: object) -> tuple[int, int] | None:
    """Where ``coro`` stands in the list handed to ``asyncio.as_completed``, when it is
    that function that turns it into a task: (the list's id, the index). None when the
    task is made by anything else, which makes tasks in the order its caller chose.

    ``as_completed`` starts its coroutines from a set, in an order that follows their
    memory addresses and so differs on every pass; the steps they reach would then swap
    keys, and results, between branches on replay. The list it was given still holds the
    order the workflow wrote, in a local of its frame."""
    here = inspect.currentframe()
    # above this function: create_task, then whoever asked it for a task
    frame: FrameType | None = here.f_back.f_back if here and here.f_back else None
    # this function's own frame kept in one of its locals is a cycle only the garbage
    # collector frees, and with it every frame above (the pass) and all they hold
    del here
    for _ in range(_CALLER_DEPTH):
        if frame is None:
            return None
        code = frame.f_code
        if code.co_filename == _ASYNCIO_TASKS and code.co_name in ("as_completed", "__init__"):
            given: object = frame.f_locals.get("fs", frame.f_locals.get("aws"))
            if isinstance(given, list | tuple):
                # an awaitable that is not a coroutine reaches here wrapped, and is not
                # found: it has a step of its own to wait for, not a branch to start
                in_order = cast(Sequence[object], given)
                found = (i for i, item in enumerate(in_order) if item is coro)
                index = next(found, None)
                return None if index is None else (id(in_order), index)
            if given is not None:
                raise OrderUnknown(
                    "asyncio.as_completed over coroutines needs them in a list or tuple: "
                    f"given a {type(given).__name__}, they would start in an order that "
                    "changes from one pass of the run to the next, and branches would swap "
                    "step results on replay"
                )
        frame = frame.f_back
    return None


class _Handle:
    """A ready callback: what ``asyncio.Handle`` is, less what only a debugging loop needs
    (a step's outcome reaches the workflow through one of these)."""

    __slots__ = ("_args", "_callback", "_cancelled", "_context")

    def __init__(
        self,
        callback: Callable[..., Any],
        args: tuple[Any, ...],
        context: contextvars.Context | None,
    ) -> None:
        self._callback = callback
        self._args = args
        self._context = context if context is not None else contextvars.copy_context()
        self._cancelled = False

    def cancel(self) -> None:
        self._cancelled = True

    def cancelled(self) -> bool:
        return self._cancelled


class _WorkflowTask(asyncio.Task[T]):
    """A task of workflow code: its loop counts the cancels of its tasks, so that a pass
    looks for steps the workflow cancelled only after a turn in which it cancelled
    something (``WorkflowLoop.cancels``)."""

    __slots__ = ()

    def cancel(self, msg: Any = None) -> bool:
        loop = self.get_loop()
        if isinstance(loop, WorkflowLoop):
            loop.cancels += 1
        return super().cancel(msg)


class WorkflowLoop(asyncio.AbstractEventLoop):
    """A loop that runs only when told to and only what is ready; see the module."""

    def __init__(self) -> None:
        self._ready: collections.deque[_Handle] = collections.deque()
        self._closed = False
        #: every task made on this loop (``asyncio.all_tasks`` would scan the process's)
        self.tasks: list[asyncio.Task[Any]] = []
        #: exceptions of tasks nobody retrieved; kept, not printed (the pass decides)
        self.unhandled: list[dict[str, Any]] = []
        #: told of every task made on this loop, right after it is made (the pass
        #: follows which task reached which step; see ``runtime.replay``)
        self.on_task: Callable[[asyncio.Task[Any]], None] | None = None
        #: the tasks ``as_completed`` is making now: the id of the list it was given,
        #: and each task's index in it with the callback that starts the task
        self._siblings: tuple[int, list[tuple[int, _Handle]]] | None = None
        #: the first thing the loop refused the workflow (a timer, an unordered
        #: ``as_completed``): the run fails with it even if the code caught it, since
        #: ``except Exception`` around a ``wait_for`` would otherwise hide it for good
        self.refused: Exception | None = None
        #: how many times a task of this loop was cancelled
        self.cancels = 0

    # -- what the pass calls ----------------------------------------------------------------
    def run_ready(self) -> None:
        """Run callbacks until none is ready. The workflow is then blocked on steps (or
        finished): nothing it does next can depend on anything but a step outcome."""
        ready = self._ready
        if not ready:
            return
        outer = events._get_running_loop()
        events._set_running_loop(self)
        # async generators the workflow starts are closed on this loop, as asyncio closes
        # them on its own: left to the process's loop, the step a ``finally`` of one
        # takes would take its key whenever that loop got round to it
        hooks = sys.get_asyncgen_hooks()
        sys.set_asyncgen_hooks(firstiter=_started, finalizer=self._close_asyncgen)
        try:
            while ready:
                handle = ready.popleft()
                # the loop reads the fields of its own handle class
                if handle._cancelled:  # pyright: ignore[reportPrivateUsage]
                    continue
                try:
                    handle._context.run(handle._callback, *handle._args)  # pyright: ignore[reportPrivateUsage]
                except (SystemExit, KeyboardInterrupt):
                    raise
                except BaseException as exc:  # what asyncio's loop does: report, go on
                    self.unhandled.append({"message": "exception in a callback", "exception": exc})
        finally:
            sys.set_asyncgen_hooks(*hooks)
            events._set_running_loop(outer)

    def _close_asyncgen(self, agen: AsyncGenerator[Any, Any]) -> None:
        """An async generator of the workflow's is garbage: close it as a task of this
        loop, as asyncio does. Once the pass has ended nothing runs it: the code that
        would run belongs to an unwound pass."""
        if not self._closed:
            self.create_task(agen.aclose())

    # -- what asyncio calls -----------------------------------------------------------------
    def call_soon(
        self,
        callback: Callable[[Unpack[Ts]], object],
        *args: *Ts,
        context: contextvars.Context | None = None,
    ) -> asyncio.Handle:
        handle = _Handle(callback, args, context)
        self._ready.append(handle)
        return handle  # type: ignore[return-value]  # has every method asyncio calls on one

    def call_soon_threadsafe(
        self,
        callback: Callable[[Unpack[Ts]], object],
        *args: *Ts,
        context: contextvars.Context | None = None,
    ) -> asyncio.Handle:
        raise RuntimeError("workflow code cannot be called from another thread")

    def call_later(
        self,
        delay: float,
        callback: Callable[[Unpack[Ts]], object],
        *args: *Ts,
        context: contextvars.Context | None = None,
    ) -> asyncio.TimerHandle:
        raise self._refuse(ClockRefused(_CLOCK_REFUSED))

    def call_at(
        self,
        when: float,
        callback: Callable[[Unpack[Ts]], object],
        *args: *Ts,
        context: contextvars.Context | None = None,
    ) -> asyncio.TimerHandle:
        raise self._refuse(ClockRefused(_CLOCK_REFUSED))

    def time(self) -> float:
        return 0.0

    def _refuse(self, exc: Exception) -> Exception:
        if self.refused is None:
            self.refused = exc
        return exc

    def create_future(self) -> asyncio.Future[Any]:
        return asyncio.Future(loop=self)

    def create_task(
        self,
        coro: Coroutine[Any, Any, Any] | Any,
        *,
        name: str | None = None,
        context: contextvars.Context | None = None,
    ) -> asyncio.Task[Any]:
        try:
            place = _place_among_siblings(coro)
        except OrderUnknown as exc:
            raise self._refuse(exc) from None
        task = _WorkflowTask(coro, loop=self, name=name, context=context)
        self.tasks.append(task)
        if place is not None:
            self._start_in_given_order(place)
        if self.on_task is not None:
            self.on_task(task)
        return task

    def _start_in_given_order(self, place: tuple[int, int]) -> None:
        """Move the callback that starts the task just made (the last one ready) among
        those of its siblings, so that they start in the order of the list they were
        given, not in the order ``as_completed`` made them in. The siblings' callbacks are
        the last ready ones: making tasks schedules nothing else."""
        given, index = place
        ready = self._ready
        started = ready.pop()
        if (
            self._siblings is None
            or self._siblings[0] != given
            or not self._ends_with([handle for _, handle in self._siblings[1]])
        ):
            self._siblings = (given, [])
        placed = self._siblings[1]
        for _ in placed:
            ready.pop()
        placed.append((index, started))
        placed.sort(key=lambda entry: entry[0])
        ready.extend(handle for _, handle in placed)

    def _ends_with(self, handles: list[_Handle]) -> bool:
        ready = self._ready
        first = len(ready) - len(handles)
        return first >= 0 and all(ready[first + k] is h for k, h in enumerate(handles))

    def pending_tasks(self) -> list[asyncio.Task[Any]]:
        return [task for task in self.tasks if not task.done()]

    def get_task_factory(self) -> None:
        return None

    #: asked by every future and handle made on the loop; a C-level callable, not a method
    get_debug = False.__bool__  # pyright: ignore[reportAssignmentType]

    def is_running(self) -> bool:
        return True

    def is_closed(self) -> bool:
        return self._closed

    def close(self) -> None:
        self._closed = True
        self._ready.clear()

    def release(self) -> None:
        """Forget the tasks made here and who to tell of new ones, once the pass is over
        (see ``CodeReplay._release``)."""
        self.close()
        self.tasks.clear()
        self.unhandled.clear()
        self.on_task = None

    def call_exception_handler(self, context: dict[str, Any]) -> None:
        self.unhandled.append(context)

    def default_exception_handler(self, context: dict[str, Any]) -> None:
        self.unhandled.append(context)

    def get_exception_handler(self) -> None:
        return None

    def run_in_executor(
        self, executor: Executor | None, func: Callable[[Unpack[Ts]], T], *args: *Ts
    ) -> asyncio.Future[T]:
        raise RuntimeError("workflow code cannot run work in an executor; put it in a step (wf.do)")

    def _timer_handle_cancelled(self, handle: asyncio.TimerHandle) -> None:
        pass
