"""Operating many runs from the dashboard, in headless Chromium against a live server: the
runs list's "waiting on" column (an event, an approval, a sleep, a paused workflow), the
paused banner, counts per status, and a bulk cancel of the filtered runs behind a
confirmation that names how many it will cancel.

Uses Debian's chromium (``apt-get install chromium``); skipped with the reason when it or
Playwright is missing.
"""

from __future__ import annotations

import re
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
BOB_TOKEN = "tok-bob"
ADMIN_TOKEN = "tok-root"

playwright_api = pytest.importorskip(
    "playwright.sync_api", reason="playwright (pip package) is not installed"
)
httpx = pytest.importorskip("httpx", reason="httpx is needed to call the API")
pytest.importorskip("uvicorn", reason="the http extra (uvicorn) is not installed")
pytestmark = pytest.mark.skipif(
    not Path(CHROMIUM).exists(),
    reason=f"Debian's chromium is not installed at {CHROMIUM} (apt-get install chromium)",
)

from plait.http import Principal, create_app  # noqa: E402
from support.live_server import LiveServer  # noqa: E402

expect = playwright_api.expect
app = plait.App("operating-browser-tests")


@app.workflow
async def payment(wf: plait.Workflow, data: Any) -> Any:
    return await wf.wait_for_event("paid")


@app.workflow
async def refund(wf: plait.Workflow, data: Any) -> Any:
    return (await wf.approval("refund")).data


@app.workflow
async def nightly(wf: plait.Workflow, data: Any) -> Any:
    await wf.sleep("until morning", "6h")
    return "morning"


@app.workflow
async def partner_sync(wf: plait.Workflow, data: Any) -> Any:
    await wf.sleep("backoff", "1h")
    return "synced"


app.queue("partners", concurrency=1)


@app.function
async def push(data: Any) -> str:
    return "pushed"


@app.workflow(queue="partners")
async def partner_push(wf: plait.Workflow, data: Any) -> Any:
    return await wf.do("push", push, data)


@pytest.fixture
def server(tmp_path: Path) -> Iterator[LiveServer]:
    engine = plait.Engine(app, f"sqlite:///{tmp_path}/plait.db", poll_interval=0.2)
    tokens: dict[str, Any] = {
        TOKEN: "alice",
        BOB_TOKEN: "bob",
        ADMIN_TOKEN: Principal("root", frozenset({"admin"})),
    }
    with LiveServer(create_app(engine, tokens=tokens)) as running:
        yield running


@pytest.fixture
def api(server: LiveServer) -> Iterator[Any]:
    with httpx.Client(
        base_url=server.url, headers={"Authorization": f"Bearer {TOKEN}"}, timeout=30
    ) as client:
        yield client


@pytest.fixture
def page() -> Iterator[Any]:
    expect.set_options(timeout=20_000)
    with playwright_api.sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        context = browser.new_context(viewport={"width": 1280, "height": 900})
        opened = context.new_page()
        errors: list[str] = []
        opened.on("pageerror", lambda exc: errors.append(str(exc)))

        def console(message: Any) -> None:
            if "Content Security Policy" in message.text:
                errors.append(message.text)

        opened.on("console", console)
        yield opened
        browser.close()
        assert not errors, f"JavaScript or CSP errors on the page: {errors}"


def sign_in(page: Any, url: str, token: str = TOKEN, who: str = "alice") -> None:
    page.goto(url + "/")
    page.fill("#signin-token", token)
    page.click("#signin button")
    expect(page.locator("#whoami")).to_have_text(who)


def start(api: Any, workflow: str, **body: Any) -> str:
    answer = api.post(f"/api/workflows/{workflow}/runs", json={"input": None, **body})
    assert answer.status_code == 201, answer.text
    run_id: str = answer.json()["run_id"]
    return run_id


def shot(page: Any, name: str) -> None:
    ARTIFACTS.mkdir(exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / name), full_page=True)


def waiting_cell(page: Any, run_id: str) -> Any:
    return page.locator(f'tr[data-run-id="{run_id}"] td.waiting')


def test_the_waiting_on_column_names_what_each_run_waits_for(
    server: LiveServer, api: Any, page: Any
) -> None:
    paid = start(api, "payment")
    gate = start(api, "refund")
    nap = start(api, "nightly")
    held = start(api, "partner_sync")
    sign_in(page, server.url)

    expect(waiting_cell(page, paid)).to_have_attribute("data-waiting", "event")
    expect(waiting_cell(page, paid)).to_have_text("event paid")
    expect(waiting_cell(page, gate)).to_have_attribute("data-waiting", "approval")
    expect(waiting_cell(page, gate)).to_have_text("approval refund")
    expect(waiting_cell(page, nap)).to_have_attribute("data-waiting", "sleep")
    # a sleep says until when, in the browser's zone (today: the time alone)
    expect(waiting_cell(page, nap)).to_have_text(
        re.compile(r"^sleep until (\d{4}-\d\d-\d\d )?\d\d:\d\d:\d\d \S+$")
    )
    expect(waiting_cell(page, nap)).to_have_attribute(
        "title", re.compile(r"^sleeping until .* UTC$")
    )
    expect(page.locator("#paused-banner")).to_be_hidden()

    # pausing a workflow: its run says so, and a banner says what is paused
    as_admin = {"Authorization": f"Bearer {ADMIN_TOKEN}", "Content-Type": "application/json"}
    with httpx.Client(base_url=server.url, headers=as_admin, timeout=30) as admin:
        answer = admin.post("/api/workflows/partner_sync/pause")
        assert answer.status_code == 200, answer.text
        expect(waiting_cell(page, held)).to_have_attribute("data-waiting", "paused_workflow")
        expect(waiting_cell(page, held)).to_have_text("workflow paused")
        banner = page.locator("#paused-banner")
        expect(banner).to_be_visible()
        expect(banner.locator('[data-kind="workflow"][data-name="partner_sync"]')).to_be_visible()
        expect(page.locator(f'tr[data-run-id="{held}"] .badge')).to_have_text("paused")
        # counts per status for the list's filters, each a filter of its own
        expect(page.locator('#status-counts .count[data-status="running"] .num')).to_have_text("3")
        expect(page.locator('#status-counts .count[data-status="paused"] .num')).to_have_text("1")
        shot(page, "runs-waiting-on.png")

        page.locator('#status-counts .count[data-status="paused"]').click()
        expect(page.locator("#runs-body tr[data-run-id]")).to_have_count(1)
        expect(page.locator(f'tr[data-run-id="{held}"]')).to_be_visible()
        assert "status=paused" in page.url

        assert admin.post("/api/workflows/partner_sync/resume").status_code == 200
        expect(banner).to_be_hidden()
        page.locator('#status-counts .count[data-status=""]').click()
        expect(waiting_cell(page, held)).to_have_attribute("data-waiting", "sleep")

        # the runs started on no queue are in the queue "default": a list of them shows
        # its brake too
        page.select_option("#f-workflow", "partner_sync")
        assert admin.post("/api/queues/default/pause").status_code == 200
        expect(banner.locator('[data-kind="queue"][data-name="default"]')).to_be_visible()
        assert admin.post("/api/queues/default/resume").status_code == 200
        expect(banner).to_be_hidden()
        page.select_option("#f-workflow", "")

    # the run page says it too
    page.goto(f"{server.url}/runs/{paid}")
    expect(page.locator("#run-waiting")).to_have_text("event paid")
    expect(page.locator("#run-waiting")).to_have_attribute("title", "waiting for event 'paid'")


def test_a_bulk_cancel_of_the_filtered_runs_names_the_count(
    server: LiveServer, api: Any, page: Any
) -> None:
    batch = [start(api, "payment", tags={"batch": "b1"}) for _ in range(3)]
    other = start(api, "payment", tags={"batch": "b2"})
    with httpx.Client(
        base_url=server.url, headers={"Authorization": f"Bearer {BOB_TOKEN}"}, timeout=30
    ) as bob:
        bobs = start(bob, "payment", tags={"batch": "b1"})  # not alice's to cancel
    sign_in(page, server.url)
    for run_id in [*batch, other]:
        expect(waiting_cell(page, run_id)).to_have_attribute("data-waiting", "event")

    page.locator(f'tr[data-run-id="{batch[0]}"] .chip[data-tag="batch:b1"]').click()
    expect(page.locator("#runs-body tr[data-run-id]")).to_have_count(3)
    page.click("#bulk-cancel")
    dialog = page.locator("#bulk-confirm")
    expect(dialog).to_be_visible()
    expect(page.locator("#bulk-question")).to_have_text("Cancel 3 runs?")
    expect(page.locator("#bulk-filter")).to_contain_text("tags batch:b1")
    shot(page, "runs-bulk-confirm.png")

    # keeping them changes nothing
    page.click("#bulk-keep")
    expect(dialog).to_be_hidden()
    assert {api.get(f"/api/runs/{r}").json()["status"] for r in batch} == {"running"}

    page.click("#bulk-cancel")
    expect(page.locator("#bulk-question")).to_have_text("Cancel 3 runs?")
    page.click("#bulk-go")
    expect(page.locator("#notice")).to_have_text("Cancelled 3 runs.")
    for run_id in batch:
        expect(page.locator(f'tr[data-run-id="{run_id}"] .badge')).to_have_text("cancelled")
        expect(waiting_cell(page, run_id)).to_have_text("")
    shot(page, "runs-bulk-done.png")
    assert [api.get(f"/api/runs/{r}").json()["status"] for r in batch] == ["cancelled"] * 3
    assert api.get(f"/api/runs/{other}").json()["status"] == "running"
    with httpx.Client(
        base_url=server.url, headers={"Authorization": f"Bearer {ADMIN_TOKEN}"}, timeout=30
    ) as admin:
        assert admin.get(f"/api/runs/{bobs}").json()["status"] == "running"

    # a search by id cannot be acted on in bulk: the buttons say so
    page.fill("#f-id", batch[0][-8:])
    expect(page.locator("#bulk-cancel")).to_be_disabled()
    expect(page.locator("#bulk-note")).to_contain_text("no run id search")


def test_the_run_page_shows_each_attempts_worker_and_the_queue_wait(
    server: LiveServer, api: Any, page: Any
) -> None:
    run_id = start(api, "partner_push")
    server.call(_settled(server, run_id))
    attempts = api.get(f"/api/runs/{run_id}/history").json()["attempts"]
    worker = attempts[0]["worker"]
    assert worker
    sign_in(page, server.url)
    page.goto(f"{server.url}/runs/{run_id}")
    expect(page.locator("#run-status")).to_have_text("completed")

    def fact(name: str) -> Any:
        return page.locator("#run-meta > div", has=page.locator(f'dt:text-is("{name}")'))

    expect(fact("Queue").locator("dd")).to_have_text("partners")
    expect(fact("Queue wait").locator("dd")).to_have_text(re.compile(r"^\d+(\.\d)? m?s$"))
    page.locator('details.step[data-key="push"] > summary').click()
    expect(page.locator('details.step[data-key="push"] .attempt-worker')).to_have_text(
        f" · worker {worker}"
    )
    # a time of today shows without its date, with its zone
    expect(fact("Started").locator("dd")).to_have_text(re.compile(r"^\d\d:\d\d:\d\d \S+$"))
    shot(page, "run-page-worker-queue.png")


async def _settled(server: LiveServer, run_id: str) -> None:
    engine: plait.Engine = server.web.state.engine
    run = await engine.wait(run_id, timeout=20)
    assert run.status == "completed"
