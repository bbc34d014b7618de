"""``wf.send_event``: a workflow sends an event to another run (or to itself) as a durable
step, recorded once with the event, never sent again by a replay or a retry; a run that
is missing, ended, or out of its owner's reach fails the step at once, naming the run."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

import plait
from plait.errors import StepError, WorkflowFailedError

app = plait.App("send-event-step")


@app.workflow
async def collect(wf: plait.Workflow) -> list[Any]:
    """Every ``item`` event until one says ``"stop"``."""
    got: list[Any] = []
    while True:
        payload = await wf.wait_for_event("item")
        if payload == "stop":
            return got
        got.append(payload)


@app.workflow
async def feed(wf: plait.Workflow, data: dict[str, Any]) -> str:
    """Sends each item, waits for ``continue`` in between (a new pass each time), then
    fails once if the flag file is missing, then stops the receiver."""
    target = data["to"]
    for item in data["items"]:
        await wf.send_event(target, "item", item)
        await wf.wait_for_event("continue")
    await wf.do("check", _flag, data["flag"], retries=0)
    await wf.send_event(target, "item", "stop")
    return "fed"


def _flag(path: str) -> None:
    if not Path(path).exists():
        raise RuntimeError("flag file missing")


@app.workflow
async def ping_self(wf: plait.Workflow) -> Any:
    await wf.send_event(wf.run_id, "ping", {"from": "me"})
    return await wf.wait_for_event("ping")


@app.workflow
async def send_to(wf: plait.Workflow, target: str) -> Any:
    """Sends one ``item`` to ``target``; a refused send is caught and returned."""
    try:
        await wf.send_event(target, "item", "hello")
    except StepError as exc:
        return {"code": exc.code, "message": exc.error["message"]}
    return "sent"


async def test_a_workflow_sends_events_to_another_run_once_each(
    engine_factory: Callable[..., Any], tmp_path: Path
) -> None:
    flag = tmp_path / "flag"
    async with engine_factory(app) as engine:
        receiver = await engine.start("collect")
        data = {"to": receiver, "items": [1, 2, 3], "flag": str(flag)}
        sender = await engine.start("feed", data)
        for _ in range(3):
            await engine.send_event(sender, "continue")
        failed = await engine.wait(sender, timeout=30)
        assert failed.status == "failed", failed.error
        flag.write_text("")
        await engine.retry(sender)  # replays every send recorded before the failure
        assert (await engine.wait(sender, timeout=30)).output == "fed"
        received = await engine.wait(receiver, timeout=30)
        assert received.output == [1, 2, 3]

        sends = [s for s in await engine.get_steps(sender) if s.kind == "send_event"]
        assert [s.key for s in sends] == [
            "__send:item",
            "__send:item#1",
            "__send:item#2",
            "__send:item#3",
        ]
        assert all(s.status == "succeeded" and s.attempts == 0 for s in sends)
        assert sends[0].input == {"run_id": receiver, "event": "item", "payload": 1}


async def test_each_send_is_keyed_by_its_steps_invocation_id(
    engine_factory: Callable[..., Any],
) -> None:
    async with engine_factory(app) as engine:
        receiver = await engine.start("collect")
        sender = await engine.start("send_to", receiver)
        assert (await engine.wait(sender, timeout=30)).output == "sent"
        (step,) = [s for s in await engine.get_steps(sender) if s.kind == "send_event"]
        # the event's key is the step's invocation id, in plait's own keys: the same send
        # again (a batch applied twice) stores nothing, and no sender may give that key
        own_key = f"__send:{step.invocation_id}"
        assert await engine.store.send_event(receiver, "item", '"hello"', own_key) is False
        with pytest.raises(ValueError, match="dedup"):
            await engine.send_event(receiver, "item", "forged", dedup=own_key)
        await engine.send_event(receiver, "item", "stop")
        assert (await engine.wait(receiver, timeout=30)).output == ["hello"]


async def test_a_run_sends_an_event_to_itself(engine_factory: Callable[..., Any]) -> None:
    async with engine_factory(app) as engine:
        run_id = await engine.start("ping_self")
        run = await engine.wait(run_id, timeout=30)
        assert (run.status, run.output) == ("completed", {"from": "me"})


async def test_a_send_to_a_missing_or_ended_run_fails_the_step_naming_it(
    engine_factory: Callable[..., Any],
) -> None:
    async with engine_factory(app) as engine:
        missing = await engine.wait(await engine.start("send_to", "no-such-run"), timeout=30)
        assert missing.output["code"] == "EVENT_NOT_SENT"
        assert "'no-such-run'" in missing.output["message"]

        ended = await engine.start("collect")
        await engine.send_event(ended, "item", "stop")
        await engine.wait(ended, timeout=30)
        sender = await engine.start("send_to", ended)
        refused = await engine.wait(sender, timeout=30)
        assert refused.output["code"] == "EVENT_NOT_SENT"
        assert f"run {ended!r} has ended (completed)" in refused.output["message"]
        (step,) = [s for s in await engine.get_steps(sender) if s.kind == "send_event"]
        assert step.status == "failed" and step.error is not None
        assert step.error["retryable"] is False

        # uncaught, the step's error fails the run with its code
        failed = await engine.wait(await engine.start("send_uncaught"), timeout=30)
        assert failed.status == "failed" and failed.error is not None
        assert failed.error["code"] == "EVENT_NOT_SENT"
        # a run id that is no run id is refused at the call, naming it
        with pytest.raises(WorkflowFailedError, match="run_id must be a non-empty string"):
            await engine.run("send_to_bad_id")


@app.workflow
async def send_uncaught(wf: plait.Workflow) -> None:
    await wf.send_event("no-such-run", "item")


@app.workflow
async def send_to_bad_id(wf: plait.Workflow) -> None:
    await wf.send_event(5, "item")  # type: ignore[arg-type]


async def test_a_run_sends_only_where_its_owner_could(
    engine_factory: Callable[..., Any],
) -> None:
    """An owner's run reaches her runs and runs without an owner, as she does over HTTP;
    another user's run is refused in the words of a run that does not exist. A run
    without an owner (started by trusted code) reaches every run."""
    async with engine_factory(app) as engine:
        alices = await engine.start("collect", owner="alice")
        bobs = await engine.start("collect", owner="bob")
        shared = await engine.start("collect")

        async def sent(target: str, owner: str | None) -> Any:
            sender = await engine.start("send_to", target, owner=owner)
            return (await engine.wait(sender, timeout=30)).output

        assert await sent(alices, "alice") == "sent"
        assert await sent(shared, "alice") == "sent"
        refused = await sent(bobs, "alice")
        assert refused["code"] == "EVENT_NOT_SENT"
        assert refused["message"].startswith(f"event 'item' not sent: no run {bobs!r}")
        assert await sent(bobs, None) == "sent"
        for target in (alices, bobs, shared):
            await engine.send_event(target, "item", "stop")
        outputs = [(await engine.wait(t, timeout=30)).output for t in (alices, bobs, shared)]
        assert outputs == [["hello"], ["hello"], ["hello"]]
