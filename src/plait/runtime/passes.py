"""One orchestrator pass: replay a code workflow from the top against its stored steps.

A pass reads the run, its steps, its unconsumed events and its state in one round trip,
then calls the workflow function. Every ``wf.do`` either returns a stored result, runs a new
attempt, or raises a pause signal. Writes are collected and committed in as few
transactions as the promise allows: an attempt's start is committed before its body runs
(so a crash shows up as an interrupted attempt), and its result rides along with the next
commit (the next step's start, or the end of the pass). A crash in between re-runs that
step with the same invocation id, which is exactly the at-least-once promise.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import time
from collections.abc import Awaitable, Callable, Coroutine, Generator
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, Protocol

from plait import errors, ids, serde
from plait.app import FunctionDef, WorkflowDef
from plait.durations import parse_duration
from plait.errors import Cancel, EventTimeout, StepError
from plait.retry import RetryPolicy, resolve_policy
from plait.runtime.context import StepContext
from plait.runtime.execute import Outcome, run_attempt
from plait.runtime.signals import PassAborted, PauseSignal, SuspendSignal
from plait.store.base import (
    Batch,
    ClearTimer,
    ConsumeEvent,
    CreateChildRun,
    EndRun,
    EnqueueJob,
    FinishAttempt,
    NewRun,
    Op,
    PassSnapshot,
    PutStep,
    SetTimer,
    StartAttempt,
    StepRow,
)

if TYPE_CHECKING:
    from plait.engine import Engine

#: attempts of one step cut short by a dying worker before the step is failed
MAX_INTERRUPTIONS = 10
_STEP_OPTIONS = frozenset({"retries", "retry_delay", "timeout", "on_error"})


@dataclasses.dataclass
class PassResult:
    status: str  # running (paused), completed, failed, cancelled, suspended
    children: list[str] = dataclasses.field(default_factory=list)
    queued: bool = False
    #: set once the pass gave its lease back with its last writes: due again at once?
    again: bool | None = None


class AttemptHook(Protocol):
    """Lets a runtime built on passes (graph workflows) see each inline attempt: fill in
    the context before the body runs, and turn what the body did through the context
    (``ctx.branch``, ``ctx.set_state``) into writes that ride with the attempt's result.
    ``finish`` may turn a success into a failure (state that is not JSON, for instance)."""

    def prepare(self, step: StepRow, ctx: StepContext) -> None: ...

    def finish(self, step: StepRow, ctx: StepContext, outcome: Outcome) -> Outcome: ...


class Pass:
    """The state of one replay; discarded when it ends."""

    def __init__(self, engine: Engine, snapshot: PassSnapshot, owner: str) -> None:
        self.engine = engine
        self.app = engine.app
        self.store = engine.store
        self.owner = owner
        self.run = snapshot.run
        self.steps: dict[str, StepRow] = snapshot.steps
        self.events = list(snapshot.events)
        self.state = {k: serde.loads(v) for k, v in snapshot.state.items()}
        self.ops: list[Op] = []
        self.counters: dict[str, int] = {}
        self.seq = max((s.seq for s in self.steps.values()), default=-1) + 1
        self.paused = False
        self.children: list[str] = []
        self.queued = False
        #: every step started in this pass; the pass ends only when all have settled
        self.tasks: list[asyncio.Task[Any]] = []
        #: steps called through ``wf`` that may not have started yet (see ``StepCall``)
        self.calls: list[StepCall] = []
        #: the task running the workflow function; it may drive its steps itself
        self.main_task: asyncio.Task[Any] | None = None
        self.loop = asyncio.get_running_loop()
        self.conflict: str | None = None
        self.input = serde.loads(self.run.input)
        #: replaying on code that is not the version the run started on
        self.foreign_version = False
        self.visited: set[str] = set()
        self.aborted: PassAborted | None = None
        #: None for code workflows; the graph runtime sets one (see ``AttemptHook``)
        self.attempt_hook: AttemptHook | None = None

    # -- writes -------------------------------------------------------------------------------
    async def flush(self) -> None:
        if not self.ops:
            return
        ops, self.ops = self.ops, []
        try:
            await self.store.commit(Batch(self.run.id, ops, fence=self.owner))
        except Exception as exc:
            self.aborted = PassAborted(exc)
            raise self.aborted from exc

    async def finish(self, status: str) -> PassResult:
        """The last writes of the pass and the release of its lease, in one commit. A
        pass cut short by a shutdown leaves the run due at once for another worker."""
        seen = -1 if self.engine.runner.closing else self.run.wakeups
        ops, self.ops = self.ops, []
        try:
            again = await self.store.commit(Batch(self.run.id, ops, fence=self.owner, release=seen))
        except Exception as exc:
            raise PassAborted(exc) from exc
        return PassResult(status, self.children, self.queued, again)

    def spawn(self, coro: Any) -> asyncio.Task[Any]:
        """Start a step now. Steps are tasks from the moment they are called, so a pass
        can wait for every one of them (even inside a ``gather`` that already raised)
        before it records its outcome and gives up the lease."""
        task = asyncio.ensure_future(coro)
        self.tasks.append(task)
        return task

    def start_calls(self) -> None:
        """Give every step called but neither awaited nor started yet its own task."""
        calls, self.calls = self.calls, []
        for call in calls:
            call.start()

    async def settle(self) -> None:
        self.start_calls()
        while True:
            pending = [t for t in self.tasks if not t.done()]
            if not pending:
                break
            await asyncio.wait(pending)
        for task in self.tasks:
            if not task.cancelled():
                task.exception()  # retrieved: a paused branch nobody awaited is not an error

    # -- keys ---------------------------------------------------------------------------------
    def next_key(self, name: str) -> str:
        """``name`` the first time a pass reaches it, then ``name#1``, ``name#2``..."""
        n = self.counters.get(name, 0)
        self.counters[name] = n + 1
        return name if n == 0 else f"{name}#{n}"

    def _check_prefix(self, key: str) -> None:
        """On foreign code, a new step may only start once every recorded step has been
        reached again; otherwise the code took another path than the recorded one."""
        if not self.foreign_version:
            return
        unreached = [k for k, s in self.steps.items() if k not in self.visited]
        if unreached:
            first = min(unreached, key=lambda k: self.steps[k].seq)
            self.conflict = (
                f"step {key!r} is new in this version of {self.run.workflow!r}, but the run "
                f"recorded step {first!r} that the new code has not reached at that point"
            )
            raise SuspendSignal(self.conflict, errors.VERSION_CONFLICT)

    def _new_step(
        self,
        key: str,
        name: str,
        kind: str,
        *,
        function: str | None = None,
        status: str = "pending",
        input: str | None = None,
        policy: RetryPolicy | None = None,
        timeout: float | None = None,
        queued: bool = False,
    ) -> StepRow:
        self._check_prefix(key)
        self.visited.add(key)
        now = time.time()
        step = StepRow(
            run_id=self.run.id,
            key=key,
            seq=self.seq,
            name=name,
            kind=kind,
            function=function,
            status=status,
            input=input,
            output=None,
            error=None,
            attempts=0,
            failures=0,
            retries=policy.retries if policy else 0,
            retry_delay=policy.delay if policy else None,
            timeout=timeout,
            invocation_id=ids.invocation_id(self.run.id, key),
            child_run_id=None,
            branch=None,
            from_key=None,
            queued=queued,
            wake_at=None,
            created_at=now,
            updated_at=now,
        )
        self.seq += 1
        self.steps[key] = step
        return step

    def _put(self, step: StepRow) -> None:
        step.updated_at = time.time()
        self.ops.append(PutStep(step))

    def _pause(self, key: str, until: float | None = None) -> PauseSignal:
        self.paused = True
        return PauseSignal(key, until)

    def _check_same(self, step: StepRow, kind: str, function: str | None) -> None:
        """A recorded step must be what the code asks for now, or the replay has diverged."""
        self.visited.add(step.key)
        if step.kind == kind and step.function == function:
            return
        was = f"{step.kind} {step.function!r}" if step.function else step.kind
        now = f"{kind} {function!r}" if function else kind
        self.conflict = (
            f"step {step.key!r} was recorded as {was} but the workflow code now asks for {now}"
        )
        raise SuspendSignal(self.conflict, errors.VERSION_CONFLICT)

    # -- wf.do -------------------------------------------------------------------------------
    async def do(self, key: str, name: str, target: Any, data: Any, options: dict[str, Any]) -> Any:
        if isinstance(target, str):
            if target in self.app.functions:
                return await self._function_step(
                    key, name, self.app.functions[target], data, options
                )
            if self.app.is_runnable(target):
                return await self._child_step(key, name, target, data)
            return await self._missing_function(key, name, target, data, options)
        fname = self.app.function_name_of(target)
        if fname is not None:
            return await self._function_step(key, name, self.app.functions[fname], data, options)
        return await self._closure_step(key, name, target, data, options)

    async def _missing_function(
        self, key: str, name: str, function: str, data: Any, options: dict[str, Any]
    ) -> Any:
        step = self.steps.get(key)
        if step is None:
            policy = resolve_policy(options)
            step = self._new_step(
                key, name, "do", function=function, input=_dump_input(data, key), policy=policy
            )
            self._put(step)
        else:
            self._check_same(step, "do", function)
        if step.status == "succeeded":
            return serde.loads(step.output)
        if step.status == "failed":
            raise StepError(key, serde.loads(step.error) or {})
        raise SuspendSignal(
            f"function {function!r} (step {key!r}) is not registered in this deployment; "
            "deploy it and resume the run",
            errors.FUNCTION_NOT_FOUND,
        )

    async def _function_step(
        self, key: str, name: str, fdef: FunctionDef, data: Any, options: dict[str, Any]
    ) -> Any:
        merged = (
            {**fdef.options, **{k: v for k, v in options.items() if v is not None}}
            if options
            else None
        )
        step = self.steps.get(key)
        if step is None:
            if merged is not None:
                policy = resolve_policy(merged)
                timeout = (
                    parse_duration(merged["timeout"], what=f"timeout of step {key!r}")
                    if merged.get("timeout") is not None
                    else None
                )
            else:
                policy, timeout = fdef.policy, fdef.timeout
            step = self._new_step(
                key,
                name,
                "do",
                function=fdef.name,
                input=_dump_input(data, key),
                policy=policy,
                timeout=timeout,
                queued=fdef.queued,
            )
        else:
            self._check_same(step, "do", fdef.name)
        on_error = fdef.on_error if merged is None else merged.get("on_error")
        return await self._drive_step(step, fdef, on_error)

    async def _closure_step(
        self, key: str, name: str, fn: Callable[..., Any], data: Any, options: dict[str, Any]
    ) -> Any:
        if not callable(fn):
            raise TypeError(
                f"step {name!r}: expected a function, a function name or a workflow name, "
                f"got {type(fn).__name__}"
            )
        step = self.steps.get(key)
        if step is None:
            policy = resolve_policy(options)
            timeout = (
                parse_duration(options["timeout"], what=f"timeout of step {key!r}")
                if options.get("timeout") is not None
                else None
            )
            step = self._new_step(
                key, name, "do", input=_dump_input(data, key), policy=policy, timeout=timeout
            )
        else:
            self._check_same(step, "do", None)
        return await self._drive_step(step, fn, options.get("on_error"))

    async def _drive_step(
        self, step: StepRow, body: FunctionDef | Callable[..., Any], on_error: str | None
    ) -> Any:
        while True:
            if step.status == "succeeded":
                return serde.loads(step.output)
            if step.status == "failed":
                await self._compensate(step, on_error)
                raise StepError(step.key, serde.loads(step.error) or {})
            if step.queued:
                if step.status == "pending":
                    step.status = "scheduled"
                    self._put(step)
                    self.ops.append(EnqueueJob(step.key, step.function or "", time.time()))
                    self.queued = True
                raise self._pause(step.key)
            if step.status == "scheduled" and step.wake_at and step.wake_at > time.time():
                raise self._pause(step.key, step.wake_at)
            if self.engine.runner.closing:
                raise self._pause(step.key)  # shutting down: start no new attempt here
            await self._attempt(step, body)

    async def _attempt(self, step: StepRow, body: FunctionDef | Callable[..., Any]) -> None:
        now = time.time()
        if step.status == "running":
            # The pass that started this attempt died with its process; we hold the lease
            # now, so that attempt is over. It does not use up the retry budget, but a step
            # whose body kills its worker every time must not kill workers forever.
            interrupted = step.attempts - step.failures
            if interrupted >= MAX_INTERRUPTIONS:
                step.status = "failed"
                step.error = serde.dumps(
                    {
                        "message": f"step {step.key!r} was interrupted {interrupted} times "
                        "(its worker died while running it each time)",
                        "type": "StepInterrupted",
                        "code": errors.STEP_INTERRUPTED,
                    }
                )
                self.ops.append(FinishAttempt(step, step.attempts, "interrupted", None, step.error))
                return
            self.ops.append(FinishAttempt(step, step.attempts, "interrupted"))
        if step.status == "scheduled":
            self.ops.append(ClearTimer(step.key))
        step.attempts += 1
        attempt = step.attempts
        step.status, step.wake_at, step.updated_at = "running", None, now
        self.ops.append(StartAttempt(step, attempt, self.owner))
        await self.flush()
        ctx = StepContext(
            run_id=self.run.id,
            step_key=step.key,
            invocation_id=step.invocation_id,
            attempt=attempt,
            workflow=self.run.workflow,
        )
        if self.attempt_hook is not None:
            self.attempt_hook.prepare(step, ctx)
        try:
            outcome = await run_attempt(body, serde.loads(step.input), ctx, step.timeout)
        except asyncio.CancelledError:
            if self.engine.runner.is_cancelling(self.run.id):
                step.status = "failed"
                step.error = serde.dumps(
                    {
                        "message": "cancelled",
                        "type": "CancelledError",
                        "code": errors.WORKFLOW_CANCELLED,
                    }
                )
                status = "cancelled"
            else:
                # This process is shutting down: the step is not failed, it will run again
                # (same invocation id, next attempt) wherever the run continues.
                step.status, status = "pending", "interrupted"
            self.ops.append(FinishAttempt(step, attempt, status, None, step.error))
            raise
        if self.attempt_hook is not None:
            outcome = self.attempt_hook.finish(step, ctx, outcome)
        step.updated_at = time.time()
        if outcome.ok:
            step.status, step.output, step.error = "succeeded", outcome.output, None
            self.ops.append(FinishAttempt(step, attempt, "succeeded", outcome.output))
            return
        error = serde.dumps(outcome.error)
        step.failures += 1
        step.error = error
        policy = RetryPolicy(step.retries, step.retry_delay)
        if outcome.retryable and step.failures <= step.retries:
            delay = policy.delay_after(step.failures)
            step.status = "scheduled"
            step.wake_at = time.time() + delay
            self.ops.append(FinishAttempt(step, attempt, "failed", None, error))
            if delay > 0:
                self.ops.append(SetTimer(step.key, "retry", step.wake_at))
            return
        step.status = "failed"
        self.ops.append(FinishAttempt(step, attempt, "failed", None, error))

    async def _compensate(self, step: StepRow, on_error: str | None) -> None:
        if not on_error or step.kind == "on_error":
            return
        key = f"{step.key}:on_error"
        comp = self.steps.get(key)
        fdef = self.app.functions.get(on_error)
        if comp is None:
            data = {
                "error": serde.loads(step.error),
                "input": serde.loads(step.input),
                "invocation_id": step.invocation_id,
                "step_key": step.key,
            }
            if fdef is None:
                return await self._missing_function(key, key, on_error, data, {"retries": 0})
            comp = self._new_step(
                key,
                key,
                "on_error",
                function=on_error,
                input=_dump_input(data, key),
                policy=RetryPolicy(0, None),
                timeout=fdef.timeout,
                queued=fdef.queued,
            )
        if fdef is None:
            raise SuspendSignal(
                f"function {on_error!r} (step {key!r}) is not registered in this deployment; "
                "deploy it and resume the run",
                errors.FUNCTION_NOT_FOUND,
            )
        # the original error is what fails the run; the handler's own is on its step
        with contextlib.suppress(StepError):
            await self._drive_step(comp, fdef, None)

    # -- children ------------------------------------------------------------------------------
    async def _child_step(
        self,
        key: str,
        name: str,
        workflow: str,
        data: Any,
        *,
        step_kind: str = "child",
        target: tuple[str, str | None] | None = None,
    ) -> Any:
        """A child run of ``workflow`` as step ``key``. The graph runtime records its node
        steps with their own ``step_kind`` and passes ``target`` (kind, version) for graphs
        registered at run time, which ``engine.describe`` does not know."""
        step = self.steps.get(key)
        if step is None:
            step = self._new_step(
                key,
                name,
                step_kind,
                function=workflow,
                input=_dump_input(data, key),
                policy=RetryPolicy(0, None),
            )
        else:
            self._check_same(step, step_kind, workflow)
        if step.status == "succeeded":
            return serde.loads(step.output)
        if step.status == "failed":
            raise StepError(key, serde.loads(step.error) or {})
        if step.status == "pending":
            step.attempts += 1
            child_id = ids.child_run_id(step.invocation_id, step.attempts)
            step.child_run_id = child_id
            step.status = "running"
            kind, version = target or self.engine.describe(workflow)
            self.ops.append(StartAttempt(step, step.attempts, self.owner))
            self.ops.append(
                CreateChildRun(
                    NewRun(
                        id=child_id,
                        workflow=workflow,
                        kind=kind,
                        version=version,
                        input=step.input,
                        owner=self.run.owner,
                        parent_run_id=self.run.id,
                        parent_step_key=key,
                    )
                )
            )
            self.children.append(child_id)
        raise self._pause(key)

    # -- sleeps, suspends, events, values ---------------------------------------------------------
    async def sleep(self, key: str, name: str, seconds: float) -> None:
        step = self.steps.get(key)
        now = time.time()
        if step is None:
            step = self._new_step(
                key, name, "sleep", status="scheduled", input=serde.dumps({"seconds": seconds})
            )
            step.wake_at = now + seconds
            if seconds <= 0:
                step.status = "succeeded"
                self._put(step)
                return
            self._put(step)
            self.ops.append(SetTimer(key, "sleep", step.wake_at))
        else:
            self._check_same(step, "sleep", None)
        if step.status == "succeeded":
            return
        if step.wake_at is not None and step.wake_at <= now:
            step.status = "succeeded"
            self._put(step)
            self.ops.append(ClearTimer(key))
            return
        raise self._pause(key, step.wake_at)

    async def suspend(self, key: str, reason: str) -> None:
        step = self.steps.get(key)
        if step is None:
            step = self._new_step(
                key,
                key,
                "suspend",
                input=serde.dumps({"reason": reason, "suspended_at": time.time()}),
            )
            step.attempts = 1
            self.ops.append(StartAttempt(step, 1, self.owner))
        else:
            self._check_same(step, "suspend", None)
        if step.status == "succeeded":
            return
        raise SuspendSignal(reason, errors.WORKFLOW_SUSPENDED)

    async def wait_for_event(self, key: str, name: str, timeout: float | None) -> Any:
        step = self.steps.get(key)
        now = time.time()
        if step is None:
            step = self._new_step(
                key, key, "event", status="scheduled", input=serde.dumps({"event": name})
            )
            if timeout is not None:
                step.wake_at = now + timeout
                self.ops.append(SetTimer(key, "event_timeout", step.wake_at))
            self._put(step)
        else:
            self._check_same(step, "event", None)
        if step.status == "succeeded":
            return serde.loads(step.output)
        if step.status == "failed":
            raise EventTimeout(name, key)
        for event in self.events:
            if event.name == name:
                self.events.remove(event)
                step.status, step.output = "succeeded", event.payload
                self._put(step)
                self.ops.append(ConsumeEvent(event.id, key))
                if step.wake_at is not None:
                    self.ops.append(ClearTimer(key))
                return serde.loads(event.payload)
        if step.wake_at is not None and step.wake_at <= now:
            step.status = "failed"
            step.error = serde.dumps(
                {
                    "message": f"no event {name!r} before the timeout",
                    "type": "EventTimeout",
                    "code": errors.EVENT_TIMEOUT,
                }
            )
            self._put(step)
            self.ops.append(ClearTimer(key))
            raise EventTimeout(name, key)
        raise self._pause(key, step.wake_at)

    def value(self, key: str, make: Callable[[], Any]) -> Any:
        """A value recorded once and replayed ever after (``wf.now()``, ``wf.uuid()``)."""
        step = self.steps.get(key)
        if step is not None:
            self.visited.add(key)
            return serde.loads(step.output)
        step = self._new_step(key, key, "value", status="succeeded")
        step.output = serde.dumps(make())
        self._put(step)
        return serde.loads(step.output)

    # -- the whole pass --------------------------------------------------------------------------
    async def execute(self, wdef: WorkflowDef) -> PassResult:
        try:
            return await self._execute(wdef)
        except asyncio.CancelledError:
            self.start_calls()
            for task in self.tasks:
                task.cancel()
            with contextlib.suppress(BaseException):
                await asyncio.shield(self._settle_and_flush())
            raise

    async def _settle_and_flush(self) -> None:
        await asyncio.gather(*self.tasks, return_exceptions=True)
        await self.flush()

    async def _execute(self, wdef: WorkflowDef) -> PassResult:
        self.main_task = asyncio.current_task()
        wf = Workflow(self)
        end: EndRun | None = None
        try:
            if wdef.takes_data:
                result = await wdef.fn(wf, self.input)
            else:
                result = await wdef.fn(wf)
            if not self.paused:
                try:
                    output = serde.dumps(
                        result, what=f"the output of workflow {self.run.workflow!r}"
                    )
                    end = EndRun("completed", output=output)
                except errors.NotJSONError as exc:
                    end = EndRun("failed", error=serde.dumps(serde.error_record(exc)))
        except PauseSignal:
            pass
        except PassAborted:
            pass
        except SuspendSignal as sig:
            if sig.code == errors.VERSION_CONFLICT:
                end = EndRun("failed", error=_control_error(sig.message, errors.VERSION_CONFLICT))
            else:
                end = EndRun("suspended", error=_control_error(sig.message, sig.code))
        except Cancel as exc:
            end = EndRun("cancelled", error=_control_error(exc.reason, errors.WORKFLOW_CANCELLED))
        except StepError as exc:
            end = EndRun("failed", error=serde.dumps({**exc.error, "step": exc.step_key}))
        except Exception as exc:
            end = EndRun("failed", error=serde.dumps(serde.error_record(exc)))
        await self.settle()
        if self.aborted is not None:
            raise self.aborted
        if end is None:
            # A branch of a gather may need a suspension while a sibling paused first;
            # the pause must not hide it, or the run would wait for nobody.
            for task in self.tasks:
                exc = None if task.cancelled() else task.exception()
                if isinstance(exc, SuspendSignal) and exc.code != errors.VERSION_CONFLICT:
                    end = EndRun("suspended", error=_control_error(exc.message, exc.code))
                    break
        if self.conflict and (end is None or end.status != "failed"):
            end = EndRun("failed", error=_control_error(self.conflict, errors.VERSION_CONFLICT))
        if end is not None and self.paused and end.status == "completed":
            end = None  # the code swallowed a pause; the run is not finished
        if end is not None:
            self.ops.append(end)
        return await self.finish(end.status if end else "running")


def _check_options(step_name: str, options: dict[str, Any]) -> None:
    """Bad step options fail at the call, naming the step."""
    unknown = set(options) - _STEP_OPTIONS
    if unknown:
        raise TypeError(
            f"step {step_name!r}: unknown option(s) {', '.join(sorted(unknown))}; "
            f"use {', '.join(sorted(_STEP_OPTIONS))}"
        )
    resolve_policy(options)
    if options.get("timeout") is not None:
        parse_duration(options["timeout"], what=f"timeout of step {step_name!r}")
    if options.get("on_error") is not None and not isinstance(options["on_error"], str):
        raise TypeError(f"step {step_name!r}: on_error must be a function name")


class StepCall:
    """What ``wf.do``, ``wf.sleep``, ``wf.suspend`` and ``wf.wait_for_event`` return.

    A step starts when it is called: at the loop's next turn it becomes a task of its own
    (so ``asyncio.gather`` runs steps side by side, and a step nobody awaits still runs and
    is waited for). When the workflow awaits the call before that turn, which is what
    ``await wf.do(...)`` does, the workflow's own task drives the step instead; that saves
    a task and two turns of the loop on every sequential step and behaves the same.
    """

    __slots__ = ("_coro", "_error", "_pass", "_result", "_task")

    def __init__(self, p: Pass, coro: Coroutine[Any, Any, Any]) -> None:
        self._pass = p
        self._coro: Coroutine[Any, Any, Any] | None = coro
        self._task: asyncio.Task[Any] | None = None
        #: the outcome when the workflow drove the step itself, for a second ``await``
        self._result: Any = None
        self._error: BaseException | None = None
        p.calls.append(self)
        p.loop.call_soon(self.start)

    def start(self) -> None:
        if self._coro is not None:
            coro, self._coro = self._coro, None
            self._task = self._pass.spawn(coro)

    def __await__(self) -> Generator[Any, None, Any]:
        coro = self._coro
        if coro is not None and asyncio.current_task(self._pass.loop) is self._pass.main_task:
            self._coro = None
            try:
                self._result = yield from coro.__await__()
            except BaseException as exc:
                self._error = exc
                raise
            return self._result
        self.start()
        if self._task is None:  # driven by the workflow already: awaited a second time
            if self._error is not None:
                raise self._error
            return self._result
        return (yield from self._task.__await__())


def _control_error(message: str, code: str) -> str | None:
    return serde.dumps({"message": message, "type": code.title().replace("_", ""), "code": code})


def _dump_input(data: Any, key: str) -> str | None:
    return serde.dumps(data, what=f"the input of step {key!r}")


class Workflow:
    """The ``wf`` object a code workflow receives. Every method is replay-safe."""

    def __init__(self, p: Pass) -> None:
        self._pass = p
        self.run_id: str = p.run.id
        self.name: str = p.run.workflow
        self.input: Any = p.input
        self.owner: str | None = p.run.owner

    @staticmethod
    def _check_name(name: object, what: str) -> str:
        if not isinstance(name, str):
            raise TypeError(f"{what} name must be a string, got {type(name).__name__} {name!r}")
        if not name:
            raise ValueError(f"{what} name must not be empty")
        return name

    def do(
        self,
        step_name: str,
        fn: Any,
        data: Any = None,
        **options: Any,
    ) -> Awaitable[Any]:
        """Run ``fn`` (a function, its name, a closure, or a workflow name for a child run)
        as the durable step ``step_name``. The key is taken now, in call order, so
        ``asyncio.gather`` replays to the same keys whatever order the steps finish in."""
        self._check_name(step_name, "step")
        if fn is None or not (isinstance(fn, str) or callable(fn)):
            raise TypeError(
                f"step {step_name!r}: expected a function, a function name or a workflow name, "
                f"got {type(fn).__name__}"
            )
        if options:
            _check_options(step_name, options)
        key = self._pass.next_key(step_name)
        return StepCall(self._pass, self._pass.do(key, step_name, fn, data, options))

    def sleep(self, step_name: str, duration: float | str) -> Awaitable[None]:
        """A durable timer: the run holds nothing while it waits."""
        self._check_name(step_name, "sleep")
        seconds = parse_duration(duration, what=f"duration of sleep {step_name!r}")
        key = self._pass.next_key(step_name)
        return StepCall(self._pass, self._pass.sleep(key, step_name, seconds))

    def suspend(self, reason: str = "suspended") -> Awaitable[None]:
        """Pause the run until ``engine.resume(run_id)``; each call site pauses once."""
        self._check_name(reason, "suspend reason")
        key = self._pass.next_key(f"__suspend:{reason}")
        return StepCall(self._pass, self._pass.suspend(key, reason))

    def wait_for_event(self, name: str, timeout: float | str | None = None) -> Awaitable[Any]:
        """The payload of the next ``engine.send_event(run_id, name, ...)``; an event sent
        before the run gets here is kept for it."""
        self._check_name(name, "event")
        seconds = (
            None if timeout is None else parse_duration(timeout, what=f"timeout of event {name!r}")
        )
        key = self._pass.next_key(f"__event:{name}")
        return StepCall(self._pass, self._pass.wait_for_event(key, name, seconds))

    def now(self) -> datetime:
        """The time, recorded on first reach so every replay sees the same value."""
        key = self._pass.next_key("__now")
        stamp = self._pass.value(key, lambda: datetime.now(UTC).isoformat())
        return datetime.fromisoformat(stamp)

    def uuid(self) -> str:
        """A random UUID, recorded on first reach so every replay sees the same value."""
        key = self._pass.next_key("__uuid")
        return str(self._pass.value(key, ids.random_uuid))
