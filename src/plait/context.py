"""What a function sees about the step it runs in."""

from __future__ import annotations

import contextvars
import dataclasses
from collections.abc import Awaitable, Callable
from typing import Any, Protocol

from plait import ids, serde
from plait.queues import check_spend

#: the most characters of a stream's name (as of every name plait stores)
MAX_STREAM_NAME = ids.MAX_NAME


class StreamSink(Protocol):
    """Where a step attempt's stream entries go (``runtime.streams.StreamWriter``): they
    are published at once, gathered with other writes into shared commits."""

    @property
    def limits(self) -> serde.Limits:
        """How large and deep an entry's value may be (the engine's value limits)."""
        ...

    def write(
        self, run_id: str, stream: str, value: str | None, step_key: str, attempt: int
    ) -> Awaitable[None]: ...

    def flush(self, run_id: str) -> Awaitable[None]:
        """Wait until every entry written for ``run_id`` so far has committed."""
        ...


def check_stream_name(name: object) -> str:
    """A stream's name: a non-empty string of at most ``MAX_STREAM_NAME`` characters."""
    return ids.check_name(name, "stream name", limit=MAX_STREAM_NAME)


def stream_value(name: str, value: Any, limits: serde.Limits) -> str | None:
    """An entry's value as the JSON text stored, within ``limits``; an error naming the
    stream when it is not JSON or too large."""
    return serde.dumps(value, what=f"an entry of stream {name!r}", limits=limits)


@dataclasses.dataclass
class StepContext:
    """Passed as the optional second parameter (``ctx``) of a function.

    ``invocation_id`` is the idempotency key: the same for every attempt of this step, so a
    payment provider or an ``ON CONFLICT`` clause can collapse retries onto one effect.
    """

    run_id: str
    step_key: str
    invocation_id: str
    attempt: int
    workflow: str
    node_id: str | None = None
    _branch: str | None = dataclasses.field(default=None, repr=False)
    # ``dict`` itself, not a typed factory: a context is made for every attempt
    _state_writes: dict[str, Any] = dataclasses.field(default_factory=dict, repr=False)  # pyright: ignore[reportUnknownVariableType]
    _state: dict[str, Any] = dataclasses.field(default_factory=dict, repr=False)  # pyright: ignore[reportUnknownVariableType]
    _on_state: Callable[[str, Any], None] | None = dataclasses.field(default=None, repr=False)
    #: where ``stream`` writes go; None where no engine runs the step (a direct call)
    _streams: StreamSink | None = dataclasses.field(default=None, repr=False)
    #: whether this attempt wrote to a stream (its end waits for those writes)
    _streamed: bool = dataclasses.field(default=False, repr=False)
    #: the body has returned (or raised): a stream write from a task it left running
    #: would belong to no attempt, and is refused
    _ended: bool = dataclasses.field(default=False, repr=False)
    #: what this attempt reported spent (``spend``), per unit: recorded as it ends
    _spent: dict[str, float] = dataclasses.field(default_factory=dict, repr=False)  # pyright: ignore[reportUnknownVariableType]

    def branch(self, key: str) -> None:
        """Choose the branch of a graph node's ``next`` map to follow."""
        if not isinstance(key, str):
            raise TypeError(f"branch key must be a string, got {type(key).__name__}")
        self._branch = key

    def set_state(self, name: str, value: Any) -> None:
        """Set one run-state variable; each name is written on its own, so parallel nodes
        never lose each other's writes."""
        if not isinstance(name, str):
            raise TypeError(f"state name must be a string, got {type(name).__name__}")
        self._state_writes[name] = value
        self._state[name] = value

    def get_state(self) -> dict[str, Any]:
        return dict(self._state)

    def spend(self, **amounts: float) -> None:
        """Report what this attempt spent, in any units (``ctx.spend(tokens=1234,
        usd=0.02)``; numbers >= 0; reports add up). Recorded with the attempt as it ends,
        against its queue's budgets (``app.queue(..., budget=...)``): a queue, or a key,
        that spent its budget in the window admits nothing new until the window frees."""
        for unit, amount in check_spend(amounts).items():
            self._spent[unit] = self._spent.get(unit, 0.0) + amount

    def stream(self, name: str) -> StepStream:
        """The run's stream ``name``, to write to from this step: each entry is published
        at once (readers see it before the step ends), tagged with this attempt. If the
        attempt fails or is interrupted, a ``reset`` entry follows and readers drop its
        entries; ``settled_only`` readers see them only once the attempt succeeded."""
        return StepStream(self, check_stream_name(name))


class StepStream:
    """A run's stream as a step attempt writes to it (``ctx.stream(name)``)."""

    __slots__ = ("_ctx", "name")

    def __init__(self, ctx: StepContext, name: str) -> None:
        self._ctx = ctx
        self.name = name

    async def write(self, value: Any) -> None:
        """Append ``value`` (JSON) to the stream. It returns once the entry is on its way
        (entries written together share a commit); the step's end waits for them all."""
        ctx = self._ctx
        sink = ctx._streams  # pyright: ignore[reportPrivateUsage]
        if sink is None:
            raise RuntimeError(
                f"stream {self.name!r}: step {ctx.step_key!r} is not run by a plait engine "
                "here, so it has no stream to write to"
            )
        if ctx._ended:  # pyright: ignore[reportPrivateUsage]
            raise RuntimeError(
                f"stream {self.name!r}: attempt {ctx.attempt} of step {ctx.step_key!r} has "
                "ended, so an entry written now would belong to no attempt and be dropped; "
                "write from the step body, and await the tasks it starts before it returns"
            )
        text = stream_value(self.name, value, sink.limits)
        ctx._streamed = True  # pyright: ignore[reportPrivateUsage]
        await sink.write(ctx.run_id, self.name, text, ctx.step_key, ctx.attempt)


#: the step attempt whose body runs in this context (set by the runtime around a body)
CURRENT_STEP: contextvars.ContextVar[StepContext | None] = contextvars.ContextVar(
    "plait_current_step", default=None
)


def current_step() -> StepContext:
    """The ``StepContext`` of the step body running now, for library code that was not
    handed ``ctx`` (``plait.current_step().stream("tokens")``). ``RuntimeError`` outside
    a step body."""
    ctx = CURRENT_STEP.get()
    if ctx is None:
        raise RuntimeError(
            "plait.current_step() called outside a step body: it works only in a function "
            "plait runs as a step (inline or on a step worker)"
        )
    return ctx
