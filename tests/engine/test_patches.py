"""Deploys that insert code on a live run's path: ``wf.patched`` lets old runs keep to
the path they recorded, and a step inserted without one stops the run rather than run
out of order."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

import pytest

import plait
from support.counter import Counter
from support.polling import eventually

Body = Callable[[plait.Workflow, Counter], Awaitable[Any]]


def _app(counter: Counter, body: Body) -> plait.App:
    """An app whose workflow ``order`` is ``body``; each deploy is another app."""
    app = plait.App("orders")

    @app.workflow(name="order")
    async def order(wf: plait.Workflow, data: None) -> Any:
        return await body(wf, counter)

    return app


def _step(counter: Counter, name: str) -> Callable[[], str]:
    def run() -> str:
        counter.hit(name)
        return name

    return run


async def _v1(wf: plait.Workflow, c: Counter) -> list[Any]:
    a = await wf.do("reserve", _step(c, "reserve"))
    b = await wf.do("pack", _step(c, "pack"))
    go = await wf.wait_for_event("shipped")
    return [a, b, go]


async def _waiting_on_v1(engine_factory, counter: Counter) -> str:
    """A run of v1 that waits for its event, the engine closed (the deploy)."""
    async with engine_factory(_app(counter, _v1)) as engine:
        run_id = await engine.start("order")

        async def waiting() -> bool:
            return any(s.kind == "event" for s in await engine.get_steps(run_id))

        await eventually(waiting, what="the run waits for its event")
    return run_id


async def _finish(engine: plait.Engine, run_id: str) -> plait.Run:
    await engine.send_event(run_id, "shipped", "yes")
    return await engine.wait(run_id, timeout=10)


async def test_an_old_run_skips_a_patched_step_inserted_before_its_wait(engine_factory) -> None:
    counter = Counter()
    run_id = await _waiting_on_v1(engine_factory, counter)

    async def v2(wf: plait.Workflow, c: Counter) -> list[Any]:
        a = await wf.do("reserve", _step(c, "reserve"))
        b = await wf.do("pack", _step(c, "pack"))
        fee = None
        if wf.patched("fee"):
            fee = await wf.do("charge fee", _step(c, "fee"))
        go = await wf.wait_for_event("shipped")
        return [a, b, fee, go]

    async with engine_factory(_app(counter, v2)) as engine:
        old = await _finish(engine, run_id)
        assert old.status == "completed", old.error
        assert old.output == ["reserve", "pack", None, "yes"]
        assert counter["fee"] == 0 and counter["reserve"] == 1
        assert "patch" not in {s.kind for s in await engine.get_steps(run_id)}

        new_id = await engine.start("order")
        await eventually(
            lambda: _has_kind(engine, new_id, "event"), what="the new run waits for its event"
        )
        new = await _finish(engine, new_id)
        assert new.output == ["reserve", "pack", "fee", "yes"]
        assert counter["fee"] == 1
        markers = [s for s in await engine.get_steps(new_id) if s.kind == "patch"]
        assert [m.key for m in markers] == ["__patch:fee"]


async def _has_kind(engine: plait.Engine, run_id: str, kind: str) -> bool:
    return any(s.kind == kind for s in await engine.get_steps(run_id))


async def test_a_step_inserted_before_the_wait_without_a_patch_stops_the_old_run(
    engine_factory,
) -> None:
    counter = Counter()
    run_id = await _waiting_on_v1(engine_factory, counter)

    async def v2(wf: plait.Workflow, c: Counter) -> list[Any]:
        a = await wf.do("reserve", _step(c, "reserve"))
        b = await wf.do("pack", _step(c, "pack"))
        await wf.do("charge fee", _step(c, "fee"))
        go = await wf.wait_for_event("shipped")
        return [a, b, go]

    async with engine_factory(_app(counter, v2)) as engine:
        run = await _finish(engine, run_id)
        assert run.status == "failed"
        assert run.error["code"] == "VERSION_CONFLICT"
        message = run.error["message"]
        assert "'charge fee'" in message and "'__event:shipped'" in message
        assert "wf.patched" in message
        assert counter["fee"] == 0
        assert "charge fee" not in {s.key for s in await engine.get_steps(run_id)}


@pytest.mark.parametrize("patched", [False, True])
async def test_a_step_inserted_between_two_done_steps(engine_factory, patched: bool) -> None:
    counter = Counter()
    run_id = await _waiting_on_v1(engine_factory, counter)

    async def v2(wf: plait.Workflow, c: Counter) -> list[Any]:
        a = await wf.do("reserve", _step(c, "reserve"))
        if not patched or wf.patched("check stock"):
            await wf.do("check stock", _step(c, "stock"))
        b = await wf.do("pack", _step(c, "pack"))
        go = await wf.wait_for_event("shipped")
        return [a, b, go]

    async with engine_factory(_app(counter, v2)) as engine:
        run = await _finish(engine, run_id)
        assert counter["stock"] == 0 and counter["pack"] == 1
        if patched:
            assert run.status == "completed", run.error
            assert run.output == ["reserve", "pack", "yes"]
        else:
            assert run.status == "failed" and run.error["code"] == "VERSION_CONFLICT"
            assert "'check stock'" in run.error["message"]
            assert "'pack'" in run.error["message"]


async def test_new_steps_after_everything_recorded_need_no_patch(engine_factory) -> None:
    counter = Counter()
    run_id = await _waiting_on_v1(engine_factory, counter)

    async def v2(wf: plait.Workflow, c: Counter) -> list[Any]:
        out = await _v1(wf, c)
        receipt = await wf.do("receipt", _step(c, "receipt"))
        return [*out, receipt]

    async with engine_factory(_app(counter, v2)) as engine:
        run = await _finish(engine, run_id)
        assert run.status == "completed", run.error
        assert run.output == ["reserve", "pack", "yes", "receipt"]


async def test_deprecate_patch_replays_a_run_that_has_the_marker(engine_factory) -> None:
    counter = Counter()

    async def v2(wf: plait.Workflow, c: Counter) -> list[Any]:
        a = await wf.do("reserve", _step(c, "reserve"))
        fee = None
        if wf.patched("fee"):
            fee = await wf.do("charge fee", _step(c, "fee"))
        go = await wf.wait_for_event("shipped")
        return [a, fee, go]

    async with engine_factory(_app(counter, v2)) as engine:
        run_id = await engine.start("order")
        await eventually(
            lambda: _has_kind(engine, run_id, "event"), what="the run waits for its event"
        )

    async def v3(wf: plait.Workflow, c: Counter) -> list[Any]:
        a = await wf.do("reserve", _step(c, "reserve"))
        wf.deprecate_patch("fee")
        fee = await wf.do("charge fee", _step(c, "fee"))
        go = await wf.wait_for_event("shipped")
        return [a, fee, go]

    async with engine_factory(_app(counter, v3)) as engine:
        old = await _finish(engine, run_id)
        assert old.status == "completed", old.error
        assert old.output == ["reserve", "fee", "yes"]
        assert counter["fee"] == 1  # charged once, on v2
        new_id = await engine.start("order")
        await eventually(
            lambda: _has_kind(engine, new_id, "event"), what="the new run waits for its event"
        )
        assert not await _has_kind(engine, new_id, "patch")  # deprecate records none
        assert (await _finish(engine, new_id)).status == "completed"


async def test_a_patch_in_one_branch_of_a_gather_decides_for_that_branch(engine_factory) -> None:
    """The history of one branch may end while another's goes on: a patch at the end of
    the first is new ground there; one before the other's recorded wait is not."""
    counter = Counter()

    async def v1(wf: plait.Workflow, c: Counter) -> Any:
        async def left() -> str:
            return await wf.do("left", _step(c, "left"))

        async def right() -> Any:
            await wf.do("right", _step(c, "right"))
            return await wf.wait_for_event("shipped")

        return await asyncio.gather(left(), right())

    async with engine_factory(_app(counter, v1)) as engine:
        run_id = await engine.start("order")
        await eventually(
            lambda: _has_kind(engine, run_id, "event"), what="the run waits for its event"
        )

    async def v2(wf: plait.Workflow, c: Counter) -> Any:
        async def left() -> list[Any]:
            out = [await wf.do("left", _step(c, "left"))]
            if wf.patched("audit"):  # the left branch's history ends here
                out.append(await wf.do("audit", _step(c, "audit")))
            return out

        async def right() -> Any:
            await wf.do("right", _step(c, "right"))
            if wf.patched("notify"):  # the right branch recorded its wait after this
                await wf.do("notify", _step(c, "notify"))
            return await wf.wait_for_event("shipped")

        return await asyncio.gather(left(), right())

    async with engine_factory(_app(counter, v2)) as engine:
        run = await _finish(engine, run_id)
        assert run.status == "completed", run.error
        assert run.output == [["left", "audit"], "yes"]
        assert counter["audit"] == 1 and counter["notify"] == 0
        assert counter["left"] == 1 and counter["right"] == 1


async def test_a_patch_in_a_loop_decides_each_turn(engine_factory) -> None:
    """Each call of ``patched`` is its own decision: turns the old run recorded keep the
    old path, turns after its history take the new one."""
    counter = Counter()

    async def v1(wf: plait.Workflow, c: Counter) -> list[Any]:
        out = []
        for turn in range(3):
            out.append(await wf.do("turn", _step(c, f"turn{turn}")))
            if turn == 1:
                out.append(await wf.wait_for_event("shipped"))
        return out

    async with engine_factory(_app(counter, v1)) as engine:
        run_id = await engine.start("order")
        await eventually(
            lambda: _has_kind(engine, run_id, "event"), what="the run waits for its event"
        )

    async def v2(wf: plait.Workflow, c: Counter) -> list[Any]:
        out = []
        for turn in range(3):
            out.append(await wf.do("turn", _step(c, f"turn{turn}")))
            if wf.patched("double"):
                out.append(await wf.do("again", _step(c, f"again{turn}")))
            if turn == 1:
                out.append(await wf.wait_for_event("shipped"))
        return out

    async with engine_factory(_app(counter, v2)) as engine:
        run = await _finish(engine, run_id)
        assert run.status == "completed", run.error
        # turn 0 was recorded whole; turn 1's history goes on to its wait; turn 2 is new
        assert run.output == ["turn0", "turn1", "yes", "turn2", "again2"]
        markers = [s.key for s in await engine.get_steps(run_id) if s.kind == "patch"]
        assert markers == ["__patch:double#2"]


@pytest.mark.parametrize(("bad", "error"), [(3, TypeError), ("", ValueError), ("__x", ValueError)])
async def test_a_patch_id_must_be_a_plain_name(engine_factory, bad: Any, error: type) -> None:
    async def body(wf: plait.Workflow, c: Counter) -> str:
        try:
            wf.patched(bad)
        except error as exc:
            return f"refused: {exc}"
        return "accepted"

    async with engine_factory(_app(Counter(), body)) as engine:
        out = await engine.run("order", timeout=10)
        assert out.startswith("refused: patch name")


@pytest.mark.parametrize("patched", [False, True])
async def test_a_step_inserted_before_one_reached_through_a_replayed_sibling(
    engine_factory, patched: bool
) -> None:
    """``c`` was reached after ``b``, which a sibling task replays before the inserted
    step is reached: ``c`` still comes after the inserted step's point, so the step may
    not run there (it would run after ``c``, out of order)."""
    counter = Counter()

    def flow(inserted: bool) -> Body:
        async def body(wf: plait.Workflow, c: Counter) -> list[Any]:
            a = await wf.do("a", _step(c, "a"))

            async def sibling() -> str:
                return await wf.do("b", _step(c, "b"))

            task = asyncio.ensure_future(sibling())
            await asyncio.sleep(0)  # the sibling reaches "b" first
            x = None
            if inserted and (not patched or wf.patched("x")):
                x = await wf.do("x", _step(c, "x"))
            b = await task
            last = await wf.do("c", _step(c, "c"))
            go = await wf.wait_for_event("shipped")
            return [a, b, x, last, go]

        return body

    async with engine_factory(_app(counter, flow(False))) as engine:
        run_id = await engine.start("order")
        await eventually(
            lambda: _has_kind(engine, run_id, "event"), what="the run waits for its event"
        )
    async with engine_factory(_app(counter, flow(True))) as engine:
        (checked,) = await engine.check()
        assert checked.ok is patched, checked
        run = await _finish(engine, run_id)
        assert counter["x"] == 0
        if patched:
            assert run.status == "completed", run.error
            assert run.output == ["a", "b", None, "c", "yes"]
        else:
            assert run.status == "failed" and run.error["code"] == "VERSION_CONFLICT"
            assert "'x'" in run.error["message"] and "'c'" in run.error["message"]


@pytest.mark.parametrize("patched", [False, True])
async def test_a_step_inserted_in_a_branch_of_a_gather_wider_than_the_record_keeps(
    engine_factory, patched: bool
) -> None:
    """A step keeps only the last few dozen outcomes it came after: the step after a
    gather of 40 does not name the first branches' steps. A step inserted after one of
    those, in a run whose history went past the gather, still comes before recorded
    history: a conflict without a patch, ``patched`` False with one; it never runs."""
    counter = Counter()
    width = 40

    def fan(insert: bool) -> Body:
        async def body(wf: plait.Workflow, c: Counter) -> Any:
            async def branch(i: int) -> str:
                out = await wf.do(f"s{i}", _step(c, f"s{i}"))
                if insert and i == 0 and (not patched or wf.patched("enrich")):
                    await wf.do("enrich", _step(c, "enrich"))
                return out

            await asyncio.gather(*(branch(i) for i in range(width)))
            await wf.do("after", _step(c, "after"))
            return await wf.wait_for_event("shipped")

        return body

    async with engine_factory(_app(counter, fan(False))) as engine:
        run_id = await engine.start("order")
        await eventually(
            lambda: _has_kind(engine, run_id, "event"), what="the run waits for its event"
        )
    async with engine_factory(_app(counter, fan(True)), workers=False) as checker:
        (result,) = await checker.check()
        assert result.ok is patched, result
    async with engine_factory(_app(counter, fan(True))) as engine:
        run = await _finish(engine, run_id)
    if patched:
        assert run.status == "completed" and run.output == "yes", run.error
    else:
        assert run.status == "failed" and run.error is not None
        assert run.error["code"] == "VERSION_CONFLICT" and "'enrich'" in run.error["message"]
    assert counter["enrich"] == 0
