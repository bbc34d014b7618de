"""Code replay: one pass of a code workflow, replayed from the top.

The workflow function runs again on every pass, on a loop of its own
(``runtime.workflow_loop``). A step it calls is resolved here, on the process's loop:
a stored outcome is read back, a new attempt runs, or the step pauses (a timer, the
queue, a child run) and simply never resolves in this pass. Outcomes are handed to the
workflow one at a time, each once its loop has nothing left to run, in the order the run
first saw them; that order is stored with each step (``delivered``), so concurrent
branches take the same keys and the same results on every replay (``runtime.order``).
Approval gates are ``runtime.gates``, requests ``runtime.requests``. When the workflow
can go no further, the pass decides how the run ends (``runtime.runs``), unwinds the
workflow's code without letting it take new steps, and commits with the lease's release.
"""

from __future__ import annotations

import asyncio
import bisect
import collections
import contextlib
from collections.abc import Callable, Coroutine
from typing import Any, cast

import pydantic

from plait import approval, errors, serde
from plait.app import FunctionDef, WorkflowDef
from plait.cancel_guard import uncancelled
from plait.durations import parse_duration
from plait.errors import Cancel, StepError
from plait.records import Decision
from plait.retry import resolve_policy
from plait.runtime import at_once, patches, runs, sends, steps
from plait.runtime.cancels import PassTimers, StepCancels
from plait.runtime.control_flow import (
    ParkSignal,
    PassAborted,
    PauseSignal,
    StepCancelled,
    SuspendSignal,
    Unwind,
)
from plait.runtime.drive import Driver, dump_input
from plait.runtime.gates import Found, Gates
from plait.runtime.host import Host
from plait.runtime.ledger import ENDS_WAIT, Ledger, PassResult
from plait.runtime.order import NewStepHold, ReachedAfter, deliverable, event_order
from plait.runtime.requests import Requests
from plait.runtime.waits import Waits
from plait.runtime.workflow import CURRENT_REPLAY, Request, StepCall, Workflow
from plait.runtime.workflow_loop import WorkflowLoop, current_task
from plait.store.ops import EndRun
from plait.store.rows import PassSnapshot


class CodeReplay:
    """One pass of a code workflow."""

    def __init__(
        self, host: Host, snapshot: PassSnapshot, owner: str, ledger: Ledger | None = None
    ) -> None:
        """``ledger``: where the pass keeps its bookkeeping (a dry pass brings its own,
        ``runtime.check``); by default a new ``Ledger`` of ``snapshot``."""
        self.host = host
        self.app = host.catalog.app
        self.ledger = Ledger(host, snapshot, owner) if ledger is None else ledger
        self.ledger.ordered = True
        self.reached = self.ledger.reached
        self.driver = Driver(self.ledger, host)
        # a loop for workflow code implements only what asyncio's tasks and futures call
        self.wloop = WorkflowLoop()  # type: ignore[abstract]
        #: what each step was reached after (``runtime.order``)
        self.order = ReachedAfter(self.wloop, self.reached)
        self.wloop.on_task = self.order.task_made
        self.gates = Gates(self.ledger, host)
        self.waits = Waits(self.ledger, host)
        self.requests = Requests(self.ledger, host)
        self.main: asyncio.Task[Any] | None = None
        #: the ``wf`` handed to the workflow's code (``plait.current_workflow()``)
        self.workflow: Workflow | None = None
        self.wdef: WorkflowDef | None = None
        #: steps called and not yet started, in call order
        self.new_calls: collections.deque[StepCall[Any]] = collections.deque()
        #: new steps reached while recorded outcomes are handed back (``NewStepHold``)
        self.hold = NewStepHold(self.ledger, self.order)
        #: steps started in this pass that wait (a timer, the queue, a suspend): the run
        #: waits on them. Only those are kept, so a long pass holds no garbage for the GC
        self.waiting: list[StepCall[Any]] = []
        #: steps whose pass side is still running
        self.inflight: dict[asyncio.Task[None], StepCall[Any]] = {}
        #: steps whose outcome is known and not yet handed to the workflow
        self.finished: list[StepCall[Any]] = []
        #: the waits the pass fires itself while steps are in flight; the steps and
        #: waits whose awaiting tasks the workflow cancels
        self.timers, self.cancels = PassTimers(), StepCancels(self.ledger)
        #: steps that failed in this pass: their errors' tracebacks tie them in cycles
        #: (see ``_release``)
        self.failed: list[StepCall[Any]] = []
        #: the pass is ending; the workflow's code is being unwound
        self.closing = False
        #: the workflow's tasks a step of the unwind has stopped (see ``key``)
        self.unwound: set[asyncio.Task[Any] | None] = set()
        #: the workflow is being handed outcomes an earlier pass handed it already: what
        #: it does now it did before (``wf.logger`` stays silent)
        self.replaying = self.ledger.next_delivered > 0 or self.ledger.dry

    # -- wf.do --------------------------------------------------------------------------------
    async def do(self, key: str, name: str, target: Any, data: Any, options: dict[str, Any]) -> Any:
        functions = self.app.functions
        if isinstance(target, str):
            if target in functions:
                return await self._function_step(key, name, functions[target], data, options)
            if self.app.is_runnable(target):
                return await self.driver.child(key, name, target, data)
            policy = resolve_policy(options)
            return await self.driver.missing_function(key, name, target, data, policy)
        fname = self.app.function_name_of(target)
        if fname is not None:
            return await self._function_step(key, name, functions[fname], data, options)
        return await self._closure_step(key, name, target, data, options)

    async def _function_step(
        self, key: str, name: str, fdef: FunctionDef, data: Any, options: dict[str, Any]
    ) -> Any:
        no_retry_on = _call_no_retry_on(name, fdef, options)
        merged = (
            {**fdef.options, **{k: v for k, v in options.items() if v is not None}}
            if options
            else None
        )
        ledger = self.ledger
        step = ledger.steps.get(key)
        if merged is not None:
            policy, timeout = resolve_policy(merged), _timeout(merged, key)
        else:
            policy, timeout = fdef.policy, fdef.timeout
        if step is None:
            step = ledger.new_step(
                key,
                name,
                "do",
                function=fdef.name,
                input=dump_input(data, key, self.host.limits),
                policy=policy,
                timeout=timeout,
                job=fdef.queued,
            )
        else:
            ledger.check_same(step, "do", fdef.name, dump_input(data, key))
            if step.status == "pending" and step.attempts == 0:
                # nothing ran yet (the function was missing when the step was reached):
                # it runs with the options of the function as deployed now
                step.retries, step.retry_delay = policy.retries, policy.delay
                step.timeout, step.queued = timeout, fdef.queued
        on_error = fdef.on_error if merged is None else merged.get("on_error")
        return await self.driver.drive(step, fdef, on_error, no_retry_on)

    async def _closure_step(
        self, key: str, name: str, fn: Callable[..., Any], data: Any, options: dict[str, Any]
    ) -> Any:
        if not callable(fn):
            raise TypeError(
                f"step {name!r}: expected a function, a function name or a workflow name, "
                f"got {type(fn).__name__}"
            )
        ledger = self.ledger
        step = ledger.steps.get(key)
        if step is None:
            step = ledger.new_step(
                key,
                name,
                "do",
                input=dump_input(data, key, self.host.limits),
                policy=resolve_policy(options),
                timeout=_timeout(options, key),
            )
        else:
            ledger.check_same(step, "do", None, dump_input(data, key))
        no_retry_on = tuple(options.get("no_retry_on") or ())
        return await self.driver.drive(step, fn, options.get("on_error"), no_retry_on)

    # -- sleeps, suspends, events, values -----------------------------------------------------
    def sleep(self, key: str, name: str, seconds: float) -> Coroutine[Any, Any, None]:
        """A sleep (``runtime.waits``)."""
        return self.waits.sleep(key, name, seconds)

    def suspend(self, key: str, reason: str) -> Coroutine[Any, Any, None]:
        """A suspend (``runtime.waits``)."""
        return self.waits.suspend(key, reason)

    def wait_for_event(
        self, key: str, name: str, timeout: float | None
    ) -> Coroutine[Any, Any, Any]:
        """An event wait (``runtime.waits``)."""
        return self.waits.wait_for_event(key, name, timeout)

    def wait_for_request(
        self, key: str, name: str, schema: type[pydantic.BaseModel] | None, timeout: float | None
    ) -> Coroutine[Any, Any, Request[Any] | Found]:
        """A wait for a request (``runtime.requests``)."""
        return self.requests.wait(self, key, name, schema, timeout)

    def answer_request(
        self, key: str, request_id: int, data: str | None, reply: str | None, refusal: str | None
    ) -> Coroutine[Any, Any, None]:
        """The answer of a taken request (``runtime.requests``)."""
        return self.requests.answer(key, request_id, data, reply, refusal)

    def send_event(
        self, key: str, run_id: str, name: str, payload: Any
    ) -> Coroutine[Any, Any, None]:
        """``wf.send_event`` (``runtime.sends``)."""
        return sends.send_event(self.ledger, self.host, key, run_id, name, payload)

    def approval(
        self,
        key: str,
        name: str,
        schema: type[pydantic.BaseModel] | None,
        expires: float | None,
        approvers: approval.Policy,
    ) -> Coroutine[Any, Any, Decision[Any] | Found]:
        """A gate (``runtime.gates``)."""
        return self.gates.approval(key, name, schema, expires, approvers)

    def set_value(self, key: str, name: str, value: str | None) -> None:
        """``wf.set_value`` (``runtime.at_once``)."""
        self.order.reached_now(key)
        at_once.set_value(self.hold, self.host.limits, key, name, value)

    def set_tags(self, key: str, tags: dict[str, str]) -> None:
        """``wf.set_tags`` (``runtime.at_once``)."""
        self.order.reached_now(key)
        at_once.set_tags(self.hold, key, tags)

    def stream_write(self, key: str, name: str, value: str | None) -> None:
        """``wf.stream(name).write`` (``runtime.at_once``)."""
        self.order.reached_now(key)
        at_once.stream_write(self.hold, key, name, value)

    def value(self, key: str, make: Callable[[], Any]) -> Any:
        """``wf.now()``, ``wf.uuid()`` (``runtime.at_once``)."""
        self.order.reached_now(key)
        return at_once.value(self.hold, key, make)

    def patched(self, key: str, patch_id: str) -> bool:
        """``wf.patched`` (``runtime.patches``), decided for the branch that calls it."""
        known = self.order.known.get(current_task(self.wloop), ())
        return patches.patched(self.hold, known, key, patch_id)

    def continue_as_new(self, payload: str | None) -> None:
        """``wf.continue_as_new``, judged where the calling branch is: the run's history
        must not go on past this point (``Ledger.continue_as_new``)."""
        known = self.order.known.get(current_task(self.wloop), ())
        self.ledger.continue_as_new(payload, known)

    def deprecate_patch(self, key: str) -> None:
        """``wf.deprecate_patch`` (``runtime.patches``)."""
        patches.deprecate(self.ledger, key)

    # -- the whole pass -----------------------------------------------------------------------
    def key(self, name: str) -> str:
        """The key of the step the workflow takes now. New steps may be taken only while
        the workflow runs, not while a pass that is ending unwinds its code (a
        ``finally`` reached because of that is no exit): the step raises ``Unwind``.
        A task that catches that too and goes on (a retry loop around ``except
        BaseException``) would spin for ever without yielding, so its next steps get
        no key (""): an awaited one never resolves (see ``called``) and the task waits
        there until the pass is gone; a value (``wf.now()``) is not recorded."""
        if self.closing:
            # no local holds the task: the traceback of ``Unwind`` keeps this frame, and
            # the task keeps the exception
            if current_task(self.wloop) in self.unwound:
                return ""
            self.unwound.add(current_task(self.wloop))
            raise Unwind()
        return self.ledger.next_key(name)

    def called(self, call: StepCall[Any]) -> None:
        if self.closing:  # a step ``key`` let a task take while its pass unwinds
            call.late, call.task, call.after = True, None, ()
            return
        call.late = late = self.main is not None and self.main.done()
        call.task = task = current_task(self.wloop)
        call.after = self.reached[call.key] = self.order.known.get(task, ())
        if not late:
            # reached now, not when the pass gets round to it: a new step the workflow
            # takes next, in the same turn, comes after it (``Ledger.ahead``)
            self.ledger.reach(call.key)
        self.new_calls.append(call)

    async def execute(self, wdef: WorkflowDef) -> PassResult:
        try:
            return await self._execute(wdef)
        except asyncio.CancelledError:
            # record how the steps of a cancelled pass ended, whatever else is cancelled
            self._unwind()
            with contextlib.suppress(Exception):
                await uncancelled(self.ledger.cancel_and_flush())
            raise
        finally:
            self._release()

    def _release(self) -> None:
        """Let go of what ties the pass's objects in cycles: the workflow's tasks hold
        this replay (in their context), it holds them and their steps, the loop holds
        its tasks and they hold the loop, a failed step's error holds (through its
        traceback) the frames that hold the step. Left tied, a pass is freed only by
        the garbage collector, whose full collections grow with every pass left to it
        and stall the event loop of a busy worker for tens of milliseconds."""
        self.main = None
        self.workflow = None  # it holds this replay
        self.order.clear()
        self.new_calls.clear()
        self.hold.held.clear()
        self.waiting.clear()
        self.timers.clear()
        self.inflight.clear()
        self.finished.clear()
        self.unwound.clear()
        self.ledger.tasks.clear()
        for call in self.failed:
            call.release()
        self.failed.clear()
        self.wloop.release()

    async def _execute(self, wdef: WorkflowDef) -> PassResult:
        ledger = self.ledger
        self.wdef = wdef
        body: Coroutine[Any, Any, Any]
        try:
            if wdef.input_codec is not None:
                ledger.input = wdef.decode_input(ledger.run.input)
        except errors.InputValidationError as exc:
            body = _raise(exc)  # the run fails with it, as with any error of its code
        else:
            wf = Workflow(self)
            body = wdef.fn(wf, ledger.input) if wdef.takes_data else wdef.fn(wf)
        token = CURRENT_REPLAY.set(self)  # the workflow's tasks copy it
        try:
            self.main = self.wloop.create_task(body)
        finally:
            CURRENT_REPLAY.reset(token)
        await self._pump()
        # read before the unwind, which cancels every wait still open
        abandoned = [call for call in self.waiting if self.cancels.abandoned(call)]
        end = self._decide(abandoned)
        if end is not None and end is ledger.continued:
            self.cancels.left_behind(self.waiting)
        self._unwind()
        if ledger.aborted is not None:
            raise ledger.aborted
        self.cancels.close_abandoned(abandoned)
        if end is not None:
            ledger.end(await ledger.continued_deadline(end))
        return await ledger.finish(runs.pass_status(end))

    async def _pump(self) -> None:
        """Turn the workflow's loop and hand it step outcomes, one at a time, until it
        can go no further in this pass. See ``order.deliverable`` for the order."""
        ledger, wloop = self.ledger, self.wloop
        inflight, hold = self.inflight, self.hold
        to_hand, held, unjudged = hold.to_hand, hold.held, hold.unjudged
        cancels = wloop.cancels
        while True:
            wloop.run_ready()
            new = self.new_calls
            if wloop.cancels != cancels:
                # first, even in a turn that stops the pass: a body the workflow
                # cancelled is not waited for (it may never end on its own)
                cancels = wloop.cancels
                self.cancels.sweep(new, inflight, self.waiting)
                if held:
                    self.cancels.sweep(held, {}, [])
            if ledger.conflict or ledger.aborted or ledger.continued:
                if ledger.continued and unjudged and hold.judge_later():
                    hold.write_judged()  # with the run's end (else the run conflicts)
                break  # after a continue as new, nothing starts and nothing is handed on
            if (held or unjudged) and await hold.release(new, False, self._resolve):
                continue  # ahead of the steps reached since, in the order reached
            while new:
                call = new.popleft()
                if call.late or (to_hand and hold.holds(call)):
                    continue
                if not inflight and not new and not self.finished and not self.timers:
                    # the only thing going on: resolve it here, with no task of its own
                    # (nothing can cancel it meanwhile: the workflow runs only between)
                    await self._resolve(call)
                else:
                    task = ledger.spawn(self._resolve(call))
                    inflight[task] = call
            ready = deliverable(self.finished, inflight, ledger.steps)
            if ready is not None:
                self._deliver(ready)
                continue
            if (held or unjudged) and await hold.release(new, not inflight, self._resolve):
                continue
            if not inflight:
                break
            if not ledger.ops or ledger.dry:
                await self.timers.wait(inflight, ledger.now, self._refire)
            elif not await self.timers.wait(inflight, ledger.now, self._refire, ENDS_WAIT):
                # steps that ended wait for the next commit; a sibling that runs on for
                # long must not hold their ends back (a crash would run them again)
                with contextlib.suppress(PassAborted):  # the loop's first look stops it
                    await ledger.flush()
        if ledger.conflict or ledger.aborted:
            # the run fails here: a body still running (an attempt a restart cut short,
            # run again before the conflict came to light) is interrupted, as a shutdown
            # interrupts it, and a retry of the fixed code runs it again; waited for, it
            # would hold the run (maybe for ever) and run again at every restart. A pass
            # that lost its lease can write no outcome of a body, and the worker that has
            # the run now runs the step again: its bodies stop too, not held to their end
            ledger.interrupt_bodies()
        # whatever was still in flight when the pump stopped early has ended
        await ledger.join()

    def _refire(self, call: StepCall[Any]) -> None:
        """A timed wait whose time came while steps were in flight (``PassTimers``)."""
        self.waiting.remove(call)
        call.outcome = None
        self.inflight[self.ledger.spawn(self._resolve(call))] = call

    async def _resolve(self, call: StepCall[Any]) -> None:
        """Run the pass side of one step; its outcome waits in ``finished`` for delivery."""
        try:
            fn, args = call.make
            call.result = await fn(*args)
            call.outcome = "ok"
        except PauseSignal as sig:
            if not self.cancels.cancelled_paused(call):
                call.outcome = "paused"
                self.waiting.append(call)
                self.timers.add(call, sig.until, self.ledger.steps.get(call.key))
            return
        except StepCancelled:
            call.outcome = "cancelled"
            return
        except SuspendSignal as sig:
            call.outcome, call.error = "suspended", sig
            self.waiting.append(call)
            return
        except PassAborted:
            call.outcome = "aborted"
            return
        except Exception as exc:
            call.outcome, call.error = "error", exc
            self.failed.append(call)
        self.finished.append(call)

    def _deliver(self, call: StepCall[Any]) -> None:
        self.finished.remove(call)
        if isinstance(call.result, Found) and not _take(self, call, call.result):
            return
        to_hand = self.hold.to_hand
        if to_hand:
            to_hand.discard(call.key)
        step = self.ledger.steps.get(call.key)
        if step is None or step.delivered is None:
            # an outcome the workflow has not seen: new ground (a dry pass, ``engine.check``,
            # is no pass of the run, and stays silent throughout)
            self.replaying = self.ledger.dry
            if step is not None:
                self.ledger.mark_delivered(step)
        if call.future.done():  # the workflow cancelled its wait; the step still counts
            return
        self.order.received(call.task, call.key, call.after)
        if call.outcome == "ok":
            call.future.set_result(call.result)
        else:
            assert call.error is not None
            call.future.set_exception(call.error)

    def _decide(self, abandoned: list[StepCall[Any]]) -> EndRun | None:
        """How the run ends after this pass, or None while it waits (on anything but the
        waits it ``abandoned``)."""
        ledger, main = self.ledger, self.main
        assert main is not None
        if ledger.aborted is not None:
            return None
        if ledger.conflict:
            return runs.failed_control(ledger.conflict, errors.VERSION_CONFLICT)
        if self.wloop.refused is not None:
            return runs.failed_record(serde.error_record(self.wloop.refused))
        if ledger.continued is not None:
            return ledger.continued
        waiting = [call for call in self.waiting if call not in abandoned]
        suspended = _stopper(waiting)
        if main.done():
            if main.cancelled():
                exc: BaseException | None = RuntimeError("the workflow's own task was cancelled")
            else:
                exc = main.exception()
            if exc is None:
                if waiting:  # a step nobody awaited has yet to end
                    return _suspended(suspended) if suspended else None
                what = f"the output of workflow {ledger.run.workflow!r}"
                try:
                    output = serde.dumps(main.result(), what=what, limits=self.host.limits)
                    codec = self.wdef.output_codec if self.wdef is not None else None
                    if codec is not None:
                        codec.decode(output, what)  # what engine.run and a parent will read
                except (
                    errors.NotJSONError,
                    errors.PayloadTooLargeError,
                    errors.PayloadTooDeepError,
                    errors.TypeMismatchError,
                ) as err:
                    return runs.failed_record(serde.error_record(err))
                return runs.completed(output)
            return runs.raised(_principal(exc))
        if suspended is not None:
            return _suspended(suspended)
        if not waiting:
            message = (
                f"workflow {ledger.run.workflow!r} is waiting on something that is not a "
                "step (an asyncio.Event, a Future, a lock held by itself...); only steps, "
                "sleeps, suspends and events can be waited on across passes"
            )
            return runs.failed_control(message, errors.WORKFLOW_BLOCKED)
        return None

    def _unwind(self) -> None:
        """Stop the workflow's code without letting it take new steps: every task still
        blocked on a step is cancelled, so ``finally`` blocks and ``async with`` exits
        unwind (and any step they call raises ``Unwind`` rather than run early)."""
        if self.closing:
            return
        self.closing = True
        wloop = self.wloop
        for _ in range(_UNWIND_ROUNDS):
            pending = wloop.pending_tasks()
            if not pending:
                break
            for task in pending:
                task.cancel()
            with contextlib.suppress(Exception):
                wloop.run_ready()
        wloop.close()


_UNWIND_ROUNDS = 5


async def _raise(exc: Exception) -> Any:
    raise exc


def _principal(exc: BaseException) -> BaseException:
    """A task group fails with a group of errors; the run fails with the first of them
    that plait knows (a step's failure, a cancel), so its record names the step."""
    if not isinstance(exc, BaseExceptionGroup):
        return exc
    stack: list[BaseException] = [exc]
    while stack:
        current = stack.pop(0)
        if isinstance(current, BaseExceptionGroup):
            stack[:0] = cast(BaseExceptionGroup[BaseException], current).exceptions
        elif isinstance(current, Cancel | StepError):
            return current
    return cast(BaseException, exc)


def _stopper(waiting: list[StepCall[Any]]) -> StepCall[Any] | None:
    """The waiting step that stops the run for a person: a parked step first (the run
    waits either way, and the parked step is what a retry must reopen), else a suspend."""
    parked = next((c for c in waiting if isinstance(c.error, ParkSignal)), None)
    return parked or next((c for c in waiting if c.outcome == "suspended"), None)


def _suspended(call: StepCall[Any]) -> EndRun:
    sig = call.error
    assert isinstance(sig, SuspendSignal)
    return runs.waits(sig)


def _timeout(options: dict[str, Any], key: str) -> float | None:
    if options.get("timeout") is None:
        return None
    return parse_duration(options["timeout"], what=f"timeout of step {key!r}")


def _call_no_retry_on(
    name: str, fdef: FunctionDef, options: dict[str, Any]
) -> tuple[Any, ...] | None:
    """The ``no_retry_on`` a call of ``fdef`` gives, or None for the function's own. A job
    step's body runs in a step worker, which decides on its retries knowing the
    function's own options only, so a call of one cannot give its own."""
    given = options.get("no_retry_on")
    if given is None:
        return None
    if fdef.queued:
        raise TypeError(
            f"step {name!r}: no_retry_on cannot be given to a call of queued function "
            f"{fdef.name!r}; give it to @app.function instead"
        )
    return tuple(given)


def _take(replay: CodeReplay, call: StepCall[Any], found: Found) -> bool:
    """Whether the wait takes what it found (an event, the decisions held for a
    gate), so that its outcome is delivered now: only if the workflow still waits.

    A wait finds its event when the workflow calls it, but the workflow may give it
    up before the event's turn to be delivered comes (a deadline recorded as seen
    first wins the race again on replay; a retry reopened the wait it gave up). Taken
    then, the event would be thrown away; instead it stays for the next wait of its
    name, the wait is closed as given up at the pass's end, and the run is due again
    at once, so that a wait of that name that found nothing in this pass gets it. A
    gate that refuses every decision held for it goes on waiting."""
    ledger = replay.ledger
    if call.future.done():
        for event in found.events:
            bisect.insort(ledger.events, event, key=event_order)
        if found.request is not None:
            replay.requests.put_back(found.request)
        call.outcome = "paused"
        replay.waiting.append(call)
        ledger.due_again = True
        return False
    step = ledger.steps[call.key]
    if found.request is not None:
        call.result = replay.requests.take(replay, step, found)
        return True
    gate = found.gate
    if gate is None:
        (event,) = found.events
        ledger.add(steps.consume_event(step, event.id, event.payload, ledger.now()))
        call.result = serde.loads(event.payload)
        return True
    try:
        call.result = replay.gates.decide(step, found.name, found.events, gate.schema)
    except Exception as exc:
        call.outcome, call.error = "error", exc
        return True
    if call.result is None:
        call.outcome = "paused"
        replay.waiting.append(call)
        return False
    return True
