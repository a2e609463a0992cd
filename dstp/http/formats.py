"""Result formats of ``GET /query``: encoders from Arrow record batches to bytes.

Streamed formats (CSV, JSON, NDJSON, Arrow IPC stream) encode one batch at
a time, so the first bytes leave as soon as the first batch exists and
memory stays at about one batch. Parquet needs its footer, so it is written
to a spooled buffer (memory, then a temporary file) and sent once complete.
netCDF rebuilds the grid (:func:`dstp.to_xarray`) and so holds the whole
result in memory.

When a streamed result fails after its first bytes, the status line has
already gone: :meth:`StreamEncoder.error` gives the bytes to send before the
connection is aborted (CSV: a ``# dstp-error:`` line; NDJSON: an
``{"error": …}`` line; JSON and Arrow: nothing, the array or stream is left
unterminated), so no client mistakes a broken result for a complete one.

A result the server cut at ``max_result_rows``/``max_result_bytes`` ends with
:meth:`StreamEncoder.truncated` instead of :meth:`StreamEncoder.end`: CSV a
last line ``# dstp-truncated: {"truncated": {"reason", "rows"}}``, NDJSON and
JSON a last line ``{"truncated": {…}}`` (after the closed array, so the JSON
body is no longer one JSON value), Arrow a last, empty record batch whose
custom metadata holds ``dstp:truncated`` and ``dstp:truncated_reason``, and no
end-of-stream marker. CSV and netCDF are written by the same functions as the
CLI's (:mod:`dstp.client._output`).
"""

from __future__ import annotations

import base64
import datetime as dt
import decimal
import hashlib
import io
import json
import re
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterable, Mapping, Protocol

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from dstp.catalog.netcdf4_ import NETCDF_LOCK
from dstp.result_files import csv_header, csv_rows
from dstp.result_files import write_netcdf as _write_netcdf
from dstp.result_grid import missing_grid_columns
from dstp.errors import DstpError, QueryError, TransportUnavailableError
from dstp.metadata import DatasetDetails

__all__ = [
    "FORMATS",
    "assemble",
    "ResultFormat",
    "StreamEncoder",
    "check_gridded",
    "encoder_for",
    "result_filename",
    "schema_header",
    "truncation_notice",
    "write_netcdf",
    "write_parquet",
]


@dataclass(frozen=True, slots=True)
class ResultFormat:
    """A result format: its name in ``format=``, media type, file extension, whether it streams."""

    name: str
    media_type: str
    extension: str
    streamed: bool


FORMATS = {
    f.name: f
    for f in (
        ResultFormat("csv", "text/csv; charset=utf-8", "csv", True),
        ResultFormat("json", "application/json", "json", True),
        ResultFormat("ndjson", "application/x-ndjson", "ndjson", True),
        ResultFormat("arrow", "application/vnd.apache.arrow.stream", "arrows", True),
        ResultFormat("parquet", "application/vnd.apache.parquet", "parquet", False),
        ResultFormat("nc", "application/x-netcdf", "nc", False),
    )
}


class StreamEncoder(Protocol):
    """Turns a result's batches into the bytes of one format, piece by piece."""

    def start(self) -> bytes: ...

    def encode(self, batch: pa.RecordBatch) -> bytes: ...

    def end(self) -> bytes: ...

    def truncated(self, notice: Mapping[str, Any]) -> bytes:
        """Return the bytes that end a result the server cut (instead of ``end()``)."""
        ...

    def error(self, err: DstpError) -> bytes: ...


def truncation_notice(reason: str, rows: int) -> dict[str, Any]:
    """Return the trailer object of a cut result: ``{"truncated": {"reason": …, "rows": …}}``."""
    return {"truncated": {"reason": reason, "rows": rows}}


def _notice_line(notice: Mapping[str, Any]) -> bytes:
    return (json.dumps(notice, separators=(",", ":")) + "\n").encode()


class _Drained:
    """An Arrow writer over a file-like sink whose contents are taken after each write."""

    _writer: Any

    def __init__(self) -> None:
        self.sink = io.BytesIO()

    def take(self) -> bytes:
        data = self.sink.getvalue()
        self.sink.seek(0)
        self.sink.truncate()
        return data

    def start(self) -> bytes:
        return self.take()

    def encode(self, batch: pa.RecordBatch) -> bytes:
        self._writer.write_batch(batch)
        return self.take()

    def end(self) -> bytes:
        self._writer.close()
        return self.take()


class CsvEncoder:
    """CSV with a header line; times as ``YYYY-MM-DD HH:MM:SS.ffffff``, NULL as an empty field (``NA`` when
    the result has one column: an empty field would be a blank line, which CSV readers skip)."""

    def __init__(self, schema: pa.Schema) -> None:
        self._schema = schema

    def start(self) -> bytes:
        return csv_header(self._schema)

    def encode(self, batch: pa.RecordBatch) -> bytes:
        return csv_rows(batch) if batch.num_rows else b""

    def end(self) -> bytes:
        return b""

    def truncated(self, notice: Mapping[str, Any]) -> bytes:
        return b"# dstp-truncated: " + _notice_line(notice)

    def error(self, err: DstpError) -> bytes:
        return b"# dstp-error: " + json.dumps(err.to_dict()).encode() + b"\n"


def _json_default(value: Any) -> Any:
    if isinstance(value, (dt.datetime, dt.date, dt.time)):
        return value.isoformat()
    if isinstance(value, decimal.Decimal):
        return float(value)
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    raise TypeError(f"{type(value).__name__} is not JSON serialisable")


_NEEDS_ESCAPE = r'["\\\x00-\x1f]'


def _quoted(text: pa.Array) -> pa.Array:
    return pc.binary_join_element_wise(pa.scalar('"'), text, pa.scalar('"'), "")


def _json_texts(col: pa.Array) -> pa.Array:
    """Return each value of ``col`` as JSON text: "null" for NULL and for non-finite floats (from expressions)."""
    t = col.type
    if pa.types.is_floating(t):
        text = pc.cast(pc.if_else(pc.is_finite(col), col, pa.scalar(None, t)), pa.string())
    elif pa.types.is_integer(t) or pa.types.is_boolean(t):
        text = pc.cast(col, pa.string())
    elif pa.types.is_timestamp(t):
        seconds = pc.cast(col, pa.timestamp("s", t.tz), safe=False)
        whole = pc.all(pc.equal(pc.cast(seconds, t), col)).as_py() is not False
        text = _quoted(pc.strftime(seconds if whole else col, format="%Y-%m-%dT%H:%M:%S"))
    elif pa.types.is_date(t):
        text = _quoted(pc.strftime(col, format="%Y-%m-%d"))
    elif pa.types.is_string(t) and not pc.any(pc.match_substring_regex(col, _NEEDS_ESCAPE)).as_py():
        text = _quoted(col)
    else:  # text that needs escaping, other types: rare, done value by value
        values = [None if v is None else json.dumps(v, default=_json_default) for v in col.to_pylist()]
        text = pa.array(values, pa.string())
    return pc.fill_null(text, "null")


def _json_rows(batch: pa.RecordBatch, before: str, after: str) -> bytes:
    """Return the batch's records as JSON objects, each written ``before{…}after``, built in Arrow."""
    parts: list[Any] = []
    for i, (name, col) in enumerate(zip(batch.schema.names, batch.columns)):
        key = ("{" if i == 0 else ",") + json.dumps(name) + ":"
        parts += [pa.scalar(before + key if i == 0 else key), _json_texts(col)]
    parts.append(pa.scalar("}" + after))
    rows = pc.binary_join_element_wise(*parts, "")
    offsets = np.frombuffer(rows.buffers()[1], dtype=np.int32)[rows.offset:rows.offset + len(rows) + 1]
    return memoryview(rows.buffers()[2])[offsets[0]:offsets[-1]].tobytes()


class JsonEncoder:
    """One JSON array of record objects, one per line; times as ISO 8601 text, NULL as null."""

    def __init__(self, schema: pa.Schema) -> None:
        self._first = True

    def start(self) -> bytes:
        return b"["

    def encode(self, batch: pa.RecordBatch) -> bytes:
        if not batch.num_rows:
            return b""
        body = _json_rows(batch, ",\n", "")
        if self._first:
            self._first = False
            body = body[1:]
        return body

    def end(self) -> bytes:
        return b"\n]\n" if not self._first else b"]\n"

    def truncated(self, notice: Mapping[str, Any]) -> bytes:
        return self.end() + _notice_line(notice)

    def error(self, err: DstpError) -> bytes:
        return b""


class NdjsonEncoder:
    """One JSON record object per line."""

    def __init__(self, schema: pa.Schema) -> None:
        pass

    def start(self) -> bytes:
        return b""

    def encode(self, batch: pa.RecordBatch) -> bytes:
        return _json_rows(batch, "", "\n") if batch.num_rows else b""

    def end(self) -> bytes:
        return b""

    def truncated(self, notice: Mapping[str, Any]) -> bytes:
        return _notice_line(notice)

    def error(self, err: DstpError) -> bytes:
        return (json.dumps(err.to_dict(), separators=(",", ":")) + "\n").encode()


class ArrowEncoder(_Drained):
    """The Arrow IPC stream format: schema (with units and calendars), batches, end-of-stream marker."""

    def __init__(self, schema: pa.Schema) -> None:
        super().__init__()
        self._schema = schema
        self._writer = pa.ipc.new_stream(self.sink, schema)

    def truncated(self, notice: Mapping[str, Any]) -> bytes:
        # a last, empty batch says why; the end-of-stream marker is left out, so readers that check it refuse
        detail = notice["truncated"]
        empty = pa.record_batch([pa.array([], f.type) for f in self._schema], schema=self._schema)
        self._writer.write_batch(empty, custom_metadata={"dstp:truncated": "true",
                                                 "dstp:truncated_reason": str(detail["reason"]),
                                                 "dstp:truncated_rows": str(detail["rows"])})
        return self.take()

    def error(self, err: DstpError) -> bytes:
        return b""


_ENCODERS: dict[str, type] = {"csv": CsvEncoder, "json": JsonEncoder, "ndjson": NdjsonEncoder, "arrow": ArrowEncoder}


def encoder_for(fmt: str, schema: pa.Schema) -> StreamEncoder:
    """Return a fresh encoder of streamed format ``fmt``."""
    encoder: StreamEncoder = _ENCODERS[fmt](schema)
    return encoder


def write_parquet(batches: Iterable[pa.RecordBatch], schema: pa.Schema, out: Any,
                  truncated_reason: Callable[[], str | None] = lambda: None) -> int:
    """Write ``batches`` to ``out`` as one Parquet file (schema metadata kept); return the row count.

    ``truncated_reason()`` is asked once every batch is written; a reason is
    recorded in the file metadata (``dstp:truncated``, ``dstp:truncated_reason``).
    """
    rows = 0
    with pq.ParquetWriter(out, schema) as writer:
        for batch in batches:
            writer.write_batch(batch)
            rows += batch.num_rows
        reason = truncated_reason()
        if reason is not None:
            writer.add_key_value_metadata({"dstp:truncated": "true", "dstp:truncated_reason": reason})
    return rows


def check_gridded(schema: pa.Schema) -> None:
    """Raise QueryError unless the result holds a coordinate column for every grid dimension."""
    grid, missing = missing_grid_columns(schema)
    if missing:
        raise QueryError(
            f"format=nc rebuilds the grid ({' × '.join(grid)}), but the result lacks the coordinate columns of "
            f"{', '.join(missing)}; add them to the select list (or use select *), or choose another format"
        )


def write_netcdf(table: pa.Table, path: Path, time_units: Mapping[str, str],
                 details: DatasetDetails | None = None) -> None:
    """Write a gridded result to ``path`` as CF netCDF-4 (:func:`dstp.result_files.write_netcdf`, the CLI's
    writer too), holding the catalog's netCDF lock (HDF5 is not thread-safe); ``details`` (of the dataset a
    one-dataset query reads) give the variables' and the files' global attributes."""
    try:
        import xarray  # noqa: F401
    except ImportError as exc:
        raise TransportUnavailableError(
            "format=nc needs xarray and pandas on the server (pip install 'dstp[xarray]'); choose another format"
        ) from exc
    one = details is not None and (table.schema.metadata or {}).get(b"dstp:datasets", b"").split() == \
        [details.summary.id.encode()]
    attributes = {c.name: c.cf for c in (*details.coordinates, *details.attributes)} if one and details else None
    _write_netcdf(table, path, time_units, lock=NETCDF_LOCK, attributes=attributes,
                  global_attributes=details.global_attributes if one and details else ())


#: Parquet and netCDF results are assembled before sending; this much stays in memory, the rest spools to disk.
SPOOL_MEMORY_BYTES = 32 * 2**20


def assemble(batches: Iterable[pa.RecordBatch], schema: pa.Schema, fmt: str, time_units: Mapping[str, str],
             truncated_reason: Callable[[], str | None] = lambda: None,
             details: DatasetDetails | None = None) -> Any:
    """Return an open binary file holding the whole result as Parquet or netCDF (blocking).

    ``truncated_reason()``, asked once the batches are consumed, says whether
    the server cut the result; the file records it (Parquet file metadata,
    netCDF global attribute ``dstp_truncated``).
    """
    if fmt == "parquet":
        spool = tempfile.SpooledTemporaryFile(max_size=SPOOL_MEMORY_BYTES, prefix="dstp-")
        try:
            write_parquet(batches, schema, spool, truncated_reason)
        except BaseException:
            spool.close()
            raise
        spool.seek(0)
        return spool
    table = pa.Table.from_batches(list(batches), schema=schema)
    reason = truncated_reason()
    if reason is not None:
        table = table.replace_schema_metadata({**(schema.metadata or {}), b"dstp:truncated": b"true",
                                               b"dstp:truncated_reason": reason.encode()})
    with tempfile.TemporaryDirectory(prefix="dstp-nc-") as folder:
        path = Path(folder) / "result.nc"
        write_netcdf(table, path, time_units, details)
        return path.open("rb")  # stays readable after the folder is removed


_UNSAFE = re.compile(r"[^A-Za-z0-9_.-]+")


#: The response header carrying a result's schema, and the one saying why it was left out.
SCHEMA_HEADER = "X-Dstp-Arrow-Schema"
SCHEMA_OMITTED_HEADER = "X-Dstp-Arrow-Schema-Omitted"
#: Schema metadata the header leaves out: the query's text and its plan grow with the SQL (300 chained CTEs made
#: a 120 kB header no client reads) and no reader of CSV or JSON needs them; the Arrow body's schema keeps both.
HEADER_OMITS = (b"dstp:sql", b"dstp:plan")


def schema_header(schema: pa.Schema, limit: int) -> tuple[str, str]:
    """Return the response header describing ``schema``: its name and value, the whole line within ``limit`` bytes.

    ``X-Dstp-Arrow-Schema``: the Arrow IPC schema message, base64, with every field and its metadata (types,
    units, calendars, CF names) and the schema's metadata but :data:`HEADER_OMITS`. When even that is over
    ``limit`` (a result of dozens of columns), ``X-Dstp-Arrow-Schema-Omitted`` instead, saying where the schema is.
    """
    kept = {k: v for k, v in (schema.metadata or {}).items() if k not in HEADER_OMITS}
    value = base64.b64encode(schema.with_metadata(kept).serialize().to_pybytes()).decode()
    if len(SCHEMA_HEADER) + 2 + len(value) <= limit:
        return SCHEMA_HEADER, value
    return SCHEMA_OMITTED_HEADER, (f"the schema takes {len(value):,} bytes of base64, more than a response header "
                                   f"may ({limit:,}); format=arrow has it whole in the body (limit=0: the schema "
                                   "alone)")


def result_filename(schema: pa.Schema, sql: str, extension: str) -> str:
    """Return ``<dataset>-<short hash of the SQL>.<extension>``."""
    dataset = (schema.metadata or {}).get(b"dstp:dataset", b"result").decode() or "result"
    digest = hashlib.sha256(sql.encode()).hexdigest()[:8]
    return f"{_UNSAFE.sub('_', dataset)}-{digest}.{extension}"
