"""The caller of the API as the routes see it: a user id and the scopes it holds.

A ``Principal`` answers the questions route code asks (may this caller read that run?
does it hold the ``graphs`` scope?), whichever way the caller proved who it is.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Protocol

from plait.http.problems import ApiError
from plait.ids import is_schedule_owner

#: what each scope lets a token do beyond starting and reading its own runs
SCOPES: dict[str, str] = {
    "graphs": "register and replace graphs over HTTP, and read their definitions",
    "schedules": (
        "see and operate schedules of other users, without an owner or declared in code,"
        " and read the runs a schedule without an owner starts"
    ),
    "admin": "read and operate every user's runs (one by one and in bulk, POST "
    "/api/runs/bulk), decide their gates, make schedules that fire more often than once a "
    "minute, and pause and resume workflows and queues",
}


class Owned(Protocol):
    """A run or a run summary: anything with an owner."""

    @property
    def id(self) -> str: ...

    @property
    def owner(self) -> str | None: ...


@dataclasses.dataclass(frozen=True)
class Principal:
    """The caller. ``user`` is None only when authentication is switched off, and then
    the caller is ``unrestricted``: a local, single-user server sees every run and holds
    every scope."""

    user: str | None
    scopes: frozenset[str] = frozenset()
    unrestricted: bool = False

    def __post_init__(self) -> None:
        if is_schedule_owner(self.user):
            # the owner of the runs of a schedule without an owner: a user of that id
            # would read them as her own
            raise ValueError(
                f"invalid user id {self.user!r}: ids starting 'schedule:' are reserved"
                " for the runs of schedules"
            )

    def may_access(self, run: Owned) -> bool:
        """Runs without an owner are shared; an owned run belongs to its owner alone (and
        to holders of the ``admin`` scope). A run a schedule without an owner started
        (one declared in code) is no user's: it answers to those who may operate that
        schedule, holders of the ``schedules`` scope (its input may hold a key)."""
        if self.unrestricted or run.owner is None:
            return True
        if is_schedule_owner(run.owner):
            return "schedules" in self.scopes or "admin" in self.scopes
        return run.owner == self.user or "admin" in self.scopes

    def require_access(self, run: Owned) -> None:
        if not self.may_access(run):
            if is_schedule_owner(run.owner):
                self.require_scope("schedules", f"reading run {run.id!r} of a schedule")
            raise ApiError(403, "FORBIDDEN", f"run {run.id!r} belongs to another user")

    def has_scope(self, scope: str) -> bool:
        return self.unrestricted or scope in self.scopes

    def require_scope(self, scope: str, doing: str) -> None:
        """403 naming the missing scope, so an operator knows what to grant."""
        if not self.has_scope(scope):
            raise ApiError(
                403,
                "MISSING_SCOPE",
                f"{doing} needs the {scope!r} scope, which this token does not have",
                extra={"scope": scope},
            )

    @property
    def visible_to(self) -> str | None:
        """The ``visible_to`` filter for listing runs (None: no filter)."""
        return None if self.has_scope("admin") else self.user

    def to_dict(self) -> dict[str, Any]:
        return {
            "user": self.user,
            "auth": not self.unrestricted,
            "scopes": sorted(SCOPES if self.unrestricted else self.scopes),
        }


def parse_scopes(text: str, where: str, *, secret: bool = False) -> frozenset[str]:
    """``"graphs+other"`` -> the scopes; an unknown one is an error naming ``where``.

    With ``secret``, the error does not repeat the unknown scope: in ``PLAIT_TOKENS``
    the scopes follow the token's ``:``, so a token that holds a ``:`` of its own puts
    its second half here, and the message would print it into a log."""
    scopes = frozenset(part.strip() for part in text.split("+") if part.strip())
    unknown = sorted(scopes - set(SCOPES))
    if unknown and secret:
        raise ValueError(
            f"invalid {where}: unknown scope (allowed: {', '.join(sorted(SCOPES))};"
            " a token may not contain ':' or ',')"
        )
    if unknown:
        raise ValueError(
            f"{where}: unknown scope {', '.join(map(repr, unknown))}"
            f" (known: {', '.join(sorted(SCOPES))})"
        )
    return scopes
