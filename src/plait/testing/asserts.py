"""Assertions on a run's steps that say what the run did when they fail."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from enum import Enum
from typing import Any

from plait.engine import Engine
from plait.records import Step


async def step_keys(engine: Engine, run_id: str) -> list[str]:
    """The keys of a run's steps, in the order the run first reached them."""
    return [step.key for step in await engine.get_steps(run_id)]


async def assert_steps(
    engine: Engine,
    run_id: str,
    expected: Sequence[str] | Mapping[str, str | Mapping[str, Any]],
) -> list[Step]:
    """Assert that the run reached exactly these steps, in this order, and return them.

    ``expected`` is a list of step keys, or a mapping from key to the step's status
    (``{"charge": "succeeded"}``) or to fields of ``plait.Step`` to compare
    (``{"charge": {"status": "succeeded", "attempts": 3}}``). Generated keys count too:
    ``__event:<name>``, ``__suspend:<reason>``, ``__now``, ordinals like ``fetch#1``.
    """
    if isinstance(expected, str):
        raise TypeError("expected must be a list of step keys or a mapping, not one string")
    steps = await engine.get_steps(run_id)
    keys = [step.key for step in steps]
    wanted = list(expected)
    problems: list[str] = []
    if keys != wanted:
        problems.append(f"steps {keys} != expected {wanted}")
    if isinstance(expected, Mapping):
        by_key = {step.key: step for step in steps}
        for key, want in expected.items():
            step = by_key.get(key)
            if step is None:
                continue
            fields = {"status": want} if isinstance(want, str) else dict(want)
            for field, value in fields.items():
                if not hasattr(step, field):
                    raise TypeError(f"plait.Step has no field {field!r} (asked for step {key!r})")
                actual = getattr(step, field)
                if actual != value:
                    problems.append(
                        f"step {key!r}: {field} is {_plain(actual)!r}, expected {_plain(value)!r}"
                    )
    if problems:
        raise AssertionError(f"run {run_id}: " + "; ".join(problems) + "\n" + _timeline(steps))
    return steps


def _plain(value: Any) -> Any:
    """A status as the string it is, not its enum's repr."""
    return value.value if isinstance(value, Enum) else value


def _timeline(steps: list[Step]) -> str:
    """The run's steps as lines a failing test prints."""
    if not steps:
        return "  (the run has no steps)"
    lines: list[str] = []
    for step in steps:
        detail = f"error {step.error.get('message')!r}" if step.error else ""
        lines.append(
            f"  {step.key:<30} {step.status:<10} attempts={step.attempts} {detail}".rstrip()
        )
    return "\n".join(lines)


__all__ = ["assert_steps", "step_keys"]
