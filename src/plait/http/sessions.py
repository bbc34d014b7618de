"""Sign-in sessions of the dashboard: a token typed into a form once becomes an
``HttpOnly; SameSite=Strict`` cookie that scripts cannot read, with a CSRF token for the
requests that change something, an expiry and a sign-out.

The token itself never travels in a URL and is never kept by the browser. Sessions live
in this process's memory: a restart signs everyone out, which is the safe direction.
Only a hash of each cookie is kept, so nothing in memory is itself a live cookie.
"""

from __future__ import annotations

import dataclasses
import hashlib
import math
import secrets
import time
from typing import Any

from starlette.requests import Request
from starlette.responses import Response

from plait.http.principal import Principal

#: the cookie that carries a session
COOKIE = "plait_session"
#: the header a signed-in browser sends its CSRF token in
CSRF_HEADER = "X-CSRF-Token"
#: how long a sign-in lasts unless ``create_app(session_seconds=...)`` says otherwise
SESSION_SECONDS = 8 * 3600.0
#: sessions kept at most; past it the ones closest to expiry go first
MAX_SESSIONS = 10_000
#: sessions one user keeps at most; past it that user's oldest goes, so one user signing
#: in again and again never signs anyone else out
MAX_SESSIONS_PER_USER = 50


@dataclasses.dataclass(frozen=True)
class Session:
    principal: Principal
    csrf_token: str
    expires_at: float

    def to_dict(self) -> dict[str, Any]:
        return {
            **self.principal.to_dict(),
            "csrf_token": self.csrf_token,
            "expires_at": self.expires_at,
        }


class Sessions:
    """The open sessions of one app, keyed by a hash of their cookie."""

    def __init__(
        self,
        lifetime: float = SESSION_SECONDS,
        capacity: int = MAX_SESSIONS,
        per_user: int = MAX_SESSIONS_PER_USER,
    ) -> None:
        if lifetime <= 0:
            raise ValueError(f"invalid session lifetime: {lifetime!r} (seconds > 0)")
        if per_user < 1 or capacity < 1:
            raise ValueError(f"invalid session limits: {capacity!r} in all, {per_user!r} a user")
        self.lifetime = float(lifetime)
        self.capacity = capacity
        self.per_user = per_user
        self._open: dict[str, Session] = {}
        #: each user's session keys, oldest first (every session lasts as long, so the
        #: oldest is the one closest to expiry)
        self._of_user: dict[str | None, dict[str, None]] = {}

    def __len__(self) -> int:
        return len(self._open)

    def open(self, principal: Principal) -> tuple[str, Session]:
        """A new session for ``principal``: the cookie value and the session. A user at
        ``per_user`` sessions loses her oldest; past ``capacity`` in all, the sessions
        closest to expiry go, whoever they belong to."""
        mine = self._of_user.get(principal.user, {})
        while mine and len(mine) >= self.per_user:
            self._drop(next(iter(mine)))
        self._make_room()
        cookie = secrets.token_urlsafe(32)
        session = Session(principal, secrets.token_urlsafe(32), time.time() + self.lifetime)
        key = _key(cookie)
        self._open[key] = session
        self._of_user.setdefault(principal.user, {})[key] = None
        return cookie, session

    def of(self, request: Request) -> Session | None:
        """The live session whose cookie ``request`` carries, if any."""
        cookie = request.cookies.get(COOKIE)
        if not cookie:
            return None
        key = _key(cookie)
        session = self._open.get(key)
        if session is not None and session.expires_at <= time.time():
            self._drop(key)
            return None
        return session

    def close(self, request: Request) -> bool:
        """End the session of ``request``'s cookie; whether there was one."""
        cookie = request.cookies.get(COOKIE)
        return cookie is not None and self._drop(_key(cookie))

    def _make_room(self) -> None:
        now = time.time()
        if len(self._open) < self.capacity:
            return
        for key in [k for k, s in self._open.items() if s.expires_at <= now]:
            self._drop(key)
        while len(self._open) >= self.capacity:
            self._drop(min(self._open, key=lambda k: self._open[k].expires_at))

    def _drop(self, key: str) -> bool:
        """Forget the session ``key``; whether there was one."""
        session = self._open.pop(key, None)
        if session is None:
            return False
        mine = self._of_user.get(session.principal.user)
        if mine is not None:
            mine.pop(key, None)
            if not mine:
                del self._of_user[session.principal.user]
        return True


def set_cookie(response: Response, request: Request, cookie: str, lifetime: float) -> None:
    """Put the session cookie on ``response``: HttpOnly (scripts never see it),
    SameSite=Strict (no other site's page sends it), Secure over HTTPS, scoped to where
    the app is mounted."""
    response.set_cookie(
        COOKIE,
        cookie,
        max_age=max(1, math.ceil(lifetime)),
        path=_path(request),
        secure=request.url.scheme == "https",
        httponly=True,
        samesite="strict",
    )


def clear_cookie(response: Response, request: Request) -> None:
    response.delete_cookie(
        COOKIE,
        path=_path(request),
        secure=request.url.scheme == "https",
        httponly=True,
        samesite="strict",
    )


def _path(request: Request) -> str:
    return str(request.scope.get("root_path", "")).rstrip("/") + "/"


def _key(cookie: str) -> str:
    return hashlib.sha256(cookie.encode()).hexdigest()
