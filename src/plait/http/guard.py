"""Checks every request passes before any route sees it, and headers every answer gets.

* ``Host`` must name this server when it runs without authentication (a page that
  rebinds its own domain name to 127.0.0.1 cannot reach it), or when ``allowed_hosts``
  is given.
* A request that changes something must come from this server's own pages, if from a
  browser at all: its ``Origin`` (when sent) is this server's. Without authentication
  every request is held to that.
* A request that changes something must say ``Content-Type: application/json``. HTML
  forms and ``no-cors`` fetches cannot send that header, and a cross-site page that sets
  it needs a CORS preflight this server never grants. That one is checked by each route
  (``require_json``) after the router and authentication: a method a path does not take
  gets 405 and an unauthenticated request 401, whatever its content type.
* A body larger than ``max_body`` bytes is refused with 413, from its ``Content-Length``
  before a byte of it is kept, or as soon as a chunked body goes past it. The rest of the
  body is read and dropped (up to ``DRAIN_LIMIT`` bytes) before the answer goes out: a
  client that is still sending when the server closes the connection never sees the 413.
* Every answer says ``nosniff``, may not be framed, sends no ``Referer`` and carries a
  ``Content-Security-Policy`` that allows this server's own scripts and styles only.

An unauthenticated request gets 401 before any other check: a request to the API (but
its sign-in, ``/api/session``, which anyone may reach) that one of these checks would
refuse is first asked who sends it (``authenticate``), and one that names nobody gets
the 401 of authentication instead of the refusal.

A pure ASGI middleware (not Starlette's ``BaseHTTPMiddleware``), so streamed answers
pass through untouched and a client's disconnect still reaches the route.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Awaitable, Callable, Iterable
from typing import Any
from urllib.parse import urlsplit

from starlette.datastructures import Headers
from starlette.requests import Request
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from plait.http.problems import ApiError

#: default largest request body, in bytes
MAX_BODY = 1 << 20
#: bytes of a refused body read (and dropped) so its client gets the answer; past it the
#: connection is simply closed
DRAIN_LIMIT = 16 << 20

CONTENT_SECURITY_POLICY = "; ".join(
    [
        "default-src 'none'",
        "script-src 'self'",
        "style-src 'self'",
        "img-src 'self' data:",
        "connect-src 'self'",
        "form-action 'self'",
        "frame-ancestors 'none'",
        "base-uri 'none'",
    ]
)
SECURITY_HEADERS: list[tuple[bytes, bytes]] = [
    (b"x-content-type-options", b"nosniff"),
    (b"content-security-policy", CONTENT_SECURITY_POLICY.encode()),
    (b"x-frame-options", b"DENY"),
    (b"referrer-policy", b"no-referrer"),
    (b"cross-origin-opener-policy", b"same-origin"),
    (b"cross-origin-resource-policy", b"same-origin"),
]
_SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})
_LOOPBACK_NAMES = frozenset({"localhost", "127.0.0.1", "[::1]"})
_DEFAULT_PORTS = {"http": 80, "https": 443, "ws": 80, "wss": 443}
#: the API's prefix, and its one route that needs no caller (the sign-in)
_API = "/api"
_SIGN_IN = "/api/session"

#: who sends a request: returns (anything) when it is authenticated, raises the
#: ``ApiError`` (401) of authentication when it is not
Authenticate = Callable[[Request], Awaitable[Any]]


class Guard:
    """The checks and headers above, around ``app``."""

    def __init__(
        self,
        app: ASGIApp,
        *,
        max_body: int = MAX_BODY,
        no_auth: bool = False,
        allowed_hosts: Iterable[str] = (),
        authenticate: Authenticate | None = None,
    ) -> None:
        if isinstance(max_body, bool) or not isinstance(max_body, int) or max_body < 1:
            raise ValueError(f"invalid max_body: {max_body!r} (bytes, >= 1)")
        self.app = app
        self.authenticate = None if no_auth else authenticate
        self.max_body = max_body
        self.allowed_hosts = frozenset(_host_name(h) for h in allowed_hosts)
        self.check_host = no_auth or bool(self.allowed_hosts)
        #: without authentication the Origin of every request is checked, not only of
        #: those that change something (a foreign page must not even read)
        self.strict_origin = no_auth

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        send = _with_security_headers(send, api=scope["path"].startswith("/api"))
        refusal = self.refusal(scope)
        if refusal is not None:
            too_large = refusal.status == 413
            refusal = await self._unauthenticated(scope) or refusal
            if too_large:
                await _drain(receive)
            await refusal.response()(scope, receive, send)
            return
        if self.authenticate is not None and _needs_caller(scope):
            send = self._unmatched_asks_who(scope, receive, send)
        await self.app(scope, self._limited(receive), send)

    def _unmatched_asks_who(self, scope: Scope, receive: Receive, send: Send) -> Send:
        """``send`` for a request to the API: a 404 or 405 of the router (no route has
        that path, or takes that method) becomes the 401 of authentication when the
        request names nobody, since what the API has is no anonymous caller's business.
        Routes authenticate themselves first, so theirs come from known callers; asking
        only here spares every other request a second authentication."""
        replaced = False
        asked = dict(scope)  # as it came: routing moves its path into its root_path

        async def checked(message: Message) -> None:
            nonlocal replaced
            if replaced:
                return  # the body of the answer that was replaced
            if message["type"] == "http.response.start" and message["status"] in (404, 405):
                refusal = await self._unauthenticated(asked)
                if refusal is not None:
                    replaced = True
                    await refusal.response()(scope, receive, send)
                    return
            await send(message)

        return checked

    def refusal(self, scope: Scope) -> ApiError | None:
        """Why ``scope`` is refused before it reaches a route, if it is."""
        headers = Headers(scope=scope)
        method = scope["method"]
        host = headers.get("host", "")
        if self.check_host and not self._host_allowed(host, scope):
            return ApiError(
                400,
                "HOST_NOT_ALLOWED",
                f"this server does not answer to Host {host!r}; start it with"
                " --allowed-host NAME to serve under that name",
            )
        origin = headers.get("origin")
        changes = method not in _SAFE_METHODS
        checked = origin is not None and (changes or self.strict_origin)
        if checked and not self._origin_allowed(str(origin), host, scope):
            return ApiError(
                403,
                "ORIGIN_NOT_ALLOWED",
                f"requests from pages of {origin!r} are refused: only this server's"
                " own pages may call it from a browser",
            )
        length = headers.get("content-length")
        if length is not None and length.isdigit() and int(length) > self.max_body:
            return self._too_large()
        return None

    async def _unauthenticated(self, scope: Scope) -> ApiError | None:
        """The 401 of a request to the API that names no caller, which comes before any
        other refusal; None for one that does (or needs none: the sign-in, the pages)."""
        if self.authenticate is None or not _needs_caller(scope):
            return None
        try:
            await self.authenticate(Request(scope))
        except ApiError as error:
            return error if error.status == 401 else None
        except Exception:
            return None  # an authenticate() that needs more than the headers: its route asks
        return None

    def _too_large(self) -> ApiError:
        return ApiError(
            413,
            "BODY_TOO_LARGE",
            f"the request body is over the limit --max-body ({self.max_body} bytes)",
            extra={"limit": self.max_body},
        )

    def _limited(self, receive: Receive) -> Receive:
        """``receive`` that raises 413 once the body read so far is over the limit."""
        seen = 0

        async def limited() -> Message:
            nonlocal seen
            message = await receive()
            if message["type"] == "http.request":
                seen += len(message.get("body", b""))
                if seen > self.max_body:
                    if message.get("more_body"):
                        await _drain(receive)
                    raise self._too_large()
            return message

        return limited

    def _host_allowed(self, host: str, scope: Scope) -> bool:
        name = _host_name(host)
        if not name:
            return False
        return name in self.allowed_hosts or name in _own_names(scope)

    def _origin_allowed(self, origin: str, host: str, scope: Scope) -> bool:
        try:
            parts = urlsplit(origin)
            port = parts.port
        except ValueError:
            return False
        if parts.scheme not in ("http", "https") or not parts.hostname:
            return False  # "null" (sandboxed frames, files) and anything odd
        name = _host_name(parts.netloc)
        if name in self.allowed_hosts:
            return True
        given = (name, port or _DEFAULT_PORTS[parts.scheme])
        return given == _host_and_port(host, scope)


def require_json(request: Request) -> None:
    """415 unless a request that changes something says ``Content-Type:
    application/json``; every route that changes something calls it first (after
    authentication), so the router's 405 and the 401 come before it."""
    if request.method in _SAFE_METHODS:
        return
    headers = request.headers
    media_type = headers.get("content-type", "").partition(";")[0].strip().lower()
    if media_type != "application/json":
        shown = repr(headers["content-type"]) if "content-type" in headers else "none"
        raise ApiError(
            415,
            "UNSUPPORTED_MEDIA_TYPE",
            f"a {request.method} request needs Content-Type: application/json (got {shown}),"
            " even without a body",
        )


def _needs_caller(scope: Scope) -> bool:
    """Whether a request goes to a route of the API that serves only a known caller."""
    path = str(scope["path"])
    root = str(scope.get("root_path", ""))
    if root and path.startswith(root):
        path = path[len(root) :]
    return (path == _API or path.startswith(_API + "/")) and path.rstrip("/") != _SIGN_IN


async def _drain(receive: Receive) -> None:
    """Read what is left of a request body, dropping it, up to ``DRAIN_LIMIT`` bytes."""
    seen = 0
    while seen <= DRAIN_LIMIT:
        message = await receive()
        if message["type"] != "http.request":
            return
        seen += len(message.get("body", b""))
        if not message.get("more_body"):
            return


def _own_names(scope: Scope) -> frozenset[str]:
    """The names a request to this socket may use: its own address, and every loopback
    name when it listens on loopback."""
    server = scope.get("server")
    if not server:
        return _LOOPBACK_NAMES
    address = str(server[0])
    name = _host_name(address if ":" not in address else f"[{address}]")
    try:
        loopback = ipaddress.ip_address(address).is_loopback
    except ValueError:
        loopback = address == "localhost"
    return frozenset({name} | (_LOOPBACK_NAMES if loopback else set()))


def _host_name(host: str) -> str:
    """``"Example.com:8000"`` -> ``"example.com"``; ``"[::1]:80"`` -> ``"[::1]"``."""
    host = host.strip().lower()
    if host.startswith("["):
        return host.partition("]")[0] + "]"
    return host.partition(":")[0]


def _host_and_port(host: str, scope: Scope) -> tuple[str, int]:
    scheme = str(scope.get("scheme", "http"))
    name = _host_name(host)
    rest = host.strip()[len(name) :] if not host.startswith("[") else host.partition("]")[2]
    port_text = rest.removeprefix(":")
    port = int(port_text) if port_text.isdigit() else _DEFAULT_PORTS.get(scheme, 80)
    return name, port


def _with_security_headers(send: Send, *, api: bool) -> Send:
    async def sending(message: Message) -> None:
        if message["type"] == "http.response.start":
            headers: list[Any] = list(message.get("headers", []))
            present = {name.lower() for name, _ in headers}
            headers += [h for h in SECURITY_HEADERS if h[0] not in present]
            if api and b"cache-control" not in present:
                headers.append((b"cache-control", b"no-store"))
            message = {**message, "headers": headers}
        await send(message)

    return sending
