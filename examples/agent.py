"""A durable support agent: a Pydantic AI agent whose model requests and tool calls are
plait steps, with a refund tool that waits for a person's approval.

    pip install 'plait[pydantic-ai]'
    python examples/agent.py                 # runs the whole story on agent.db

The model is Pydantic AI's ``FunctionModel`` playing a scripted assistant, so the example
runs offline, with no key, and the same way every time. Put a real model in its place
(``Agent("openai:gpt-5", ...)``) and nothing else changes.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
from collections.abc import AsyncIterator

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
from plait.integrations.pydantic_ai import PlaitDurability, ToolApproval

ORDERS = {"A-1001": {"item": "kettle", "paid": 240, "state": "delivered broken"}}


def scripted(messages: list[ModelMessage]) -> ModelResponse:
    """What the assistant says next: look the order up, ask for its refund, then sum up."""
    prompt = next(
        p.content
        for m in messages
        if isinstance(m, ModelRequest)
        for p in m.parts
        if isinstance(p, UserPromptPart) and isinstance(p.content, str)
    )
    order = re.search(r"[A-Z]-\d+", prompt)
    results = [
        p.content
        for m in messages
        if isinstance(m, ModelRequest)
        for p in m.parts
        if isinstance(p, ToolReturnPart)
    ]
    if order is None:
        return ModelResponse(parts=[TextPart("Which order is it about?")])
    if not results:
        call = ToolCallPart("look_up_order", {"order": order[0]}, tool_call_id="call-1")
        return ModelResponse(parts=[call])
    if len(results) == 1:
        found = results[0]
        args = {"order": order[0], "amount": found["paid"]}
        return ModelResponse(parts=[ToolCallPart("refund", args, tool_call_id="call-2")])
    return ModelResponse(parts=[TextPart(f"Sorry about that. {results[1]}.")])


async def stream(
    messages: list[ModelMessage], info: AgentInfo
) -> AsyncIterator[str | DeltaToolCalls]:
    """The scripted answer, streamed: text word by word, a tool call at once."""
    for index, part in enumerate(scripted(messages).parts):
        if isinstance(part, TextPart):
            for word in part.content.split(" "):
                yield word + " "
        elif isinstance(part, ToolCallPart):
            args = json.dumps(part.args)
            yield {
                index: DeltaToolCall(
                    name=part.tool_name, json_args=args, tool_call_id=part.tool_call_id
                )
            }


agent = Agent(
    FunctionModel(lambda messages, info: scripted(messages), stream_function=stream),
    name="support",
    instructions="You help customers with their orders.",
    capabilities=[PlaitDurability()],
)


@agent.tool_plain
def look_up_order(order: str) -> dict[str, object]:
    """The order's item, the amount paid and its state."""
    return {"order": order, **ORDERS[order]}


@agent.tool
def refund(ctx: RunContext[None], order: str, amount: int) -> str:
    """Pay ``amount`` back on ``order``; a person approves every refund over 100."""
    if amount > 100 and not ctx.tool_call_approved:
        raise ApprovalRequired(metadata={"reason": "refunds over 100 need a person"})
    return f"Refunded {amount} on order {order}"


app = plait.App("agent")


@app.workflow
async def support(wf: plait.Workflow, question: str) -> str:
    result = await agent.run(question)
    return result.output


async def main() -> None:
    url = os.environ.get("PLAIT_DATABASE_URL", "sqlite:///agent.db")
    async with plait.Engine(app, url) as engine:
        run_id = await engine.start("support", "My kettle from order A-1001 arrived broken.")
        print(f"run {run_id} started")

        # a person would look at the open approvals now and then (the dashboard, the CLI)
        while not (gates := [g for g in await engine.list_approvals() if g.run_id == run_id]):  # noqa: ASYNC110
            await asyncio.sleep(0.05)
        gate = gates[0].name
        print(f"the run waits at approval {gate!r}; a person approves it, as with")
        print(f"    plait approve {run_id} {gate} --data '{{\"approved\": true}}'")
        await engine.approve(
            run_id, gate, ToolApproval(approved=True).model_dump(), decided_by="dana"
        )

        run = await engine.wait(run_id, timeout=60)
        print("steps:")
        for step in await engine.get_steps(run_id):
            print(f"    {step.key:38} {step.status}")
        entries = await engine.read_stream(run_id, "agent")
        kinds = [e.value["event_kind"] for e in entries if e.kind == "data"]
        print(f"events in stream 'agent': {len(kinds)} ({', '.join(dict.fromkeys(kinds))})")
        print(f"{run.status}: {run.output}")


if __name__ == "__main__":
    asyncio.run(main())
