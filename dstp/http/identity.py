"""Who an HTTP request acts for: the ASGI middleware that puts a Principal on every request.

The credential is the ``Authorization: Bearer <token>`` header (scripts, the
R package, curl) or, for browsers, the session cookie that ``POST /login``
sets (:mod:`dstp.auth.sessions`: the cookie names a session, the session
holds the token, and the token is authenticated again on every request, so a
revoked token ends its sessions). The principal goes into the request's
state (``request.state.principal``); routes hand it to the service.

A request whose credential is not valid is refused (401) by ``refuse``, the
app's error response; one with none is anonymous, or refused when the server
needs a token. ``/login``, ``/logout`` and ``/static/`` always answer (a
stale cookie must not lock anyone out of the login page).

Framework-free (plain ASGI), like the page models: the app passes ``refuse``.
"""

from __future__ import annotations

from http.cookies import CookieError, SimpleCookie
from typing import Any, Awaitable, Callable

import anyio

from dstp.auth import ANONYMOUS, SESSION_COOKIE, Authenticator, Principal, SessionStore
from dstp.errors import AuthenticationError, DstpError, LimitExceededError

__all__ = ["OPEN_PATHS", "Identify", "header", "session_id"]

#: Paths that answer whatever the credential (prefixes).
OPEN_PATHS = ("/login", "/logout", "/static/")

Refuse = Callable[[Any, Any, Any, DstpError], Awaitable[None]]


def header(scope: Any, name: bytes) -> str | None:
    """Return the value of request header ``name`` (lower case), or None."""
    for key, value in scope.get("headers", ()):
        if key == name:
            return str(value.decode("latin-1"))
    return None


def session_id(scope: Any) -> str | None:
    """Return the session id in the request's cookie, if any."""
    raw = header(scope, b"cookie")
    if not raw:
        return None
    try:
        jar: SimpleCookie = SimpleCookie(raw)
    except CookieError:
        return None
    morsel = jar.get(SESSION_COOKIE)
    return morsel.value if morsel is not None and morsel.value else None


class Identify:
    """ASGI middleware: ``scope["state"]["principal"]`` for every HTTP request."""

    def __init__(self, app: Any, authenticator: Authenticator, sessions: SessionStore, refuse: Refuse) -> None:
        self.app = app
        self.authenticator = authenticator
        self.sessions = sessions
        self.refuse = refuse

    def credential(self, scope: Any) -> str | None:
        """Return the request's ``Authorization`` value: the header, else the session's token."""
        authorization = header(scope, b"authorization")
        if authorization is not None:
            return authorization
        sid = session_id(scope)
        token = self.sessions.credential(sid) if sid else None
        return f"Bearer {token}" if token else None

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        authorization = self.credential(scope)
        client = scope.get("client")
        source = str(client[0]) if client else ""  # failed logins counted, anonymous shares kept, per address
        try:
            if authorization is None:
                principal: Principal = self.authenticator.authenticate(None, source)
            else:  # a token store read or a JWKS fetch: off the event loop
                principal = await anyio.to_thread.run_sync(self.authenticator.authenticate, authorization, source)
        except LimitExceededError as exc:  # too many failed authentications from this address
            await self.refuse(scope, receive, send, exc)
            return
        except AuthenticationError as exc:
            if not str(scope.get("path", "")).startswith(OPEN_PATHS):
                await self.refuse(scope, receive, send, exc)
                return
            principal = ANONYMOUS
        scope.setdefault("state", {})["principal"] = principal
        await self.app(scope, receive, send)
