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

    def __init__(self, lifetime: float = SESSION_SECONDS, capacity: int = MAX_SESSIONS) -> None:
        if lifetime <= 0:
            raise ValueError(f"invalid session lifetime: {lifetime!r} (seconds > 0)")
        self.lifetime = float(lifetime)
        self.capacity = capacity
        self._open: dict[str, Session] = {}

    def __len__(self) -> int:
        return len(self._open)

    def open(self, principal: Principal) -> tuple[str, Session]:
        """A new session for ``principal``: the cookie value and the session."""
        self._make_room()
        cookie = secrets.token_urlsafe(32)
        session = Session(principal, secrets.token_urlsafe(32), time.time() + self.lifetime)
        self._open[_key(cookie)] = session
        return cookie, session

    def of(self, request: Request) -> Session | None:
        """The live session whose cookie ``request`` carries, if any."""
        cookie = request.cookies.get(COOKIE)
        if not cookie:
            return None
        key = _key(cookie)
        session = self._open.get(key)
        if session is not None and session.expires_at <= time.time():
            del self._open[key]
            return None
        return session

    def close(self, request: Request) -> bool:
        """End the session of ``request``'s cookie; whether there was one."""
        cookie = request.cookies.get(COOKIE)
        return cookie is not None and self._open.pop(_key(cookie), None) is not None

    def _make_room(self) -> None:
        now = time.time()
        if len(self._open) < self.capacity:
            return
        for key in [k for k, s in self._open.items() if s.expires_at <= now]:
            del self._open[key]
        while len(self._open) >= self.capacity:
            oldest = min(self._open, key=lambda k: self._open[k].expires_at)
            del self._open[oldest]


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
