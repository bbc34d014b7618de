"""The ``wf`` object a code workflow receives, the awaitable each of its steps is, and the
request a workflow takes (``Request``)."""

from __future__ import annotations

import asyncio
import contextvars
import logging
import re
from collections.abc import Awaitable, Callable, Coroutine, Generator, Mapping, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any, Generic, NoReturn, Protocol, TypedDict, TypeVar, Unpack, overload

import pydantic

from plait import approval, ids, request, serde
from plait import tags as tag_rules
from plait.context import CURRENT_STEP, StepContext, check_stream_name, stream_value
from plait.durations import Duration, parse_duration
from plait.records import Decision
from plait.retry import parse_no_retry_on, resolve_policy
from plait.runtime.ledger import Ledger

#: the ordinal plait appends to a name reached again in one run
_ORDINAL = re.compile(r"#\d+$")
_STEP_OPTIONS = frozenset({"retries", "retry_delay", "timeout", "on_error", "no_retry_on"})
M = TypeVar("M", bound=pydantic.BaseModel)
#: the data of a request, as its wait's schema makes it
D = TypeVar("D")
#: what a step's awaitable resolves to
T = TypeVar("T")
#: the data a step's function takes, and what it returns
In = TypeVar("In")
Out = TypeVar("Out")


class StepOptions(TypedDict, total=False):
    """The options of one ``wf.do`` call; each wins over the function's own."""

    retries: int | None
    retry_delay: float | str | timedelta | None
    timeout: float | str | timedelta | None
    on_error: str | None
    no_retry_on: Sequence[type[BaseException]] | None


class Replay(Protocol):
    """What ``wf`` needs of the pass that replays it (``runtime.replay.CodeReplay``)."""

    ledger: Ledger
    #: the ``wf`` its workflow's code was handed (``plait.current_workflow()``)
    workflow: Workflow | None

    @property
    def wloop(self) -> asyncio.AbstractEventLoop: ...

    #: the workflow is still being handed outcomes an earlier pass already handed it
    replaying: bool
    #: the pass is ending and unwinds the workflow's code
    closing: bool

    def key(self, name: str) -> str: ...

    def called(self, call: StepCall[Any]) -> None: ...

    def do(
        self, key: str, name: str, target: Any, data: Any, options: dict[str, Any]
    ) -> Coroutine[Any, Any, Any]: ...

    def sleep(self, key: str, name: str, seconds: float) -> Coroutine[Any, Any, None]: ...

    def suspend(self, key: str, reason: str) -> Coroutine[Any, Any, None]: ...

    def continue_as_new(self, payload: str | None) -> None: ...

    # A wait's pass side may resolve to what it found rather than to its outcome: the
    # pass then decides the outcome when it hands it to the workflow (which may have
    # given the wait up by then, and so leave what it found to another wait).
    def wait_for_event(
        self, key: str, name: str, timeout: float | None
    ) -> Coroutine[Any, Any, Any]: ...

    def wait_for_request(
        self, key: str, name: str, schema: type[pydantic.BaseModel] | None, timeout: float | None
    ) -> Coroutine[Any, Any, Any]: ...

    def answer_request(
        self, key: str, request_id: int, data: str | None, reply: str | None, refusal: str | None
    ) -> Coroutine[Any, Any, None]: ...

    def value(self, key: str, make: Callable[[], Any]) -> Any: ...

    def send_event(
        self, key: str, run_id: str, name: str, payload: Any
    ) -> Coroutine[Any, Any, None]: ...

    def approval(
        self,
        key: str,
        name: str,
        schema: type[pydantic.BaseModel] | None,
        expires: float | None,
        approvers: approval.Policy,
    ) -> Coroutine[Any, Any, Any]: ...

    def set_value(self, key: str, name: str, value: str | None) -> None: ...

    def set_tags(self, key: str, tags: dict[str, str]) -> None: ...

    def stream_write(self, key: str, name: str, value: str | None) -> None: ...

    def patched(self, key: str, patch_id: str) -> bool: ...

    def deprecate_patch(self, key: str) -> None: ...


#: the pass whose workflow code runs in this context (set for the workflow's own tasks)
CURRENT_REPLAY: contextvars.ContextVar[Replay | None] = contextvars.ContextVar(
    "plait_current_replay", default=None
)


class _SilentOnReplay(logging.Filter):
    """Drops the lines a workflow logs while its pass replays what an earlier pass
    already did (and logged), and while an ending pass unwinds its code (a ``finally``
    or ``except BaseException`` reached then is not reached by the run)."""

    def filter(self, record: logging.LogRecord) -> bool:
        replay = CURRENT_REPLAY.get()
        return replay is None or not (replay.replaying or replay.closing)


_SILENT_ON_REPLAY = _SilentOnReplay()


def workflow_logger(name: str) -> logging.Logger:
    """The logger of workflow ``name`` (``plait.workflow.<name>``): silent while a pass
    replays recorded steps, so each line is logged once per run."""
    logger = logging.getLogger(f"plait.workflow.{name}")
    if _SILENT_ON_REPLAY not in logger.filters:
        logger.addFilter(_SILENT_ON_REPLAY)
    return logger


def _check_options(step_name: str, options: dict[str, Any]) -> None:
    """Bad step options fail at the call, naming the step."""
    unknown = set(options) - _STEP_OPTIONS
    if unknown:
        raise TypeError(
            f"step {step_name!r}: unknown option(s) {', '.join(sorted(unknown))}; "
            f"use {', '.join(sorted(_STEP_OPTIONS))}"
        )
    resolve_policy(options)
    if options.get("timeout") is not None:
        parse_duration(options["timeout"], what=f"timeout of step {step_name!r}")
    if options.get("on_error") is not None and not isinstance(options["on_error"], str):
        raise TypeError(f"step {step_name!r}: on_error must be a function name")
    if options.get("no_retry_on") is not None:
        parse_no_retry_on(options["no_retry_on"], what=f"step {step_name!r}: no_retry_on")


class StepCall(Coroutine[Any, Any, T], Generic[T]):
    """What ``wf.do``, ``wf.sleep``, ``wf.suspend`` and ``wf.wait_for_event`` return.

    The step is taken (its key fixed, its work handed to the pass) when it is called, not
    when it is awaited: a step nobody awaits still runs, and ``asyncio.gather`` of steps
    keys them in call order. The call resolves when the pass delivers the step's outcome
    (see ``runtime.replay``). It is a coroutine, so ``asyncio.create_task`` and
    ``TaskGroup.create_task`` take it like any other, and it may be awaited more than once.
    """

    __slots__ = (
        "_iter",
        "after",
        "error",
        "future",
        "key",
        "late",
        "make",
        "outcome",
        "result",
        "task",
    )

    def __init__(
        self,
        replay: Replay,
        key: str,
        resolve: Callable[..., Coroutine[Any, Any, Any]],
        *args: Any,
    ) -> None:
        self.key = key
        #: ``task``: the workflow's task that called the step; ``after``: the keys of the
        #: steps whose outcomes it had received by then, what this step was reached after
        #: (both set by ``replay.called``, below)
        self.task: asyncio.Task[Any] | None
        self.after: tuple[str, ...]
        #: the pass-side coroutine function that resolves the step, and its arguments
        self.make = (resolve, args)
        self.future: asyncio.Future[Any] = asyncio.Future(loop=replay.wloop)
        #: how the pass-side work ended: None (not yet), "ok", "error", "paused",
        #: "suspended", "aborted", "cancelled" (the workflow cancelled the step)
        self.outcome: str | None = None
        self.result: Any = None
        self.error: BaseException | None = None
        #: called after the workflow function returned: never started
        self.late = False
        self._iter: Generator[Any, None, Any] | None = None
        replay.called(self)

    def __await__(self) -> Generator[Any, None, T]:
        return self.future.__await__()

    def send(self, value: Any) -> Any:
        if self._iter is None:
            self._iter = self.future.__await__()
        return self._iter.send(value)

    def throw(self, typ: Any, val: Any = None, tb: Any = None) -> Any:
        if self._iter is None:
            self._iter = self.future.__await__()
            if isinstance(val if val is not None else typ, asyncio.CancelledError) or (
                val is None and typ is asyncio.CancelledError
            ):
                # a task cancelled before it first ran: the step it was made for is
                # cancelled as well, as one it was waiting on would be
                self.future.cancel()
        try:
            if val is None:
                return self._iter.throw(typ)
            return self._iter.throw(val)
        finally:
            # the exception's traceback holds this frame: no local may hold it back
            del typ, val, tb

    def release(self) -> None:
        """Let go of the error, the future that carries it and the task that may have
        raised it, once the pass is over: the error's traceback holds frames that hold
        this call, a cycle only the garbage collector could free otherwise."""
        self.error = self._iter = self.task = None
        del self.future

    def close(self) -> None:
        if self._iter is not None:
            self._iter.close()


class Request(Generic[D]):
    """A request the workflow took (``wf.wait_for_request``): its ``name``, its ``id``
    and its ``data`` (an instance of the wait's schema, when it has one). Answer it once,
    with ``await req.reply(value)`` or ``await req.refuse(reason)``: each is a durable
    step, recorded once, so a replay never answers again and the sender gets the one
    answer."""

    __slots__ = ("_answered", "_raw", "_replay", "data", "id", "name")

    def __init__(self, replay: Replay, name: str, request_id: int, data: D, raw: Any) -> None:
        self._replay = replay
        self.name = name
        self.id = request_id
        self.data: D = data
        #: the data as sent (JSON), the answer step's input
        self._raw = raw
        self._answered = False

    def __repr__(self) -> str:
        return f"Request(name={self.name!r}, id={self.id}, data={self.data!r})"

    def reply(self, value: Any) -> StepCall[None]:
        """Answer with ``value`` (JSON, checked like a step's result); the sender's
        ``engine.request`` returns it."""
        text = serde.dumps(
            value,
            what=f"the reply to request {self.name!r}",
            limits=self._replay.ledger.host.limits,
        )
        return self._answer(text, None)

    def refuse(self, reason: str) -> StepCall[None]:
        """Refuse the request: the sender's ``engine.request`` raises
        ``plait.RequestRefused`` with ``reason``."""
        if not isinstance(reason, str) or not reason:
            raise TypeError(
                f"request {self.name!r}: the reason of a refusal must be a non-empty string, "
                f"got {reason!r}"
            )
        return self._answer(None, request.refused(reason))

    def _answer(self, reply: str | None, refusal: str | None) -> StepCall[None]:
        if self._answered:
            raise RuntimeError(f"request {self.name!r} (id {self.id}) was answered already")
        self._answered = True
        replay = self._replay
        key = replay.key(request.ANSWER_PREFIX + self.name)
        data = serde.dumps(self._raw, what=f"the data of request {self.name!r}")
        return StepCall(replay, key, replay.answer_request, key, self.id, data, reply, refusal)


class Workflow:
    """The ``wf`` object a code workflow receives. Every method is replay-safe."""

    def __init__(self, replay: Replay) -> None:
        self._replay = replay
        replay.workflow = self
        run = replay.ledger.run
        self.run_id: str = run.id
        self.name: str = run.workflow
        self.input: Any = replay.ledger.input
        self.owner: str | None = run.owner
        #: the schedule tick that started this run (None: not started by a schedule)
        self.scheduled_at: datetime | None = (
            None if run.scheduled_at is None else datetime.fromtimestamp(run.scheduled_at, UTC)
        )

    @property
    def logger(self) -> logging.Logger:
        """A ``logging.Logger`` (``plait.workflow.<name>``) that stays silent while the
        pass replays steps it already recorded: each line is logged once per run, not
        once per pass."""
        return workflow_logger(self.name)

    @staticmethod
    def _check_name(name: object, what: str) -> str:
        """Names are strings, and never of the shape of a key plait makes itself: a step
        named ``fetch#1`` would take the second ``fetch``'s result, one named
        ``charge:on_error`` would stand in for ``charge``'s handler."""
        if not isinstance(name, str):
            raise TypeError(f"{what} name must be a string, got {type(name).__name__} {name!r}")
        if not name:
            raise ValueError(f"{what} name must not be empty")
        if (
            ("#" in name and _ORDINAL.search(name))
            or name.endswith(":on_error")
            or name.startswith("__")
        ):
            raise ValueError(
                f"{what} name {name!r} has the shape of a key plait generates "
                "(a '#<number>' ending, an ':on_error' ending or a '__' start); rename it"
            )
        return name

    # Overloads type a step by its function: ``await wf.do("s", f, x)`` is what ``f``
    # returns, and ``x`` must be what ``f`` takes. Coroutine functions come first, so an
    # async ``f`` is typed by what its coroutine returns, not by the coroutine.
    @overload
    def do(
        self,
        step_name: str,
        fn: Callable[[In, StepContext], Awaitable[Out]],
        data: In,
        **options: Unpack[StepOptions],
    ) -> StepCall[Out]: ...
    @overload
    def do(
        self,
        step_name: str,
        fn: Callable[[In], Awaitable[Out]],
        data: In,
        **options: Unpack[StepOptions],
    ) -> StepCall[Out]: ...
    @overload
    def do(
        self,
        step_name: str,
        fn: Callable[[], Awaitable[Out]],
        data: None = None,
        **options: Unpack[StepOptions],
    ) -> StepCall[Out]: ...
    @overload
    def do(
        self,
        step_name: str,
        fn: Callable[[In, StepContext], Out],
        data: In,
        **options: Unpack[StepOptions],
    ) -> StepCall[Out]: ...
    @overload
    def do(
        self,
        step_name: str,
        fn: Callable[[In], Out],
        data: In,
        **options: Unpack[StepOptions],
    ) -> StepCall[Out]: ...
    @overload
    def do(
        self,
        step_name: str,
        fn: Callable[[], Out],
        data: None = None,
        **options: Unpack[StepOptions],
    ) -> StepCall[Out]: ...
    @overload
    def do(
        self,
        step_name: str,
        fn: str,
        data: Any = None,
        **options: Unpack[StepOptions],
    ) -> StepCall[Any]: ...

    def do(
        self,
        step_name: str,
        fn: Callable[..., Any] | str,
        data: Any = None,
        **options: Any,
    ) -> StepCall[Any]:
        """Run ``fn`` (a function, its name, a closure, or a workflow name for a child run)
        as the durable step ``step_name``. The key is taken now, in call order, so
        ``asyncio.gather`` replays to the same keys whatever order the steps finish in.
        A name is typed ``Any``: what it runs is known only when the step runs."""
        self._check_name(step_name, "step")
        if fn is None or not (isinstance(fn, str) or callable(fn)):
            raise TypeError(
                f"step {step_name!r}: expected a function, a function name or a workflow name, "
                f"got {type(fn).__name__}"
            )
        if options:
            _check_options(step_name, options)
        replay = self._replay
        key = replay.key(step_name)
        return StepCall(replay, key, replay.do, key, step_name, fn, data, options)

    def sleep(self, step_name: str, duration: Duration) -> StepCall[None]:
        """A durable timer: the run holds nothing while it waits."""
        self._check_name(step_name, "sleep")
        seconds = parse_duration(duration, what=f"duration of sleep {step_name!r}")
        replay = self._replay
        key = replay.key(step_name)
        return StepCall(replay, key, replay.sleep, key, step_name, seconds)

    def suspend(self, reason: str = "suspended") -> StepCall[None]:
        """Pause the run until ``engine.resume(run_id)``; each call site pauses once."""
        self._check_name(reason, "suspend reason")
        replay = self._replay
        key = replay.key(f"__suspend:{reason}")
        return StepCall(replay, key, replay.suspend, key, reason)

    def wait_for_event(self, name: str, timeout: Duration | None = None) -> StepCall[Any]:
        """The payload of the next ``engine.send_event(run_id, name, ...)``; an event sent
        before the run gets here is kept for it. Typed ``Any``: the payload is JSON that
        another process sent, and nothing here checks its shape (validate it with a
        pydantic model where its shape matters)."""
        ids.check_name(self._check_name(name, "event"), "event name")
        seconds = (
            None if timeout is None else parse_duration(timeout, what=f"timeout of event {name!r}")
        )
        replay = self._replay
        key = replay.key(f"__event:{name}")
        return StepCall(replay, key, replay.wait_for_event, key, name, seconds)

    def send_event(self, run_id: str, name: str, payload: Any = None) -> StepCall[None]:
        """Send event ``name`` with ``payload`` to run ``run_id`` (another run, or this
        one), as ``engine.send_event`` does, as a durable step: recorded once, in the
        commit that stores the event, so no replay, retry or crash sends it twice (the
        event's de-duplication key is the step's invocation id). The run it goes to wakes
        at once. The call returns once that commit is in. A run that does not exist or
        has ended (when the pass reads it, or by that commit) fails the step at once
        (``StepError``, code ``EVENT_NOT_SENT``, no retry), and so does a run this run
        may not send to: a run with an owner sends only to its owner's runs and to runs
        without an owner."""
        ids.check_run_id(run_id)
        ids.check_name(self._check_name(name, "event"), "event name")
        serde.dumps(payload, what=f"event {name!r}")  # not JSON: raised here, at the call
        replay = self._replay
        key = replay.key(f"__send:{name}")
        return StepCall(replay, key, replay.send_event, key, run_id, name, payload)

    @overload
    def wait_for_request(
        self, name: str, *, schema: type[M], timeout: Duration | None = None
    ) -> StepCall[Request[M]]: ...

    @overload
    def wait_for_request(
        self, name: str, *, schema: None = None, timeout: Duration | None = None
    ) -> StepCall[Request[Any]]: ...

    def wait_for_request(
        self,
        name: str,
        *,
        schema: type[pydantic.BaseModel] | None = None,
        timeout: Duration | None = None,
    ) -> StepCall[Request[Any]]:
        """The oldest request ``name`` sent by ``engine.request(run_id, name, data)`` and
        not taken yet (requests queue in arrival order), as a ``Request`` to answer once.
        With ``schema`` (a pydantic model), ``req.data`` is an instance of it: a request
        whose data does not fit is refused at once (its sender gets
        ``plait.ValidationError``) and the wait goes on. With ``timeout``,
        ``plait.RequestTimeout`` once it passes with no request (a durable timer). A
        request whose sender stopped waiting before it was taken is never seen."""
        ids.check_name(self._check_name(name, "request"), "request name")
        if schema is not None and not (
            isinstance(schema, type) and issubclass(schema, pydantic.BaseModel)
        ):
            raise TypeError(
                f"request {name!r}: schema must be a pydantic model class, "
                f"got {type(schema).__name__} {schema!r}"
            )
        seconds = (
            None
            if timeout is None
            else parse_duration(timeout, what=f"timeout of request {name!r}")
        )
        replay = self._replay
        key = replay.key(request.PREFIX + name)
        return StepCall(replay, key, replay.wait_for_request, key, name, schema, seconds)

    @overload
    def approval(
        self,
        name: str,
        *,
        schema: type[M],
        expires: Duration | None = None,
        approvers: str | Sequence[str] = "any",
    ) -> Awaitable[Decision[M]]: ...

    @overload
    def approval(
        self,
        name: str,
        *,
        schema: None = None,
        expires: Duration | None = None,
        approvers: str | Sequence[str] = "any",
    ) -> Awaitable[Decision[Any]]: ...

    def approval(
        self,
        name: str,
        *,
        schema: type[pydantic.BaseModel] | None = None,
        expires: Duration | None = None,
        approvers: str | Sequence[str] = "any",
    ) -> Awaitable[Decision[Any]]:
        """A gate a person opens: waits for ``engine.approve(run_id, name, data)`` from
        a user ``approvers`` admits (``"any"``, ``"owner"``, ``"not_owner"`` for four
        eyes, or a list of user ids), with data that ``schema`` (a pydantic model)
        accepts; or, with ``expires``, until that deadline passes (a durable timer), then
        returns an expired decision. A decision sent before the run gets here is judged
        when it does. ``resume`` never opens a gate."""
        ids.check_name(self._check_name(name, "approval"), "approval name")
        if schema is not None and not (
            isinstance(schema, type) and issubclass(schema, pydantic.BaseModel)
        ):
            raise TypeError(
                f"approval {name!r}: schema must be a pydantic model class, "
                f"got {type(schema).__name__} {schema!r}"
            )
        policy = approval.check_policy(approvers, name)
        seconds = (
            None
            if expires is None
            else parse_duration(expires, what=f"expiry of approval {name!r}")
        )
        replay = self._replay
        key = replay.key(approval.PREFIX + name)
        return StepCall(replay, key, replay.approval, key, name, schema, seconds, policy)

    def set_value(self, key: str, value: Any) -> Awaitable[None]:
        """Publish ``value`` (JSON) under ``key`` for anyone watching the run
        (``engine.get_value``, the run page, ``plait runs show``): progress, partial
        results. Durable and replay-safe: recorded once where the run first gets here,
        so a replay never publishes an older value again. The last write wins."""
        self._check_name(key, "value")
        text = serde.dumps(value, what=f"value {key!r}")
        replay = self._replay
        step_key = replay.key(f"__value:{key}")
        if step_key:  # none while a pass unwinds code that caught its Unwind
            replay.set_value(step_key, key, text)
        return _published()

    def set_tags(self, tags: Mapping[str, str]) -> Awaitable[None]:
        """Merge ``tags`` into the run's tags (a key given again takes the new value), so
        that ``list_runs(tags=...)`` finds the run by what it learnt while running (the
        customer an order belongs to). Recorded once where the run first gets here: a
        replay merges nothing again. ``ValueError`` names a bad key or value, or says the
        run would carry more than 16 tags."""
        checked = tag_rules.check(tags, "wf.set_tags")
        replay = self._replay
        step_key = replay.key("__tags")
        if step_key:  # none while a pass unwinds code that caught its Unwind
            replay.set_tags(step_key, checked)
        return _published()

    def stream(self, name: str) -> WorkflowStream:
        """The run's stream ``name`` (``engine.read_stream``, ``follow_stream``, the
        run page): ``await wf.stream(name).write(value)`` appends a JSON value, recorded
        once where the run first gets here, so a replay never writes it again. Step
        bodies write to the same streams with ``ctx.stream(name)``."""
        self._check_name(name, "stream")
        return WorkflowStream(self._replay, check_stream_name(name))

    def patched(self, patch_id: str) -> bool:
        """Whether the run takes the code a deploy added under ``if wf.patched(id):``.

        True for every run that reaches this point on code that has the patch before
        its recorded history passed it (every new run; an old run whose history ends
        before here): the run records a marker and is True on every replay. False for a
        run that older code took past this point: it keeps to the old path, so its
        replay matches what it recorded and the new code never runs out of order. Call
        it where the changed code starts, once per decision (a loop may call it on
        every turn: each call has its own marker)."""
        self._check_name(patch_id, "patch")
        replay = self._replay
        key = replay.key(f"__patch:{patch_id}")
        if not key:  # a pass unwinds code that caught its Unwind: nothing is recorded
            return False
        return replay.patched(key, patch_id)

    def deprecate_patch(self, patch_id: str) -> None:
        """The step after ``patched``: once no run that could lack the patch is live,
        the ``if`` goes and this call stays for a release, so runs that recorded the
        marker still replay. It records nothing."""
        self._check_name(patch_id, "patch")
        replay = self._replay
        key = replay.key(f"__patch:{patch_id}")
        if key:
            replay.deprecate_patch(key)

    def continue_as_new(self, input: Any = None) -> Awaitable[NoReturn]:
        """End this run ``continued`` and start a new run of this workflow with ``input``,
        in one commit: the way for a loop that never ends (a chat agent, an entity) to
        run for ever in bounded storage. Await it: the workflow's code stops there and
        nothing after it runs (``finally`` blocks unwind, taking no new step).

        The new run has no step history; it keeps this run's owner, queue, key,
        priority, de-duplication key and parent (a parent waiting for this run gets the
        last run's output), and its timeout, counted again from here (never past a
        parent's deadline), and runs the code deployed now. ``input`` is checked at
        once, as a start checks it: input that is not JSON, too large, or that the
        workflow's input type refuses raises here, and the run goes on. Steps still in
        flight in other branches end with the run, as at any end: live child runs are
        cancelled, timers dropped; an attempt running in this pass ends, and its outcome
        is kept but handed to no one; a job step, or a step waiting to retry, is
        recorded cancelled (a step worker running its body stops it at its next lease
        check)."""
        replay = self._replay
        # a pass that unwinds the code raises Unwind here, as at a step; none is recorded
        key = replay.key("__continue_as_new")
        payload = serde.dumps(
            input,
            what=f"the input of workflow {self.name!r} continued as new",
            limits=replay.ledger.host.limits,
        )
        if key:  # none while a pass unwinds code that caught its Unwind
            replay.continue_as_new(payload)
        stop: asyncio.Future[NoReturn] = asyncio.Future(loop=replay.wloop)
        return stop  # never resolved: the pass ends the run, and unwinds the wait

    def now(self) -> datetime:
        """The time, recorded on first reach so every replay sees the same value."""
        key = self._replay.key("__now")
        now = self._replay.ledger.now
        if not key:  # a pass unwinds code that caught its Unwind: nothing is recorded
            return datetime.fromtimestamp(now(), UTC)
        stamp = self._replay.value(key, lambda: datetime.fromtimestamp(now(), UTC).isoformat())
        return datetime.fromisoformat(stamp)

    def uuid(self) -> str:
        """A random UUID, recorded on first reach so every replay sees the same value."""
        key = self._replay.key("__uuid")
        if not key:  # a pass unwinds code that caught its Unwind: nothing is recorded
            return ids.random_uuid()
        return str(self._replay.value(key, ids.random_uuid))


class WorkflowStream:
    """A run's stream as its workflow writes to it (``wf.stream(name)``)."""

    __slots__ = ("_replay", "name")

    def __init__(self, replay: Replay, name: str) -> None:
        self._replay = replay
        self.name = name

    def write(self, value: Any) -> Awaitable[None]:
        """Append ``value`` (JSON) to the stream, once: recorded (a step of its own)
        with the pass's next commit; a replay passes over it. Await it, as any call of
        ``wf``; the entry is on its way when it returns."""
        replay = self._replay
        text = stream_value(self.name, value, replay.ledger.host.limits)
        step_key = replay.key(f"__stream:{self.name}")
        if step_key:  # none while a pass unwinds code that caught its Unwind
            replay.stream_write(step_key, self.name, text)
        return _published()


async def _published() -> None:
    """What ``wf.set_value`` returns: the value is recorded when it is called."""


def current_workflow() -> Workflow:
    """The ``wf`` of the workflow whose code runs now, for library code that was not
    handed it (``plait.current_workflow().stream("agent")``). ``RuntimeError`` outside
    a workflow's code, and inside a step body (a step takes no steps of its own)."""
    if CURRENT_STEP.get() is not None:
        raise RuntimeError(
            "plait.current_workflow() called inside a step body: workflow methods are "
            "for the workflow's code; in a step, use plait.current_step()"
        )
    replay = CURRENT_REPLAY.get()
    workflow = None if replay is None else replay.workflow
    if workflow is None:
        raise RuntimeError(
            "plait.current_workflow() called outside a workflow: it works only in the code "
            "of a workflow plait runs (and the tasks it starts)"
        )
    return workflow
