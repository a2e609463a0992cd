"""Rebuilding gridded data from records: ``to_xarray(table)``."""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import pyarrow as pa

__all__ = ["missing_grid_columns", "to_xarray"]

_ISO = re.compile(r"(-?\d+)-(\d\d)-(\d\d)T(\d\d):(\d\d):(\d\d)(?:\.(\d{1,6}))?")


def _decode_iso(values: Any, calendar: str) -> Any:
    import cftime
    import numpy as np

    out: list[Any] = []
    for text in values:
        if text is None:
            out.append(None)
            continue
        m = _ISO.fullmatch(text)
        if m is None:
            raise ValueError(f"{text!r} is not an ISO 8601 date-time")
        y, mo, d, h, mi, s = (int(m[i]) for i in range(1, 7))
        out.append(cftime.datetime(y, mo, d, h, mi, s, int((m[7] or "0").ljust(6, "0")), calendar=calendar))
    return np.array(out, dtype=object)


def missing_grid_columns(schema: pa.Schema) -> tuple[list[str], list[str]]:
    """Return (the result's grid dimensions, those without a coordinate column in ``schema``)."""
    grid = (schema.metadata or {}).get(b"dstp:grid", b"").decode().split()
    return grid, [d for d in grid if d not in _dimension_columns(schema, grid)]


def _dimension_columns(schema: pa.Schema, grid: list[str]) -> dict[str, str]:
    """Return {dimension: column} for the coordinate columns of ``schema``."""
    dims_of: dict[str, str] = {}
    for f in schema:
        dim = (f.metadata or {}).get(b"dstp:dimension", b"").decode()
        if dim:
            dims_of[dim] = f.name
        elif f.name in grid:
            dims_of[f.name] = f.name
    return dims_of


#: Attributes xarray writes itself from a variable's encoding (and refuses to find in its attrs too).
_ENCODING_KEYS = ("_FillValue", "missing_value", "scale_factor", "add_offset", "dtype")


#: Attributes that name other variables (CF 1.8), and how each lists them.
_REFERENCES = ("coordinates", "bounds", "climatology", "ancillary_variables", "cell_measures", "grid_mapping")


def _names_in(key: str, value: str) -> list[str]:
    """Return the variable names a reference attribute holds (``cell_measures: area: cell_area`` too)."""
    if key in ("cell_measures", "grid_mapping") and ":" in value:
        words = value.replace(":", " : ").split()
        return [w for i, w in enumerate(words) if w != ":" and (i + 1 >= len(words) or words[i + 1] != ":")]
    return value.split()


def _grid_mapping_variable(wkt: str) -> Any:
    """Return a CF grid mapping variable for a CRS given as WKT (its CF parameters when pyproj is installed)."""
    import numpy as np
    import xarray as xr

    attrs: dict[str, Any] = {"crs_wkt": wkt}
    try:
        import pyproj

        attrs = {**pyproj.CRS.from_wkt(wkt).to_cf(), "crs_wkt": wkt}
    except ImportError:
        pass
    return xr.Variable((), np.int32(0), attrs)


def _resolve_references(ds: Any, meta: dict[bytes, bytes]) -> Any:
    """Return ``ds`` with no attribute naming a variable it lacks: a grid mapping the result describes (its WKT in
    ``dstp:crs_wkt:<name>``) is added as its variable; any other name is dropped, and an attribute left empty too."""
    mappings = {k.decode()[len("dstp:crs_wkt:"):]: v.decode() for k, v in meta.items()
                if k.startswith(b"dstp:crs_wkt:") and v}
    wanted = {n for var in ds.variables.values() if isinstance(var.attrs.get("grid_mapping"), str)
              for n in _names_in("grid_mapping", var.attrs["grid_mapping"]) if n not in ds.variables and n in mappings}
    if wanted:
        ds = ds.assign({n: _grid_mapping_variable(mappings[n]) for n in sorted(wanted)})
    for var in ds.variables.values():
        for key in _REFERENCES:
            value = var.attrs.get(key)
            if not isinstance(value, str):
                continue
            names = _names_in(key, value)
            if all(n in ds.variables for n in names):
                continue
            kept = [n for n in names if n in ds.variables] if key == "coordinates" else []
            if kept:
                var.attrs[key] = " ".join(kept)
            else:
                del var.attrs[key]
    return ds


def to_xarray(table: pa.Table) -> Any:
    """Return the records of a dstp result as an ``xarray.Dataset`` on its grid.

    The table must hold one coordinate column per grid dimension (as
    ``select *`` does); grid points the query filtered out become NaN.
    Units and CF attributes travel from the result schema; times on
    non-Gregorian calendars become cftime objects of that calendar. A time
    variable's ``calendar`` (and ``units`` when the result names them) sit
    in its ``encoding``, as when xarray opens a file, so ``to_netcdf()``
    writes them. A result the server cut (``dstp:truncated``) says so in
    ``attrs["dstp_truncated"]``.
    """
    import pandas as pd
    import pyarrow as pa
    import xarray as xr

    meta = table.schema.metadata or {}
    grid, missing = missing_grid_columns(table.schema)
    if missing:
        raise ValueError(
            f"the result lacks the coordinate columns of {', '.join(missing)}; select them "
            "(or use select *) to rebuild the grid"
        )
    dims_of = _dimension_columns(table.schema, grid)
    frame = table.to_pandas()
    for f in table.schema:
        fmeta = f.metadata or {}
        calendar = fmeta.get(b"calendar", b"").decode()
        if calendar and pa.types.is_string(f.type):
            frame[f.name] = _decode_iso(frame[f.name], calendar)
    index = [dims_of[d] for d in grid]
    ds = frame.set_index(index).to_xarray() if index else xr.Dataset.from_dataframe(frame)
    # pandas sorts the index; restore each coordinate's order in the data (descending latitudes).
    ds = ds.reindex({name: pd.unique(frame[name]) for name in index})
    for f in table.schema:
        if f.name not in ds.variables or not f.metadata:
            continue
        var = ds[f.name]
        attrs = {k.decode(): v.decode() for k, v in f.metadata.items() if not k.startswith(b"dstp:")}
        for key in _ENCODING_KEYS:  # the values are decoded already: these describe a file, not them
            attrs.pop(key, None)
        calendar = attrs.pop("calendar", None)
        if calendar:
            var.encoding["calendar"] = calendar
            var.encoding["dtype"] = "float64"  # any units encode exactly enough; no int64 surprise
            if " since " in attrs.get("units", ""):
                var.encoding["units"] = attrs.pop("units")
            if var.size == 0:
                # an empty axis has nothing to encode (and xarray cannot encode an empty one on a
                # non-standard calendar): plain numbers with the attributes that make them times
                ds = ds.assign_coords({f.name: (var.dims, var.values.astype("float64"))}) if f.name in ds.coords \
                    else ds.assign({f.name: (var.dims, var.values.astype("float64"))})
                var = ds[f.name]
                attrs.update({"units": "days since 1970-01-01", "calendar": calendar})
        var.attrs.update(attrs)
    ds = _resolve_references(ds, meta)
    ds.attrs["dstp_dataset"] = meta.get(b"dstp:dataset", b"").decode()
    ds.attrs["dstp_query"] = meta.get(b"dstp:sql", b"").decode()
    if meta.get(b"dstp:truncated") == b"true":
        ds.attrs["dstp_truncated"] = meta.get(b"dstp:truncated_reason", b"true").decode()
    return ds
