"""A run's streams on the run page, in headless Chromium against a live server: a step's
text grows live as it writes it, a failed attempt's text goes with its reset, and other
values get a line each.

Uses Debian's chromium (``apt-get install chromium``); skipped with the reason when it or
Playwright is missing.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import plait
from support.paths import ROOT

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--no-first-run"]
ARTIFACTS = ROOT / "test-artifacts"
TOKEN = "tok-alice"

playwright_api = pytest.importorskip(
    "playwright.sync_api", reason="playwright (pip package) is not installed"
)
httpx = pytest.importorskip("httpx", reason="httpx is needed to call the API")
pytest.importorskip("uvicorn", reason="the http extra (uvicorn) is not installed")
pytestmark = pytest.mark.skipif(
    not Path(CHROMIUM).exists(),
    reason=f"Debian's chromium is not installed at {CHROMIUM} (apt-get install chromium)",
)

from plait.http import create_app  # noqa: E402
from support.live_server import LiveServer  # noqa: E402

expect = playwright_api.expect
app = plait.App("stream-browser-tests")
#: set by the test once the page showed the first words: the step goes on then
GO_ON = threading.Event()


@app.function(retries=1, retry_delay=0)
async def reply(data: None, ctx: plait.StepContext) -> str:
    tokens = ctx.stream("reply")
    if ctx.attempt == 1:
        await tokens.write("a reply that fails ")
        raise RuntimeError("the model went away")
    for word in ("Hello", ",", " how", " can"):
        await tokens.write(word)
    await asyncio.to_thread(GO_ON.wait, 30)  # the page shows the words so far meanwhile
    for word in (" I", " help", "?"):
        await tokens.write(word)
    return "done"


@app.workflow
async def chat(wf: plait.Workflow) -> str:
    await wf.stream("events").write({"turn": 1})
    return await wf.do("reply", reply)


@pytest.fixture
def server(tmp_path: Path) -> Iterator[LiveServer]:
    engine = plait.Engine(app, f"sqlite:///{tmp_path}/plait.db", poll_interval=0.2)
    with LiveServer(create_app(engine, tokens={TOKEN: "alice"})) as running:
        yield running


@pytest.fixture
def page() -> Iterator[Any]:
    with playwright_api.sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        context = browser.new_context(viewport={"width": 1100, "height": 900})
        opened = context.new_page()
        errors: list[str] = []
        opened.on("pageerror", lambda exc: errors.append(str(exc)))
        yield opened
        browser.close()
        assert not errors, f"JavaScript errors on the page: {errors}"


def test_the_run_page_shows_a_streams_text_growing_live(server: LiveServer, page: Any) -> None:
    expect.set_options(timeout=20_000)
    GO_ON.clear()
    with httpx.Client(
        base_url=server.url, headers={"Authorization": f"Bearer {TOKEN}"}, timeout=30
    ) as api:
        run_id = api.post("/api/workflows/chat/runs", json={}).json()["run_id"]
        page.goto(server.url + "/")
        page.fill("#signin-token", TOKEN)
        page.click("#signin button")
        expect(page.locator("#whoami")).to_have_text("alice")
        page.goto(f"{server.url}/runs/{run_id}")

        body = page.locator('.stream-body[data-stream="reply"]')
        expect(body).to_have_text("Hello, how can")  # the failed attempt's text is gone
        assert api.get(f"/api/runs/{run_id}").json()["status"] == "running"
        expect(page.locator('.stream-body[data-stream="events"]')).to_have_text('{"turn":1}')
        ARTIFACTS.mkdir(exist_ok=True)
        page.screenshot(path=str(ARTIFACTS / "run-page-streams-live.png"), full_page=True)

        GO_ON.set()
        expect(body).to_have_text("Hello, how can I help?")
        expect(page.locator("#run-status")).to_have_text("completed")
        expect(page.locator(".stream .muted").first).to_have_text("ended")
        page.locator("#streams-card").screenshot(path=str(ARTIFACTS / "run-page-streams.png"))
