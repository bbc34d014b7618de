"""``/api/session``: sign in with a token, see who is signed in, sign out.

The dashboard's sign-in form posts the token here as JSON (so no other site can post it:
a cross-site JSON post needs a CORS preflight this server never grants, and the guard
refuses a foreign ``Origin``). The answer sets the session cookie and hands the page the
CSRF token it sends back with every request that changes something.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from plait.http.auth import Authenticator
from plait.http.guard import require_json
from plait.http.problems import ApiError, validate
from plait.http.schemas import json_body
from plait.http.sessions import Sessions, clear_cookie, set_cookie


class SignIn(BaseModel):
    """Body of ``POST /api/session``."""

    model_config = ConfigDict(extra="forbid")

    token: str = Field(min_length=1, max_length=1024)


class SignInRoutes:
    def __init__(self, auth: Authenticator, sessions: Sessions) -> None:
        self.auth = auth
        self.sessions = sessions

    def routes(self) -> list[Route]:
        return [
            Route("/session", self.current, methods=["GET"]),
            Route("/session", self.sign_in, methods=["POST"]),
            Route("/session", self.sign_out, methods=["DELETE"]),
        ]

    async def current(self, request: Request) -> Response:
        """Who the request is signed in as (by session, token or no-auth), with the
        session's CSRF token and expiry when a session cookie did it; 401 otherwise."""
        if self.auth.signs_in_with_tokens and "authorization" not in request.headers:
            session = self.sessions.of(request)
            if session is not None:
                return JSONResponse({**session.to_dict(), "session": True})
        principal = await self.auth.principal(request)
        body: dict[str, Any] = {**principal.to_dict(), "session": False}
        return JSONResponse(body)

    async def sign_in(self, request: Request) -> Response:
        """Check the token; on success open a session and set its cookie."""
        require_json(request)
        if not self.auth.signs_in_with_tokens:
            how = "authentication is off" if self.auth.no_auth else "this server signs in"
            raise ApiError(
                400,
                "SIGN_IN_NOT_AVAILABLE",
                f"there is no token sign-in here: {how}"
                + ("" if self.auth.no_auth else " through its own authenticate()"),
            )
        body: SignIn = validate(SignIn, await json_body(request, empty={}))
        principal = self.auth.check_token(body.token)
        if principal is None:
            raise ApiError(401, "UNAUTHENTICATED", "unknown token")
        self.sessions.close(request)  # a new sign-in never reuses an earlier cookie
        cookie, session = self.sessions.open(principal)
        response = JSONResponse({**session.to_dict(), "session": True}, status_code=201)
        set_cookie(response, request, cookie, self.sessions.lifetime)
        return response

    async def sign_out(self, request: Request) -> Response:
        """End the session (its cookie stops working at once) and clear the cookie."""
        require_json(request)
        if self.sessions.of(request) is not None and "authorization" not in request.headers:
            # the CSRF check of a session request: another site cannot sign you out
            await self.auth.principal(request)
        self.sessions.close(request)
        response = Response(status_code=204)
        clear_cookie(response, request)
        return response
