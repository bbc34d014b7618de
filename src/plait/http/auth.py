"""Who is calling: bearer tokens or a user-supplied callable, turned into a ``Principal``.

The API only ever needs two answers: which user id to record as a new run's owner, and
whether this caller may touch a run that already has an owner. Keeping both here means the
route code never looks at headers itself.
"""

from __future__ import annotations

import dataclasses
import hmac
import inspect
import logging
import os
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from starlette.requests import Request

from plait.http.problems import ApiError
from plait.records import Run

log = logging.getLogger("plait.http")

#: maps a request to a user id (None: not authenticated); may be sync or async
Authenticate = Callable[[Request], "str | Awaitable[str | None] | None"]

TOKENS_ENV = "PLAIT_TOKENS"


def parse_tokens(text: str) -> dict[str, str]:
    """Parse ``"alice:token1,bob:token2"`` (user id, colon, token) into ``{token: user}``.

    A malformed entry raises ``ValueError`` at start-up rather than silently locking a
    user out later.
    """
    tokens: dict[str, str] = {}
    for raw in text.split(","):
        entry = raw.strip()
        if not entry:
            continue
        user, sep, token = entry.partition(":")
        user, token = user.strip(), token.strip()
        if not sep or not user or not token:
            raise ValueError(
                f"invalid {TOKENS_ENV} entry {entry!r}: expected 'user:token' pairs "
                "separated by commas"
            )
        if token in tokens and tokens[token] != user:
            raise ValueError(f"{TOKENS_ENV}: one token is given to two users")
        tokens[token] = user
    return tokens


@dataclasses.dataclass(frozen=True)
class Principal:
    """The caller. ``user`` is None only when authentication is switched off, and then
    the caller is ``unrestricted``: a local, single-user server sees every run."""

    user: str | None
    unrestricted: bool = False

    def may_access(self, run: Run) -> bool:
        """Runs without an owner are shared; an owned run belongs to its owner alone."""
        return self.unrestricted or run.owner is None or run.owner == self.user

    def require_access(self, run: Run) -> None:
        if not self.may_access(run):
            raise ApiError(403, "FORBIDDEN", f"run {run.id!r} belongs to another user")

    @property
    def visible_to(self) -> str | None:
        """The ``visible_to`` filter for listing runs (None: no filter)."""
        return None if self.unrestricted else self.user


class Authenticator:
    """Turns a request into a ``Principal`` or a 401.

    With ``authenticate`` given it alone decides; otherwise the bearer token is looked up
    in ``tokens`` (default: the ``PLAIT_TOKENS`` environment variable). ``no_auth`` is for
    a server on one's own machine and must be asked for explicitly.
    """

    def __init__(
        self,
        *,
        tokens: Mapping[str, str] | None = None,
        authenticate: Authenticate | None = None,
        no_auth: bool = False,
    ) -> None:
        if tokens is None and authenticate is None and not no_auth:
            tokens = parse_tokens(os.environ.get(TOKENS_ENV, ""))
        self.tokens: dict[str, str] = dict(tokens or {})
        for token, user in self.tokens.items():
            if not isinstance(token, str) or not token or not isinstance(user, str) or not user:
                raise ValueError("tokens must map non-empty token strings to user ids")
        self.authenticate = authenticate
        self.no_auth = no_auth
        if not no_auth and authenticate is None and not self.tokens:
            log.warning(
                "no tokens configured (set %s or pass tokens=...): every API request will get 401",
                TOKENS_ENV,
            )

    async def principal(self, request: Request) -> Principal:
        if self.no_auth:
            return Principal(user=None, unrestricted=True)
        user = await self._user(request)
        if user is None:
            raise ApiError(
                401,
                "UNAUTHENTICATED",
                "a valid bearer token is required (Authorization: Bearer <token>)",
                headers={"WWW-Authenticate": "Bearer"},
            )
        return Principal(user=user)

    async def _user(self, request: Request) -> str | None:
        if self.authenticate is not None:
            result: Any = self.authenticate(request)
            if inspect.isawaitable(result):
                result = await result
            if result is not None and (not isinstance(result, str) or not result):
                raise TypeError(f"authenticate() must return a user id or None, got {result!r}")
            return result
        token = bearer_token(request)
        if token is None:
            return None
        # Compare against every token so the time taken does not reveal a prefix match.
        found: str | None = None
        for known, user in self.tokens.items():
            if hmac.compare_digest(known.encode(), token.encode()):
                found = user
        return found


def bearer_token(request: Request) -> str | None:
    """The token of an ``Authorization: Bearer <token>`` header, if there is one."""
    header = request.headers.get("authorization", "")
    scheme, _, token = header.partition(" ")
    if scheme.lower() != "bearer" or not token.strip():
        return None
    return token.strip()
