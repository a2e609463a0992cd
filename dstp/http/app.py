"""The HTTP adapter: the browser catalog and the HTTP API over :class:`DstpService`.

Thin by design, like :mod:`dstp.grpc_app`: each route converts its request,
calls the service (or a page model of :mod:`dstp.http`), and converts the
answer. Errors are translated in one place,
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

import asyncio
import functools
import logging
import socket
import threading
import time
from typing import Any, Awaitable, Callable, Literal, Sequence
from urllib.parse import parse_qs, urlencode, urlsplit

import anyio
import pyarrow as pa
import uvicorn
from fastapi import Depends, FastAPI, Query, Request
from fastapi.exceptions import RequestValidationError
from fastapi.middleware.cors import CORSMiddleware
from fastapi.responses import HTMLResponse, JSONResponse, RedirectResponse, Response, StreamingResponse
from fastapi.staticfiles import StaticFiles
from pydantic import BaseModel, Field
from starlette.exceptions import HTTPException as StarletteHTTPException

from dstp import __version__
from dstp.auth import ANONYMOUS, SESSION_COOKIE, Authenticator, Principal, SessionStore
from dstp.auth.tls import TlsMaterial
from dstp.errors import AuthenticationError, BadRequestError, DstpError
from dstp.service import DstpService
from dstp.settings import Settings
from dstp.http import STATIC_DIR
from dstp.http.builder import BuilderState
from dstp.http.facade_routes import facade_router
from dstp.http.feed_routes import feed_router
from dstp.http.edr_routes import edr_router
from dstp.http.zarr_routes import zarr_router
from dstp.http.map_routes import map_router
from dstp.http.opendap_routes import opendap_router
from dstp.http.error_responses import (
    Boundary,
    error_response,
    framework_error,
    incident,
    openapi_errors,
    validation_error,
)
from dstp.http.formats import (
    FORMATS,
    SCHEMA_OMITTED_HEADER,
    assemble,
    check_gridded,
    encoder_for,
    result_filename,
    schema_header,
)
from dstp.http.identity import Identify, header, session_id
from dstp.catalog.registry import CatalogPage
from dstp.http.paging import DEFAULT_PAGE, VERSION_HEADER, link_header, summaries, version_header
from dstp.service.feed import MAX_PAGE
from dstp.http.pages import CatalogView, PageRenderer, builder_page, catalog_page, dataset_page
from dstp.http.quicklook import map_selection, render_map, render_series, series_selection
from dstp.http.search import CatalogFilter
from dstp.http.shapes import summary_json
from dstp.http.snippets import Endpoints
from dstp.transport.codec import reachable_endpoint
from dstp.http.limits import MAX_RESPONSE_HEADER_BYTES, Guard, HttpLimits, guarded_protocol
from dstp.http.streaming import ResultStream, StreamAborted, limited, truncation_forecast

__all__ = ["HttpServer", "create_app", "current_principal", "error_response", "start_http_server"]

log = logging.getLogger("dstp.http")

CHUNK_BYTES = 2**20
#: Threads HTTP requests may wait for an admission slot on (apart from anyio's default 40 that stream results).
ADMISSION_THREADS = 80

Format = Literal["csv", "json", "ndjson", "arrow", "parquet", "nc"]


SQL_TEXT = "The query, e.g. select temperature, time from ccm3 where humidity > 50"
FORMAT_TEXT = "csv | json (array of records) | ndjson | arrow (IPC stream) | parquet | nc (netCDF-4, gridded results)"
LIMIT_TEXT = "Send at most this many rows (previews); the query stops reading once they are sent."


QUERY_ERRORS = openapi_errors(400, 404, 409, 429, 499, 500, 504)
PAGE_ERRORS = openapi_errors(400, 404, 500)


class QueryBody(BaseModel):
    """The body of ``POST /query``: the same fields as the parameters of ``GET /query``."""

    sql: str = Field(description=SQL_TEXT)
    format: Format = Field("csv", description=FORMAT_TEXT)
    limit: int | None = Field(None, ge=0, description=LIMIT_TEXT)


class _OwnedStream(StreamingResponse):
    """A streaming response that runs ``on_close`` however it ends (done, client gone, error).

    ``on_stall(abort)``, when given, registers ``abort`` (callable from any thread) to be run if the
    reader stalls (admission reclaims the slot): the response is then dropped mid-body. A body that
    ends before its last chunk is logged (INFO, ``dstp.http``) with why: the server was told the client
    disconnected, the reader stalled, or an error.
    """

    def __init__(self, content: Any, on_close: Callable[[], Awaitable[None]],
                 on_stall: Callable[[Callable[[], None]], None] | None = None, label: str = "",
                 **kwargs: Any) -> None:
        super().__init__(content, **kwargs)
        self._on_close = on_close
        self._on_stall = on_stall
        self._label = label
        self._chunks = 0
        self._complete = False

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        why = ""

        async def watched_receive() -> Any:
            nonlocal why
            message = await receive()
            if message["type"] == "http.disconnect" and not why:
                why = f"the server was told the client disconnected (http.disconnect after {self._chunks} chunks)"
            return message

        async def counted_send(message: Any) -> None:
            if message["type"] == "http.response.body":
                self._chunks += 1
                self._complete = not message.get("more_body", False)
            await send(message)

        try:
            with anyio.CancelScope() as body:
                if self._on_stall is not None:
                    loop = asyncio.get_running_loop()

                    def abort() -> None:
                        loop.call_soon_threadsafe(body.cancel)

                    self._on_stall(abort)
                await super().__call__(scope, watched_receive, counted_send)
            if body.cancelled_caught:
                why = "the reader stalled"
                raise StreamAborted("the reader stalled")  # the connection is dropped: an incomplete body
        except BaseException as exc:
            why = why or f"{type(exc).__name__}: {exc}"
            raise
        finally:
            if not self._complete:
                log.info("the response %s ended after %d chunks, before its last: %s", self._label or "(a file)",
                         self._chunks, why or "unknown")
            await self._on_close()


async def _until_done_or_gone(request: Request, cancel: threading.Event, work: Callable[[], Awaitable[Any]]) -> Any:
    """Return ``await work()``, setting ``cancel`` if the client disconnects meanwhile."""
    result: Any = None

    async def watch() -> None:
        while (await request.receive())["type"] != "http.disconnect":
            pass
        cancel.set()

    try:
        async with anyio.create_task_group() as group:
            group.start_soon(watch)
            try:
                result = await work()
            finally:
                group.cancel_scope.cancel()
    except BaseExceptionGroup as failed:
        # The task group wraps the work's own error; the client must get that error's status, not a 500.
        if len(failed.exceptions) == 1 and isinstance(failed.exceptions[0], Exception):
            inner = failed.exceptions[0]
            raise inner from inner.__cause__  # its own cause kept for the incident log; the group is none of it
        raise
    return result


async def _file_chunks(f: Any) -> Any:
    while chunk := await anyio.to_thread.run_sync(f.read, CHUNK_BYTES):
        yield chunk


def current_principal(request: Request) -> Principal:
    """Return who the request acts for (set by the Identify middleware; ANONYMOUS without it)."""
    principal = getattr(request.state, "principal", ANONYMOUS)
    return principal if isinstance(principal, Principal) else ANONYMOUS


#: The principal of a route's request, as a FastAPI dependency.
PRINCIPAL = Depends(current_principal)

#: Largest login form body read.
MAX_LOGIN_BODY = 16_384


#: Longest ``next`` a login redirects to (it becomes a Location header, bounded like every response header).
MAX_NEXT_LENGTH = 2_048


def _safe_next(target: str) -> str:
    """Return ``target`` if it is a short path on this server (no open redirect), else "/"."""
    parts = urlsplit(target)
    if len(target) > MAX_NEXT_LENGTH or not target.startswith("/") or target.startswith("//") or parts.scheme \
            or parts.netloc or "\\" in target:
        return "/"
    return target


def _endpoints(request: Request, service: DstpService, settings: Settings, principal: Principal = ANONYMOUS,
               needs_token: bool = False) -> Endpoints:
    """Return where clients reach this server, as seen by the browser that asked."""
    host = request.url.hostname or settings.host
    grpc = service.channels.get("grpc")
    target = grpc.endpoint if grpc is not None and grpc.endpoint else ""
    if not target:  # the gRPC server has not told the service where it listens
        target = f"{host}:{settings.port}" if settings.port else f"{host}:GRPC_PORT"
    else:
        target = reachable_endpoint(target, host)
    return Endpoints(str(request.base_url).rstrip("/"), target, tls=settings.tls,
                     token=principal.authenticated or needs_token)


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
            response = login_page(request, ANONYMOUS, err.message, status=401)
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

    def page(template: str, model: dict[str, Any], principal: Principal, status: int = 200,
             **extra: Any) -> HTMLResponse:
        viewer = principal.describe() if principal.authenticated else ""
        return HTMLResponse(renderer.render(template, model, viewer=viewer, **extra), status_code=status)

    def login_page(request: Request, principal: Principal, message: str = "", status: int = 200) -> HTMLResponse:
        target = request.query_params.get("next") or (request.url.path if request.url.path != "/login" else "/")
        secure = request.url.scheme == "https" or request.url.hostname in ("127.0.0.1", "localhost", "::1")
        model = {"next": _safe_next(target), "message": message, "secure": secure,
                 "anonymous": authenticator.allow_anonymous}
        return page("login.html", model, principal, status)

    # -- catalog ------------------------------------------------------------------------

    Q = Query("", description="Full-text search over ids, titles, summaries, keywords, attributes, units, "
              "standard names; every word must match.")
    ATTR = Query([], description="Attribute name or CF standard name the dataset must have (repeatable).")
    START = Query("", description="Keep datasets whose time span overlaps [start, end]; ISO 8601 prefix.")
    END = Query("", description="End of the time span (ISO 8601 prefix; 1990 means all of 1990).")
    BBOX = Query("", description="lat0,lat1,lon0,lon1: keep datasets whose region overlaps this box.")
    PAGE_LIMIT = Query(None, ge=1, le=MAX_PAGE, description="Datasets per page (at most 1,000).")
    HOME_LIMIT = Query(DEFAULT_PAGE, ge=1, le=MAX_PAGE, description="Datasets per page (at most 1,000).")
    PAGE_OFFSET = Query(0, ge=0, description="Datasets to skip (the Link header's next page names it).")

    @app.get("/", response_class=HTMLResponse, summary="Catalog page", responses=PAGE_ERRORS)
    @app.get("/datasets", response_class=HTMLResponse, include_in_schema=False)
    def catalog_html(q: str = Q, attribute: list[str] = ATTR, start: str = START, end: str = END,
                     bbox: str = BBOX, limit: int = HOME_LIMIT, offset: int = PAGE_OFFSET,
                     principal: Principal = PRINCIPAL) -> HTMLResponse:
        return page("catalog.html", catalog_page(view, CatalogFilter.parse(q, attribute, start, end, bbox), principal,
                                                 offset, limit), principal)

    @app.get("/index.json", summary="Catalog page as JSON: filter, one page of hits (best first), facets, paging",
             responses=PAGE_ERRORS)
    def catalog_json(q: str = Q, attribute: list[str] = ATTR, start: str = START, end: str = END,
                     bbox: str = BBOX, limit: int = HOME_LIMIT, offset: int = PAGE_OFFSET,
                     principal: Principal = PRINCIPAL) -> dict[str, Any]:
        return catalog_page(view, CatalogFilter.parse(q, attribute, start, end, bbox), principal, offset, limit)

    @app.get("/datasets.json", summary="The published datasets: a JSON array of summaries (same filters as /)",
             description="With `limit` (and `offset`) one page, by id (best first when filtered): the header "
             "X-Total-Count says how many match, and Link names the next and previous pages (RFC 8288). "
             "Without either, every dataset.", responses=PAGE_ERRORS)
    def datasets_json(request: Request, q: str = Q, attribute: list[str] = ATTR, start: str = START,
                      end: str = END, bbox: str = BBOX, limit: int | None = PAGE_LIMIT, offset: int = PAGE_OFFSET,
                      principal: Principal = PRINCIPAL) -> Response:
        f = CatalogFilter.parse(q, attribute, start, end, bbox)
        if limit is None and not offset:  # the whole listing, as before paging
            listed = [summary_json(s) for s in service.datasets(principal)] if not f.active else \
                [summary_json(h.summary) for h in view.index(principal).search(f)]
            return JSONResponse(listed, headers={"X-Total-Count": str(len(listed))})
        size = DEFAULT_PAGE if limit is None else limit
        if f.active:  # the full search (attributes, units, standard names…), one slice of it
            hits = view.index(principal).search(f)
            page = CatalogPage(len(hits), offset, tuple(hits[offset:offset + size]), service.catalog.version)
            body = [summary_json(h.summary) for h in page.datasets]  # type: ignore[union-attr]
        else:  # the catalog's own page, by id, from memory
            page = service.page(offset, size, f.q, principal)
            body = [summary_json(s) for s in summaries(page)]
        headers = {"X-Total-Count": str(page.total)}
        links = link_header(request.url.path, request.query_params, page, size)
        if links:
            headers["Link"] = links
        return JSONResponse(body, headers=headers)

    # -- one dataset --------------------------------------------------------------------

    @app.get("/datasets/{dataset_id}.json", summary="Full description of one dataset", responses=PAGE_ERRORS)
    def dataset_json(dataset_id: str, principal: Principal = PRINCIPAL) -> dict[str, Any]:
        return dataset_page(view, dataset_id, principal)

    @app.get("/datasets/{dataset_id}", response_class=HTMLResponse, summary="Dataset page", responses=PAGE_ERRORS)
    def dataset_html(dataset_id: str, principal: Principal = PRINCIPAL) -> HTMLResponse:
        return page("dataset.html", dataset_page(view, dataset_id, principal), principal)

    def png(body: bytes, fixed: tuple[tuple[str, str], ...], principal: Principal) -> Response:
        # A quicklook of a dataset only some may read must not sit in a shared cache.
        cache = "public, max-age=300" if not principal.authenticated else "private, max-age=300"
        headers = {"Cache-Control": cache, "X-Dstp-Fixed": urlencode(fixed), "Vary": "Authorization, Cookie"}
        return Response(body, media_type="image/png", headers=headers)

    ATTRIBUTE = Query(..., description="The attribute to draw.")
    FIXED = ("Other dimensions are chosen by name (time=1990-03-16, lev=850, depth=5, or the coordinate's "
             "name): the nearest grid value is used, a dimension not given takes its first value.")

    @app.get("/datasets/{dataset_id}/quicklook.png", response_class=Response, summary="Map of one attribute",
             description="A 2-D latitude/longitude slice drawn server-side. " + FIXED, responses=PAGE_ERRORS)
    def quicklook(dataset_id: str, request: Request, attribute: str = ATTRIBUTE,
                  principal: Principal = PRINCIPAL) -> Response:
        d = view.details(dataset_id, principal)
        s = map_selection(d, attribute, request.query_params, lambda dim: view.values(dataset_id, dim, principal))
        return png(render_map(view.table(s.sql, principal), dataset_id, s), s.fixed, principal)

    @app.get("/datasets/{dataset_id}/timeseries.png", response_class=Response, summary="Time series at a point",
             description="The attribute along time at the grid point nearest lat=, lon=. " + FIXED,
             responses=PAGE_ERRORS)
    def timeseries(dataset_id: str, request: Request, attribute: str = ATTRIBUTE,
                   principal: Principal = PRINCIPAL) -> Response:
        d = view.details(dataset_id, principal)
        s = series_selection(d, attribute, request.query_params, lambda dim: view.values(dataset_id, dim, principal))
        return png(render_series(view.table(s.sql, principal), dataset_id, s), s.fixed, principal)

    # -- query builder ------------------------------------------------------------------

    SELECT = Query([], description="Output column (repeatable); none means select *.")
    WHERE = Query([], description="Condition column:operator:value (repeatable), e.g. humidity:>:50.")
    LIMIT = Query("", description="Row limit written into the SQL.")
    SQL = Query("", description="Verbatim SQL; overrides select/where/limit/group/agg.")
    GROUP = Query([], description="Group key (repeatable): a column, or year(t), month(t), season(t), day(t) of a "
                  "time column.")
    AGG = Query([], description="Aggregate function:column (repeatable), e.g. avg:temperature, count:*.")

    def builder(request: Request, dataset_id: str, select: list[str], where: list[str], limit: str,
                sql: str, principal: Principal, group: Sequence[str] = (), agg: Sequence[str] = ()) -> dict[str, Any]:
        state = BuilderState.parse(dataset_id, select, where, limit, group, agg)
        ends = _endpoints(request, service, settings, principal, not authenticator.allow_anonymous)
        return builder_page(view, state, sql or None, ends, principal)

    @app.get("/datasets/{dataset_id}/query.json", summary="Query builder state: SQL, snippets, download links",
             responses=PAGE_ERRORS)
    def builder_json(request: Request, dataset_id: str, select: list[str] = SELECT, where: list[str] = WHERE,
                     limit: str = LIMIT, sql: str = SQL, group: list[str] = GROUP, agg: list[str] = AGG,
                     principal: Principal = PRINCIPAL) -> dict[str, Any]:
        return builder(request, dataset_id, select, where, limit, sql, principal, group, agg)

    @app.get("/datasets/{dataset_id}/query", response_class=HTMLResponse, summary="Query builder page",
             responses=PAGE_ERRORS)
    def builder_html(request: Request, dataset_id: str, select: list[str] = SELECT, where: list[str] = WHERE,
                     limit: str = LIMIT, sql: str = SQL, group: list[str] = GROUP, agg: list[str] = AGG,
                     principal: Principal = PRINCIPAL) -> HTMLResponse:
        return page("query.html", builder(request, dataset_id, select, where, limit, sql, principal, group, agg),
                    principal)

    @app.get("/query-builder", include_in_schema=False)
    def builder_redirect(dataset: str, principal: Principal = PRINCIPAL) -> RedirectResponse:
        view.details(dataset, principal)
        return RedirectResponse(f"/datasets/{dataset}/query")

    # -- the query API ------------------------------------------------------------------

    def admission_threads() -> anyio.CapacityLimiter:
        """Return the threads requests wait for a slot on (made in the server's event loop, on first use)."""
        if getattr(app.state, "admission_threads", None) is None:
            app.state.admission_threads = anyio.CapacityLimiter(ADMISSION_THREADS)
        limiter: anyio.CapacityLimiter = app.state.admission_threads
        return limiter

    async def run_query(request: Request, sql: str, fmt: str, limit: int | None) -> Response:
        cancel = threading.Event()
        principal = current_principal(request)
        # Admission may wait for a slot: on threads of its own, so waiting requests never starve the
        # threads that running results stream on.
        execution = await anyio.to_thread.run_sync(
            functools.partial(service.run, sql, cancel, principal, channel="http"), limiter=admission_threads())
        kind = FORMATS[fmt]
        # The typed schema (units, calendars) for formats that cannot carry it, e.g. CSV: within the size every
        # client reads a header at, so without the SQL and plan (the Arrow body has them), or left out, saying so.
        schema_name, schema_value = schema_header(execution.schema, MAX_RESPONSE_HEADER_BYTES)
        headers = {
            "Content-Disposition": f'attachment; filename="{result_filename(execution.schema, sql, kind.extension)}"',
            "X-Dstp-Query-Id": execution.query_id,
            schema_name: schema_value,
            # The version of each dataset the result was computed on, as in the schema's dstp:version.
            VERSION_HEADER: version_header(execution.schema),
        }
        if kind.streamed:
            # Whether max_result_rows/max_result_bytes can cut this result, decided before the status line;
            # "unknown" leaves it to the body's truncation trailer (docs/web.md).
            forecast, why = truncation_forecast(execution, limit)
            headers["X-Dstp-Truncated"] = forecast
            if why:
                headers["X-Dstp-Truncated-Reason"] = why
            stream = ResultStream(execution, encoder_for(fmt, execution.schema), limit, unexpected=incident)
            try:
                await _until_done_or_gone(request, cancel, stream.prime)
            except BaseException:
                await stream.aclose()
                raise
            return _OwnedStream(stream, stream.aclose, on_stall=lambda abort: execution.slot.on_stall(
                lambda error: abort()), label=f"of query {execution.query_id}", media_type=kind.media_type,
                headers=headers)
        try:
            units: dict[str, str] = {}
            details = None
            if fmt == "nc":
                check_gridded(execution.schema)
                details = view.details(execution.schema.metadata[b"dstp:dataset"].decode(), principal)
                units = {c.name: c.units for c in details.coordinates if " since " in c.units}
            # netCDF is assembled in memory (several times the result's size): bounded by nc_max_result_bytes.
            batches = limited(execution, limit, max_bytes=settings.nc_max_result_bytes if fmt == "nc" else None)
            f = await _until_done_or_gone(
                request, cancel, lambda: anyio.to_thread.run_sync(assemble, batches, execution.schema, fmt, units,
                                                                  batches.truncated_reason, details))
        finally:
            execution.close()
        # Assembled before sending: whether the server cut it is known (the file says so too).
        reason = batches.truncated_reason()
        headers["X-Dstp-Truncated"] = "false" if reason is None else "true"
        if reason is not None:
            headers["X-Dstp-Truncated-Reason"] = reason
            headers["X-Dstp-Truncated-Rows"] = str(batches.rows)
        size = await anyio.to_thread.run_sync(lambda: f.seek(0, 2))
        f.seek(0)

        async def close_file() -> None:
            f.close()

        headers["Content-Length"] = str(size)
        return _OwnedStream(_file_chunks(f), close_file, label=f"of query {execution.query_id}",
                            media_type=kind.media_type, headers=headers)

    QUERY_DOC = dict(
        response_class=StreamingResponse,
        description="CSV, JSON, NDJSON and Arrow stream as the result is produced; Parquet and netCDF are "
        "assembled first. A failure after the first bytes cannot change the status: the body then ends with "
        "the format's error trailer and the connection is dropped (see docs/web.md). A result cut at the "
        "server's max_result_rows/max_result_bytes is flagged: header X-Dstp-Truncated (true, false, or unknown "
        "until the end) and, in streamed formats, a truncation trailer as the body's last line (Arrow: a last "
        "empty batch with dstp:truncated metadata, and no end-of-stream marker).",
        responses=QUERY_ERRORS | {200: {"description": "The result, as an attachment named <dataset>-<hash>.<ext>.",
                                        "content": {f.media_type: {} for f in FORMATS.values()}}},
    )

    @app.get("/query", summary="Run a query and download its result", **QUERY_DOC)  # type: ignore[arg-type]
    async def query(
        request: Request,
        sql: str = Query(..., description=SQL_TEXT),
        fmt: Format = Query("csv", alias="format", description=FORMAT_TEXT),
        limit: int | None = Query(None, ge=0, description=LIMIT_TEXT),
    ) -> Response:
        return await run_query(request, sql, fmt, limit)

    @app.post("/query", summary="Run a query given in a JSON body (for SQL too long for a URL)",
              **QUERY_DOC)  # type: ignore[arg-type]
    async def query_post(request: Request, body: QueryBody) -> Response:
        return await run_query(request, body.sql, body.format, body.limit)

    @app.get("/query/estimate", summary="How big a query's result will be, before it runs",
             description="Validates and plans the query (nothing is read) and answers its size from the plan: "
             "`records` and `bytes` (Arrow bytes), `exact` (true: every grid point scanned is a record; false: "
             "the most records there can be, the plan's row bound), `scan_rows` (grid points read), `text` for a "
             "person, `max_result_rows` and `over_max_result_rows` (true, false, or null when only running "
             "tells). A query that does not plan gets the same error as GET /query.",
             responses=QUERY_ERRORS)
    async def query_estimate(request: Request, sql: str = Query(..., description=SQL_TEXT)) -> dict[str, Any]:
        principal = current_principal(request)
        return await anyio.to_thread.run_sync(view.estimate, sql, principal, limiter=admission_threads())

    # -- API description ----------------------------------------------------------------

    @app.get("/usage.json", summary="What you run now and fetched today, against your quotas",
             description="`queries`: slots you hold now, requests of yours waiting for one, and how many you may "
             "hold; `bytes_today`: bytes fetched since 00:00 UTC and your daily quota (null: none).")
    def usage_json(principal: Principal = PRINCIPAL) -> dict[str, Any]:
        return service.usage(principal).to_dict()

    @app.get("/server.json", summary="Where this server listens: HTTP, gRPC and data channels, and its version")
    def server_json(request: Request) -> dict[str, Any]:
        ends = _endpoints(request, service, settings)
        host = request.url.hostname or settings.host

        def seen(kind: str) -> str:
            info = service.channels.get(kind)
            if info is None or not info.endpoint:
                return ""
            return reachable_endpoint(info.endpoint, host)

        return {"version": __version__, "http": ends.http_base, "grpc": ends.grpc_target, "data": seen("striped"),
                "udt": seen("udt"), "channels": [k for k in ("grpc", "striped", "udt") if k in service.channels]}

    @app.get("/api.json", summary="This API's OpenAPI description (same as /openapi.json)")
    def api_json() -> dict[str, Any]:
        return app.openapi()

    @app.get("/api", response_class=HTMLResponse, summary="This API's description as a page (works offline)")
    def api_html(principal: Principal = PRINCIPAL) -> HTMLResponse:
        return page("api.html", app.openapi(), principal)

    # -- logging in (browsers; scripts send Authorization: Bearer) ----------------------

    def same_origin(request: Request) -> None:
        """Refuse a form posted from another site (login CSRF): its Origin must be this server."""
        origin = header(request.scope, b"origin")
        if origin and origin != "null" and urlsplit(origin).netloc != request.headers.get("host", ""):
            raise BadRequestError("this form may only be sent from this server's own pages")

    @app.get("/login", response_class=HTMLResponse, summary="Log-in page (a token, once, sets a session cookie)")
    def login_form(request: Request, principal: Principal = PRINCIPAL) -> HTMLResponse:
        return login_page(request, principal)

    @app.post("/login", response_class=HTMLResponse, include_in_schema=False)
    async def login(request: Request) -> Response:
        same_origin(request)
        if int(request.headers.get("content-length") or 0) > MAX_LOGIN_BODY:
            raise BadRequestError("the login form is too large")
        body = await request.body()
        form = parse_qs(body[:MAX_LOGIN_BODY].decode("utf-8", "replace"))
        token = (form.get("token") or [""])[0].strip()
        target = _safe_next((form.get("next") or ["/"])[0])
        try:
            principal = await anyio.to_thread.run_sync(authenticator.verify, token)
        except AuthenticationError as exc:
            return login_page(request, ANONYMOUS, exc.message if token else "paste your token", status=401)
        sid = sessions.create(token)
        log.info("login: %s", principal.describe())
        response = RedirectResponse(target, status_code=303)
        response.set_cookie(SESSION_COOKIE, sid, max_age=int(settings.session_ttl_s), path="/", secure=True,
                            httponly=True, samesite="lax")
        return response

    @app.post("/logout", include_in_schema=False)
    def logout(request: Request) -> Response:
        same_origin(request)
        sid = session_id(request.scope)
        if sid:
            sessions.drop(sid)
        response = RedirectResponse("/", status_code=303)
        response.delete_cookie(SESSION_COOKIE, path="/", secure=True, httponly=True, samesite="lax")
        return response

    app.include_router(facade_router(service, settings, current_principal))  # /erddap, /stac, /docs
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
