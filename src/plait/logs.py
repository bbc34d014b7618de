"""Log lines a person or a log pipeline can follow: which run, workflow, step and attempt
each is about, as text or as one JSON object per line (``plait worker --log-format json``)."""

from __future__ import annotations

import json
import logging
import sys
import time
from typing import Any

from plait.observe import WORKING_ON

#: the formats ``plait worker --log-format`` accepts
LOG_FORMATS = ("text", "json")
_TEXT = "%(asctime)s %(levelname)s %(name)s: %(message)s%(plait_where)s"


class WorkContext(logging.Filter):
    """Adds ``run_id``, ``workflow``, ``step`` and ``attempt`` to every record, from the
    pass or attempt the logging task works on (None outside one); values given with
    ``extra`` win."""

    def filter(self, record: logging.LogRecord) -> bool:
        working = WORKING_ON.get()
        run_id, workflow, step, attempt = (
            working if working is not None else (None, None, None, None)
        )
        fields = record.__dict__  # where ``extra`` puts its values
        where = [
            f"{name}={value}"
            for name, value in (
                ("run", fields.setdefault("run_id", run_id)),
                ("workflow", fields.setdefault("workflow", workflow)),
                ("step", fields.setdefault("step", step)),
                ("attempt", fields.setdefault("attempt", attempt)),
            )
            if value is not None
        ]
        record.plait_where = f" [{' '.join(where)}]" if where else ""
        return True


class JsonFormatter(logging.Formatter):
    """One JSON object per line: time (UTC, ISO 8601), level, logger, message, run_id,
    workflow, step, attempt, and the traceback when there is one (a live exception's, or
    the one a failed step or run stored)."""

    def format(self, record: logging.LogRecord) -> str:
        line: dict[str, Any] = {
            "time": _iso(record.created),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
            "run_id": getattr(record, "run_id", None),
            "workflow": getattr(record, "workflow", None),
            "step": getattr(record, "step", None),
            "attempt": getattr(record, "attempt", None),
        }
        if record.exc_info:
            line["exception"] = self.formatException(record.exc_info)
        elif record.exc_text:
            line["exception"] = record.exc_text
        return json.dumps(line, default=str)


def configure(log_format: str, level: int = logging.INFO) -> None:
    """Send every log line of the process to stderr in ``log_format`` (``text`` or
    ``json``), each with the run, workflow, step and attempt it is about."""
    if log_format not in LOG_FORMATS:
        raise ValueError(f"invalid log format {log_format!r}: use one of {', '.join(LOG_FORMATS)}")
    handler = logging.StreamHandler(sys.stderr)
    handler.addFilter(WorkContext())
    handler.setFormatter(JsonFormatter() if log_format == "json" else logging.Formatter(_TEXT))
    root = logging.getLogger()
    for old in list(root.handlers):
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(level)


def _iso(created: float) -> str:
    stamp = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(created))
    return f"{stamp}.{int(created % 1 * 1000):03d}Z"


__all__ = ["LOG_FORMATS", "JsonFormatter", "WorkContext", "configure"]
