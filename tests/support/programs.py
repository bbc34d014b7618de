"""Random workflow programs: a generator, one interpreter, a plait app and a reference.

A *program* is plain JSON (dicts and lists), so a failing case can be printed, pasted
back and replayed without any code generation. One interpreter walks a program; it is
written once against a small ``Backend`` protocol and run twice:

* under plait, by the registered workflow ``program`` with the real ``wf`` (every step,
  sleep, event, value and child run goes through plait's durable machinery);
* under ``reference``, by plain asyncio with no durability at all, which gives the
  expected trace and the expected end.

Sharing the control flow keeps the two sides from drifting apart; what differs is only
where step outcomes come from. The trace a program returns is built from step results
and caught errors **in program order** (branch results are combined in the order the
branches are written, never in the order they finished), so it does not depend on
timing, while the step bodies sleep for random real times so that finish order differs
from run to run and from the first pass to the replays.

Slow steps (``SLOW_KINDS``) run until they are cancelled: a program cancels each one it
starts, with ``task.cancel()`` (``cancel``) or as the loser of a deadline in
``asyncio.wait`` (``race``); a ``TaskGroup`` whose branch fails cancels the steps its other
branches are running. A cancelled body writes a ``cancelled`` ledger line.

Programs obey two rules that keep the reference well defined (see ``can_fail``): in a
``gather`` without ``return_exceptions`` and in a ``TaskGroup`` at most one branch can
raise, so which failure wins never depends on timing; events are either sent (and waited
for without a timeout) or never sent (and waited for with a timeout that fires).

Every step body writes a side-effect ledger (``record``): in memory for in-process tests,
or, when ``PROGRAMS_LEDGER`` names a file, one ``O_APPEND`` write plus ``fsync`` per line
so that it survives the SIGKILL of a worker process.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import os
import random
import re
import threading
import time
import zlib
from collections.abc import Awaitable
from typing import Any, Protocol

import plait
from plait.errors import EventTimeout, StepError
from support.ledger import append_line, parse_lines

Stmt = dict[str, Any]
Block = list[Stmt]

#: step names are drawn from a tiny pool so that branches reuse the same names
NAMES = ("a", "b", "c", "fetch")
#: the retry back-off of every generated step: short, so retries cost little time
RETRY_DELAY = 0.005
_FAILS = re.compile(r"site (\S+) fails")

app = plait.App("programs")


# -- the side-effect ledger --------------------------------------------------------------------

#: in-memory ledger lines, used when ``PROGRAMS_LEDGER`` is not set
MEMORY_LEDGER: list[dict[str, Any]] = []
_ledger_lock = threading.Lock()
#: unseeded on purpose: body durations only shuffle finish order, never change results
_jitter = random.Random()


def _ledger_path() -> str | None:
    return os.environ.get("PROGRAMS_LEDGER") or None


def record(event: str, data: dict[str, Any], ctx: plait.StepContext | None, **extra: Any) -> None:
    """Append one ledger line: which site of which run started or ended, in which process.

    Closures get no ``StepContext``, so a line names the program *site* (a path in the
    program, unique within a run), not the step key; registered functions add the key,
    which lets the test check that a site always gets the same key."""
    line = {
        "event": event,
        "run": data["run"],
        "site": data["site"],
        "key": ctx.step_key if ctx else None,
        "attempt": ctx.attempt if ctx else None,
        "pid": os.getpid(),
        "t": time.time(),
        **extra,
    }
    path = _ledger_path()
    if path is None:
        with _ledger_lock:
            MEMORY_LEDGER.append(line)
        return
    append_line(path, line)


def ledger_lines() -> list[dict[str, Any]]:
    """Every ledger line so far (memory or file)."""
    path = _ledger_path()
    if path is None:
        with _ledger_lock:
            return list(MEMORY_LEDGER)
    if not os.path.exists(path):
        return []
    # a worker SIGKILLed mid-write leaves its line torn: dropped, as if it had not begun
    with open(path, "rb") as f:
        return parse_lines(f.read())


def _failures_so_far(run: str, site: str) -> int:
    """How many times this site's body already failed, by the ledger.

    Counting real failures (not ``ctx.attempt``) keeps the outcome independent of
    attempts lost to crashes and shutdowns, which do not use up the retry budget."""
    return sum(
        1
        for ln in ledger_lines()
        if ln["event"] == "end" and not ln["ok"] and ln["run"] == run and ln["site"] == site
    )


# -- step bodies -----------------------------------------------------------------------------


def step_value(data: dict[str, Any]) -> int:
    """What a step returns: derived from its input only (never from its key or timing)."""
    return (int(data["acc"]) * 31 + zlib.crc32(data["site"].encode())) % 1_000_003


class SiteFailure(RuntimeError):
    """A generated step failing on purpose; the message names the site."""


def _should_fail(data: dict[str, Any]) -> bool:
    fail = int(data["fail"])
    if fail == 0:
        return False
    return fail < 0 or _failures_so_far(data["run"], data["site"]) < fail


async def step_body(data: dict[str, Any], ctx: plait.StepContext | None = None) -> int:
    """The body of every async step, closure or registered function."""
    record("start", data, ctx)
    try:
        await asyncio.sleep(_jitter.uniform(0.0, 0.012))
    except asyncio.CancelledError:
        record("cancelled", data, ctx)
        raise
    if _should_fail(data):
        record("end", data, ctx, ok=False)
        raise SiteFailure(f"site {data['site']} fails")
    record("end", data, ctx, ok=True)
    return step_value(data)


@app.function(retries=0)
async def prog_step(data: dict[str, Any], ctx: plait.StepContext) -> int:
    """A registered async step."""
    return await step_body(data, ctx)


@app.function(retries=0)
def prog_step_sync(data: dict[str, Any], ctx: plait.StepContext) -> int:
    """A registered sync step: its body runs in a thread."""
    record("start", data, ctx)
    time.sleep(_jitter.uniform(0.0, 0.008))
    if _should_fail(data):
        record("end", data, ctx, ok=False)
        raise SiteFailure(f"site {data['site']} fails")
    record("end", data, ctx, ok=True)
    return step_value(data)


@app.function(queued=True, retries=0)
async def prog_step_queued(data: dict[str, Any], ctx: plait.StepContext) -> int:
    """A registered queued step: runs as a job on the step queue."""
    return await step_body(data, ctx)


#: how long a slow step's body would run: for ever, as far as a program goes (its
#: workflow always cancels it first)
SLOW_SECONDS = 3600.0


async def slow_body(data: dict[str, Any], ctx: plait.StepContext | None = None) -> int:
    """The body of a slow step: it runs until it is cancelled (a ledger line says so)."""
    record("start", data, ctx, slow=True)
    try:
        await asyncio.sleep(SLOW_SECONDS)
    except asyncio.CancelledError:
        record("cancelled", data, ctx, slow=True)
        raise
    record("end", data, ctx, ok=True, slow=True)
    return step_value(data)


@app.function(retries=0)
async def prog_step_slow(data: dict[str, Any], ctx: plait.StepContext) -> int:
    """A registered slow step, run in the pass."""
    return await slow_body(data, ctx)


@app.function(queued=True, retries=0)
async def prog_step_slow_queued(data: dict[str, Any], ctx: plait.StepContext) -> int:
    """A registered slow step run as a job: its cancel reaches it at a lease check."""
    return await slow_body(data, ctx)


FUNCTIONS = {
    "fn": "prog_step",
    "sync": "prog_step_sync",
    "queued": "prog_step_queued",
    "slow_fn": "prog_step_slow",
    "slow_queued": "prog_step_slow_queued",
}
#: the kinds of slow steps (``slow_closure``: a closure with a slow body)
SLOW_KINDS = ("slow_closure", "slow_fn", "slow_queued")


# -- the interpreter -------------------------------------------------------------------------


class Backend(Protocol):
    """Where a program's steps go: plait's ``wf`` or the plain-asyncio reference."""

    tag: str

    def do(self, name: str, kind: str, data: dict[str, Any], retries: int) -> Awaitable[Any]: ...

    def sleep(self, name: str, seconds: float) -> Awaitable[None]: ...

    def event(self, name: str, timeout: float | None) -> Awaitable[Any]: ...

    def now(self) -> str: ...

    def uuid(self) -> str: ...

    def child(self, name: str, data: dict[str, Any], scope: Scope) -> Awaitable[Any]: ...

    def suspend(self, reason: str) -> Awaitable[None]: ...

    def reach(self, site: str, stmt: Stmt, scope: Scope) -> None: ...


class Scope:
    """Where in the program a site was reached. A branch whose result nobody will ever
    use (a sibling failed first, so ``gather`` or the task group gave up on it) is
    *orphaned*: whether it gets further is a matter of timing, so the sites it reaches
    are only "maybe reached" in the reference."""

    def __init__(self, parent: Scope | None = None) -> None:
        self.parent = parent
        self.orphaned = False

    def definite(self) -> bool:
        scope: Scope | None = self
        while scope is not None:
            if scope.orphaned:
                return False
            scope = scope.parent
        return True


@dataclasses.dataclass
class State:
    """What flows through a block: the accumulator (every step's input and result), the
    last ``wf.uuid()`` (folded into step inputs, so a replay that saw another value would
    be a version conflict) and the loop-iteration path that makes sites unique."""

    acc: int
    salt: str
    path: str


def mix(*parts: Any) -> int:
    """A deterministic hash of JSON-able parts."""
    return zlib.crc32(json.dumps(parts, separators=(",", ":")).encode()) % 1_000_003


def error_sites(exc: BaseException) -> list[str] | None:
    """The failing sites a step failure (or a group of them) names, sorted; None when
    something else than a step failure is in there."""
    if isinstance(exc, BaseExceptionGroup):
        out: list[str] = []
        for sub in exc.exceptions:
            got = error_sites(sub)
            if got is None:
                return None
            out.extend(got)
        return sorted(out)
    if isinstance(exc, StepError):
        found = _FAILS.search(str(exc.error.get("message", "")))
        return [found.group(1)] if found else [f"?{exc.error.get('message')}"]
    return None


def failure_site(message: str) -> str | None:
    found = _FAILS.search(message or "")
    return found.group(1) if found else None


class Interpreter:
    """Runs one program (or a child's body) against a backend."""

    def __init__(self, backend: Backend) -> None:
        self.b = backend

    async def main(self, data: dict[str, Any], scope: Scope | None = None) -> dict[str, Any]:
        st = State(int(data.get("acc", 0)), "", "")
        out: list[Any] = []
        await self.block(data["body"], st, scope or Scope(), out)
        return {"trace": out, "acc": st.acc}

    async def block(self, stmts: Block, st: State, scope: Scope, out: list[Any]) -> None:
        for stmt in stmts:
            await self.stmt(stmt, st, scope, out)

    async def _branch(
        self, stmts: Block, st: State, scope: Scope, failed: list[int], i: int
    ) -> tuple[list[Any], int]:
        out: list[Any] = []
        try:
            await self.block(stmts, st, scope, out)
        except BaseException:
            failed.append(i)
            raise
        return out, st.acc

    def _step_data(self, site: str, st: State, fail: int) -> dict[str, Any]:
        return {"run": self.b.tag, "site": site, "acc": st.acc, "fail": fail, "salt": st.salt}

    async def _do(
        self, name: str, kind: str, site: str, stmt: Stmt, st: State, scope: Scope, out: list
    ) -> None:
        self.b.reach(site, stmt, scope)
        data = self._step_data(site, st, int(stmt.get("fail", 0)))
        value = await self.b.do(name, kind, data, int(stmt.get("retries", 0)))
        st.acc = int(value)
        out.append([site, value])

    async def stmt(self, stmt: Stmt, st: State, scope: Scope, out: list[Any]) -> None:
        op = stmt["op"]
        site = f"n{stmt['id']}{st.path}"
        b = self.b
        if op == "do":
            await self._do(stmt["name"], stmt["kind"], site, stmt, st, scope, out)
        elif op == "sleep":
            b.reach(site, stmt, scope)
            await b.sleep(stmt["name"], stmt["seconds"])
            out.append(["slept", site])
        elif op == "event":
            b.reach(site, stmt, scope)
            name = f"ev-{site}-{stmt['mode']}"
            try:
                got = await b.event(name, stmt.get("timeout"))
            except EventTimeout:
                got = "timeout"
            out.append(["event", site, got])
            st.acc = mix(st.acc, got)
        elif op == "now":
            stamp = b.now()
            out.append(["now", site, isinstance(stamp, str)])
        elif op == "uuid":
            st.salt = b.uuid()
            out.append(["uuid", site, len(st.salt)])
        elif op == "suspend":
            b.reach(site, stmt, scope)
            await b.suspend(f"s{stmt['id']}")
            out.append(["resumed", site])
        elif op == "loop":
            base = st.path
            for i in range(int(stmt["n"])):
                st.path = f"{base}.{i}"
                await self.block(stmt["body"], st, scope, out)
            st.path = base
        elif op == "with":
            await self._with(stmt, site, st, scope, out)
        elif op == "try":
            await self._try(stmt, site, st, scope, out)
        elif op in ("gather", "taskgroup", "tasks"):
            await self._concurrent(op, stmt, site, st, scope, out)
        elif op == "cancel":
            await self._cancel(stmt, site, st, scope, out)
        elif op == "race":
            await self._race(stmt, site, st, scope, out)
        elif op == "child":
            b.reach(site, stmt, scope)
            data = {"tag": f"{b.tag}/{site}", "acc": st.acc, "body": stmt["body"]}
            got = await b.child(stmt["name"], data, scope)
            out.append(["child", site, got["trace"]])
            st.acc = int(got["acc"])
        else:
            raise ValueError(f"unknown op {op!r}")

    async def _with(self, stmt: Stmt, site: str, st: State, scope: Scope, out: list) -> None:
        interp = self

        class Guard:
            """An async context manager whose enter and exit each take a step."""

            async def __aenter__(self) -> None:
                await interp._do(stmt["name"], "closure", f"{site}:enter", {}, st, scope, out)

            async def __aexit__(self, *exc: object) -> None:
                await interp._do(stmt["name"], "fn", f"{site}:exit", {}, st, scope, out)

        async with Guard():
            await self.block(stmt["body"], st, scope, out)

    async def _try(self, stmt: Stmt, site: str, st: State, scope: Scope, out: list) -> None:
        try:
            await self.block(stmt["body"], st, scope, out)
        except (StepError, BaseExceptionGroup) as exc:
            sites = error_sites(exc)
            if stmt.get("handler") is None or sites is None:
                raise
            out.append(["caught", site, sites])
            st.acc = mix(st.acc, sites)
            await self.block(stmt["handler"], st, scope, out)
        finally:
            if stmt.get("finally") is not None:
                await self.block(stmt["finally"], st, scope, out)

    def _slow_branch(self, stmt: Stmt, st: State, scope: Scope, what: str) -> Any:
        """The branch of ``cancel`` and ``race``: steps that cannot fail, then a slow step;
        how far it gets before it is cancelled is timing, so its sites are orphaned."""
        inner = Scope(scope)
        inner.orphaned = True
        state = State(mix(st.acc, what), st.salt, st.path)
        return self.block(stmt["branches"][0], state, inner, [])

    async def _cancel(self, stmt: Stmt, site: str, st: State, scope: Scope, out: list) -> None:
        """``task.cancel()`` of a task running a slow step, after ``between`` (nothing in
        between: the task is cancelled before it ever ran)."""
        task = asyncio.create_task(self._slow_branch(stmt, st, scope, "cancel"))
        try:
            await self.block(stmt["between"], st, scope, out)
        finally:
            task.cancel()
        await asyncio.wait([task])
        out.append(["cancelled", site, task.cancelled()])

    async def _race(self, stmt: Stmt, site: str, st: State, scope: Scope, out: list) -> None:
        """A slow step against a deadline (``asyncio.wait``, first completed); the loser is
        cancelled and left behind."""
        step = asyncio.create_task(self._slow_branch(stmt, st, scope, "race"))
        deadline = asyncio.create_task(self.b.sleep(stmt["name"], stmt["seconds"]))
        try:
            done, _ = await asyncio.wait([step, deadline], return_when=asyncio.FIRST_COMPLETED)
        finally:
            # a race cancelled while it waits (a failing task group sibling) takes both
            # sides with it: left alone, its slow step would run on, and a run waits for
            # a step nobody awaits (``asyncio.run`` would cancel it at the end instead)
            for task in (step, deadline):
                task.cancel()
        out.append(["race", site, deadline in done])

    async def _concurrent(
        self, op: str, stmt: Stmt, site: str, st: State, scope: Scope, out: list
    ) -> None:
        branches: list[Block] = stmt["branches"]
        scopes = [Scope(scope) for _ in branches]
        states = [State(mix(st.acc, i), st.salt, st.path) for i in range(len(branches))]
        failed: list[int] = []

        def coro(i: int) -> Any:
            return self._branch(branches[i], states[i], scopes[i], failed, i)

        def orphan_all_but(keep: set[int]) -> None:
            for i, s in enumerate(scopes):
                if i not in keep:
                    s.orphaned = True

        results: list[Any] = []
        if op == "gather":
            rex = bool(stmt["rex"])
            children = [asyncio.ensure_future(coro(i)) for i in range(len(branches))]
            try:
                got = await asyncio.gather(*children, return_exceptions=rex)
            except BaseException:
                orphan_all_but(set(failed[:1]))
                _give_up(children)
                raise
            for item in got:
                if isinstance(item, BaseException):
                    sites = error_sites(item)
                    if sites is None:
                        raise item
                    results.append(["err", sites])
                else:
                    results.append(item[0])
            accs = [None if isinstance(g, BaseException) else g[1] for g in got]
        elif op == "taskgroup":
            try:
                async with asyncio.TaskGroup() as group:
                    tasks = [group.create_task(coro(i)) for i in range(len(branches))]
            except BaseException:
                orphan_all_but(set(failed[:1]))
                raise
            got = [t.result() for t in tasks]
            results = [g[0] for g in got]
            accs = [g[1] for g in got]
        else:  # tasks: create_task each branch, run `between`, then await them in order
            tasks = [asyncio.create_task(coro(i)) for i in range(len(branches))]
            between: list[Any] = []
            awaiting: int | None = None  # the task being awaited, once `between` is done
            got = []
            try:
                await self.block(stmt["between"], st, scope, between)
                for i, task in enumerate(tasks):
                    awaiting = i
                    got.append(await task)
            except BaseException:
                # `between` failed: every task is given up; an await raised: that task's
                # failure is the one, the tasks after it are given up
                orphan_all_but(set() if awaiting is None else set(range(awaiting + 1)))
                _give_up(tasks)
                raise
            results = [between] + [g[0] for g in got]
            accs = [g[1] for g in got]
        out.append([op, site, results])
        st.acc = mix(st.acc, accs)


def _give_up(tasks: list[asyncio.Future[Any]]) -> None:
    """Cancel the branches a program gives up, as a careful program does. Left running,
    a branch that would later cancel its own slow step never gets there under plait: a
    run waits for a step nobody awaits, and steps taken once the workflow has returned
    never start (``asyncio.run`` cancels such branches at the end instead)."""
    for task in tasks:
        task.cancel()


# -- under plait -----------------------------------------------------------------------------


class PlaitBackend:
    """The interpreter's steps as real plait steps."""

    def __init__(self, wf: plait.Workflow, tag: str) -> None:
        self.wf = wf
        self.tag = tag

    def do(self, name: str, kind: str, data: dict[str, Any], retries: int) -> Awaitable[Any]:
        options = {"retries": retries, "retry_delay": RETRY_DELAY}
        if kind == "closure":

            async def closure(d: dict[str, Any]) -> int:
                return await step_body(d)

            return self.wf.do(name, closure, data, **options)
        if kind == "slow_closure":

            async def slow(d: dict[str, Any]) -> int:
                return await slow_body(d)

            return self.wf.do(name, slow, data, **options)
        return self.wf.do(name, FUNCTIONS[kind], data, **options)

    def sleep(self, name: str, seconds: float) -> Awaitable[None]:
        return self.wf.sleep(name, seconds)

    def event(self, name: str, timeout: float | None) -> Awaitable[Any]:
        return self.wf.wait_for_event(name, timeout=timeout)

    def now(self) -> str:
        return self.wf.now().isoformat()

    def uuid(self) -> str:
        return self.wf.uuid()

    def child(self, name: str, data: dict[str, Any], scope: Scope) -> Awaitable[Any]:
        return self.wf.do(name, "program", data)

    def suspend(self, reason: str) -> Awaitable[None]:
        return self.wf.suspend(reason)

    def reach(self, site: str, stmt: Stmt, scope: Scope) -> None:
        pass


@app.workflow
async def program(wf: plait.Workflow, data: dict[str, Any]) -> dict[str, Any]:
    """Interpret the program given as the run's input (a child run gets a sub-program)."""
    return await Interpreter(PlaitBackend(wf, data["tag"])).main(data)


# -- the reference ---------------------------------------------------------------------------


@dataclasses.dataclass
class Reached:
    """A site the reference reached, and whether every run must reach it."""

    tag: str
    site: str
    stmt: Stmt
    scope: Scope

    @property
    def definite(self) -> bool:
        return self.scope.definite()


class ReferenceBackend:
    """Plain asyncio: a step's outcome follows from its spec; small random real delays
    shuffle the order in which concurrent branches get their outcomes."""

    def __init__(self, tag: str, reached: list[Reached], rng: random.Random) -> None:
        self.tag = tag
        self.reached = reached
        self.rng = rng

    async def _jitter(self) -> None:
        await asyncio.sleep(self.rng.uniform(0.0, 0.004))

    async def do(self, name: str, kind: str, data: dict[str, Any], retries: int) -> Any:
        await self._jitter()
        if kind in SLOW_KINDS:
            await asyncio.sleep(SLOW_SECONDS)
        fail = int(data["fail"])
        if fail < 0 or fail > retries:
            raise StepError(name, {"message": f"site {data['site']} fails"})
        return step_value(data)

    async def sleep(self, name: str, seconds: float) -> None:
        await self._jitter()

    async def event(self, name: str, timeout: float | None) -> Any:
        await self._jitter()
        if name.endswith("-timeout"):
            raise EventTimeout(name, name)
        return event_payload(name)

    def now(self) -> str:
        return "2000-01-01T00:00:00+00:00"

    def uuid(self) -> str:
        return "00000000-0000-4000-8000-000000000000"

    async def child(self, name: str, data: dict[str, Any], scope: Scope) -> Any:
        await self._jitter()
        sub = ReferenceBackend(data["tag"], self.reached, self.rng)
        try:
            return await Interpreter(sub).main(data, Scope(scope))
        except BaseException as exc:
            inner = principal(exc)
            if isinstance(inner, StepError):
                raise StepError(name, inner.error) from None
            raise

    async def suspend(self, reason: str) -> None:
        await self._jitter()

    def reach(self, site: str, stmt: Stmt, scope: Scope) -> None:
        self.reached.append(Reached(self.tag, site, stmt, scope))


def event_payload(name: str) -> dict[str, str]:
    """What the harness sends for event ``name`` (and the reference returns)."""
    return {"ev": name}


def principal(exc: BaseException) -> BaseException:
    """The failure a run reports for ``exc``: the first step failure in a group, as plait
    picks it (``runtime.replay._principal``)."""
    stack: list[BaseException] = [exc]
    while stack:
        current = stack.pop(0)
        if isinstance(current, BaseExceptionGroup):
            stack[:0] = current.exceptions
        elif isinstance(current, StepError):
            return current
    return exc


@dataclasses.dataclass
class Expected:
    """What a program must do under plait, whatever faults it meets."""

    status: str
    output: Any = None
    #: for a failed run: the site that failed and the name of the step it surfaced at
    fail_site: str | None = None
    fail_name: str | None = None
    reached: list[Reached] = dataclasses.field(default_factory=list)

    def describe(self) -> str:
        if self.status == "completed":
            return f"completed with {json.dumps(self.output)}"
        return f"failed at site {self.fail_site} (step {self.fail_name!r})"


def reference(prog: dict[str, Any], seed: int = 0) -> Expected:
    """Run ``prog`` without plait, on an event loop of its own (``asyncio.run`` cancels
    the branches nobody waits for once the program ends). Call it from a thread."""
    reached: list[Reached] = []
    backend = ReferenceBackend(prog["tag"], reached, random.Random(seed))

    async def go() -> Expected:
        # a branch given up on may fail later with nobody to retrieve it: not news
        asyncio.get_running_loop().set_exception_handler(lambda _loop, _context: None)
        try:
            out = await Interpreter(backend).main(prog)
        except BaseException as exc:
            inner = principal(exc)
            if not isinstance(inner, StepError):
                raise
            site = failure_site(str(inner.error.get("message")))
            return Expected("failed", fail_site=site, fail_name=inner.step_key, reached=reached)
        return Expected("completed", output=out, reached=reached)

    return asyncio.run(go())


# -- the generator ---------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Where:
    """What the generator may put at a point of the program."""

    depth: int = 0
    #: nothing here may fail for good (a sibling branch already may)
    nofail: bool = False
    #: not inside a concurrent branch or a child run: a suspend is allowed
    top: bool = True
    #: inside a child run: no events (the harness sends events to the top run only)
    child: bool = False

    def deeper(self, **changes: Any) -> Where:
        return dataclasses.replace(self, depth=self.depth + 1, **changes)


class Generator:
    """Random programs from one seed; the same seed always gives the same program."""

    MAX_DEPTH = 3

    def __init__(self, seed: int) -> None:
        self.rng = random.Random(seed)
        self.seed = seed
        self.ids = 0

    def program(self, tag: str) -> dict[str, Any]:
        rng = self.rng
        body = self.block(Where(), rng.randint(2, 6))
        return {"tag": tag, "seed": self.seed, "acc": rng.randrange(1000), "body": body}

    def block(self, where: Where, size: int) -> Block:
        return [self.stmt(where) for _ in range(size)]

    def _id(self) -> int:
        self.ids += 1
        return self.ids

    def stmt(self, where: Where) -> Stmt:
        rng = self.rng
        choices: list[tuple[str, float]] = [("do", 10), ("sleep", 2), ("now", 0.6), ("uuid", 0.8)]
        if not where.child:
            choices.append(("event", 2.5))
        if where.top and not where.child:
            choices.append(("suspend", 0.4))
        if where.depth < self.MAX_DEPTH:
            choices += [("gather", 2.2), ("taskgroup", 1.3), ("tasks", 1.3), ("try", 2),
                        ("with", 1.2), ("loop", 1.2), ("cancel", 0.8), ("race", 0.8)]  # fmt: skip
            if not where.child:
                choices.append(("child", 0.8))
        op = rng.choices([c for c, _ in choices], [w for _, w in choices])[0]
        return getattr(self, f"_{op}")(where) | {"op": op}

    def _do(self, where: Where, *, inline: bool = False) -> Stmt:
        rng = self.rng
        kinds = ["closure", "fn", "sync"] + ([] if inline else ["queued"])
        kind = rng.choices(kinds, [4, 3.5, 1, 1.5][: len(kinds)])[0]
        roll = rng.random()
        if roll < 0.12 and not where.nofail:
            fail, retries = -1, rng.choice([0, 0, 1])
        elif roll < 0.3:
            fail = rng.choice([1, 1, 2])
            retries = fail + rng.choice([0, 0, 1])
        else:
            fail, retries = 0, rng.choice([0, 1, 3])
        return {"id": self._id(), "name": rng.choice(NAMES), "kind": kind, "fail": fail,
                "retries": retries}  # fmt: skip

    def _sleep(self, where: Where) -> Stmt:
        return {"id": self._id(), "name": self.rng.choice(["nap", "pause"]),
                "seconds": round(self.rng.uniform(0.005, 0.03), 4)}  # fmt: skip

    def _event(self, where: Where) -> Stmt:
        mode = self.rng.choice(["early", "late", "timeout"])
        timeout = round(self.rng.uniform(0.005, 0.03), 4) if mode == "timeout" else None
        return {"id": self._id(), "mode": mode, "timeout": timeout}

    def _now(self, where: Where) -> Stmt:
        return {"id": self._id()}

    _uuid = _now
    _suspend = _now

    def _branches(self, where: Where, count: int, *, one_may_fail: bool) -> list[Block]:
        """Branches that deliberately reuse step names; when ``one_may_fail``, only one
        of them (chosen at random) may hold a step that fails for good."""
        may = self.rng.randrange(count) if one_may_fail else -1
        out = []
        for i in range(count):
            nofail = where.nofail or (one_may_fail and i != may)
            inner = where.deeper(top=False, nofail=nofail)
            out.append(self.block(inner, self.rng.randint(1, 3)))
        return out

    def _gather(self, where: Where) -> Stmt:
        rex = self.rng.random() < 0.5
        count = self.rng.randint(2, 3)
        return {"id": self._id(), "rex": rex,
                "branches": self._branches(where, count, one_may_fail=not rex)}  # fmt: skip

    def _taskgroup(self, where: Where) -> Stmt:
        count = self.rng.randint(2, 3)
        return {"id": self._id(), "branches": self._branches(where, count, one_may_fail=True)}

    def _tasks(self, where: Where) -> Stmt:
        count = self.rng.randint(1, 3)
        return {"id": self._id(), "branches": self._branches(where, count, one_may_fail=False),
                "between": self.block(where.deeper(), self.rng.randint(0, 2))}  # fmt: skip

    def _try(self, where: Where) -> Stmt:
        rng = self.rng
        handler = self.block(where.deeper(), rng.randint(0, 2)) if rng.random() < 0.7 else None
        final = self.block(where.deeper(), rng.randint(1, 2)) if rng.random() < 0.5 else None
        if handler is None and final is None:
            handler = []
        # what the handler catches may fail even in a no-fail region
        body = self.block(where.deeper(nofail=False) if handler is not None else where.deeper(),
                          rng.randint(1, 3))  # fmt: skip
        return {"id": self._id(), "body": body, "handler": handler, "finally": final}

    def _slow_branch(self, where: Where) -> Block:
        """Steps that cannot fail for good, then a slow step (see ``Interpreter._cancel``)."""
        inner = where.deeper(top=False, nofail=True)
        prefix = [self._do(inner) | {"op": "do"} for _ in range(self.rng.randint(0, 2))]
        slow = {"op": "do", "id": self._id(), "name": self.rng.choice(NAMES),
                "kind": self.rng.choice(SLOW_KINDS), "fail": 0, "retries": 0}  # fmt: skip
        return [*prefix, slow]

    def _cancel(self, where: Where) -> Stmt:
        # between: what a pass sees while a slow step runs in it (steps run in the pass
        # with no retry back-off, timers), so that it gets to the cancel
        between: Block = []
        for _ in range(self.rng.randint(0, 2)):
            if self.rng.random() < 0.7:
                step = self._do(where.deeper(), inline=True)
                between.append(step | {"op": "do", "fail": 0})
            else:
                between.append(self._sleep(where) | {"op": "sleep"})
        return {"id": self._id(), "branches": [self._slow_branch(where)], "between": between}

    def _race(self, where: Where) -> Stmt:
        return {"id": self._id(), "name": "deadline", "branches": [self._slow_branch(where)],
                "seconds": round(self.rng.uniform(0.005, 0.03), 4)}  # fmt: skip

    def _with(self, where: Where) -> Stmt:
        return {"id": self._id(), "name": self.rng.choice(NAMES),
                "body": self.block(where.deeper(), self.rng.randint(1, 3))}  # fmt: skip

    def _loop(self, where: Where) -> Stmt:
        return {"id": self._id(), "n": self.rng.randint(1, 3),
                "body": self.block(where.deeper(), self.rng.randint(1, 2))}  # fmt: skip

    def _child(self, where: Where) -> Stmt:
        inner = where.deeper(top=False, child=True)
        return {"id": self._id(), "name": self.rng.choice(["sub", "child"]),
                "body": self.block(inner, self.rng.randint(1, 3))}  # fmt: skip


def can_fail(stmts: Block) -> bool:
    """Whether a block can raise (a step failing for good, not caught on the way)."""
    for s in stmts:
        op = s["op"]
        if op == "do" and int(s["fail"]) < 0:
            return True
        if op in ("loop", "with", "child") and can_fail(s["body"]):
            return True
        if op == "try":
            caught = s.get("handler") is not None
            if (not caught and can_fail(s["body"])) or can_fail(s.get("handler") or []):
                return True
            if can_fail(s.get("finally") or []):
                return True
        if op == "gather" and not s["rex"] and any(can_fail(b) for b in s["branches"]):
            return True
        if op == "taskgroup" and any(can_fail(b) for b in s["branches"]):
            return True
        if op == "tasks" and (can_fail(s["between"]) or any(can_fail(b) for b in s["branches"])):
            return True
        if op == "cancel" and can_fail(s["between"]):
            return True
    return False


def check_rules(stmts: Block) -> list[str]:
    """Where a program breaks the rule that keeps its reference well defined: at most one
    branch of a failing gather or task group can raise."""
    broken: list[str] = []
    for s in stmts:
        for key in ("body", "handler", "finally", "between"):
            if s.get(key):
                broken += check_rules(s[key])
        for b in s.get("branches", []):
            broken += check_rules(b)
        racing = s["op"] == "taskgroup" or (s["op"] == "gather" and not s["rex"])
        if racing and sum(can_fail(b) for b in s["branches"]) > 1:
            broken.append(f"n{s['id']}")
    return broken
