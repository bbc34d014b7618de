"""Fuzzing the live server from its own OpenAPI document with schemathesis: for every
operation, requests that fit the document and requests that break it, on each store. No
answer may be a 5xx, and every answer must be one the document lists, with its media type
and its schema (``/openapi.json`` is the contract clients build on).

Random ids and names only ever find nothing, so each operation is also sent requests about
things that exist: runs in every state (made afresh for each operation, since operations
change them), a schedule, the workflows a run can be started with, and bodies that name
real steps, functions and workflows. Some requests get a NUL character in one of their
texts: the generator seldom makes one, and SQLite stores what PostgreSQL refuses, so only
these find a store error that escapes as a 500. Every request that changes something says
``Content-Type: application/json``, as the document asks even without a body, so that it
reaches its route rather than the 415 in front of it.

Bounded: a fixed number of examples per operation (about 2,000 requests per store), drawn
deterministically (the same requests on every run, so a failure reproduces).
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import re
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest

import plait

schemathesis = pytest.importorskip("schemathesis", reason="schemathesis is not installed")
requests = pytest.importorskip("requests")
pytest.importorskip("uvicorn", reason="the http extra (uvicorn) is not installed")

from hypothesis import HealthCheck, Phase, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402
from hypothesis.errors import Unsatisfiable  # noqa: E402
from schemathesis.checks import CHECKS, load_all_checks  # noqa: E402

from plait.http import Principal, create_app  # noqa: E402
from plait.http.openapi import openapi_document  # noqa: E402
from support.live_server import LiveServer  # noqa: E402
from support.stores import STORES  # noqa: E402

#: examples per operation that fit the document, and that break it; an operation that
#: takes nothing but path parameters gets ``PATH_ONLY`` (random ids only find nothing, and
#: the known ones are a handful)
POSITIVE, NEGATIVE, PATH_ONLY = 120, 50, 40

app = plait.App("fuzz")


@app.function
async def echo_step(data: Any) -> Any:
    return data


@app.function(retries=0)
async def fail_step(data: Any) -> Any:
    raise RuntimeError("failing on purpose")


@app.workflow
async def echo(wf: plait.Workflow, data: Any) -> Any:
    return await wf.do("echo", echo_step, data)


@app.workflow
async def pauser(wf: plait.Workflow, data: Any) -> Any:
    await wf.suspend("review")
    return data


@app.workflow
async def failer(wf: plait.Workflow, data: Any) -> Any:
    return await wf.do("fail", fail_step, data)


@app.workflow
async def waiter(wf: plait.Workflow, data: Any) -> Any:
    return await wf.wait_for_event("go")


@app.workflow
async def gated(wf: plait.Workflow, data: Any) -> Any:
    return (await wf.approval("ok")).data


#: the workflows the document offers a run to be started with: each settles at once, so
#: a fuzzed ``wait: true`` never waits long (``waiter`` and ``gated`` would wait forever)
SETTLING = ("echo", "failer", "pauser")
#: the runs made for each operation on one run: kind -> (workflow, the step it waits at)
SEEDS = {
    "completed": ("echo", None),
    "suspended": ("pauser", None),
    "failed": ("failer", None),
    "waiting": ("waiter", "event"),
    "gated": ("gated", "approval"),
}
SCHEDULE = "fuzz-schedule"

DOCUMENT = openapi_document(SETTLING)
SCHEMA = schemathesis.openapi.from_dict(DOCUMENT)
OPERATIONS = {op.label: op for op in (result.ok() for result in SCHEMA.get_all_operations())}
TOKEN = "fuzz-token"
HEADERS = {"Authorization": f"Bearer {TOKEN}"}
CHANGES = {**HEADERS, "Content-Type": "application/json"}

load_all_checks()
CHECKED = CHECKS.get_by_names(
    [
        "not_a_server_error",
        "status_code_conformance",
        "content_type_conformance",
        "response_schema_conformance",
    ]
)
REJECTED = CHECKS.get_by_names(["negative_data_rejection"])

Body = dict[str, Any]


@dataclasses.dataclass(frozen=True)
class Known:
    """Requests about something that exists: ``path`` fixes path parameters (the rest is
    generated), and ``body`` makes a body that fits the document name real things."""

    path: dict[str, str] = dataclasses.field(default_factory=dict[str, str])
    body: Callable[[Body], None] | None = None


@pytest.fixture(scope="module", params=STORES)
def live(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[LiveServer]:
    if request.param == "sqlite":
        database = f"sqlite:///{tmp_path_factory.mktemp('fuzz') / 'plait.db'}"
    else:
        database = request.getfixturevalue("pg_cluster").create_database("fuzz")
    engine = plait.Engine(app, database, poll_interval=0.2)
    tokens = {TOKEN: Principal("fuzzer", frozenset({"graphs"}))}
    with LiveServer(create_app(engine, tokens=tokens)) as server:
        server.call(engine.create_schedule(SCHEDULE, workflow="echo", every="1h", owner="fuzzer"))
        yield server


@pytest.fixture(scope="module")
def session() -> Iterator[Any]:
    with requests.Session() as made:
        yield made


@pytest.mark.parametrize("label", sorted(OPERATIONS))
def test_fuzzed_requests_get_documented_answers_and_never_a_5xx(
    live: LiveServer, session: Any, label: str
) -> None:
    operation = OPERATIONS[label]
    known = known_requests(live, operation)
    examples = POSITIVE if _takes_more(operation) else PATH_ONLY
    fuzz(operation, schemathesis.GenerationMode.POSITIVE, examples, live, session, known)
    # a request can break the document only where it constrains something: the body or
    # the query (any string is a path parameter the document allows)
    if any(body.is_negatable for body in operation.body) or list(operation.query):
        # Unsatisfiable: the only part to break is one a known request fixes
        with contextlib.suppress(Unsatisfiable):
            fuzz(operation, schemathesis.GenerationMode.NEGATIVE, NEGATIVE, live, session, known)


def _takes_more(operation: Any) -> bool:
    """Whether ``operation`` takes more than path parameters: a body or a query."""
    return bool(list(operation.body) or list(operation.query))


def known_requests(live: LiveServer, operation: Any) -> list[Known]:
    """The requests about existing things that ``operation`` gets besides random ones."""
    path, method = operation.path, operation.method.upper()
    if "{run_id}" in path:
        runs = seed_runs(live, re.sub(r"\W+", "-", f"{method}{path}").strip("-"))
        if path.endswith("/stream"):
            # a stream lasts as long as its run waits: only settled runs end theirs
            runs = {kind: run for kind, run in runs.items() if SEEDS[kind][1] is None}
        if path.endswith(("/requests/{name}", "/streams/{name}")):
            # a request waits its timeout (up to minutes) for a live run to answer, a
            # suspended one too: only ended runs answer at once (409); a run's stream
            # lasts until the run ends, through a suspend
            runs = {kind: run for kind, run in runs.items() if kind in ("completed", "failed")}
        known = [Known({"run_id": run_id}) for run_id, _first in runs.values()]
        if path.endswith("/events/{name}"):
            known.append(Known({"run_id": runs["waiting"][0], "name": "go"}))
        if path.endswith("/approvals/{name}"):
            known.append(Known({"run_id": runs["gated"][0], "name": "ok"}))
        if path.endswith("/fork"):
            known += [
                Known({"run_id": run_id}, _setting(from_step=first))
                for run_id, first in runs.values()
            ]
        return known
    if path.startswith("/api/schedules/{name}"):
        # DELETE may have removed it: every operation on a schedule gets one that exists
        engine = live.web.state.engine
        live.call(engine.create_schedule(SCHEDULE, workflow="echo", every="1h", owner="fuzzer"))
        return [Known({"name": SCHEDULE})]
    if path == "/api/schedules" and method == "POST":
        # an input of the fuzzer's choosing, the rest a schedule that works
        fields = {"workflow": "echo", "every": "1h", "cron": None, "timezone": "UTC"}
        return [Known(body=_schedule_named(_setting(**fields, overlap="skip", catchup="0s")))]
    if path == "/api/graphs" and method == "POST":
        nodes = {"only": {"function": "echo_step"}}
        return [Known(body=_setting(definition={"nodes": nodes}))]
    if path == "/api/workflows/{name}/runs":
        return [Known({"name": name}) for name in SETTLING]
    if path == "/api/session" and method == "POST":
        return [Known(body=_setting(token=TOKEN))]
    return []


def _setting(**fields: Any) -> Callable[[Body], None]:
    def change(body: Body) -> None:
        body.update(fields)

    return change


def _schedule_named(change: Callable[[Body], None]) -> Callable[[Body], None]:
    """``change``, and the generated name cut down to what a schedule name may hold (it
    becomes part of run ids), so that most such requests make a schedule."""

    def named(body: Body) -> None:
        change(body)
        name = body.get("name")
        body["name"] = re.sub(r"[^A-Za-z0-9_-]", "", name)[:40] if isinstance(name, str) else ""
        body["name"] = body["name"] or "s"

    return named


def seed_runs(live: LiveServer, prefix: str) -> dict[str, tuple[str, str]]:
    """One run of each kind of ``SEEDS``, settled or waiting at its step; kind -> (run
    id, the key of its first step)."""
    engine: plait.Engine = live.web.state.engine
    made: dict[str, tuple[str, str]] = {}
    for kind, (workflow, waits_at) in SEEDS.items():
        run_id = live.call(engine.start(workflow, {"n": 1}, run_id=f"{prefix}-{kind}"))
        if waits_at is None:
            live.call(engine.wait(run_id, timeout=30))
        steps = _steps_when(live, engine, run_id, waits_at)
        made[kind] = (run_id, steps[0].key)
    return made


def _steps_when(
    live: LiveServer, engine: plait.Engine, run_id: str, waits_at: str | None
) -> list[Any]:
    """The run's steps once it has one (of kind ``waits_at``, when given)."""
    deadline = time.monotonic() + 30
    while True:
        steps = live.call(engine.get_steps(run_id))
        if steps and (waits_at is None or any(s.kind == waits_at for s in steps)):
            return steps
        assert time.monotonic() < deadline, f"run {run_id} never reached its {waits_at} step"
        time.sleep(0.01)


def _bounded(case: Any) -> Any:
    """A start that waits does so for a moment only: a fuzzed run may be delayed for
    years, and the document's default wait is five minutes."""
    if isinstance(case.body, dict) and case.body.get("wait") is True:
        case.body = {**case.body, "wait_timeout": 0.2}
    return case


def _known_body(change: Callable[[Body], None]) -> Callable[[Any], Any]:
    def apply(case: Any) -> Any:
        body: Body = dict(case.body) if isinstance(case.body, dict) else {}
        change(body)
        case.body = body
        return case

    return apply


def _nul_in_one(drawn: tuple[Any, int], *, in_path: bool = True) -> Any:
    """The case with a NUL character in one of its texts (a path parameter unless
    ``in_path`` is false, a query parameter or a field of the body), ``pick`` says which:
    the generator seldom makes one, and SQLite stores what PostgreSQL refuses."""
    case, pick = drawn
    spots = [("path", k) for k, v in (case.path_parameters or {}).items() if isinstance(v, str)]
    spots = spots if in_path else []
    spots += [("query", k) for k, v in (case.query or {}).items() if isinstance(v, str)]
    if isinstance(case.body, dict):
        spots += [("body", k) for k, v in case.body.items() if isinstance(v, str)]
    if not spots:
        return case
    where, key = spots[pick % len(spots)]
    if where == "path":  # path parameters are sent as they are, already escaped
        case.path_parameters = {**case.path_parameters, key: "%00" + case.path_parameters[key]}
    else:
        values = case.query if where == "query" else case.body
        text = values[key]
        changed = {**values, key: text[: len(text) // 2] + "\x00" + text[len(text) // 2 :]}
        if where == "query":
            case.query = changed
        else:
            case.body = changed
    return case


def strategy(operation: Any, mode: Any, known: list[Known]) -> Any:
    """Random requests, random ones with a NUL character, and requests about known
    things, in one stream of examples."""
    headers = CHANGES if operation.method.upper() in ("POST", "DELETE") else HEADERS
    positive = mode == schemathesis.GenerationMode.POSITIVE
    made = [operation.as_strategy(generation_mode=mode, headers=headers)]
    takes_more = _takes_more(operation)
    if positive and (takes_more or list(operation.path_parameters)):
        made.append(st.tuples(made[0], st.integers(min_value=0)).map(_nul_in_one))
    for item in known:
        drawn = operation.as_strategy(
            generation_mode=mode, headers=headers, path_parameters=item.path or None
        )
        if positive and item.body is not None:
            drawn = drawn.map(_known_body(item.body))
        made.append(drawn)
        if positive and takes_more:  # a NUL where a request about a known thing gets far
            odd = st.tuples(drawn, st.integers(min_value=0))
            made.append(odd.map(functools.partial(_nul_in_one, in_path=False)))
    combined = st.one_of(made)
    starts = operation.path == "/api/workflows/{name}/runs"
    return combined.map(_bounded) if positive and starts else combined


def fuzz(
    operation: Any, mode: Any, examples: int, live: LiveServer, session: Any, known: list[Known]
) -> None:
    """Send ``examples`` requests of ``mode`` to ``operation`` and check each answer."""
    checks = CHECKED + (REJECTED if mode == schemathesis.GenerationMode.NEGATIVE else [])

    @settings(
        max_examples=examples,
        deadline=None,
        database=None,
        derandomize=True,
        phases=[Phase.explicit, Phase.generate],
        suppress_health_check=list(HealthCheck),
    )
    @given(case=strategy(operation, mode, known))
    def call(case: Any) -> None:
        response = case.call(base_url=live.url, session=session, timeout=30)
        # a sign-in's cookie would make every later request one of a browser session
        session.cookies.clear()
        case.validate_response(response, checks=checks)

    call()
