"""The registry: functions, code workflows and graphs, declared with decorators."""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import dataclasses
import functools
import hashlib
import inspect
import logging
import textwrap
from collections.abc import Callable, Coroutine, Iterable, Mapping, Sequence
from typing import Any, Literal, TypeVar, overload

from pydantic import TypeAdapter, ValidationError

from plait import serde
from plait.context import StepContext
from plait.durations import Duration, parse_duration, run_timeout
from plait.errors import InputValidationError, TypeMismatchError, WorkflowNotFoundError
from plait.queues import Queue, check_queue_name, make_queue
from plait.retry import (
    NoRetryOn,
    RetryPolicy,
    parse_no_retry_on,
    parse_retries,
    parse_retry_delay,
    resolve_policy,
)
from plait.schedules import ScheduleSpec, make_spec
from plait.tags import check as check_tags

#: a registered function: any callable, handed back unchanged by ``@app.function``
F = TypeVar("F", bound=Callable[..., Any])
#: a registered workflow: an async function, handed back unchanged by ``@app.workflow``
W = TypeVar("W", bound=Callable[..., Coroutine[Any, Any, Any]])

_PLAIN = (inspect.Parameter.empty, Any, dict, object, "dict", "Any", "object")

#: what a step does once its last attempt failed: ``fail`` (the workflow gets the error,
#: and an uncaught one fails the run) or ``park`` (the run waits ``needs_attention`` for
#: a retry or a cancel)
OnExhausted = Literal["fail", "park"]
ON_EXHAUSTED: tuple[OnExhausted, ...] = ("fail", "park")


def check_on_exhausted(value: Any, owner: str) -> OnExhausted:
    """``value`` as an ``on_exhausted`` setting of ``owner``; ``ValueError`` naming both
    when it is not one, at registration rather than at the first failure."""
    for known in ON_EXHAUSTED:
        if value == known:
            return known
    raise ValueError(f"on_exhausted of {owner} must be 'fail' or 'park', got {value!r}")


@dataclasses.dataclass(frozen=True)
class FunctionDef:
    """A registered function: callable by name from workflows, graphs and the queue."""

    name: str
    fn: Callable[..., Any]
    queued: bool = False
    retries: int | None = None
    retry_delay: Duration | None = None
    timeout: float | None = None
    on_error: str | None = None
    #: exception classes that fail a step of this function at once, without a retry
    no_retry_on: NoRetryOn = ()
    takes_data: bool = True
    #: its data parameter has a default, which stands when a step gives no data
    data_optional: bool = False
    takes_ctx: bool = False
    adapter: TypeAdapter[Any] | None = None
    #: the queue its steps are admitted through (a queued function)
    queue: str | None = None
    #: what its step does once its last attempt failed (None: its workflow's setting)
    on_exhausted: OnExhausted | None = None

    @property
    def options(self) -> dict[str, Any]:
        return {
            "retries": self.retries,
            "retry_delay": self.retry_delay,
            "timeout": self.timeout,
            "on_error": self.on_error,
        }

    @functools.cached_property
    def policy(self) -> RetryPolicy:
        """The retry policy of a call that sets no options of its own (most calls)."""
        return resolve_policy(self.options)

    async def invoke(self, data: Any, ctx: StepContext) -> Any:
        """Validate ``data`` against the annotation, then call; sync functions run in a
        thread so they never block the orchestrator's event loop."""
        args: list[Any] = []
        if self.takes_data and (data is not None or not self.data_optional):
            if self.adapter is not None:
                try:
                    data = self.adapter.validate_python(data)
                except ValidationError as exc:
                    raise InputValidationError(
                        f"invalid input for function {self.name!r}: {exc}"
                    ) from None
            args.append(data)
        if self.takes_ctx:
            args.append(ctx)
        if self.is_async:
            return await self.fn(*args)
        return await call_maybe_async(self.fn, *args)

    @functools.cached_property
    def is_async(self) -> bool:
        """Asked once, not on every call: the inspection costs more than a trivial step."""
        return _is_async_callable(self.fn)

    @functools.cached_property
    def result_codec(self) -> serde.Codec | None:
        """How its results come back (None: as JSON). Built on first use, not at
        registration, so an annotation naming a class defined further down resolves."""
        return serde.result_codec(self.fn, f"function {self.name!r}")


class FinishedAfterCancel(asyncio.CancelledError):
    """A sync body's thread ended after its task was cancelled (a stop, a cancel of the
    run, a timeout). Still a cancellation, carrying what the body returned or raised so
    the attempt can record it rather than run the body again."""

    def __init__(self, result: Any, error: Exception | None = None) -> None:
        super().__init__("the body finished after its task was cancelled")
        self.result = result
        #: what the body raised, if it failed
        self.error = error
        #: the attempt's outcome, filled in by ``runtime.attempt``
        self.outcome: Any = None


async def call_maybe_async(fn: Callable[..., Any], *args: Any) -> Any:
    if inspect.iscoroutinefunction(fn):
        return await fn(*args)
    if _is_async_callable(fn):
        return await fn(*args)
    ctx = contextvars.copy_context()
    thread = asyncio.ensure_future(asyncio.to_thread(ctx.run, fn, *args))
    try:
        result = await asyncio.shield(thread)
    except asyncio.CancelledError:
        # A thread cannot be stopped. Wait for it before giving the step up, or another
        # worker could start the next attempt while this one is still running; if it
        # returns, its result is not thrown away (the body did run to its end).
        while not thread.done():
            with contextlib.suppress(asyncio.CancelledError):
                await asyncio.shield(thread)
        error = None if thread.cancelled() else thread.exception()
        if thread.cancelled() or (error is not None and not isinstance(error, Exception)):
            raise
        raise FinishedAfterCancel(None if error else thread.result(), error) from None
    if inspect.isawaitable(result):
        return await result
    return result


def _is_async_callable(fn: Any) -> bool:
    while isinstance(fn, functools.partial):
        fn = fn.func
    return inspect.iscoroutinefunction(fn) or inspect.iscoroutinefunction(
        getattr(fn, "__call__", None)  # noqa: B004
    )


@dataclasses.dataclass(frozen=True)
class WorkflowDef:
    """A code workflow. ``version`` pins which code a run replays on."""

    name: str
    fn: Callable[..., Any]
    version: str
    takes_data: bool = True
    #: the queue its runs are admitted through, unless ``start(queue=...)`` says otherwise
    queue: str | None = None
    #: seconds from a run's start to its deadline, unless ``start(timeout=...)`` says
    #: otherwise (None: no deadline)
    timeout: float | None = None
    #: every run's tags (``plait.tags``), a start's merged over them
    tags: Mapping[str, str] = dataclasses.field(default_factory=dict[str, str])
    #: what its steps do once their last attempt failed, unless their function says
    on_exhausted: OnExhausted = "fail"

    @functools.cached_property
    def input_codec(self) -> serde.Codec | None:
        """How its input comes to it: as the type its data parameter names (None: JSON)."""
        if not self.takes_data:
            return None
        try:
            param = list(inspect.signature(self.fn).parameters.values())[1]
        except (TypeError, ValueError, IndexError):
            return None
        owner = f"workflow {self.name!r}"
        annotation = serde.resolve_annotation(self.fn, param.name, param.annotation, owner)
        return serde.codec_for(annotation, owner)

    @functools.cached_property
    def output_codec(self) -> serde.Codec | None:
        """How its output comes back, to ``engine.run`` and to a parent run (None: JSON)."""
        return serde.result_codec(self.fn, f"workflow {self.name!r}")

    def decode_input(self, text: str | None) -> Any:
        """The run's stored input as the workflow receives it."""
        codec = self.input_codec
        if codec is None:
            return serde.loads(text)
        try:
            return codec.decode(text, f"the input of workflow {self.name!r}")
        except TypeMismatchError as exc:
            raise InputValidationError(str(exc)) from None


def data_param(fn: Callable[..., Any]) -> inspect.Parameter | None:
    """The parameter a step's data goes to: the first positional one, whether it has a
    default or not (None: the function takes no data). One with a default gets the data
    when the step is given some, and keeps its default when it is not (``wants_data``):
    ``lambda order=None: ...`` must not lose the order it was called with."""
    try:
        params = inspect.signature(fn).parameters.values()
    except (TypeError, ValueError):
        return None
    return _first_positional(params)


def _first_positional(params: Iterable[inspect.Parameter]) -> inspect.Parameter | None:
    return next((p for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)), None)


def wants_data(param: inspect.Parameter | None, data: Any) -> bool:
    """Whether a body whose data parameter is ``param`` is called with ``data``."""
    return param is not None and (param.default is param.empty or data is not None)


def _inspect_function(fn: Callable[..., Any], name: str) -> tuple[bool, bool, bool, Any]:
    """Whether ``fn`` takes data, whether that data has a default (``wants_data``),
    whether it takes a ``ctx``, and its data's annotation."""
    try:
        params = list(inspect.signature(fn).parameters.values())
    except (TypeError, ValueError):
        return True, False, False, None
    positional = [
        p
        for p in params
        if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD) and p.default is p.empty
    ]
    first = _first_positional(params)
    data_optional = False
    if first is not None and first.default is not first.empty:
        positional, data_optional = [first], True  # the data, with a default
    takes_ctx = False
    if len(positional) >= 2:
        second = positional[1]
        if second.name == "ctx" or second.annotation in (StepContext, "StepContext"):
            takes_ctx = True
        else:
            raise TypeError(
                f"function {name!r} takes {len(positional)} positional parameters; "
                "functions take the data and optionally a second parameter named 'ctx'"
            )
    if len(positional) > 2:
        raise TypeError(f"function {name!r} takes too many positional parameters")
    takes_data = len(positional) >= 1
    annotation = positional[0].annotation if takes_data else inspect.Parameter.empty
    if isinstance(annotation, str):
        try:
            hints = inspect.get_annotations(fn, eval_str=True)
            annotation = hints.get(positional[0].name, annotation)
        except Exception:
            logging.getLogger("plait").warning(
                "function %r: cannot resolve the annotation %r of its data parameter; "
                "its input will not be validated",
                name,
                annotation,
            )
            annotation = inspect.Parameter.empty
    return takes_data, data_optional, takes_ctx, annotation


def _source_version(fn: Callable[..., Any]) -> str:
    try:
        source = textwrap.dedent(inspect.getsource(fn))
    except (OSError, TypeError):
        source = f"{fn.__module__}.{fn.__qualname__}"
    return hashlib.sha256(source.encode()).hexdigest()[:12]


def _same_definition(first: Callable[..., Any], second: Callable[..., Any]) -> bool:
    """Whether two registrations under one name are one definition: the same object, or
    the same function made again (its module imported twice, as ``__main__`` and by
    name; a notebook cell or a REPL line run again): same qualified name, from the same
    module or the same file."""
    if first is second:
        return True
    a, b = inspect.unwrap(first), inspect.unwrap(second)
    a_code, b_code = getattr(a, "__code__", None), getattr(b, "__code__", None)
    if a_code is None or b_code is None:
        return False
    qualname = getattr(a, "__qualname__", None)
    if qualname != getattr(b, "__qualname__", None):
        return False
    if "<lambda>" in str(qualname):
        # every lambda of a module has the same name: only its place tells them apart
        return (a_code.co_filename, a_code.co_firstlineno) == (
            b_code.co_filename,
            b_code.co_firstlineno,
        )
    return (
        getattr(a, "__module__", None) == getattr(b, "__module__", None)
        or a_code.co_filename == b_code.co_filename
    )


def _defined_at(fn: Callable[..., Any]) -> str:
    """`` (defined at FILE:LINE)`` for a function whose code says where; else ``""``."""
    code = getattr(inspect.unwrap(fn), "__code__", None)
    if code is None:
        return ""
    return f" (defined at {code.co_filename}:{code.co_firstlineno})"


def _caller() -> str:
    """`` (registered at FILE:LINE)``: the line that called into the app (for a graph,
    which has no code of its own to point at)."""
    frame = inspect.currentframe()
    try:
        while frame is not None and frame.f_globals.get("__name__") == __name__:
            frame = frame.f_back
        if frame is None:
            return ""
        return f" (registered at {frame.f_code.co_filename}:{frame.f_lineno})"
    finally:
        del frame


def _function_options(fdef: FunctionDef) -> tuple[Any, ...]:
    return (
        fdef.queued,
        fdef.retries,
        fdef.retry_delay,
        fdef.timeout,
        fdef.on_error,
        fdef.no_retry_on,
        fdef.queue,
        fdef.on_exhausted,
    )


class App:
    """Holds what a deployment can run. Every process that shares a database should
    register the same names; a missing function suspends the runs that need it."""

    def __init__(self, name: str = "plait") -> None:
        self.name = name
        self.functions: dict[str, FunctionDef] = {}
        self.workflows: dict[str, WorkflowDef] = {}
        #: older versions kept so in-flight runs can finish on the code they started with
        self.workflow_versions: dict[str, dict[str, WorkflowDef]] = {}
        self.graphs: dict[str, Any] = {}
        #: where each graph was registered (`` (registered at FILE:LINE)``), for errors
        self._graph_origins: dict[str, str] = {}
        self.queues: dict[str, Queue] = {}
        self.schedules: dict[str, ScheduleSpec] = {}

    # -- queues and schedules --------------------------------------------------------
    def queue(
        self,
        name: str,
        *,
        concurrency: int | None = None,
        per_key: int | None = None,
        rate: str | None = None,
        fair: bool = False,
        weights: dict[str, int] | None = None,
        budget: dict[str, str] | None = None,
        budget_per_key: bool = False,
    ) -> Queue:
        """Declare a queue's limits (see ``plait.queues.Queue``). They are stored in the
        database when an engine of this app opens (replacing what was stored for the
        queue), and every process enforces the stored limits, whether its app declares
        the queue or not. ``fair=True`` admits the keys with runs waiting in turn, so one
        key's backlog does not hold back the others; ``weights`` (only with ``fair``) gives
        a key more admissions per turn."""
        queue = make_queue(
            name,
            concurrency=concurrency,
            per_key=per_key,
            rate=rate,
            fair=fair,
            weights=weights,
            budget=budget,
            budget_per_key=budget_per_key,
        )
        self.queues[queue.name] = queue
        return queue

    def schedule(
        self,
        name: str,
        *,
        workflow: str | Callable[..., Coroutine[Any, Any, Any]],
        cron: str | None = None,
        every: Duration | None = None,
        input: Any = None,
        timezone: str = "UTC",
        overlap: str = "skip",
        catchup: Duration = "0s",
    ) -> ScheduleSpec:
        """Start ``workflow`` on a clock (see ``plait.schedules``). Stored when an engine
        opens, so every worker on the database fires it; once per tick, whatever the
        number of workers."""
        if not isinstance(workflow, str):
            workflow = getattr(workflow, "__plait_workflow__", workflow)
        spec = make_spec(
            name,
            workflow=workflow,
            input=input,
            cron=cron,
            every=every,
            timezone=timezone,
            overlap=overlap,
            catchup=catchup,
        )
        self.schedules[spec.name] = spec
        return spec

    # -- functions -------------------------------------------------------------------
    @overload
    def function(self, fn: F, /) -> F: ...
    @overload
    def function(
        self,
        /,
        *,
        name: str | None = None,
        queued: bool = False,
        retries: int | None = None,
        retry_delay: Duration | None = None,
        timeout: Duration | None = None,
        on_error: str | None = None,
        no_retry_on: Sequence[type[BaseException]] | None = None,
        queue: str | None = None,
        on_exhausted: OnExhausted | None = None,
    ) -> Callable[[F], F]: ...

    def function(self, fn: F | None = None, /, **options: Any) -> F | Callable[[F], F]:
        """Register a function (sync or async) that workflows call by name or object.

        The function comes back unchanged, so it stays callable as plain Python and keeps
        its signature for type checkers (``wf.do`` types a step by it).

        ``on_exhausted="park"``: once a step of it failed its last attempt, its run does
        not fail but waits ``needs_attention`` (``engine.retry`` gives the step a new
        budget, ``engine.cancel`` ends the run); ``"fail"`` fails the step as usual. Not
        given: the workflow's ``on_exhausted``."""
        if fn is not None:
            return self._add_function(fn, **options)
        return lambda f: self._add_function(f, **options)

    def _add_function(
        self,
        fn: F,
        *,
        name: str | None = None,
        queued: bool = False,
        retries: int | None = None,
        retry_delay: Duration | None = None,
        timeout: Duration | None = None,
        on_error: str | None = None,
        no_retry_on: Sequence[type[BaseException]] | None = None,
        queue: str | None = None,
        on_exhausted: OnExhausted | None = None,
    ) -> F:
        fname = name or getattr(fn, "__name__", None)
        if not isinstance(fname, str) or not fname:
            raise TypeError("a function needs a name: pass name=...")
        if on_exhausted is not None:
            check_on_exhausted(on_exhausted, f"function {fname!r}")
        if queue is not None:
            # a step admitted through a queue is a job step
            check_queue_name(queue, f"queue of function {fname!r}")
            queued = True
        if retries is not None:
            parse_retries(retries, what=f"retries of function {fname!r}")
        if retry_delay is not None:
            parse_retry_delay(retry_delay, what=f"retry_delay of function {fname!r}")
        seconds = (
            parse_duration(timeout, what=f"timeout of function {fname!r}")
            if timeout is not None
            else None
        )
        if on_error is not None and not isinstance(on_error, str):
            raise TypeError(f"on_error of function {fname!r} must be a function name")
        final = (
            ()
            if no_retry_on is None
            else parse_no_retry_on(no_retry_on, what=f"no_retry_on of function {fname!r}")
        )
        takes_data, data_optional, takes_ctx, annotation = _inspect_function(fn, fname)
        adapter = None if annotation in _PLAIN else TypeAdapter(annotation)
        fdef = FunctionDef(
            name=fname,
            fn=fn,
            queued=queued,
            retries=retries,
            retry_delay=retry_delay,
            timeout=seconds,
            on_error=on_error,
            no_retry_on=final,
            takes_data=takes_data,
            data_optional=data_optional,
            takes_ctx=takes_ctx,
            adapter=adapter,
            queue=queue,
            on_exhausted=on_exhausted,
        )
        if fname in self.workflows or fname in self.graphs:
            # wf.do(key, name) would run the function and never the child workflow
            raise ValueError(
                f"function {fname!r}{_defined_at(fn)}: a workflow is already registered "
                "under that name; the function needs another name (name=...)"
            )
        existing = self.functions.get(fname)
        if existing is not None:
            if not _same_definition(existing.fn, fn):
                raise ValueError(
                    f"function {fname!r} is already registered{_defined_at(existing.fn)}; "
                    f"the second function under that name{_defined_at(fn)} needs "
                    "another name (name=...)"
                )
            if _function_options(existing) != _function_options(fdef):
                raise ValueError(
                    f"function {fname!r}{_defined_at(fn)} is registered twice with "
                    "different options"
                )
        self.functions[fname] = fdef
        # a marker on the user's function: ``wf.do`` finds its name without a search
        fn.__plait_function__ = fname  # type: ignore[attr-defined]
        return fn

    # -- workflows -------------------------------------------------------------------
    @overload
    def workflow(self, fn: W, /) -> W: ...
    @overload
    def workflow(
        self,
        /,
        *,
        name: str | None = None,
        version: str | None = None,
        queue: str | None = None,
        timeout: Duration | None = None,
        tags: Mapping[str, str] | None = None,
        on_exhausted: OnExhausted = "fail",
    ) -> Callable[[W], W]: ...

    def workflow(self, fn: W | None = None, /, **options: Any) -> W | Callable[[W], W]:
        """Register an async workflow ``(wf, data) -> output``. The function comes back
        unchanged: ``engine.run(fn, data)`` is typed by its output annotation. With
        ``timeout`` (a duration) each of its runs fails ``RUN_TIMEOUT`` once that long has
        passed since it started, wherever it is (``start(timeout=...)`` overrides it).
        ``tags`` are every run's tags (a start's ``tags=`` are merged over them).
        ``on_exhausted`` is what its steps do once their last attempt failed, unless
        their function says otherwise (``App.function``): ``"park"`` leaves the run
        ``needs_attention``, closures (``wf.do(lambda ...)``) included."""
        if fn is not None:
            return self._add_workflow(fn, **options)
        return lambda f: self._add_workflow(f, **options)

    def _add_workflow(
        self,
        fn: W,
        *,
        name: str | None = None,
        version: str | None = None,
        queue: str | None = None,
        timeout: Duration | None = None,
        tags: Mapping[str, str] | None = None,
        on_exhausted: OnExhausted = "fail",
    ) -> W:
        wname = name or fn.__name__
        run_tags = check_tags(tags, f"tags of workflow {wname!r}")
        exhausted = check_on_exhausted(on_exhausted, f"workflow {wname!r}")
        if queue is not None:
            check_queue_name(queue, f"queue of workflow {wname!r}")
        seconds = run_timeout(timeout, what=f"timeout of workflow {wname!r}")
        if not inspect.iscoroutinefunction(fn):
            raise TypeError(f"workflow {wname!r} must be an async function (async def)")
        if version is not None and (not isinstance(version, str) or not version):
            raise TypeError(f"version of workflow {wname!r} must be a non-empty string")
        params = list(inspect.signature(fn).parameters.values())
        wdef = WorkflowDef(
            name=wname,
            fn=fn,
            version=version if version is not None else _source_version(fn),
            takes_data=len(params) >= 2,
            queue=queue,
            timeout=seconds,
            tags=run_tags,
            on_exhausted=exhausted,
        )
        self._check_workflow_name(wdef, explicit_version=version is not None)
        self.workflows[wname] = wdef
        self.workflow_versions.setdefault(wname, {})[wdef.version] = wdef
        # a marker on the user's function: ``engine.run(fn)`` finds its name by it
        fn.__plait_workflow__ = wname  # type: ignore[attr-defined]
        return fn

    def _check_workflow_name(self, wdef: WorkflowDef, *, explicit_version: bool) -> None:
        """Refuse a second workflow under a taken name, unless it is the same definition
        again (its module imported twice, a notebook cell run again) or a new version
        registered beside the others with ``version=``."""
        name = wdef.name
        if name in self.functions:
            raise ValueError(
                f"workflow {name!r}{_defined_at(wdef.fn)}: a function is already registered "
                f"under that name{_defined_at(self.functions[name].fn)}; the workflow needs "
                "another name (name=...)"
            )
        if name in self.graphs:
            raise ValueError(
                f"workflow {name!r}{_defined_at(wdef.fn)}: a graph is already registered "
                f"under that name{self._graph_origins.get(name, '')}"
            )
        current = self.workflows.get(name)
        taken = self.workflow_versions.get(name, {}).get(wdef.version)
        if current is None or _same_definition(current.fn, wdef.fn):
            return
        if taken is not None and _same_definition(taken.fn, wdef.fn):
            return
        if not explicit_version:
            raise ValueError(
                f"workflow {name!r} is already registered{_defined_at(current.fn)}; "
                f"the second workflow under that name{_defined_at(wdef.fn)} needs another "
                "name, or version=... to register it as another version"
            )
        if taken is not None:
            raise ValueError(
                f"version {wdef.version!r} of workflow {name!r} is already registered"
                f"{_defined_at(taken.fn)}; the second one{_defined_at(wdef.fn)} needs "
                "another version"
            )

    def workflow_version(self, name: str, version: str | None) -> WorkflowDef | None:
        """The code for ``version`` of workflow ``name`` if this deployment still has it."""
        if version is None:
            return self.workflows.get(name)
        return self.workflow_versions.get(name, {}).get(version)

    # -- graphs ----------------------------------------------------------------------
    def graph(self, name: str, definition: Any) -> Any:
        """Register a graph workflow from a dict, a ``Graph`` or a JSON/YAML file path."""
        from plait.graph import load_graph, validate_or_raise

        graph = load_graph(name, definition)
        validate_or_raise(graph)
        origin = _caller()
        if name in self.workflows:
            raise ValueError(
                f"graph {name!r}{origin}: a workflow is already registered under that "
                f"name{_defined_at(self.workflows[name].fn)}"
            )
        if name in self.functions:
            raise ValueError(
                f"graph {name!r}{origin}: a function is already registered under that "
                f"name{_defined_at(self.functions[name].fn)}"
            )
        existing = self.graphs.get(name)
        if existing is not None and existing != graph:
            raise ValueError(
                f"graph {name!r} is already registered{self._graph_origins.get(name, '')} "
                f"with another definition; the second one{origin} needs another name"
            )
        self.graphs[name] = graph
        self._graph_origins.setdefault(name, origin)
        return graph

    # -- lookups ---------------------------------------------------------------------
    def is_runnable(self, name: str) -> bool:
        return name in self.workflows or name in self.graphs

    def require_workflow(self, name: str) -> None:
        if not isinstance(name, str):
            raise TypeError(f"workflow name must be a string, got {type(name).__name__}")
        if not self.is_runnable(name):
            raise WorkflowNotFoundError(name, [*self.workflows, *self.graphs])

    def function_name_of(self, obj: Any) -> str | None:
        """The registered name of a function object passed to ``wf.do``."""
        name: str | None = getattr(obj, "__plait_function__", None)
        if name is not None and name in self.functions and self.functions[name].fn is obj:
            return name
        for fdef in self.functions.values():
            if fdef.fn is obj:
                return fdef.name
        return None
