"""Stable identifiers. The namespace must never change: it would make every step that
already ran look new after a deploy."""

from __future__ import annotations

import uuid

NAMESPACE = uuid.UUID("8d7a4f5e-2c1b-5e3a-9f60-7b1d0c4e2a91")


def invocation_id(run_id: str, step_key: str) -> str:
    """The idempotency key of a step: the same for every attempt of it."""
    return str(uuid.uuid5(NAMESPACE, f"{run_id}:{step_key}"))


def child_run_id(invocation: str, attempt: int) -> str:
    """One child run per attempt of a parent step, so starting it again is a no-op."""
    return str(uuid.uuid5(NAMESPACE, f"child:{invocation}:{attempt}"))


def new_run_id() -> str:
    return str(uuid.uuid4())
