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

While a chunk waits to be taken by the client the stream marks its slot
*blocked*: a reader that takes nothing for ``stall_timeout_s`` loses the slot
and the response is dropped (the adapter registers that with the slot).

A result the server cut at ``max_result_rows``/``max_result_bytes`` ends with
the format's truncation trailer (:meth:`StreamEncoder.truncated`); whether
that can happen is forecast before the response starts
(:func:`truncation_forecast`, the ``X-Dstp-Truncated`` header). Cutting at
the request's own ``limit`` is what was asked for, not truncation.
"""

from __future__ import annotations

import logging
import threading
from typing import AsyncIterator, Callable, Generator, Iterator, cast

import anyio
import pyarrow as pa

from dstp.errors import DstpError, LimitExceededError
from dstp.incidents import for_client
from dstp.service import Execution
from dstp.http.formats import StreamEncoder, truncation_notice

__all__ = ["ResultStream", "StreamAborted", "limited", "truncated_reason", "truncation_forecast"]

log = logging.getLogger("dstp.http")


class StreamAborted(Exception):
    """A response failed after its first bytes were sent; the connection must be dropped."""


class ResultStream:
    """The encoded chunks of one running query, at most ``limit`` rows of it."""

    def __init__(
        self,
        execution: Execution,
        encoder: StreamEncoder,
        limit: int | None = None,
        unexpected: Callable[[BaseException], DstpError] = lambda exc: for_client(exc, "http"),
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
        self._taken = (0, 0)  # rows and Arrow bytes of the chunk last produced, counted once it is handed over

    def _step(self) -> bytes | None:
        """Return the next chunk (blocking), or None after the last."""
        with self._lock:
            if self._done:
                return None
            try:
                batch: pa.RecordBatch = next(self._batches)
            except StopIteration:
                self._done = True
                reason = truncated_reason(self.execution, self.rows, self._limit)
                if reason is not None:
                    return self._encoder.truncated(truncation_notice(reason, self.rows))
                return self._encoder.end()
            if self._limit is not None and self.rows + batch.num_rows >= self._limit:
                batch = batch.slice(0, self._limit - self.rows)
                self._done = True
                self._batches.close()  # stops the scan now; the rest is never read
                self.rows += batch.num_rows
                self._taken = (batch.num_rows, batch.nbytes)
                return self._encoder.encode(batch) + self._encoder.end()
            self.rows += batch.num_rows
            self._taken = (batch.num_rows, batch.nbytes)
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
        pace = self.execution.slot
        pace.count_delivery()  # the audit counts what was handed to the client's connection, not what was made
        if self._first:
            taken, self._taken = self._taken, (0, 0)
            pace.blocked()
            yield self._first
            pace.unblocked()
            pace.taken(*taken)
        while True:
            try:
                chunk = await self._next()
            except Exception as exc:  # noqa: BLE001 - every failure must end the body visibly
                err = self._unexpected(exc)  # a refusal as it is; an incident logged, its id named
                log.warning("query %s failed after %d rows were sent: %s", self.execution.query_id, self.rows,
                            err.message)
                trailer = self._encoder.error(err)
                if trailer:
                    yield trailer
                raise StreamAborted(err.code) from err
            if chunk is None:
                return
            if chunk:
                taken, self._taken = self._taken, (0, 0)
                pace.blocked()  # until the server has handed it to the client's connection
                yield chunk
                pace.unblocked()
                pace.taken(*taken)

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


def truncated_reason(execution: Execution, rows: int, limit: int | None) -> str | None:
    """Return why the server cut the result after ``rows`` were sent, or None if the client got what it asked."""
    summary = execution.summary
    if not summary.truncated or (limit is not None and rows >= limit):
        return None
    return str(summary.truncated_reason)


#: The longest ISO text of a calendar time (-YYYYY-MM-DDTHH:MM:SS.ffffff, with room to spare).
ISO_TIME_BYTES = 32


def _width_bounds(schema: pa.Schema) -> tuple[int, int | None]:
    """Return (least, most) Arrow bytes per row; most is None when a column's width has no bound."""
    least, most = 0, 0
    fixed = True
    for f in schema:
        try:
            width = max(1, f.type.bit_width // 8)
        except ValueError:  # variable width (text): an offset, and the text
            least += 4
            if (f.metadata or {}).get(b"calendar") and pa.types.is_string(f.type):
                most += 4 + ISO_TIME_BYTES + 1  # calendar times as ISO text: bounded
            else:
                fixed = False
            continue
        least += width
        most += width + 1  # and its share of the validity bitmap, rounded up
    return least, most if fixed else None


def truncation_forecast(execution: Execution, limit: int | None) -> tuple[str, str]:
    """Return the ``X-Dstp-Truncated`` header value decided before streaming, and the reason when certain.

    ``"false"``: the result cannot reach ``max_result_rows``/``max_result_bytes``
    (the plan's most rows, capped by ``limit``, fit under both). ``"true"``:
    it certainly will (its row count is known and too large). ``"unknown"``:
    it may; the body's last line (or Arrow's last batch) says if it did.
    """
    plan, settings = execution.plan, execution.settings
    most = plan.max_rows() if limit is None else min(plan.max_rows(), limit)
    exact = plan.estimated_rows()
    if exact >= 0 and limit is not None:
        exact = min(exact, limit)
    least_width, most_width = _width_bounds(execution.schema)
    exceeded = []
    if exact > settings.max_result_rows:
        exceeded.append(f"max_result_rows={settings.max_result_rows}")
    if exact >= 0 and exact * least_width > settings.max_result_bytes:
        exceeded.append(f"max_result_bytes={settings.max_result_bytes}")
    if exceeded:
        return "true", f"the result has {exact:,} records, more than {' and '.join(exceeded)} allow"
    batches = -(-most // max(1, settings.batch_rows)) if most else 0
    if most <= settings.max_result_rows and most_width is not None and \
            most * most_width + 64 * batches * len(execution.schema) <= settings.max_result_bytes:
        return "false", ""
    return "unknown", ""


class LimitedBatches:
    """At most ``limit`` rows of ``execution``'s batches; stops the query and frees its slot when done.

    With ``max_bytes`` a result growing past that many Arrow bytes is refused (LimitExceededError): a
    format assembled in memory must not hold more. After iteration, :meth:`truncated_reason` says
    whether the server cut the result short of what was asked.
    """

    def __init__(self, execution: Execution, limit: int | None, max_bytes: int | None = None) -> None:
        self.execution = execution
        self.limit = limit
        self.max_bytes = max_bytes
        self.rows = 0
        self.bytes = 0

    def __iter__(self) -> Iterator[pa.RecordBatch]:
        batches = cast(Generator[pa.RecordBatch, None, None], self.execution.batches())
        limit = self.limit
        try:
            for batch in batches:
                self.bytes += batch.nbytes
                if self.max_bytes is not None and self.bytes > self.max_bytes:
                    raise LimitExceededError(
                        f"format=nc assembles the whole result in memory, and this one is larger than "
                        f"nc_max_result_bytes={self.max_bytes:,} bytes; narrow it (WHERE, LIMIT, stride()), or "
                        "choose format=parquet or arrow, which have no such limit")
                if limit is not None and self.rows + batch.num_rows >= limit:
                    batch = batch.slice(0, limit - self.rows)
                    self.rows += batch.num_rows
                    yield batch
                    return
                self.rows += batch.num_rows
                yield batch
        finally:
            batches.close()
            self.execution.close()

    def truncated_reason(self) -> str | None:
        return truncated_reason(self.execution, self.rows, self.limit)


def limited(execution: Execution, limit: int | None, max_bytes: int | None = None) -> LimitedBatches:
    """Return at most ``limit`` rows of ``execution``'s batches (see :class:`LimitedBatches`)."""
    return LimitedBatches(execution, limit, max_bytes)
