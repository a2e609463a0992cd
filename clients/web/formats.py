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
"""

from __future__ import annotations

import datetime as dt
import decimal
import hashlib
import io
import json
import re
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable, Mapping, Protocol

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pa_csv
import pyarrow.parquet as pq

from dstp.catalog.netcdf4_ import NETCDF_LOCK
from dstp.errors import DstpError, QueryError, TransportUnavailableError

__all__ = [
    "FORMATS",
    "assemble",
    "ResultFormat",
    "StreamEncoder",
    "check_gridded",
    "encoder_for",
    "result_filename",
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

    def error(self, err: DstpError) -> bytes: ...


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


class CsvEncoder(_Drained):
    """CSV with a header line; times as ``YYYY-MM-DD HH:MM:SS.ffffff``, NULL as an empty field."""

    def __init__(self, schema: pa.Schema) -> None:
        super().__init__()
        self._writer = pa_csv.CSVWriter(self.sink, schema)

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

    def error(self, err: DstpError) -> bytes:
        return (json.dumps(err.to_dict(), separators=(",", ":")) + "\n").encode()


class ArrowEncoder(_Drained):
    """The Arrow IPC stream format: schema (with units and calendars), batches, end-of-stream marker."""

    def __init__(self, schema: pa.Schema) -> None:
        super().__init__()
        self._writer = pa.ipc.new_stream(self.sink, schema)

    def error(self, err: DstpError) -> bytes:
        return b""


_ENCODERS: dict[str, type] = {"csv": CsvEncoder, "json": JsonEncoder, "ndjson": NdjsonEncoder, "arrow": ArrowEncoder}


def encoder_for(fmt: str, schema: pa.Schema) -> StreamEncoder:
    """Return a fresh encoder of streamed format ``fmt``."""
    encoder: StreamEncoder = _ENCODERS[fmt](schema)
    return encoder


def write_parquet(batches: Iterable[pa.RecordBatch], schema: pa.Schema, out: Any) -> int:
    """Write ``batches`` to ``out`` as one Parquet file (schema metadata kept); return the row count."""
    rows = 0
    with pq.ParquetWriter(out, schema) as writer:
        for batch in batches:
            writer.write_batch(batch)
            rows += batch.num_rows
    return rows


def _grid_columns(schema: pa.Schema) -> tuple[list[str], dict[str, str]]:
    meta = schema.metadata or {}
    grid = meta.get(b"dstp:grid", b"").decode().split()
    columns = {}
    for f in schema:
        dim = (f.metadata or {}).get(b"dstp:dimension", b"").decode()
        if dim:
            columns[dim] = f.name
        elif f.name in grid:
            columns[f.name] = f.name
    return grid, columns


def check_gridded(schema: pa.Schema) -> None:
    """Raise QueryError unless the result holds a coordinate column for every grid dimension."""
    grid, columns = _grid_columns(schema)
    missing = [d for d in grid if d not in columns]
    if missing:
        raise QueryError(
            f"format=nc rebuilds the grid ({' × '.join(grid)}), but the result lacks the coordinate columns of "
            f"{', '.join(missing)}; add them to the select list (or use select *), or choose another format"
        )


def write_netcdf(table: pa.Table, path: Path, time_units: Mapping[str, str]) -> None:
    """Write a gridded result to ``path`` as CF netCDF-4; ``time_units`` maps time columns to their units.

    Times keep their calendar (text times of 360_day and friends become
    cftime values of that calendar), units and CF attributes travel from
    the result schema. Holds the catalog's netCDF lock while writing (HDF5 is not thread-safe).
    """
    try:
        from dstp.client import to_xarray

        ds = to_xarray(table)
    except ImportError as exc:
        raise TransportUnavailableError(
            "format=nc needs xarray and pandas on the server (pip install 'dstp[xarray]'); choose another format"
        ) from exc
    for name in list(ds.variables):
        var = ds[name]
        calendar = var.attrs.pop("calendar", None)
        if not calendar:
            continue
        units = time_units.get(str(name)) or var.attrs.get("units", "")
        var.attrs.pop("units", None)
        if var.size == 0:
            # Nothing to encode (cftime refuses empty arrays): write the empty axis as plain numbers.
            ds = ds.assign_coords({name: (var.dims, var.values[:0].astype("float64"), var.attrs)})
            ds[name].attrs.update({"units": units or "days since 1970-01-01", "calendar": calendar})
            continue
        # xarray writes units and calendar itself from the encoding; as attributes they would clash.
        var.encoding["calendar"] = calendar
        if units:
            var.encoding["units"] = units
    sql = ds.attrs.pop("dstp_query", "")
    dataset = ds.attrs.pop("dstp_dataset", "")
    now = dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
    ds.attrs.update(
        {"Conventions": "CF-1.8", "source": f"dstp dataset {dataset}", "history": f"{now} dstp query: {sql}"}
    )
    with NETCDF_LOCK:
        ds.to_netcdf(path, engine="netcdf4", format="NETCDF4")


#: Parquet and netCDF results are assembled before sending; this much stays in memory, the rest spools to disk.
SPOOL_MEMORY_BYTES = 32 * 2**20


def assemble(batches: Iterable[pa.RecordBatch], schema: pa.Schema, fmt: str, time_units: Mapping[str, str]) -> Any:
    """Return an open binary file holding the whole result as Parquet or netCDF (blocking)."""
    if fmt == "parquet":
        spool = tempfile.SpooledTemporaryFile(max_size=SPOOL_MEMORY_BYTES, prefix="dstp-")
        try:
            write_parquet(batches, schema, spool)
        except BaseException:
            spool.close()
            raise
        spool.seek(0)
        return spool
    table = pa.Table.from_batches(list(batches), schema=schema)
    with tempfile.TemporaryDirectory(prefix="dstp-nc-") as folder:
        path = Path(folder) / "result.nc"
        write_netcdf(table, path, time_units)
        return path.open("rb")  # stays readable after the folder is removed


_UNSAFE = re.compile(r"[^A-Za-z0-9_.-]+")


def result_filename(schema: pa.Schema, sql: str, extension: str) -> str:
    """Return ``<dataset>-<short hash of the SQL>.<extension>``."""
    dataset = (schema.metadata or {}).get(b"dstp:dataset", b"result").decode() or "result"
    digest = hashlib.sha256(sql.encode()).hexdigest()[:8]
    return f"{_UNSAFE.sub('_', dataset)}-{digest}.{extension}"
