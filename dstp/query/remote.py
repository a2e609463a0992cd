"""Records of a remote dataset as a DuckDB table: the query to its server, streamed in on demand.

A remote reference (:class:`dstp.catalog.remote.RemoteDataset`) is read with a
dstp query to its own server (:func:`dstp.query.plan.remote_sql`): only the
columns the query reads, filtered by the conditions on that reference and by
the key ranges a join or matchup needs. :class:`RemoteScan` is what DuckDB
scans: each time DuckDB opens it, a new stream is set up, and the remote query
starts only when the first batch is pulled (DuckDB opens a table to learn its
schema without reading it). The bytes that arrive are counted, so a query's
summary says what federation moved.
"""

from __future__ import annotations

import threading
from typing import Iterator

import numpy as np
import pyarrow as pa

from dstp.catalog.remote import RemoteDataset
from dstp.errors import CancelledError, QueryError
from dstp.query.scan import INDEX_PREFIX

__all__ = ["RemoteCounter", "RemoteScan", "remote_schema"]


class RemoteCounter:
    """Bytes and rows that arrived from remote servers for one query."""

    def __init__(self) -> None:
        self.bytes = 0
        self.rows = 0
        self.queries: list[str] = []
        self._lock = threading.Lock()

    def add(self, nbytes: int, rows: int) -> None:
        with self._lock:
            self.bytes += nbytes
            self.rows += rows


def remote_schema(dataset: RemoteDataset, columns: tuple[str, ...]) -> pa.Schema:
    """Return the Arrow schema of a remote reference's scan: its columns, then index columns."""
    fields = []
    for name in columns:
        if name.startswith(INDEX_PREFIX):
            fields.append(pa.field(name, pa.int64(), nullable=False))
        else:
            fields.append(pa.field(name, dataset.arrow_type(name)))
    return pa.schema(fields)


class RemoteScan:
    """A remote reference's records, for DuckDB (see the module docstring)."""

    def __init__(self, dataset: RemoteDataset, sql: str, schema: pa.Schema, counter: RemoteCounter,
                 cancel: threading.Event | None = None,
                 index_axes: dict[str, tuple[str, np.ndarray]] | None = None) -> None:
        self.dataset = dataset
        self.sql = sql
        self.schema = schema
        self.counter = counter
        self.cancel = cancel
        #: {dimension: (coordinate column, its values in grid order)}: index columns to compute per batch.
        self.index_axes = index_axes or {}
        self.error: BaseException | None = None

    def batches(self) -> Iterator[pa.RecordBatch]:
        source = self.dataset.source
        if source is None:
            raise QueryError(f"{self.dataset.id} is served by {self.dataset.server}, which this server cannot reach")
        self.counter.queries.append(self.sql)
        try:
            stream = source.stream(self.dataset.server, self.sql, self.dataset.credential, self.cancel)
        except BaseException as exc:  # refused before any record: kept, so the query reports the server's words
            if self.error is None:
                self.error = exc
            raise
        rows = 0
        try:
            for batch in stream:
                if self.cancel is not None and self.cancel.is_set():
                    raise CancelledError("the query was cancelled")
                rows += batch.num_rows
                yield self._conform(batch)
        except BaseException as exc:
            if self.error is None:
                self.error = exc
            raise
        finally:
            self.counter.add(stream.bytes_received, rows)
            stream.close()

    def _conform(self, batch: pa.RecordBatch) -> pa.RecordBatch:
        arrays = []
        for field in self.schema:
            if field.name.startswith(INDEX_PREFIX):
                column, grid = self.index_axes[field.name[len(INDEX_PREFIX):]]
                arrays.append(pa.array(_positions(batch.column(column), grid), pa.int64()))
            else:
                array = batch.column(field.name)
                arrays.append(array if array.type == field.type else array.cast(field.type))
        return pa.RecordBatch.from_arrays(arrays, schema=self.schema)

    def __arrow_c_stream__(self, requested_schema: object = None) -> object:
        reader = pa.RecordBatchReader.from_batches(self.schema, self.batches())
        return reader.__arrow_c_stream__(requested_schema)


def _positions(values: pa.Array, grid: np.ndarray) -> np.ndarray:
    """Return each value's index in ``grid`` (the remote's own coordinate values, so they match exactly)."""
    v = values.to_numpy(zero_copy_only=False)
    if grid.dtype.kind == "M":
        v = v.astype(grid.dtype)
    descending = grid.size > 1 and grid[0] > grid[-1]
    asc = grid[::-1] if descending else grid
    pos = np.clip(np.searchsorted(asc, v), 0, max(0, asc.size - 1))
    if asc.size == 0 or not np.all(asc[pos] == v):
        raise QueryError("a remote server returned a coordinate value its own coordinates do not hold; "
                         "the remote dataset may have changed — run the query again")
    return (asc.size - 1 - pos) if descending else pos
