"""The HTTP query API: ``GET /query`` and ``POST /query`` (a result streamed as CSV, JSON, NDJSON or Arrow, or
assembled as Parquet or netCDF), ``GET /query/estimate`` (its size before it runs) and ``GET /usage.json``.

One ``APIRouter``, included by :func:`dstp.http.app.create_app`. Admission may wait for a slot, on threads of
its own (``ADMISSION_THREADS``), so waiting requests never starve the threads results stream on. A client that
goes away cancels its query; a body that ends before its last chunk is logged with why (docs/web.md).
"""

from __future__ import annotations

import asyncio
import functools
import logging
import threading
from typing import Any, Awaitable, Callable, Literal

import anyio
from fastapi import APIRouter, Depends, Query, Request
from fastapi.responses import Response, StreamingResponse
from pydantic import BaseModel, Field

from dstp.auth import Principal
from dstp.http.error_responses import incident, openapi_errors
from dstp.http.formats import FORMATS, assemble, check_gridded, encoder_for, result_filename, schema_header
from dstp.http.limits import MAX_RESPONSE_HEADER_BYTES
from dstp.http.pages import CatalogView
from dstp.http.paging import VERSION_HEADER, version_header
from dstp.http.streaming import ResultStream, StreamAborted, limited, truncation_forecast
from dstp.service import DstpService
from dstp.settings import Settings

__all__ = ["ADMISSION_THREADS", "QueryBody", "query_router"]

log = logging.getLogger("dstp.http")

CHUNK_BYTES = 2**20
#: Threads HTTP requests may wait for an admission slot on (apart from anyio's default 40 that stream results).
ADMISSION_THREADS = 80

Format = Literal["csv", "json", "ndjson", "arrow", "parquet", "nc"]


SQL_TEXT = "The query, e.g. select temperature, time from ccm3 where humidity > 50"
FORMAT_TEXT = "csv | json (array of records) | ndjson | arrow (IPC stream) | parquet | nc (netCDF-4, gridded results)"
LIMIT_TEXT = "Send at most this many rows (previews); the query stops reading once they are sent."


QUERY_ERRORS = openapi_errors(400, 404, 409, 429, 499, 500, 504)


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



def admission_threads(request: Request) -> anyio.CapacityLimiter:
    """Return the threads requests wait for a slot on (made in the server's event loop, on first use)."""
    state = request.app.state
    if getattr(state, "admission_threads", None) is None:
        state.admission_threads = anyio.CapacityLimiter(ADMISSION_THREADS)
    limiter: anyio.CapacityLimiter = state.admission_threads
    return limiter


def query_router(service: DstpService, settings: Settings, view: CatalogView,
                 principal_of: Callable[[Request], Principal]) -> APIRouter:
    """Return the query API's routes."""
    router = APIRouter()
    PRINCIPAL = Depends(principal_of)

    # -- the query API ------------------------------------------------------------------

    async def run_query(request: Request, sql: str, fmt: str, limit: int | None) -> Response:
        cancel = threading.Event()
        principal = principal_of(request)
        # Admission may wait for a slot: on threads of its own, so waiting requests never starve the
        # threads that running results stream on.
        execution = await anyio.to_thread.run_sync(
            functools.partial(service.queries.run, sql, cancel, principal, channel="http"), limiter=admission_threads(request))
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

    @router.get("/query", summary="Run a query and download its result", **QUERY_DOC)  # type: ignore[arg-type]
    async def query(
        request: Request,
        sql: str = Query(..., description=SQL_TEXT),
        fmt: Format = Query("csv", alias="format", description=FORMAT_TEXT),
        limit: int | None = Query(None, ge=0, description=LIMIT_TEXT),
    ) -> Response:
        return await run_query(request, sql, fmt, limit)

    @router.post("/query", summary="Run a query given in a JSON body (for SQL too long for a URL)",
              **QUERY_DOC)  # type: ignore[arg-type]
    async def query_post(request: Request, body: QueryBody) -> Response:
        return await run_query(request, body.sql, body.format, body.limit)

    @router.get("/query/estimate", summary="How big a query's result will be, before it runs",
             description="Validates and plans the query (nothing is read) and answers its size from the plan: "
             "`records` and `bytes` (Arrow bytes), `exact` (true: every grid point scanned is a record; false: "
             "the most records there can be, the plan's row bound), `scan_rows` (grid points read), `text` for a "
             "person, `max_result_rows` and `over_max_result_rows` (true, false, or null when only running "
             "tells). A query that does not plan gets the same error as GET /query.",
             responses=QUERY_ERRORS)
    async def query_estimate(request: Request, sql: str = Query(..., description=SQL_TEXT)) -> dict[str, Any]:
        principal = principal_of(request)
        return await anyio.to_thread.run_sync(view.estimate, sql, principal, limiter=admission_threads(request))

    # -- usage ---------------------------------------------------------------------------

    @router.get("/usage.json", summary="What you run now and fetched today, against your quotas",
             description="`queries`: slots you hold now, requests of yours waiting for one, and how many you may "
             "hold; `bytes_today`: bytes fetched since 00:00 UTC and your daily quota (null: none).")
    def usage_json(principal: Principal = PRINCIPAL) -> dict[str, Any]:
        return service.usage(principal).to_dict()
    return router
