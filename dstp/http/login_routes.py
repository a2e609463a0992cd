"""Logging in with a browser: ``GET /login`` (the form), ``POST /login`` (a token, once, sets a session cookie)
and ``POST /logout``. Scripts send ``Authorization: Bearer`` instead (docs/security-auth.md).

One ``APIRouter``, included by :func:`dstp.http.app.create_app`. The session cookie names a session of
:class:`~dstp.auth.SessionStore`; the :class:`~dstp.http.identity.Identify` middleware reads it on every request.
"""

from __future__ import annotations

import logging
from typing import Callable
from urllib.parse import parse_qs, urlsplit

import anyio
from fastapi import APIRouter, Depends, Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response

from dstp.auth import ANONYMOUS, SESSION_COOKIE, Authenticator, Principal, SessionStore
from dstp.errors import AuthenticationError, BadRequestError
from dstp.http.html_pages import HtmlPages, safe_next
from dstp.http.identity import header, session_id
from dstp.settings import Settings

__all__ = ["MAX_LOGIN_BODY", "login_router"]

log = logging.getLogger("dstp.http")

#: Largest login form body read.
MAX_LOGIN_BODY = 16_384


def login_router(settings: Settings, authenticator: Authenticator, sessions: SessionStore, html: HtmlPages,
                 principal_of: Callable[[Request], Principal]) -> APIRouter:
    """Return the log-in and log-out routes."""
    router = APIRouter()
    PRINCIPAL = Depends(principal_of)
    # -- logging in (browsers; scripts send Authorization: Bearer) ----------------------

    def same_origin(request: Request) -> None:
        """Refuse a form posted from another site (login CSRF): its Origin must be this server."""
        origin = header(request.scope, b"origin")
        if origin and origin != "null" and urlsplit(origin).netloc != request.headers.get("host", ""):
            raise BadRequestError("this form may only be sent from this server's own pages")

    @router.get("/login", response_class=HTMLResponse, summary="Log-in page (a token, once, sets a session cookie)")
    def login_form(request: Request, principal: Principal = PRINCIPAL) -> HTMLResponse:
        return html.login(request, principal)

    @router.post("/login", response_class=HTMLResponse, include_in_schema=False)
    async def login(request: Request) -> Response:
        same_origin(request)
        if int(request.headers.get("content-length") or 0) > MAX_LOGIN_BODY:
            raise BadRequestError("the login form is too large")
        body = await request.body()
        form = parse_qs(body[:MAX_LOGIN_BODY].decode("utf-8", "replace"))
        token = (form.get("token") or [""])[0].strip()
        target = safe_next((form.get("next") or ["/"])[0])
        try:
            principal = await anyio.to_thread.run_sync(authenticator.verify, token)
        except AuthenticationError as exc:
            return html.login(request, ANONYMOUS, exc.message if token else "paste your token", status=401)
        sid = sessions.create(token)
        log.info("login: %s", principal.describe())
        response = RedirectResponse(target, status_code=303)
        response.set_cookie(SESSION_COOKIE, sid, max_age=int(settings.session_ttl_s), path="/", secure=True,
                            httponly=True, samesite="lax")
        return response

    @router.post("/logout", include_in_schema=False)
    def logout(request: Request) -> Response:
        same_origin(request)
        sid = session_id(request.scope)
        if sid:
            sessions.drop(sid)
        response = RedirectResponse("/", status_code=303)
        response.delete_cookie(SESSION_COOKIE, path="/", secure=True, httponly=True, samesite="lax")
        return response

    return router
