"""Who is calling: a bearer token, a sign-in session or a user-supplied callable, turned
into a ``Principal``.

The API needs three answers: which user id to record as a new run's owner, whether this
caller may touch a run that already has an owner, and whether it holds a scope (such as
``graphs``) that a route asks for. Keeping all three here means route code never looks at
headers or cookies itself.
"""

from __future__ import annotations

import hmac
import inspect
import logging
import os
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from starlette.requests import Request

from plait.http.principal import SCOPES, Principal, parse_scopes
from plait.http.problems import ApiError
from plait.http.sessions import CSRF_HEADER, Sessions

log = logging.getLogger("plait.http")

TOKENS_ENV = "PLAIT_TOKENS"
#: methods that change nothing: they need no CSRF token with a sign-in session
SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})

#: maps a request to a user id or a Principal (None: not authenticated); sync or async
Authenticate = Callable[[Request], "str | Principal | Awaitable[str | Principal | None] | None"]
#: ``create_app(tokens=...)``: the ``PLAIT_TOKENS`` text, or token -> user id or Principal
Tokens = Mapping[str, "str | Principal"] | str


def parse_tokens(text: str) -> dict[str, Principal]:
    """Parse ``"alice:token1,admin:token2:graphs"`` into ``{token: Principal}``.

    Each entry is ``user:token`` or ``user:token:scope+scope``. A malformed entry raises
    ``ValueError`` at start-up rather than silently locking a user out later; the message
    names the entry by its position and user, never by its token (it ends up in logs).
    """
    tokens: dict[str, Principal] = {}
    for number, raw in enumerate(text.split(","), 1):
        entry = raw.strip()
        if not entry:
            continue
        parts = [part.strip() for part in entry.split(":")]
        user = parts[0]
        # an entry without ":" may be a bare token: then it has no user to name
        named = user and len(parts) > 1
        where = f"{TOKENS_ENV} entry {number}" + (f" (user {user!r})" if named else "")
        if len(parts) not in (2, 3) or not user or not parts[1]:
            raise ValueError(
                f"invalid {where}: expected 'user:token' or 'user:token:scope+scope',"
                " entries separated by commas (a token may not contain ':' or ',')"
            )
        scopes = parse_scopes(parts[2], where, secret=True) if len(parts) == 3 else frozenset[str]()
        token = parts[1]
        if token in tokens and tokens[token].user != user:
            raise ValueError(f"{TOKENS_ENV}: one token is given to two users")
        tokens[token] = Principal(user=user, scopes=scopes)
    return tokens


def _principals(tokens: Tokens) -> dict[str, Principal]:
    if isinstance(tokens, str):
        return parse_tokens(tokens)
    found: dict[str, Principal] = {}
    for token, who in tokens.items():
        if not isinstance(token, str) or not token:
            raise ValueError("tokens must map non-empty token strings to user ids")
        if isinstance(who, Principal) and who.user:
            parse_scopes("+".join(who.scopes), f"the scopes of user {who.user!r}")
            found[token] = who
        elif isinstance(who, str) and who:
            found[token] = Principal(user=who)
        else:
            raise ValueError("tokens must map non-empty token strings to user ids")
    return found


class Authenticator:
    """Turns a request into a ``Principal`` or a 401.

    With ``authenticate`` given it alone decides; otherwise an ``Authorization: Bearer``
    token is looked up in ``tokens`` (default: the ``PLAIT_TOKENS`` environment
    variable), and without one the browser's sign-in session cookie is (``sessions``).
    A request that a session authenticates and that changes something must also carry
    the session's CSRF token in the ``X-CSRF-Token`` header. ``no_auth`` is for a server
    on one's own machine and must be asked for explicitly.
    """

    def __init__(
        self,
        *,
        tokens: Tokens | None = None,
        authenticate: Authenticate | None = None,
        no_auth: bool = False,
        sessions: Sessions | None = None,
    ) -> None:
        if tokens is None and authenticate is None and not no_auth:
            tokens = os.environ.get(TOKENS_ENV, "")
        self.tokens: dict[str, Principal] = _principals(tokens or {})
        self.authenticate = authenticate
        self.no_auth = no_auth
        self.sessions = sessions
        if not no_auth and authenticate is None and not self.tokens:
            log.warning(
                "no tokens configured (set %s or pass tokens=...): every API request will get 401",
                TOKENS_ENV,
            )

    @property
    def signs_in_with_tokens(self) -> bool:
        """Whether the dashboard's sign-in form applies (tokens decide who is who)."""
        return not self.no_auth and self.authenticate is None

    async def principal(self, request: Request) -> Principal:
        if self.no_auth:
            return Principal(user=None, unrestricted=True)
        if self.authenticate is not None:
            found = await self._from_callable(request)
        elif bearer_token(request) is not None or "authorization" in request.headers:
            found = self.check_token(bearer_token(request))
        else:
            found = self._from_session(request)
        if found is None:
            raise ApiError(
                401,
                "UNAUTHENTICATED",
                "a valid bearer token is required (Authorization: Bearer <token>),"
                " or sign in on the dashboard",
                headers={"WWW-Authenticate": "Bearer"},
            )
        return found

    def check_token(self, token: str | None) -> Principal | None:
        """The principal of ``token``, compared against every known token so that the
        time taken does not reveal a prefix match."""
        if token is None:
            return None
        found: Principal | None = None
        for known, principal in self.tokens.items():
            if hmac.compare_digest(known.encode(), token.encode()):
                found = principal
        return found

    def _from_session(self, request: Request) -> Principal | None:
        if self.sessions is None:
            return None
        session = self.sessions.of(request)
        if session is None:
            return None
        if request.method not in SAFE_METHODS:
            sent = request.headers.get(CSRF_HEADER, "")
            if not hmac.compare_digest(sent.encode(), session.csrf_token.encode()):
                raise ApiError(
                    403,
                    "CSRF_TOKEN_INVALID",
                    f"a signed-in browser must send its session's {CSRF_HEADER} header"
                    " with every request that changes something",
                )
        return session.principal

    async def _from_callable(self, request: Request) -> Principal | None:
        assert self.authenticate is not None
        result: Any = self.authenticate(request)
        if inspect.isawaitable(result):
            result = await result
        if result is None or isinstance(result, Principal):
            return result
        if not isinstance(result, str) or not result:
            raise TypeError(
                f"authenticate() must return a user id, a Principal or None, got {result!r}"
            )
        return Principal(user=result)


def bearer_token(request: Request) -> str | None:
    """The token of an ``Authorization: Bearer <token>`` header, if there is one."""
    header = request.headers.get("authorization", "")
    scheme, _, token = header.partition(" ")
    if scheme.lower() != "bearer" or not token.strip():
        return None
    return token.strip()


__all__ = [
    "SAFE_METHODS",
    "SCOPES",
    "TOKENS_ENV",
    "Authenticate",
    "Authenticator",
    "Principal",
    "Tokens",
    "bearer_token",
    "parse_tokens",
]
