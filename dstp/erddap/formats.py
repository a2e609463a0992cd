"""What the ERDDAP facade sends: its tables as ERDDAP writes them, its metadata documents, its errors.

Every data answer is an :class:`ErddapTable` (names, ERDDAP types, units,
columns) made from the query's Arrow result, then written as

* ``.csv`` — names, then units, then rows; missing numbers ``NaN``, missing text and times empty (as ERDDAP
  writes them), a text that would read as missing (``NaN``, empty) or that holds a comma, quote or line
  break in double quotes; times ``2000-01-16T00:00:00Z``;
* ``.csvp`` — one header line ``name (units)``, then rows (erddapy's ``to_pandas`` default);
* ``.json`` — ``{"table": {"columnNames", "columnTypes", "columnUnits", "rows"}}``, missing as ``null``;
* ``.htmlTable`` — an HTML page with one table (texts as they are, missing text empty);
* ``.nc`` — netCDF-4: griddap on its axes (times in the dataset's own units and calendar, so xarray
  decodes them as it would the files), tabledap one ``row`` dimension with times as the facade's numbers
  (:meth:`ErddapDataset.time_number_units`: ERDDAP's seconds since 1970, proleptic Gregorian, on noleap
  too); ``.ncCF`` the same with ``featureType = "point"`` on an ``obs`` dimension (erddapy's
  ``to_xarray`` for tabledap);
* ``.parquet`` — the Arrow result as Parquet, schema metadata (units, calendars) kept.

Errors are ERDDAP's plain-text body, ``Error {\\n    code=404;\\n    message="Not Found: …";\\n}``.
"""

from __future__ import annotations

import html
import io
import json
import math
import re
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from dstp.catalog.netcdf4_ import NETCDF_LOCK
from dstp.erddap.dataset import ERDDAP_TIME_UNITS, ErddapDataset, GridRequest, erddap_type, render_time
from dstp.erddap.times import parse_label
from dstp.erddap.ucum import udunits_to_ucum

__all__ = ["ErddapTable", "error_body", "from_arrow", "grid_netcdf", "table_netcdf", "render", "MEDIA_TYPES",
           "das", "dds", "ncml", "attributes_of"]

MEDIA_TYPES = {
    "csv": "text/csv; charset=ISO-8859-1", "csvp": "text/csv; charset=ISO-8859-1",
    "json": "application/json; charset=UTF-8", "htmlTable": "text/html; charset=UTF-8",
    "html": "text/html; charset=UTF-8", "nc": "application/x-netcdf", "ncCF": "application/x-netcdf",
    "parquet": "application/vnd.apache.parquet", "das": "text/plain; charset=ISO-8859-1",
    "dds": "text/plain; charset=ISO-8859-1", "ncml": "application/xml", "txt": "text/plain; charset=UTF-8",
}

_REASONS = {400: "Bad Request", 401: "Unauthorized", 403: "Forbidden", 404: "Not Found", 409: "Conflict",
            413: "Payload Too Large", 429: "Too Many Requests", 499: "Client Closed Request",
            500: "Internal Server Error", 503: "Service Unavailable", 504: "Gateway Timeout"}


def error_body(status: int, message: str) -> str:
    """Return ERDDAP's error body for an HTTP status."""
    text = f"{_REASONS.get(status, 'Error')}: {message}".replace("\\", "\\\\").replace('"', '\\"')
    return f'Error {{\n    code={status};\n    message="{text}";\n}}\n'


@dataclass(frozen=True, slots=True)
class ErddapTable:
    """A table as ERDDAP describes it: names, ERDDAP types, units, and the columns' values."""

    names: list[str]
    types: list[str]
    units: list[str]
    #: Python lists (metadata tables), or Arrow columns (query results: written column by column).
    columns: Sequence[Sequence[Any] | pa.ChunkedArray]
    #: A catalog table (info, search): ERDDAP writes no units line for it.
    metadata: bool = False

    @property
    def rows(self) -> int:
        return len(self.columns[0]) if self.columns else 0

    def values(self) -> list[list[Any]]:
        """Return the columns as Python lists."""
        return [c.to_pylist() if isinstance(c, pa.ChunkedArray) else list(c) for c in self.columns]

    def texts(self) -> list[list[str]]:
        """Return the columns as ERDDAP's CSV cells, an Arrow column converted in one pass."""
        return [_csv_column(c, t) for c, t in zip(self.columns, self.types)]

    def cells(self) -> list[list[str]]:
        """Return the columns as the texts of HTML cells: text as it is, missing text empty, numbers as in CSV."""
        return [_csv_column(c, t) if not _is_text(c, t) else
                ["" if v is None else str(v) for v in (c.to_pylist() if isinstance(c, pa.ChunkedArray) else c)]
                for c, t in zip(self.columns, self.types)]


def from_arrow(table: pa.Table, ds: ErddapDataset | None = None, *, ucum: bool = False) -> ErddapTable:
    """Return an Arrow result as an ErddapTable (times as ISO text in UTC, units from the dataset, in UCUM if asked)."""
    names: list[str] = []
    types: list[str] = []
    units: list[str] = []
    columns: list[Sequence[Any] | pa.ChunkedArray] = []
    infos = ds.columns if ds is not None else {}
    for f, col in zip(table.schema, table.columns):
        info = infos.get(f.name)
        is_time = pa.types.is_timestamp(f.type) or (info is not None and " since " in info.units)
        names.append(f.name)
        if is_time:
            types.append("String")
            units.append("UTC")
            if pa.types.is_timestamp(f.type):  # whole seconds, as ERDDAP writes them
                seconds = pc.cast(col, pa.timestamp("s", f.type.tz), safe=False)
                columns.append(pc.strftime(seconds, format="%Y-%m-%dT%H:%M:%SZ"))
            else:
                columns.append([render_time(v) if v is not None else None for v in col.to_pylist()])
            continue
        arrow = str(f.type)
        types.append(erddap_type(arrow))
        meta = f.metadata or {}
        unit = meta.get(b"units", b"").decode() or (info.units if info is not None else "")
        units.append(udunits_to_ucum(unit) if ucum else unit)
        columns.append(col)
    return ErddapTable(names, types, units, columns)


def _csv_text(value: str | None) -> str:
    """Return a text as a CSV cell: empty when missing (NULL), as ERDDAP writes a missing String.

    A real text is quoted where bare it would be misread: a comma, quote or line break, or a cell that reads
    as missing — the empty text and ``NaN`` (the missing number), so ``"NaN"`` is the text and an empty cell
    its absence (Python's csv and ``pandas.read_csv(keep_default_na=False)`` keep them apart; pandas'
    defaults read any NaN, quoted or not, as missing).
    """
    if value is None:
        return ""
    if value == "" or value.lower() == "nan" or any(c in value for c in ',"\n\r'):
        return '"' + value.replace('"', '""') + '"'
    return value


def _csv_cell(value: Any) -> str:
    """Return a number (or a text) of a metadata table as a CSV cell; missing numbers are ``NaN``."""
    if isinstance(value, str):
        return _csv_text(value)
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "NaN"
    if isinstance(value, bool):
        return "true" if value else "false"
    return repr(value) if isinstance(value, float) else str(value)


def _is_text(column: Sequence[Any] | pa.ChunkedArray, erddap: str) -> bool:
    """Return True for a column ERDDAP writes as text (String: texts, times), whose missing cells are empty."""
    if isinstance(column, pa.ChunkedArray):
        t = column.type
        return not (pa.types.is_floating(t) or pa.types.is_integer(t) or pa.types.is_boolean(t))
    return erddap == "String"


def _csv_column(column: Sequence[Any] | pa.ChunkedArray, erddap: str = "") -> list[str]:
    """Return one column as CSV cells; numbers of an Arrow column are formatted by Arrow in one pass."""
    if not isinstance(column, pa.ChunkedArray):
        if _is_text(column, erddap):
            # A metadata table's "" is ERDDAP's nothing (no griddap URL, no institution), written bare.
            return [_csv_text(None if v is None or v == "" else str(v)) for v in column]
        return [_csv_cell(v) for v in column]
    t = column.type
    if pa.types.is_floating(t):
        wide = pc.cast(column, pa.float64())  # float32 written as the exact double, like repr() of its value
        text = pc.if_else(pc.is_nan(wide), "NaN", pc.cast(wide, pa.string()))
        out: list[str] = pc.fill_null(text, "NaN").to_pylist()
        return out
    if pa.types.is_integer(t):
        return pc.fill_null(pc.cast(column, pa.string()), "NaN").to_pylist()  # type: ignore[no-any-return]
    if pa.types.is_boolean(t):
        return pc.fill_null(pc.if_else(column, "true", "false"), "NaN").to_pylist()  # type: ignore[no-any-return]
    return [_csv_text(None if v is None else str(v)) for v in column.to_pylist()]


def _json_cell(value: Any) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


def render(t: ErddapTable, fmt: str, title: str = "") -> bytes:
    """Return ``t`` as ERDDAP's csv, csvp, json or htmlTable."""
    if fmt in ("csv", "csvp"):
        out = io.StringIO()
        if fmt == "csv" and not t.metadata:
            out.write(",".join(t.names) + "\n" + ",".join(t.units) + "\n")
        else:
            out.write(",".join(f"{n} ({u})" if u else n for n, u in zip(t.names, t.units)) + "\n")
        out.writelines(",".join(row) + "\n" for row in zip(*t.texts()))
        return out.getvalue().encode("latin-1", "replace")
    if fmt == "json":
        rows = [[_json_cell(v) for v in row] for row in zip(*t.values())]
        document = {"table": {"columnNames": t.names, "columnTypes": t.types, "columnUnits": t.units, "rows": rows}}
        return json.dumps(document, allow_nan=False).encode()
    if fmt in ("htmlTable", "html"):
        head = "".join(f"<th>{html.escape(n)}</th>" for n in t.names)
        unit_row = "".join(f"<th>{html.escape(u)}</th>" for u in t.units)
        body = "".join("<tr>" + "".join(f"<td>{html.escape(v)}</td>" for v in row) + "</tr>\n"
                       for row in zip(*t.cells()))
        page = (f"<!DOCTYPE html>\n<html><head><meta charset=\"UTF-8\"><title>{html.escape(title)}</title></head>"
                f"<body><table class=\"erd commonBGColor nowrap\">\n<tr>{head}</tr>\n<tr>{unit_row}</tr>\n{body}"
                "</table></body></html>\n")
        return page.encode()
    raise ValueError(fmt)


def parquet(table: pa.Table) -> bytes:
    sink = io.BytesIO()
    pq.write_table(table, sink)
    return sink.getvalue()


# -- netCDF -------------------------------------------------------------------------------------------------

def _nc_bytes(write: Any) -> bytes:
    import netCDF4

    with tempfile.TemporaryDirectory(prefix="dstp-erddap-") as folder:
        path = Path(folder) / "out.nc"
        with NETCDF_LOCK:
            with netCDF4.Dataset(path, "w", format="NETCDF4") as nc:
                write(nc)
        return path.read_bytes()


#: Attributes that say how a file stores values: the answers hold decoded values, so these no longer apply.
_STORAGE = ("_FillValue", "missing_value", "scale_factor", "add_offset", "_Unsigned", "calendar", "units")
#: Attributes that name other variables (CF 1.8): in a file they must name variables the file holds.
_REFERENCES = ("coordinates", "grid_mapping", "bounds", "climatology", "ancillary_variables", "cell_measures")


def _referenced(key: str, value: str) -> list[str]:
    """Return the variable names a reference attribute holds (``cell_measures: area: cell_area`` too)."""
    if key == "cell_measures" or (key == "grid_mapping" and ":" in value):
        return [w for w in value.replace(":", " ").split() if w not in ("area", "volume") and not w.endswith(":")]
    return value.split()


def _attrs_of(ds: ErddapDataset, name: str, present: set[str] | None = None) -> dict[str, str]:
    """Return a column's attributes for an answer: every attribute of its variable but how a file stores it.

    ``present`` — the variables a netCDF answer holds: a reference attribute (``coordinates``,
    ``grid_mapping``, ``bounds``, …) keeps only the names it holds, and is left out when it holds none, so
    no file names a variable it lacks. Metadata documents (``present`` None) keep every reference.
    """
    info = ds.columns.get(name)
    if info is None:
        return {}
    attrs = {k: v for k, v in info.cf if k not in _STORAGE}
    if present is not None:
        for key in _REFERENCES:
            if key in attrs:
                names = _referenced(key, attrs[key])
                if not names or not all(n in present for n in names):
                    kept = [n for n in attrs[key].split() if n in present] if key == "coordinates" else []
                    if kept:
                        attrs[key] = " ".join(kept)
                    else:
                        del attrs[key]
    if info.units:
        attrs["units"] = info.units
    if info.description and "long_name" not in attrs:
        attrs["long_name"] = info.description
    return attrs


#: A column's attributes for an answer of decoded values (the OPeNDAP door shares them).
attributes_of = _attrs_of


def _time_values(column: pa.ChunkedArray) -> np.ndarray:
    """Return a time column as numpy: datetime64[us] for timestamps, ISO text (None where missing) otherwise."""
    if pa.types.is_timestamp(column.type):
        return np.asarray(pc.cast(column, pa.timestamp("us", column.type.tz), safe=False)
                          .to_numpy(zero_copy_only=False)).astype("datetime64[us]")
    return np.asarray(column.to_pylist(), dtype=object)


def _own_numbers(column: pa.ChunkedArray, units: str, calendar: str) -> np.ndarray:
    """Return times counted in ``units`` on ``calendar`` (the dataset's own; NaN where missing)."""
    import cftime

    values = column.to_pylist()
    out = np.full(len(values), np.nan)
    present = [(i, v) for i, v in enumerate(values) if v is not None]
    if present:
        dates = [cftime.datetime(v.year, v.month, v.day, v.hour, v.minute, v.second, v.microsecond,
                                 calendar=calendar) if not isinstance(v, str) else parse_label(v, calendar)
                 for _, v in present]
        out[[i for i, _ in present]] = np.asarray(cftime.date2num(dates, units, calendar), dtype="float64")
    return out


def _write_column(nc: Any, ds: ErddapDataset, name: str, dims: tuple[str, ...], column: pa.ChunkedArray,
                  shape: tuple[int, ...], present: set[str], own_times: bool) -> None:
    """Write one column; times as ERDDAP's seconds, or (``own_times``) in the dataset's own units and calendar."""
    attrs = _attrs_of(ds, name, present)
    time = ds.time_axis(name)
    if time is not None:
        var = nc.createVariable(name, "f8", dims)
        if own_times:
            calendar = time.calendar or "standard"
            units = time.units if " since " in time.units else ERDDAP_TIME_UNITS
            var[:] = _own_numbers(column, units, calendar).reshape(shape)
        else:
            units, calendar = ds.time_number_units(name)
            var[:] = time.seconds(_time_values(column)).reshape(shape)
        attrs.update({"units": units, "calendar": calendar})
    elif pa.types.is_string(column.type):
        var = nc.createVariable(name, str, dims)
        var[:] = np.asarray([v if v is not None else "" for v in column.to_pylist()], dtype=object).reshape(shape)
    else:
        values = column.to_numpy()
        if values.dtype.kind in "iub" and column.null_count:
            values = column.cast(pa.float64()).to_numpy(zero_copy_only=False)
        kind = values.dtype
        fill = np.array(np.nan, kind) if kind.kind == "f" else None
        var = nc.createVariable(name, kind, dims, fill_value=fill)
        var[:] = values.reshape(shape)
    var.setncatts(attrs)


def _number_or_text(text: str) -> Any:
    try:
        value = float(text)
    except ValueError:
        return text
    return int(value) if value.is_integer() and re.fullmatch(r"-?\d+", text.strip()) else value


def _write_grid_mappings(nc: Any, ds: ErddapDataset, names: Sequence[str]) -> set[str]:
    """Write the grid mapping variables the columns ``names`` use (CF 5.6); return the names written."""
    used: set[str] = set()
    for n in names:
        info = ds.columns.get(n)
        value = dict(info.cf).get("grid_mapping", "") if info is not None else ""
        used.update(_referenced("grid_mapping", value))
    written: set[str] = set()
    for m in ds.details.grid_mappings:
        if m.name not in used or m.name in nc.variables:
            continue
        dtype = np.dtype(m.dtype) if m.dtype and np.dtype(m.dtype).kind in "iuf" else np.dtype("int32")
        var = nc.createVariable(m.name, dtype, ())
        if m.value:
            var.assignValue(np.asarray(_number_or_text(m.value)).astype(dtype))
        attrs = {k: _number_or_text(v) for k, v in m.parameters if k not in _STORAGE}
        if m.wkt and "crs_wkt" not in attrs:
            attrs["crs_wkt"] = m.wkt
        var.setncatts(attrs)
        written.add(m.name)
    return written


def grid_netcdf(table: pa.Table, ds: ErddapDataset, dims: Sequence[str], shape: Sequence[int],
                axis_columns: Sequence[str], sql: str) -> bytes:
    """Return a griddap result as netCDF-4 on its axes (records in C order over ``dims``), with its grid mapping."""
    def write(nc: Any) -> None:
        _globals(nc, ds, sql)
        by_dim = {d.name: d for d in ds.details.dimensions}
        for dim, n in zip(dims, shape):
            nc.createDimension(dim, n)
        present = set(table.column_names) | _write_grid_mappings(nc, ds, table.column_names)
        for i, (dim, col) in enumerate(zip(dims, axis_columns)):
            # An axis's values: one per index, taken from the records (C order: axis i varies with stride).
            inner = int(np.prod(shape[i + 1:]))
            column = table.column(col).take(pa.array(np.arange(shape[i]) * inner)) if table.num_rows else \
                table.column(col)
            d = by_dim[dim]
            _write_column(nc, ds, col, (dim,), column, (shape[i],), present, own_times=True)
            nc.variables[col].setncattr("axis", d.axis) if d.axis in ("X", "Y", "Z", "T") else None
        for col in table.column_names:
            if col in axis_columns:
                continue
            _write_column(nc, ds, col, tuple(dims), table.column(col), tuple(shape), present, own_times=True)
    return _nc_bytes(write)


def table_netcdf(table: pa.Table, ds: ErddapDataset, sql: str, *, cf: bool) -> bytes:
    """Return a tabledap result as netCDF-4 with one dimension (``row``; ``obs`` and featureType point for ncCF)."""
    dim = "obs" if cf else "row"

    def write(nc: Any) -> None:
        _globals(nc, ds, sql)
        if cf:
            nc.setncattr("featureType", "point")
            nc.setncattr("cdm_data_type", "Point")
        nc.createDimension(dim, table.num_rows)
        present = set(table.column_names)
        for col in table.column_names:
            # Times as the numbers a constraint takes and .das gives, so a value read here finds its record again.
            _write_column(nc, ds, col, (dim,), table.column(col), (table.num_rows,), present, own_times=False)
    return _nc_bytes(write)


def _globals(nc: Any, ds: ErddapDataset, sql: str) -> None:
    for k, v in ds.details.global_attributes:
        if not k.startswith("dstp:"):
            nc.setncattr(k, v)
    nc.setncattr("Conventions", "CF-1.8, ACDD-1.3")
    history = dict(ds.details.global_attributes).get("history", "")
    nc.setncattr("history", (history + "\n" if history else "") + f"dstp ERDDAP facade: {sql}")


# -- metadata documents ------------------------------------------------------------------------------------

def _das_type(erddap: str) -> str:
    return {"double": "Float64", "float": "Float32", "int": "Int32", "short": "Int16", "byte": "Byte",
            "long": "Float64", "String": "String"}.get(erddap, "String")


def _dap_type(ds: ErddapDataset, name: str) -> str:
    """Return a column's DAP type: times are Float64 seconds on every calendar, as ERDDAP sends them."""
    return "Float64" if ds.time_axis(name) is not None else _das_type(erddap_type(ds.columns[name].arrow_type))


def _axis_attrs(ds: ErddapDataset, dim: Any) -> list[tuple[str, str, str]]:
    """Return (DAS type, name, value) of an axis's attributes, with actual_range (ERDDAP's seconds for times)."""
    values = ds.axis_values.get(dim.name)
    out: dict[str, tuple[str, str]] = {}
    info = ds.columns.get(dim.coordinate)
    if info is not None:
        out.update({k: ("String", v) for k, v in info.cf if k not in _STORAGE})
    time = ds.time_axis(dim.coordinate)
    if time is not None:
        out["units"] = ("String", ERDDAP_TIME_UNITS)
        out["_CoordinateAxisType"] = ("String", "Time")
    elif dim.units:
        out["units"] = ("String", dim.units)
    if values is not None and len(values):
        numbers = ds.axis_numbers(dim)
        out["actual_range"] = ("Float64", f"{float(np.nanmin(numbers))!r} {float(np.nanmax(numbers))!r}")
    if dim.axis in ("X", "Y", "Z", "T"):
        out["axis"] = ("String", dim.axis)
    return [(kind, key, value) for key, (kind, value) in out.items()]


def _variable_attrs(ds: ErddapDataset, name: str) -> list[tuple[str, str, str]]:
    time = ds.time_axis(name)
    attrs = _attrs_of(ds, name)
    if time is not None:
        attrs["units"] = ERDDAP_TIME_UNITS
    return [("String", k, v) for k, v in attrs.items()]


def _das_text(value: str) -> str:
    """Return a DAS string, quoted, with its quotes and backslashes escaped (DAP 2)."""
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'


def das(ds: ErddapDataset, grid: bool) -> str:
    """Return the OPeNDAP DAS of a griddap or tabledap dataset."""
    lines = ["Attributes {"]
    blocks: list[tuple[str, list[tuple[str, str, str]]]] = []
    if grid:
        blocks += [(d.coordinate, _axis_attrs(ds, d)) for d in ds.axes]
        blocks += [(v.name, _variable_attrs(ds, v.name)) for v in ds.grid_variables]
    else:
        lines.append(" s {")
        by_coord = {d.coordinate: d for d in ds.details.dimensions if d.coordinate}
        blocks += [(n, _axis_attrs(ds, by_coord[n]) if n in by_coord else _variable_attrs(ds, n)) for n in ds.columns]
    indent = "  " if grid else "    "
    for name, attrs in blocks:
        lines.append(f"{indent}{name} {{")
        for kind, key, value in attrs:
            shown = _das_text(value) if kind == "String" else value.replace(" ", ", ")
            lines.append(f"{indent}  {kind} {key} {shown};")
        lines.append(f"{indent}}}")
    if not grid:
        lines.append(" }")
    lines.append("  NC_GLOBAL {")
    for k, v in ds.details.global_attributes:
        lines.append(f"    String {k} {_das_text(v)};")
    lines.append("  }")
    lines.append("}")
    return "\n".join(lines) + "\n"


def dds(ds: ErddapDataset, grid: bool, request: GridRequest | None = None,
        columns: Sequence[str] | None = None) -> str:
    """Return the OPeNDAP DDS of a griddap or tabledap dataset, or of the subset a query asks for.

    ``request`` (griddap): only its variables, each axis as long as its range; ``columns`` (tabledap): only
    those variables — as ERDDAP's ``.dds?var[0:1:1]…`` describes what the same query would return.
    """
    lines = ["Dataset {"]
    if grid:
        def size(d: Any) -> int:
            if request is None:
                return int(d.size)
            start, stride, stop = request.ranges[d.name]
            return len(range(start, stop + 1, stride))

        axes = ds.axes
        wanted = [v for v in ds.grid_variables if request is None or v.name in request.variables]
        if request is not None and request.axes_only:
            axes = [d for d in axes if d.coordinate in request.variables or d.name in request.variables]
        shape = "".join(f"[{d.name} = {size(d)}]" for d in ds.axes)
        for d in axes:
            if request is None or request.axes_only or not wanted:
                lines.append(f"  {_dap_type(ds, d.coordinate)} {d.coordinate}[{d.name} = {size(d)}];")
        for v in wanted:
            lines += ["  GRID {", "    ARRAY:", f"      {_dap_type(ds, v.name)} {v.name}{shape};", "    MAPS:"]
            lines += [f"      {_dap_type(ds, d.coordinate)} {d.coordinate}[{d.name} = {size(d)}];" for d in ds.axes]
            lines.append(f"  }} {v.name};")
    else:
        lines.append("  Sequence {")
        chosen = [ds.columns[c] for c in columns] if columns is not None else list(ds.columns.values())
        lines += [f"    {_dap_type(ds, c.name)} {c.name};" for c in chosen]
        lines.append("  } s;")
    lines.append(f"}} {ds.id};")
    return "\n".join(lines) + "\n"


def ncml(ds: ErddapDataset, location: str) -> str:
    """Return the NcML of a griddap dataset (what erddapy reads to learn axes, ranges and variables)."""
    from xml.sax.saxutils import quoteattr

    out = ['<?xml version="1.0" encoding="UTF-8"?>',
           f'<netcdf xmlns="https://www.unidata.ucar.edu/namespaces/netcdf/ncml-2.2" location={quoteattr(location)}>']
    out += [f"  <attribute name={quoteattr(k)} value={quoteattr(v)} />" for k, v in ds.details.global_attributes]
    out += [f"  <dimension name={quoteattr(d.name)} length=\"{d.size}\" />" for d in ds.axes]
    for d in ds.axes:
        info = ds.columns[d.coordinate]
        out.append(f'  <variable name={quoteattr(d.coordinate)} shape={quoteattr(d.name)} '
                   f'type="{"double" if d.calendar else erddap_type(info.arrow_type)}">')
        for kind, key, value in _axis_attrs(ds, d):
            typ = ' type="double"' if kind == "Float64" else ""
            out.append(f"    <attribute name={quoteattr(key)}{typ} value={quoteattr(value)} />")
        out.append("  </variable>")
    shape = " ".join(d.name for d in ds.axes)
    for v in ds.grid_variables:
        out.append(f'  <variable name={quoteattr(v.name)} shape="{shape}" type="{erddap_type(v.arrow_type)}">')
        out += [f"    <attribute name={quoteattr(k)} value={quoteattr(val)} />"
                for k, val in _attrs_of(ds, v.name).items()]
        out.append("  </variable>")
    out.append("</netcdf>")
    return "\n".join(out) + "\n"
