"""Row changes inside one write transaction: a pass's ops, and the changes that several
store methods share (ending a run, settling the parent's step, an attempt's start and end).

Every function takes the write connection of a transaction that is already open and runs
plain statements on it; the caller commits. The statements are named queries
(``sql/sqlite/queries.sql``); the hot ones are bound to module constants at import so a
pass's commit looks nothing up.
"""

from __future__ import annotations

import dataclasses
import json
import sqlite3
from collections.abc import Iterable

from plait.errors import (
    EventNotStoredError,
    GateClosedError,
    LeaseLostError,
    RunNotFoundError,
    RunStateError,
)
from plait.queues import DEFAULT_QUEUE
from plait.records import Run
from plait.statuses import STEP_IN_FLIGHT, AttemptStatusName
from plait.store import convert
from plait.store.ops import (
    AnswerRequest,
    AppendStream,
    CancelChildren,
    CancelJob,
    ClearTimer,
    ConsumeEvent,
    CreateChildRun,
    EndRun,
    EnqueueJob,
    FinishAttempt,
    GuardStep,
    Op,
    PutStep,
    RecordVersion,
    SendEvent,
    SetState,
    SetTags,
    SetTimer,
    SetValue,
    StartAttempt,
    StepEnd,
    TakeDecision,
    TakeRequest,
)
from plait.store.rows import NewRun, RunRow, StepRow
from plait.store.sqlite.nulls import NullsInline, null_at
from plait.store.sqlite.writer import SQL, WriteConnection
from plait.tags import MAX_TAGS

_UPSERT_STEP = SQL["upsert_step"]
_START_STEP = SQL["start_step"]
_INSERT_STEP_START = SQL["insert_step_start"]
#: what insert_step_start and start_step bind, in order: a step's columns, then its attempt's
_START_NAMES = (*(f.name for f in dataclasses.fields(StepRow)), "worker", "attempt_status", "now")
#: a step's columns that are missing at its first start, when nothing has happened to it
_FRESH = ("output", "error", "child_run_id", "wake_at", "delivered")
#: and those of its options and graph links, missing for most steps
_PLAIN = ("retry_delay", "timeout", "branch", "from_key")
_INSERT_STEP_START_FRESH = null_at(SQL["insert_step_start"], _START_NAMES, _FRESH)
_INSERT_STEP_START_PLAIN = null_at(SQL["insert_step_start"], _START_NAMES, _FRESH + _PLAIN)
_ARCHIVE_ATTEMPT = SQL["archive_attempt"]
_FINISH_STEP = SQL["finish_step"]
_FINISH_STEP_SUCCEEDED = SQL["finish_step_succeeded"]
#: what finish_step_succeeded binds, in order
_FINISH_NAMES = (
    "status",
    "output",
    "error",
    "attempts",
    "failures",
    "wake_at",
    "branch",
    "child_run_id",
    "updated_at",
    "delivered",
    "attempt_status",
    "now",
    "run_id",
    "key",
)
#: what a success of a step with no error, wake-up, branch or child (most of them) leaves
#: out of finish_step_succeeded: written as NULL
_PLAIN_SUCCESS = ("error", "wake_at", "branch", "child_run_id")
_FINISH_STEP_SUCCEEDED_PLAIN = null_at(_FINISH_STEP_SUCCEEDED, _FINISH_NAMES, _PLAIN_SUCCESS)
_FINISH_STEP_SUCCEEDED_FENCED = null_at(
    SQL["finish_step_succeeded_fenced"], (*_FINISH_NAMES, "fence"), _PLAIN_SUCCESS
)
_SET_TIMER = SQL["set_timer"]
_CLEAR_TIMER = SQL["clear_timer"]
_ENQUEUE_JOB = SQL["enqueue_job"]
_CONSUME_EVENT = SQL["consume_event"]
_SET_STATE = SQL["set_state"]
_INSERT_RUN = NullsInline(SQL["insert_run"])
_LIST_BRAKES = SQL["list_brakes"]
_SELECT_RUN = SQL["select_run"]
_RUN_TAGS = SQL["run_tags"]
_WAKE_RUN = SQL["wake_run"]
_RELEASE_RUN = SQL["release_run"]
#: the statuses of a step not ended yet, as a JSON array
_IN_FLIGHT = json.dumps(sorted(STEP_IN_FLIGHT))
#: the statuses ``end_run`` moves a run from, and ``end_live_run`` (queries.sql)
_RUNNING = ("running",)
_LIVE = ("running", "suspended", "queued", "paused", "needs_attention")


#: where a statement runs: a connection, or the write connection's own cursor
Statements = sqlite3.Connection | sqlite3.Cursor


def statements(conn: sqlite3.Connection) -> Statements:
    """The write connection's own cursor (see ``WriteConnection``), else ``conn``."""
    return conn.statements if isinstance(conn, WriteConnection) else conn


def apply_ops(
    conn: sqlite3.Connection,
    run_id: str,
    ops: Iterable[Op],
    now: float,
    run: Statements | None = None,
) -> None:
    """Write a pass's ops for ``run_id``, in order. An attempt's start and end, the
    writes of nearly every step, run on ``run``: the write connection's own cursor
    (``statements(conn)``, unless the caller has it already)."""
    if run is None:
        run = statements(conn)
    for op in ops:
        if isinstance(op, PutStep):
            conn.execute(_UPSERT_STEP, convert.step_params(op.step))
        elif isinstance(op, StartAttempt):
            start_attempt(run, op.step, op.attempt, op.status, op.worker, now)
        elif isinstance(op, FinishAttempt):
            finish_attempt(run, op.step, op.status, op.error, now)
        elif isinstance(op, SetTimer):
            conn.execute(_SET_TIMER, (run_id, op.key, op.purpose, op.wake_at))
        elif isinstance(op, ClearTimer):
            conn.execute(_CLEAR_TIMER, (run_id, op.key))
        elif isinstance(op, EnqueueJob):
            conn.execute(_ENQUEUE_JOB, (run_id, op.key, op.function, op.available_at, now))
        elif isinstance(op, ConsumeEvent):
            cur = conn.execute(_CONSUME_EVENT, (op.key, op.event_id))
            if cur.rowcount != 1:
                raise LeaseLostError(f"event {op.event_id} was consumed by another pass")
        elif isinstance(op, CreateChildRun):
            insert_run(conn, op.run, now)
        elif isinstance(op, SetState):
            conn.execute(_SET_STATE, (run_id, op.name, op.value))
        elif isinstance(op, EndRun):
            end_run(conn, run_id, op, now)
        else:
            _apply_rare(conn, run_id, op, now)


def _apply_rare(conn: sqlite3.Connection, run_id: str, op: Op, now: float) -> None:
    """The ops of approvals, requests, published values and a run's children: after the ones
    every step writes, so those are found first."""
    if isinstance(op, CancelChildren):
        cancel_children(conn, run_id, op, now)
    elif isinstance(op, CancelJob):
        cancel_job(conn, run_id, op, now)
    elif isinstance(op, AppendStream):
        conn.execute(SQL["append_stream_entry"], (run_id, op.stream, op.value, now))
    elif isinstance(op, SetValue):
        conn.execute(SQL["set_value"], (run_id, op.key, op.value, now))
    elif isinstance(op, SetTags):
        put_tags(conn, run_id, op.tags)
    elif isinstance(op, SendEvent):
        if (
            not store_event(conn, op.run_id, op.name, op.payload, op.dedup, now)
            and not (conn.execute(SQL["event_dedup_taken"], (op.run_id, op.dedup)).fetchone()[0])
        ):
            # neither stored now nor before (a batch applied twice): the run has ended
            raise EventNotStoredError(f"run {op.run_id} ended before event {op.name!r} was stored")
    elif isinstance(op, GuardStep):
        row = conn.execute(SQL["step_status"], (run_id, op.key)).fetchone()
        if row is None or row[0] != op.status:
            raise GateClosedError(f"step {op.key!r} of run {run_id} changed under the pass")
    elif isinstance(op, TakeDecision):
        if op.event_id is not None:
            taken = {"key": op.key, "outcome": op.outcome, "reason": op.reason, "now": now}
            cur = conn.execute(SQL["take_decision"], {**taken, "event_id": op.event_id})
            if cur.rowcount != 1:
                raise GateClosedError(f"decision {op.event_id} was taken by another pass")
        else:
            refused = {"outcome": op.outcome, "reason": op.reason, "now": now}
            conn.execute(
                SQL["refuse_accepted_decision"], {**refused, "run_id": run_id, "key": op.key}
            )
    elif isinstance(op, TakeRequest):
        # one conditional write decides between this take and the sender's withdrawal
        cur = conn.execute(
            SQL["take_request"], (op.status, op.key, op.request_id, run_id, op.from_status)
        )
        if cur.rowcount != 1:
            raise GateClosedError(f"request {op.request_id} was withdrawn before the pass took it")
    elif isinstance(op, AnswerRequest):
        conn.execute(
            SQL["answer_request"],
            (op.status, op.reply, op.refusal, now, op.request_id, run_id, op.from_status),
        )
    elif isinstance(op, RecordVersion):
        conn.execute(SQL["record_version"], (op.version, run_id))
    else:  # pragma: no cover - a new op without a store implementation
        raise TypeError(f"unknown store operation {op!r}")


def renew_leases(conn: sqlite3.Connection, owner: str, until: float, holding: str) -> None:
    """Extend to ``until`` the leases ``owner`` holds on the runs in ``holding`` (a JSON
    array of ids) and on its jobs."""
    conn.execute(SQL["renew_run_leases"], (until, owner, holding))
    conn.execute(SQL["renew_job_leases"], (until, owner))


#: the ops that start work, which a batch committed after its run ended does not write
STARTS_WORK = (CreateChildRun, SetTimer, EnqueueJob, StartAttempt, AppendStream)


def records_only(ops: Iterable[Op]) -> list[Op]:
    """The ops of a pass whose run ended under it: how its steps ended is kept, nothing
    that would start work (a child run, a timer, a job, an attempt) is, nor an attempt's
    interruption: that leaves the step to run again, which an ended run never does, and
    would undo how the cancel ended it."""
    return [
        op
        for op in ops
        if not isinstance(op, STARTS_WORK)
        and not (isinstance(op, FinishAttempt) and op.status == "interrupted")
    ]


def insert_run(conn: sqlite3.Connection, new: NewRun, now: float) -> RunRow | None:
    """Create the run unless its id exists (or its de-duplication key belongs to a live
    run); the row written if this call created it (the run a read would give, without
    the read), else None."""
    row = _inserted_row(new, now)
    cur = _INSERT_RUN.execute(
        conn,
        (
            row.id,
            row.workflow,
            row.kind,
            row.version,
            row.status,
            row.input,
            row.parent_run_id,
            row.parent_step_key,
            row.owner,
            row.start_node,
            row.created_at,
            row.updated_at,
            row.wake_at,
            row.lease_owner,
            row.lease_until,
            row.queue,
            row.queue_key,
            row.priority,
            row.dedup,
            row.scheduled_at,
            row.trace,
            row.deadline_at,
            row.timeout,
            row.tags,
            new.debounce_key,
            new.debounce_until,
        ),
    )
    if cur.rowcount != 1:
        return None
    if new.tags is not None:
        conn.execute(SQL["put_run_tag_rows"], {"run": new.id, "tags": new.tags})
    return row


def _inserted_row(new: NewRun, now: float) -> RunRow:
    """The row of a run inserted ``now``, as ``insert_run`` writes it. Columns the insert
    leaves out are NULL (or their default); REAL columns hold floats, as a read gives
    them."""
    return RunRow(
        new.id,
        new.workflow,
        new.kind,
        new.version,
        new.status,
        new.input,
        None,  # output
        None,  # error
        new.parent_run_id,
        new.parent_step_key,
        new.owner,
        new.start_node,
        now,  # created_at
        now,  # updated_at
        max(now, new.not_before or now),  # wake_at: first due
        1,  # wakeups
        new.lease_owner,
        now + new.lease_seconds if new.lease_owner else None,  # an inline start holds it
        new.queue,
        new.queue_key,
        new.priority,
        new.dedup,
        _real(new.scheduled_at),
        None,  # admitted_at
        None,  # forked_from
        new.trace,
        None,  # continued_from
        None,  # continued_to
        _real(new.deadline_at),
        _real(new.timeout),
        new.tags,
    )


def start_brakes(conn: sqlite3.Connection) -> frozenset[tuple[str, str]]:
    """The brakes (kind, name) as a start's transaction reads them: a brake another
    process committed counts at once, not when this process reads the brakes again. One
    read serves every run a commit starts."""
    return frozenset((kind, name) for kind, name, _at in conn.execute(_LIST_BRAKES))


def braked_start(
    conn: sqlite3.Connection, new: NewRun, brakes: frozenset[tuple[str, str]] | None = None
) -> NewRun:
    """``new`` as a start writes it: a run that would start ``running`` while a brake
    holds its workflow or its queue (none: ``DEFAULT_QUEUE``) is accepted and waits in
    ``new.held_status``, leased to no one (an inline starter does not drive it). ``brakes``:
    ``start_brakes`` read already in this transaction."""
    if new.status != "running" or new.held_status is None:
        return new
    if brakes is None:
        brakes = start_brakes(conn)
    if not brakes or (
        ("workflow", new.workflow) not in brakes
        and ("queue", new.queue or DEFAULT_QUEUE) not in brakes
    ):
        return new
    return dataclasses.replace(new, status=new.held_status, lease_owner=None)


def _real(value: float | None) -> float | None:
    return None if value is None else float(value)


def debounce(conn: sqlite3.Connection, new: NewRun, now: float) -> str | None:
    """A debounced start (``new.debounce_key``) joins the run of its key still waiting for
    its start time: the id of that run, which took ``new``'s input and start and merged
    its tags (``new``'s value on a key both have; unless that makes more than
    ``MAX_TAGS``, when they stay as they were); None when no run waits, and then a
    run of the key whose start time has passed has left the window, so that ``new`` may
    be inserted."""
    params = {
        "workflow": new.workflow,
        "key": new.debounce_key,
        "owner": new.owner or "",
        "now": now,
        "input": new.input,
        "start": new.not_before if new.not_before is not None else now,
    }
    joined = conn.execute(SQL["debounce_run"], params).fetchone()
    if joined is not None:
        if new.tags is not None and _fit(conn, str(joined[0]), new.tags):
            put_tags(conn, str(joined[0]), new.tags)
        return str(joined[0])
    conn.execute(SQL["close_debounce"], params)
    return None


def _fit(conn: sqlite3.Connection, run_id: str, tags: str) -> bool:
    """Whether ``tags`` merged into the run's own make at most ``MAX_TAGS``: a joining
    start's tags past that leave the run's as they are, as a child's do."""
    (own,) = conn.execute(_RUN_TAGS, (run_id,)).fetchone()
    return len(json.loads(own or "{}") | json.loads(tags)) <= MAX_TAGS


def put_tags(conn: sqlite3.Connection, run_id: str, tags: str) -> None:
    """Merge ``tags`` (JSON) into the run's tags column and its rows of plait_run_tags."""
    params = {"run": run_id, "tags": tags}
    conn.execute(SQL["put_run_tags"], params)
    conn.execute(SQL["put_run_tag_rows"], params)


def load_run(conn: sqlite3.Connection, run_id: str) -> Run:
    """The record of a run that is known to exist."""
    return convert.run_record(convert.run_row(conn.execute(_SELECT_RUN, (run_id,)).fetchone()))


def require_status(
    conn: sqlite3.Connection, run_id: str, allowed: tuple[str, ...], action: str
) -> None:
    """Refuse ``action`` on a run that does not exist or is in none of ``allowed``."""
    row = conn.execute(SQL["run_status"], (run_id,)).fetchone()
    if row is None:
        raise RunNotFoundError(run_id)
    if row[0] not in allowed:
        raise RunStateError(run_id, row[0], action)


def store_event(
    conn: sqlite3.Connection,
    run_id: str,
    name: str,
    payload: str | None,
    dedup: str | None,
    now: float,
) -> bool:
    """Store an event for ``run_id`` and wake it, unless the run has ended (or does not
    exist) or took an event of key ``dedup`` already; True if it was stored."""
    cur = conn.execute(
        SQL["insert_event"],
        {"run": run_id, "name": name, "payload": payload, "now": now, "dedup": dedup},
    )
    if cur.rowcount != 1:
        return False
    wake(conn, run_id, now, now)
    return True


def wake(conn: sqlite3.Connection, run_id: str, now: float, at: float) -> None:
    """Make a running run due at ``at`` (or keep an earlier wake-up) and count the wake-up,
    so a pass that is in flight looks again when it releases the run."""
    conn.execute(_WAKE_RUN, (now, at, at, run_id))


def release(conn: sqlite3.Connection, run_id: str, owner: str, seen: int, now: float) -> bool:
    """Give the run back: due again at once if someone woke it during the pass (its
    wake-up count moved from ``seen``), else when its earliest timer fires. True if it is
    due right away."""
    row = conn.execute(_RELEASE_RUN, (seen, now, run_id, owner)).fetchone()
    return row is not None and row[0] is not None and row[0] <= now


def delete_job(conn: sqlite3.Connection, run_id: str, key: str) -> None:
    conn.execute(SQL["delete_job"], (run_id, key))


def cancel_job(conn: sqlite3.Connection, run_id: str, op: CancelJob, now: float) -> None:
    """The workflow cancelled a job step (see ``CancelJob``)."""
    step, cut = op.step, op.cut
    conn.execute(SQL["delete_job"], (run_id, step.key))
    params = {
        "run": run_id,
        "key": step.key,
        "step": cut.step,
        "attempt": cut.attempt,
        "open": cut.open_attempt,
        "error": step.error,
        "now": now,
        "in_flight": _IN_FLIGHT,
    }
    conn.execute(SQL["cancel_job_step"], params)
    conn.execute(SQL["set_delivered"], (step.delivered, run_id, step.key))


def start_attempt(
    conn: Statements,
    step: StepRow,
    attempt: int,
    status: AttemptStatusName,
    worker: str | None,
    now: float,
) -> None:
    """Write the step with attempt ``attempt`` begun on its row, ``status``; the attempt
    the row held until now (if any) moves to plait_attempts first."""
    if attempt > 1:
        conn.execute(_ARCHIVE_ATTEMPT, (attempt - 1, step.run_id, step.key))
    else:
        # most first attempts are of a step no write has stored yet (see queries.sql)
        try:
            _insert_step_start(conn, step, worker, status, now)
            return
        except sqlite3.IntegrityError:
            pass
    conn.execute(_START_STEP, (*convert.step_params(step), worker, status, now))


def _insert_step_start(
    conn: Statements, s: StepRow, worker: str | None, status: str, now: float
) -> None:
    """``insert_step_start`` for ``s``. Binding a ``None`` costs the sqlite3 module an
    adapter lookup (writer.py), and a step's first start has nine: nothing has happened to
    it yet (``_FRESH``) and it has no options or graph links (``_PLAIN``). Those that are
    missing, as they nearly always are, are written as NULL in the statement's text."""
    if (
        s.output is None
        and s.error is None
        and s.child_run_id is None
        and s.wake_at is None
        and s.delivered is None
    ):
        if s.retry_delay is None and s.timeout is None and s.branch is None and s.from_key is None:
            conn.execute(
                _INSERT_STEP_START_PLAIN,
                (
                    s.run_id,
                    s.key,
                    s.seq,
                    s.name,
                    s.kind,
                    s.function,
                    s.status,
                    s.input,
                    s.attempts,
                    s.failures,
                    s.retries,
                    s.invocation_id,
                    int(s.queued),
                    s.created_at,
                    s.updated_at,
                    s.retried_failures,
                    s.reached_after,
                    worker,
                    status,
                    now,
                ),
            )
            return
        conn.execute(
            _INSERT_STEP_START_FRESH,
            (
                s.run_id,
                s.key,
                s.seq,
                s.name,
                s.kind,
                s.function,
                s.status,
                s.input,
                s.attempts,
                s.failures,
                s.retries,
                s.retry_delay,
                s.timeout,
                s.invocation_id,
                s.branch,
                s.from_key,
                int(s.queued),
                s.created_at,
                s.updated_at,
                s.retried_failures,
                s.reached_after,
                worker,
                status,
                now,
            ),
        )
        return
    conn.execute(_INSERT_STEP_START, (*convert.step_params(s), worker, status, now))


def finish_attempt(
    conn: Statements, s: StepRow, status: str, error: str | None, now: float
) -> None:
    """An attempt's end: the step's columns it changes and the attempt on the row, in one
    statement. The row exists since the attempt's start was committed (the full upsert is
    the fallback, so nothing is lost if it does not). A succeeded attempt's statement
    leaves its error as its start left it (none), which spares the stream-reset
    trigger's program (schema.sql)."""
    plain = _plain_success(s, status, error, now)
    if plain is not None:
        cur = conn.execute(_FINISH_STEP_SUCCEEDED_PLAIN, plain)
    else:
        head = (
            s.status,
            s.output,
            s.error,
            s.attempts,
            s.failures,
            s.wake_at,
            s.branch,
            s.child_run_id,
            s.updated_at,
            s.delivered,
        )
        if status == "succeeded" and error is None:
            cur = conn.execute(_FINISH_STEP_SUCCEEDED, (*head, status, now, s.run_id, s.key))
        else:
            cur = conn.execute(_FINISH_STEP, (*head, status, error, now, s.run_id, s.key))
    if cur.rowcount == 0:
        conn.execute(_UPSERT_STEP, convert.step_params(s))


def _plain_success(
    s: StepRow, status: str, error: str | None, now: float
) -> tuple[object, ...] | None:
    """What ``finish_step_succeeded``'s plain text binds (``_PLAIN_SUCCESS`` written as
    NULL, see ``_insert_step_start``) for the usual success: no error, wake-up, branch or
    child. None for any other end."""
    if (
        status != "succeeded"
        or error is not None
        or s.error is not None
        or s.wake_at is not None
        or s.branch is not None
        or s.child_run_id is not None
    ):
        return None
    return (
        s.status,
        s.output,
        s.attempts,
        s.failures,
        s.updated_at,
        s.delivered,
        status,
        now,
        s.run_id,
        s.key,
    )


def finish_fenced(run: Statements, run_id: str, op: Op, fence: str, now: float) -> bool:
    """The usual first write of a fenced commit, a step's success (``finish_attempt``'s
    plain one), with the commit's fence in the same statement: True if it was written,
    the lease held and the run running. False if ``op`` is anything else or the
    statement wrote nothing (no lease, a run in another status, no row): then nothing
    was written, and the commit checks its fence on its own and writes every op as
    usual."""
    if not isinstance(op, FinishAttempt) or op.step.run_id != run_id:
        return False
    plain = _plain_success(op.step, op.status, op.error, now)
    if plain is None:
        return False
    return run.execute(_FINISH_STEP_SUCCEEDED_FENCED, (*plain, fence)).rowcount == 1


def end_run(
    conn: sqlite3.Connection,
    run_id: str,
    end: EndRun,
    now: float,
    *,
    from_suspended: bool = False,
) -> list[str]:
    """Move a running run (or, with ``from_suspended``, a suspended one too) to
    ``end.status``; returns every run that moved (a cancel, an end with a cut, cascades
    to children, each ended the same way, and ends the attempts left open as the cut
    says, before the run moves: their resets come before its streams' end). A terminal
    end settles the parent's step as ``end.parent`` says."""
    cut = None if end.status == "suspended" else end.cut
    children: list[str] = []
    if cut is not None:
        # the cut attempts' resets must come before the end the run's streams get when it
        # moves (a trigger), or a follower stops at the end with their entries kept: so
        # the children and the open attempts end first, if the run is one this end moves
        row = conn.execute(SQL["run_status"], (run_id,)).fetchone()
        if row is None or row[0] not in (_LIVE if from_suspended else _RUNNING):
            return []
        children = cancel_children(
            conn, run_id, CancelChildren(end.status, end.error, end.parent, cut), now
        )
        conn.execute(
            SQL["close_open_attempts"],
            {
                "step": cut.step,
                "attempt": cut.attempt,
                "open": cut.open_attempt,
                "error": end.error,
                "now": now,
                "run": run_id,
            },
        )
    query = SQL["end_live_run"] if from_suspended else SQL["end_run"]
    row = conn.execute(query, (end.status, end.output, end.error, now, run_id)).fetchone()
    if row is None:
        return []
    moved = [run_id, *children]
    if end.status == "suspended":
        return moved
    conn.execute(SQL["delete_run_timers"], (run_id,))
    conn.execute(SQL["delete_run_jobs"], (run_id,))
    parent_id, parent_key = row
    if parent_id and parent_key and end.parent is not None:
        settle_parent_step(conn, parent_id, parent_key, run_id, end.parent, now)
    if end.successor is not None:
        start_successor(conn, run_id, end.successor, now)
    return moved


def start_successor(conn: sqlite3.Connection, run_id: str, new: NewRun, now: float) -> None:
    """The run that continues ``run_id`` (which just ended): created, linked both ways,
    handed the events ``run_id`` held, and waited for by the parent's step that waited
    for ``run_id``. All in the
    transaction of the end, so a chain never has two live runs, nor none."""
    if insert_run(conn, new, now) is None:
        raise RuntimeError(f"run {run_id} cannot continue as new: run {new.id} exists")
    conn.execute(SQL["link_continued"], {"old": run_id, "new": new.id})
    conn.execute(SQL["hand_over_schedule_run"], {"old": run_id, "new": new.id})
    conn.execute(SQL["carry_held_events"], {"old": run_id, "new": new.id})
    if new.parent_run_id and new.parent_step_key:
        conn.execute(
            SQL["hand_over_child_step"],
            {"new": new.id, "parent": new.parent_run_id, "key": new.parent_step_key, "old": run_id},
        )


def cancel_children(
    conn: sqlite3.Connection, run_id: str, cancel: CancelChildren, now: float
) -> list[str]:
    """Cancel the live children of ``run_id`` (and theirs) as ``cancel`` says (only its
    step ``cancel.step_key``'s, when given); returns every run that moved."""
    end = EndRun(cancel.status, None, cancel.error, cancel.parent, cancel.cut)
    moved: list[str] = []
    if cancel.step_key is None:
        found = conn.execute(SQL["live_children"], (run_id,))
    else:
        found = conn.execute(SQL["live_child_of_step"], (run_id, cancel.step_key))
    for (child,) in found.fetchall():
        moved += end_run(conn, child, end, now, from_suspended=True)
    return moved


def settle_parent_step(
    conn: sqlite3.Connection,
    parent_id: str,
    key: str,
    child_id: str,
    settled: StepEnd,
    now: float,
) -> None:
    """The parent's step that waits for a child run ends as the runtime decided, and the
    parent is woken to go on."""
    failed = settled.status == "failed"
    cur = conn.execute(
        SQL["settle_parent_step"],
        (
            settled.status,
            settled.output,
            settled.error,
            settled.failures,
            now,
            settled.status,
            settled.error if failed else None,
            now,
            parent_id,
            key,
            child_id,
        ),
    )
    if cur.rowcount:
        wake(conn, parent_id, now, now)


__all__ = [
    "apply_ops",
    "cancel_children",
    "delete_job",
    "end_run",
    "finish_attempt",
    "finish_fenced",
    "insert_run",
    "load_run",
    "release",
    "require_status",
    "settle_parent_step",
    "start_attempt",
    "start_successor",
    "store_event",
    "wake",
]
