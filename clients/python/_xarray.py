"""Rebuilding gridded data from records: ``to_xarray(table)``."""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import pyarrow as pa

__all__ = ["to_xarray"]

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


def to_xarray(table: pa.Table) -> Any:
    """Return the records of a dstp result as an ``xarray.Dataset`` on its grid.

    The table must hold one coordinate column per grid dimension (as
    ``select *`` does); grid points the query filtered out become NaN.
    Units and CF attributes travel from the result schema; times on
    non-Gregorian calendars become cftime objects of that calendar.
    """
    import pandas as pd
    import pyarrow as pa
    import xarray as xr

    meta = table.schema.metadata or {}
    grid = meta.get(b"dstp:grid", b"").decode().split()
    dims_of: dict[str, str] = {}
    for f in table.schema:
        fmeta = f.metadata or {}
        dim = fmeta.get(b"dstp:dimension", b"").decode()
        if dim:
            dims_of[dim] = f.name
        elif f.name in grid:
            dims_of[f.name] = f.name
    missing = [d for d in grid if d not in dims_of]
    if missing:
        raise ValueError(
            f"the result lacks the coordinate columns of {', '.join(missing)}; select them "
            "(or use select *) to rebuild the grid"
        )
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
        if f.name in ds.variables and f.metadata:
            ds[f.name].attrs.update(
                {k.decode(): v.decode() for k, v in f.metadata.items() if not k.startswith(b"dstp:")}
            )
    ds.attrs["dstp_dataset"] = meta.get(b"dstp:dataset", b"").decode()
    ds.attrs["dstp_query"] = meta.get(b"dstp:sql", b"").decode()
    return ds
