"""A query's records as they arrive (QueryStream), progress reports, and what a cut result says."""

from __future__ import annotations

import warnings
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable, Iterator

from dstp.errors import DstpTruncationWarning, TruncatedResultError
from dstp.transport.wire.values import QueryInfo, TransferSummary

if TYPE_CHECKING:  # imported where used: `dstp get` never needs pyarrow
    import pyarrow as pa

__all__ = ["Progress", "ProgressCallback", "QueryStream", "truncation_message", "truncation_reason"]


@dataclass(frozen=True, slots=True)
class Progress:
    """A progress report: records and bytes so far, seconds since the fetch began."""

    rows: int
    bytes: int
    seconds: float
    batches: int
    transport: str
    streams: int = 1
    #: Records of the result when the plan knows them exactly, else -1.
    estimated_rows: int = -1
    #: The most records the result can have (the plan's row bound), else -1.
    max_rows: int = -1

    @property
    def rate_bytes_per_s(self) -> float:
        return self.bytes / self.seconds if self.seconds > 0 else 0.0


ProgressCallback = Callable[[Progress], None]


def truncation_reason(summary: TransferSummary | dict[str, Any] | None) -> str | None:
    """Return why the server cut a result (``"result cut at max_result_rows=…"``), or None if it is complete."""
    if not summary or not summary.get("truncated"):
        return None
    return str(summary.get("truncated_reason") or "result cut at a server limit")


def truncation_message(summary: TransferSummary | dict[str, Any], accept: str | None = None) -> str:
    """Return the message for a cut-off result; ``accept`` names how the caller could accept it."""
    fix = f"or {accept} to keep the records that arrived" if accept else "to get all of it"
    return (f"the result is incomplete: the server stopped it after {int(summary.get('rows', 0)):,} records "
            f"({truncation_reason(summary)}); narrow the query (WHERE on coordinates, stride(), tablesample, "
            f"LIMIT) {fix}")


class QueryStream:
    """The records of one query as they arrive: iterate it for RecordBatches.

    ``schema`` is known before the first batch; ``summary`` (a
    :class:`~dstp.transport.wire.values.TransferSummary`: rows, bytes, truncated,
    what the server read, what the channel saw) once iteration has finished. A
    result the server cut at ``max_result_rows``/``max_result_bytes`` raises
    :class:`~dstp.errors.TruncatedResultError` once its last batch has been
    yielded, unless the stream was opened with ``allow_truncated=True`` (then
    a :class:`~dstp.errors.DstpTruncationWarning` is issued instead).
    """

    def __init__(self, info: QueryInfo, batches: Iterator[pa.RecordBatch], transport: str,
                 allow_truncated: bool = False) -> None:
        self.info = info
        self.schema = info.schema
        self.transport = transport
        self.summary: TransferSummary | None = None
        #: Why this data path was chosen (auto-tuning decisions are visible here).
        self.choice = ""
        self.allow_truncated = allow_truncated
        #: Set by ``Client.query``, which warns itself (at its caller's line).
        self._warn = True
        self._batches = batches
        #: The open gRPC call behind the batches, if any: cancelled on close even before iteration.
        self._call: Any = None

    def __iter__(self) -> Iterator[pa.RecordBatch]:
        return self

    def __next__(self) -> pa.RecordBatch:
        try:
            return next(self._batches)
        except StopIteration:
            self._ended()
            raise

    def _ended(self) -> None:
        """The last batch is in: raise for (or warn about, once) a result the server cut."""
        summary = self.summary
        if truncation_reason(summary) is None:
            return
        assert summary is not None
        if not self.allow_truncated:
            err = TruncatedResultError(truncation_message(summary, "pass allow_truncated=True"))
            err.summary = summary
            raise err
        if self._warn:
            self._warn = False
            warnings.warn(truncation_message(summary), DstpTruncationWarning, stacklevel=3)

    @property
    def truncated_reason(self) -> str | None:
        """Why the server cut this result (after iteration), or None if it arrived whole."""
        return truncation_reason(self.summary)

    def read_all(self) -> pa.Table:
        """Return every remaining batch as one table."""
        import pyarrow as pa

        return pa.Table.from_batches(list(self), schema=self.schema)

    def close(self) -> None:
        """Stop the transfer (the server stops reading files) and release the connection."""
        close = getattr(self._batches, "close", None)
        if close is not None:
            close()
        if self._call is not None:
            self._call.cancel()

    def __enter__(self) -> "QueryStream":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
