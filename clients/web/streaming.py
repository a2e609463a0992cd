"""Streaming a running query's encoded result from worker threads to an async server.

Reading netCDF and running DuckDB block, so each step (next batch, encode
it) runs on a worker thread while the event loop keeps serving others.
Nothing is read ahead: the next batch is pulled only when the previous
chunk has been handed to the server, so a slow client holds about one batch
in memory, never the result.

:meth:`ResultStream.prime` produces the header and the first batch before
the response starts, so a query that fails early (a bad file, a limit) still
gets its real HTTP status. After that the status line is gone: a failure
sends the format's error trailer (an unexpected exception is first turned
into a DstpError by the adapter's ``unexpected`` callback, which logs it
with an incident id) and raises :class:`StreamAborted`, and the HTTP adapter
drops the connection so the client sees an incomplete body.

:meth:`ResultStream.aclose` always runs (client gone, error, or done): it
sets the query's cancel event, waits for the step in flight (cancelled
queries stop within about 50 ms) and releases the query slot.
"""

from __future__ import annotations

import logging
import threading
from typing import AsyncIterator, Callable, Generator, Iterator, cast

import anyio
import pyarrow as pa

from dstp.errors import DstpError, ServerError
from dstp.service import Execution
from dstp.web.formats import StreamEncoder

__all__ = ["ResultStream", "StreamAborted", "limited"]

log = logging.getLogger("dstp.web")


class StreamAborted(Exception):
    """A response failed after its first bytes were sent; the connection must be dropped."""


class ResultStream:
    """The encoded chunks of one running query, at most ``limit`` rows of it."""

    def __init__(
        self,
        execution: Execution,
        encoder: StreamEncoder,
        limit: int | None = None,
        unexpected: Callable[[BaseException], DstpError] = lambda exc: ServerError("unexpected server error"),
    ) -> None:
        self.execution = execution
        self._unexpected = unexpected
        self.rows = 0
        self._batches = cast(Generator[pa.RecordBatch, None, None], execution.batches())
        self._encoder = encoder
        self._limit = limit
        self._lock = threading.Lock()
        self._done = False
        self._first = b""

    def _step(self) -> bytes | None:
        """Return the next chunk (blocking), or None after the last."""
        with self._lock:
            if self._done:
                return None
            try:
                batch: pa.RecordBatch = next(self._batches)
            except StopIteration:
                self._done = True
                return self._encoder.end()
            if self._limit is not None and self.rows + batch.num_rows >= self._limit:
                batch = batch.slice(0, self._limit - self.rows)
                self._done = True
                self._batches.close()  # stops the scan now; the rest is never read
                self.rows += batch.num_rows
                return self._encoder.encode(batch) + self._encoder.end()
            self.rows += batch.num_rows
            return self._encoder.encode(batch)

    async def _next(self) -> bytes | None:
        return await anyio.to_thread.run_sync(self._step, abandon_on_cancel=True)

    async def prime(self) -> None:
        """Produce the header and the first batch; raise the query's error if it fails this early."""
        head = self._encoder.start()
        if self._limit == 0:
            self._done = True
            self._first = head + self._encoder.end()
            return
        self._first = head + (await self._next() or b"")

    async def __aiter__(self) -> AsyncIterator[bytes]:
        if self._first:
            yield self._first
        while True:
            try:
                chunk = await self._next()
            except Exception as exc:  # noqa: BLE001 - every failure must end the body visibly
                err = exc if isinstance(exc, DstpError) else self._unexpected(exc)
                log.warning("query %s failed after %d rows were sent: %s", self.execution.query_id, self.rows,
                            err.message)
                trailer = self._encoder.error(err)
                if trailer:
                    yield trailer
                raise StreamAborted(err.code) from err
            if chunk is None:
                return
            if chunk:
                yield chunk

    def _close(self) -> None:
        if not self._done:
            self.execution.cancel.set()
        with self._lock:
            self._done = True
            self._batches.close()
        self.execution.close()

    async def aclose(self) -> None:
        """Stop the query if it still runs and release its slot (shielded from cancellation)."""
        with anyio.CancelScope(shield=True):
            await anyio.to_thread.run_sync(self._close)


def limited(execution: Execution, limit: int | None) -> Iterator[pa.RecordBatch]:
    """Yield at most ``limit`` rows of ``execution``'s batches; stop the query and free its slot when done."""
    rows = 0
    batches = cast(Generator[pa.RecordBatch, None, None], execution.batches())
    try:
        for batch in batches:
            if limit is not None and rows + batch.num_rows >= limit:
                yield batch.slice(0, limit - rows)
                return
            rows += batch.num_rows
            yield batch
    finally:
        batches.close()
        execution.close()
