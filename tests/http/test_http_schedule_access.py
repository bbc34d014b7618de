"""Schedules over HTTP on both stores: a user's own are hers; any other (another user's,
one declared in code, one made without an owner) needs the ``schedules`` scope to be
seen or operated; a user owns at most ``max_schedules_per_user``, and without the
``admin`` scope none fires more often than once a minute."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import pytest

import plait

httpx = pytest.importorskip("httpx", reason="httpx is needed to call the ASGI app")
pytest.importorskip("starlette", reason="the http extra (starlette) is not installed")

from plait.http import Principal, create_app  # noqa: E402

app = plait.App("schedule-access")


@app.workflow
async def job(wf: plait.Workflow, data: Any) -> Any:
    return data


app.schedule("declared", workflow="job", cron="0 0 1 1 *", input={"key": "secret"})

TOKENS = {
    "t-alice": Principal("alice"),
    "t-bob": Principal("bob"),
    "t-ops": Principal("ops", frozenset({"schedules"})),
    "t-admin": Principal("admin", frozenset({"admin"})),
}


@pytest.fixture
async def engine(database: str) -> AsyncIterator[plait.Engine]:
    async with plait.Engine(app, database, poll_interval=0.2) as opened:
        yield opened


@pytest.fixture
async def users(engine: plait.Engine) -> AsyncIterator[dict[str, httpx.AsyncClient]]:
    web = create_app(engine, tokens=TOKENS, max_schedules_per_user=2)
    clients = {
        name: httpx.AsyncClient(
            transport=httpx.ASGITransport(app=web),
            base_url="http://test",
            headers={"Content-Type": "application/json", "Authorization": f"Bearer t-{name}"},
        )
        for name in ("alice", "bob", "ops", "admin")
    }
    yield clients
    for client in clients.values():
        await client.aclose()


def missing_scope(answer: httpx.Response) -> None:
    assert answer.status_code == 403, answer.text
    assert answer.json()["error"]["code"] == "MISSING_SCOPE"
    assert answer.json()["error"]["scope"] == "schedules"


async def names(client: httpx.AsyncClient) -> set[str]:
    return {s["name"] for s in (await client.get("/api/schedules")).json()["schedules"]}


async def test_declared_and_others_schedules_need_the_schedules_scope(
    engine: plait.Engine, users: dict[str, httpx.AsyncClient]
) -> None:
    alice, bob, ops = users["alice"], users["bob"], users["ops"]
    await engine.create_schedule("ownerless", workflow="job", every="1h")
    made = await alice.post(
        "/api/schedules", json={"name": "mine", "workflow": "job", "every": 3600}
    )
    assert made.status_code == 201, made.text
    assert await names(alice) == {"mine"}
    assert await names(bob) == set()
    assert await names(ops) == {"mine", "declared", "ownerless"}
    for name in ("declared", "ownerless", "mine"):
        missing_scope(await bob.get(f"/api/schedules/{name}"))
        for action in ("pause", "resume", "trigger"):
            missing_scope(await bob.post(f"/api/schedules/{name}/{action}"))
        missing_scope(await bob.delete(f"/api/schedules/{name}"))
    assert await engine.count_runs() == ([], 0)  # bob triggered nothing
    assert (await engine.get_schedule("declared")).status == "active"
    # her own stays hers
    assert (await alice.post("/api/schedules/mine/pause")).status_code == 202
    assert (await alice.get("/api/schedules/mine")).json()["status"] == "paused"
    # the scope may see and operate all of them
    shown = await ops.get("/api/schedules/declared")
    assert shown.status_code == 200 and shown.json()["input"] == {"key": "secret"}
    assert (await ops.post("/api/schedules/declared/pause")).status_code == 202
    triggered = await ops.post("/api/schedules/mine/trigger")
    assert triggered.status_code == 202
    assert (await engine.wait(triggered.json()["run_id"], timeout=15)).owner == "alice"


async def test_a_user_owns_at_most_the_cap(
    engine: plait.Engine, users: dict[str, httpx.AsyncClient]
) -> None:
    alice, bob = users["alice"], users["bob"]
    for name in ("one", "two"):
        body = {"name": name, "workflow": "job", "every": "1h"}
        assert (await alice.post("/api/schedules", json=body)).status_code == 201
    over = await alice.post(
        "/api/schedules", json={"name": "three", "workflow": "job", "every": "1h"}
    )
    assert over.status_code == 429, over.text
    error = over.json()["error"]
    assert error["code"] == "TOO_MANY_SCHEDULES" and error["limit"] == 2
    assert "max_schedules_per_user=2" in error["message"]
    # replacing one of hers is no new one; another user has her own count
    again = await alice.post(
        "/api/schedules", json={"name": "two", "workflow": "job", "every": "2h"}
    )
    assert again.status_code == 201, again.text
    assert (
        await bob.post("/api/schedules", json={"name": "b", "workflow": "job", "every": "1h"})
    ).status_code == 201
    assert (await alice.delete("/api/schedules/one")).status_code == 204
    assert (
        await alice.post("/api/schedules", json={"name": "three", "workflow": "job", "every": "1h"})
    ).status_code == 201
    assert {s.name for s in await engine.list_schedules()} == {"declared", "two", "three", "b"}


async def test_concurrent_creations_by_one_user_stay_within_the_cap(
    engine: plait.Engine, users: dict[str, httpx.AsyncClient]
) -> None:
    """Creations of different names sent at once each read how many the user owns
    before any of them is stored: the cap holds all the same."""
    alice = users["alice"]
    answers = await asyncio.gather(
        *(
            alice.post("/api/schedules", json={"name": f"s{i}", "workflow": "job", "every": "1h"})
            for i in range(6)
        )
    )
    codes = sorted(a.status_code for a in answers)
    assert codes == [201, 201, 429, 429, 429, 429], [a.text for a in answers]
    owned = [s for s in await engine.list_schedules() if s.owner == "alice"]
    assert len(owned) == 2


@pytest.mark.parametrize(
    ("timing", "field"),
    [
        ({"cron": "* * * * * *"}, "cron"),  # six fields: every second
        ({"cron": "*/30 * * * * *"}, "cron"),
        ({"cron": "0,1 0 * * * *"}, "cron"),  # twice, a second apart, once an hour
        ({"every": 59}, "every"),
        ({"every": "10s"}, "every"),
    ],
)
async def test_a_schedule_firing_more_than_once_a_minute_needs_admin(
    engine: plait.Engine, users: dict[str, httpx.AsyncClient], timing: dict[str, Any], field: str
) -> None:
    body = {"name": "fast", "workflow": "job", **timing}
    refused = await users["alice"].post("/api/schedules", json=body)
    assert refused.status_code == 422, refused.text
    problem = refused.json()["error"]["problems"][0]
    assert problem["field"] == field and "at most once every 60s" in problem["message"]
    assert {s.name for s in await engine.list_schedules()} == {"declared"}
    assert (await users["admin"].post("/api/schedules", json=body)).status_code == 201
    for fine in ({"cron": "0 * * * * *"}, {"cron": "*/5 * * * *"}, {"every": 60}):
        ok = {"name": "fine", "workflow": "job", **fine}
        assert (await users["alice"].post("/api/schedules", json=ok)).status_code == 201, fine


async def test_two_users_creating_one_name_at_once_cannot_both_succeed(
    engine: plait.Engine, users: dict[str, httpx.AsyncClient]
) -> None:
    """Whether a caller may store over a schedule is decided on what is stored: two
    requests that read the name free at once must not both store it (the later taking
    the other's schedule, and the runs it starts). One wins; the other gets the 403 a
    second creation gets."""
    alice, bob = users["alice"], users["bob"]
    for n in range(5):
        name = f"nightly-{n}"

        def body(who: str, name: str = name) -> dict[str, Any]:
            return {"name": name, "workflow": "job", "cron": "0 3 * * *", "input": who}

        a, b = await asyncio.gather(
            alice.post("/api/schedules", json=body("alice")),
            bob.post("/api/schedules", json=body("bob")),
        )
        assert sorted([a.status_code, b.status_code]) == [201, 403], (a.text, b.text)
        winner, loser = ("alice", b) if a.status_code == 201 else ("bob", a)
        assert loser.json()["error"]["code"] == "FORBIDDEN"
        stored = await engine.get_schedule(name)
        assert (stored.owner, stored.input) == (winner, winner)
        await engine.delete_schedule(name)  # each round within the cap of two


async def test_a_creation_stores_only_over_the_schedule_it_read(engine: plait.Engine) -> None:
    """``create_schedule(replaces=...)``: stored only over the schedule as read (None:
    none of that name), else ``ScheduleChangedError`` and nothing is stored."""
    await engine.create_schedule("s", workflow="job", every="1h", owner="alice")
    read = await engine.get_schedule("s")
    with pytest.raises(plait.errors.ScheduleChangedError):
        await engine.create_schedule("s", workflow="job", every="2h", owner="bob", replaces=None)
    await engine.create_schedule("s", workflow="job", every="1h", owner="carol", replaces=read)
    with pytest.raises(plait.errors.ScheduleChangedError):  # it is carol's now
        await engine.create_schedule("s", workflow="job", every="3h", owner="bob", replaces=read)
    stored = await engine.get_schedule("s")
    assert (stored.owner, stored.every) == ("carol", 3600.0)
    made = await engine.create_schedule("t", workflow="job", every="1h", replaces=None)
    assert made.owner is None
    with pytest.raises(TypeError, match="replaces"):
        await engine.create_schedule("t", workflow="job", every="1h", replaces="t")  # type: ignore[arg-type]
