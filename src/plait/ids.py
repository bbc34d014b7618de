"""Stable identifiers. The namespace must never change: it would make every step that
already ran look new after a deploy."""

from __future__ import annotations

import hashlib
import os
import re
import time
import uuid

NAMESPACE = uuid.UUID("8d7a4f5e-2c1b-5e3a-9f60-7b1d0c4e2a91")
_NS_BYTES = NAMESPACE.bytes
#: the variant bits of RFC 4122 set on a hex digit
_VARIANT = {digit: format(int(digit, 16) & 0x3 | 0x8, "x") for digit in "0123456789abcdef"}


def invocation_id(run_id: str, step_key: str) -> str:
    """The idempotency key of a step: the same for every attempt of it. This is
    ``str(uuid.uuid5(NAMESPACE, f"{run_id}:{step_key}"))``, computed on the hex digest
    without building a UUID object because it runs once per step."""
    h = hashlib.sha1(_NS_BYTES + f"{run_id}:{step_key}".encode()).hexdigest()
    # version 5 in the 13th digit, the variant in the 17th
    return f"{h[:8]}-{h[8:12]}-5{h[13:16]}-{_VARIANT[h[16]]}{h[17:20]}-{h[20:32]}"


def kept_step(run_id: str, step_key: str, invocation: str) -> bool:
    """Whether run ``run_id``'s step ``step_key`` is one a fork kept from its source: a
    kept step keeps the invocation id its result was produced under (the source's), so
    it is the one step whose invocation id is not this run's own. Computed only where a
    replay needs to know (a kept step's input may differ from what the code passes now)."""
    return invocation != invocation_id(run_id, step_key)


def child_run_id(invocation: str, attempt: int) -> str:
    """One child run per attempt of a parent step, so starting it again is a no-op."""
    return str(uuid.uuid5(NAMESPACE, f"child:{invocation}:{attempt}"))


#: what a run id given by a caller may look like: it travels in URL paths, file names and
#: logs, so no ``/``, ``?``, ``#``, ``%``, spaces or control characters. Ids plait makes
#: itself (UUIDs) fit it too.
RUN_ID_PATTERN = r"[A-Za-z0-9_][A-Za-z0-9._:@+=~-]{0,199}"
_RUN_ID = re.compile(RUN_ID_PATTERN)


def check_run_id(run_id: object) -> str:
    """``run_id`` if it is a valid run id; else ``TypeError`` / ``ValueError`` naming it."""
    if not isinstance(run_id, str) or not run_id:
        raise TypeError(f"run_id must be a non-empty string, got {run_id!r}")
    if _RUN_ID.fullmatch(run_id) is None:
        raise ValueError(
            f"invalid run_id {run_id!r}: use at most 200 letters, digits and . _ : @ + = ~ -"
            " (starting with a letter, a digit or _)"
        )
    return run_id


#: the prefix of the run ids schedules give the runs of their ticks
#: (``schedule:<name>:<tick>``): reserved for them, so that no start or fork takes a tick
SCHEDULE_RUN_ID_PREFIX = "schedule:"
#: a run id a caller may choose (``RUN_ID_PATTERN``, not starting with the prefix above)
CALLER_RUN_ID_PATTERN = rf"(?!{SCHEDULE_RUN_ID_PREFIX}){RUN_ID_PATTERN}"


#: the owner of the runs a schedule without an owner starts (one declared in code, or
#: made by trusted code without ``owner=``): ``schedule:<name>``, which no user id may be.
#: Such a run belongs to no user, and only a caller who may operate that schedule (the
#: ``schedules`` scope) or read every run (``admin``) reads it over HTTP; its children
#: and continuations keep the owner, as every run's do.
SCHEDULE_OWNER_PREFIX = "schedule:"


def schedule_owner(name: str) -> str:
    """The owner of the runs schedule ``name`` starts when the schedule has none."""
    return SCHEDULE_OWNER_PREFIX + name


def is_schedule_owner(owner: str | None) -> bool:
    """Whether ``owner`` is a schedule's (``schedule_owner``), not a user's."""
    return owner is not None and owner.startswith(SCHEDULE_OWNER_PREFIX)


def check_caller_run_id(run_id: object) -> str:
    """``run_id`` if a caller may start (or fork) a run with it: a valid run id that does
    not start with ``schedule:``. A schedule's tick starts exactly one run, found by its
    id; a run that took the id first would make the tick start nothing."""
    check_run_id(run_id)
    assert isinstance(run_id, str)
    if run_id.startswith(SCHEDULE_RUN_ID_PREFIX):
        raise ValueError(reserved_run_id(run_id))
    return run_id


def reserved_run_id(run_id: str) -> str:
    """Why ``run_id`` is refused: it is a schedule's."""
    return (
        f"invalid run_id {shown(run_id)}: run ids starting {SCHEDULE_RUN_ID_PREFIX!r} are"
        " reserved for the runs schedules start"
    )


#: the longest name a caller may give an event, an approval gate, a queue or a schedule
MAX_NAME = 200
#: the characters no such name holds: the control characters (no store takes a NUL, and
#: the others would travel into logs, terminals and URLs)
NAME_FORBIDDEN = r"\x00-\x1f\x7f"
_NAME = re.compile(f"[^{NAME_FORBIDDEN}]+")


def check_name(name: object, what: str, *, limit: int = MAX_NAME) -> str:
    """``name`` if it is a string of 1 to ``limit`` characters without control
    characters; else ``TypeError`` / ``ValueError`` naming ``what`` and the value (a long
    one cut short). The one rule for the names of events, approval gates, queues and
    schedules, in the engine and over HTTP alike."""
    if not isinstance(name, str):
        raise TypeError(f"{what} must be a string, got {type(name).__name__} {shown(name)}")
    if len(name) > limit or _NAME.fullmatch(name) is None:
        raise ValueError(
            f"invalid {what} {shown(name)}: 1 to {limit} characters, no control characters"
        )
    return name


def shown(value: object, most: int = 60) -> str:
    """``repr(value)``, cut short past ``most`` characters (a name may be megabytes)."""
    if isinstance(value, str) and len(value) > most:
        return f"{value[: most - 20]!r}... ({len(value)} characters)"
    text = repr(value)
    return text if len(text) <= most + 20 else f"{text[:most]}..."


def new_run_id() -> str:
    """A UUID version 7: the millisecond it was made, then random bits. Runs started close
    together sort close together, so the steps of the runs in flight share few pages of
    the stores' indexes and each commit writes fewer pages."""
    raw = bytearray((time.time_ns() // 1_000_000).to_bytes(6, "big") + os.urandom(10))
    raw[6] = (raw[6] & 0x0F) | 0x70  # version 7
    raw[8] = (raw[8] & 0x3F) | 0x80  # RFC 9562 variant
    return str(uuid.UUID(bytes=bytes(raw)))


def random_uuid() -> str:
    """What ``wf.uuid()`` records: nothing in it says when it was made."""
    return str(uuid.uuid4())


#: the start of the de-duplication keys of events a workflow sends (``wf.send_event``):
#: a sender's own keys may not take it, so none can stand in for a run's send
SEND_DEDUP_PREFIX = "__send:"


def check_event_dedup(value: str) -> str:
    """A de-duplication key an event's sender gives (checked as a key already): keys of
    plait's own sends are not the sender's to take."""
    if value.startswith(SEND_DEDUP_PREFIX):
        raise ValueError(
            f"invalid dedup {value!r}: keys starting {SEND_DEDUP_PREFIX!r} are plait's own "
            "(the sends of wf.send_event)"
        )
    return value
