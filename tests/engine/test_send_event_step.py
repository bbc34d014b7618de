"""``wf.send_event``: a workflow sends an event to another run (or to itself) as a durable
step, recorded once with the event, never sent again by a replay or a retry; a run that
is missing, ended, or out of its owner's reach fails the step at once, naming the run."""

from __future__ import annotations

import asyncio
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


@app.function
def quick(data: int) -> int:
    QUICK.append(data)
    return data * 2


#: the inputs ``quick`` ran with
QUICK: list[int] = []


@app.workflow
async def send_then_wait(wf: plait.Workflow, target: str) -> dict[str, Any]:
    """A step and a value whose writes wait for the pass's next commit, a send, then a
    new pass (after ``go``) that replays the send from its record."""
    doubled = await wf.do("quick", quick, 21)
    await wf.set_value("progress", "before the send")
    try:
        await wf.send_event(target, "item", "hello")
        told = "sent"
    except StepError as exc:
        told = exc.code
    await wf.set_value("told", told)
    await wf.wait_for_event("go")
    try:
        await wf.send_event(target, "item", "hello")  # a new key: a send of its own
    except StepError as exc:
        again = exc.code
    else:
        again = "sent"
    return {"doubled": doubled, "told": told, "again": again}


async def test_a_send_to_a_run_that_ends_before_the_commit_fails_the_step(
    engine_factory: Callable[..., Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The pass reads the run it sends to (live), then that run is cancelled before the
    send commits: the store takes no event, so the step fails ``EVENT_NOT_SENT`` (and is
    recorded so, a replay gives the same answer), never told sent. The writes that
    waited in the pass for that commit are not lost."""
    from plait.worker.worker import Worker

    QUICK.clear()
    read_run = Worker.read_run
    cut: list[str] = []

    async def read_then_cancel(self: Worker, run_id: str) -> Any:
        run = await read_run(self, run_id)
        if not cut:  # the first send only: its target ends between the read and the commit
            cut.append(run_id)
            await engine.cancel(run_id, reason="ended between the read and the commit")
        return run

    monkeypatch.setattr(Worker, "read_run", read_then_cancel)
    async with engine_factory(app) as engine:
        target = await engine.start("collect")
        sender = await engine.start("send_then_wait", target)

        # what the pass told the workflow, published in that pass
        assert await engine.get_value(sender, "told", wait=True, timeout=30) == "EVENT_NOT_SENT"
        assert (await engine.get_run(target)).status == "cancelled"
        assert await engine.get_value(sender, "progress") == "before the send"
        await engine.send_event(sender, "go")
        run = await engine.wait(sender, timeout=30)
        assert run.output == {"doubled": 42, "told": "EVENT_NOT_SENT", "again": "EVENT_NOT_SENT"}
        assert QUICK == [21]
        steps = {s.key: s for s in await engine.get_steps(sender)}
        assert steps["quick"].status == "succeeded" and steps["quick"].output == 42
        refused = steps["__send:item"]
        assert refused.status == "failed" and refused.error is not None
        assert refused.error["code"] == "EVENT_NOT_SENT"
        assert f"run {target!r} ended before it was stored" in refused.error["message"]
        assert all(r.ok for r in await engine.check(include_ended=5))


@app.workflow
async def send_two(wf: plait.Workflow, targets: list[str]) -> list[str]:
    """Two sends side by side: each one's step is told how the store took it."""

    async def one(target: str) -> str:
        try:
            await wf.send_event(target, "item", "hello")
        except StepError as exc:
            return exc.code
        return "sent"

    return list(await asyncio.gather(*(one(target) for target in targets)))


async def test_a_refused_send_beside_another_leaves_no_gap_in_the_record(
    engine_factory: Callable[..., Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two sends in a ``gather``; the first one's run ends before its commit, which the
    store refuses. The second send's commit must not land while the first's step is
    written nowhere: a record holding a later step without an earlier one does not
    replay (a crash in between would leave the run unable to go on)."""
    from plait.worker.worker import Worker

    read_run = Worker.read_run
    cut: list[str] = []
    landed: list[set[str]] = []

    async def read_then_cancel(self: Worker, run_id: str) -> Any:
        run = await read_run(self, run_id)
        if not cut:
            cut.append(run_id)
            await engine.cancel(run_id, reason="ended between the read and the commit")
        return run

    monkeypatch.setattr(Worker, "read_run", read_then_cancel)
    async with engine_factory(app) as engine:
        commit = engine.store.commit

        async def recorded(batch: Any) -> Any:
            answer = await commit(batch)
            landed.append({op.step.key for op in batch.ops if getattr(op, "step", None)})
            return answer

        monkeypatch.setattr(engine._worker, "commit", recorded)
        targets = [await engine.start("collect") for _ in range(2)]
        sender = await engine.start("send_two", targets)
        run = await engine.wait(sender, timeout=30)
        assert run.output == ["EVENT_NOT_SENT", "sent"]
        written: set[str] = set()
        for keys in landed:
            written |= keys
            if "__send:item#1" in written:
                assert "__send:item" in written, landed
                break
        else:
            raise AssertionError(f"the second send was never written: {landed}")
        assert all(r.ok for r in await engine.check(include_ended=5))
