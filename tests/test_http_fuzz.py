"""Fuzzing the live server from its own OpenAPI document with schemathesis: for every
operation, requests that fit the document and requests that break it, on each store. No
answer may be a 5xx, and every answer must be one the document lists, with its media type
and its schema (``/openapi.json`` is the contract clients build on).

Bounded: a fixed number of examples per operation (about 130 requests per store), drawn
deterministically (the same requests on every run, so a failure reproduces).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import pytest

import plait

schemathesis = pytest.importorskip("schemathesis", reason="schemathesis is not installed")
requests = pytest.importorskip("requests")
pytest.importorskip("uvicorn", reason="the http extra (uvicorn) is not installed")

from hypothesis import HealthCheck, Phase, given, settings  # noqa: E402
from hypothesis.errors import Unsatisfiable  # noqa: E402
from schemathesis.checks import CHECKS, load_all_checks  # noqa: E402

from conftest import STORES  # noqa: E402
from live_server import LiveServer  # noqa: E402
from plait.http import Principal, create_app  # noqa: E402
from plait.http.openapi import openapi_document  # noqa: E402

#: examples per operation that fit the document, and that break it; and per run that
#: exists, for the operations on one run (random run ids only ever find no run)
POSITIVE, NEGATIVE, PER_RUN = 5, 3, 1
#: runs made before fuzzing, one per settled status: a stream of each ends at once
KNOWN_RUNS = {"fuzz-completed": "echo", "fuzz-suspended": "pauser", "fuzz-failed": "failer"}

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


# Every workflow of this app settles at once, so a fuzzed ``wait: true`` never hangs.
DOCUMENT = openapi_document(sorted(app.workflows))
SCHEMA = schemathesis.openapi.from_dict(DOCUMENT)
OPERATIONS = {op.label: op for op in (result.ok() for result in SCHEMA.get_all_operations())}
TOKEN = "fuzz-token"
HEADERS = {"Authorization": f"Bearer {TOKEN}"}

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
        for run_id, workflow in KNOWN_RUNS.items():
            server.call(engine.start(workflow, {"n": 1}, run_id=run_id, owner="fuzzer"))
            server.call(engine.wait(run_id, timeout=30))
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
    fuzz(operation, schemathesis.GenerationMode.POSITIVE, POSITIVE, live, session)
    # nothing about an operation without parameters or body can break the document:
    # there is no negative example to send
    with contextlib.suppress(Unsatisfiable):
        fuzz(operation, schemathesis.GenerationMode.NEGATIVE, NEGATIVE, live, session)
    if "{run_id}" in operation.path:
        for run_id in KNOWN_RUNS:
            fuzz(
                operation,
                schemathesis.GenerationMode.POSITIVE,
                PER_RUN,
                live,
                session,
                path_parameters={"run_id": run_id},
            )


def fuzz(
    operation: Any, mode: Any, examples: int, live: LiveServer, session: Any, **fixed: Any
) -> None:
    """Send ``examples`` requests of ``mode`` to ``operation`` and check each answer;
    ``fixed`` holds parts of the request that are not generated (a run id)."""
    checks = CHECKED + (REJECTED if mode == schemathesis.GenerationMode.NEGATIVE else [])

    @settings(
        max_examples=examples,
        deadline=None,
        database=None,
        derandomize=True,
        phases=[Phase.explicit, Phase.generate],
        suppress_health_check=list(HealthCheck),
    )
    @given(case=operation.as_strategy(generation_mode=mode, headers=HEADERS, **fixed))
    def call(case: Any) -> None:
        response = case.call(base_url=live.url, session=session, timeout=30)
        case.validate_response(response, checks=checks)

    call()
