"""Results as files: CSV text, the one netCDF writer, and saving a stream whole or not at all.

The CLI (``dstp query -o``) and the HTTP API (``format=csv``, ``format=nc``)
both write through these functions, so a file looks the same whichever way
it was asked for.

* CSV: a header line, then one line per record; NULL is an empty field,
  except in a single-column result, where an empty field would be a blank
  line that CSV readers skip (pandas does by default, silently losing the
  row): there NULL is written ``NA``, which pandas, R and pyarrow read as
  missing by default.
* netCDF: :func:`write_netcdf` rebuilds the grid with :func:`to_xarray`
  (times keep their calendar and units in ``encoding``) and writes CF-1.8.
* :func:`save_result` writes a query stream to a temporary name beside the
  target and renames it only when the result is complete.
* A result the server cut at its ``max_result_rows``/``max_result_bytes``
  carries the same marks whichever door wrote it (docs/web.md, "Truncated
  results"): CSV ends with the line :func:`csv_truncation_line`, Arrow with
  an empty record batch whose custom metadata is :func:`truncation_metadata`.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import io
import json
import os
import re
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, ContextManager, Iterator, Mapping, Sequence

from dstp.errors import TruncatedResultError

if TYPE_CHECKING:
    import pyarrow as pa

    from dstp.client._stream import QueryStream

__all__ = ["FILE_FORMATS", "check_file_format", "csv_header", "csv_rows", "csv_truncation_line", "partial_name",
           "preview_text", "remove_stale_partials", "save_result", "truncation_metadata", "write_netcdf"]

#: What ``save_result`` writes, by file extension.
FILE_FORMATS = {".arrow": "arrow", ".feather": "arrow", ".ipc": "arrow", ".parquet": "parquet", ".csv": "csv",
                ".nc": "nc"}

#: How NULL is written where an empty field would make a blank line (single-column results).
CSV_NULL = b"NA"

_BLANK_LINE = re.compile(rb"(?m)^$")


def preview_text(table: pa.Table) -> str:
    """Return ``table`` as a plain text table for a terminal: a header of column names, one line per record.

    Every value is shown exactly: floats as the shortest text that reads back as the same value of
    their own type (float32 as float32), times as ISO dates, NULL as ``NA`` (as in CSV). pyarrow
    and numpy only: loading pandas to print a few rows cost ``dstp query`` ~0.3 s of start-up.
    """
    import numpy as np
    import pyarrow as pa

    columns: list[list[str]] = []
    right: list[bool] = []
    for name, column in zip(table.column_names, table.columns):
        kind = column.type
        if pa.types.is_floating(kind):
            # as_py widens float16/32 to float exactly; numpy's scalar of the column's own width
            # prints the shortest text for that width (to_numpy and pyarrow.compute load pandas
            # or ~0.1 s of function wrappers).
            width = {16: np.float16, 32: np.float32, 64: np.float64}[kind.bit_width]
            cells = ["NA" if v is None else str(width(v)) for v in column.to_pylist()]
        else:
            cells = ["NA" if v is None else v.isoformat(sep=" ") if isinstance(v, dt.datetime) else
                     v.isoformat() if isinstance(v, (dt.date, dt.time)) else str(v) for v in column.to_pylist()]
        columns.append([name, *cells])
        right.append(not (pa.types.is_string(kind) or pa.types.is_large_string(kind)))
    widths = [max(map(len, cells)) for cells in columns]
    lines = []
    for row in zip(*columns):
        lines.append(" ".join(c.rjust(w) if r else c.ljust(w) for c, w, r in zip(row, widths, right)).rstrip())
    return "\n".join(lines)


def csv_header(schema: pa.Schema) -> bytes:
    """Return the CSV header line of ``schema`` (quoted names)."""
    import pyarrow.csv as pa_csv

    sink = io.BytesIO()
    pa_csv.write_csv(schema.empty_table(), sink)
    return sink.getvalue()


def _csv_lines(batch: pa.RecordBatch) -> bytes:
    import pyarrow.csv as pa_csv

    sink = io.BytesIO()
    pa_csv.write_csv(batch, sink, pa_csv.WriteOptions(include_header=False))
    return sink.getvalue()


def csv_rows(batch: pa.RecordBatch) -> bytes:
    """Return the records of ``batch`` as CSV lines (no header); see the module docstring for NULL."""
    import pyarrow as pa
    import pyarrow.compute as pc

    if batch.num_columns != 1 or batch.column(0).null_count == 0:
        return _csv_lines(batch)
    column = batch.column(0)
    multiline = (pa.types.is_string(column.type) or pa.types.is_large_string(column.type)) and bool(
        pc.any(pc.match_substring_regex(column, r"[\r\n]")).as_py())
    if not multiline:
        # one line per record, so the blank lines are exactly the NULLs
        text = _csv_lines(batch)
        return _BLANK_LINE.sub(CSV_NULL, text[:-1]) + b"\n"
    # text with line breaks (quoted): write the runs of values between the NULLs
    import numpy as np

    null = np.asarray(column.is_null().to_numpy(zero_copy_only=False))
    edges = np.flatnonzero(np.diff(null.astype(np.int8))) + 1
    out = []
    for start, stop in zip(np.r_[0, edges], np.r_[edges, len(null)]):
        if null[start]:
            out.append((CSV_NULL + b"\n") * int(stop - start))
        else:
            out.append(_csv_lines(batch.slice(int(start), int(stop - start))))
    return b"".join(out)


def csv_truncation_line(reason: str, rows: int) -> bytes:
    """Return the line that ends a CSV result the server cut: ``# dstp-truncated: {"truncated": {…}}``.

    Byte for byte the HTTP API's trailer (``dstp.http.formats.CsvEncoder.truncated``): a comment line no
    record can be, so one reader convention serves a saved file and an HTTP body alike.
    """
    notice = {"truncated": {"reason": reason, "rows": rows}}
    return b"# dstp-truncated: " + json.dumps(notice, separators=(",", ":")).encode() + b"\n"


def truncation_metadata(reason: str, rows: int) -> dict[str, str]:
    """Return the custom metadata of the empty record batch that ends an Arrow result the server cut.

    The HTTP API's Arrow stream ends with the same batch (``dstp.http.formats.ArrowEncoder.truncated``).
    """
    return {"dstp:truncated": "true", "dstp:truncated_reason": reason, "dstp:truncated_rows": str(rows)}


# -- netCDF -----------------------------------------------------------------------------


#: Attributes of the files that do not describe decoded values (how a file stores them), nor dstp's own.
_STORAGE_ATTRS = ("_FillValue", "missing_value", "scale_factor", "add_offset", "_Unsigned", "units", "calendar",
                  "dtype")


def write_netcdf(table: pa.Table, path: str | os.PathLike[str], time_units: Mapping[str, str] | None = None,
                 lock: ContextManager[Any] | None = None, *,
                 attributes: Mapping[str, Sequence[tuple[str, str]]] | None = None,
                 global_attributes: Sequence[tuple[str, str]] = ()) -> None:
    """Write a gridded result to ``path`` as CF-1.8 netCDF-4.

    ``time_units`` maps time columns to the units to encode them with (the
    dataset's, e.g. ``days since 1990-01-01``; otherwise xarray picks some).
    Times keep their calendar; units and CF attributes travel from the result
    schema; ``attributes`` (column → its variable's attributes in the files, as
    ``describe`` gives them) add every other attribute to the columns the query
    selected as they are, and ``global_attributes`` the files' global ones. The
    query is recorded in ``history``, and a result the server cut says so in the
    global attribute ``dstp_truncated``. ``lock`` is held while writing (the
    server passes its netCDF lock: HDF5 is not thread-safe). No attribute names a
    variable the file lacks (:func:`dstp.client._xarray.to_xarray`).
    """
    from dstp.client._xarray import _resolve_references, to_xarray

    ds = to_xarray(table)
    if attributes:
        for f in table.schema:
            bare = b"dstp:dimensions" in (f.metadata or {})  # the column as the files hold it, not an expression
            if bare and f.name in ds.variables and f.name in attributes:
                var = ds[f.name].variable
                for key, value in attributes[f.name]:
                    if key not in _STORAGE_ATTRS and key not in var.attrs and key not in var.encoding:
                        var.attrs[key] = value
        ds = _resolve_references(ds, table.schema.metadata or {})
    ds.attrs = {**{k: v for k, v in global_attributes if not k.startswith("dstp:")}, **ds.attrs}
    for name, units in (time_units or {}).items():
        if name in ds.variables and "calendar" in ds[name].encoding and ds[name].size:
            ds[name].encoding["units"] = units
    sql = ds.attrs.pop("dstp_query", "")
    dataset = ds.attrs.pop("dstp_dataset", "")
    now = dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
    files = dict(global_attributes)
    ds.attrs.update({"Conventions": "CF-1.8", "source": files.get("source") or f"dstp dataset {dataset}",
                     "history": (files["history"] + "\n" if files.get("history") else "") + f"{now} dstp query: {sql}"})
    with lock if lock is not None else contextlib.nullcontext():
        ds.to_netcdf(path, engine="netcdf4", format="NETCDF4")


# -- saving a stream --------------------------------------------------------------------


def partial_name(out: Path) -> Path:
    """Return the temporary name a result is written under until complete: ``.NAME.dstp-partial-<pid>``."""
    return out.with_name(f".{out.name}.dstp-partial-{os.getpid()}")


def remove_stale_partials(out: Path) -> list[Path]:
    """Remove the temporary files of earlier saves to ``out`` whose process is gone (killed before it could
    clean up); return them. A file of a process still running (another save of the same name) is kept."""
    removed = []
    prefix = f".{out.name}.dstp-partial-"
    try:
        names = [p for p in out.parent.iterdir() if p.name.startswith(prefix)]
    except OSError:
        return []
    for path in names:
        pid = path.name[len(prefix):]
        if not pid.isdigit() or int(pid) == os.getpid() or _running(int(pid)):
            continue
        try:
            path.unlink()
            removed.append(path)
        except OSError:
            pass
    return removed


def _running(pid: int) -> bool:
    """Return whether process ``pid`` exists (a pid reused by another process counts: the file is kept)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:  # PermissionError: it exists, another user's
        return True
    return True


def _write(stream: QueryStream, path: Path, kind: str, check: Callable[[], str | None],
           time_units: Mapping[str, str] | None) -> int:
    """Write the stream's records to ``path`` as ``kind``; ``check()`` runs once they are all in
    (it raises for a cut result the caller did not accept, else returns the cut's reason or None)."""
    import pyarrow as pa

    rows = 0

    def counted() -> Iterator[pa.RecordBatch]:
        nonlocal rows
        for batch in stream:
            rows += batch.num_rows
            yield batch

    schema = stream.schema
    if kind == "arrow":
        with pa.OSFile(str(path), "wb") as sink, pa.ipc.new_file(sink, schema) as writer:
            for b in counted():
                writer.write_batch(b)
            reason = check()
            if reason is not None:  # the footer's schema was fixed at the start: a last, marked batch says it
                empty = pa.record_batch([pa.array([], f.type) for f in schema], schema=schema)
                writer.write_batch(empty, custom_metadata=truncation_metadata(reason, rows))
    elif kind == "parquet":
        import pyarrow.parquet as pq

        with pq.ParquetWriter(str(path), schema) as writer:
            for b in counted():
                writer.write_batch(b)
            reason = check()
            if reason is not None:  # file metadata, written with the footer
                writer.add_key_value_metadata({"dstp:truncated": "true", "dstp:truncated_reason": reason})
    elif kind == "csv":
        with open(path, "wb") as f:
            f.write(csv_header(schema))
            for b in counted():
                f.write(csv_rows(b))
            reason = check()
            if reason is not None:
                f.write(csv_truncation_line(reason, rows))
    else:
        table = pa.Table.from_batches(list(counted()), schema=schema)
        write_netcdf(_marked(table, check()), path, time_units)
    return rows


def _marked(table: pa.Table, reason: str | None) -> pa.Table:
    """Return ``table`` with ``dstp:truncated`` and its reason in the schema metadata when ``reason`` is given."""
    if reason is None:
        return table
    meta = dict(table.schema.metadata or {})
    meta.update({b"dstp:truncated": b"true", b"dstp:truncated_reason": reason.encode()})
    return table.replace_schema_metadata(meta)


def check_file_format(out: Path, schema: pa.Schema) -> str:
    """Return what ``save_result`` writes to ``out`` (by its extension); raise ValueError if it cannot."""
    kind = FILE_FORMATS.get(out.suffix.lower())
    if kind is None:
        raise ValueError(f"cannot tell the format of {out.name} from its extension; "
                         "use .arrow, .parquet, .csv or .nc")
    if kind == "nc":
        from dstp.client._xarray import missing_grid_columns

        grid, missing = missing_grid_columns(schema)
        if missing:
            raise ValueError(
                f"{out.name}: netCDF rebuilds the grid ({' × '.join(grid)}), but the result lacks the coordinate "
                f"columns of {', '.join(missing)}; add them to the select list (or use select *), or save as "
                ".parquet, .arrow or .csv"
            )
    return kind


def save_result(stream: QueryStream, out: str | os.PathLike[str], *, allow_truncated: bool = False,
                time_units: Mapping[str, str] | None = None, accept: str = "pass allow_truncated=True") -> int:
    """Save a query's records to ``out`` whole or not at all; return the number of records.

    The format follows the extension (.arrow/.feather/.ipc, .parquet, .csv,
    .nc). The records go to :func:`partial_name` beside ``out``, which
    replaces ``out`` only once the result is complete (every batch and the
    summary arrived). On any failure — the transfer breaking, Ctrl-C, a result
    cut at a server limit without ``allow_truncated`` (TruncatedResultError,
    whose message suggests ``accept``) — the temporary file is removed and
    ``out`` is left as it was. An accepted cut result is marked in every
    format: CSV ends with a ``# dstp-truncated: {…}`` line, Arrow with an
    empty record batch whose custom metadata holds ``dstp:truncated``,
    ``dstp:truncated_reason`` and ``dstp:truncated_rows`` (the HTTP API's
    marks), Parquet has ``dstp:truncated`` and ``dstp:truncated_reason`` in its
    file metadata, netCDF the global attribute ``dstp_truncated``.
    """
    from dstp.client._stream import truncation_message

    out = Path(out)
    kind = check_file_format(out, stream.schema)
    stream.allow_truncated, stream._warn = True, False  # decided here, once every record is in

    def check() -> str | None:
        reason = stream.truncated_reason
        if reason is not None and not allow_truncated:
            err = TruncatedResultError(truncation_message(stream.summary or {}, accept) +
                                       f"; {out} was not written")
            err.summary = stream.summary
            raise err
        return reason

    remove_stale_partials(out)  # a killed save of the same file left one: it would stay, hidden, forever
    partial = partial_name(out)
    try:
        rows = _write(stream, partial, kind, check, time_units)
        with open(partial, "rb") as f:
            os.fsync(f.fileno())  # the bytes are on disk before the name says the file is complete
        os.replace(partial, out)
    except BaseException:
        partial.unlink(missing_ok=True)
        raise
    return rows
