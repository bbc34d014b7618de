"""The HTTP API and a chain of runs continued as new: the run's JSON names both links,
``GET /api/runs?hide_continued=true`` lists the last run of each chain, and a start that
waits answers with the last run."""

from __future__ import annotations

from pathlib import Path

import pytest

import plait

httpx = pytest.importorskip("httpx", reason="httpx is needed to call the ASGI app")
pytest.importorskip("starlette", reason="the http extra (starlette) is not installed")

from plait.http import Principal, create_app  # noqa: E402

app = plait.App("http-continue")


@app.workflow
async def hops(wf: plait.Workflow, n: int) -> dict[str, int]:
    await wf.do("note", lambda x: x, n)
    if n < 3:
        await wf.continue_as_new(n + 1)
    return {"n": n}


async def test_the_run_json_and_the_list_show_the_chain(tmp_path: Path) -> None:
    async with plait.Engine(app, f"sqlite:///{tmp_path / 't.db'}", poll_interval=0.2) as engine:
        first = await engine.start("hops", 0, owner="ann")
        last = await engine.wait(first, timeout=30)
        web = create_app(engine, tokens={"t": Principal("ann", frozenset())})
        headers = {"Authorization": "Bearer t", "Content-Type": "application/json"}
        async with httpx.AsyncClient(
            transport=httpx.ASGITransport(app=web), base_url="http://test", headers=headers
        ) as client:
            shown = (await client.get(f"/api/runs/{first}")).json()
            assert shown["status"] == "continued" and shown["continued_from"] is None
            assert shown["continued_to"] is not None
            assert (await client.get(f"/api/runs/{last.id}")).json()["continued_to"] is None
            listed = (await client.get("/api/runs", params={"hide_continued": "true"})).json()
            assert [r["id"] for r in listed["runs"]] == [last.id] and listed["total"] == 1
            every = (await client.get("/api/runs", params={"status": "continued"})).json()
            assert every["total"] == 3
            bad = await client.get("/api/runs", params={"hide_continued": "maybe"})
            assert bad.status_code == 422 and "hide_continued" in bad.text
            started = await client.post(
                "/api/workflows/hops/runs", json={"input": 1, "wait": True, "timeout": 30}
            )
            assert started.status_code == 200
            body = started.json()
            assert body["output"] == {"n": 3} and body["continued_from"] is not None
            spec = (await client.get("/openapi.json")).json()
            run = spec["components"]["schemas"]["Run"]["properties"]
            assert "continued_to" in run and "continued" in run["status"]["enum"]
