"""HTTP edges: a request's timeout that is not a number, a stream whose name holds a "/"."""

from __future__ import annotations

from typing import Any

import pytest

import plait


async def test_http_request_refuses_a_timeout_that_is_not_a_number(tmp_path) -> None:
    """``engine.request(..., timeout=True)`` is a TypeError ("must be a number of
    seconds"); over HTTP ``{"timeout": true}`` is taken as 1 second and ``"5"`` as 5:
    bad input accepted silently instead of a 422 naming ``timeout``."""
    import pytest

    httpx = pytest.importorskip("httpx")
    from plait.http import Principal, create_app

    app = plait.App("http-review")

    @app.workflow
    async def echo(wf: plait.Workflow, data: Any) -> Any:
        while True:
            req = await wf.wait_for_request("ask")
            await req.reply(req.data)

    async with plait.Engine(app, f"sqlite:///{tmp_path}/t.db", poll_interval=0.2) as engine:
        web = create_app(engine, tokens={"t": Principal("alice", frozenset())})
        async with httpx.AsyncClient(
            transport=httpx.ASGITransport(app=web),
            base_url="http://test",
            headers={"Content-Type": "application/json", "Authorization": "Bearer t"},
        ) as client:
            started = await client.post("/api/workflows/echo/runs", json={})
            run_id = started.json()["run_id"]
            with pytest.raises(TypeError):
                await engine.request(run_id, "ask", 1, timeout=True)  # type: ignore[arg-type]
            for bad in (True, "5"):
                sent = await client.post(
                    f"/api/runs/{run_id}/requests/ask", json={"data": 1, "timeout": bad}
                )
                assert sent.status_code == 422, (bad, sent.status_code, sent.text)


async def test_a_stream_whose_name_holds_a_slash_is_served(tmp_path: Any) -> None:
    httpx = pytest.importorskip("httpx")
    from plait.http import Principal, create_app

    app = plait.App("http-slash-stream")

    @app.workflow
    async def slashed(wf: plait.Workflow) -> str:
        await wf.stream("chat/1").write("hi")
        return "done"

    async with plait.Engine(app, f"sqlite:///{tmp_path}/t.db", poll_interval=0.2) as engine:
        run_id = await engine.start("slashed", owner="alice")
        assert (await engine.wait(run_id, timeout=30)).output == "done"
        web = create_app(engine, tokens={"t": Principal("alice", frozenset())})
        async with httpx.AsyncClient(
            transport=httpx.ASGITransport(app=web),
            base_url="http://test",
            headers={"Authorization": "Bearer t"},
        ) as client:
            answer = await client.get(f"/api/runs/{run_id}/streams/chat%2F1")
        assert answer.status_code == 200, (answer.status_code, answer.text[:200])
        assert '"hi"' in answer.text
