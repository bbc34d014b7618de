"""Code replay: one orchestrator pass of a code workflow, replayed from the top.

The workflow function runs again on every pass. Every ``wf.do`` either returns a stored
result, runs a new attempt, or raises a pause signal; sleeps, suspends and event waits
are steps too. When the function returns (or a pause stops it) the pass waits for every
step it started, decides how the run ends, and commits that with the lease's release.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable
from typing import Any

from plait import errors, serde
from plait.app import FunctionDef, WorkflowDef
from plait.durations import parse_duration
from plait.errors import Cancel, EventTimeout, StepError
from plait.retry import resolve_policy
from plait.runtime import steps
from plait.runtime.drive import Driver, dump_input
from plait.runtime.host import Host
from plait.runtime.ledger import Ledger, PassResult
from plait.runtime.signals import PassAborted, PauseSignal, SuspendSignal
from plait.runtime.workflow import Workflow
from plait.store.base import EndRun, PassSnapshot


class CodeReplay:
    """One pass of a code workflow."""

    def __init__(self, host: Host, snapshot: PassSnapshot, owner: str) -> None:
        self.host = host
        self.app = host.catalog.app
        self.ledger = Ledger(host, snapshot, owner)
        self.driver = Driver(self.ledger, host)

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
                input=dump_input(data, key),
                policy=policy,
                timeout=timeout,
                queued=fdef.queued,
            )
        else:
            ledger.check_same(step, "do", fdef.name)
            if step.status == "pending" and step.attempts == 0:
                # nothing ran yet (the function was missing when the step was reached):
                # it runs with the options of the function as deployed now
                step.retries, step.retry_delay = policy.retries, policy.delay
                step.timeout, step.queued = timeout, fdef.queued
        on_error = fdef.on_error if merged is None else merged.get("on_error")
        return await self.driver.drive(step, fdef, on_error)

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
                input=dump_input(data, key),
                policy=resolve_policy(options),
                timeout=_timeout(options, key),
            )
        else:
            ledger.check_same(step, "do", None)
        return await self.driver.drive(step, fn, options.get("on_error"))

    # -- sleeps, suspends, events, values -----------------------------------------------------
    async def sleep(self, key: str, name: str, seconds: float) -> None:
        ledger = self.ledger
        step = ledger.steps.get(key)
        now = time.time()
        if step is None:
            step = ledger.new_step(key, name, "sleep", input=serde.dumps({"seconds": seconds}))
            ledger.add(steps.schedule_sleep(step, seconds, now))
        else:
            ledger.check_same(step, "sleep", None)
        if step.status == "succeeded":
            return
        fired = steps.fire_timer(step, now)
        if fired is not None:
            ledger.add(fired)
            return
        raise ledger.pause(key, step.wake_at)

    async def suspend(self, key: str, reason: str) -> None:
        ledger = self.ledger
        step = ledger.steps.get(key)
        if step is None:
            step = ledger.new_step(
                key,
                key,
                "suspend",
                input=serde.dumps({"reason": reason, "suspended_at": time.time()}),
            )
            ledger.add(steps.open_suspend(step, ledger.owner, time.time()))
        else:
            ledger.check_same(step, "suspend", None)
        if step.status == "succeeded":
            return
        raise SuspendSignal(reason, errors.WORKFLOW_SUSPENDED)

    async def wait_for_event(self, key: str, name: str, timeout: float | None) -> Any:
        ledger = self.ledger
        step = ledger.steps.get(key)
        now = time.time()
        if step is None:
            step = ledger.new_step(key, key, "event", input=serde.dumps({"event": name}))
            ledger.add(steps.wait_event(step, timeout, now))
        else:
            ledger.check_same(step, "event", None)
        if step.status == "succeeded":
            return serde.loads(step.output)
        if step.status == "failed":
            raise EventTimeout(name, key)
        for event in ledger.events:
            if event.name == name:
                ledger.events.remove(event)
                ledger.add(steps.consume_event(step, event.id, event.payload, now))
                return serde.loads(event.payload)
        timed_out = steps.time_out_event(step, name, now)
        if timed_out is not None:
            ledger.add(timed_out)
            raise EventTimeout(name, key)
        raise ledger.pause(key, step.wake_at)

    def value(self, key: str, make: Callable[[], Any]) -> Any:
        """A value recorded once and replayed ever after (``wf.now()``, ``wf.uuid()``)."""
        ledger = self.ledger
        step = ledger.steps.get(key)
        if step is not None:
            ledger.visited.add(key)
            return serde.loads(step.output)
        step = ledger.new_step(key, key, "value")
        ledger.add(steps.record_value(step, make(), time.time()))
        return serde.loads(step.output)

    # -- the whole pass -----------------------------------------------------------------------
    async def execute(self, wdef: WorkflowDef) -> PassResult:
        try:
            return await self._execute(wdef)
        except asyncio.CancelledError:
            # record how the steps of a cancelled pass ended, whatever else is cancelled
            with contextlib.suppress(BaseException):
                await asyncio.shield(self.ledger.cancel_and_flush())
            raise

    async def _execute(self, wdef: WorkflowDef) -> PassResult:
        ledger = self.ledger
        ledger.main_task = asyncio.current_task()
        wf = Workflow(self)
        end: EndRun | None = None
        try:
            if wdef.takes_data:
                result = await wdef.fn(wf, ledger.input)
            else:
                result = await wdef.fn(wf)
            if not ledger.paused:
                try:
                    output = serde.dumps(
                        result, what=f"the output of workflow {ledger.run.workflow!r}"
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
                end = EndRun("failed", error=steps.control_error(sig.message, sig.code))
            else:
                end = EndRun("suspended", error=steps.control_error(sig.message, sig.code))
        except Cancel as exc:
            end = EndRun(
                "cancelled", error=steps.control_error(exc.reason, errors.WORKFLOW_CANCELLED)
            )
        except StepError as exc:
            end = EndRun("failed", error=serde.dumps({**exc.error, "step": exc.step_key}))
        except Exception as exc:
            end = EndRun("failed", error=serde.dumps(serde.error_record(exc)))
        await ledger.settle()
        if ledger.aborted is not None:
            raise ledger.aborted
        if end is None:
            # A branch of a gather may need a suspension while a sibling paused first;
            # the pause must not hide it, or the run would wait for nobody.
            for task in ledger.tasks:
                exc = None if task.cancelled() else task.exception()
                if isinstance(exc, SuspendSignal) and exc.code != errors.VERSION_CONFLICT:
                    end = EndRun("suspended", error=steps.control_error(exc.message, exc.code))
                    break
        if ledger.conflict and (end is None or end.status != "failed"):
            end = EndRun(
                "failed", error=steps.control_error(ledger.conflict, errors.VERSION_CONFLICT)
            )
        if end is not None and ledger.paused and end.status == "completed":
            end = None  # the code swallowed a pause; the run is not finished
        if end is not None:
            ledger.end(end)
        return await ledger.finish(end.status if end else "running")


def _timeout(options: dict[str, Any], key: str) -> float | None:
    if options.get("timeout") is None:
        return None
    return parse_duration(options["timeout"], what=f"timeout of step {key!r}")
