"""HTML responses of the HTTP adapter: a page rendered for its viewer, and the log-in page.

Shared by the routers that answer browsers (:mod:`dstp.http.catalog_routes`, :mod:`dstp.http.login_routes`) and by
:func:`dstp.http.app.create_app`, whose refusal of a bad credential shows a browser the log-in page.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import urlsplit

from fastapi import Request
from fastapi.responses import HTMLResponse

from dstp.auth import Principal
from dstp.http.pages import PageRenderer

__all__ = ["MAX_NEXT_LENGTH", "HtmlPages", "safe_next"]

#: Longest ``next`` a login redirects to (it becomes a Location header, bounded like every response header).
MAX_NEXT_LENGTH = 2_048


def safe_next(target: str) -> str:
    """Return ``target`` if it is a short path on this server (no open redirect), else "/"."""
    parts = urlsplit(target)
    if len(target) > MAX_NEXT_LENGTH or not target.startswith("/") or target.startswith("//") or parts.scheme \
            or parts.netloc or "\\" in target:
        return "/"
    return target


class HtmlPages:
    """Render templates for the principal who asked (their name in the header), and the log-in page."""

    def __init__(self, renderer: PageRenderer, allow_anonymous: bool) -> None:
        self.renderer = renderer
        self.allow_anonymous = allow_anonymous

    def page(self, template: str, model: dict[str, Any], principal: Principal, status: int = 200,
             **extra: Any) -> HTMLResponse:
        viewer = principal.describe() if principal.authenticated else ""
        return HTMLResponse(self.renderer.render(template, model, viewer=viewer, **extra), status_code=status)

    def login(self, request: Request, principal: Principal, message: str = "", status: int = 200) -> HTMLResponse:
        target = request.query_params.get("next") or (request.url.path if request.url.path != "/login" else "/")
        secure = request.url.scheme == "https" or request.url.hostname in ("127.0.0.1", "localhost", "::1")
        model = {"next": safe_next(target), "message": message, "secure": secure, "anonymous": self.allow_anonymous}
        return self.page("login.html", model, principal, status)
