"""What the worker logs when work fails: a failed attempt at WARNING, a failed run at
ERROR, each with the exception's type, message and traceback, and the workflow of every
line (``log_work``, always on in ``plait worker``), as text and as JSON lines."""

from __future__ import annotations

import io
import json
import logging
from collections.abc import Callable, Iterator

import pytest

import plait
from plait.logs import JsonFormatter, WorkContext
from plait.testing import TestEngine
from support.polling import eventually


class PartnerDown(Exception):
    """The partner's API refused the call."""


def _app() -> plait.App:
    app = plait.App("failing")

    @app.function(retries=1, retry_delay=0.01)
    def sync_partner(data: str) -> str:
        raise PartnerDown(f"partner refused {data}")

    @app.workflow
    async def partner_sync(wf: plait.Workflow, data: str) -> str:
        return await wf.do("call partner", sync_partner, data)

    return app


@pytest.fixture
def worker_lines() -> Iterator[tuple[io.StringIO, io.StringIO]]:
    """The ``plait.worker`` lines, as JSON and as text, with the filter and formatters
    ``plait worker --log-format`` configures."""
    as_json, as_text = io.StringIO(), io.StringIO()
    handlers = []
    for stream, formatter in (
        (as_json, JsonFormatter()),
        (as_text, logging.Formatter("%(levelname)s %(message)s%(plait_where)s")),
    ):
        handler = logging.StreamHandler(stream)
        handler.addFilter(WorkContext())
        handler.setFormatter(formatter)
        handlers.append(handler)
    logger = logging.getLogger("plait.worker")
    level = logger.level
    logger.setLevel(logging.INFO)
    for handler in handlers:
        logger.addHandler(handler)
    try:
        yield as_json, as_text
    finally:
        for handler in handlers:
            logger.removeHandler(handler)
        logger.setLevel(level)


async def _failed_run(database: str, logged: Callable[[str], bool]) -> str:
    """Start a run that fails; return its id once ``logged(run_id)`` says its end was
    logged (the worker logs it just after the end is stored, which ``wait`` sees)."""
    async with TestEngine(_app(), database, log_work=True) as env:
        run_id = await env.start("partner_sync", "acme")
        run = await env.wait(run_id, timeout=10)
        assert run.status == "failed"

        async def ended() -> bool:
            return logged(run_id)

        await eventually(ended, what="the log line of the run's end")
        return run_id


async def test_failed_attempts_warn_and_a_failed_run_is_an_error(
    database: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="plait.worker")
    run_id = await _failed_run(
        database,
        lambda run_id: any(f"run {run_id} (" in r.getMessage() for r in caplog.records),
    )
    failed = [r for r in caplog.records if "failed after" in r.getMessage()]
    assert [r.levelno for r in failed] == [logging.WARNING, logging.WARNING]
    first, last = failed
    assert "retry 1 of 1" in first.getMessage() and "retry" not in last.getMessage()
    for record in failed:
        assert "PartnerDown: partner refused acme" in record.getMessage()
        # the stored traceback, printed after the line by any formatter
        assert record.exc_text and record.exc_text.startswith("Traceback")
        assert "raise PartnerDown" in record.exc_text
        assert "PartnerDown: partner refused acme" in logging.Formatter().format(record)
    (ended,) = [r for r in caplog.records if r.getMessage().startswith(f"run {run_id} ")]
    assert ended.levelno == logging.ERROR
    assert ended.getMessage().startswith(f"run {run_id} (partner_sync) is now failed: PartnerDown")
    assert "partner refused acme" in ended.getMessage()
    assert ended.exc_text and "raise PartnerDown" in ended.exc_text
    assert getattr(ended, "workflow", None) == "partner_sync"
    # lines that are not about a failure stay at INFO, with no traceback
    started = [r for r in caplog.records if r.getMessage().endswith("started")]
    assert started and all(r.levelno == logging.INFO and not r.exc_text for r in started)


async def test_json_lines_carry_the_workflow_and_the_traceback(
    database: str, worker_lines: tuple[io.StringIO, io.StringIO]
) -> None:
    as_json, as_text = worker_lines
    run_id = await _failed_run(database, lambda run_id: f"run {run_id} (" in as_json.getvalue())
    lines = [json.loads(line) for line in as_json.getvalue().splitlines()]
    about_run = [ln for ln in lines if ln["run_id"] == run_id]
    assert about_run and all(ln["workflow"] == "partner_sync" for ln in about_run)
    warnings = [ln for ln in about_run if ln["level"] == "WARNING"]
    assert [ln["attempt"] for ln in warnings] == [1, 2]
    assert all(ln["step"] == "call partner" for ln in warnings)
    (error,) = [ln for ln in about_run if ln["level"] == "ERROR"]
    for line in [*warnings, error]:
        assert "PartnerDown: partner refused acme" in line["message"]
        assert "Traceback" in line["exception"] and "raise PartnerDown" in line["exception"]
    assert all("exception" not in ln for ln in about_run if ln["level"] == "INFO")
    text = as_text.getvalue()
    assert f"[run={run_id} workflow=partner_sync step=call partner attempt=1]" in text
    assert "ERROR run " in text and "\nTraceback (most recent call last):" in text


def test_a_line_outside_any_run_has_no_workflow() -> None:
    record = logging.LogRecord("plait.worker", logging.INFO, __file__, 1, "idle", (), None)
    WorkContext().filter(record)
    line = json.loads(JsonFormatter().format(record))
    assert line["workflow"] is None and line["run_id"] is None and "exception" not in line
