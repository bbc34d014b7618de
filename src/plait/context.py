"""What a function sees about the step it runs in."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any


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
