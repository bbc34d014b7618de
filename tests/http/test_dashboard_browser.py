"""The dashboard in a real browser: headless Chromium driven by Playwright against a live
uvicorn server on 127.0.0.1: following runs, the sign-in flow, and pages of another
origin that try to use the server (cross-site requests, framing) and fail.

Uses Debian's chromium (``apt-get install chromium``) rather than a browser build that
Playwright would download; skipped with the reason when either is missing.
"""

from __future__ import annotations

import asyncio
import functools
import http.server
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pydantic
import pytest

import plait
from support.paths import ROOT

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
ARTIFACTS = ROOT / "test-artifacts"
TOKEN = "tok-alice"
BOB_TOKEN = "tok-bob"

playwright_api = pytest.importorskip(
    "playwright.sync_api", reason="playwright (pip package) is not installed"
)
httpx = pytest.importorskip("httpx", reason="httpx is needed to call the API")
uvicorn = pytest.importorskip("uvicorn", reason="the http extra (uvicorn) is not installed")
pytestmark = pytest.mark.skipif(
    not Path(CHROMIUM).exists(),
    reason=f"Debian's chromium is not installed at {CHROMIUM} (apt-get install chromium)",
)

from plait.http import create_app  # noqa: E402
from support.live_server import LiveServer  # noqa: E402

expect = playwright_api.expect

app = plait.App("browser-tests")


@app.function
async def add(data: dict) -> int:
    return int(data["a"]) + int(data["b"])


@app.function(retries=0)
def charge(data: dict) -> dict:
    """Fails until the flag file exists, so the test decides when a retry succeeds."""
    if not Path(data["flag"]).exists():
        raise RuntimeError("card declined: flag file missing")
    return {"charged": data["amount"]}


@app.workflow
async def notify(wf: plait.Workflow, data: Any) -> Any:
    return await wf.do("send", add, {"a": data, "b": 0})


@app.workflow
async def approval(wf: plait.Workflow, data: Any) -> Any:
    total = await wf.do("price", add, {"a": 2, "b": 3})
    await asyncio.gather(
        wf.do("reserve stock", add, {"a": total, "b": 1}),
        wf.do("fraud check", add, {"a": total, "b": 2}),
    )
    decision = await wf.wait_for_event("approve")
    await wf.do("record", add, {"a": total, "b": 0})
    return {"total": total, "decision": decision}


@app.workflow
async def checkout(wf: plait.Workflow, data: Any) -> Any:
    total = await wf.do("price", add, {"a": data["amount"], "b": 5})
    await asyncio.gather(
        wf.do("reserve stock", add, {"a": total, "b": 1}),
        wf.do("fraud check", add, {"a": total, "b": 2}),
    )
    receipt = await wf.do("charge card", charge, {"flag": data["flag"], "amount": total})
    await wf.do("notify", "notify", total)
    return {"receipt": receipt, "total": total}


@app.workflow
async def family(wf: plait.Workflow, data: Any) -> Any:
    return await wf.do("kid", "nested_kid", data)


@app.workflow
async def nested_kid(wf: plait.Workflow, data: Any) -> Any:
    return await wf.do("grandkid", "notify", data)


@app.workflow
async def a_workflow_with_a_rather_long_name_for_a_phone(wf: plait.Workflow, data: Any) -> Any:
    return await wf.do("send", add, {"a": 1, "b": 2})


app.queue("one-by-one", concurrency=1)


@app.workflow(queue="one-by-one")
async def held(wf: plait.Workflow, data: Any) -> Any:
    """Holds the queue's one slot until its event comes, so the runs behind it queue."""
    return await wf.wait_for_event("go")


class Refund(pydantic.BaseModel):
    approved: bool
    amount: int = pydantic.Field(default=1, ge=1)
    note: str = ""


@app.workflow
async def refund(wf: plait.Workflow, data: Any) -> Any:
    await wf.set_value("progress", 0.5)
    decision = await wf.approval("refund", schema=Refund)
    await wf.set_value("progress", 1.0)
    return {
        "approved": decision.data.approved,
        "note": decision.data.note,
        "by": decision.decided_by,
    }


# -- the servers and the browser ----------------------------------------------------------
Server = LiveServer


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    database = tmp_path_factory.mktemp("browser") / "plait.db"
    # Not opened here: the app's lifespan opens it inside uvicorn's event loop.
    engine = plait.Engine(app, f"sqlite:///{database}", poll_interval=0.2)
    with Server(create_app(engine, tokens={TOKEN: "alice", BOB_TOKEN: "bob"})) as running:
        yield running


@pytest.fixture(scope="module")
def local_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    """A server run with --no-auth, as on a developer's machine."""
    database = tmp_path_factory.mktemp("browser-local") / "plait.db"
    engine = plait.Engine(app, f"sqlite:///{database}", poll_interval=0.2)
    with Server(create_app(engine, no_auth=True)) as running:
        yield running


class _Quiet(http.server.SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:
        pass


@pytest.fixture(scope="module")
def evil_site(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Path]]:
    """Another origin (127.0.0.1 on another port): (its URL, the folder it serves)."""
    folder = tmp_path_factory.mktemp("evil")
    handler = functools.partial(_Quiet, directory=str(folder))
    site = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=site.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{site.server_address[1]}", folder
    site.shutdown()
    site.server_close()


@pytest.fixture(scope="module")
def api(server: Server) -> Iterator[Any]:
    with httpx.Client(
        base_url=server.url, headers={"Authorization": f"Bearer {TOKEN}"}, timeout=30
    ) as client:
        yield client


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    with playwright_api.sync_playwright() as pw:
        launched = pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        yield launched
        launched.close()


@pytest.fixture
def page(browser: Any) -> Iterator[Any]:
    context = browser.new_context(viewport={"width": 1280, "height": 900})
    opened = context.new_page()
    errors: list[str] = []
    opened.on("pageerror", lambda exc: errors.append(str(exc)))

    def console(message: Any) -> None:
        # the Content-Security-Policy refused something of the dashboard's own (a page
        # that frames the dashboard is told so too: that one is the policy working)
        if "Content Security Policy" in message.text and not message.text.startswith("Framing"):
            errors.append(message.text)

    opened.on("console", console)
    yield opened
    context.close()
    assert not errors, f"JavaScript or CSP errors on the page: {errors}"


def sign_in(page: Any, url: str, token: str = TOKEN, then: str = "/") -> None:
    """Sign in through the dashboard's form, then open ``then``."""
    page.goto(url + "/")
    expect(page.locator("#signin")).to_be_visible()
    page.fill("#signin-token", token)
    page.click("#signin button")
    expect(page.locator("#whoami")).to_have_text("alice")
    if then != "/":
        page.goto(url + then)


@pytest.fixture(autouse=True)
def _slow_expect() -> None:
    expect.set_options(timeout=15_000)


def start(api: Any, workflow: str, data: Any = None, **body: Any) -> dict[str, Any]:
    response = api.post(f"/api/workflows/{workflow}/runs", json={"input": data, **body})
    assert response.status_code in (200, 201), response.text
    result: dict[str, Any] = response.json()
    return result


def wait_for(check: Any, timeout: float = 15.0) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError("condition not met in time")
        time.sleep(0.05)


# -- tests --------------------------------------------------------------------------------
def test_run_page_follows_a_run_to_completed_without_a_reload(
    server: Server, api: Any, page: Any
) -> None:
    run_id = start(api, "approval")["run_id"]

    def waiting_for_approval() -> bool:
        steps = api.get(f"/api/runs/{run_id}").json()["steps"]
        return any(s["kind"] == "event" for s in steps)

    wait_for(waiting_for_approval)
    sign_in(page, server.url, then=f"/runs/{run_id}")
    status = page.locator("#run-status")
    expect(status).to_have_text("running")
    expect(page.locator('details.step[data-key="fraud check"]')).to_be_visible()
    expect(page.locator('#graph [data-node="price"]')).to_have_attribute("data-state", "succeeded")
    expect(page.locator("#btn-cancel")).to_be_enabled()
    page.evaluate("window.__sameDocument = 'yes'")

    sent = api.post(f"/api/runs/{run_id}/events/approve", json="ok")
    assert sent.status_code == 202

    expect(status).to_have_text("completed")
    expect(page.locator("#run-output")).to_contain_text('"decision": "ok"')
    expect(page.locator('#graph [data-node="record"]')).to_have_attribute("data-state", "succeeded")
    expect(page.locator("#btn-cancel")).to_be_disabled()
    assert page.evaluate("window.__sameDocument") == "yes", "the page was reloaded"


def test_failed_run_is_retried_from_the_run_page(
    server: Server, api: Any, page: Any, tmp_path: Path
) -> None:
    flag = tmp_path / "card-ok"
    run = start(api, "checkout", {"amount": 20, "flag": str(flag)}, wait=True)
    assert run["status"] == "failed"

    sign_in(page, server.url, then=f"/runs/{run['id']}")
    status = page.locator("#run-status")
    expect(status).to_have_text("failed")
    expect(page.locator("#run-error-message")).to_contain_text("flag file missing")
    expect(page.locator('#graph [data-node="charge card"]')).to_have_attribute(
        "data-state", "failed"
    )
    retry = page.locator("#btn-retry")
    expect(retry).to_be_enabled()

    flag.touch()
    retry.click()
    expect(status).to_have_text("completed")
    expect(page.locator("#error-card")).to_be_hidden()
    charge_row = page.locator('details.step[data-key="charge card"]')
    expect(charge_row.locator(".step-attempts")).to_have_text("2\u00d7")  # two tries
    expect(page.locator('#graph [data-node="notify"]')).to_have_attribute("data-state", "succeeded")
    expect(page.locator("#children a")).to_have_count(1)

    charge_row.locator("summary").click()
    expect(charge_row.locator(".attempts li")).to_have_count(2)
    ARTIFACTS.mkdir(exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / "run-page.png"), full_page=True)
    page.set_viewport_size({"width": 390, "height": 844})
    page.screenshot(path=str(ARTIFACTS / "run-page-phone.png"), full_page=True)


def test_runs_list_updates_and_filters(server: Server, api: Any, page: Any) -> None:
    first = start(api, "notify", 1, wait=True)
    sign_in(page, server.url)
    expect(page.locator(f'tr[data-run-id="{first["id"]}"]')).to_be_visible()

    later = start(api, "notify", 2, wait=True)  # appears without a reload
    expect(page.locator(f'tr[data-run-id="{later["id"]}"]')).to_be_visible()

    page.select_option("#f-status", "failed")
    expect(page.locator(f'tr[data-run-id="{later["id"]}"]')).to_have_count(0)
    assert "status=failed" in page.url
    page.select_option("#f-status", "")
    page.select_option("#f-workflow", "notify")
    # child runs (a checkout's notify) are folded under their parents
    query = {"workflow": "notify", "top_level": "true"}
    notify_runs = api.get("/api/runs", params=query).json()["total"]
    expect(page.locator("#runs-body tr[data-run-id]")).to_have_count(notify_runs)
    expect(page.locator("#page-info")).to_have_text(f"1\u2013{notify_runs} of {notify_runs}")
    ARTIFACTS.mkdir(exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / "runs-page.png"), full_page=True)

    page.locator(f'tr[data-run-id="{later["id"]}"] td a').first.click()
    expect(page.locator("#run-status")).to_have_text("completed")


def test_tag_chips_filter_the_runs_list(server: Server, api: Any, page: Any) -> None:
    acme = start(api, "notify", 1, wait=True, tags={"customer": "acme", "tier": "gold"})
    globex = start(api, "notify", 2, wait=True, tags={"customer": "globex"})
    sign_in(page, server.url)
    row = page.locator(f'tr[data-run-id="{acme["id"]}"]')
    expect(row.locator(".chip")).to_have_text(["customer:acme", "tier:gold"])
    expect(page.locator(f'tr[data-run-id="{globex["id"]}"]')).to_be_visible()

    row.locator('.chip[data-tag="customer:acme"]').click()
    expect(page.locator(f'tr[data-run-id="{globex["id"]}"]')).to_have_count(0)
    expect(page.locator("#runs-body tr[data-run-id]")).to_have_count(1)
    expect(page.locator('#f-tags .chip.active[data-tag="customer:acme"]')).to_be_visible()
    assert "tag=customer%3Aacme" in page.url
    ARTIFACTS.mkdir(exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / "runs-tags.png"), full_page=True)

    page.locator("#f-tags .chip-off").click()
    expect(page.locator(f'tr[data-run-id="{globex["id"]}"]')).to_be_visible()

    page.goto(server.url + f"/runs/{acme['id']}")
    chip = page.locator('#run-meta .chip:text("tier:gold")')
    expect(chip).to_be_visible()
    chip.click()
    expect(page.locator(f'tr[data-run-id="{acme["id"]}"]')).to_be_visible()
    expect(page.locator("#runs-body tr[data-run-id]")).to_have_count(1)


def test_sign_in_sign_out_and_a_token_in_a_link(server: Server, api: Any, page: Any) -> None:
    run_id = start(api, "notify", 7, wait=True)["id"]
    # a link with a token (someone else's, say) signs nobody in and leaves the address bar
    page.goto(f"{server.url}/?token={TOKEN}")
    assert "token" not in page.url
    expect(page.locator("#signin")).to_be_visible()
    expect(page.locator("#whoami")).to_have_text("")

    page.fill("#signin-token", "not-a-token")
    page.click("#signin button")
    expect(page.locator("#signin-error")).to_have_text("Unknown token.")
    page.fill("#signin-token", TOKEN)
    page.click("#signin button")
    expect(page.locator("#whoami")).to_have_text("alice")
    expect(page.locator("#signin")).to_be_hidden()
    expect(page.locator(f'tr[data-run-id="{run_id}"]')).to_be_visible()

    # the session is an HttpOnly, SameSite=Strict cookie: no script can read it, and the
    # token is kept nowhere in the browser
    (cookie,) = page.context.cookies()
    assert (cookie["name"], cookie["httpOnly"], cookie["sameSite"]) == (
        "plait_session",
        True,
        "Strict",
    )
    assert "plait_session" not in page.evaluate("document.cookie")
    stored = page.evaluate("JSON.stringify([localStorage, sessionStorage])")
    assert TOKEN not in stored and TOKEN not in cookie["value"]

    # actions work through the session (with its CSRF token)
    page.goto(f"{server.url}/runs/{run_id}")
    expect(page.locator("#run-status")).to_have_text("completed")
    page.goto(f"{server.url}/schedules")  # a page of its own script, signed in alike
    expect(page.locator("#schedules-body")).to_contain_text("No schedules.")
    # a declared queue is listed with nothing in it
    expect(page.locator("#queues-body")).to_have_text("one-by-one00concurrency 1")

    page.click("#signout")
    expect(page.locator("#signin")).to_be_visible()
    expect(page.locator("#signout")).to_be_hidden()
    assert page.context.cookies() == []
    answer = page.evaluate("fetch('/api/runs').then((r) => r.status)")
    assert answer == 401


ATTACK = """<!doctype html>
<html><body>
<iframe name="sink" id="sink"></iframe>
<form id="form" method="post" target="sink" action="TARGET/api/workflows/notify/runs">
  <input type="hidden" name="input" value="1">
</form>
<form id="plain" method="post" target="sink2" enctype="text/plain"
      action="TARGET/api/workflows/notify/runs">
  <input type="hidden" name='{"input": 1, "pad": "' value='"}'>
</form>
<iframe name="sink2" id="sink2"></iframe>
<iframe id="framed" src="TARGET/"></iframe>
<script>
  window.attempts = [];
  const note = (ok, failed) => [() => window.attempts.push(ok), () => window.attempts.push(failed)];
  async function attack() {
    const target = "TARGET";
    const body = JSON.stringify({ input: 1 });
    // "simple" requests: no preflight, the browser sends them as they are
    await fetch(target + "/api/workflows/notify/runs", {
      method: "POST", mode: "no-cors", credentials: "include",
      headers: { "Content-Type": "text/plain" }, body: body,
    }).then(...note("no-cors text", "no-cors text failed"));
    const graph = JSON.stringify({
      name: "planted", definition: { nodes: { sum: { function: "add", input: { a: 1, b: 2 } } } },
    });
    await fetch(target + "/api/graphs", {
      method: "POST", mode: "no-cors", credentials: "include",
      headers: { "Content-Type": "text/plain" }, body: graph,
    }).then(...note("no-cors graph", "no-cors graph failed"));
    // JSON needs a preflight, which the server never grants
    await fetch(target + "/api/workflows/notify/runs", {
      method: "POST", credentials: "include",
      headers: { "Content-Type": "application/json" }, body: body,
    }).then(...note("cors json went through", "cors json refused"));
    // reading the runs across origins
    await fetch(target + "/api/runs", { credentials: "include" })
      .then((r) => r.text())
      .then((t) => window.attempts.push("read: " + t), () => window.attempts.push("read refused"));
    // an HTML form, the oldest way
    await new Promise((resolve) => {
      document.getElementById("sink").addEventListener("load", resolve, { once: true });
      document.getElementById("form").submit();
    });
    window.attempts.push("form");
    // a text/plain form whose one field spells a JSON body: {"input": 1, "pad": "="}
    await new Promise((resolve) => {
      document.getElementById("sink2").addEventListener("load", resolve, { once: true });
      document.getElementById("plain").submit();
    });
    window.attempts.push("plain form");
    window.done = true;
  }
  attack();
</script>
</body></html>
"""


def run_total(base_url: str) -> int:
    with httpx.Client(base_url=base_url, headers={"Authorization": f"Bearer {TOKEN}"}) as c:
        total: int = c.get("/api/runs").json()["total"]
        return total


@pytest.mark.parametrize("target", ["local_server", "server"])
def test_a_page_of_another_origin_cannot_use_the_server(
    request: pytest.FixtureRequest, evil_site: tuple[str, Path], page: Any, target: str
) -> None:
    """The CSRF of a --no-auth server (and of a signed-in browser): a page on another
    origin posts to the API with a no-cors fetch, an HTML form and a JSON fetch, reads
    the runs, and frames the dashboard. Nothing is created, nothing is read, nothing is
    framed."""
    victim: Server = request.getfixturevalue(target)
    if target == "server":  # the victim's browser is signed in to the server
        sign_in(page, victim.url)
    before = run_total(victim.url)
    refused: list[str] = []
    page.on("console", lambda message: refused.append(message.text))
    evil_url, folder = evil_site
    (folder / f"attack-{target}.html").write_text(ATTACK.replace("TARGET", victim.url))
    page.goto(f"{evil_url}/attack-{target}.html")
    page.wait_for_function("window.done === true")
    attempts = page.evaluate("window.attempts")
    assert "cors json refused" in attempts, attempts
    assert "read refused" in attempts, attempts
    assert not [a for a in attempts if a.startswith("read: ")], attempts
    assert "plain form" in attempts, attempts
    assert run_total(victim.url) == before  # not one run was started
    if target == "local_server":  # where anyone may register graphs, the page may not
        with httpx.Client(base_url=victim.url, headers={"Content-Type": "application/json"}) as c:
            graphs = c.get("/api/graphs").json()["graphs"]
        assert "planted" not in [g["name"] for g in graphs], graphs
    framed = next(f for f in page.frames if f.name != "sink" and f != page.main_frame)
    assert 'data-page="runs"' not in framed.content()  # no dashboard inside the frame
    assert any("frame-ancestors 'none'" in text for text in refused), refused


def gate_open(api: Any, run_id: str) -> None:
    def listed() -> bool:
        gates = api.get("/api/approvals").json()["approvals"]
        return any(g["run_id"] == run_id for g in gates)

    wait_for(listed)


def test_a_user_decides_an_approval_and_the_run_completes_without_a_reload(
    server: Server, api: Any, page: Any
) -> None:
    run_id = start(api, "refund")["run_id"]
    gate_open(api, run_id)
    sign_in(page, server.url)
    page.goto(f"{server.url}/runs/{run_id}")
    status = page.locator("#run-status")
    expect(status).to_have_text("running")
    expect(page.locator("#progress-text")).to_have_text("50%")
    form = page.locator('#approvals form.approval[data-gate="refund"]')
    expect(form).to_be_visible()
    page.evaluate("window.__sameDocument = 'yes'")

    form.get_by_label("Approved").check()
    form.get_by_label("Amount").fill("0")  # the schema wants at least 1: refused, kept open
    form.get_by_role("button", name="Decide").click()
    expect(form.locator(".form-error")).to_contain_text("amount")
    assert api.get(f"/api/runs/{run_id}").json()["status"] == "running"

    form.get_by_label("Amount").fill("25")
    form.get_by_label("Note").fill("refund the shipping")
    form.get_by_role("button", name="Decide").click()

    expect(status).to_have_text("completed")
    expect(page.locator("#run-output")).to_contain_text('"note": "refund the shipping"')
    expect(page.locator("#progress-text")).to_have_text("100%")
    expect(page.locator('#decisions li[data-outcome="accepted"]')).to_contain_text("alice")
    expect(page.locator('#decisions li[data-outcome="refused"]')).to_have_count(1)
    expect(page.locator("#approvals-card")).to_be_hidden()
    assert page.evaluate("window.__sameDocument") == "yes", "the page was reloaded"
    ARTIFACTS.mkdir(exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / "run-page-approval.png"), full_page=True)


def test_the_runs_page_lists_approvals_to_decide(server: Server, api: Any, page: Any) -> None:
    run_id = start(api, "refund")["run_id"]
    gate_open(api, run_id)
    sign_in(page, server.url)
    form = page.locator(f'#approvals form.approval[data-run-id="{run_id}"]')
    expect(form).to_be_visible()
    form.get_by_label("Approved").check()
    form.get_by_role("button", name="Decide").click()
    expect(form).to_have_count(0)
    wait_for(lambda: api.get(f"/api/runs/{run_id}").json()["status"] == "completed")
    assert api.get(f"/api/runs/{run_id}").json()["output"]["approved"] is True


def test_rerun_from_a_step(server: Server, api: Any, page: Any) -> None:
    run = start(api, "approval")
    run_id = run["run_id"]
    wait_for(
        lambda: any(s["kind"] == "event" for s in api.get(f"/api/runs/{run_id}").json()["steps"])
    )
    api.post(f"/api/runs/{run_id}/events/approve", json="ok")
    wait_for(lambda: api.get(f"/api/runs/{run_id}").json()["status"] == "completed")
    sign_in(page, server.url)
    page.goto(f"{server.url}/runs/{run_id}")
    expect(page.locator("#run-status")).to_have_text("completed")
    row = page.locator('details.step[data-key="record"]')
    row.locator("summary").click()
    row.get_by_role("button", name="Rerun from this step").click()
    page.wait_for_url(lambda url: run_id not in url)
    expect(page.locator("#run-status")).to_have_text("completed")
    expect(page.locator("#run-meta")).to_contain_text("Forked from")
    forked_id = page.locator("#run").get_attribute("data-run-id")
    forked = api.get(f"/api/runs/{forked_id}").json()
    assert forked["forked_from"] == run_id
    assert forked["output"] == api.get(f"/api/runs/{run_id}").json()["output"]


# -- finding runs, their families, events, copying, phones -----------------------------------
def test_short_ids_differ_and_a_run_is_found_by_its_id(server: Server, api: Any, page: Any) -> None:
    ids = [start(api, "notify", i, wait=True)["id"] for i in range(4)]
    sign_in(page, server.url)
    for run_id in ids:
        expect(page.locator(f'tr[data-run-id="{run_id}"]')).to_be_visible()
    shown = [page.locator(f'tr[data-run-id="{r}"] td a').first.inner_text() for r in ids]
    # runs started within the same minute still read differently (UUIDv7: the random end)
    assert shown == [r[-8:] for r in ids] and len(set(shown)) == len(ids)
    title = page.locator(f'tr[data-run-id="{ids[0]}"] td a').first.get_attribute("title")
    assert title == ids[0]

    page.fill("#f-id", ids[2][-8:].upper())  # typed as read, in any case
    expect(page.locator("#runs-body tr[data-run-id]")).to_have_count(1)
    expect(page.locator(f'tr[data-run-id="{ids[2]}"]')).to_be_visible()
    assert f"id={ids[2][-8:].upper()}" in page.url
    page.reload()  # the address keeps the search
    expect(page.locator("#f-id")).to_have_value(ids[2][-8:].upper())
    expect(page.locator("#runs-body tr[data-run-id]")).to_have_count(1)
    page.fill("#f-id", "no-such-run")
    expect(page.locator("#runs-body")).to_contain_text("No runs match.")


def test_the_time_filter_and_a_malformed_time(server: Server, api: Any, page: Any) -> None:
    run_id = start(api, "notify", 5, wait=True)["id"]
    sign_in(page, server.url)
    row = page.locator(f'tr[data-run-id="{run_id}"]')
    page.select_option("#f-when", "1h")
    expect(row).to_be_visible()
    assert "when=1h" in page.url
    page.select_option("#f-when", "range")
    expect(page.locator("#f-since")).to_be_visible()
    page.fill("#f-since", "2000-01-01T00:00:00")
    page.fill("#f-until", "2000-01-02T00:00:00")
    page.locator("#f-until").dispatch_event("change")
    expect(page.locator("#runs-body")).to_contain_text("No runs match.")
    assert "since=2000-01-0" in page.url
    page.fill("#f-until", "")
    page.locator("#f-until").dispatch_event("change")
    expect(row).to_be_visible()  # since 2000, no end

    # a time that is not one, from a hand-edited link: a message, not an error page
    response = page.goto(f"{server.url}/?since=last-tuesday")
    assert response is not None and response.status == 200
    expect(page.locator("#notice")).to_contain_text("is not a date and time")
    expect(page.locator("#notice")).to_contain_text("ISO 8601")
    expect(page.locator("#runs-body")).to_contain_text("Fix the filters")
    api_answer = api.get("/api/runs", params={"since": "last-tuesday"})
    assert api_answer.status_code == 422


def test_child_runs_fold_under_their_parents(server: Server, api: Any, page: Any) -> None:
    top = start(api, "family", 3, wait=True)
    assert top["status"] == "completed"
    kid = top["children"][0]["id"]
    grandkid = api.get(f"/api/runs/{kid}").json()["children"][0]["id"]
    sign_in(page, server.url)
    parent_row = page.locator(f'tr[data-run-id="{top["id"]}"]')
    expect(parent_row).to_be_visible()
    expect(page.locator(f'tr[data-run-id="{kid}"]')).to_have_count(0)  # folded
    parent_row.locator("button.fold").click()
    kid_row = page.locator(f'tr[data-run-id="{kid}"]')
    expect(kid_row).to_have_attribute("data-depth", "1")
    kid_row.locator("button.fold").click()
    expect(page.locator(f'tr[data-run-id="{grandkid}"]')).to_have_attribute("data-depth", "2")
    # the rows stay open across the list's refreshes
    page.wait_for_timeout(2500)
    expect(page.locator(f'tr[data-run-id="{grandkid}"]')).to_be_visible()
    # unfolded, every run is a row of its own that names its parent
    page.uncheck("#f-fold")
    expect(page.locator(f'tr[data-run-id="{kid}"] .parent-link a')).to_have_text(top["id"][-8:])

    # the run page shows the whole family as a tree
    page.goto(f"{server.url}/runs/{top['id']}")
    expect(page.locator(f'#children li[data-run-id="{kid}"]')).to_be_visible()
    nested = page.locator(f'#children li[data-run-id="{kid}"] ul.tree li[data-run-id="{grandkid}"]')
    expect(nested).to_be_visible()
    nested.locator("a").click()
    expect(page.locator("#run-status")).to_have_text("completed")
    expect(page.locator("#crumb-parent a")).to_have_text(kid[-8:])


def test_an_event_is_sent_from_the_run_page(server: Server, api: Any, page: Any) -> None:
    run_id = start(api, "approval")["run_id"]
    wait_for(
        lambda: any(s["kind"] == "event" for s in api.get(f"/api/runs/{run_id}").json()["steps"])
    )
    sign_in(page, server.url, then=f"/runs/{run_id}")
    expect(page.locator("#run-status")).to_have_text("running")
    expect(page.locator("#event-waits")).to_contain_text("approve")
    expect(page.locator("#event-name")).to_have_value("approve")
    send = page.locator("#event-send")

    page.fill("#event-payload", "{not json")
    send.click()
    expect(page.locator("#event-error")).to_contain_text("not JSON")
    page.fill("#event-name", "a/b")
    page.fill("#event-payload", '"ok"')
    send.click()
    expect(page.locator("#event-error")).to_contain_text('no "/"')
    assert api.get(f"/api/runs/{run_id}").json()["status"] == "running"

    page.fill("#event-name", "approve")
    send.click()
    expect(page.locator("#notice")).to_contain_text("the run was waiting for it")
    expect(page.locator("#run-status")).to_have_text("completed")
    expect(page.locator("#run-output")).to_contain_text('"decision": "ok"')
    # a finished run takes no events: the button says so by its looks
    expect(send).to_be_disabled()
    looks = page.evaluate(
        "(() => { const s = getComputedStyle(document.getElementById('event-send'));"
        " return [s.cursor, s.borderStyle, Number(s.opacity)]; })()"
    )
    assert looks[0] == "not-allowed" and looks[1] == "dashed" and looks[2] < 1


def test_another_users_run_takes_no_event_from_the_page(server: Server, page: Any) -> None:
    with httpx.Client(
        base_url=server.url, headers={"Authorization": f"Bearer {BOB_TOKEN}"}, timeout=30
    ) as bob:
        theirs = start(bob, "approval")["run_id"]
        sign_in(page, server.url, then=f"/runs/{theirs}")
        expect(page.locator("#notice")).to_contain_text("belongs to another user")
        page.fill("#event-name", "approve")
        page.fill("#event-payload", '"from alice"')
        page.locator("#event-send").click()
        expect(page.locator("#event-error")).to_contain_text("may not send events")
        steps = bob.get(f"/api/runs/{theirs}").json()["steps"]
        assert not [s for s in steps if s["kind"] == "event" and s["status"] == "succeeded"]
        bob.post(f"/api/runs/{theirs}/cancel")


def test_copy_buttons_copy_the_run_id_and_the_output(server: Server, api: Any, page: Any) -> None:
    run = start(api, "notify", 9, wait=True)
    page.context.grant_permissions(["clipboard-read", "clipboard-write"], origin=server.url)
    sign_in(page, server.url, then=f"/runs/{run['id']}")
    expect(page.locator("#run-status")).to_have_text("completed")
    page.locator("#run-meta button.copy").click()
    expect(page.locator("#run-meta button.copy")).to_have_text("Copied")
    assert page.evaluate("navigator.clipboard.readText()") == run["id"]
    page.locator("#output-tools button.copy").click()
    assert page.evaluate("navigator.clipboard.readText()") == "9"
    page.goto(server.url + "/")
    page.locator(f'tr[data-run-id="{run["id"]}"] button.copy').click()
    assert page.evaluate("navigator.clipboard.readText()") == run["id"]


CLIPPED = """() => {
  const out = [];
  for (const el of document.querySelectorAll('#runs-table td, #runs-table th, .filters label')) {
    if (el.offsetParent === null) continue;  // not shown
    if (el.scrollWidth > el.clientWidth + 1) out.push(el.outerHTML.slice(0, 120));
  }
  const table = document.getElementById('runs-table').getBoundingClientRect();
  return {
    clipped: out,
    table: [table.left, table.right],
    page: document.documentElement.scrollWidth,
    viewport: window.innerWidth,
  };
}"""


def test_the_runs_list_on_a_phone_clips_no_column(
    server: Server, api: Any, page: Any, tmp_path: Path
) -> None:
    start(api, "a_workflow_with_a_rather_long_name_for_a_phone", wait=True)
    top = start(api, "family", 4, wait=True)
    start(api, "checkout", {"amount": 1, "flag": str(tmp_path / "never")}, wait=True)
    page.set_viewport_size({"width": 390, "height": 844})
    sign_in(page, server.url)
    expect(page.locator(f'tr[data-run-id="{top["id"]}"]')).to_be_visible()
    page.locator(f'tr[data-run-id="{top["id"]}"] button.fold').click()
    expect(page.locator('tr[data-depth="1"]').first).to_be_visible()
    measured = page.evaluate(CLIPPED)
    shot = tmp_path / "runs-phone.png"
    page.screenshot(path=str(shot), full_page=True)
    ARTIFACTS.mkdir(exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / "runs-page-phone.png"), full_page=True)
    assert shot.stat().st_size > 0
    assert measured["clipped"] == [], measured["clipped"]
    assert measured["table"][0] >= 0 and measured["table"][1] <= measured["viewport"]
    assert measured["page"] <= measured["viewport"], "the page scrolls sideways"
    # every column's value is on the card, with its label where the header is gone
    card = page.locator(f'tr[data-run-id="{top["id"]}"]')
    for label in ("Run", "Workflow", "Status", "Started", "Duration", "Owner"):
        expect(card.locator(f'td[data-label="{label}"]')).to_be_visible()


#: what the schedules page shows in a cell with nothing in it (an en dash)
NONE = "\u2013"


def test_the_schedules_page_shows_ticks_last_runs_and_queue_depth(
    server: Server, api: Any, page: Any
) -> None:
    """A stored schedule with its next tick; Trigger starts a run that becomes its last
    run; Pause clears the next tick and Resume brings it back; the queue table counts the
    run holding the slot and those waiting behind it. All without a reload."""
    made = api.post(
        "/api/schedules",
        json={"name": "nightly-report", "workflow": "notify", "cron": "0 3 * * *", "input": 7},
    )
    assert made.status_code == 201, made.text
    holders = [start(api, "held")["run_id"] for _ in range(3)]
    try:
        sign_in(page, server.url, then="/schedules")
        row = page.locator('tr[data-schedule="nightly-report"]')
        cells = row.locator("td")
        expect(cells.nth(2)).to_have_text("0 3 * * *")
        expect(cells.nth(3)).to_have_text("active")
        expect(cells.nth(4)).not_to_have_text(NONE)  # the next tick, in the reader's time
        expect(cells.nth(5)).to_have_text(NONE)  # no run yet

        row.get_by_role("button", name="Trigger").click()
        expect(page.locator("#notice")).to_contain_text("started run schedule:nightly-report:")
        expect(cells.nth(5)).to_contain_text("schedule:nightly-report:")
        expect(cells.nth(5)).to_contain_text("completed")  # the page keeps it live

        row.get_by_role("button", name="Pause").click()
        expect(cells.nth(3)).to_have_text("paused")
        expect(cells.nth(4)).to_have_text(NONE)
        row.get_by_role("button", name="Resume").click()
        expect(cells.nth(3)).to_have_text("active")
        expect(cells.nth(4)).not_to_have_text(NONE)

        queue = page.locator('tr[data-queue="one-by-one"]').locator("td")
        expect(queue.nth(1)).to_have_text("2")  # queued behind the slot
        expect(queue.nth(2)).to_have_text("1")  # holding it
        expect(queue.nth(3)).to_have_text("concurrency 1")
    finally:
        for run_id in holders:
            api.post(f"/api/runs/{run_id}/events/go", json={"data": None})
        api.post("/api/schedules/nightly-report/pause", json={})
    for run_id in holders:
        wait_for(
            lambda run_id=run_id: api.get(f"/api/runs/{run_id}").json()["status"] == "completed",
            timeout=30,
        )
