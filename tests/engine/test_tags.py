"""Run tags on both stores: given at the start, by the workflow's defaults and by
``wf.set_tags``; inherited by child runs, successors and forks; found by
``list_runs(tags=...)``; bad tags refused naming the key."""

from __future__ import annotations

from typing import Any

import pytest

import plait
from plait.tags import MAX_TAGS

app = plait.App("tags-tests")
#: how many times the body of ``counted`` ran
BODIES: list[str] = []


@app.function
def counted(data: str) -> str:
    BODIES.append(data)
    return data


@app.workflow(tags={"team": "billing", "env": "dev"})
async def tagged(wf: plait.Workflow, data: str) -> str:
    await wf.set_tags({"customer": data})
    await wf.do("one", counted, data)
    await wf.sleep("nap", 0.05)  # a second pass replays the set_tags step
    await wf.set_tags({"stage": "late", "customer": data + "-2"})
    return data


@app.workflow
async def child(wf: plait.Workflow, data: Any) -> str:
    return "child"


@app.workflow(tags={"kind": "parent"})
async def parent(wf: plait.Workflow, data: Any) -> str:
    return str(await wf.do("kid", "child", None))


@app.workflow
async def chain(wf: plait.Workflow, data: int) -> int:
    if data < 1:
        wf.continue_as_new(data + 1)
    return data


@app.workflow
async def too_many(wf: plait.Workflow, data: Any) -> str:
    await wf.set_tags({f"k{n}": "v" for n in range(MAX_TAGS)})
    return "never"


async def test_start_workflow_and_set_tags_merge_and_survive_replay(
    engine_factory: Any,
) -> None:
    BODIES.clear()
    async with engine_factory(app) as engine:
        run_id = await engine.start(tagged, "acme", tags={"env": "prod", "region": "eu"})
        run = await engine.wait(run_id, timeout=20)
        assert run.status == "completed"
        # the start's tags over the workflow's, then wf.set_tags merged in order
        assert run.tags == {
            "team": "billing",
            "env": "prod",
            "region": "eu",
            "customer": "acme-2",
            "stage": "late",
        }
        assert BODIES == ["acme"]
        steps = await engine.get_steps(run_id)
        assert [s.key for s in steps if s.key.startswith("__tags")] == ["__tags", "__tags#1"]


async def test_list_runs_matches_every_pair_given(engine_factory: Any) -> None:
    async with engine_factory(app) as engine:
        a = await engine.run(child, None, tags={"customer": "acme", "tier": "gold"})
        assert a == "child"
        ids = {}
        for customer, tier in (("acme", "gold"), ("acme", "free"), ("globex", "gold")):
            run_id = await engine.start(child, None, tags={"customer": customer, "tier": tier})
            await engine.wait(run_id, timeout=20)
            ids[(customer, tier)] = run_id
        untagged = await engine.start(child, None)
        await engine.wait(untagged, timeout=20)

        acme = await engine.list_runs(tags={"customer": "acme"})
        assert len(acme) == 3 and all(r.tags["customer"] == "acme" for r in acme)
        both = await engine.list_runs(tags={"customer": "acme", "tier": "free"})
        assert [r.id for r in both] == [ids[("acme", "free")]]
        assert await engine.list_runs(tags={"customer": "initech"}) == []
        gold = await engine.list_runs(tags={"tier": "gold"}, limit=1)
        assert len(gold) == 1 and gold[0].id == ids[("globex", "gold")]
        summaries, total = await engine.run_summaries(tags={"tier": "gold"})
        assert total == 3 and all(s.tags["tier"] == "gold" for s in summaries)
        assert (await engine.get_run(untagged)).tags == {}


async def test_children_successors_and_forks_inherit_tags(engine_factory: Any) -> None:
    async with engine_factory(app) as engine:
        run_id = await engine.start(parent, None, tags={"customer": "acme"})
        assert (await engine.wait(run_id, timeout=20)).status == "completed"
        (kid,) = await engine.get_children(run_id)
        assert kid.tags == {"customer": "acme", "kind": "parent"}

        first = await engine.start(chain, 0, tags={"batch": "7"})
        last = await engine.wait(first, timeout=20)
        assert last.id != first and last.tags == {"batch": "7"}
        found = await engine.list_runs(tags={"batch": "7"})
        assert {r.id for r in found} == {first, last.id}

        fork_id = await engine.fork(run_id, from_step="kid")
        assert (await engine.get_run(fork_id)).tags == {"customer": "acme", "kind": "parent"}


@pytest.mark.parametrize(
    ("tags", "named"),
    [
        ({"Customer": "x"}, "'Customer'"),
        ({"": "x"}, "''"),
        ({"k" * 65: "x"}, "'" + "k" * 65 + "'"),
        ({"a b": "x"}, "'a b'"),
        ({"ok": 3}, "'ok'"),
        ({"ok": "v" * 257}, "'ok'"),
        ({f"k{n}": "v" for n in range(MAX_TAGS + 1)}, "too many tags"),
    ],
)
async def test_bad_tags_are_refused_naming_the_key(
    engine_factory: Any, tags: dict[str, Any], named: str
) -> None:
    async with engine_factory(app) as engine:
        with pytest.raises(ValueError, match=named):
            await engine.start(child, None, tags=tags)
        with pytest.raises(ValueError, match=named):
            await engine.list_runs(tags=tags)


async def test_workflow_tags_are_checked_when_registered() -> None:
    other = plait.App("tags-bad")

    async def flow(wf: plait.Workflow) -> None: ...

    with pytest.raises(ValueError, match="'BAD'"):
        other.workflow(tags={"BAD": "x"})(flow)


async def test_set_tags_beyond_the_limit_fails_the_run(engine_factory: Any) -> None:
    async with engine_factory(app) as engine:
        run_id = await engine.start(too_many, None, tags={"one": "more"})
        run = await engine.wait(run_id, timeout=20)
        assert run.status == "failed"
        assert "too many tags" in run.error["message"]
        assert run.tags == {"one": "more"}
