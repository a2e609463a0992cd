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

    create_app(service, settings)          -> the ASGI app (FastAPI)
    start_http_server(service, settings)   -> HttpServer (uvicorn on a thread; .endpoint, .stop())
"""

from __future__ import annotations

import base64
import logging
import socket
import threading
import time
from typing import Any, Awaitable, Callable, Literal
from urllib.parse import urlencode

import anyio
import pyarrow as pa
import uvicorn
from fastapi import FastAPI, Query, Request
from fastapi.exceptions import RequestValidationError
from fastapi.middleware.cors import CORSMiddleware
from fastapi.responses import HTMLResponse, RedirectResponse, Response, StreamingResponse
from fastapi.staticfiles import StaticFiles
from pydantic import BaseModel, Field
from starlette.exceptions import HTTPException as StarletteHTTPException

from dstp import __version__
from dstp.errors import DstpError
from dstp.service import DstpService
from dstp.settings import Settings
from dstp.http import STATIC_DIR
from dstp.http.builder import BuilderState
from dstp.http.error_responses import (
    Boundary,
    error_response,
    framework_error,
    incident,
    openapi_errors,
    validation_error,
)
from dstp.http.formats import FORMATS, assemble, check_gridded, encoder_for, result_filename
from dstp.http.pages import CatalogView, PageRenderer, builder_page, catalog_page, dataset_page
from dstp.http.quicklook import map_selection, render_map, render_series, series_selection
from dstp.http.search import CatalogFilter
from dstp.http.shapes import summary_json
from dstp.http.snippets import Endpoints
from dstp.transport.codec import reachable_endpoint
from dstp.http.streaming import ResultStream, limited, truncation_forecast

__all__ = ["HttpServer", "create_app", "error_response", "start_http_server"]

log = logging.getLogger("dstp.http")

CHUNK_BYTES = 2**20

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
    """A streaming response that runs ``on_close`` however it ends (done, client gone, error)."""

    def __init__(self, content: Any, on_close: Callable[[], Awaitable[None]], **kwargs: Any) -> None:
        super().__init__(content, **kwargs)
        self._on_close = on_close

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        try:
            await super().__call__(scope, receive, send)
        finally:
            await self._on_close()


async def _until_done_or_gone(request: Request, cancel: threading.Event, work: Callable[[], Awaitable[Any]]) -> Any:
    """Return ``await work()``, setting ``cancel`` if the client disconnects meanwhile."""
    result: Any = None

    async def watch() -> None:
        while (await request.receive())["type"] != "http.disconnect":
            pass
        cancel.set()

    async with anyio.create_task_group() as group:
        group.start_soon(watch)
        try:
            result = await work()
        finally:
            group.cancel_scope.cancel()
    return result


async def _file_chunks(f: Any) -> Any:
    while chunk := await anyio.to_thread.run_sync(f.read, CHUNK_BYTES):
        yield chunk


def _endpoints(request: Request, service: DstpService, settings: Settings) -> Endpoints:
    """Return where clients reach this server, as seen by the browser that asked."""
    host = request.url.hostname or settings.host
    grpc = service.channels.get("grpc")
    target = grpc.endpoint if grpc is not None and grpc.endpoint else ""
    if not target:  # the gRPC server has not told the service where it listens
        target = f"{host}:{settings.port}" if settings.port else f"{host}:GRPC_PORT"
    else:
        target = reachable_endpoint(target, host)
    return Endpoints(str(request.base_url).rstrip("/"), target)


def create_app(service: DstpService, settings: Settings) -> FastAPI:
    """Return the ASGI app serving the catalog pages and the HTTP API of ``service``."""
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
    app.add_middleware(Boundary)
    if settings.cors_origins:
        exposed = ["Content-Disposition", "X-Dstp-Query-Id", "X-Dstp-Arrow-Schema", "X-Dstp-Truncated",
                   "X-Dstp-Truncated-Reason", "X-Dstp-Truncated-Rows"]
        app.add_middleware(CORSMiddleware, allow_origins=list(settings.cors_origins), allow_methods=["GET", "POST"],
                           allow_headers=["*"], expose_headers=exposed)
    app.mount("/static", StaticFiles(directory=STATIC_DIR), name="static")

    def page(template: str, model: dict[str, Any], **extra: Any) -> HTMLResponse:
        return HTMLResponse(renderer.render(template, model, **extra))

    # -- catalog ------------------------------------------------------------------------

    Q = Query("", description="Full-text search over ids, titles, summaries, keywords, attributes, units, "
              "standard names; every word must match.")
    ATTR = Query([], description="Attribute name or CF standard name the dataset must have (repeatable).")
    START = Query("", description="Keep datasets whose time span overlaps [start, end]; ISO 8601 prefix.")
    END = Query("", description="End of the time span (ISO 8601 prefix; 1990 means all of 1990).")
    BBOX = Query("", description="lat0,lat1,lon0,lon1: keep datasets whose region overlaps this box.")

    @app.get("/", response_class=HTMLResponse, summary="Catalog page", responses=PAGE_ERRORS)
    @app.get("/datasets", response_class=HTMLResponse, include_in_schema=False)
    def catalog_html(q: str = Q, attribute: list[str] = ATTR, start: str = START, end: str = END,
                     bbox: str = BBOX) -> HTMLResponse:
        return page("catalog.html", catalog_page(view, CatalogFilter.parse(q, attribute, start, end, bbox)))

    @app.get("/index.json", summary="Catalog page as JSON: filter, hits (best first) and facets",
             responses=PAGE_ERRORS)
    def catalog_json(q: str = Q, attribute: list[str] = ATTR, start: str = START, end: str = END,
                     bbox: str = BBOX) -> dict[str, Any]:
        return catalog_page(view, CatalogFilter.parse(q, attribute, start, end, bbox))

    @app.get("/datasets.json", summary="The published datasets: a JSON array of summaries (same filters as /)",
             responses=PAGE_ERRORS)
    def datasets_json(q: str = Q, attribute: list[str] = ATTR, start: str = START, end: str = END,
                      bbox: str = BBOX) -> list[dict[str, Any]]:
        f = CatalogFilter.parse(q, attribute, start, end, bbox)
        if not f.active:
            return [summary_json(s) for s in service.datasets()]
        return [summary_json(h.summary) for h in view.index().search(f)]

    # -- one dataset --------------------------------------------------------------------

    @app.get("/datasets/{dataset_id}.json", summary="Full description of one dataset", responses=PAGE_ERRORS)
    def dataset_json(dataset_id: str) -> dict[str, Any]:
        return dataset_page(view, dataset_id)

    @app.get("/datasets/{dataset_id}", response_class=HTMLResponse, summary="Dataset page", responses=PAGE_ERRORS)
    def dataset_html(dataset_id: str) -> HTMLResponse:
        return page("dataset.html", dataset_page(view, dataset_id))

    def png(body: bytes, fixed: tuple[tuple[str, str], ...]) -> Response:
        headers = {"Cache-Control": "public, max-age=300", "X-Dstp-Fixed": urlencode(fixed)}
        return Response(body, media_type="image/png", headers=headers)

    ATTRIBUTE = Query(..., description="The attribute to draw.")
    FIXED = ("Other dimensions are chosen by name (time=1990-03-16, lev=850, depth=5, or the coordinate's "
             "name): the nearest grid value is used, a dimension not given takes its first value.")

    @app.get("/datasets/{dataset_id}/quicklook.png", response_class=Response, summary="Map of one attribute",
             description="A 2-D latitude/longitude slice drawn server-side. " + FIXED, responses=PAGE_ERRORS)
    def quicklook(dataset_id: str, request: Request, attribute: str = ATTRIBUTE) -> Response:
        d = view.details(dataset_id)
        s = map_selection(d, attribute, request.query_params, lambda dim: view.values(dataset_id, dim))
        return png(render_map(view.table(s.sql), dataset_id, s), s.fixed)

    @app.get("/datasets/{dataset_id}/timeseries.png", response_class=Response, summary="Time series at a point",
             description="The attribute along time at the grid point nearest lat=, lon=. " + FIXED,
             responses=PAGE_ERRORS)
    def timeseries(dataset_id: str, request: Request, attribute: str = ATTRIBUTE) -> Response:
        d = view.details(dataset_id)
        s = series_selection(d, attribute, request.query_params, lambda dim: view.values(dataset_id, dim))
        return png(render_series(view.table(s.sql), dataset_id, s), s.fixed)

    # -- query builder ------------------------------------------------------------------

    SELECT = Query([], description="Output column (repeatable); none means select *.")
    WHERE = Query([], description="Condition column:operator:value (repeatable), e.g. humidity:>:50.")
    LIMIT = Query("", description="Row limit written into the SQL.")
    SQL = Query("", description="Verbatim SQL; overrides select/where/limit.")

    def builder(request: Request, dataset_id: str, select: list[str], where: list[str], limit: str,
                sql: str) -> dict[str, Any]:
        state = BuilderState.parse(dataset_id, select, where, limit)
        return builder_page(view, state, sql or None, _endpoints(request, service, settings))

    @app.get("/datasets/{dataset_id}/query.json", summary="Query builder state: SQL, snippets, download links",
             responses=PAGE_ERRORS)
    def builder_json(request: Request, dataset_id: str, select: list[str] = SELECT, where: list[str] = WHERE,
                     limit: str = LIMIT, sql: str = SQL) -> dict[str, Any]:
        return builder(request, dataset_id, select, where, limit, sql)

    @app.get("/datasets/{dataset_id}/query", response_class=HTMLResponse, summary="Query builder page",
             responses=PAGE_ERRORS)
    def builder_html(request: Request, dataset_id: str, select: list[str] = SELECT, where: list[str] = WHERE,
                     limit: str = LIMIT, sql: str = SQL) -> HTMLResponse:
        return page("query.html", builder(request, dataset_id, select, where, limit, sql))

    @app.get("/query-builder", include_in_schema=False)
    def builder_redirect(dataset: str) -> RedirectResponse:
        view.details(dataset)
        return RedirectResponse(f"/datasets/{dataset}/query")

    # -- the query API ------------------------------------------------------------------

    async def run_query(request: Request, sql: str, fmt: str, limit: int | None) -> Response:
        cancel = threading.Event()
        execution = await anyio.to_thread.run_sync(service.run, sql, cancel)
        kind = FORMATS[fmt]
        headers = {
            "Content-Disposition": f'attachment; filename="{result_filename(execution.schema, sql, kind.extension)}"',
            "X-Dstp-Query-Id": execution.query_id,
            # The typed schema (units, calendars) for formats that cannot carry it, e.g. CSV.
            "X-Dstp-Arrow-Schema": base64.b64encode(execution.schema.serialize().to_pybytes()).decode(),
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
            return _OwnedStream(stream, stream.aclose, media_type=kind.media_type, headers=headers)
        try:
            units: dict[str, str] = {}
            if fmt == "nc":
                check_gridded(execution.schema)
                details = view.details(execution.schema.metadata[b"dstp:dataset"].decode())
                units = {c.name: c.units for c in details.coordinates if " since " in c.units}
            batches = limited(execution, limit)
            f = await _until_done_or_gone(
                request, cancel, lambda: anyio.to_thread.run_sync(assemble, batches, execution.schema, fmt, units,
                                                                  batches.truncated_reason))
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
        return _OwnedStream(_file_chunks(f), close_file, media_type=kind.media_type, headers=headers)

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

    # -- API description ----------------------------------------------------------------

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
    def api_html() -> HTMLResponse:
        return page("api.html", app.openapi())

    return app


class HttpServer:
    """uvicorn serving an app on a background thread; ``endpoint`` is the "host:port" actually bound."""

    def __init__(self, app: FastAPI, sock: socket.socket, endpoint: str, max_request_line: int = 16384) -> None:
        self.endpoint = endpoint
        self._sock = sock
        config = uvicorn.Config(app, log_config=None, access_log=False, lifespan="off", http="h11",
                                loop="asyncio", ws="none", timeout_graceful_shutdown=1,
                                h11_max_incomplete_event_size=max_request_line)
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


def start_http_server(service: DstpService, settings: Settings) -> HttpServer:
    """Return a started HTTP server for ``service`` on ``settings.host``:``settings.http_port`` (0 = any free port)."""
    sock = _bind(settings.host, settings.http_port)
    host, port = sock.getsockname()[:2]
    endpoint = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
    # A query of max_sql_length characters must fit in a URL, percent-encoded.
    server = HttpServer(create_app(service, settings), sock, endpoint, 3 * settings.max_sql_length + 16384)
    server.start()
    log.info("dstp serving HTTP on http://%s", endpoint)
    return server
