"""A published column as xarray would have decoded it from the files: its dtype, its values, its attributes.

Shared by the doors that hand arrays to xarray-speaking clients — the Zarr
store (:mod:`dstp.zarr_v3`) on the server, and the xarray backend in the
Python client — so both give what ``xr.open_dataset`` gives on the files:

- a packed or masked variable arrives decoded (floats, missing as NaN), so
  the packing attributes (``scale_factor``, ``_FillValue``, …) are not
  repeated (:data:`APPLIED`);
- an integer the server calls ``nullable`` widens to float as xarray masks it
  (float32 up to 16 bits, else float64); any other integer keeps its type;
- times travel as float64 numbers in the files' ``units`` on their
  ``calendar`` (xarray decodes them, cftime for non-standard calendars).

Nothing here reads data or knows a wire: an Arrow column in, numpy out.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

import numpy as np

from dstp.metadata import ColumnInfo

__all__ = ["APPLIED", "ARROW_DTYPES", "TimeEncoding", "time_encoding", "to_numpy", "variable_attrs", "xarray_dtype"]

#: Attributes the values arrive with already applied (decoded by the server).
APPLIED = ("_FillValue", "missing_value", "scale_factor", "add_offset", "valid_min", "valid_max", "valid_range",
           "_Unsigned", "calendar", "units", "bounds")
#: Arrow type names (``ColumnInfo.arrow_type``) → numpy dtype names.
ARROW_DTYPES = {"float": "float32", "halffloat": "float16", "double": "float64", "bool": "bool",
                "int8": "int8", "int16": "int16", "int32": "int32", "int64": "int64",
                "uint8": "uint8", "uint16": "uint16", "uint32": "uint32", "uint64": "uint64"}

_ISO = re.compile(r"(-?\d+)-(\d\d)-(\d\d)[T ](\d\d):(\d\d):(\d\d)(?:\.(\d{1,6}))?")


@dataclass(frozen=True, slots=True)
class TimeEncoding:
    """How times are handed to xarray: numbers in ``units`` on ``calendar`` (xarray decodes them)."""

    units: str
    calendar: str

    def encode(self, column: Any) -> np.ndarray:
        """Return the numbers of a timestamp[us] or ISO-text Arrow column of times (NULL as NaN)."""
        import cftime

        calendar = self.calendar or "standard"
        dates = [None if v is None else _cftime(v, calendar) for v in column.to_pylist()]
        present = [d for d in dates if d is not None]
        numbers = np.full(len(dates), np.nan)
        if present:
            encoded = np.asarray(cftime.date2num(present, self.units, calendar), dtype="float64")
            numbers[[i for i, d in enumerate(dates) if d is not None]] = encoded
        return numbers


def _cftime(value: Any, calendar: str) -> Any:
    import cftime

    if isinstance(value, str):
        m = _ISO.fullmatch(value)
        if m is None:
            raise ValueError(f"{value!r} is not an ISO 8601 date-time")
        parts = [int(m[i]) for i in range(1, 7)]
        return cftime.datetime(*parts, int((m[7] or "0").ljust(6, "0")), calendar=calendar)
    return cftime.datetime(value.year, value.month, value.day, value.hour, value.minute, value.second,
                           value.microsecond, calendar=calendar)


def time_encoding(info: ColumnInfo, calendar: str) -> TimeEncoding | None:
    """Return how a column of times is encoded for xarray (None for anything else)."""
    if not info.arrow_type.startswith(("timestamp", "string")) or " since " not in info.units:
        return None
    return TimeEncoding(info.units, calendar or dict(info.cf).get("calendar", "") or "standard")


def xarray_dtype(info: ColumnInfo, time: TimeEncoding | None) -> np.dtype:
    """Return the numpy dtype xarray gives a column, had it opened the files (object for text)."""
    if time is not None:
        return np.dtype("float64")
    arrow = info.arrow_type
    if arrow.startswith("timestamp"):
        return np.dtype("datetime64[ns]")
    name = ARROW_DTYPES.get(arrow)
    if name is None:
        return np.dtype(object)
    dtype = np.dtype(name)
    if dtype.kind in "iu" and info.nullable:
        return np.dtype("float32") if dtype.itemsize <= 2 else np.dtype("float64")
    return dtype


def to_numpy(column: Any, dtype: np.dtype, time: TimeEncoding | None, name: str = "", hint: str = "") -> np.ndarray:
    """Return an Arrow column as numpy values of ``dtype`` (NULL as NaN, NaT or None).

    An integer ``dtype`` holds no NULL: one arriving there is refused (ValueError, ending with ``hint``)
    rather than guessed.
    """
    if dtype.kind in "iu" and column.null_count:
        # The server said the column is not nullable (docs/xarray.md, "Integers"): an element equal to
        # netCDF's default fill, which xarray keeps as a number, is what gets here.
        raise ValueError(
            f"{name or 'an integer variable'}: the server sent {column.null_count} missing value(s) for a variable "
            "that declares no _FillValue or missing_value, so xarray keeps it an integer; these elements equal "
            "netCDF's default fill value (never written), which dstp reads as missing" + (f". {hint}" if hint else ""))
    if time is not None:
        return time.encode(column)
    if dtype == object:
        return np.asarray(column.to_pylist(), dtype=object)
    if dtype.kind == "M":
        return np.asarray(column.to_numpy(zero_copy_only=False)).astype(dtype)
    if dtype.kind == "f":
        return np.asarray(column.to_numpy(zero_copy_only=False), dtype=dtype)
    return np.asarray(column.to_numpy(zero_copy_only=False)).astype(dtype)


def variable_attrs(info: ColumnInfo, time: TimeEncoding | None = None) -> dict[str, Any]:
    """Return a column's attributes as xarray shows them on the decoded variable (plus units/calendar of times)."""
    attrs: dict[str, Any] = {k: v for k, v in info.cf if k not in APPLIED}
    if info.units and " since " not in info.units:
        attrs["units"] = info.units
    if info.description and "long_name" not in attrs:
        attrs["long_name"] = info.description
    if time is not None:
        attrs.update({"units": time.units, "calendar": time.calendar})
    return attrs
