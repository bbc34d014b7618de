"""Durable Pydantic AI agents: each model request and each tool call of an agent run
is a plait step.

``Agent(model, name="support", capabilities=[PlaitDurability()])``, then
``await agent.run(prompt)`` in a plait workflow. Built on Pydantic AI's public durable
execution API (``pydantic_ai.durable_exec``): ``PlaitDurability`` is a
``BaseDurabilityCapability`` and its backend a ``CallableOperationBackend`` whose one
job, ``execute``, runs the operation's body as ``wf.do(<stable name>, body)``. Pydantic AI
owns the rest: which operations exist, their parameters, and the JSON form of their
results (``JSON_CODEC``, its own message type adapters), so a result read back from the
record is the same ``ModelResponse`` or tool return the first pass saw.

What a run replays: every model request and tool call whose step committed; the model is
called again only for what was not done. Control-flow signals of a tool
(``ModelRetry``, ``CallDeferred``, ``ApprovalRequired``) cross the step as recorded
values, never as errors plait would retry. A tool that needs approval waits on
``wf.approval``, a gate of its own per tool call
(``agent:<agent>:tool:<tool>:<tool_call_id>``), and goes on with the decision. The
run's events are written to ``wf.stream("agent")`` as JSON.

Outside a plait workflow the capability stands aside: the agent runs as an ordinary,
non-durable Pydantic AI agent (the same agent object serves a script and a workflow).
"""

from __future__ import annotations

import asyncio
import dataclasses
import hashlib
import re
from collections.abc import AsyncIterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any, ClassVar, Literal

import pydantic

import plait
from plait import ids
from plait.durations import Duration
from plait.errors import NonRetryableError, extra_needed

with extra_needed("pydantic-ai", "plait.integrations.pydantic_ai"):
    from pydantic_ai import Agent
    from pydantic_ai.agent import EventStreamHandler
    from pydantic_ai.capabilities import WrapRunHandler
    from pydantic_ai.durable_exec import (
        JSON_CODEC,
        BaseDurabilityCapability,
        CallableOperationBackend,
        CapabilityOperationId,
        DurabilityEngineSpec,
        DurableOperationBackend,
        DurableOperationId,
        DurableOperationNamer,
        EventStreamHandlerId,
        ModelCancelSuspendedResponseId,
        ModelCompactMessagesId,
        ModelCountTokensId,
        ModelRequestId,
        RoleBasedOperationConfig,
        ToolsetCallToolId,
        ToolsetGetInstructionsId,
        ToolsetGetToolsId,
        ToolsetValidateToolArgumentsId,
    )
    from pydantic_ai.exceptions import ApprovalRequired, CallDeferred, ModelRetry, UserError
    from pydantic_ai.messages import AgentStreamEvent, ToolCallPart
    from pydantic_ai.models import Model
    from pydantic_ai.run import AgentRunResult
    from pydantic_ai.tools import (
        AgentDepsT,
        DeferredToolRequests,
        DeferredToolResults,
        RunContext,
        ToolApproved,
        ToolDenied,
    )
    from pydantic_ai.toolsets import ToolsetTool

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable

__all__ = ["EVENTS_STREAM", "PlaitDurability", "PlaitOperationNamer", "ToolApproval"]

#: the stream of the run the agent's events are written to
EVENTS_STREAM = "agent"

#: the tool metadata key for per-tool step options: ``metadata={"plait": {"retries": 5}}``,
#: or ``{"plait": False}`` to run the tool in workflow code, not as a step of its own
TOOL_CONFIG_KEY = "plait"

#: what a step body may raise that no later attempt would change: Pydantic AI's
#: control-flow signals (normally carried as recorded values) and its usage errors
NOT_RETRIED: tuple[type[BaseException], ...] = (
    ModelRetry,
    CallDeferred,
    ApprovalRequired,
    UserError,
)

#: the ``wf.do`` options a step of an agent may be given
_STEP_OPTIONS = frozenset({"retries", "retry_delay", "timeout", "on_error", "no_retry_on"})

_EVENT_ADAPTER: pydantic.TypeAdapter[AgentStreamEvent] = pydantic.TypeAdapter(AgentStreamEvent)

StepOptions = dict[str, Any]


class ToolApproval(pydantic.BaseModel):
    """The data of a decision on a tool call that needs approval:
    ``plait approve RUN agent:support:tool:refund:call_2 --data '{"approved": true}'``."""

    approved: bool
    #: told to the model when the call is denied
    reason: str | None = None
    #: arguments the tool runs with instead of the model's
    override_args: dict[str, Any] | None = None


def _current_workflow() -> plait.Workflow | None:
    """The workflow whose code runs here, or None (a step body, or no run at all)."""
    try:
        return plait.current_workflow()
    except RuntimeError:
        return None


def _workflow_here(what: str) -> plait.Workflow:
    wf = _current_workflow()
    if wf is None:
        raise RuntimeError(f"{what} runs only in plait workflow code")
    return wf


async def _write_event(wf: plait.Workflow, value: Any) -> None:
    """Append ``value`` to the run's agent stream (recorded once: a replay never writes
    it again)."""
    await wf.stream(EVENTS_STREAM).write(value)


def event_json(event: AgentStreamEvent) -> Any:
    """An agent event as JSON, in Pydantic AI's own shape (``event_kind`` tells which);
    ``pydantic.TypeAdapter(AgentStreamEvent).validate_python`` reads it back."""
    return _EVENT_ADAPTER.dump_python(event, mode="json")


def _check_step_options(options: Mapping[str, Any] | None, what: str) -> StepOptions:
    if options is None:
        return {}
    if not isinstance(options, Mapping):
        raise TypeError(f"{what} must be a mapping of step options, got {type(options).__name__}")
    unknown = sorted(set(options) - _STEP_OPTIONS)
    if unknown:
        raise ValueError(
            f"{what}: unknown step option(s) {', '.join(map(repr, unknown))} "
            f"(known: {', '.join(sorted(_STEP_OPTIONS))})"
        )
    return dict(options)


#: a tool call id kept as it is in the name of the call's approval gate (``approval_name``)
_CALL_ID = re.compile(r"[A-Za-z0-9_.-]+")
_MAX_CALL_ID = 64

#: where a class name's next word begins: ``MCPListResources`` is ``MCP``, ``List``,
#: ``Resources``
_WORD_START = re.compile(r"(?<=[a-z0-9])(?=[A-Z])|(?<=[A-Z])(?=[A-Z][a-z])")


class PlaitOperationNamer(DurableOperationNamer):
    """The step names of an agent's operations: ``agent:<agent>:model_request``,
    ``agent:<agent>:tool:<tool>`` and so on.

    The names are what a run's record is keyed by, so they are compatibility data: a
    rename strands the runs in flight (their recorded steps would no longer be found). A
    call reached again in one run takes plait's ordinal (``...:model_request#1``)."""

    def __init__(self, agent_name: str, *, default_model_id: str | None = None) -> None:
        self._prefix = f"agent:{agent_name}"
        self._default_model_id = default_model_id

    def _model(self, operation: str, model_id: str | None) -> str:
        suffix = "" if model_id is None or model_id == self._default_model_id else f":{model_id}"
        return f"{self._prefix}:{operation}{suffix}"

    def operation_name(self, operation_id: DurableOperationId) -> str:
        prefix = self._prefix
        match operation_id:
            case ModelRequestId(model_id=model_id):
                # streamed or not, one name: the record holds the same ModelResponse, so
                # turning the event stream on or off strands no run in flight
                return self._model("model_request", model_id)
            case ModelCancelSuspendedResponseId(model_id=model_id):
                return self._model("model_cancel_suspended_response", model_id)
            case ModelCompactMessagesId(model_id=model_id):
                return self._model("model_compact_messages", model_id)
            case ModelCountTokensId(model_id=model_id):
                return self._model("model_count_tokens", model_id)
            case EventStreamHandlerId():
                return f"{prefix}:event_stream_handler"
            case ToolsetGetToolsId(toolset_id=toolset_id):
                return f"{prefix}:toolset:{toolset_id}:get_tools"
            case ToolsetGetInstructionsId(toolset_id=toolset_id):
                return f"{prefix}:toolset:{toolset_id}:get_instructions"
            case ToolsetValidateToolArgumentsId(toolset_id=toolset_id):
                return f"{prefix}:toolset:{toolset_id}:validate_args"
            case ToolsetCallToolId(toolset_id=toolset_id):
                return f"{prefix}:toolset:{toolset_id}:call_tool"
            case CapabilityOperationId(capability_id=capability_id, operation=operation):
                return f"{prefix}:capability:{capability_id}:{operation}"
        return self._later_operation(operation_id)

    def _later_operation(self, operation_id: object) -> str:
        """A stable name for an operation a later pydantic_ai release adds.

        Failing here would stop every agent that uses the new operation the day a user
        upgrades pydantic_ai. The name comes from the class (``MCPListResourcesId``
        gives ``mcp_list_resources``), then the values of the fields that say which
        toolset, capability or other part it is for (``*_id``), then the model as
        for a model request: the same from one process to the next, and two toolsets'
        operations never share a name."""
        kind = type(operation_id).__name__.removesuffix("Id")
        operation = _WORD_START.sub("_", kind).lower()
        fields = dataclasses.fields(operation_id) if dataclasses.is_dataclass(operation_id) else ()
        for field in fields:
            value = getattr(operation_id, field.name)
            if field.name.endswith("_id") and field.name != "model_id" and value is not None:
                operation += f":{value}"
        return self._model(operation, getattr(operation_id, "model_id", None))

    def invocation_name(
        self, operation_id: DurableOperationId, *, label: str | None
    ) -> Any:  # pydantic_ai's DurableInvocationName, not exported by name
        from pydantic_ai.durable_exec._operation_names import DurableInvocationName

        name = self.operation_name(operation_id)
        if isinstance(operation_id, ToolsetCallToolId) and label is not None:
            name = f"{self._prefix}:tool:{label}"
        elif isinstance(operation_id, ToolsetValidateToolArgumentsId) and label is not None:
            name = f"{self._prefix}:validate:{label}"
        return DurableInvocationName(name)


class _PlaitBackend(CallableOperationBackend[StepOptions]):
    """Runs each operation of an agent as one plait step of the workflow in progress."""

    async def execute(
        self,
        *,
        operation_id: DurableOperationId,
        name: str,
        body: Callable[[], Awaitable[object]],
        cache_key: tuple[object, ...],
        config: StepOptions,
    ) -> object:
        wf = _workflow_here(f"the step {name!r} of an agent")
        options = dict(config or {})
        options["no_retry_on"] = (*NOT_RETRIED, *(options.get("no_retry_on") or ()))
        return await wf.do(name, body, **options)


def _tool_options(tool: object | None) -> StepOptions | Literal[False] | None:
    """A tool's own step options from its metadata, or False (not a step), or None."""
    if not isinstance(tool, ToolsetTool):
        return None
    metadata: Any = tool.tool_def.metadata  # pyright: ignore[reportUnknownMemberType]
    found = None if metadata is None else metadata.get(TOOL_CONFIG_KEY)
    if found is None or found is False:
        return found
    name = tool.tool_def.name  # pyright: ignore[reportUnknownMemberType]
    return _check_step_options(found, f"metadata {TOOL_CONFIG_KEY!r} of tool {name!r}")


@dataclass(init=False)
class PlaitDurability(BaseDurabilityCapability[AgentDepsT]):
    """Makes an agent durable in plait workflows: model requests and tool calls become
    steps, tool approvals become approval gates, events go to the run's ``agent``
    stream. Outside a plait workflow the agent runs as usual, not durably.

    ``Agent(model, name="support", capabilities=[PlaitDurability()])``: the agent needs a
    name (or pass ``name=``), which starts every step name."""

    engine_spec: ClassVar[DurabilityEngineSpec] = DurabilityEngineSpec(
        engine_name="plait",
        durable_unit_noun="step",
        durable_container_noun="workflow",
        codec=JSON_CODEC,
        serialization_failure=lambda exc: NonRetryableError(f"not JSON: {exc}"),
        wrapped_toolset_kinds=frozenset({"function", "mcp", "dynamic"}),
        toolset_lifecycles={
            "function": "enter-always",
            "mcp": "enter-in-durable-unit",
            "dynamic": "enter-never",
        },
        journal_discovery=True,
        sequential_tools_in_durable_context=False,
        unsupported_runtime_toolset_kinds=frozenset({"function", "mcp", "dynamic"}),
        tool_config_key=TOOL_CONFIG_KEY,
    )

    def __init__(
        self,
        *,
        name: str | None = None,
        models: Mapping[str, Model] | None = None,
        event_stream_handler: EventStreamHandler[AgentDepsT] | None = None,
        step_options: Mapping[str, Any] | None = None,
        model_step_options: Mapping[str, Any] | None = None,
        tool_step_options: Mapping[str, Any] | None = None,
        stream_events: bool = True,
        approvals: bool = True,
        approvers: str | Sequence[str] = "any",
        approval_expires: Duration | None = None,
    ) -> None:
        """``name``: starts every step name (default: the agent's name). ``models``:
        other models a run may switch to by key. ``step_options``: ``wf.do`` options
        (``retries``, ``retry_delay``, ``timeout``, ``on_error``, ``no_retry_on``) for
        every step, refined by ``model_step_options`` and ``tool_step_options``, and per
        tool by its metadata ``{"plait": {...}}``. ``stream_events``: write the run's
        events to ``wf.stream("agent")``. ``approvals``: a tool call that needs approval
        waits on ``wf.approval`` (with ``approvers`` and ``approval_expires``, an expired
        gate denies the call); without, such calls end the run as Pydantic AI's
        ``DeferredToolRequests``."""
        super().__init__(models=models, event_stream_handler=event_stream_handler, name=name)
        base = _check_step_options(step_options, "step_options")
        self._model_options = base | _check_step_options(model_step_options, "model_step_options")
        self._tool_options = base | _check_step_options(tool_step_options, "tool_step_options")
        self._base_options = base
        if not isinstance(approvers, str | Sequence):
            raise TypeError(f"approvers must be a policy name or a list of user ids: {approvers!r}")
        self._stream_events = stream_events
        self._approvals = approvals
        self._approvers = approvers
        self._approval_expires = approval_expires

    # -- where plait takes over ----------------------------------------------------------
    @property
    def in_durable_context(self) -> bool:
        return _current_workflow() is not None

    def get_durable_operation_backend(self) -> DurableOperationBackend[StepOptions]:
        tool_options = self._tool_options

        def resolve_tool(
            operation_id: DurableOperationId, tool: object | None, tool_name: str
        ) -> StepOptions | Literal[False]:
            own = _tool_options(tool)
            if own is False:
                return False
            return tool_options | (own or {})

        config = RoleBasedOperationConfig[StepOptions](
            model=self._model_options,
            event=self._base_options,
            capability=self._base_options,
            tool=tool_options,
            resolve_tool=resolve_tool,
        )
        namer = PlaitOperationNamer(self.name, default_model_id=self.default_model_id)
        return _PlaitBackend(namer=namer, config=config)

    def get_default_run_id(self) -> str | None:
        wf = _current_workflow()
        return None if wf is None else wf.uuid()

    async def get_run_start_time(self, run_id: str) -> datetime | None:
        wf = _current_workflow()
        return None if wf is None else wf.now()

    async def wrap_run(
        self, ctx: RunContext[AgentDepsT], *, handler: WrapRunHandler
    ) -> AgentRunResult[Any]:
        """In a workflow, the agent's own waits (between polls of a model's background
        response) are durable sleeps."""
        wf = _current_workflow()
        if wf is None:
            return await super().wrap_run(ctx, handler=handler)
        sleep_name = f"agent:{self.name}:sleep"

        async def durable_sleep(seconds: float) -> None:
            await wf.sleep(sleep_name, max(seconds, 0.0))

        with Agent.using_sleep(durable_sleep):
            return await super().wrap_run(ctx, handler=handler)

    # -- events ---------------------------------------------------------------------------
    @property
    def has_wrap_run_event_stream(self) -> bool:
        return super().has_wrap_run_event_stream or (
            self._stream_events and self.in_durable_context
        )

    async def wrap_run_event_stream(
        self, ctx: RunContext[AgentDepsT], *, stream: AsyncIterable[AgentStreamEvent]
    ) -> AsyncIterable[AgentStreamEvent]:
        """Every event of the run, written from workflow code: the events are rebuilt
        the same from the record on a replay, which writes none of them again."""
        events = super().wrap_run_event_stream(ctx, stream=stream)
        wf = _current_workflow() if self._stream_events else None
        try:
            async for event in events:
                if wf is not None:
                    await _write_event(wf, event_json(event))
                yield event
        finally:
            aclose = getattr(events, "aclose", None)
            if aclose is not None:
                await aclose()

    # -- approvals ------------------------------------------------------------------------
    def approval_name(self, tool_name: str, tool_call_id: str) -> str:
        """The approval gate the call ``tool_call_id`` of ``tool_name`` waits on:
        ``agent:<agent>:tool:<tool>:<tool_call_id>``, one gate per call, so a decision
        sent by name reaches the call it was meant for (a model response may call one
        tool twice). The call id comes from the model, recorded with its response, so a
        replay names the gate the same; an id a person could not type or send in a URL
        (other than letters, digits, ``_``, ``-`` and ``.``, or too long) or plait would
        refuse in a name (``on_error``) is replaced by a short hash of it."""
        base = f"agent:{self.name}:tool:{tool_name}:"
        call = tool_call_id
        if (
            _CALL_ID.fullmatch(call) is None
            or call == "on_error"  # plait refuses a name ending ":on_error" (a handler's key)
            or len(call) > _MAX_CALL_ID
            or len(base) + len(call) > ids.MAX_NAME
        ):
            digest = hashlib.sha256(tool_call_id.encode("utf-8", "surrogatepass")).hexdigest()
            call = f"h{digest[:12]}"
        return base + call

    async def handle_deferred_tool_calls(
        self, ctx: RunContext[AgentDepsT], *, requests: DeferredToolRequests
    ) -> DeferredToolResults | None:
        """Tool calls that need approval wait on approval gates (all at once, each its
        own gate), then go on as decided. Calls to run elsewhere (``CallDeferred``) are
        left to the agent's caller."""
        wf = _current_workflow()
        if wf is None or not self._approvals or not requests.approvals:
            return None
        decisions = await asyncio.gather(
            *(
                self._decide(wf, call, requests.metadata.get(call.tool_call_id))
                for call in requests.approvals
            )
        )
        return DeferredToolResults(
            approvals={
                call.tool_call_id: decision
                for call, decision in zip(requests.approvals, decisions, strict=True)
            }
        )

    async def _decide(
        self, wf: plait.Workflow, call: ToolCallPart, metadata: Any
    ) -> ToolApproved | ToolDenied:
        name = self.approval_name(call.tool_name, call.tool_call_id)
        if self._stream_events:
            await _write_event(
                wf,
                {
                    "event_kind": "approval_requested",
                    "approval": name,
                    "tool_name": call.tool_name,
                    "tool_call_id": call.tool_call_id,
                    "args": call.args_as_dict(),
                    "metadata": metadata,
                },
            )
        decision = await wf.approval(
            name, schema=ToolApproval, expires=self._approval_expires, approvers=self._approvers
        )
        if decision.expired or decision.data is None:
            return ToolDenied(f"the approval {name!r} expired before anyone decided")
        if not decision.data.approved:
            return ToolDenied(decision.data.reason or "the tool call was denied")
        return ToolApproved(override_args=decision.data.override_args)
