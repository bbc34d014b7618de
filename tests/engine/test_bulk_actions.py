"""Bulk cancel, retry and resume on both stores: each matched run acted on once, runs in
another state skipped and not counted, live runs going on meanwhile."""

from __future__ import annotations

import asyncio
import time
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

import plait
from plait.engine import bulk
from support.polling import eventually

app = plait.App("bulk-tests")
#: the bodies of ``shaky`` that ran, by run id
BODIES: dict[str, int] = {}
#: set by a test: ``shaky`` fails while this is True
BROKEN = {"now": True}


@app.function(retries=0)
def shaky(data: str) -> str:
    BODIES[data] = BODIES.get(data, 0) + 1
    if BROKEN["now"]:
        raise RuntimeError("partner API down")
    return data


@app.workflow
async def sync(wf: plait.Workflow, data: str) -> str:
    return str(await wf.do("call", shaky, data))


@app.workflow
async def ticker(wf: plait.Workflow, data: int) -> int:
    for n in range(data):
        await wf.do(f"tick{n}", lambda x: x, n)
    return data


@app.workflow
async def waiter(wf: plait.Workflow, data: Any) -> str:
    await wf.suspend("hold")
    return "resumed"


@app.workflow
async def parent(wf: plait.Workflow, data: str) -> str:
    return str(await wf.do("child", "sync", data))


@app.workflow
async def fan(wf: plait.Workflow, data: int) -> list[Any]:
    try:
        return list(await asyncio.gather(*(wf.do(f"c{n}", "waiter", n) for n in range(data))))
    except plait.StepError:
        # what a parent does when a child did not complete: compensate
        await wf.do("compensate", lambda _: BODIES.update(compensate=1), None)
        raise


@app.function(retries=0, on_exhausted="park")
def parked_call(data: str) -> str:
    if BROKEN["now"]:
        raise RuntimeError("partner API down")
    return data


@app.workflow
async def parked_kid(wf: plait.Workflow, data: str) -> str:
    return str(await wf.do("k", parked_call, data))


@app.workflow
async def parked_mom(wf: plait.Workflow, data: str) -> list[str]:
    kid = wf.do("child", "parked_kid", f"{data}-kid")
    return list(await asyncio.gather(kid, wf.do("m", parked_call, data)))


@app.workflow
async def held_mom(wf: plait.Workflow, data: Any) -> list[Any]:
    return list(await asyncio.gather(wf.do("child", "waiter", 1), wf.suspend("mom-hold")))


async def _failed_runs(engine: plait.Engine, count: int, tags: dict[str, str]) -> list[str]:
    ids = [
        await engine.start(sync, f"r{n}-{tags.get('batch', '')}", tags=tags) for n in range(count)
    ]
    for run_id in ids:
        assert (await engine.wait(run_id, timeout=30)).status == "failed"
    return ids


async def test_bulk_retry_retries_each_matched_run_once_while_live_runs_go_on(
    engine_factory: Any,
) -> None:
    BODIES.clear()
    BROKEN["now"] = True
    async with engine_factory(app) as engine:
        failed = await _failed_runs(engine, 30, {"batch": "a"})
        other = await _failed_runs(engine, 3, {"batch": "b"})
        BROKEN["now"] = False
        live = [await engine.start(ticker, 40) for _ in range(5)]
        ticks_before = sum([len(await engine.get_steps(r)) for r in live])
        acted = await engine.retry_runs(tags={"batch": "a"})
        assert acted == 30
        for run_id in failed:
            assert (await engine.wait(run_id, timeout=30)).status == "completed"
        # each matched run's body ran once more: once failed, once retried
        assert all([BODIES[(await engine.get_run(r)).input] == 2 for r in failed])
        # the runs of another tag were not touched
        assert all([(await engine.get_run(r)).status == "failed" for r in other])
        for run_id in live:
            assert (await engine.wait(run_id, timeout=30)).output == 40
        assert sum([len(await engine.get_steps(r)) for r in live]) > ticks_before
        # a second retry finds nothing left to retry: completed runs are not counted
        assert await engine.retry_runs(tags={"batch": "a"}) == 0


async def test_bulk_cancel_counts_only_live_runs_and_resume_only_suspended(
    engine_factory: Any,
) -> None:
    BROKEN["now"] = True
    async with engine_factory(app) as engine:
        waiting = [await engine.start(waiter, None, tags={"team": "x"}) for _ in range(4)]
        for run_id in waiting:
            assert (await engine.wait(run_id, timeout=30)).status == "suspended"
        failed = await _failed_runs(engine, 2, {"team": "x"})
        assert await engine.resume_runs(tags={"team": "x"}, status="failed") == 0
        assert await engine.resume_runs(tags={"team": "x"}) == 4
        for run_id in waiting:
            assert (await engine.wait(run_id, timeout=30)).output == "resumed"
        again = [await engine.start(waiter, None, tags={"team": "x"}) for _ in range(3)]
        for run_id in again:
            await engine.wait(run_id, timeout=30)
        assert len(await engine.match_runs("cancel", tags={"team": "x"})) == 3
        assert await engine.cancel_runs(tags={"team": "x"}, reason="stop") == 3
        assert all([(await engine.get_run(r)).status == "cancelled" for r in again])
        assert all([(await engine.get_run(r)).status == "failed" for r in failed])


async def test_bulk_retry_of_a_parent_and_its_child_runs_the_child_s_work_once(
    engine_factory: Any,
) -> None:
    """A parent failed because its child failed: both match. The parent's retry starts a
    new child, so the matched child is not retried as well (its work would run twice,
    its result going to no one)."""
    BODIES.clear()
    BROKEN["now"] = True
    async with engine_factory(app) as engine:
        run_id = await engine.start(parent, "tree-1", tags={"batch": "tree"})
        assert (await engine.wait(run_id, timeout=30)).status == "failed"
        (child,) = [s.child_run_id for s in await engine.get_steps(run_id) if s.key == "child"]
        assert child is not None and (await engine.get_run(child)).status == "failed"
        assert len(await engine.match_runs("retry", tags={"batch": "tree"})) == 2
        BROKEN["now"] = False
        assert await engine.retry_runs(tags={"batch": "tree"}) == 1
        assert (await engine.get_run(child)).status == "failed"  # the old child stays
        assert (await engine.wait(run_id, timeout=30)).output == "tree-1"
        assert BODIES["tree-1"] == 2  # once failed, once in the new child
        assert (await engine.get_run(child)).status == "failed"


async def test_bulk_retry_of_a_parked_parent_retries_the_parked_child_it_waits_for(
    engine_factory: Any,
) -> None:
    """Parent and child both parked: the parent's retry gives its own step a new budget,
    and still waits for the child, so the child is retried too (left to the parent, it
    would stay parked and the parent would wait for ever)."""
    BROKEN["now"] = True
    async with engine_factory(app) as engine:
        run_id = await engine.start(parked_mom, "nest", tags={"batch": "parked"})

        async def both_parked() -> bool:
            found = await engine.list_runs(tags={"batch": "parked"}, limit=10)
            return len(found) == 2 and {r.status for r in found} == {"needs_attention"}

        await eventually(both_parked, timeout=20, what="parent and child parked")
        BROKEN["now"] = False
        assert await engine.retry_runs(tags={"batch": "parked"}) == 2
        run = await engine.wait(run_id, timeout=30)
        assert run.status == "completed" and run.output == ["nest-kid", "nest"], run.error


async def test_bulk_resume_resumes_a_suspended_child_of_a_suspended_parent(
    engine_factory: Any,
) -> None:
    """A resume of the parent does not reach its child: each suspended run is resumed."""
    async with engine_factory(app) as engine:
        run_id = await engine.start(held_mom, None, tags={"batch": "held"})

        async def both_suspended() -> bool:
            found = await engine.list_runs(tags={"batch": "held"}, limit=10)
            return len(found) == 2 and {r.status for r in found} == {"suspended"}

        await eventually(both_suspended, timeout=20, what="parent and child suspended")
        assert await engine.resume_runs(tags={"batch": "held"}) == 2
        run = await engine.wait(run_id, timeout=30)
        assert run.status == "completed" and run.output == ["resumed", None], run.error


async def test_bulk_retry_leaves_alone_a_child_its_parent_no_longer_waits_for(
    engine_factory: Any,
) -> None:
    """A parent retried by hand gave its child step a new child; the first child stays
    ``failed`` and matches, but nothing waits for it: a bulk retry acts on the parent
    only, and the first child's work does not run again."""
    BODIES.clear()
    BROKEN["now"] = True
    async with engine_factory(app) as engine:
        run_id = await engine.start(parent, "stale", tags={"batch": "stale"})
        assert (await engine.wait(run_id, timeout=30)).status == "failed"
        (first,) = [s.child_run_id for s in await engine.get_steps(run_id) if s.key == "child"]
        await engine.retry(run_id)  # a new child, which fails too
        assert (await engine.wait(run_id, timeout=30)).status == "failed"
        (second,) = [s.child_run_id for s in await engine.get_steps(run_id) if s.key == "child"]
        assert first is not None and second not in (None, first)
        BROKEN["now"] = False
        assert await engine.retry_runs(tags={"batch": "stale"}) == 1
        assert (await engine.wait(run_id, timeout=30)).output == "stale"
        assert BODIES["stale"] == 3  # two failed children, then the third one's success
        assert (await engine.get_run(first)).status == "failed"


async def test_bulk_cancel_of_a_tree_cancels_the_parent_rather_than_failing_it(
    engine_factory: Any,
) -> None:
    """Children inherit their parent's tags, so a tag matches a parent and its children.
    The parent is cancelled with its children; cancelled one by one first, each child
    would fail the parent's step and the parent would compensate and end ``failed``."""
    BODIES.clear()
    async with engine_factory(app) as engine:
        run_id = await engine.start(fan, 4, tags={"batch": "fan"})

        async def all_waiting() -> bool:
            found = await engine.list_runs(tags={"batch": "fan"}, limit=100)
            kids = [r for r in found if r.id != run_id]
            return len(kids) == 4 and all(r.status == "suspended" for r in kids)

        await eventually(all_waiting, timeout=20, what="the 4 children suspended")
        assert await engine.cancel_runs(tags={"batch": "fan"}) == 5
        run = await engine.wait(run_id, timeout=30)
        assert run.status == "cancelled", run.error
        found = await engine.list_runs(tags={"batch": "fan"}, limit=100)
        assert {r.status for r in found} == {"cancelled"}
        assert "compensate" not in BODIES


async def test_bulk_filters_are_checked(engine_factory: Any) -> None:
    async with engine_factory(app) as engine:
        with pytest.raises(ValueError, match="'Bad'"):
            await engine.cancel_runs(tags={"Bad": "x"})
        with pytest.raises(ValueError, match="invalid status filter: 'nope'"):
            await engine.retry_runs(status="nope")  # type: ignore[arg-type]
        with pytest.raises(ValueError, match="unknown filter 'colour'"):
            await engine.act_on_runs("cancel", colour="red")
        with pytest.raises(ValueError, match="invalid action 'drop'"):
            await engine.act_on_runs("drop")  # type: ignore[arg-type]


@pytest.mark.parametrize("name", ["workflow", "queue", "owner", "version"])
async def test_an_empty_name_filter_is_refused_not_matched_against_nothing(
    engine_factory: Any, name: str
) -> None:
    """No run has an empty workflow, queue, owner or version: ``cancel_runs(queue="")``
    (meant as the default queue, say) would quietly do nothing, and ``list_runs`` would
    say there are no runs. Both name the filter instead."""
    async with engine_factory(app) as engine:
        with pytest.raises(ValueError, match=f"invalid {name} filter: ''"):
            await engine.cancel_runs(**{name: ""})
        with pytest.raises(ValueError, match=f"invalid {name} filter: ''"):
            await engine.list_runs(**{name: ""})


async def test_batches_yield_between_them(
    engine_factory: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    BROKEN["now"] = True
    monkeypatch.setattr(bulk, "BATCH", 4)
    async with engine_factory(app) as engine:
        await _failed_runs(engine, 10, {"batch": "y"})
        BROKEN["now"] = False
        seen: list[tuple[int, int]] = []
        acted = await engine.retry_runs(
            tags={"batch": "y"}, progress=lambda done, total: seen.append((done, total))
        )
        assert acted == 10
        assert seen == [(4, 10), (8, 10), (10, 10)]
        await asyncio.sleep(0)


async def test_a_bulk_action_is_paced_to_its_rate(
    engine_factory: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Batches go out at ``rate`` runs a second: the 4th batch of 5 at 50 runs a second
    starts no sooner than 0.3 s after the first, and ``rate=None`` does not wait."""
    monkeypatch.setattr(bulk, "BATCH", 5)
    async with engine_factory(app) as engine:
        waiting = [await engine.start(waiter, None, tags={"pace": "p"}) for _ in range(20)]
        for run_id in waiting:
            assert (await engine.wait(run_id, timeout=30)).status == "suspended"
        began = time.monotonic()
        when: list[float] = []
        acted = await engine.cancel_runs(
            tags={"pace": "p"}, rate=50, progress=lambda _d, _t: when.append(time.monotonic())
        )
        assert acted == 20
        # the 4th batch began at least 15 runs / 50 per second after the first
        assert when[-1] - began >= 15 / 50
        again = [await engine.start(waiter, None, tags={"pace": "q"}) for _ in range(20)]
        for run_id in again:
            await engine.wait(run_id, timeout=30)
        turns: list[float] = []

        async def spy(at: float) -> None:
            turns.append(at)

        monkeypatch.setattr(bulk, "wait_for_turn", spy)
        assert await engine.cancel_runs(tags={"pace": "q"}, rate=None) == 20
        assert turns == []


@pytest.mark.parametrize("rate", [0, -1, float("nan"), float("inf"), True, "fast"])
async def test_a_bad_rate_is_refused_naming_it_before_anything_is_done(
    engine_factory: Any, rate: Any
) -> None:
    async with engine_factory(app) as engine:
        run_id = await engine.start(waiter, None, tags={"rate": "bad"})
        assert (await engine.wait(run_id, timeout=30)).status == "suspended"
        with pytest.raises(ValueError, match="invalid rate"):
            await engine.cancel_runs(tags={"rate": "bad"}, rate=rate)
        with pytest.raises(ValueError, match="invalid rate"):
            await engine.act_on_runs("cancel", tags={"rate": "bad"}, rate=rate)
        assert (await engine.get_run(run_id)).status == "suspended"


async def test_act_on_runs_takes_a_cancel_reason(engine_factory: Any) -> None:
    async with engine_factory(app) as engine:
        run_id = await engine.start(waiter, None, tags={"why": "r"})
        await engine.wait(run_id, timeout=30)
        assert await engine.act_on_runs("cancel", tags={"why": "r"}, reason="partner down") == 1
        run = await engine.get_run(run_id)
        assert run.status == "cancelled" and "partner down" in str(run.error)


@pytest.mark.parametrize(
    ("options", "named"),
    [
        ({"progress": "not a function"}, "progress"),
        ({"reason": 5}, "reason"),
        ({"reason": {"a": 1}}, "reason"),
        ({"since": datetime(2020, 1, 1)}, "since"),
        ({"until": datetime(2099, 1, 1)}, "until"),
        ({"since": "2020-01-01"}, "since"),
    ],
)
async def test_bad_bulk_options_are_refused_naming_them_before_any_run_changes(
    engine_factory: Any, options: dict[str, Any], named: str
) -> None:
    """A progress that is not callable, a reason that is not text, a time with no zone
    (which UTC would read hours off west of it): refused by name, no run touched."""
    async with engine_factory(app) as engine:
        ids = [await engine.start(waiter, None, tags={"opts": "bad"}) for _ in range(3)]
        for run_id in ids:
            assert (await engine.wait(run_id, timeout=30)).status == "suspended"
        with pytest.raises((TypeError, ValueError), match=named):
            await engine.cancel_runs(tags={"opts": "bad"}, rate=None, **options)
        with pytest.raises((TypeError, ValueError), match=named):
            await engine.act_on_runs("cancel", tags={"opts": "bad"}, rate=None, **options)
        assert {(await engine.get_run(r)).status for r in ids} == {"suspended"}
        cut = datetime.now(UTC) + timedelta(hours=1)
        assert await engine.match_runs("cancel", tags={"opts": "bad"}, until=cut) != []


async def test_a_cancel_reason_must_be_text(engine_factory: Any) -> None:
    async with engine_factory(app) as engine:
        run_id = await engine.start(waiter, None)
        assert (await engine.wait(run_id, timeout=30)).status == "suspended"
        for bad in (5, {"a": 1}, ["x"], b"bytes"):
            with pytest.raises(TypeError, match="reason"):
                await engine.cancel(run_id, reason=bad)  # type: ignore[arg-type]
        assert (await engine.get_run(run_id)).status == "suspended"
        await engine.cancel(run_id, reason="partner down")
        run = await engine.get_run(run_id)
        assert run.status == "cancelled" and run.error is not None
        assert run.error["message"] == "partner down"
