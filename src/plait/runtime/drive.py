"""Driving one step to an outcome inside a pass: attempts, retries, handlers, children.

Both replays reach a step the same way: a function step runs its attempts here (or goes
to the job table), a failed one runs its ``on_error`` handler, a workflow name becomes a
child run. What each transition writes is decided in ``runtime.steps``; this module only
chooses which transition applies and runs the body.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable
from typing import Any, Protocol

from plait import errors, serde
from plait.app import FinishedAfterCancel, FunctionDef
from plait.cancel_guard import uncancelled
from plait.context import StepContext
from plait.errors import LeaseLostError, StepError
from plait.observe import NO_REPORT
from plait.retry import NoRetryOn, RetryPolicy
from plait.runtime import runs, steps
from plait.runtime.attempt import NOT_DECODED, Outcome, finished_on_stop, result_codec, run_attempt
from plait.runtime.control_flow import ParkSignal, PassAborted, StepCancelled, SuspendSignal
from plait.runtime.host import Host
from plait.runtime.ledger import Ledger
from plait.runtime.spending import record_spend
from plait.store.ops import CreateChildRun
from plait.store.rows import NewRun, StepRow


class AttemptHook(Protocol):
    """Lets a replay built on this driver (graph workflows) see each attempt: fill in the
    context before the body runs, and turn what the body did through the context
    (``ctx.branch``, ``ctx.set_state``) into writes that ride with the attempt's result.
    ``finish`` may turn a success into a failure (state that is not JSON, for instance)."""

    def prepare(self, step: StepRow, ctx: StepContext) -> None: ...

    def finish(self, step: StepRow, ctx: StepContext, outcome: Outcome) -> Outcome: ...


def dump_input(data: Any, key: str, limits: serde.Limits | None = None) -> str | None:
    """A step's input as stored; a step reached for the first time is checked against ``limits``
    (on replay the stored input is only compared, whatever limits apply now)."""
    return serde.dumps(data, what=f"the input of step {key!r}", limits=limits)


class Driver:
    """Drives steps of one pass; ``hook`` is None for code workflows."""

    def __init__(self, ledger: Ledger, host: Host, hook: AttemptHook | None = None) -> None:
        self.ledger = ledger
        self.host = host
        self.hook = hook
        self.functions = host.catalog.app.functions
        self.app = host.catalog.app

    async def drive(
        self,
        step: StepRow,
        body: FunctionDef | Callable[..., Any],
        on_error: str | None,
        no_retry_on: NoRetryOn | None = None,
    ) -> Any:
        """The step's result, running attempts until it has one; raises ``StepError``
        once it failed for good, or a pause while it waits (queue, back-off).
        ``no_retry_on`` is None for the function's own.

        A code workflow gets the result as the body's return annotation names (the
        attempt decoded it already on the first run); a graph gets JSON."""
        ledger = self.ledger
        while True:
            if step.status == "succeeded":
                if self.hook is None:
                    codec = result_codec(body)
                    if codec is not None:
                        try:
                            return codec.decode(step.output, f"the result of step {step.key!r}")
                        except errors.TypeMismatchError as exc:
                            ledger.undecodable(step, exc)
                            raise
                return serde.loads(step.output)
            if step.status == "failed":
                if self.parks(step, body):
                    raise ParkSignal(step.key, step.error)
                if not steps.cancelled_by_workflow(step):
                    await self.compensate(step, on_error)
                raise StepError(step.key, serde.loads(step.error) or {})
            if ledger.dry:
                raise ledger.pause(step.key)  # a dry pass starts nothing (``runtime.check``)
            if step.queued:
                if step.status == "pending":
                    ledger.add(steps.enqueue(step, ledger.now()))
                    ledger.enqueued = True
                raise ledger.pause(step.key)
            if step.status == "scheduled" and step.wake_at and step.wake_at > ledger.now():
                raise ledger.pause(step.key, step.wake_at)
            if self.host.stopping:
                raise ledger.pause(step.key)  # shutting down: start no new attempt here
            if self.host.braked(ledger.run.workflow, ledger.run.queue):
                # paused: start no new attempt; the run is given back due, the claims
                # leave it to the brake, and it waits ``paused`` until it is resumed
                ledger.due_again = True
                raise ledger.pause(step.key)
            value = await self.attempt(step, body, no_retry_on)
            if value is not NOT_DECODED and step.status == "succeeded" and self.hook is None:
                return value

    def parks(self, step: StepRow, body: FunctionDef | Callable[..., Any]) -> bool:
        """Whether a step that failed for good stops its run ``needs_attention`` rather
        than handing the failure to the workflow: its function parks on exhausted
        retries (``on_exhausted="park"``, or its workflow's for a function that does not
        say, and for a closure). Not a compensation step, not a step the workflow
        cancelled, not an error that says no attempt can help (``"retryable": false``),
        and not a failure the workflow was handed already (a replay hands it the same)."""
        if step.kind == "on_error" or step.delivered is not None:
            return False
        if steps.cancelled_by_workflow(step) or not steps.retryable_error(step.error):
            return False
        own = body.on_exhausted if isinstance(body, FunctionDef) else None
        if own is None and self.hook is None:
            run = self.ledger.run
            wdef = self.app.workflow_version(run.workflow, run.version)
            own = None if wdef is None else wdef.on_exhausted
        return own == "park"

    async def attempt(
        self,
        step: StepRow,
        body: FunctionDef | Callable[..., Any],
        no_retry_on: NoRetryOn | None = None,
    ) -> Any:
        """One attempt: its start is committed before the body runs, its end rides with
        the next commit. Returns the decoded result of a success (``NOT_DECODED`` when
        there is nothing decoded to hand on)."""
        ledger = self.ledger
        telemetry = self.host.telemetry
        if telemetry is not None and step.status == "running":
            telemetry.taken_over(ledger.run.id, step)
        ops, go = steps.begin(step, ledger.owner, ledger.now())
        ledger.add(ops)
        if not go:
            return NOT_DECODED
        await ledger.flush()
        ctx = StepContext(
            run_id=ledger.run.id,
            step_key=step.key,
            invocation_id=step.invocation_id,
            attempt=step.attempts,
            workflow=ledger.run.workflow,
            _streams=self.host.streams,
        )
        if self.hook is not None:
            self.hook.prepare(step, ctx)
        run = ledger.run
        with (
            NO_REPORT
            if telemetry is None
            else telemetry.attempting(run.id, run.workflow, None, step)  # inside its pass
        ) as report:
            # what the attempt reports (a log line is a write) and its input are done
            # first: from the lease's last look to the body's start there is as little as
            # can be, since a process frozen there starts the body when it wakes
            data = serde.loads(step.input)
            if not await self.host.keep_lease(run.id):
                # a freeze outlived the lease and another worker may have the run: its body
                # is that worker's to start. The pass stops as on any store failure: the
                # workflow's code must not see this (an ``except Exception`` around the
                # step would fail the run, or go on, under a lease the pass cannot vouch for)
                lost = LeaseLostError(f"run {run.id}: lease lost before step {step.key!r} started")
                ledger.aborted = PassAborted(lost)
                raise ledger.aborted
            if step.key in ledger.cancelled:
                # the workflow cancelled it while its start was written, or while the lease
                # was asked after: no body runs (no await from here to the body's start)
                ledger.add(steps.cancel_step(step, ledger.now()))
                ledger.mark_delivered(step)
                raise StepCancelled(step.key)
            if ledger.conflict:
                # the pass found a conflict meanwhile and the run fails with it: no body
                # starts, the attempt is interrupted as the running ones are
                ledger.add(steps.interrupt(step, ledger.now(), cancelled=False))
                raise StepCancelled(step.key)
            if self.host.braked(run.workflow, run.queue):
                # paused since ``drive`` looked (the brakes, read longer than a lease ago
                # by a process held up meanwhile, were read again): no body starts, the
                # attempt is interrupted, and the run waits as in ``drive``
                ledger.add(steps.interrupt(step, ledger.now(), cancelled=False))
                ledger.due_again = True
                raise ledger.pause(step.key)
            bodies = ledger.bodies
            task = asyncio.current_task()
            bodies[step.key] = task  # type: ignore[assignment]
            try:
                outcome = await run_attempt(
                    body, data, ctx, step.timeout, self.host.limits, no_retry_on
                )
                if task is not None and task.cancelling() and self._stopped(step):
                    # the body caught its task's cancel and returned (a client library
                    # that swallows cancellation): stopped all the same, and what it
                    # did is kept as a sync body's is when it ends after a stop
                    raise _swallowed(outcome)
            except asyncio.CancelledError as exc:
                if ctx._spent:  # pyright: ignore[reportPrivateUsage]
                    # what the attempt spent before it was stopped was spent all the same
                    await uncancelled(record_spend(self.host, ctx, None))
                if step.key in ledger.cancelled:
                    raise  # the workflow cancelled it: the pass recorded that already
                cancelled = self.host.cancelling(run.id)
                finished = finished_on_stop(exc, cancelled)
                if finished is not None:
                    report.outcome = finished
                    ledger.add(steps.end_attempt(step, finished, ledger.now()))  # it ran to its end
                else:
                    ledger.add(steps.interrupt(step, ledger.now(), cancelled=cancelled))
                raise
            finally:
                if bodies.get(step.key) is task:
                    del bodies[step.key]
            if step.key in ledger.cancelled:
                # a body that ran on after the workflow cancelled it: its outcome is not
                # written over the cancel, what it spent counts
                await record_spend(self.host, ctx, None)
                raise StepCancelled(step.key)
            if self.hook is not None:
                outcome = self.hook.finish(step, ctx, outcome)
            report.outcome = outcome
            if ctx._spent:  # pyright: ignore[reportPrivateUsage]
                await record_spend(self.host, ctx, None)
            ledger.add(steps.end_attempt(step, outcome, ledger.now()))
            return outcome.value

    def _stopped(self, step: StepRow) -> bool:
        """Whether plait asked the body's task to stop: its run was cancelled (or ended
        elsewhere), the process is shutting down, the pass stops for a conflict or a
        failed commit, or the workflow cancelled the step. A count of cancels alone says
        too little: on Python 3.11 a task group whose child failed leaves one counted on
        its task after it raised, with nobody stopping anything."""
        ledger = self.ledger
        return (
            self.host.cancelling(ledger.run.id)
            or self.host.stopping
            or ledger.conflict is not None
            or ledger.aborted is not None
            or step.key in ledger.cancelled
        )

    def _child_trace(self) -> str | None:
        """A child run joins its parent's trace (at the pass that starts it, when traced
        here)."""
        telemetry = self.host.telemetry
        inherited = self.ledger.run.trace
        return inherited if telemetry is None else telemetry.child_trace(inherited)

    async def missing_function(
        self, key: str, name: str, function: str, data: Any, policy: RetryPolicy
    ) -> Any:
        """A step naming a function this deployment lacks: the run suspends until the
        function is deployed and the run resumed."""
        ledger = self.ledger
        step = ledger.steps.get(key)
        if step is None:
            step = ledger.new_step(
                key, name, "do", function=function, input=dump_input(data, key), policy=policy
            )
            ledger.put(step)
        else:
            ledger.check_same(step, "do", function, dump_input(data, key))
        if step.status == "succeeded":
            return serde.loads(step.output)
        if step.status == "failed":
            raise StepError(key, serde.loads(step.error) or {})
        raise SuspendSignal(
            steps.missing_function_message(function, f"step {key!r}"), errors.FUNCTION_NOT_FOUND
        )

    async def compensate(self, step: StepRow, on_error: str | None) -> None:
        """Run the ``on_error`` handler of a step that failed for good, once, as its own
        step ``<key>:on_error``. The step's own error is what fails the run."""
        if not on_error or step.kind == "on_error":
            return
        ledger = self.ledger
        key = f"{step.key}:on_error"
        comp = ledger.steps.get(key)
        fdef = self.functions.get(on_error)
        if comp is not None:
            ledger.reach(key)
        else:
            data = {
                "error": serde.loads(step.error),
                "input": serde.loads(step.input),
                "invocation_id": step.invocation_id,
                "step_key": step.key,
            }
            ledger.reached[key] = (step.key,)  # drawn hanging off its step
            if fdef is None:
                await self.missing_function(key, key, on_error, data, RetryPolicy(0, None))
                return
            comp = ledger.new_step(
                key,
                key,
                "on_error",
                function=on_error,
                input=dump_input(data, key),
                policy=RetryPolicy(0, None),
                timeout=fdef.timeout,
                job=fdef.queued,
            )
        if fdef is None:
            raise SuspendSignal(
                steps.missing_function_message(on_error, f"step {key!r}"),
                errors.FUNCTION_NOT_FOUND,
            )
        with contextlib.suppress(StepError):
            await self.drive(comp, fdef, None)

    async def child(
        self,
        key: str,
        name: str,
        workflow: str,
        data: Any,
        *,
        step_kind: str = "child",
        target: tuple[str, str | None] | None = None,
    ) -> Any:
        """A child run of ``workflow`` as step ``key``. The graph replay records its node
        steps with their own ``step_kind`` and passes ``target`` (kind, version) for
        graphs registered at run time, which the app does not know."""
        ledger = self.ledger
        step = ledger.steps.get(key)
        if step is None:
            step = ledger.new_step(
                key,
                name,
                step_kind,
                function=workflow,
                input=dump_input(data, key, self.host.limits),
                policy=RetryPolicy(0, None),
            )
        else:
            # a graph node's step is created with its input by the graph replay itself
            given = dump_input(data, key) if step_kind == "child" else False
            ledger.check_same(step, step_kind, workflow, given)
        if step.status == "succeeded":
            wdef = self.app.workflows.get(workflow) if self.hook is None else None
            if wdef is not None and wdef.output_codec is not None:
                return wdef.output_codec.decode(step.output, f"the result of step {key!r}")
            return serde.loads(step.output)
        if step.status == "failed":
            raise StepError(key, serde.loads(step.error) or {})
        if ledger.dry:
            raise ledger.pause(key)  # a dry pass starts no child run (``runtime.check``)
        if step.status == "pending":
            kind, version = target or self.host.catalog.describe(workflow)
            ledger.add(steps.begin_child(step, ledger.owner, ledger.now()))
            child_id = step.child_run_id or ""
            # a workflow declared on a queue is admitted through it as a child too: a
            # parent fanning out children keeps the limit its own starts would keep. A
            # live run of that same queue above it holds a slot while it waits, so the
            # child runs at once, beside it (queued, runs holding every slot would wait
            # for good); it is still a run of the queue, counted until it ends
            wdef = self.app.workflows.get(workflow) if target is None else None
            queue = None if wdef is None else wdef.queue
            timeout = None if wdef is None else wdef.timeout
            admit = queue is not None and not (
                queue == ledger.run.queue
                or (
                    ledger.run.parent_run_id is not None
                    and queue in await self.host.lineage_queues(ledger.run.parent_run_id)
                )
            )
            ledger.add(
                [
                    CreateChildRun(
                        NewRun(
                            id=child_id,
                            workflow=workflow,
                            kind=kind,
                            version=version,
                            input=step.input,
                            owner=ledger.run.owner,
                            parent_run_id=ledger.run.id,
                            parent_step_key=key,
                            status=runs.initial_status(admit),
                            queue=queue,
                            trace=self._child_trace(),
                            # never later than the parent's: nothing waits for it after
                            deadline_at=runs.deadline(
                                ledger.now(), timeout, ledger.run.deadline_at
                            ),
                            timeout=runs.timeout_of(ledger.now(), timeout, ledger.run.deadline_at),
                            tags=runs.inherited_tags(ledger.run.tags, wdef),
                        )
                    )
                ]
            )
            if admit:
                ledger.admit = True
            else:
                ledger.children.append(child_id)
        raise ledger.pause(key)


def _swallowed(outcome: Outcome) -> FinishedAfterCancel:
    """The cancel a body caught, raised again with what the body did."""
    stopped = FinishedAfterCancel(None)
    stopped.outcome = outcome
    return stopped
