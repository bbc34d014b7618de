"""Pydantic AI agents on plait (``plait.integrations.pydantic_ai``), on both stores,
offline: each model request and tool call is a step with a pinned name, a tool that
needs approval waits on a gate of its own (one per tool call) ``plait approve``
decides, control-flow signals are not retried, and the agent's events land in the
run's ``agent`` stream."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest

pytest.importorskip("pydantic_ai", reason="the pydantic-ai extra is not installed")

from pydantic_ai import Agent, ApprovalRequired, ModelRetry, RunContext
from pydantic_ai.messages import (
    ModelMessage,
    ModelResponse,
    TextPart,
    ToolCallPart,
)
from pydantic_ai.models.function import AgentInfo, FunctionModel
from pydantic_ai.models.test import TestModel
from typer.testing import CliRunner

import plait
from plait.cli import cli
from plait.integrations.pydantic_ai import PlaitDurability, ToolApproval
from support import agent_app
from support.polling import eventually

#: the steps of an agent run that calls two tools: compatibility data, never renamed
#: without a migration of the runs in flight
TWO_TOOL_STEPS = [
    "__uuid",
    "agent:support:model_request",
    "agent:support:tool:lookup",
    "agent:support:model_request#1",
    "agent:support:tool:refund",
    "agent:support:model_request#2",
]


async def _keys(engine: plait.Engine, run_id: str) -> list[str]:
    steps = await engine.get_steps(run_id)
    return [s.key for s in steps]


async def _stream(engine: plait.Engine, run_id: str) -> list[Any]:
    """The agent stream's data values."""
    return [e.value for e in await engine.read_stream(run_id, "agent") if e.kind == "data"]


async def test_a_two_tool_run_takes_one_step_per_model_request_and_tool_call(
    engine_factory,
) -> None:
    agent_app.model_calls.clear()
    async with engine_factory(agent_app.app) as engine:
        run_id = await engine.start("support", "A1 5")
        run = await engine.wait(run_id, timeout=30)
        assert run.status == "completed", run.error
        assert run.output == ("Done for A1: {'order': 'A1', 'state': 'delivered'}; refunded 5 ")
        keys = await _keys(engine, run_id)
        # each event written to the agent stream is recorded once, under a key of its own
        assert [k for k in keys if not k.startswith("__stream:agent")] == TWO_TOOL_STEPS
        written = [k for k in keys if k.startswith("__stream:agent")]
        # a model response is stored as JSON in Pydantic AI's own message shape
        steps = {s.key: s for s in await engine.get_steps(run_id)}
        first = steps["agent:support:model_request"].output
        assert first["parts"][0]["part_kind"] == "tool-call"
        assert first["parts"][0]["tool_name"] == "lookup"
        assert agent_app.model_calls == [0, 1, 2]

        kinds = [e["event_kind"] for e in await _stream(engine, run_id)]
        assert len(written) == len(kinds)
        tool = ["part_start", "part_end", "function_tool_call", "function_tool_result"]
        assert kinds == [*tool, *tool, "part_start", "final_result", "part_end"]


async def test_a_replay_reads_model_responses_back_as_pydantic_ai_messages(
    engine_factory,
) -> None:
    """A workflow that runs the agent, then sleeps: the pass after the sleep replays the
    whole agent run from the record, calling neither the model nor a tool again."""
    app = plait.App("agent-replay")

    @app.workflow
    async def twice(wf: plait.Workflow, prompt: str) -> Any:
        result = await agent_app.agent.run(prompt)
        await wf.sleep("pause", 0.05)
        messages = result.all_messages()
        return {"output": result.output, "messages": len(messages)}

    agent_app.model_calls.clear()
    async with engine_factory(app) as engine:
        run = await engine.wait(await engine.start("twice", "B2 7"), timeout=30)
        assert run.status == "completed", run.error
        assert run.output == {
            "output": "Done for B2: {'order': 'B2', 'state': 'delivered'}; refunded 7 ",
            "messages": 6,
        }
        assert agent_app.model_calls == [0, 1, 2]


async def plait_cli(*args: str) -> Any:
    """The CLI in a thread (it runs its own event loop)."""
    return await asyncio.to_thread(CliRunner().invoke, cli, list(args))


async def _gate(engine: plait.Engine, run_id: str) -> Any:
    async def opened() -> Any:
        gates = [g for g in await engine.list_approvals() if g.run_id == run_id]
        return gates[0] if gates else None

    return await eventually(opened, timeout=30, what="the refund's approval gate")


async def test_a_tool_needing_approval_waits_for_plait_approve(
    engine_factory, database: str
) -> None:
    async with engine_factory(agent_app.app) as engine:
        run_id = await engine.start("support", "C3 500")
        gate = await _gate(engine, run_id)
        assert gate.name == "agent:support:tool:refund:c2"
        assert (await engine.get_run(run_id)).status == "running"
        decided = await plait_cli(
            "approve",
            run_id,
            "agent:support:tool:refund:c2",
            "--data",
            json.dumps({"approved": True}),
            "--by",
            "dana",
            "--database",
            database,
        )
        assert decided.exit_code == 0, decided.output
        run = await engine.wait(run_id, timeout=30)
        assert run.status == "completed", run.error
        assert run.output.endswith("refunded 500 ")
        events = await _stream(engine, run_id)
        asked = [e for e in events if e["event_kind"] == "approval_requested"]
        assert asked == [
            {
                "event_kind": "approval_requested",
                "approval": "agent:support:tool:refund:c2",
                "tool_name": "refund",
                "tool_call_id": "c2",
                "args": {"order": "C3", "amount": 500},
                "metadata": {"amount": 500},
            }
        ]


async def test_a_denied_tool_call_tells_the_model_why(engine_factory) -> None:
    async with engine_factory(agent_app.app) as engine:
        run_id = await engine.start("support", "D4 900")
        await _gate(engine, run_id)
        decision = ToolApproval(approved=False, reason="too much").model_dump()
        await engine.approve(run_id, "agent:support:tool:refund:c2", decision, decided_by="dana")
        run = await engine.wait(run_id, timeout=30)
        assert run.status == "completed", run.error
        assert run.output.endswith("; too much ")


def _two_refunds(messages: list[ModelMessage]) -> ModelResponse:
    """A model that refunds two orders in one response (two calls of one tool, both
    over the approval limit), then says what the tools returned."""
    returns = agent_app.tool_returns(messages)
    if not returns:
        return ModelResponse(
            parts=[
                ToolCallPart("refund", {"order": "BIG", "amount": 5000}, tool_call_id="big"),
                ToolCallPart("refund", {"order": "SMALL", "amount": 150}, tool_call_id="small"),
            ]
        )
    return ModelResponse(parts=[TextPart("; ".join(sorted(str(r.content) for r in returns)))])


async def test_two_calls_of_one_tool_needing_approval_wait_on_gates_of_their_own(
    engine_factory,
) -> None:
    """One model response calls ``refund`` twice, both calls need approval: each waits
    on its own gate, named by its tool call id (the id the ``approval_requested`` event
    names too), so a decision sent by name reaches the call it was meant for. Approving
    the small refund and denying the big one refunds the small one only."""

    def respond(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        return _two_refunds(messages)

    async def stream(messages: list[ModelMessage], info: AgentInfo) -> Any:
        for index, part in enumerate(_two_refunds(messages).parts):
            if isinstance(part, TextPart):
                yield part.content
            elif isinstance(part, ToolCallPart):
                yield agent_app.tool_call_delta(index, part)

    refunder = Agent(
        FunctionModel(respond, stream_function=stream),
        name="refunder",
        capabilities=[PlaitDurability()],
    )
    refunded: list[tuple[str, int]] = []

    @refunder.tool
    def refund(ctx: RunContext[None], order: str, amount: int) -> str:
        """Refund ``amount`` on ``order``; more than 100 needs a person's approval."""
        if amount > 100 and not ctx.tool_call_approved:
            raise ApprovalRequired(metadata={"amount": amount})
        refunded.append((order, amount))
        return f"refunded {amount} on {order}"

    app = plait.App("agent-two-refunds")

    @app.workflow
    async def refunds(wf: plait.Workflow, prompt: str) -> str:
        return str((await refunder.run(prompt)).output)

    async with engine_factory(app) as engine:
        run_id = await engine.start("refunds", "refund both")

        async def two_gates() -> Any:
            gates = [g.name for g in await engine.list_approvals() if g.run_id == run_id]
            return sorted(gates) if len(gates) == 2 else None

        gates = await eventually(two_gates, timeout=30, what="the two refunds' approval gates")
        assert gates == ["agent:refunder:tool:refund:big", "agent:refunder:tool:refund:small"]
        asked = {
            e["tool_call_id"]: e["approval"]
            for e in await _stream(engine, run_id)
            if e["event_kind"] == "approval_requested"
        }
        assert asked == {
            "big": "agent:refunder:tool:refund:big",
            "small": "agent:refunder:tool:refund:small",
        }
        # a person approves the small refund and denies the big one, each by its name
        approved = ToolApproval(approved=True).model_dump()
        denied = ToolApproval(approved=False, reason="too much").model_dump()
        await engine.approve(run_id, asked["small"], approved, decided_by="dana")
        await engine.approve(run_id, asked["big"], denied, decided_by="dana")
        run = await engine.wait(run_id, timeout=30)
        assert run.status == "completed", run.error
        assert refunded == [("SMALL", 150)]
        assert run.output == "refunded 150 on SMALL; too much"
        # each gate was decided once, by its own decision
        gate_steps = {
            s.key: s.status
            for s in await engine.get_steps(run_id)
            if s.key.startswith("__approval:")
        }
        assert gate_steps == {
            "__approval:agent:refunder:tool:refund:big": "succeeded",
            "__approval:agent:refunder:tool:refund:small": "succeeded",
        }


def test_a_tool_call_id_unfit_for_a_gate_name_is_replaced_by_a_hash_of_it() -> None:
    """A tool call id comes from the model and may hold anything: one that is not
    letters, digits, ``_``, ``-`` and ``.`` (or is too long) becomes a short hash, the
    same for the same id on every replay, different for different ids, always a valid
    gate name (never ending like a key plait makes: ``:on_error``, ``#<number>``)."""
    from plait import ids

    name = PlaitDurability(name="support").approval_name
    assert name("refund", "call_AbC-1.2") == "agent:support:tool:refund:call_AbC-1.2"
    odd = ["a/b", "a b", "tool\ncall", "x" * 65, "é", "a?b#c", "on_error", "1#2"]
    names = [name("refund", call_id) for call_id in odd]
    assert names == [name("refund", call_id) for call_id in odd]
    assert len(set(names)) == len(odd)
    for gate in names:
        assert ids.check_name(gate, "approval name") == gate
        assert gate.startswith("agent:support:tool:refund:h")
        assert len(gate) == len("agent:support:tool:refund:") + 13
    # a name that would be too long with the id in it takes the hash too
    long_tool = "t" * 160
    gate = name(long_tool, "call_0123456789abcdefghijklmnop")
    assert ids.check_name(gate, "approval name") == gate


async def test_model_retry_is_not_retried_by_plait(engine_factory) -> None:
    """A tool's ``ModelRetry`` goes back to the model, recorded as the step's result:
    one attempt, and the model's next request is a step of its own."""
    tries: list[int] = []
    agent = Agent(
        TestModel(call_tools=["pick"]),
        name="picky",
        capabilities=[PlaitDurability(step_options={"retries": 3})],
    )

    @agent.tool_plain
    def pick(n: int) -> int:
        tries.append(n)
        if len(tries) == 1:
            raise ModelRetry("pick again")
        return n

    app = plait.App("agent-retry")

    @app.workflow
    async def picking(wf: plait.Workflow) -> str:
        return (await agent.run("pick")).output

    async with engine_factory(app) as engine:
        run_id = await engine.start("picking")
        run = await engine.wait(run_id, timeout=30)
        assert run.status == "completed", run.error
        assert len(tries) == 2
        steps = {s.key: s for s in await engine.get_steps(run_id)}
        assert steps["agent:picky:tool:pick"].attempts == 1
        assert steps["agent:picky:tool:pick#1"].status == "succeeded"


async def test_outside_a_workflow_the_agent_runs_as_usual() -> None:
    agent_app.model_calls.clear()
    result = await agent_app.agent.run("E5 3")
    assert result.output == "Done for E5: {'order': 'E5', 'state': 'delivered'}; refunded 3"
    assert agent_app.model_calls == [0, 1, 2]


def test_bad_step_options_are_named() -> None:
    with pytest.raises(ValueError, match=r"step_options: unknown step option.*'retry'"):
        PlaitDurability(step_options={"retry": 3})
    with pytest.raises(TypeError, match="tool_step_options must be a mapping"):
        PlaitDurability(tool_step_options=3)  # type: ignore[arg-type]


def test_an_agent_without_a_name_is_refused() -> None:
    with pytest.raises(Exception, match="needs to have a unique `name`"):
        Agent(TestModel(), capabilities=[PlaitDurability()])


def test_every_operation_has_a_step_name_even_one_a_later_release_adds() -> None:
    """Step names are compatibility data: a token count gets its own, and an operation
    pydantic_ai adds later gets a name derived from its class instead of an error."""
    from dataclasses import dataclass

    from pydantic_ai.durable_exec import ModelCountTokensId

    from plait.integrations.pydantic_ai import PlaitOperationNamer

    namer = PlaitOperationNamer("support", default_model_id="main")
    assert (
        namer.operation_name(ModelCountTokensId("main", model_name="m"))
        == "agent:support:model_count_tokens"
    )
    assert (
        namer.operation_name(ModelCountTokensId("other", model_name="m"))
        == "agent:support:model_count_tokens:other"
    )

    @dataclass(frozen=True)
    class ModelSummarizeHistoryId:
        model_id: str | None = None

    later: Any = ModelSummarizeHistoryId("other")
    assert namer.operation_name(later) == "agent:support:model_summarize_history:other"
    assert namer.operation_name(ModelSummarizeHistoryId()) == (
        "agent:support:model_summarize_history"
    )

    @dataclass(frozen=True)
    class MCPListResourcesId:
        toolset_id: str
        cursor: str | None = None

    one: Any = MCPListResourcesId("docs", cursor="a")
    other: Any = MCPListResourcesId("tickets", cursor="a")
    assert namer.operation_name(one) == "agent:support:mcp_list_resources:docs"
    assert namer.operation_name(other) == "agent:support:mcp_list_resources:tickets"
