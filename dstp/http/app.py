"""The HTTP adapter: the browser catalog and the HTTP API over :class:`DstpService`.

Thin by design, like :mod:`dstp.grpc_app`: this module wires the app
(middleware, error handlers, static files) and includes one ``APIRouter`` per
door — :mod:`~dstp.http.catalog_routes` (pages, quicklooks, builder, API
description), :mod:`~dstp.http.query_routes` (``/query``),
:mod:`~dstp.http.login_routes`, the facades (ERDDAP, STAC), the change feed,
OPeNDAP, Zarr, EDR and maps; each route converts its request, calls the
service (or a page model of :mod:`dstp.http`), and converts the answer. Errors are translated in one place,
:func:`dstp.http.error_responses.error_response`: every :class:`DstpError`
becomes its ``http_status`` with the shared JSON body
``{"error": {"code", "message", …}}`` (an HTML page for browsers), framework
errors become their classes in the tree, and anything unexpected becomes 500
with an incident id that is logged with its traceback and never sent.
``docs/web.md`` describes pages, endpoints and formats.

Every request carries a :class:`~dstp.auth.Principal`, put there by the
:class:`~dstp.http.identity.Identify` middleware (``Authorization: Bearer``,
or the session cookie of ``/login``); each route takes it as a dependency
(:func:`current_principal`) and hands it to the service, which shows only
the datasets it may read. ``docs/security-auth.md`` describes logging in.

    create_app(service, settings)          -> the ASGI app (FastAPI)
    start_http_server(service, settings)   -> HttpServer (uvicorn on a thread; .endpoint, .stop())
"""

from __future__ import annotations

import logging
import socket
import threading
import time
from typing import Any, Callable

import uvicorn
from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.middleware.cors import CORSMiddleware
from fastapi.responses import HTMLResponse, Response
from fastapi.staticfiles import StaticFiles
from starlette.exceptions import HTTPException as StarletteHTTPException

from dstp import __version__
from dstp.auth import ANONYMOUS, Authenticator, Principal, SessionStore
from dstp.auth.tls import TlsMaterial
from dstp.errors import AuthenticationError, DstpError
from dstp.http import STATIC_DIR
from dstp.http.catalog_routes import catalog_router
from dstp.http.edr_routes import edr_router
from dstp.http.error_responses import Boundary, error_response, framework_error, validation_error
from dstp.http.facade_routes import facade_router
from dstp.http.feed_routes import feed_router
from dstp.http.formats import SCHEMA_OMITTED_HEADER
from dstp.http.html_pages import HtmlPages
from dstp.http.identity import Identify
from dstp.http.limits import Guard, HttpLimits, guarded_protocol
from dstp.http.login_routes import login_router
from dstp.http.map_routes import map_router
from dstp.http.opendap_routes import opendap_router
from dstp.http.pages import CatalogView, PageRenderer
from dstp.http.paging import VERSION_HEADER
from dstp.http.query_routes import query_router
from dstp.http.zarr_routes import zarr_router
from dstp.service import DstpService
from dstp.settings import Settings

__all__ = ["HttpServer", "create_app", "current_principal", "error_response", "start_http_server"]

log = logging.getLogger("dstp.http")


def current_principal(request: Request) -> Principal:
    """Return who the request acts for (set by the Identify middleware; ANONYMOUS without it)."""
    principal = getattr(request.state, "principal", ANONYMOUS)
    return principal if isinstance(principal, Principal) else ANONYMOUS


#: The principal of a route's request, as a FastAPI dependency.


def create_app(service: DstpService, settings: Settings, *, authenticator: Authenticator | None = None,
               sessions: SessionStore | None = None) -> FastAPI:
    """Return the ASGI app serving the catalog pages and the HTTP API of ``service``.

    ``authenticator`` checks each request's credential (default: the one ``settings`` describe for the
    service's catalog); ``sessions`` keeps the browser logins.
    """
    authenticator = authenticator or Authenticator.from_settings(
        settings, (ds.descriptor for ds in service.catalog), service.clock)
    sessions = sessions or SessionStore(settings.session_ttl_s, service.clock)
    app = FastAPI(
        title="dstp HTTP API",
        version=__version__,
        description="Discover gridded netCDF datasets and query them with SQL; results stream as CSV, JSON, "
        "Arrow, or arrive as Parquet and netCDF. Every error has the body {\"error\": {\"code\", \"message\"}}.",
        docs_url=None,  # Swagger UI loads from a CDN; /api renders this description offline instead
        redoc_url=None,
    )
    view, renderer = CatalogView(service), PageRenderer()
    app.state.renderer = renderer
    html = HtmlPages(renderer, authenticator.allow_anonymous)

    async def dstp_error(request: Request, exc: Exception) -> Response:
        assert isinstance(exc, DstpError)
        return error_response(request, exc)

    async def invalid_request(request: Request, exc: Exception) -> Response:
        assert isinstance(exc, RequestValidationError)
        return error_response(request, validation_error(exc))

    async def http_error(request: Request, exc: Exception) -> Response:
        assert isinstance(exc, StarletteHTTPException)
        message = f"no page at {request.url.path}" if exc.status_code == 404 else str(exc.detail)
        return error_response(request, framework_error(exc.status_code, message))

    app.add_exception_handler(DstpError, dstp_error)
    app.add_exception_handler(RequestValidationError, invalid_request)
    app.add_exception_handler(StarletteHTTPException, http_error)

    async def refuse(scope: Any, receive: Any, send: Any, err: DstpError) -> None:
        """Answer a request whose credential was refused: the login page for a browser, else 401 JSON (429 when
        its address failed to authenticate too often)."""
        request = Request(scope, receive)
        response = error_response(request, err)
        if not isinstance(err, AuthenticationError):
            await response(scope, receive, send)
            return
        if isinstance(response, HTMLResponse):
            response = html.login(request, ANONYMOUS, err.message, status=401)
        response.headers["WWW-Authenticate"] = 'Bearer realm="dstp"'
        await response(scope, receive, send)

    app.add_middleware(Identify, authenticator=authenticator, sessions=sessions, refuse=refuse)
    app.add_middleware(Boundary)
    # Outermost: a foreign Host, an oversized head or body is refused before anything else runs; security headers,
    # and no response header longer than every client reads.
    app.add_middleware(Guard, limits=HttpLimits.from_settings(settings))
    if settings.cors_origins:
        exposed = ["Content-Disposition", "X-Dstp-Query-Id", VERSION_HEADER, "X-Dstp-Arrow-Schema", SCHEMA_OMITTED_HEADER,
                   "X-Dstp-Truncated", "X-Dstp-Truncated-Reason", "X-Dstp-Truncated-Rows"]
        app.add_middleware(CORSMiddleware, allow_origins=list(settings.cors_origins), allow_methods=["GET", "POST"],
                           allow_headers=["*"], expose_headers=exposed)
    app.mount("/static", StaticFiles(directory=STATIC_DIR), name="static")


    app.include_router(catalog_router(service, settings, view, html, current_principal))  # /, /datasets/…, /api
    app.include_router(query_router(service, settings, view, current_principal))  # /query, /usage.json
    app.include_router(login_router(settings, authenticator, sessions, html, current_principal))  # /login, /logout
    app.include_router(facade_router(service, settings, current_principal, view))  # /erddap, /stac, /docs
    app.include_router(feed_router(service, current_principal))  # /changes, /changes/stream
    app.include_router(zarr_router(service, current_principal))  # /zarr/<dataset>/… (Zarr v3)
    app.include_router(edr_router(service, current_principal))  # /edr (OGC API - EDR)
    app.include_router(map_router(service, current_principal, cache_bytes=settings.map_cache_bytes))  # /tiles, /wms, /datasets/{id}/map
    app.include_router(opendap_router(service, current_principal))  # /opendap
    return app


class HttpServer:
    """uvicorn serving an app on a background thread; ``endpoint`` is the "host:port" actually bound."""

    def __init__(self, app: FastAPI, sock: socket.socket, endpoint: str, tls: TlsMaterial | None = None,
                 limits: HttpLimits | None = None) -> None:
        self.endpoint = endpoint
        self._sock = sock
        ssl: dict[str, Any] = {"ssl_certfile": str(tls.cert_path), "ssl_keyfile": str(tls.key_path)} if tls else {}
        limits = limits or HttpLimits()
        # Request deadlines, the connection cap, answers to requests too long (dstp/http/limits.py): uvicorn has none.
        protocol, self.connections = guarded_protocol(limits)
        config = uvicorn.Config(app, log_config=None, access_log=False, lifespan="off", http=protocol,
                                loop="asyncio", ws="none", timeout_graceful_shutdown=1,
                                # a backstop for tasks only: the protocol keeps connections at the cap itself
                                limit_concurrency=2 * limits.max_connections,
                                # the request line and headers: a GET URL holds a query of max_sql_length characters
                                h11_max_incomplete_event_size=limits.max_head_bytes, **ssl)
        self._server = uvicorn.Server(config)
        self._thread = threading.Thread(target=self._server.run, kwargs={"sockets": [sock]},
                                        name=f"dstp-http-{endpoint}", daemon=True)

    def start(self, timeout: float = 10.0) -> None:
        """Start serving; return once the server accepts connections."""
        self._thread.start()
        deadline = time.monotonic() + timeout
        while not self._server.started:
            if not self._thread.is_alive() or time.monotonic() > deadline:
                self.stop()
                raise OSError(f"the HTTP server on {self.endpoint} did not start")
            time.sleep(0.01)

    def stop(self, timeout: float = 3.0) -> None:
        """Stop accepting, close connections (running streams get about a second), join the thread."""
        self._server.should_exit = True
        if self._thread.is_alive():
            self._thread.join(timeout)
        if self._thread.is_alive():
            self._server.force_exit = True
            self._thread.join(timeout)
        self._sock.close()

    def __repr__(self) -> str:
        return f"HttpServer({self.endpoint!r})"


def _bind(host: str, port: int) -> socket.socket:
    family, kind, proto, _, address = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM,
                                                         flags=socket.AI_PASSIVE)[0]
    sock = socket.socket(family, kind, proto)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(address)
    except OSError as exc:
        sock.close()
        raise OSError(f"cannot listen on {host}:{port} for HTTP (is another server using it?): {exc}") from exc
    return sock


def start_http_server(service: DstpService, settings: Settings, *, authenticator: Authenticator | None = None,
                      tls: TlsMaterial | None = None, clock: Callable[[], float] | None = None,
                      timer: Callable[[], float] = time.monotonic) -> HttpServer:
    """Return a started HTTP server for ``service`` on ``settings.host``:``settings.http_port`` (0 = any free port).

    With ``tls`` it speaks HTTPS with that certificate; ``authenticator`` checks credentials (default:
    the one ``settings`` describe); browser sessions expire by ``clock`` (wall time), connection
    deadlines by ``timer`` (monotonic).
    """
    sock = _bind(settings.host, settings.http_port)
    host, port = sock.getsockname()[:2]
    endpoint = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
    sessions = SessionStore(settings.session_ttl_s, clock or service.clock)
    app = create_app(service, settings, authenticator=authenticator, sessions=sessions)
    server = HttpServer(app, sock, endpoint, tls=tls, limits=HttpLimits.from_settings(settings, timer))
    server.start()
    log.info("dstp serving HTTP on %s://%s", "https" if tls else "http", endpoint)
    return server
