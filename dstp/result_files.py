"""Results as CSV text and netCDF files, the same whichever door wrote them.

The CLI (``dstp query -o``, :mod:`dstp.client._output`) and the HTTP API (``format=csv``, ``format=nc``,
:mod:`dstp.http.formats`) both write through these functions, so a file looks the same whichever way it was
asked for. Framework-free and below both (the "formats" layer of docs/architecture.md).

* CSV: a header line, then one line per record; NULL is an empty field,
  except in a single-column result, where an empty field would be a blank
  line that CSV readers skip (pandas does by default, silently losing the
  row): there NULL is written ``NA``, which pandas, R and pyarrow read as
  missing by default.
* netCDF: :func:`write_netcdf` rebuilds the grid with :func:`dstp.result_grid.to_xarray`
  (times keep their calendar and units in ``encoding``) and writes CF-1.8.
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
from typing import TYPE_CHECKING, Any, ContextManager, Mapping, Sequence

if TYPE_CHECKING:
    import pyarrow as pa

__all__ = ["CSV_NULL", "csv_header", "csv_rows", "csv_truncation_line", "truncation_metadata", "write_netcdf"]

#: How NULL is written where an empty field would make a blank line (single-column results).
CSV_NULL = b"NA"

_BLANK_LINE = re.compile(rb"(?m)^$")


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
    variable the file lacks (:func:`dstp.result_grid.to_xarray`).
    """
    from dstp.result_grid import _resolve_references, to_xarray

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
