"""A support agent on plait for the tests of ``plait.integrations.pydantic_ai``: a
deterministic offline model (Pydantic AI's ``FunctionModel``) that looks an order up,
refunds it, then answers; the refund needs approval above 100.

Every model call and tool call appends a line to the file named by ``AGENT_LEDGER`` (when
set), so a test counts them across processes. With ``AGENT_GATE`` set, the model's second
request waits until that file exists: a worker can be killed there, after the first tool
call committed and before the run's second model response is recorded.
"""

from __future__ import annotations

import asyncio
import json
import os
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

from pydantic_ai import Agent, ApprovalRequired, RunContext
from pydantic_ai.messages import (
    ModelMessage,
    ModelRequest,
    ModelResponse,
    TextPart,
    ToolCallPart,
    ToolReturnPart,
    UserPromptPart,
)
from pydantic_ai.models.function import AgentInfo, DeltaToolCall, DeltaToolCalls, FunctionModel

import plait
from plait.integrations.pydantic_ai import PlaitDurability
from support.ledger import append_line

#: model calls made in this process, in order: how many tool results each one saw
model_calls: list[int] = []


def _note(line: dict[str, Any]) -> None:
    path = os.environ.get("AGENT_LEDGER")
    if path:
        append_line(path, {**line, "pid": os.getpid()})


def _prompt(messages: list[ModelMessage]) -> str:
    for message in messages:
        if isinstance(message, ModelRequest):
            for part in message.parts:
                if isinstance(part, UserPromptPart) and isinstance(part.content, str):
                    return part.content
    raise AssertionError("no user prompt")


def tool_returns(messages: list[ModelMessage]) -> list[ToolReturnPart]:
    """What the tools returned so far in a conversation: a scripted model's next answer
    depends on it."""
    return [
        part
        for message in messages
        if isinstance(message, ModelRequest)
        for part in message.parts
        if isinstance(part, ToolReturnPart)
    ]


def tool_call_delta(index: int, part: ToolCallPart) -> DeltaToolCalls:
    """A tool call of a scripted response as one streamed delta."""
    args = json.dumps(part.args)
    return {
        index: DeltaToolCall(name=part.tool_name, json_args=args, tool_call_id=part.tool_call_id)
    }


def plan(messages: list[ModelMessage]) -> ModelResponse:
    """The model's answer to a conversation, from what it holds so far. The prompt is
    ``"<order> <amount>"``."""
    order, amount = _prompt(messages).split()
    returns = tool_returns(messages)
    if not returns:
        return ModelResponse(parts=[ToolCallPart("lookup", {"order": order}, tool_call_id="c1")])
    if len(returns) == 1:
        args = {"order": order, "amount": int(amount)}
        return ModelResponse(parts=[ToolCallPart("refund", args, tool_call_id="c2")])
    said = "; ".join(str(r.content) for r in returns)
    return ModelResponse(parts=[TextPart(f"Done for {order}: {said}")])


async def _wait_for_gate(seen: int) -> None:
    gate = os.environ.get("AGENT_GATE")
    if gate and seen == 1:
        # the file is made by the test, in another process: nothing to wait on but it
        while not Path(gate).exists():  # noqa: ASYNC110, ASYNC240
            await asyncio.sleep(0.02)


async def stream(
    messages: list[ModelMessage], info: AgentInfo
) -> AsyncIterator[str | DeltaToolCalls]:
    """The streamed form of ``plan`` (an agent whose events are written streams its
    model requests): text word by word, a tool call in one delta."""
    response = plan(messages)
    seen = sum(1 for m in messages if isinstance(m, ModelRequest)) - 1
    model_calls.append(seen)
    _note({"what": "model", "seen": seen})
    await _wait_for_gate(seen)
    for index, part in enumerate(response.parts):
        if isinstance(part, TextPart):
            for word in part.content.split(" "):
                yield word + " "
        elif isinstance(part, ToolCallPart):
            yield tool_call_delta(index, part)


def respond(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
    """The unstreamed form of ``plan``, for an agent run outside a workflow."""
    seen = sum(1 for m in messages if isinstance(m, ModelRequest)) - 1
    model_calls.append(seen)
    _note({"what": "model", "seen": seen})
    return plan(messages)


agent = Agent(
    FunctionModel(respond, stream_function=stream),
    name="support",
    capabilities=[PlaitDurability()],
)


@agent.tool_plain
def lookup(order: str) -> dict[str, str]:
    """The order's state."""
    _note({"what": "tool", "tool": "lookup"})
    return {"order": order, "state": "delivered"}


@agent.tool
def refund(ctx: RunContext[None], order: str, amount: int) -> str:
    """Refund ``amount`` on ``order``; more than 100 needs a person's approval."""
    if amount > 100 and not ctx.tool_call_approved:
        _note({"what": "approval needed", "tool": "refund"})
        raise ApprovalRequired(metadata={"amount": amount})
    _note({"what": "tool", "tool": "refund", "amount": amount})
    return f"refunded {amount}"


app = plait.App("agents")


@app.workflow
async def support(wf: plait.Workflow, prompt: str) -> str:
    result = await agent.run(prompt)
    return result.output
