"""Where SQL text chooses a run's, a step's or an attempt's status.

The stores only move rows: every status they write comes in as a parameter or an op's
field, chosen by ``runtime/runs.py`` or ``runtime/steps.py``. SQL may still read a status:
compare a column with one (``status = 'running'``, ``CASE status WHEN 'queued'``), or
filter on a list of them (``status IN (...)``, ``ARRAY['running', ...]``). Any other
status literal is a choice: in what a ``SET`` assigns to a status column (even compared
inside a ``CASE`` there: the status an assignment tests is handed in with the one it
writes), returned by a ``CASE`` (``THEN``/``ELSE``), inserted (``VALUES``), passed to a
function (``end_run(p_run, 'cancelled', ...)``) or a default (``coalesce(status,
'running')``, ``DEFAULT 'running'``).
"""

from __future__ import annotations

import re
from typing import get_args

from plait import statuses

#: every status of a run, a step or an attempt
STATUSES = frozenset(
    set(get_args(statuses.RunStatusName))
    | set(get_args(statuses.StepStatusName))
    | set(get_args(statuses.AttemptStatusName))
)

_TOKEN = re.compile(
    r"'(?:[^']|'')*'|\$\$|\bIS\s+(?:NOT\s+)?DISTINCT\s+FROM\b|<>|!=|[=(),\[\];]|\w+",
    re.IGNORECASE,
)
#: what a status literal may follow where it is read, not chosen
_COMPARED = {"=", "<>", "!=", "WHEN"}
#: the words that end a SET list
_SET_ENDS = {"WHERE", "FROM", "RETURNING"}


def _uncommented(sql: str) -> str:
    return re.sub(r"--[^\n]*", "", sql)


def chosen_in_sql(sql: str) -> list[str]:
    """Each status literal ``sql`` chooses, with the few words before it."""
    tokens = [m.group(0) for m in _TOKEN.finditer(_uncommented(sql))]
    found: list[str] = []
    #: the open brackets, innermost last: "list" (IN, ARRAY), "query" (a subquery), "other"
    opened: list[str] = []
    #: the bracket depth at which a SET list is open, or None
    set_at: int | None = None
    #: the column the SET item being read assigns; whether the next word names one
    target, expect_target = "", False
    for i, token in enumerate(tokens):
        word = token.upper()
        if word in ("(", "["):
            before = tokens[i - 1].upper() if i else ""
            after = tokens[i + 1].upper() if i + 1 < len(tokens) else ""
            kind = "list" if before in ("IN", "ARRAY") else "query" if after == "SELECT" else ""
            opened.append(kind or "other")
            continue
        if word in (")", "]"):
            if opened:
                opened.pop()
            if set_at is not None and len(opened) < set_at:
                set_at = None
            continue
        if word in (";", "$$"):
            set_at = None
            continue
        if word == "SET":
            set_at, expect_target = len(opened), True
            continue
        if word == "," and set_at is not None and len(opened) == set_at:
            expect_target = True
            continue
        if expect_target:
            target, expect_target = word, False
            continue
        if word in _SET_ENDS and set_at is not None and len(opened) == set_at:
            set_at = None
            continue
        if not token.startswith("'") or token.strip("'") not in STATUSES:
            continue
        in_list = bool(opened) and opened[-1] == "list"
        in_query = set_at is not None and "query" in opened[set_at:]
        assigned = set_at is not None and target.endswith("STATUS")
        before = tokens[i - 1].upper() if i else ""
        compared = before in _COMPARED or before.startswith("IS ")
        if not (in_list or in_query or (compared and not assigned)):
            found.append(" ".join(tokens[max(0, i - 4) : i + 1]))
    return found


__all__ = ["STATUSES", "chosen_in_sql"]
