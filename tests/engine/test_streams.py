"""Durable streams: the workflow's own writes recorded once, a step attempt's writes
published at once and reset when the attempt fails, the end when the run ends; read and
followed, settled or not, on both stores."""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any

import pytest

import plait
from plait import NotJSONError, PayloadTooLargeError
from support.polling import eventually


def _shape(entries: list[plait.StreamEntry]) -> list[tuple[str, Any, int | None]]:
    return [(e.kind, e.value, e.attempt) for e in entries]


async def _collect(aiter: Any) -> list[plait.StreamEntry]:
    return [entry async for entry in aiter]


@pytest.mark.parametrize("queued", [False, True], ids=["inline", "job"])
async def test_a_failed_attempt_is_reset_and_settled_readers_see_only_the_retry(
    engine_factory, queued: bool
) -> None:
    app = plait.App()

    @app.function(retries=1, retry_delay=0, queued=queued)
    async def talk(n: int, ctx: plait.StepContext) -> str:
        for i in range(n):
            await ctx.stream("tokens").write(f"{ctx.attempt}.{i} ")
        if ctx.attempt == 1:
            raise RuntimeError("the model hung up")
        return "said"

    @app.workflow
    async def chat(wf: plait.Workflow) -> str:
        return await wf.do("talk", talk, 5)

    async with engine_factory(app) as engine:
        run_id = await engine.start("chat")
        followed = asyncio.create_task(_collect(engine.follow_stream(run_id, "tokens")))
        settled = asyncio.create_task(
            _collect(engine.follow_stream(run_id, "tokens", settled_only=True))
        )
        assert (await engine.wait(run_id, timeout=20)).output == "said"
        seen = await asyncio.wait_for(followed, 20)
        first = [("data", f"1.{i} ", 1) for i in range(5)]
        second = [("data", f"2.{i} ", 2) for i in range(5)]
        assert _shape(seen) == [*first, ("reset", None, 1), *second, ("end", None, None)]
        assert [e.offset for e in seen] == list(range(12))
        assert {e.step for e in seen if e.kind != "end"} == {"talk"}
        assert _shape(await asyncio.wait_for(settled, 20)) == [*second, ("end", None, None)]
        read = await engine.read_stream(run_id, "tokens", settled_only=True)
        assert _shape(read) == [*second, ("end", None, None)]
        assert [e.offset for e in read] == [6, 7, 8, 9, 10, 11]
        assert _shape(await engine.read_stream(run_id, "tokens", after=4, limit=2)) == [
            ("reset", None, 1),
            ("data", "2.0 ", 2),
        ]
        assert await engine.stream_names(run_id) == ["tokens"]


async def test_a_step_entry_is_published_before_the_step_ends(engine_factory) -> None:
    app = plait.App()
    seen = asyncio.Event()

    @app.function
    async def slow(data: None, ctx: plait.StepContext) -> None:
        await ctx.stream("progress").write({"done": 1})
        await asyncio.wait_for(seen.wait(), 20)  # the reader saw it while this still runs

    @app.workflow
    async def job(wf: plait.Workflow) -> None:
        await wf.do("slow", slow)

    async with engine_factory(app) as engine:
        run_id = await engine.start("job")
        entries = engine.follow_stream(run_id, "progress")
        first = await asyncio.wait_for(anext(entries), 20)
        assert (first.kind, first.value, first.attempt) == ("data", {"done": 1}, 1)
        assert (await engine.get_run(run_id)).status == "running"
        seen.set()
        assert _shape([e async for e in entries]) == [("end", None, None)]
        await engine.wait(run_id, timeout=20)


async def test_a_workflow_write_is_recorded_once_across_passes(engine_factory) -> None:
    app = plait.App()

    @app.workflow
    async def steps(wf: plait.Workflow) -> int:
        await wf.stream("log").write("start")
        await wf.sleep("pause", 0.05)  # a new pass replays the write
        await wf.stream("log").write("middle")
        await wf.sleep("again", 0.05)
        await wf.stream("log").write(["end", 3])
        return 3

    async with engine_factory(app) as engine:
        run_id = await engine.start("steps")
        assert (await engine.wait(run_id, timeout=20)).output == 3
        entries = await engine.read_stream(run_id, "log")
        assert _shape(entries) == [
            ("data", "start", None),
            ("data", "middle", None),
            ("data", ["end", 3], None),
            ("end", None, None),
        ]
        assert await engine.read_stream(run_id, "log", settled_only=True) == entries
        steps = {s.key: s.kind for s in await engine.get_steps(run_id)}
        assert [k for k, kind in steps.items() if kind == "stream"] == [
            "__stream:log",
            "__stream:log#1",
            "__stream:log#2",
        ]


async def test_a_stream_never_written_ends_with_its_run(engine_factory) -> None:
    app = plait.App()

    @app.workflow
    async def quiet(wf: plait.Workflow) -> None:
        return None

    async with engine_factory(app) as engine:
        run_id = await engine.start("quiet")
        await engine.wait(run_id, timeout=20)
        assert await _collect(engine.follow_stream(run_id, "nothing")) == []
        assert await engine.read_stream(run_id, "nothing") == []


async def test_bad_stream_names_and_values_are_refused_naming_them(engine_factory) -> None:
    app = plait.App()
    errors: dict[str, str] = {}

    async def _try(what: str, call: Any) -> None:
        try:
            await call()
        except Exception as exc:
            errors[what] = f"{type(exc).__name__}: {exc}"

    @app.function
    async def body(data: None, ctx: plait.StepContext) -> None:
        await _try("step empty", lambda: ctx.stream("").write(1))
        await _try("step value", lambda: ctx.stream("out").write(object()))

    @app.workflow
    async def flow(wf: plait.Workflow) -> None:
        await _try("wf number", lambda: wf.stream(7).write(1))  # type: ignore[arg-type]
        await _try("wf long", lambda: wf.stream("x" * 201).write(1))
        await _try("wf value", lambda: wf.stream("out").write(object()))
        await _try("wf large", lambda: wf.stream("out").write("y" * 2_000_000))
        await wf.do("body", body)

    async with engine_factory(app) as engine:
        run_id = await engine.start("flow")
        await engine.wait(run_id, timeout=20)
        with pytest.raises(ValueError, match="stream name"):
            await engine.read_stream(run_id, "")
        with pytest.raises(ValueError, match="after must be an offset"):
            await engine.read_stream(run_id, "out", after=-2)
        with pytest.raises(ValueError, match="limit must be an int from 1"):
            await engine.read_stream(run_id, "out", limit=0)
        with pytest.raises(plait.RunNotFoundError):
            await engine.read_stream("no-such-run", "out")
    assert errors["wf number"].startswith("TypeError: stream name must be a string")
    assert "invalid stream name" in errors["wf long"] and "200 characters" in errors["wf long"]
    assert errors["step empty"].startswith("ValueError: invalid stream name ''")
    for what in ("wf value", "step value"):
        assert errors[what].startswith(NotJSONError.__name__), errors[what]
        assert "stream 'out'" in errors[what]
    assert errors["wf large"].startswith(PayloadTooLargeError.__name__)
    assert "stream 'out'" in errors["wf large"]


async def test_current_workflow_and_current_step(engine_factory) -> None:
    app = plait.App()
    seen: dict[str, Any] = {}

    async def library_code() -> None:
        # a library that was handed neither wf nor ctx
        await plait.current_workflow().stream("lib").write("from the workflow")

    @app.function
    async def step(data: None, ctx: plait.StepContext) -> None:
        seen["step is ctx"] = plait.current_step() is ctx
        await plait.current_step().stream("lib").write("from the step")
        try:
            plait.current_workflow()
        except RuntimeError as exc:
            seen["workflow in step"] = str(exc)

    @app.workflow
    async def flow(wf: plait.Workflow) -> None:
        seen["wf"] = plait.current_workflow() is wf
        await library_code()
        await wf.do("step", step)
        try:
            plait.current_step()
        except RuntimeError as exc:
            seen["step in workflow"] = str(exc)

    with pytest.raises(RuntimeError, match="outside a workflow"):
        plait.current_workflow()
    with pytest.raises(RuntimeError, match="outside a step body"):
        plait.current_step()
    async with engine_factory(app) as engine:
        run_id = await engine.start("flow")
        await engine.wait(run_id, timeout=20)
        assert [e.value for e in await engine.read_stream(run_id, "lib")] == [
            "from the workflow",
            "from the step",
            None,
        ]
    assert seen["wf"] and seen["step is ctx"]
    assert "inside a step body" in seen["workflow in step"]
    assert "outside a step body" in seen["step in workflow"]


async def test_many_small_entries_share_commits(engine_factory) -> None:
    app = plait.App()

    @app.function
    async def chatty(n: int, ctx: plait.StepContext) -> int:
        stream = ctx.stream("tokens")
        for i in range(n):
            await stream.write(i)
            if i % 10 == 0:
                await asyncio.sleep(0)  # a model's tokens come between awaits
        return n

    @app.workflow
    async def flow(wf: plait.Workflow) -> int:
        return await wf.do("chatty", chatty, 1000)

    async with engine_factory(app) as engine:
        before = engine.store.commits  # type: ignore[attr-defined]
        run_id = await engine.start("flow")
        assert (await engine.wait(run_id, timeout=30)).output == 1000
        commits = engine.store.commits - before  # type: ignore[attr-defined]
        entries = await engine.read_stream(run_id, "tokens", limit=2000)
        assert [e.value for e in entries[:-1]] == list(range(1000))
        assert commits < 100, f"{commits} commits for 1000 entries"


def _cut_app() -> plait.App:
    """A step that writes an entry and waits to be cancelled, run by ``streaming`` itself
    and by ``child``, the child run of ``parent``."""
    app = plait.App()

    @app.function
    async def streamer(data: None, ctx: plait.StepContext) -> None:
        await ctx.stream("tokens").write("partial answer")
        await asyncio.sleep(60)  # cancelled here

    @app.workflow
    async def streaming(wf: plait.Workflow) -> None:
        await wf.do("s", streamer)

    @app.workflow
    async def child(wf: plait.Workflow) -> None:
        await wf.do("s", streamer)

    @app.workflow
    async def parent(wf: plait.Workflow) -> None:
        await wf.do("child", "child")

    return app


#: a cut attempt's entry, its reset, then the stream's end
_CUT = [("data", "partial answer", 1), ("reset", None, 1), ("end", None, None)]


async def test_a_cancel_resets_the_cut_attempt_before_the_stream_ends(engine_factory) -> None:
    """A cancel cuts the attempt short: its ``reset`` comes before the stream's ``end``,
    so a follower, which stops at the end, has been told to drop the cut attempt's text."""
    async with engine_factory(_cut_app()) as engine:
        run_id = await engine.start("streaming")
        follower = asyncio.create_task(_collect(engine.follow_stream(run_id, "tokens")))
        first = engine.follow_stream(run_id, "tokens")
        assert (await asyncio.wait_for(anext(first), 20)).value == "partial answer"
        await first.aclose()
        await engine.cancel(run_id, reason="user pressed stop")
        assert _shape(await engine.read_stream(run_id, "tokens")) == _CUT
        assert _shape(await asyncio.wait_for(follower, 20)) == _CUT
        settled = await engine.read_stream(run_id, "tokens", settled_only=True)
        assert _shape(settled) == [("end", None, None)]


async def test_a_cancel_resets_the_cut_attempts_of_its_child_runs_before_their_ends(
    engine_factory,
) -> None:
    async with engine_factory(_cut_app()) as engine:
        parent_id = await engine.start("parent")

        async def child_writing() -> str | None:
            children = await engine.list_runs(workflow="child")
            if children and await engine.read_stream(children[0].id, "tokens"):
                return children[0].id
            return None

        child_id = await eventually(child_writing, timeout=20, what="the child's entry")
        await engine.cancel(parent_id)
        assert (await engine.wait(child_id, timeout=20)).status == "cancelled"
        assert _shape(await engine.read_stream(child_id, "tokens")) == _CUT


async def test_a_settled_follower_gets_past_a_failed_attempt_that_wrote_more_than_a_read(
    engine_factory,
) -> None:
    """An attempt that wrote more entries than one read returns (``MAX_READ``) before it
    failed puts its reset past the largest page; a settled follower still finds it, skips
    the attempt and delivers the retry's entries and the end."""
    from plait.engine.streams import MAX_READ

    app = plait.App()
    n = MAX_READ + 50

    @app.function(retries=1, retry_delay=0)
    async def verbose(count: int, ctx: plait.StepContext) -> str:
        stream = ctx.stream("log")
        if ctx.attempt == 1:
            for i in range(count):
                await stream.write(i)
            raise RuntimeError("failed after writing a long answer")
        await stream.write("good")
        return "ok"

    @app.workflow
    async def chatty(wf: plait.Workflow, count: int) -> str:
        return await wf.do("verbose", verbose, count)

    async with engine_factory(app) as engine:
        run_id = await engine.start("chatty", n)
        assert (await engine.wait(run_id, timeout=120)).output == "ok"
        read = await engine.read_stream(run_id, "log", after=n - 1, settled_only=True)
        assert _shape(read) == [("data", "good", 2), ("end", None, None)]
        followed = await asyncio.wait_for(
            _collect(engine.follow_stream(run_id, "log", settled_only=True)), 30
        )
        assert _shape(followed) == [("data", "good", 2), ("end", None, None)]
        assert [e.offset for e in followed] == [n + 1, n + 2]


async def test_a_fork_keeps_the_stream_entries_its_kept_steps_wrote(engine_factory) -> None:
    """A fork replays the kept ``wf.stream`` writes from their record, so it never writes
    them again: the fork is given their entries when it is made, in the order they were
    reached; the writes from ``from_step`` on are made again when the fork gets there."""
    app = plait.App()

    @app.function
    def noop(data: int) -> int:
        return data

    @app.workflow
    async def logged(wf: plait.Workflow) -> str:
        await wf.stream("log").write("first")
        await wf.stream("other").write({"n": 1})
        await wf.do("one", noop, 1)
        await wf.stream("log").write("second")
        await wf.do("two", noop, 2)
        await wf.stream("log").write("third")
        return "done"

    async with engine_factory(app) as engine:
        source = await engine.start("logged")
        assert (await engine.wait(source, timeout=30)).output == "done"
        source_log = [e.value for e in await engine.read_stream(source, "log")]
        assert source_log == ["first", "second", "third", None]
        fork = await engine.fork(source, from_step="two")
        assert (await engine.wait(fork, timeout=30)).output == "done"
        assert _shape(await engine.read_stream(fork, "log")) == [
            ("data", "first", None),
            ("data", "second", None),
            ("data", "third", None),
            ("end", None, None),
        ]
        assert [e.value for e in await engine.read_stream(fork, "other")] == [{"n": 1}, None]
        early = await engine.fork(source, from_step="one")
        assert (await engine.wait(early, timeout=30)).output == "done"
        assert [e.value for e in await engine.read_stream(early, "log")] == source_log


async def test_entries_a_cancelled_attempt_writes_late_are_left_out(engine_factory) -> None:
    """The workflow cancels a step before its body wrote anything; the body ignores the
    cancel and writes afterwards. Entries that come once its attempt ended (cancelled,
    with nothing to reset then) are not taken in; no reset would ever follow them."""
    app = plait.App("late")
    wrote = asyncio.Event()

    @app.function
    async def stubborn(data: None, ctx: plait.StepContext) -> str:
        with contextlib.suppress(asyncio.CancelledError):  # the cancel, ignored
            await asyncio.sleep(30)
        for i in range(3):
            await ctx.stream("tokens").write(f"late {i}")
        sink = ctx._streams  # pyright: ignore[reportPrivateUsage]
        assert sink is not None
        await sink.flush(ctx.run_id)  # what the attempt's end would wait for
        wrote.set()
        return "late"

    @app.workflow
    async def w(wf: plait.Workflow, data: None) -> str:
        task = asyncio.ensure_future(wf.do("stubborn", stubborn))
        await wf.sleep("a bit", 0.2)
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
        await wf.stream("tokens").write("own")
        return await wf.wait_for_event("finish")

    async with engine_factory(app) as engine:
        run_id = await engine.start("w")
        await asyncio.wait_for(wrote.wait(), 20)

        async def cancelled() -> bool:
            (step,) = [s for s in await engine.get_steps(run_id) if s.key == "stubborn"]
            return step.error is not None and step.error["code"] == "CANCELLED"

        await eventually(cancelled, what="the step cancelled")
        await engine.send_event(run_id, "finish", "done")
        assert (await engine.wait(run_id, timeout=20)).output == "done"
        entries = await engine.read_stream(run_id, "tokens")
        settled = await engine.read_stream(run_id, "tokens", settled_only=True)
    assert [(e.kind, e.value) for e in settled] == [("data", "own"), ("end", None)]
    # written before the cancel was (a race the body may win): taken back by a reset after
    # them; written after it: left out
    late = [e.offset for e in entries if e.kind == "data" and e.attempt == 1]
    resets = [e.offset for e in entries if e.kind == "reset" and e.attempt == 1]
    assert not late or (resets and min(resets) > max(late)), _shape(entries)


@pytest.mark.parametrize("queued", [False, True], ids=["inline", "job"])
async def test_a_write_after_the_attempt_ended_is_refused_naming_the_stream(
    engine_factory, queued: bool
) -> None:
    """A task the body started writes after the body returned: the entry could belong to
    no attempt (readers drop those), so the write raises instead of returning as if it
    were kept (it was dropped without a word)."""
    app = plait.App()
    late: asyncio.Future[BaseException | None] = asyncio.get_running_loop().create_future()
    ended = asyncio.Event()

    @app.function(queued=queued)
    async def talk(data: None, ctx: plait.StepContext) -> str:
        tokens = ctx.stream("tokens")

        async def after() -> None:
            await ended.wait()
            try:
                await tokens.write("late")
            except RuntimeError as exc:
                late.set_result(exc)
            else:
                late.set_result(None)

        asyncio.get_running_loop().create_task(after())
        await tokens.write("in time")
        return "said"

    @app.workflow
    async def chat(wf: plait.Workflow) -> str:
        said = await wf.do("talk", talk)
        await wf.wait_for_event("go")
        return said

    async with engine_factory(app) as engine:
        run_id = await engine.start("chat")

        async def talked() -> bool:
            steps = {s.key: s.status for s in await engine.get_steps(run_id)}
            return steps.get("talk") == "succeeded"

        await eventually(talked, what="the step's end")
        ended.set()
        error = await asyncio.wait_for(late, 10)
        assert isinstance(error, RuntimeError), error
        assert "'tokens'" in str(error) and "'talk'" in str(error) and "ended" in str(error)
        await engine.send_event(run_id, "go")
        await engine.wait(run_id, timeout=10)
        entries = await engine.read_stream(run_id, "tokens")
    assert [(e.kind, e.value) for e in entries] == [("data", "in time"), ("end", None)]
