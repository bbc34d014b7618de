"""Running graph workflows: one pass of a graph run.

The planner (``plait.graph.planner``) decides what may start; this module turns its
decisions into durable steps, using the same machinery as code workflows (a ``Ledger``
and a ``Driver``): the
same step rows, attempts, retries as durable timers, the job table for ``queued`` functions
and child runs. Because a pass only ever reads stored steps and asks the planner, a run
records the same steps whether it is driven inline or by a worker, and whichever
worker picks it up next.

What a graph run records:

* one step per node instance, kind ``"node"``, keyed ``node``, ``node#1``...; its
  ``from_key`` is the step whose completion started it and its ``branch`` is what the
  function chose with ``ctx.branch``;
* for a ``for_each`` node, one extra step per item, kind ``"item"``, keyed
  ``node[0]``, ``node[1]``... (``node#1[0]`` for a later instance). The node's own step
  holds the items as its input and the list of item outputs as its output;
* run-state variables, one row per name (``ctx.set_state``), written with the result of
  the attempt that set them, so parallel nodes never overwrite each other's variables.

A pass loops: plan, start what the plan says, drive every node instance that is in flight,
and plan again as soon as any of them ends, so a node runs the moment it is ready (no
waves). It ends the run when the plan is complete or failed, suspends it when a function
is missing, and otherwise pauses, leaving job steps, retry timers and child runs to wake
the run again.
"""

from __future__ import annotations

import asyncio
import contextlib
import re
from collections.abc import Callable
from types import SimpleNamespace
from typing import Any

from plait import errors, serde
from plait.app import FunctionDef
from plait.cancel_guard import uncancelled
from plait.context import StepContext
from plait.durations import parse_duration
from plait.errors import StepError
from plait.graph.errors import GraphValueError
from plait.graph.model import Node
from plait.graph.planner import (
    IN_FLIGHT,
    NodeState,
    Plan,
    Start,
    for_each_items,
    node_input,
    node_states,
    plan,
)
from plait.retry import RetryPolicy, resolve_policy
from plait.runtime import runs, steps
from plait.runtime.attempt import Outcome
from plait.runtime.control_flow import ParkSignal, PassAborted, PauseSignal, SuspendSignal
from plait.runtime.drive import Driver
from plait.runtime.host import Host
from plait.runtime.ledger import ENDS_WAIT, Ledger, PassResult
from plait.runtime.steps import GRAPH_STEP_KINDS, ITEM_KIND, NODE_KIND, item_key
from plait.store.ops import EndRun, Op, SetState
from plait.store.rows import PassSnapshot, StepRow

__all__ = [
    "GraphReplay",
    "NodeAttemptHook",
    "item_key",
    "job_node_hook",
    "node_id_of",
]

_ITEM_SUFFIX = re.compile(r"\[(\d+)\]$")
#: a node's input that cannot be stored: not JSON, or over the engine's limits
_REFUSED = (errors.NotJSONError, errors.PayloadTooLargeError, errors.PayloadTooDeepError)


def node_id_of(step: StepRow) -> str:
    """The node a graph step belongs to: the key without its item index and ordinal."""
    key = step.key
    if step.kind == ITEM_KIND:
        key = _ITEM_SUFFIX.sub("", key)
    base, sep, suffix = key.rpartition("#")
    return base if sep and suffix.isdigit() else key


# -- what an attempt of a node did through its context -----------------------------------


class NodeAttemptHook:
    """Gives a node's function its graph context and records what it did with it.

    Before the body runs: ``ctx.node_id`` and the run's state (for ``ctx.get_state``).
    After a successful attempt: the branch it chose goes on the step row (so it is stored
    with the result in one write) and every ``ctx.set_state`` becomes its own ``SetState``
    op, appended to ``ops`` before the attempt's result. Writes of a failed attempt are
    dropped, because a retry will make them again.

    The same object serves inline attempts (installed on the ``Pass``) and job steps' ones
    (``job_node_hook``, for the step worker), so both record the same thing.
    """

    def __init__(
        self,
        state: dict[str, Any],
        emit: Callable[[Op], None] | None = None,
        limits: serde.Limits | None = None,
    ) -> None:
        self.state = state
        self.limits = limits
        #: the writes of the last attempt when no ``emit`` was given (the step worker)
        self.ops: list[Op] = []
        self._emit = emit or self.ops.append

    def prepare(self, step: StepRow, ctx: StepContext) -> None:
        if step.kind not in GRAPH_STEP_KINDS:
            return
        ctx.node_id = node_id_of(step)
        # the runtime fills the context's private fields, which user code never sees
        ctx._state = dict(self.state)  # pyright: ignore[reportPrivateUsage]

    def finish(self, step: StepRow, ctx: StepContext, outcome: Outcome) -> Outcome:
        if not outcome.ok or step.kind not in GRAPH_STEP_KINDS:
            return outcome
        writes: list[tuple[str, str | None]] = []
        try:
            for name, value in ctx._state_writes.items():  # pyright: ignore[reportPrivateUsage]
                what = f"state variable {name!r}"
                writes.append((name, serde.dumps(value, what=what, limits=self.limits)))
        except (
            errors.NotJSONError,
            errors.PayloadTooLargeError,
            errors.PayloadTooDeepError,
        ) as exc:
            return Outcome(ok=False, error=serde.error_record(exc), retryable=False)
        step.branch = ctx._branch  # pyright: ignore[reportPrivateUsage]
        for name, text in writes:
            self.state[name] = serde.loads(text)
            self._emit(SetState(name, text))
        return outcome


async def job_node_hook(host: Host, step: StepRow) -> NodeAttemptHook | None:
    """The hook for one attempt of a job step, or None when it is not a graph step.

    The step worker calls it before the body runs, calls ``prepare`` and ``finish``
    around the attempt, and sends ``hook.ops`` with the attempt's result, so a node run as
    a job chooses branches and writes state exactly like an inline one."""
    if step.kind not in GRAPH_STEP_KINDS:
        return None
    return NodeAttemptHook(await host.read_state(step.run_id), limits=host.limits)


# -- one pass ---------------------------------------------------------------------------


class GraphReplay:
    """One pass of a graph run."""

    def __init__(self, host: Host, snapshot: PassSnapshot, owner: str) -> None:
        self.host = host
        self.ledger = ledger = Ledger(host, snapshot, owner)
        self.app = host.catalog.app
        self.trigger = ledger.input
        #: node step key -> the task driving it in this pass (each is driven once a pass)
        self.driving: dict[str, asyncio.Task[Any]] = {}
        self.suspend: SuspendSignal | None = None
        self.crash: BaseException | None = None
        self._decoded: dict[str, tuple[str, Any, Any]] = {}
        self._stored_graphs: dict[str, str | None] = {}
        hook = NodeAttemptHook(ledger.state, lambda op: ledger.add([op]), host.limits)
        self.driver = Driver(ledger, host, hook)

    async def execute(self) -> PassResult:
        ledger = self.ledger
        run = ledger.run
        graph = await self.host.catalog.graph_for(run.workflow, run.version)
        if graph is None:
            version = f" version {run.version}" if run.version else ""
            end = runs.suspended(
                f"graph {run.workflow!r}{version} is not registered in this "
                "deployment or the database; register it and resume the run",
                errors.FUNCTION_NOT_FOUND,
            )
            ledger.end(end)
            return await ledger.finish(runs.pass_status(end))
        self.graph = graph
        start_node = run.start_node
        self.entry: list[str] = [start_node] if start_node else list(graph.entry_nodes)
        try:
            return await self._execute()
        except asyncio.CancelledError:
            with contextlib.suppress(Exception):
                await uncancelled(ledger.cancel_and_flush())
            raise

    # -- the loop ---------------------------------------------------------------------
    async def _execute(self) -> PassResult:
        p = self.ledger
        end = self._check_start()
        if end is None:
            try:
                end = await self._loop()
            except GraphValueError as exc:
                end = self._value_error(exc)
        if p.aborted is not None:
            # no outcome of a body can be written, and the worker that has the run now
            # runs its node again: the bodies stop, not held to their end
            p.interrupt_bodies()
        await p.join()
        if self.crash is not None and (end is None or end.status != "failed"):
            end = self._crashed(self.crash)
        elif self.suspend is not None and end is None:
            end = runs.waits(self.suspend)
        if end is not None:
            p.end(end)
        return await p.finish(runs.pass_status(end))

    def _check_start(self) -> EndRun | None:
        start_node = self.ledger.run.start_node
        if start_node and start_node not in self.graph.entry_nodes:
            entries = ", ".join(repr(e) for e in self.graph.entry_nodes) or "none"
            message = (
                f"graph {self.graph.name!r}: start_node {start_node!r} is not an entry node "
                f"(entry nodes: {entries})"
            )
            return runs.failed_record(
                {"message": message, "type": "GraphValidationError", "code": None}
            )
        return None

    async def _loop(self) -> EndRun | None:
        self.suspend = self._parked()
        while True:
            if self.crash is not None or self.suspend is not None:
                return None
            states = self._states()
            current = self._plan(states)
            if current.failed is not None:
                return self._node_failed(current.failed)
            if current.complete:
                try:
                    output = serde.dumps(
                        current.output,
                        what=f"the output of graph {self.graph.name!r}",
                        limits=self.host.limits,
                    )
                except (
                    errors.NotJSONError,
                    errors.PayloadTooLargeError,
                    errors.PayloadTooDeepError,
                ) as exc:
                    return runs.failed_record(serde.error_record(exc))
                return runs.completed(output)
            for start in current.start:
                try:
                    self._create(start, states)
                except _REFUSED as exc:
                    return self._input_refused(exc, start)
            for key, step in list(self.ledger.steps.items()):
                if (
                    step.kind == NODE_KIND
                    and step.status in IN_FLIGHT
                    and key not in self.driving
                    and node_id_of(step) in self.graph.nodes
                ):
                    self.driving[key] = self.ledger.spawn(self._drive_guarded(step))
            running = [t for t in self.driving.values() if not t.done()]
            if not running:
                return None  # everything in flight waits on the queue, a timer or a child
            ledger = self.ledger
            if not ledger.ops or ledger.dry:
                await asyncio.wait(running, return_when=asyncio.FIRST_COMPLETED)
                continue
            done, _ = await asyncio.wait(
                running, timeout=ENDS_WAIT, return_when=asyncio.FIRST_COMPLETED
            )
            if not done:
                # nodes that ended wait for the next commit; a sibling that runs on for
                # long must not hold their ends back (a crash would run them again)
                try:
                    await ledger.flush()
                except PassAborted as exc:
                    self.crash = self.crash or exc

    def _parked(self) -> ParkSignal | None:
        """A node step run as a job that failed its last attempt since the last pass and
        parks on exhausted retries (``Driver.parks``): the run stops ``needs_attention``
        before the planner takes the step as failed (or follows its error edge). A
        failure an error edge took already stays taken."""
        p = self.ledger
        handled = {s.from_key for s in p.steps.values() if s.kind == NODE_KIND and s.from_key}
        for step in p.steps.values():
            if step.kind != NODE_KIND or step.status != "failed" or step.key in handled:
                continue
            node = self.graph.nodes.get(node_id_of(step))
            fdef = self.app.functions.get(step.function or "")
            if node is None or node.for_each is not None or fdef is None:
                continue
            if self.driver.parks(step, fdef):
                return ParkSignal(step.key, step.error)
        return None

    def _plan(self, states: list[NodeState]) -> Plan:
        return plan(
            self.graph, states, self.entry, trigger=self.trigger, state_vars=self.ledger.state
        )

    def _states(self) -> list[NodeState]:
        """The planner's view of the stored node steps (items are not nodes)."""
        views: list[SimpleNamespace] = []
        for step in self.ledger.steps.values():
            if step.kind != NODE_KIND:
                continue
            output, error = self._decode(step)
            views.append(
                SimpleNamespace(
                    key=step.key,
                    node_id=node_id_of(step),
                    status=step.status,
                    output=output,
                    error=error,
                    branch=step.branch,
                    from_key=step.from_key,
                )
            )
        return node_states(views, self.graph)

    def _decode(self, step: StepRow) -> tuple[Any, Any]:
        """Output and error of a step, decoded once per status (they only change with it)."""
        cached = self._decoded.get(step.key)
        if cached is not None and cached[0] == step.status:
            return cached[1], cached[2]
        output, error = serde.loads(step.output), serde.loads(step.error)
        self._decoded[step.key] = (step.status, output, error)
        return output, error

    # -- ends ---------------------------------------------------------------------------
    def _node_failed(self, failed: NodeState) -> EndRun:
        cause = failed.error or {}
        message = cause.get("message", "unknown error")
        return runs.failed_record(
            {
                "message": f"graph node {failed.node_id!r} (step {failed.key!r}) failed: {message}",
                "type": "GraphNodeFailed",
                "code": errors.GRAPH_NODE_FAILED,
                "node": failed.node_id,
                "step": failed.key,
                "cause": cause,
            },
        )

    @staticmethod
    def _input_refused(exc: Exception, start: Start) -> EndRun:
        """The run fails when a node's input breaks the engine's limits, as a code
        workflow's does when a step's input does: the input is never stored, so neither
        a retry of the node nor its ``on_error`` handlers (which get it) could have it."""
        record = serde.error_record(exc)
        record["node"] = start.node_id
        record["step"] = start.key
        return runs.failed_record(record)

    def _value_error(self, exc: GraphValueError) -> EndRun:
        record = serde.error_record(exc)
        record["message"] = f"graph {self.graph.name!r}: {exc}"
        record["node"] = exc.node
        if exc.missing is not None:
            record["missing"] = exc.missing
        return runs.failed_record(record)

    def _crashed(self, exc: BaseException) -> EndRun:
        if isinstance(exc, GraphValueError):
            return self._value_error(exc)
        return runs.failed_record(serde.error_record(exc))

    # -- creating node steps ------------------------------------------------------------
    def _create(self, start: Start, states: list[NodeState]) -> StepRow:
        """The step of a node instance the plan starts, with its input resolved now
        (from the steps that exist when it becomes ready)."""
        p, graph = self.ledger, self.graph
        node = graph.nodes[start.node_id]
        fdef = self.app.functions.get(node.function or "")
        data: Any
        if node.for_each is not None:
            data = for_each_items(graph, node.id, states, self.trigger, p.state)
            policy, timeout, job = RetryPolicy(0, None), None, False
        else:
            if start.kind == "on_error" and start.from_key is not None:
                failed = p.steps[start.from_key]
                data = {"error": serde.loads(failed.error), "input": serde.loads(failed.input)}
            else:
                data = node_input(graph, node.id, states, self.trigger, p.state)
            policy, timeout, job = self._options(node, fdef)
        step = p.new_step(
            start.key,
            node.id,
            NODE_KIND,
            function=node.function,
            input=serde.dumps(
                data, what=f"the input of node {start.key!r}", limits=self.host.limits
            ),
            policy=policy,
            timeout=timeout,
            job=job,
        )
        step.from_key = start.from_key
        p.put(step)
        return step

    def _options(
        self, node: Node, fdef: FunctionDef | None
    ) -> tuple[RetryPolicy, float | None, bool]:
        """Retries, timeout and queueing of a node's attempts: the node's own settings,
        then its function's, then plait's defaults. Child runs are never retried (the
        child has its own steps and retries)."""
        if fdef is None:
            if self.app.is_runnable(node.function or ""):
                return RetryPolicy(0, None), None, False
            layer = {"retries": node.retries, "retry_delay": node.retry_delay}
            return resolve_policy(layer), self._timeout(node, None), False
        policy = resolve_policy(
            {"retries": fdef.retries, "retry_delay": fdef.retry_delay},
            {"retries": node.retries, "retry_delay": node.retry_delay},
        )
        return policy, self._timeout(node, fdef), fdef.queued

    @staticmethod
    def _timeout(node: Node, fdef: FunctionDef | None) -> float | None:
        if node.timeout is not None:
            return parse_duration(node.timeout, what=f"timeout of node {node.id!r}")
        return fdef.timeout if fdef is not None else None

    # -- driving node steps -------------------------------------------------------------
    async def _drive_guarded(self, step: StepRow) -> None:
        """Drive one node instance; record how it stopped instead of raising, so one
        node never interrupts its siblings."""
        try:
            node = self.graph.nodes[node_id_of(step)]
            if node.for_each is not None:
                await self._drive_for_each(step, node)
            else:
                await self._run_step(step, node)
        except StepError:
            pass  # failed after its retries: the planner reads it from the step
        except PauseSignal:
            # waiting on the queue, a retry timer or a child: commit the job or timer now
            # rather than when the slowest sibling finishes
            if self.ledger.ops:
                await self.ledger.flush()
        except SuspendSignal as sig:
            # a parked step wins over a suspend: a retry must reopen it
            if self.suspend is None or (
                isinstance(sig, ParkSignal) and not isinstance(self.suspend, ParkSignal)
            ):
                self.suspend = sig
        except Exception as exc:
            self.crash = self.crash or exc

    async def _run_step(self, step: StepRow, node: Node) -> Any:
        """One function call, child run or missing function, as step ``step``."""
        function = step.function or ""
        fdef = self.app.functions.get(function)
        if fdef is not None:
            if step.status == "pending" and step.attempts == 0 and step.kind in GRAPH_STEP_KINDS:
                # nothing ran yet: take the function's settings as deployed now (it may
                # have been missing when the step was created)
                policy, timeout, job = self._options(node, fdef)
                step.retries, step.retry_delay = policy.retries, policy.delay
                step.timeout, step.queued = timeout, job
            return await self.driver.drive(step, fdef, None)
        if step.status == "succeeded":
            return serde.loads(step.output)
        if step.status == "failed":
            raise StepError(step.key, serde.loads(step.error) or {})
        if self.app.is_runnable(function):
            return await self.driver.child(step.key, step.name, function, None, step_kind=step.kind)
        version = await self._stored_graph(function)
        if version is not None:
            return await self.driver.child(
                step.key,
                step.name,
                function,
                None,
                step_kind=step.kind,
                target=("graph", version),
            )
        raise SuspendSignal(
            steps.missing_function_message(function, f"node {node.id!r}, step {step.key!r}"),
            errors.FUNCTION_NOT_FOUND,
        )

    async def _stored_graph(self, name: str) -> str | None:
        """The active version of a graph registered at run time under ``name``, if any
        (asked once per pass)."""
        if name not in self._stored_graphs:
            self._stored_graphs[name] = await self.host.catalog.stored_graph(name)
        return self._stored_graphs[name]

    # -- for_each -----------------------------------------------------------------------
    async def _drive_for_each(self, step: StepRow, node: Node) -> None:
        """Run the items of a ``for_each`` node instance (all at once, or one after the
        other), then end the node: its output is the list of item outputs, and it
        fails once an item failed after its retries."""
        p = self.ledger
        items: list[Any] = serde.loads(step.input) or []
        states = self._states()
        p.add(steps.start_items(step, p.now()))
        index = 0
        try:
            if node.mode == "sequential":
                for index, item in enumerate(items):
                    text = self._item_input(step, node, index, item, states)
                    item_step = self._item_step(step, node, index, text)
                    try:
                        await self._run_step(item_step, node)
                    except StepError:
                        break
            else:
                # every item's input is checked before any item's step is recorded: a
                # refused one fails the node with no sibling left pending behind it
                inputs: list[str | None] = []
                for index, item in enumerate(items):
                    inputs.append(self._item_input(step, node, index, item, states))
                item_steps = [self._item_step(step, node, i, text) for i, text in enumerate(inputs)]
                tasks = [p.spawn(self._run_item(s, node)) for s in item_steps]
                if tasks:
                    await asyncio.gather(*tasks)
        except _REFUSED as exc:
            self._refuse_item(step, node, index, exc)
            return
        except asyncio.CancelledError:
            if self.host.cancelling(p.run.id):  # a user's cancel: the node ends with its run
                p.add(steps.cancel_waiting(step, p.now()))
            raise
        self._end_for_each(step, node, len(items))

    async def _run_item(self, step: StepRow, node: Node) -> None:
        with contextlib.suppress(StepError, PauseSignal):
            await self._run_step(step, node)

    def _item_input(
        self, step: StepRow, node: Node, index: int, item: Any, states: list[NodeState]
    ) -> str | None:
        """The stored form of item ``index``'s input, checked against the engine's limits; None
        when its step is recorded already (its input with it)."""
        key = item_key(step.key, index)
        if key in self.ledger.steps:
            return None
        data = node_input(self.graph, node.id, states, self.trigger, self.ledger.state, item=item)
        return serde.dumps(data, what=f"the input of step {key!r}", limits=self.host.limits)

    def _item_step(self, step: StepRow, node: Node, index: int, text: str | None) -> StepRow:
        """Item ``index``'s step: the recorded one, or a new one with input ``text``."""
        key = item_key(step.key, index)
        existing = self.ledger.steps.get(key)
        if existing is not None:
            return existing
        policy, timeout, job = self._options(node, self.app.functions.get(node.function or ""))
        item_step = self.ledger.new_step(
            key,
            key,
            ITEM_KIND,
            function=node.function,
            input=text,
            policy=policy,
            timeout=timeout,
            job=job,
        )
        item_step.from_key = step.key
        self.ledger.put(item_step)
        return item_step

    def _refuse_item(self, step: StepRow, node: Node, index: int, exc: Exception) -> None:
        """The node fails: item ``index``'s input breaks the engine's limits."""
        self.ledger.add(steps.refuse_item(step, node.id, index, exc, self.ledger.now()))

    def _end_for_each(self, step: StepRow, node: Node, count: int) -> None:
        """Succeed or fail the node from its items (``steps.end_items``); otherwise
        it waits for them."""
        p = self.ledger
        items = [p.steps[k] for i in range(count) if (k := item_key(step.key, i)) in p.steps]
        ended = steps.end_items(step, node.id, items, count, node.mode == "sequential", p.now())
        if ended is None:
            raise p.pause(step.key)
        p.add(ended)
