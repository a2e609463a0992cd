"""How every failure of an HTTP request becomes a response: status, JSON body or HTML page, incident id.

Each :class:`~dstp.errors.DstpError` becomes its ``http_status`` with the
shared body ``{"error": {"code", "message", …}}``, or an HTML error page for a
browser asking for a page. The web framework's own refusals (unknown path,
wrong method, bad parameters) become their classes in the error tree
(``RouteNotFoundError``, ``MethodNotAllowedError``, ``BadRequestError``), so
they have the same shape. Anything unexpected becomes ``ServerError`` (500)
with an incident id, logged with its traceback and never sent. The OpenAPI
description of each status lists the error codes that carry it, from
:func:`dstp.errors.error_table`.
"""

from __future__ import annotations

import logging
import math
from typing import Any

from fastapi import Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import HTMLResponse, JSONResponse, Response
from pydantic import BaseModel, Field

from dstp.errors import (
    BadRequestError,
    DstpError,
    MethodNotAllowedError,
    RouteNotFoundError,
    error_table,
)
from dstp.incidents import for_client
from dstp.http.pages import PageRenderer
from dstp.http.streaming import StreamAborted

__all__ = [
    "FRAMEWORK_ERRORS",
    "Boundary",
    "ErrorBody",
    "ErrorDetail",
    "error_response",
    "framework_error",
    "incident",
    "openapi_errors",
    "validation_error",
]

log = logging.getLogger("dstp.http")


class ErrorDetail(BaseModel):
    code: str = Field(description="Stable machine-readable code (see the error table in proto/README.md).")
    message: str = Field(description="What was wrong and what to do instead, written for the user.")
    line: int | None = Field(None, description="Query errors: line of the offending token (1-based).")
    column: int | None = Field(None, description="Query errors: column where the offending token ends (1-based).")
    token: str | None = Field(None, description="Query errors: the offending token.")


class ErrorBody(BaseModel):
    """The body of every error response."""

    error: ErrorDetail


def _status_descriptions() -> dict[int, str]:
    """Return, per HTTP status, the error codes of :mod:`dstp.errors` that carry it, each with its meaning."""
    found: dict[int, dict[str, str]] = {}
    for row in error_table():
        if row.parent is not None:  # the root's code is ServerError's
            found.setdefault(row.http_status, {}).setdefault(row.code, row.meaning.replace("``", "`"))
    return {status: " ".join(f"`{code}`: {meaning}" for code, meaning in codes.items())
            for status, codes in found.items()}


STATUS_DESCRIPTIONS = _status_descriptions()


def openapi_errors(*statuses: int) -> dict[int | str, dict[str, Any]]:
    """Return the OpenAPI ``responses`` entries of ``statuses``: the ErrorBody model and the codes behind each."""
    return {s: {"model": ErrorBody, "description": STATUS_DESCRIPTIONS[s]} for s in statuses}


def _is_api(request: Request) -> bool:
    path = request.url.path
    return path.endswith((".json", ".png")) or path.startswith(("/query", "/static", "/openapi"))


def error_response(request: Request, err: DstpError) -> Response:
    """Return the response for ``err``: its HTTP status, the shared JSON body (or an HTML page for browsers)."""
    err = incident(err)
    body = err.to_dict()
    retry = getattr(err, "retry_after_s", None)
    # Back-pressure says when to come back (whole seconds, RFC 9110), as gRPC's retry-after metadata does.
    headers = {"Retry-After": str(max(1, math.ceil(retry)))} if retry is not None else None
    renderer: PageRenderer | None = getattr(request.app.state, "renderer", None) if "app" in request.scope else None
    if renderer is not None and not _is_api(request) and "text/html" in request.headers.get("accept", ""):
        html = renderer.render("error.html", body["error"], status=err.http_status)  # type: ignore[arg-type]
        return HTMLResponse(html, status_code=err.http_status, headers=headers)
    return JSONResponse(body, status_code=err.http_status, headers=headers)


#: The web framework's refusals as classes of the error tree, by the HTTP status the framework chose.
FRAMEWORK_ERRORS: dict[int, type[DstpError]] = {
    cls.http_status: cls for cls in (BadRequestError, RouteNotFoundError, MethodNotAllowedError)
}


def framework_error(status: int, message: str) -> DstpError:
    """Return the error for a request the framework refused (unknown path, wrong method, unreadable body)."""
    return FRAMEWORK_ERRORS.get(status, BadRequestError)(message)


def validation_error(exc: RequestValidationError) -> BadRequestError:
    """Return the error for parameters or a body the framework could not validate, naming each problem."""
    problems = []
    for e in exc.errors():
        where = ".".join(str(p) for p in e.get("loc", ())[1:]) or "request"
        problems.append(f"{where}: {e.get('msg', 'invalid')}" + (f" (got {e['input']!r})" if e.get("input") else ""))
    return BadRequestError("; ".join(problems))


def incident(exc: BaseException) -> DstpError:
    """Return the error an HTTP client is sent for ``exc``: a refusal as it is, an incident logged once (with its
    traceback and cause) under the id its message names (:mod:`dstp.incidents`)."""
    return for_client(exc, "http")


class Boundary:
    """Outermost ASGI layer: unexpected exceptions become 500 + incident id; broken streams drop the connection."""

    def __init__(self, app: Any) -> None:
        self.app = app

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        started = False

        async def tracking_send(message: Any) -> None:
            nonlocal started
            await send(message)
            # Only once it went: a start refused on the way out (a header too long) still leaves room for the 500.
            started = started or message["type"] == "http.response.start"

        try:
            await self.app(scope, receive, tracking_send)
        except StreamAborted:
            return  # the body is incomplete; the server closes the connection
        except Exception as exc:  # noqa: BLE001 - the last line of defence for clients
            err = incident(exc)
            if not started and scope["type"] == "http":
                await error_response(Request(scope, receive), err)(scope, receive, send)
