"""The flow-control routes: schedules (list, create, pause, resume, trigger), queue
depths, and queue options on a start; owner checks and bad input on each."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

import plait

httpx = pytest.importorskip("httpx", reason="httpx is needed to call the ASGI app")
pytest.importorskip("starlette", reason="the http extra (starlette) is not installed")

from plait.http import create_app  # noqa: E402

TOKENS = {"t-alice": "alice", "t-bob": "bob"}
ALICE = {"Authorization": "Bearer t-alice"}
BOB = {"Authorization": "Bearer t-bob"}

app = plait.App("http-flow")
app.queue("work", concurrency=1)


@app.workflow(queue="work")
async def job(wf: plait.Workflow, data: Any) -> Any:
    return data


app.schedule("shared", workflow="job", cron="0 0 1 1 *")


@pytest.fixture
async def engine(tmp_path: Path) -> AsyncIterator[plait.Engine]:
    async with plait.Engine(app, f"sqlite:///{tmp_path}/t.db", poll_interval=0.2) as opened:
        yield opened


@pytest.fixture
async def clients(engine: plait.Engine) -> AsyncIterator[dict[str, httpx.AsyncClient]]:
    web = create_app(engine, tokens=TOKENS)
    # every request that changes something says it is JSON, even without a body
    made = {
        name: httpx.AsyncClient(
            transport=httpx.ASGITransport(app=web),
            base_url="http://test",
            headers={"Content-Type": "application/json", **headers},
        )
        for name, headers in (("alice", ALICE), ("bob", BOB), ("anonymous", {}))
    }
    yield made
    for client in made.values():
        await client.aclose()


async def test_schedules_need_a_token(clients: dict[str, httpx.AsyncClient]) -> None:
    anonymous = clients["anonymous"]
    assert (await anonymous.get("/api/schedules")).status_code == 401
    assert (await anonymous.post("/api/schedules/shared/pause")).status_code == 401
    assert (await anonymous.get("/api/queues")).status_code == 401


async def test_a_schedule_belongs_to_its_creator(
    clients: dict[str, httpx.AsyncClient], engine: plait.Engine
) -> None:
    alice, bob = clients["alice"], clients["bob"]
    made = await alice.post(
        "/api/schedules",
        json={"name": "mine", "workflow": "job", "every": "1h", "input": {"n": 1}},
    )
    assert made.status_code == 201, made.text
    assert made.json()["owner"] == "alice"
    names = {s["name"] for s in (await alice.get("/api/schedules")).json()["schedules"]}
    assert names == {"mine"}  # a declared schedule needs the schedules scope
    bobs = {s["name"] for s in (await bob.get("/api/schedules")).json()["schedules"]}
    assert bobs == set()
    for action in ("pause", "resume", "trigger"):
        answer = await bob.post(f"/api/schedules/mine/{action}")
        assert answer.status_code == 403, action
    assert (await bob.get("/api/schedules/mine")).status_code == 403
    taken = await bob.post("/api/schedules", json={"name": "mine", "workflow": "job", "every": 5})
    assert taken.status_code == 403

    paused = await alice.post("/api/schedules/mine/pause")
    assert paused.status_code == 202 and paused.json()["status"] == "paused"
    resumed = await alice.post("/api/schedules/mine/resume")
    assert resumed.status_code == 202 and resumed.json()["next_tick"] is not None
    triggered = await alice.post("/api/schedules/mine/trigger")
    assert triggered.status_code == 202
    run = await engine.wait(triggered.json()["run_id"], timeout=20)
    assert run.owner == "alice" and run.output == {"n": 1} and run.scheduled_at is not None
    # a shared schedule: only the schedules scope operates it
    assert (await bob.post("/api/schedules/shared/pause")).status_code == 403
    assert (await bob.post("/api/schedules/nothing/pause")).status_code == 404
    # but nobody takes it over by storing another schedule under its name
    hijack = await bob.post(
        "/api/schedules", json={"name": "shared", "workflow": "job", "every": 5}
    )
    assert hijack.status_code == 403 and "shared" in hijack.json()["detail"]
    kept = (await engine.get_schedule("shared")).to_dict()
    assert kept["owner"] is None and kept["cron"] == "0 0 1 1 *"


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"name": "x", "workflow": "job", "cron": "99 * * * *"}, "cron"),
        (
            {"name": "x", "workflow": "job", "cron": "0 * * * *", "timezone": "Nowhere/X"},
            "timezone",
        ),
        ({"name": "x", "workflow": "job", "every": "often"}, "every"),
        ({"name": "x", "workflow": "job", "every": 60, "overlap": "queue"}, "overlap"),
        ({"name": "x", "workflow": "job", "every": 60, "catchup": "-1s"}, "catchup"),
        ({"name": "x", "workflow": "job"}, "cron"),
        ({"name": "a:b", "workflow": "job", "every": 60}, "name"),
        # a schedule's name is part of its runs' ids, which travel in URLs
        ({"name": "a/b", "workflow": "job", "every": 60}, "name"),
        ({"name": "a b", "workflow": "job", "every": 60}, "name"),
        ({"workflow": "job", "every": 60}, "name"),
        ({"name": "x" * 167, "workflow": "job", "every": 60}, "name"),
        ({"name": "a\u0001b", "workflow": "job", "every": 60}, "name"),
    ],
)
async def test_bad_schedules_are_422_naming_the_field(
    clients: dict[str, httpx.AsyncClient], body: dict[str, Any], field: str
) -> None:
    answer = await clients["alice"].post("/api/schedules", json=body)
    assert answer.status_code == 422, answer.text
    assert answer.json()["error"]["problems"][0]["field"] == field
    names = {s["name"] for s in (await clients["alice"].get("/api/schedules")).json()["schedules"]}
    assert names == set()  # nothing stored


async def test_an_unknown_workflow_is_404(clients: dict[str, httpx.AsyncClient]) -> None:
    answer = await clients["alice"].post(
        "/api/schedules", json={"name": "x", "workflow": "nope", "every": 60}
    )
    assert answer.status_code == 404


async def test_queued_runs_and_queue_depth(
    clients: dict[str, httpx.AsyncClient], engine: plait.Engine
) -> None:
    alice = clients["alice"]
    started = await alice.post(
        "/api/workflows/job/runs",
        json={"input": 1, "delay": "1h", "priority": 3, "key": "k", "dedup": "d1"},
    )
    assert started.status_code == 201, started.text
    run_id = started.json()["run_id"]
    again = await alice.post("/api/workflows/job/runs", json={"input": 2, "dedup": "d1"})
    assert again.json()["run_id"] == run_id
    listed = (await alice.get("/api/runs?status=queued")).json()
    assert [r["id"] for r in listed["runs"]] == [run_id]
    assert listed["runs"][0]["priority"] == 3
    depths = {q["queue"]: q for q in (await alice.get("/api/queues")).json()["queues"]}
    assert depths["work"]["queued"] == 1 and depths["work"]["limits"]["concurrency"] == 1


@pytest.mark.parametrize(
    ("options", "field"),
    [
        ({"priority": "high"}, "priority"),
        ({"queue": 5}, "queue"),
        ({"delay": "soon"}, "delay"),
        ({"start_at": "2030-01-01T00:00:00"}, "start_at"),
        ({"dedup": ""}, "dedup"),
        ({"queue": "work", "key": 7}, "key"),
    ],
)
async def test_bad_queue_options_are_422_naming_the_field(
    clients: dict[str, httpx.AsyncClient], options: dict[str, Any], field: str
) -> None:
    answer = await clients["alice"].post("/api/workflows/job/runs", json={"input": 1, **options})
    assert answer.status_code == 422, answer.text
    assert answer.json()["error"]["problems"][0]["field"] == field
    assert (await clients["alice"].get("/api/runs")).json()["total"] == 0


async def test_the_schedules_page_is_served(clients: dict[str, httpx.AsyncClient]) -> None:
    page = await clients["anonymous"].get("/schedules")
    assert page.status_code == 200
    assert 'data-page="schedules"' in page.text and 'type="module"' in page.text
    script = await clients["anonymous"].get("/static/js/schedules.js")
    assert script.status_code == 200 and "export function schedulesPage" in script.text
    main = await clients["anonymous"].get("/static/js/main.js")
    assert 'from "./schedules.js"' in main.text
    runs = await clients["anonymous"].get("/")
    assert '<option value="queued">queued</option>' in runs.text


async def test_queue_keys_of_every_users_runs_are_not_shown_without_the_admin_scope(
    clients: dict[str, httpx.AsyncClient], engine: plait.Engine
) -> None:
    """A queue's per-key lines name the keys of every user's runs (a customer, a
    tenant); a user sees the counts, not another user's keys."""
    bob, alice = clients["bob"], clients["alice"]
    sent = await bob.post(
        "/api/workflows/job/runs",
        json={"input": 1, "delay": "1h", "key": "customer:bob@example.com"},
    )
    assert sent.status_code == 201, sent.text
    assert "bob@example.com" in str(await engine.queue_depths())  # the engine has them
    shown = await alice.get("/api/queues")
    assert shown.status_code == 200
    depths = {q["queue"]: q for q in shown.json()["queues"]}
    assert depths["work"]["queued"] == 1 and depths["work"]["keys"] == []
    assert "bob@example.com" not in shown.text
