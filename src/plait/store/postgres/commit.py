"""A pass's batch of writes on PostgreSQL: ops as the schema's ``op`` type, the statement
each batch takes (the first attempts of sequential steps, step writes only, any batch, a
pass's last batch with its lease's release), the grouped commit of concurrent passes
(``group.GroupCommit``) and what a refused or broken write raises to its pass.
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Awaitable, Callable
from typing import Any

import asyncpg

from plait.cancel_guard import holding_task, uncancelled
from plait.errors import (
    EventNotStoredError,
    GateClosedError,
    LeaseLostError,
    RunEndedElsewhereError,
)
from plait.store import convert
from plait.store.ops import (
    AnswerRequest,
    AppendStream,
    Batch,
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
    TakeDecision,
    TakeRequest,
    ended_elsewhere,
)
from plait.store.postgres.codec import (
    EVENT_NOT_STORED,
    GATE_CLOSED,
    LEASE_LOST,
    STEP_ATTEMPT_COLUMNS,
    cut_value,
    new_run_value,
    step_end_value,
    step_value,
)
from plait.store.postgres.group import GroupCommit, steps_only
from plait.store.postgres.part import Part
from plait.store.postgres.pool import DatabaseUnavailableError

#: the most step writes one commit_first_attempts takes (a larger batch of first attempts,
#: the starts of a wide gather, goes through commit_steps: its server cost is spread over
#: the batch, and a statement's parameters are limited)
_FIRST_ATTEMPT_ROWS = 16


def op_value(op: Op) -> tuple[Any, ...]:
    """An op as the schema's ``op`` type: (kind, step, attempt, worker, status, output,
    error, key, purpose, at, function, event_id, run, name, parent, cut). An end's run is
    the run that continues it as new, if any."""
    if isinstance(op, PutStep):
        return ("put_step", step_value(op.step), *(None,) * 14)
    if isinstance(op, StartAttempt):
        return (
            "start_attempt",
            step_value(op.step),
            op.attempt,
            op.worker,
            op.status,
            *(None,) * 11,
        )
    if isinstance(op, FinishAttempt):
        return (
            "finish_attempt",
            step_value(op.step),
            op.attempt,
            None,
            op.status,
            op.output,
            op.error,
            *(None,) * 9,
        )
    if isinstance(op, SetTimer):
        return ("set_timer", *(None,) * 6, op.key, op.purpose, op.wake_at, *(None,) * 6)
    if isinstance(op, ClearTimer):
        return ("clear_timer", *(None,) * 6, op.key, *(None,) * 8)
    if isinstance(op, EnqueueJob):
        return (
            "enqueue_job",
            *(None,) * 6,
            op.key,
            None,
            op.available_at,
            op.function,
            *(None,) * 5,
        )
    if isinstance(op, ConsumeEvent):
        return ("consume_event", *(None,) * 6, op.key, *(None,) * 3, op.event_id, *(None,) * 4)
    if isinstance(op, CreateChildRun):
        return ("create_child_run", *(None,) * 11, new_run_value(op.run), None, None, None)
    if isinstance(op, SetState):
        # the value rides in the output column (both are json)
        return ("set_state", *(None,) * 4, op.value, *(None,) * 7, op.name, None, None)
    if isinstance(op, SetValue):
        return ("set_value", *(None,) * 4, op.value, *(None,) * 7, op.key, None, None)
    if isinstance(op, SetTags):
        return ("set_tags", *(None,) * 4, op.tags, *(None,) * 10)
    if isinstance(op, AppendStream):
        return ("append_stream", *(None,) * 4, op.value, *(None,) * 7, op.stream, None, None)
    if isinstance(op, RecordVersion):
        return ("record_version", *(None,) * 12, op.version, None, None)
    if isinstance(op, SendEvent):
        # key: the run it goes to; the payload rides in output, the dedup key in purpose
        return (
            "send_event",
            *(None,) * 4,
            op.payload,
            None,
            op.run_id,
            op.dedup,
            *(None,) * 4,
            op.name,
            None,
            None,
        )
    if isinstance(op, GuardStep):
        return ("guard_step", None, None, None, op.status, None, None, op.key, *(None,) * 8)
    if isinstance(op, TakeDecision):
        purpose = "take" if op.event_id is not None else "refuse"
        return (
            "take_decision",
            None,
            None,
            None,
            op.outcome,
            None,
            op.reason,
            op.key,
            purpose,
            None,
            None,
            op.event_id,
            None,
            None,
            None,
            None,
        )
    if isinstance(op, TakeRequest):
        # the status it must still have rides in purpose
        return (
            "take_request",
            *(None,) * 3,
            op.status,
            None,
            None,
            op.key,
            op.from_status,
            None,
            None,
            op.request_id,
            *(None,) * 4,
        )
    if isinstance(op, AnswerRequest):
        return (
            "answer_request",
            *(None,) * 3,
            op.status,
            op.reply,
            op.refusal,
            None,
            op.from_status,
            None,
            None,
            op.request_id,
            *(None,) * 4,
        )
    if isinstance(op, EndRun):
        successor = None if op.successor is None else new_run_value(op.successor)
        return (
            "end_run",
            None,
            None,
            None,
            op.status,
            op.output,
            op.error,
            *(None,) * 5,
            successor,
            None,
            step_end_value(op.parent),
            cut_value(op.cut),
        )
    if isinstance(op, CancelChildren):
        return (
            "cancel_children",
            *(None,) * 3,
            op.status,
            None,
            op.error,
            op.step_key,
            *(None,) * 6,
            step_end_value(op.parent),
            cut_value(op.cut),
        )
    if isinstance(op, CancelJob):
        return ("cancel_job", step_value(op.step), *(None,) * 13, cut_value(op.cut))
    raise TypeError(f"unknown store operation {op!r}")  # pragma: no cover


def _answered(exc: asyncpg.PostgresError) -> Exception:
    """What a refused commit means to its caller: the schema's own SQLSTATEs as plait's
    errors, anything else as it came."""
    if exc.sqlstate == LEASE_LOST:
        return LeaseLostError(exc.args[0] if exc.args else str(exc))
    if exc.sqlstate == GATE_CLOSED:
        return GateClosedError(exc.args[0] if exc.args else str(exc))
    if exc.sqlstate == EVENT_NOT_STORED:
        return EventNotStoredError(exc.args[0] if exc.args else str(exc))
    return exc


def _first_attempt_rows(
    run_id: str, ops: list[Op], now: float
) -> tuple[ConsumeEvent | None, list[Any]] | None:
    """The parameters of ``commit_first_attempts`` for a batch it can write (at most
    ``_FIRST_ATTEMPT_ROWS`` step writes of ``run_id`` as ``steps_only`` says, no attempt
    after a first one started), else None: each step as a row of the steps table, its
    attempt columns filled as ``apply_step_ops`` fills them. A batch that also takes one
    event (the step after a wait for an event) is written the same way, by
    ``commit_first_attempts_consuming``: the event is returned with the rows. One pass over
    the batch, since every sequential step comes this way."""
    if not ops or len(ops) > _FIRST_ATTEMPT_ROWS:
        return None
    keys: set[str] = set()
    rows: list[Any] = []
    taking: ConsumeEvent | None = None
    for op in ops:
        if isinstance(op, StartAttempt):
            if op.attempt > 1:
                return None  # its predecessor moves from the step's row to attempts
            attempt: tuple[Any, ...] = (op.worker, op.status, None, now, None)
        elif isinstance(op, FinishAttempt):
            attempt = (None, op.status, op.error, None, now)
        elif isinstance(op, PutStep):
            attempt = STEP_ATTEMPT_COLUMNS
        elif isinstance(op, ConsumeEvent) and taking is None:
            taking = op
            continue
        else:
            return None
        step = op.step
        if step.run_id != run_id or step.key in keys:
            return None
        keys.add(step.key)
        rows += convert.step_params(step, flag=bool)
        rows += attempt
    if not keys:
        return None  # an event taken with no step written: apply_ops takes it
    return taking, rows


@functools.lru_cache(maxsize=2 * _FIRST_ATTEMPT_ROWS)
def first_attempts_statement(one_row: str, rows: int) -> str:
    """``commit_first_attempts`` (written for one step) for ``rows`` steps: a row of
    parameters for each step after the first, numbered on from the first row's."""
    head, tail = one_row.split("(VALUES (", 1)
    first, rest = tail.split(")) AS u", 1)
    width = first.count("$")
    before = int(first.split("$", 1)[1].split("::", 1)[0]) - 1  # the parameters ahead of it
    more = [
        "(" + ", ".join(f"${before + width * r + c}" for c in range(1, width + 1)) + ")"
        for r in range(1, rows)
    ]
    return f"{head}(VALUES ({first}){''.join(', ' + row for row in more)}) AS u{rest}"


class Commits(Part):
    """``commit`` and ``release_run``: a pass's writes, fenced by its lease."""

    #: the batches of concurrent passes, committed together
    _group: GroupCommit

    async def commit(self, batch: Batch) -> bool:
        """All ops of the batch in one transaction, fenced by the run lease (if it has a
        fence). A caller cancelled while its write is on the way waits for the write's
        end, then the cancel goes on (see ``Outcome``).

        If a fenced write fails with an unknown outcome (the connection broke), the pass
        that sent it cannot know what the database holds, and a later write of the same
        pass (say, recording the run as failed because of that very error) could land
        once the server is back. So the store refuses further writes of that pass: it
        ends as a crashed pass and the run is replayed from what was really committed.
        """
        ops = batch.ops
        if not ops and batch.release_wakeups_seen is None:
            return False
        if batch.fence is None:
            # an action from outside a pass takes no lease and locks nothing first: it
            # goes alone, beside whatever group is in flight
            return await uncancelled(self._commit_unfenced(batch.run_id, ops))
        if self._in_order(batch.run_id).taken():
            # another write of this run goes first: this one must not be lost to a cancel
            # while it waits its turn, before it is handed in
            return await uncancelled(self._commit_fenced(batch, batch.fence, ops))
        # the run's turn is free, so taking it does not wait: from here the only wait is
        # the write's outcome, which a cancel cannot cut short
        return await self._commit_fenced(batch, batch.fence, ops)

    async def _commit_fenced(self, batch: Batch, fence: str, ops: list[Op]) -> bool:
        run_id = batch.run_id
        async with self._in_order(run_id):
            if (run_id, fence) in self._tainted:
                raise DatabaseUnavailableError(
                    f"an earlier write of this pass of run {run_id} failed; "
                    "the run will be replayed"
                )
            due = False
            failure: BaseException | None = None
            task = holding_task()
            if task is not None and self._group.idle():
                # nothing else on its way: the write goes from this task, which notes a
                # cancel meanwhile instead of cutting the write short
                with task.hold_cancel() as held:
                    try:
                        due = await self._group.now(run_id, fence, ops, batch.release_wakeups_seen)
                    except Exception as exc:
                        failure = self._fenced_failure(run_id, fence, exc)
                    except BaseException:  # the process is stopping: the outcome is unknown
                        self._tainted.add((run_id, fence))
                        raise
                cancelled = held.requested
            else:
                done = self._group.submit(run_id, fence, ops, batch.release_wakeups_seen)
                cancelled = False
                try:
                    await done
                except asyncio.CancelledError:
                    # raised once the write ended: this caller was cancelled meanwhile,
                    # unless the write itself was abandoned (the process is stopping)
                    cancelled = not done.cancelled()
                except BaseException:
                    pass  # the write's own failure, read from its outcome below
                try:
                    due = done.result()
                except BaseException as exc:
                    failure = self._fenced_failure(run_id, fence, exc)
            if cancelled:
                raise asyncio.CancelledError()
            if failure is not None:
                raise failure
            return due

    def _fenced_failure(self, run_id: str, fence: str, exc: BaseException) -> BaseException:
        """What a fenced write that failed with ``exc`` raises to its pass."""
        if isinstance(exc, asyncpg.PostgresError):
            # the server answered: the transaction was rolled back, nothing is unknown
            return _answered(exc)
        if not isinstance(exc, LeaseLostError | RunEndedElsewhereError):
            # no answer (connection lost, timeout, abandoned in flight): unknown outcome
            self._tainted.add((run_id, fence))
        return exc

    async def _commit_unfenced(self, run_id: str, ops: list[Op]) -> bool:
        async with self._in_order(run_id):
            try:
                return await self._commit_alone(run_id, None, ops, None)
            except asyncpg.PostgresError as exc:
                raise _answered(exc) from None

    async def _commit_alone(
        self,
        run_id: str,
        fence: str | None,
        ops: list[Op],
        release_wakeups_seen: int | None,
        call: Callable[..., Awaitable[Any]] | None = None,
    ) -> bool:
        """One batch in its own transaction (a group of one, or a group's fallback)."""
        call = call or self._call
        if release_wakeups_seen is None:
            plan = None if fence is None else _first_attempt_rows(run_id, ops, self._now())
            if plan is not None:
                # the path of every sequential step: fenced and written, no loop over ops
                taking, rows = plan
                if taking is None:
                    query = first_attempts_statement(self._q["commit_first_attempts"], len(ops))
                    ended = await call("fetchval", query, run_id, fence, *rows)
                else:
                    query = first_attempts_statement(
                        self._q["commit_first_attempts_consuming"], len(ops) - 1
                    )
                    row = await call(
                        "fetchrow", query, run_id, fence, taking.event_id, taking.key, *rows
                    )
                    if row is not None and not row["consumed"]:
                        # nothing written, as apply_ops' refusal (PLT01) rolls it all back
                        raise LeaseLostError(
                            f"event {taking.event_id} was consumed by another pass"
                        )
                    ended = None if row is None else row["ended"]
                answer = "lost" if ended is None else "ended" if ended else "done"
            elif fence is not None and steps_only(run_id, ops):
                values = [op_value(op) for op in ops]
                answer = await call(
                    "fetchval", self._q["commit_steps"], run_id, fence, values, self._now()
                )
            else:
                values = [op_value(op) for op in ops]
                answer = await call(
                    "fetchval", self._q["commit_batch"], run_id, fence, values, self._now()
                )
            if answer == "lost":
                raise LeaseLostError(f"lost the lease on run {run_id}")
            if answer == "ended" and (error := ended_elsewhere(run_id, ops)) is not None:
                raise error
            return False
        values = [op_value(op) for op in ops]
        return bool(
            await call(
                "fetchval",
                self._q["commit_and_release"],
                run_id,
                fence,
                values,
                self._now(),
                release_wakeups_seen,
            )
        )

    async def _commit_held(
        self, run_id: str, fence: str | None, ops: list[Op], release_wakeups_seen: int | None
    ) -> bool:
        """``_commit_alone`` on the group commit's own connection (it has one send in
        flight at a time)."""
        return await self._commit_alone(
            run_id, fence, ops, release_wakeups_seen, self._pool.call_held
        )

    async def release_run(self, run_id: str, owner: str, wakeups_seen: int) -> bool:
        async with self._in_order(run_id):
            due = await self._call(
                "fetchval", self._q["release_run"], run_id, owner, wakeups_seen, self._now()
            )
        return bool(due)
