"""``engine.check``: live runs started on v1 replayed dry on v2 name the first step where
v2 diverges, and nothing is run or written while they are."""

from __future__ import annotations

import contextvars
import dataclasses
import inspect
import logging
from typing import Any

import pydantic
import pytest

import plait
from support.check_cases import CASES, shop_app, start_v1, waiting
from support.counter import Counter
from support.polling import eventually


async def test_check_names_the_first_diverging_step_of_each_run(engine_factory) -> None:
    counter = Counter()
    runs = await start_v1(engine_factory, counter, CASES)
    ran = dict(counter.counts)
    async with engine_factory(shop_app(counter, "2", CASES), workers=False) as engine:
        results = await engine.check()
    assert counter.counts == ran  # no step body ran
    by_run = {r.run_id: r for r in results}
    assert set(by_run) == set(runs.values())
    assert [r.run_id for r in results] == sorted(by_run)
    for case in CASES:
        result = by_run[runs[case.name]]
        assert result.workflow == case.name
        assert result.ok is (case.step is None), (case.name, result)
        assert (result.step, result.step_name) == (case.step, case.step_name), case.name
        if case.step is None:
            assert result.reason is None
        for words in case.reason:
            assert result.reason is not None and words in result.reason, (case.name, result)


async def test_unchanged_code_checks_every_run_ok(engine_factory) -> None:
    counter = Counter()
    cases = [c for c in CASES if c.step is None] + [
        dataclasses.replace(c, v2=c.v1, step=None) for c in CASES if c.step is not None
    ]
    runs = await start_v1(engine_factory, counter, cases)
    async with engine_factory(shop_app(counter, "2", cases), workers=False) as engine:
        results = await engine.check()
    assert sorted(r.run_id for r in results) == sorted(runs.values())
    assert all(r.ok and r.step is None and r.reason is None for r in results), results


async def test_workflow_limits_the_check_and_an_unknown_one_is_named(engine_factory) -> None:
    counter = Counter()
    runs = await start_v1(engine_factory, counter, CASES[:2])
    async with engine_factory(shop_app(counter, "2", CASES), workers=False) as engine:
        results = await engine.check(workflow="changed_input")
        assert [(r.run_id, r.ok) for r in results] == [(runs["changed_input"], False)]
        with pytest.raises(plait.WorkflowNotFoundError, match=r"'nope'.*changed_input"):
            await engine.check(workflow="nope")
        for bad in (-1, True, "2"):
            with pytest.raises(ValueError, match="include_ended"):
                await engine.check(include_ended=bad)  # type: ignore[arg-type]


async def test_a_run_of_a_workflow_the_app_lacks_is_not_ok(engine_factory) -> None:
    counter = Counter()
    runs = await start_v1(engine_factory, counter, CASES[:2])
    app = shop_app(counter, "2", CASES[1:2])  # "unchanged" is gone
    async with engine_factory(app, workers=False) as engine:
        results = {r.run_id: r for r in await engine.check()}
    gone = results[runs["unchanged"]]
    assert not gone.ok and gone.step is None
    assert gone.reason is not None and "'unchanged' is not registered" in gone.reason


async def test_a_run_another_app_works_on_a_shared_database_is_not_checked(
    engine_factory,
) -> None:
    """Two apps share a database: a run of a workflow only the other app's workers
    register is that app's to check, not a run this app lost; a workflow this app's own
    workers registered and its new code lacks is still named."""
    counter = Counter()
    runs = await start_v1(engine_factory, counter, CASES[:2])
    billing = plait.App("billing")

    @billing.workflow
    async def invoice(wf: plait.Workflow, data: None) -> str:
        await wf.wait_for_event("paid")
        return "sent"

    app = shop_app(counter, "2", CASES[1:2])  # "unchanged" is gone from shop's new code
    async with engine_factory(billing) as other, engine_factory(shop_app(counter, "1", CASES[:2])):
        invoice_id = await other.start("invoice", None)
        await eventually(lambda: waiting(other, invoice_id))
        async with engine_factory(app, workers=False) as engine:
            workers = {w.app for w in await engine.list_workers() if w.live}
            assert workers == {"billing", "shop"}
            results = {r.run_id: r for r in await engine.check()}
            assert invoice_id not in results
            gone = results[runs["unchanged"]]
            assert not gone.ok and "'unchanged' is not registered" in (gone.reason or "")
            with pytest.raises(plait.WorkflowNotFoundError, match="'invoice'"):
                await engine.check(workflow="invoice")
        await other.send_event(invoice_id, "paid")
        assert (await other.wait(invoice_id, timeout=10)).output == "sent"


async def test_include_ended_replays_the_last_ended_runs_of_each_workflow(engine_factory) -> None:
    counter = Counter()
    app = shop_app(counter, "1", CASES[1:2])
    async with engine_factory(app) as engine:
        ended = []
        for _ in range(3):
            run_id = await engine.start("changed_input")
            await eventually(lambda r=run_id: waiting(engine, r))
            await engine.send_event(run_id, "paid", {"n": len(ended)})
            assert (await engine.wait(run_id, timeout=10)).status == "completed"
            ended.append(run_id)
    async with engine_factory(shop_app(counter, "2", CASES[1:2]), workers=False) as engine:
        assert await engine.check() == []
        results = await engine.check(include_ended=2)
    assert [r.run_id for r in results] == ended[:0:-1]  # the last two, newest first
    assert all(not r.ok and r.step == "reserve" for r in results)


async def test_an_error_of_the_workflow_code_after_its_recorded_steps_is_no_divergence(
    engine_factory,
) -> None:
    """A run whose step failed for good and whose code raises it again ends the same on
    either version; v2 raising before a recorded step is that step's removal."""
    app = plait.App("shop")

    def boom(data: None) -> None:
        raise ValueError("declined")

    @app.workflow(name="pay", version="1")
    async def pay_v1(wf: plait.Workflow, data: None) -> None:
        await wf.do("charge", boom, retries=0)

    async with engine_factory(app) as engine:
        run_id = await engine.start("pay")
        assert (await engine.wait(run_id, timeout=10)).status == "failed"

    fine, broken = plait.App("shop"), plait.App("shop")

    @fine.workflow(name="pay", version="2")
    async def pay_v2(wf: plait.Workflow, data: None) -> None:
        await wf.do("charge", boom, retries=0)

    @broken.workflow(name="pay", version="3")
    async def pay_v3(wf: plait.Workflow, data: None) -> None:
        raise RuntimeError("a bug at the top")

    async with engine_factory(fine, workers=False) as engine:
        (result,) = await engine.check(include_ended=1)
        assert result.ok, result
    async with engine_factory(broken, workers=False) as engine:
        (result,) = await engine.check(include_ended=1)
    assert not result.ok and result.step == "charge"
    assert result.reason is not None and "fails before reaching it (a bug at the top)" in (
        result.reason
    )


async def _rows(engine: plait.Engine, run_ids: list[str]) -> Any:
    """Every stored column of the runs and of their steps, events and leases."""
    return {
        run_id: (
            await engine.store.load_pass(run_id),
            await engine.get_history(run_id),
        )
        for run_id in run_ids
    }


async def test_check_writes_nothing_while_a_worker_runs_other_runs(engine_factory) -> None:
    """The checked runs' rows do not move (no lease, no step, no event taken) while a
    worker on the same engine completes runs of its own, which check also replays."""
    counter = Counter()
    runs = await start_v1(engine_factory, counter, CASES)
    app = shop_app(counter, "2", CASES)

    @app.workflow(name="busy")
    async def busy(wf: plait.Workflow, n: int) -> int:
        total = await wf.do("first", lambda x: x, n)
        await wf.wait_for_event("go")
        for i in range(5):
            total += await wf.do(f"add {i}", lambda x: x + 1, i)
        return total

    async with engine_factory(app) as engine:
        before = await _rows(engine, list(runs.values()))
        ran = dict(counter.counts)
        busy_ids = [await engine.start("busy", n) for n in range(20)]
        for run_id in busy_ids:
            await eventually(lambda r=run_id: waiting(engine, r))
        checks = [await engine.check()]
        for run_id in busy_ids:
            await engine.send_event(run_id, "go")

        async def checked_until_done() -> bool:
            checks.append(await engine.check())
            statuses = [(await engine.get_run(r)).status for r in busy_ids]
            return all(status == "completed" for status in statuses)

        await eventually(checked_until_done, timeout=30, what="the busy runs to complete")
        for run_id in busy_ids:
            run = await engine.wait(run_id, timeout=10)
            assert run.status == "completed" and run.output == busy_ids.index(run_id) + 15
        after = await _rows(engine, list(runs.values()))
    assert after == before
    assert counter.counts == ran
    diverging = {r.run_id for r in checks[0] if not r.ok}
    assert diverging == {runs[c.name] for c in CASES if c.step is not None}
    assert sorted(r.run_id for r in checks[0] if r.workflow == "busy") == sorted(busy_ids)
    assert all(r.ok for results in checks for r in results if r.workflow == "busy")


async def test_check_only_reads_the_store(engine_factory, monkeypatch) -> None:
    """Every call check makes to the store is one of its plain reads: no claim, no lease,
    no commit, not even a release. (The engine's own loops are not counted: only calls
    made in the context of the check.)"""
    counter = Counter()
    await start_v1(engine_factory, counter, CASES)
    async with engine_factory(shop_app(counter, "2", CASES), workers=False) as engine:
        called: list[str] = []
        store, checking = engine.store, contextvars.ContextVar("checking", default=False)
        for name in dir(type(store)):
            method = getattr(store, name)
            if name.startswith("__") or not inspect.iscoroutinefunction(method):
                continue

            async def counted(*args: Any, _name: str = name, _m: Any = method, **kw: Any) -> Any:
                if checking.get():
                    called.append(_name)
                return await _m(*args, **kw)

            monkeypatch.setattr(store, name, counted)
        checking.set(True)
        results = await engine.check(include_ended=3)
        checking.set(False)
        monkeypatch.undo()
    assert len(results) == len(CASES)
    assert "list_passes" in called and "list_runs" in called
    assert set(called) <= {"list_passes", "list_runs", "load_pass", "list_workers"}, called


def logging_app() -> plait.App:
    app = plait.App("logs")

    @app.workflow(name="w")
    async def w(wf: plait.Workflow) -> Any:
        wf.logger.warning("order received")
        got = await wf.wait_for_event("go")
        wf.logger.warning("paid: %s", got)
        return got

    return app


@pytest.mark.parametrize("sent", [False, True])
async def test_check_logs_nothing_for_the_runs_it_replays(
    engine_factory: Any, caplog: pytest.LogCaptureFixture, sent: bool
) -> None:
    """Neither the lines before the run's first outcome nor those after an outcome the
    run has not taken yet (the event sent before the check)."""
    async with engine_factory(logging_app()) as engine:
        run_id = await engine.start("w")

        async def waits() -> bool:
            return any(s.kind == "event" for s in await engine.get_steps(run_id))

        await eventually(waits)
    async with engine_factory(logging_app(), workers=False) as engine:
        if sent:
            await engine.send_event(run_id, "go", "card")
        caplog.clear()
        with caplog.at_level(logging.INFO, logger="plait.workflow.w"):
            (res,) = await engine.check()
        assert res.ok
        lines = [r.getMessage() for r in caplog.records if r.name == "plait.workflow.w"]
        # each line is logged once per run: a check is no pass of the run at all
        assert lines == [], lines


def reads_app(version: int) -> plait.App:
    app = plait.App("reads")

    @app.workflow(name="w")
    async def w(wf: plait.Workflow, wait: bool) -> Any:
        user = await wf.do("get", lambda: {"name": "ann"})
        if wait:
            await wf.wait_for_event("go")
        # version 2 reads a field the recorded result does not have: KeyError
        return user["name"] if version == 1 else user["email"]

    return app


async def test_check_flags_runs_the_new_code_fails_after_their_recorded_steps(
    engine_factory: Any,
) -> None:
    """No recorded step is missed, but on the recorded outcomes alone the new code raises:
    a completed run that would now fail (``include_ended``, a regression check), and a
    live run the deploy would fail at its next pass."""
    async with engine_factory(reads_app(1)) as engine:
        assert await engine.run("w", False, timeout=10) == "ann"
        live = await engine.start("w", True)

        async def waits() -> bool:
            return any(s.kind == "event" for s in await engine.get_steps(live))

        await eventually(waits)
        await engine.pause_workflow("w")  # nothing moves while the check runs
        await engine.send_event(live, "go")
    async with engine_factory(reads_app(2), workers=False) as engine:
        results = await engine.check(include_ended=1)
        assert len(results) == 2 and not any(r.ok for r in results), results
        for result in results:
            assert result.reason is not None and "now fails the run" in result.reason
            assert "email" in result.reason
    async with engine_factory(reads_app(1), workers=False) as engine:
        assert all(r.ok for r in await engine.check(include_ended=1))


class UserV1(pydantic.BaseModel):
    name: str


class UserV2(pydantic.BaseModel):
    name: str
    email: str


def typed_app(version: int) -> plait.App:
    app = plait.App("typed")
    if version == 1:

        @app.function(name="get_user")
        def get_user(data: Any) -> UserV1:
            return UserV1(name="ann")

    else:

        @app.function(name="get_user")
        def get_user_v2(data: Any) -> UserV2:
            return UserV2(name="ann", email="ann@example.com")

    @app.workflow(name="w")
    async def w(wf: plait.Workflow) -> Any:
        user = await wf.do("get", "get_user")
        await wf.wait_for_event("go")
        return user.name

    return app


async def test_check_names_the_step_whose_recorded_result_no_longer_decodes(
    engine_factory: Any,
) -> None:
    async with engine_factory(typed_app(1)) as engine:
        run_id = await engine.start("w")

        async def waits() -> bool:
            return any(s.kind == "event" for s in await engine.get_steps(run_id))

        await eventually(waits)
    async with engine_factory(typed_app(2), workers=False) as engine:
        (result,) = await engine.check()
    assert not result.ok and result.step == "get", result
    assert result.reason is not None and "no longer decodes" in result.reason


async def test_check_leaves_alone_a_cancelled_run_its_code_fails_on_replay(
    engine_factory: Any,
) -> None:
    """A cancel cuts the run's steps in flight; replayed, the code meets the cut and fails,
    as the run did end: that is no regression of the new code."""
    async with engine_factory(reads_app(1)) as engine:
        run_id = await engine.start("w", True)

        async def waits() -> bool:
            return any(s.kind == "event" for s in await engine.get_steps(run_id))

        await eventually(waits)
        await engine.cancel(run_id)
        assert (await engine.wait(run_id, timeout=10)).status == "cancelled"
    async with engine_factory(reads_app(1), workers=False) as engine:
        results = await engine.check(include_ended=1)
        assert [r.ok for r in results] == [True], results
