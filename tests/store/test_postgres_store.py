"""What only the PostgreSQL store has: schemas, migrations, LISTEN/NOTIFY wake-ups, and a
server that goes away under load. The shared semantics are in the conformance suite."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import itertools
import os
import random
import re
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from typing import Any

import pytest

import plait
from plait.errors import LeaseLostError, RunEndedElsewhereError
from plait.notify import WORK_KINDS
from plait.records import SETTLED
from plait.store.ops import (
    Batch,
    CancelChildren,
    ConsumeEvent,
    CreateChildRun,
    EndRun,
    FinishAttempt,
    Op,
    PutStep,
    SetState,
    StartAttempt,
    StepEnd,
)
from plait.store.rows import NewRun, StepRow
from support.counter import Counter
from support.polling import eventually

from .rows import CUT, T0, step

asyncpg = pytest.importorskip("asyncpg")
postgres = pytest.importorskip("plait.store.postgres")
PostgresStore = postgres.PostgresStore
_op_value = pytest.importorskip("plait.store.postgres.commit").op_value
_first_attempts_statement = pytest.importorskip(
    "plait.store.postgres.commit"
).first_attempts_statement
DatabaseUnavailableError = postgres.DatabaseUnavailableError

_names = itertools.count()


@pytest.fixture
def pg_url(pg_cluster: Any) -> str:
    """A fresh database on the session cluster."""
    return str(pg_cluster.create_database(f"pg{os.getpid()}_{next(_names)}"))


async def _fetchval(url: str, query: str, *args: Any) -> Any:
    conn = await asyncpg.connect(url)
    try:
        return await conn.fetchval(query, *args)
    finally:
        await conn.close()


def _simple_app() -> plait.App:
    app = plait.App("pg")

    @app.workflow
    async def double(wf: plait.Workflow, n: int) -> int:
        return await wf.do("double", lambda: n * 2)

    return app


# -- schema and migrations ---------------------------------------------------------------------


async def test_schema_option_keeps_tenants_apart(pg_url: str) -> None:
    app = _simple_app()
    async with plait.Engine(app, pg_url, schema="tenant_a") as a:
        run_a = await a.start("double", 2)
        assert (await a.wait(run_a, timeout=10)).output == 4
    # the schema can also come from the URL, which is all a `plait worker` gets
    async with plait.Engine(app, f"{pg_url}?schema=tenant_b&max_size=3") as b:
        assert b.store.schema == "tenant_b" and b.store.max_size == 3
        run_b = await b.start("double", 5)
        assert (await b.wait(run_b, timeout=10)).output == 10
        assert await b.store.get_run(run_a) is None
    schemas = await _fetchval(
        pg_url,
        "SELECT array_agg(nspname::text ORDER BY nspname) FROM pg_namespace"
        " WHERE nspname IN ('plait', 'tenant_a', 'tenant_b')",
    )
    assert schemas == ["tenant_a", "tenant_b"]
    tables = await _fetchval(
        pg_url,
        "SELECT array_agg(tablename::text ORDER BY tablename) FROM pg_tables"
        " WHERE schemaname = 'tenant_a'",
    )
    assert tables == [
        "attempts",
        "brakes",
        "events",
        "functions_version",
        "graph_owners",
        "jobs",
        "queue_admissions",
        "queue_clocks",
        "queue_limits",
        "queue_turns",
        "requests",
        "run_tags",
        "run_values",
        "runs",
        "schedules",
        "schema_version",
        "spend",
        "state",
        "steps",
        "stream_entries",
        "timers",
        "workers",
        "workflow_versions",
    ]


def test_schema_name_is_checked() -> None:
    for bad in ("", "1abc", 'a"b', "a b", "x" * 58, "a;drop"):
        with pytest.raises(ValueError, match="invalid schema name"):
            PostgresStore("postgresql://localhost/db", schema=bad)
    with pytest.raises(ValueError, match="pool size"):
        PostgresStore("postgresql://localhost/db", min_size=5, max_size=2)


async def test_migrations_are_idempotent(pg_url: str) -> None:
    # two processes starting together, then one more later: each migration once, one
    # version row per migration
    first, second = PostgresStore(pg_url), PostgresStore(pg_url)
    await asyncio.gather(first.open(), second.open())
    applied = await _fetchval(pg_url, "SELECT max(applied_at) FROM plait.schema_version")
    await first.close()
    await second.close()
    again = PostgresStore(pg_url)
    await again.open()
    try:
        rows = await _fetchval(pg_url, "SELECT count(*) FROM plait.schema_version")
        assert rows == postgres.SCHEMA_VERSION
        assert await _fetchval(pg_url, "SELECT max(version) FROM plait.schema_version") == (
            postgres.SCHEMA_VERSION
        )
        last = await _fetchval(pg_url, "SELECT max(applied_at) FROM plait.schema_version")
        assert last == applied
        run, created = await again.create_run(
            NewRun("r1", "wf", "workflow", None, "{}", status="running")
        )
        assert created and run.status == "running"
    finally:
        await again.close()


async def test_a_newer_schema_is_refused(pg_url: str) -> None:
    store = PostgresStore(pg_url)
    await store.open()
    await store.close()
    await _fetchval(
        pg_url, "INSERT INTO plait.schema_version (version, description) VALUES (999, 'future')"
    )
    with pytest.raises(RuntimeError, match="newer than this plait"):
        await PostgresStore(pg_url).open()


async def test_times_are_timestamptz_and_json_is_json_as_written(pg_url: str) -> None:
    store = PostgresStore(pg_url)
    await store.open()
    try:
        before = time.time()
        payload = '{"nested": {"list": [1, 2.5, "three", null]}, "unicode": "\\u00e9t\\u00e9"}'
        run, _ = await store.create_run(
            NewRun("r1", "wf", "workflow", None, payload, status="running")
        )
        assert run.input == {"nested": {"list": [1, 2.5, "three", None]}, "unicode": "été"}
        assert before - 1 <= run.created_at.timestamp() <= time.time() + 1
        types = await _fetchval(
            pg_url,
            "SELECT pg_typeof(created_at)::text || ',' || pg_typeof(input)::text"
            " FROM plait.runs WHERE id = 'r1'",
        )
        assert types == "timestamp with time zone,json"
        # a float wake-up time survives the round trip to the microsecond
        at = time.time() + 3600.123456
        await store.wake("r1", at)
        snapshot = await store.load_pass("r1")
        assert snapshot is not None and snapshot.run.wake_at is not None
        assert snapshot.run.wake_at <= time.time()  # created due now; the later wake keeps it
        await _fetchval(pg_url, "UPDATE plait.runs SET wake_at = NULL WHERE id = 'r1'")
        await store.wake("r1", at)
        snapshot = await store.load_pass("r1")
        assert snapshot is not None
        assert abs((snapshot.run.wake_at or 0) - at) < 1e-6
    finally:
        await store.close()


async def test_a_steps_end_changes_no_index(pg_url: str) -> None:
    """Every step row is written when its attempt starts and again when it ends. If an
    index used a column the end changes, each end would add entries to every index of
    steps; with none, the end is a heap-only update on the row's page."""
    async with plait.Engine(_simple_app(), pg_url) as engine:
        run_id = await engine.start("double", 2)
        assert (await engine.wait(run_id, timeout=10)).output == 4
    conn = await asyncpg.connect(pg_url)
    try:
        indexes = await conn.fetch(
            "SELECT indexrelid::regclass::text AS name, pg_get_indexdef(indexrelid) AS def"
            " FROM pg_index WHERE indrelid = 'plait.steps'::regclass"
        )
        assert indexes, "steps has no index at all"
        ended = ("status", "output", "error", "attempts", "failures", "updated_at", "delivered")
        for index in indexes:
            for column in ended:
                assert not re.search(rf"\b{column}\b", index["def"]), (index["name"], column)
        measuring = conn.transaction()
        await measuring.start()
        # what a step's end writes, counted by this transaction's own statistics
        await conn.execute(
            "UPDATE plait.steps SET status = 'failed', output = NULL,"
            ' error = \'{"message": "x"}\', failures = failures + 1,'
            " attempt_status = 'failed', attempt_finished = now(), updated_at = now()"
            " WHERE run_id = $1",
            run_id,
        )
        counts = await conn.fetchrow(
            "SELECT n_tup_upd, n_tup_hot_upd FROM pg_stat_xact_user_tables"
            " WHERE relid = 'plait.steps'::regclass"
        )
        assert (counts["n_tup_upd"], counts["n_tup_hot_upd"]) == (1, 1)
        await measuring.rollback()
    finally:
        await conn.close()


async def test_first_attempts_are_written_as_commit_steps_writes_them(pg_url: str) -> None:
    """A batch of first attempts (every sequential step's write) goes to the server as
    plain rows, their attempt columns filled by the store, not by the schema's function.
    Whatever the mix of step writes, their order and the batch's size (one step, several,
    more than one statement takes), the rows must come out as ``commit_steps`` writes the
    same ops; a batch that no longer holds the lease writes nothing."""
    rng = random.Random(18)
    store = PostgresStore(pg_url)
    await store.open()
    keys = [f"k{i}" for i in range(24)]
    try:
        for run_id in ("rows", "function"):
            await store.create_run(
                NewRun(
                    run_id,
                    "wf",
                    "workflow",
                    None,
                    "{}",
                    lease_owner="w1",
                    lease_seconds=600.0,
                    status="running",
                )
            )
        for round_ in range(40):
            size = rng.choice((1, 1, 2, 2, 3, 5, 16, 17))
            steps = [_random_step(rng, key, round_) for key in rng.sample(keys, size)]
            at = T0 + round_
            store._now = lambda at=at: at  # type: ignore[method-assign]
            rows = [_random_write(rng, dataclasses.replace(s, run_id="rows")) for s in steps]
            assert await store.commit(Batch("rows", rows, fence="w1")) is False
            same = [_op_value(_for_run(op, "function")) for op in rows]
            assert await store._call(
                "fetchval", store._q["commit_steps"], "function", "w1", same, at
            )
            with pytest.raises(LeaseLostError):
                await store.commit(Batch("rows", rows[:1], fence="w2"))
        query = "SELECT * FROM plait.steps WHERE run_id = $1 ORDER BY key"
        written = [
            [
                {k: v for k, v in r.items() if k != "run_id"}
                for r in await store._call("fetch", query, run)
            ]
            for run in ("rows", "function")
        ]
        assert len(written[0]) == len(keys)
        assert written[0] == written[1]
    finally:
        await store.close()


async def test_a_batch_that_takes_an_event_is_written_as_commit_batch_writes_it(
    pg_url: str,
) -> None:
    """The step after a wait for an event commits the wait's step, the event taken and the
    next step's first attempt as one statement of plain rows, not through the schema's
    function. Rows and events must come out as ``commit_batch`` writes the same ops: an
    event another pass took refuses the whole batch, a batch that no longer holds the
    lease writes nothing and takes no event, and in a run that ended meanwhile the event
    is taken, the wait's step written and no attempt started."""
    store = PostgresStore(pg_url)
    await store.open()
    runs = ("rows", "function")
    try:
        for run_id in runs:
            await store.create_run(
                NewRun(
                    run_id,
                    "wf",
                    "workflow",
                    None,
                    "{}",
                    lease_owner="w1",
                    lease_seconds=600.0,
                    status="running",
                )
            )

        async def event(run_id: str, name: str) -> int:
            await store.send_event(run_id, name, '"x"')
            query = "SELECT max(id) FROM plait.events WHERE run_id = $1"
            return int(await store._call("fetchval", query, run_id, read=True))

        def batch(run_id: str, event_id: int, n: int) -> list[Op]:
            wait = step("-", f"__event:e{n}", seq=2 * n, kind="event", status="succeeded")
            after = step("-", f"s{n}", seq=2 * n + 1, status="running", attempts=1)
            return [
                PutStep(dataclasses.replace(wait, run_id=run_id, output='"x"')),
                ConsumeEvent(event_id, wait.key),
                StartAttempt(dataclasses.replace(after, run_id=run_id), 1, "running", "w1:a"),
            ]

        end = StepEnd("failed", None, "{}", failures=1)

        async def both(
            n: int, taken_by: str | None = None, fence: str = "w1", cancelled: bool = False
        ) -> list[Any]:
            """The batch of round ``n`` committed by the store and by commit_batch: what
            each raised or answered. Its event is taken first by ``taken_by``, or its run
            ``cancelled`` once the event is stored."""
            answers: list[Any] = []
            for run_id in runs:
                event_id = await event(run_id, f"e{n}")
                if taken_by is not None:
                    query = "UPDATE plait.events SET consumed_by = $2 WHERE id = $1"
                    await store._call("execute", query, event_id, taken_by)
                if cancelled:
                    await store.cancel_run(run_id, "cancelled", "{}", end, CUT)
                ops = batch(run_id, event_id, n)
                try:
                    if run_id == "rows":
                        answers.append(await store.commit(Batch(run_id, ops, fence=fence)))
                    else:
                        values = [_op_value(op) for op in ops]
                        answers.append(
                            await store._call(
                                "fetchval", store._q["commit_batch"], run_id, fence, values, at
                            )
                        )
                except Exception as exc:  # the function's refusal: the lease's SQLSTATE
                    answers.append(getattr(exc, "sqlstate", None) or type(exc))
            return answers

        sent: list[str] = []
        held = store._pool.call_held

        async def spy(method: str, query: str, *args: Any) -> Any:
            sent.append(query)
            return await held(method, query, *args)

        store._pool.call_held = spy  # type: ignore[method-assign]
        at = T0
        for n in range(3):
            at = T0 + n
            store._now = lambda at=at: at  # type: ignore[method-assign]
            assert await both(n) == [False, "done"]
        one_statement = _first_attempts_statement(store._q["commit_first_attempts_consuming"], 2)
        assert sent == [one_statement] * 3
        at = T0 + 3
        store._now = lambda: T0 + 3  # type: ignore[method-assign]
        assert await both(3, taken_by="another pass") == [LeaseLostError, "PLT01"]
        assert await both(4, fence="w2") == [LeaseLostError, "PLT01"]
        assert await both(5, cancelled=True) == [RunEndedElsewhereError, "ended"]
        steps = "SELECT * FROM plait.steps WHERE run_id = $1 ORDER BY key"
        events = "SELECT name, consumed_by FROM plait.events WHERE run_id = $1 ORDER BY id"
        written = [
            (
                [
                    {k: v for k, v in r.items() if k != "run_id"}
                    for r in await store._call("fetch", steps, run)
                ],
                [tuple(r) for r in await store._call("fetch", events, run)],
            )
            for run in runs
        ]
        assert written[0] == written[1]
        keys = [r["key"] for r in written[0][0]]
        assert keys == ["__event:e0", "__event:e1", "__event:e2", "__event:e5", "s0", "s1", "s2"]
        assert written[0][1] == [
            ("e0", "__event:e0"),
            ("e1", "__event:e1"),
            ("e2", "__event:e2"),
            ("e3", "another pass"),
            ("e4", None),
            ("e5", "__event:e5"),
        ]
    finally:
        await store.close()


def _random_step(rng: random.Random, key: str, round_: int) -> StepRow:
    status = rng.choice(("pending", "running", "succeeded", "failed", "sleeping"))
    return step(
        "-",
        key,
        seq=round_,
        status=status,
        input=rng.choice((None, '{"n": 1}', "[1, 2]")),
        output=rng.choice((None, '"x"', "3")),
        error=rng.choice((None, '{"message": "no"}')),
        attempts=rng.choice((0, 1)),
        failures=rng.choice((0, 1)),
        retries=rng.choice((0, 2)),
        retry_delay=rng.choice((None, 0.5)),
        timeout=rng.choice((None, 3.0)),
        child_run_id=rng.choice((None, f"child-{key}")),
        branch=rng.choice((None, "b1")),
        queued=rng.choice((False, True)),
        wake_at=rng.choice((None, T0 + 60)),
        updated_at=T0 + round_,
        delivered=rng.choice((None, round_)),
        reached_after=rng.choice((None, '["k1"]')),
    )


def _random_write(rng: random.Random, row: StepRow) -> Op:
    kind = rng.choice(("put", "start", "finish"))
    if kind == "put":
        return PutStep(row)
    if kind == "start":
        return StartAttempt(row, 1, "running", rng.choice((None, "w1:a")))
    status = rng.choice(("succeeded", "failed", "interrupted", "cancelled"))
    return FinishAttempt(row, 1, status, rng.choice((None, '"y"')), rng.choice((None, '"e"')))


def _for_run(op: Op, run_id: str) -> Op:
    row = dataclasses.replace(op.step, run_id=run_id)  # type: ignore[union-attr]
    if isinstance(op, PutStep):
        return PutStep(row)
    if isinstance(op, StartAttempt):
        return StartAttempt(row, op.attempt, "running", op.worker)
    assert isinstance(op, FinishAttempt)
    return FinishAttempt(row, op.attempt, op.status, op.output, op.error)


async def test_without_named_statements_every_write_path_works(pg_url: str) -> None:
    """``statement_cache_size=0`` is for a connection pooler that forbids named prepared
    statements: every write is then sent unnamed, the steps of a sequential step's write
    and of a wide gather, a retry, a child run and a run's end alike."""
    app = plait.App("unnamed")
    tries: Counter = Counter()

    @app.function(retries=2, retry_delay=0.01)
    def flaky(n: int) -> int:
        tries.hit(n)
        if tries[n] == 1:
            raise RuntimeError("once")
        return n

    @app.workflow
    async def leaf(wf: plait.Workflow, n: int) -> int:
        return await wf.do("flaky", flaky, n)

    @app.workflow
    async def tree(wf: plait.Workflow, n: int) -> int:
        total = 0
        for i in range(3):
            total += await wf.do("step", lambda i=i: i)
        wide = await asyncio.gather(*(wf.do(f"wide {i}", lambda i=i: i) for i in range(20)))
        return total + sum(wide) + await wf.do("child", "leaf", n)

    async with plait.Engine(app, pg_url, statement_cache_size=0) as engine:
        assert await engine.run("tree", 5, timeout=30) == 3 + 190 + 5
    assert tries[5] == 2


# -- wake-ups ------------------------------------------------------------------------------------


async def test_notify_wakes_a_waiter_in_another_engine(pg_url: str) -> None:
    gate = asyncio.Event()
    app = plait.App("notify")

    @app.function
    async def held(data: None) -> str:
        await gate.wait()
        return "done"

    @app.workflow
    async def gated(wf: plait.Workflow, data: None) -> str:
        return await wf.do("held", held)

    async with (
        plait.Engine(app, pg_url) as worker,
        plait.Engine(app, pg_url, workers=False) as waiter,
    ):
        assert waiter.store.listening
        run_id = await worker.start("gated")
        looks = 0
        statuses = waiter.store.run_statuses

        async def counted(rids: Any) -> Any:
            nonlocal looks
            looks += 1
            return await statuses(rids)

        waiter.store.run_statuses = counted  # type: ignore[method-assign]
        waiting = asyncio.create_task(waiter.wait(run_id, timeout=30))
        # The run-end poll under Engine.wait backs off 0.05, 0.1, ... 0.8, then 1 s. Once
        # it has polled six times the next poll is about a second away, so a quick return
        # is the NOTIFY.
        await eventually(_at_least(lambda: looks, 6), what="the waiter's look to back off")
        gate.set()
        opened = time.monotonic()
        run = await waiting
        latency = time.monotonic() - opened
        print(f"\nwaiter in another engine returned {latency * 1000:.1f} ms after the step ended")
        assert run.status == "completed" and run.output == "done"
        assert latency < 0.3, f"the waiter took {latency:.3f}s: it was not woken by NOTIFY"


async def test_notify_wakes_an_idle_worker(pg_url: str) -> None:
    app = _simple_app()
    async with (
        plait.Engine(app, pg_url, poll_interval=30) as worker,
        plait.Engine(app, pg_url, workers=False) as client,
    ):
        await eventually(_idle_for_a_moment(worker), what="the worker to go idle")
        started = time.monotonic()
        run_id = await client.start("double", 21)
        run = await client.wait(run_id, timeout=10)
        took = time.monotonic() - started
        print(f"\nidle worker picked up and finished a run in {took * 1000:.1f} ms")
        assert run.output == 42
        assert took < 2.0, "the worker waited for its poll instead of the NOTIFY"


def _at_least(value: Callable[[], int], n: int) -> Callable[[], Awaitable[bool]]:
    async def check() -> bool:
        return value() >= n

    return check


def _idle_for_a_moment(engine: plait.Engine) -> Callable[[], Awaitable[bool]]:
    async def check() -> bool:
        return not engine.worker.driving and not engine.worker.wake_passes.is_set()

    return check


# -- a pass whose write failed with an unknown outcome --------------------------------------------


async def test_a_pass_that_lost_a_write_cannot_write_again(pg_url: str) -> None:
    store = PostgresStore(pg_url)
    await store.open()
    try:
        await store.create_run(
            NewRun(
                "r1",
                "wf",
                "workflow",
                None,
                "{}",
                lease_owner="w1",
                lease_seconds=60,
                status="running",
            )
        )
        pool = store._pool

        async def broken(*args: Any, **kw: Any) -> Any:
            raise DatabaseUnavailableError("connection lost in the middle of the commit")

        # a pass's commits go on the group commit's own connection (call_held)
        pool.call_held = broken  # type: ignore[method-assign]
        with pytest.raises(DatabaseUnavailableError):
            await store.commit(Batch("r1", [SetState("a", "1")], fence="w1"))
        del pool.call_held  # the class's again
        # the server is back, but this pass may not record anything (such as "failed")
        with pytest.raises(DatabaseUnavailableError, match="will be replayed"):
            await store.commit(Batch("r1", [SetState("a", "2")], fence="w1"))
        snapshot = await store.load_pass("r1")  # the next pass starts from the database
        assert snapshot is not None and snapshot.state == {}
        await store.commit(Batch("r1", [SetState("a", "3")], fence="w1"))
        snapshot = await store.load_pass("r1")
        assert snapshot is not None and snapshot.state == {"a": "3"}
    finally:
        await store.close()


@contextlib.asynccontextmanager
async def _impatient_store(pg_url: str, *run_ids: str) -> AsyncIterator[tuple[Any, Any]]:
    """A store with command_timeout 0.5 s, ``run_ids`` leased to w1 (a first write to
    the first took the group commit's connection), and a connection to hold rows with."""
    store = PostgresStore(pg_url, command_timeout=0.5)
    await store.open()
    holder = await asyncpg.connect(pg_url)
    try:
        for run_id in run_ids:
            await store.create_run(
                NewRun(
                    run_id,
                    "wf",
                    "workflow",
                    None,
                    "{}",
                    lease_owner="w1",
                    lease_seconds=60,
                    status="running",
                )
            )
        await store.commit(Batch(run_ids[0], [SetState("a", "1")], fence="w1"))
        yield store, holder
    finally:
        await holder.close()
        await store.close()


async def _a_blocked_write_times_out(store: Any, holder: Any) -> Any:
    """Hold r1's row and see a write to it fail after command_timeout; returns the
    transaction that holds the row."""
    tx = holder.transaction()
    await tx.start()
    await holder.execute("SELECT 1 FROM plait.runs WHERE id = 'r1' FOR UPDATE")
    started = time.monotonic()
    with pytest.raises(DatabaseUnavailableError, match="longer than command_timeout"):
        await store.commit(Batch("r1", [SetState("a", "2")], fence="w1"))
    assert 0.5 <= time.monotonic() - started < 5
    return tx


async def test_a_write_longer_than_command_timeout_counts_as_a_lost_connection(
    pg_url: str,
) -> None:
    """The group commit's connection sets no timer per statement; one watch cuts short a
    call that takes longer than command_timeout (the server cancels its statement), which
    then fails as a lost connection would (its outcome unknown), and the next write takes
    a fresh connection. Other statements keep asyncpg's own timeout."""
    async with _impatient_store(pg_url, "r1", "r2") as (store, holder):
        held = store._pool._held
        pid = held.get_server_pid()
        tx = await _a_blocked_write_times_out(store, holder)

        async def cancelled() -> bool:  # the server's statement too, not only the call
            return not await _fetchval(  # not from holder: its transaction keeps a snapshot
                pg_url,
                "SELECT count(*) FROM pg_stat_activity WHERE pid = $1 AND state = 'active'",
                pid,
            )

        await eventually(cancelled, what="the timed-out statement to be cancelled")
        assert store._pool._held is None  # the next write takes a fresh connection
        with pytest.raises(DatabaseUnavailableError, match="TimeoutError"):  # asyncpg's own
            await store._pool.call("execute", "SELECT 1 FROM plait.runs WHERE id = 'r1' FOR UPDATE")
        await tx.rollback()
        await store.commit(Batch("r2", [SetState("b", "1")], fence="w1"))
        assert store._pool._held is not held
        snapshot = await store.load_pass("r2")
        assert snapshot is not None and snapshot.state == {"b": "1"}


async def test_the_command_timeout_watch_looks_only_at_statements(pg_url: str) -> None:
    """A held call retried after a serialization failure waits a moment between tries;
    the watch going off in that moment must not cancel the task (nobody did) nor stop
    watching: a write blocked afterwards is still cut short after command_timeout."""
    async with _impatient_store(pg_url, "r1") as (store, holder):
        # each try fails just before command_timeout, so the watch goes off between tries
        fails_late = (
            "DO $$ BEGIN PERFORM pg_sleep(0.494); "
            "RAISE EXCEPTION 'conflict' USING ERRCODE = '40001'; END $$"
        )
        call = asyncio.create_task(store._pool.call_held("execute", fails_late))
        with pytest.raises((asyncpg.SerializationError, DatabaseUnavailableError)):
            await call
        assert call.cancelling() == 0
        tx = await _a_blocked_write_times_out(store, holder)
        await tx.rollback()


async def test_a_passs_commits_keep_one_connection_and_replace_a_lost_one(pg_url: str) -> None:
    """The group commit sends one batch or group at a time, so its statements keep one
    connection instead of taking one from the pool and giving it back each time; one the
    server dropped is replaced, and no write is lost or doubled."""
    store = PostgresStore(pg_url)
    await store.open()
    try:
        await store.create_run(
            NewRun(
                "r1",
                "wf",
                "workflow",
                None,
                "{}",
                lease_owner="w1",
                lease_seconds=60,
                status="running",
            )
        )
        await store.commit(Batch("r1", [SetState("a", "1")], fence="w1"))
        held = store._pool._held
        assert held is not None
        await store.commit(Batch("r1", [SetState("b", "2")], fence="w1"))
        assert store._pool._held is held
        # the server ends that connection while it is idle
        async with store._pool.acquire() as other:
            pid = held.get_server_pid()
            assert await other.fetchval("SELECT pg_terminate_backend($1)", pid)

        async def gone() -> bool:
            try:
                return held.is_closed()
            except asyncpg.InterfaceError:  # closed, and taken back by the pool
                return True

        await eventually(gone, what="the held connection to notice its end")
        # a statement that never left is sent again on a fresh connection
        await store.commit(Batch("r1", [SetState("c", "3")], fence="w1"))
        assert store._pool._held is not None and store._pool._held is not held
        snapshot = await store.load_pass("r1")
        assert snapshot is not None and snapshot.state == {"a": "1", "b": "2", "c": "3"}
    finally:
        await store.close()


# -- a database that goes away ------------------------------------------------------------------


def _load_app(counter: Counter) -> plait.App:
    app = plait.App("load")

    @app.function
    async def bump(n: int) -> int:
        counter.hit("bump")
        await asyncio.sleep(0.02)
        return n + 1

    @app.function(queued=True)
    async def far(n: int) -> int:
        counter.hit("far")
        await asyncio.sleep(0.02)
        return n * 10

    @app.workflow
    async def chain(wf: plait.Workflow, n: int) -> int:
        a = await wf.do("first", bump, n)
        await wf.sleep("nap", 0.05)
        b = await wf.do("far", far, a)
        c = await wf.do("second", bump, b)
        return await wf.do("third", bump, c)

    return app


async def _settled(engine: plait.Engine, run_ids: list[str]) -> list[plait.Run] | None:
    """All runs once every one is settled; None while some are not (or the database is
    away: the test waits through that like any caller would)."""
    try:
        runs = [await engine.get_run(rid) for rid in run_ids]
    except DatabaseUnavailableError:
        return None
    return runs if all(r.status in SETTLED for r in runs) else None


def _failures(runs: list[plait.Run]) -> list[tuple[str, str, Any]]:
    return [(r.id, r.status, r.error) for r in runs if r.status != "completed"]


def _report(label: str, counter: Counter, runs: list[plait.Run]) -> None:
    executions = counter["bump"] + counter["far"]
    steps = 4 * len(runs)
    print(
        f"\n{label}: {len(runs)} runs, {steps} steps, {executions} executions,"
        f" {executions - steps} re-executions"
    )


@pytest.fixture
def own_cluster(pg_cluster: Any) -> Iterator[Any]:
    """A cluster of its own, so restarting it disturbs no other test."""
    from plait.testing.postgres import TemporaryCluster

    with TemporaryCluster() as cluster:
        yield cluster


@pytest.mark.slow
async def test_a_server_restart_under_load_loses_and_fails_nothing(own_cluster: Any) -> None:
    url = own_cluster.create_database("restart")
    counter = Counter()
    async with plait.Engine(_load_app(counter), url, poll_interval=0.2) as engine:
        run_ids = [await engine.start("chain", n) for n in range(50)]
        await eventually(_at_least(lambda: counter["bump"], 25), what="the load to get going")
        await asyncio.to_thread(own_cluster.restart)
        runs = await eventually(
            lambda: _settled(engine, run_ids), timeout=90, what="every run to settle"
        )
        _report("server restart under load", counter, runs)
        assert _failures(runs) == []
        assert [r.output for r in runs] == [(n + 1) * 10 + 2 for n in range(50)]
        await eventually(lambda: _true(engine.store.listening), what="LISTEN to reconnect")

        # while the server is down every call fails with one clear error...
        await asyncio.to_thread(own_cluster.stop)
        with pytest.raises(DatabaseUnavailableError, match="is unavailable"):
            await engine.store.get_run(run_ids[0])
        # ...and the same pool works again once it is back
        await asyncio.to_thread(own_cluster.start)
        assert (await engine.get_run(run_ids[0])).status == "completed"
        assert await engine.run("chain", 1, timeout=30) == 22


async def test_dropped_connections_under_load_lose_and_fail_nothing(pg_url: str) -> None:
    counter = Counter()
    async with plait.Engine(_load_app(counter), pg_url, poll_interval=0.2) as engine:
        run_ids = [await engine.start("chain", n) for n in range(30)]
        await eventually(_at_least(lambda: counter["bump"], 15), what="the load to get going")
        dropped = await _fetchval(
            pg_url,
            "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity"
            " WHERE datname = current_database() AND pid <> pg_backend_pid()",
        )
        assert dropped >= 2  # the pool's connections and the LISTEN connection
        runs = await eventually(
            lambda: _settled(engine, run_ids), timeout=60, what="every run to settle"
        )
        _report("dropped connections under load", counter, runs)
        assert _failures(runs) == []
        await eventually(lambda: _true(engine.store.listening), what="LISTEN to reconnect")


async def _true(value: bool) -> bool:
    return value


async def test_calls_beyond_the_pool_size_wait_for_a_kept_connection(pg_url: str) -> None:
    """Calls keep their connections rather than hand them back to asyncpg's pool, so a
    call that finds every connection out must be given the next one a call is done with:
    with two connections, sixty calls at once (some cancelled while they wait) all end,
    and the pool never opens a third."""
    store = PostgresStore(pg_url, min_size=1, max_size=2)
    await store.open()
    try:
        ids = [f"r{i}" for i in range(20)]
        for run_id in ids:
            await store.create_run(NewRun(run_id, "wf", "workflow", None, "{}", status="running"))
        reads = [asyncio.ensure_future(store.get_run(ids[i % 20])) for i in range(60)]
        await asyncio.sleep(0)  # every read has taken a connection or is waiting for one
        for read in reads[10:60:10]:
            read.cancel()
        done = await asyncio.wait_for(asyncio.gather(*reads, return_exceptions=True), 10)
        cancelled = [r for r in done if isinstance(r, asyncio.CancelledError)]
        assert len(cancelled) <= 5
        assert all(
            r.id == ids[i % 20] for i, r in enumerate(done) if not isinstance(r, BaseException)
        )
        # the connections the cancelled waiters were handed are not lost: more calls run
        assert [r.id for r in await asyncio.gather(*(store.get_run(i) for i in ids))] == ids
        async with store._pool.acquire() as other:
            backends = await other.fetchval(
                "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database()"
                " AND backend_type = 'client backend' AND query NOT LIKE 'LISTEN%'"
            )
        assert store._pool._out <= 2
        assert backends <= 2, backends  # the pool's two (this is one of them; LISTEN aside)
    finally:
        await store.close()


async def test_a_cancel_of_a_child_locks_its_parent_first(pg_url: str) -> None:
    """Every writer that ends a child run locks its parent's row before the child's (a
    child's own end, and a parent's end that cancels its live children). A cancel of the
    child that took the child's row first would deadlock with its parent failing at the
    same moment: the cancel must wait for the parent before it touches the child."""
    store = PostgresStore(pg_url)
    await store.open()
    holder = await asyncpg.connect(pg_url)
    try:
        await store.create_run(NewRun("p", "wf", "workflow", None, "{}", status="running"))
        waiting = step("p", "k", kind="child", function=None, status="running", attempts=1)
        waiting.child_run_id = "c"
        child = NewRun(
            "c",
            "wf",
            "workflow",
            None,
            "{}",
            parent_run_id="p",
            parent_step_key="k",
            status="running",
        )
        await store.commit(
            Batch("p", [StartAttempt(waiting, 1, "running", "w1"), CreateChildRun(child)])
        )
        holding = holder.transaction()
        await holding.start()
        await holder.execute("SELECT 1 FROM plait.runs WHERE id = 'p' FOR UPDATE")
        cancel = asyncio.ensure_future(
            store.cancel_run(
                "c",
                "cancelled",
                '{"message": "stop"}',
                StepEnd("failed", None, "{}", failures=1),
                CUT,
            )
        )

        async def cancel_waits() -> bool:
            return bool(
                await _fetchval(
                    pg_url,
                    "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock'"
                    " AND datname = current_database()",
                )
            )

        await eventually(cancel_waits, what="the cancel to wait for a lock")
        free = await holder.fetch("SELECT id FROM plait.runs WHERE id = 'c' FOR UPDATE SKIP LOCKED")
        assert len(free) == 1  # the cancel holds nothing of the child while it waits
        await holding.rollback()
        assert await asyncio.wait_for(cancel, 10) == ["c"]
    finally:
        await holder.close()
        await store.close()


async def test_a_batch_that_cancels_children_is_not_held_up_by_nor_holds_up_a_group(
    pg_url: str,
) -> None:
    """A group never waits on a lock, so a batch that must wait for a child's row (the
    end of a run that cancels its live children) is committed apart: the batches handed
    in beside it are answered while another transaction still holds the child's row."""
    store = PostgresStore(pg_url)
    await store.open()
    holder = await asyncpg.connect(pg_url)
    try:
        for run_id in ("p", "x", "a"):
            await store.create_run(NewRun(run_id, "wf", "workflow", None, "{}", status="running"))
            assert await store.claim_run(run_id, "w1", 60.0)
        waiting = step("p", "k", kind="child", function=None, status="running", attempts=1)
        waiting.child_run_id = "c"
        child = NewRun(
            "c",
            "wf",
            "workflow",
            None,
            "{}",
            parent_run_id="p",
            parent_step_key="k",
            status="running",
        )
        await store.commit(
            Batch(
                "p", [StartAttempt(waiting, 1, "running", "w1"), CreateChildRun(child)], fence="w1"
            )
        )
        holding = holder.transaction()
        await holding.start()
        await holder.execute("SELECT 1 FROM plait.runs WHERE id = 'c' FOR UPDATE")
        error = '{"message": "parent run p failed"}'
        ending = [
            EndRun("failed", None, '{"message": "boom"}'),
            CancelChildren("cancelled", error, None, CUT),
        ]
        first = asyncio.ensure_future(
            store.commit(Batch("x", [StartAttempt(step("x", "s"), 1, "running", "w1")], fence="w1"))
        )
        end = asyncio.ensure_future(store.commit(Batch("p", ending, fence="w1")))
        beside = asyncio.ensure_future(
            store.commit(Batch("a", [StartAttempt(step("a", "s"), 1, "running", "w1")], fence="w1"))
        )
        await asyncio.wait_for(asyncio.gather(first, beside), 10)
        assert not end.done()
        await holding.rollback()
        await asyncio.wait_for(end, 10)
        cancelled = await store.get_run("c")
        assert cancelled is not None and cancelled.status == "cancelled"
    finally:
        await holder.close()
        await store.close()


async def test_a_start_tells_the_other_processes_once(pg_url: str) -> None:
    """The transaction that creates a run NOTIFYs 'due'; the engine that started it sends
    no second notice, which would only have woken every worker for a claim already made
    (it cost each start a statement, and each worker a claim that found nothing)."""
    heard: list[str] = []
    marker = asyncio.Event()

    def on_notify(_conn: Any, _pid: int, _channel: str, payload: str) -> None:
        heard.append(payload)
        if payload.endswith("run:marker"):
            marker.set()

    listener = await asyncpg.connect(pg_url)
    try:
        await listener.add_listener("plait_plait", on_notify)
        async with plait.Engine(_simple_app(), pg_url, workers=False) as engine:
            run_id = await engine.start("double", 2)
            # the engine's own notices go out in order through one outbox: once the marker
            # published after the start arrives, any notice of the start has arrived
            engine.notifier.run_changed("marker")
            await asyncio.wait_for(marker.wait(), 10)
        assert [p for p in heard if p.split("|")[-1] in WORK_KINDS] == ["due"], heard
        assert await _fetchval(pg_url, 'SELECT status FROM "plait".runs WHERE id = $1', run_id)
    finally:
        await listener.close()


async def test_an_event_tells_the_other_processes_once(pg_url: str) -> None:
    """The transaction that stores an event for a running run wakes it and NOTIFYs 'due'
    and 'busy:<run>'; the engine that sent it sends no notice of its own, which would only
    have woken every loop of every worker, their claims finding nothing as the woken
    run's pass starts, and cost a statement. An event kept for a run that is not running
    (one that starts later) is heard as a change of the run all the same."""
    app = plait.App("pg-event")

    @app.workflow
    async def waits(wf: plait.Workflow) -> Any:
        return await wf.wait_for_event("go")

    heard: list[str] = []
    marker = asyncio.Event()

    def on_notify(_conn: Any, _pid: int, _channel: str, payload: str) -> None:
        heard.append(payload)
        if payload.endswith("run:marker"):
            marker.set()

    listener = await asyncpg.connect(pg_url)
    try:
        async with plait.Engine(app, pg_url, workers=False) as engine:
            run_id = await engine.start(waits)  # not driven here: it stays running
            later = await engine.start(waits, delay=3600)
            await listener.add_listener("plait_plait", on_notify)
            assert await engine.send_event(run_id, "go", 1) is False
            assert await engine.send_event(later, "go", 2) is False
            # the engine's own notices go out in order through one outbox: once the marker
            # published after the send arrives, any notice of the send has arrived
            engine.notifier.run_changed("marker")
            await asyncio.wait_for(marker.wait(), 10)
        kinds = [p.split("|")[-1] for p in heard]
        assert [k for k in kinds if k in WORK_KINDS] == ["due"], heard
        assert kinds.count(f"busy:{run_id}") == 1, heard  # the commit's alone
        assert kinds.count(f"busy:{later}") == 1, heard
    finally:
        await listener.close()


async def test_reopens_made_at_once_share_one_transaction(pg_url: str) -> None:
    """A bulk retry's lanes reopen runs side by side: while one reopen is on its way, the
    others wait and go together, one statement and one WAL flush for all of them (the
    answers each caller gets: tests/store/test_actions.py)."""
    store = PostgresStore(pg_url)
    await store.open()
    try:
        run_ids = [f"r{i}" for i in range(8)]
        for run_id in run_ids:
            await store.create_run(
                NewRun(run_id, "wf", "workflow", None, input="{}", status="running")
            )
            await store.commit(Batch(run_id, [EndRun("failed", None, '{"message": "x"}')]))
        seen = {r: (await store.load_pass(r)).run.wakeups for r in run_ids}  # type: ignore[union-attr]
        before = store.commits
        runs = await asyncio.gather(
            *(store.reopen_run(r, "failed", "running", None, seen[r], []) for r in run_ids)
        )
        assert [run.status if run else None for run in runs] == ["running"] * 8
        # the first goes alone, the seven made meanwhile as one
        assert store.commits - before == 2
    finally:
        await store.close()


async def test_a_claim_forgets_no_failed_write_before_its_pass_starts(pg_url: str) -> None:
    """A write whose outcome is unknown taints its pass: the store refuses that pass's
    later writes. A claim that reads the run's pass must not lift that at the claim, when
    the earlier pass of this process may still be finishing under the same owner; the
    pass that starts from the claim's read lifts it (as ``load_pass`` does)."""
    store = PostgresStore(pg_url)
    await store.open()
    try:
        await store.create_run(NewRun("r1", "wf", "workflow", None, input="{}", status="running"))
        store._tainted.add(("r1", "w1"))  # pyright: ignore[reportPrivateUsage]
        (snapshot,) = await store.claim_due_passes("w1", 60.0, 10)
        assert snapshot.run.lease_owner == "w1"
        assert ("r1", "w1") in store._tainted  # pyright: ignore[reportPrivateUsage]
        store.starting_pass("r1")
        assert ("r1", "w1") not in store._tainted  # pyright: ignore[reportPrivateUsage]
    finally:
        await store.close()
