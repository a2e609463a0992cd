"""CF decoding: fill values to NULL, packed integers to floats, times to timestamps.

The rules follow xarray's ``decode_cf`` so that a dstp result and
``xr.open_dataset(...).to_dataframe()`` agree value for value:

* ``_FillValue`` and ``missing_value`` become NULL (``valid_range`` is not applied,
  as in xarray); a variable with no ``_FillValue`` also treats the netCDF default
  fill of its type as missing (what netCDF-C's tools and netCDF4-python do: it is
  what an unwritten value reads back as), except for 8-bit types, whose default
  fill is an ordinary value;
* floating NaN becomes NULL too, because SQL engines order NaN above every
  number, so ``humidity > 50`` would otherwise match a missing value;
* ``scale_factor``/``add_offset`` unpack to the float type of those attributes
  (float32 for 8- and 16-bit packed data with float32 factors, else float64);
* times (``units = "<unit> since <date>"``) decode by calendar, see below.

Calendars. ``standard``, ``gregorian``, ``proleptic_gregorian``, ``noleap`` and
``365_day`` decode to Arrow ``timestamp[us]`` holding the calendar's own
date and time labels (every noleap date is a real Gregorian date, so its label
is kept; intervals that span 29 February then differ from model time, which
is the usual reading of model output). ``360_day``, ``all_leap``/``366_day``,
``julian`` and unknown calendars have dates that do not exist in the Gregorian
calendar (2001-02-30), so they decode to ISO-8601 strings
``YYYY-MM-DDTHH:MM:SS`` that sort and compare correctly as text; time
literals in queries are normalised to the same form.

Decoding belongs to a file, not to a dataset. Every file of an aggregation
carries its own packing, fill values, time units and dtype, so a column
keeps one :class:`Decoding` per file and each file's hyperslab is decoded with
its own before results from several files meet. :func:`merge_decodings`
decides the column's type across files, or says why the files cannot be served
together (a calendar that changes, a time that stops being a time).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Mapping, Sequence

import cftime
import numpy as np
import pyarrow as pa

__all__ = [
    "ISO_CALENDARS",
    "TIMESTAMP_CALENDARS",
    "Decoding",
    "calendar_family",
    "decoding_for",
    "decode_values",
    "merge_decodings",
    "numpy_dtype_of",
    "decode_times",
    "time_literal",
    "is_time_units",
]

TIMESTAMP_CALENDARS = frozenset({"standard", "gregorian", "proleptic_gregorian", "noleap", "365_day"})
ISO_CALENDARS = frozenset({"360_day", "all_leap", "366_day", "julian", "none"})

_SINCE = re.compile(r"^\s*\w+\s+since\s+\S", re.IGNORECASE)


def is_time_units(units: Any) -> bool:
    """Return whether CF ``units`` describe an instant (``days since ...``)."""
    return isinstance(units, str) and bool(_SINCE.match(units))


@dataclass(frozen=True, slots=True)
class Decoding:
    """How to turn one variable's raw values into a query column."""

    arrow_type: pa.DataType
    fill_values: tuple[Any, ...] = ()
    scale_factor: Any = None
    add_offset: Any = None
    float_dtype: np.dtype | None = None
    time_units: str | None = None
    calendar: str | None = None

    @property
    def packed(self) -> bool:
        return self.scale_factor is not None or self.add_offset is not None

    @property
    def iso_time(self) -> bool:
        return self.time_units is not None and pa.types.is_string(self.arrow_type)


def _float_dtype(raw: np.dtype, attrs: Mapping[str, Any]) -> np.dtype:
    """Return the float type packed data unpacks to (xarray's ``_choose_float_dtype``)."""
    scale, offset = attrs.get("scale_factor"), attrs.get("add_offset")
    scale_t = np.asarray(scale).dtype if scale is not None else None
    offset_t = np.asarray(offset).dtype if offset is not None else None
    if scale_t is not None and offset_t is not None and scale_t == offset_t and scale_t.kind == "f":
        if raw.kind in "iu" and raw.itemsize > 2:
            return np.dtype(np.float64)  # 32-bit integers need float64's mantissa
        return scale_t
    if offset_t is not None:
        return np.dtype(np.float64)  # a lone offset may be large: stay exact
    if scale_t is not None and scale_t.kind == "f":
        return scale_t
    return np.dtype(np.float64)


def _fill_values(attrs: Mapping[str, Any]) -> tuple[Any, ...]:
    values: list[Any] = []
    for key in ("_FillValue", "missing_value"):
        if key in attrs:
            values.extend(np.atleast_1d(np.asarray(attrs[key])).tolist())
    return tuple(dict.fromkeys(values))


def calendar_of(attrs: Mapping[str, Any]) -> str:
    """Return the CF calendar of a time variable, lower-cased, defaulting to ``standard``."""
    cal = attrs.get("calendar", "standard")
    return str(cal).strip().lower() if cal else "standard"


#: Calendars that are the same calendar under another CF name.
_CALENDAR_ALIASES = {"gregorian": "standard", "365_day": "noleap", "366_day": "all_leap"}


def calendar_family(calendar: str) -> str:
    """Return the canonical name of a CF calendar (``gregorian`` is ``standard``, ``365_day`` is ``noleap``)."""
    return _CALENDAR_ALIASES.get(calendar, calendar)


def decoding_for(dtype: np.dtype, attrs: Mapping[str, Any], default_fill: Any = None) -> Decoding | None:
    """Return how to decode a variable, or None if it cannot be a query column.

    ``default_fill`` is the netCDF default fill value of the variable's type
    when the file has no ``_FillValue`` for it (see the module docstring).
    """
    if dtype.kind not in "iufb":
        return None
    fills = _fill_values(attrs)
    if default_fill is not None and "_FillValue" not in attrs and dtype.itemsize > 1:
        fills = tuple(dict.fromkeys([*fills, *np.atleast_1d(np.asarray(default_fill)).tolist()]))
    units = attrs.get("units")
    if is_time_units(units):
        calendar = calendar_of(attrs)
        arrow_type = pa.timestamp("us") if calendar in TIMESTAMP_CALENDARS else pa.string()
        return Decoding(arrow_type=arrow_type, fill_values=fills, time_units=str(units), calendar=calendar)
    if "scale_factor" in attrs or "add_offset" in attrs:
        fdt = _float_dtype(dtype, attrs)
        return Decoding(
            arrow_type=pa.from_numpy_dtype(fdt),
            fill_values=fills,
            scale_factor=attrs.get("scale_factor"),
            add_offset=attrs.get("add_offset"),
            float_dtype=fdt,
        )
    if dtype.kind == "b":
        return Decoding(arrow_type=pa.bool_(), fill_values=fills)
    return Decoding(arrow_type=pa.from_numpy_dtype(dtype), fill_values=fills)


def numpy_dtype_of(arrow_type: pa.DataType) -> np.dtype:
    """Return the numpy dtype decoded values of ``arrow_type`` are held in (object for text)."""
    if pa.types.is_timestamp(arrow_type):
        return np.dtype("datetime64[us]")
    if pa.types.is_string(arrow_type):
        return np.dtype(object)
    return np.dtype(arrow_type.to_pandas_dtype())


def merge_decodings(decodings: Sequence[Decoding | None]) -> pa.DataType:
    """Return the column type of one variable decoded file by file; ValueError says why files conflict.

    Numbers take the type numpy promotes the per-file types to (as
    ``xarray.concat`` does: float32 from one file and float64 from another
    give float64). Times must stay times on one calendar; their units may
    differ from file to file, because each file is decoded with its own.
    """
    present = [d for d in decodings if d is not None]
    if not present:
        raise ValueError("no file holds it")
    times = {d.time_units is not None for d in present}
    if len(times) > 1:
        raise ValueError("it is a time (units '… since …') in some files and not in others")
    if present[0].time_units is not None:
        families = sorted({calendar_family(d.calendar or "standard") for d in present})
        if len(families) > 1:
            raise ValueError(f"its calendar changes between files ({', '.join(families)})")
        return present[0].arrow_type
    dtypes = [numpy_dtype_of(d.arrow_type) for d in present]
    if any(t.kind == "b" for t in dtypes) and not all(t.kind == "b" for t in dtypes):
        raise ValueError("it is boolean in some files and numeric in others")
    return pa.from_numpy_dtype(np.result_type(*dtypes))


def decode_values(
    raw: np.ndarray, dec: Decoding, dtype: np.dtype | None = None
) -> tuple[np.ndarray, np.ndarray | None]:
    """Return (values, null mask or None) for raw values read from a file.

    ``dtype``, when given, is the column's type across files: the decoded
    values are cast to it (never narrowed: :func:`merge_decodings` chose it
    to hold every file's values).
    """
    mask: np.ndarray | None = None
    for fill in dec.fill_values:
        if isinstance(fill, float) and np.isnan(fill):
            hit = np.isnan(raw) if raw.dtype.kind == "f" else None
        else:
            hit = raw == np.asarray(fill).astype(raw.dtype, copy=False)
        if hit is not None:
            mask = hit if mask is None else (mask | hit)
    if dec.time_units is not None:
        values = decode_times(raw, dec.time_units, dec.calendar or "standard", mask)
        return values, mask
    values = _unpack(raw, dec)
    if values.dtype.kind == "f":
        nan = np.isnan(values)
        if nan.any():
            mask = nan if mask is None else (mask | nan)
    if dtype is not None and values.dtype != dtype:
        values = values.astype(dtype)
    return values, mask


def _unpack(raw: np.ndarray, dec: Decoding) -> np.ndarray:
    values = raw
    if dec.packed:
        fdt = dec.float_dtype or np.dtype(np.float64)
        values = raw.astype(fdt, copy=True)
        if dec.scale_factor is not None:
            values *= fdt.type(dec.scale_factor)
        if dec.add_offset is not None:
            values += fdt.type(dec.add_offset)
    return values


def decode_times(
    raw: np.ndarray, units: str, calendar: str, mask: np.ndarray | None = None
) -> np.ndarray:
    """Return decoded instants: datetime64[us] for Gregorian-like calendars, else ISO strings."""
    flat = np.asarray(raw).reshape(-1)
    valid = np.ones(flat.shape, bool) if mask is None else ~np.asarray(mask).reshape(-1)
    iso = calendar not in TIMESTAMP_CALENDARS
    out: np.ndarray = np.empty(flat.shape, dtype=object if iso else "datetime64[us]")
    if not iso:
        out[:] = np.datetime64("NaT")
    if valid.any():
        nums = flat[valid]
        dates = cftime.num2date(nums, units, calendar=calendar, only_use_cftime_datetimes=True)
        texts = [_iso(d) for d in np.atleast_1d(dates)]
        out[valid] = texts if iso else np.array(texts, dtype="datetime64[us]")
    return out.reshape(np.shape(raw))


def _iso(d: Any) -> str:
    text = f"{d.year:04d}-{d.month:02d}-{d.day:02d}T{d.hour:02d}:{d.minute:02d}:{d.second:02d}"
    if d.microsecond:
        text += f".{d.microsecond:06d}"
    return text


_LITERAL = re.compile(
    r"^\s*(-?\d{1,4})-(\d{1,2})-(\d{1,2})"
    r"(?:[T ](\d{1,2})(?::(\d{1,2})(?::(\d{1,2})(?:\.(\d{1,6}))?)?)?)?\s*(?:Z|UTC|\+00:?00)?\s*$",
    re.IGNORECASE,
)


def time_literal(text: str, iso: bool) -> np.datetime64 | str:
    """Return a query's time literal in the column's representation; ValueError if unreadable."""
    m = _LITERAL.match(text)
    if not m:
        raise ValueError(f"{text!r} is not a date or date-time (use YYYY-MM-DD or YYYY-MM-DDTHH:MM:SS)")
    year, month, day = int(m[1]), int(m[2]), int(m[3])
    hour, minute, second = (int(m[i] or 0) for i in (4, 5, 6))
    micro = int((m[7] or "0").ljust(6, "0"))
    if not (1 <= month <= 12 and 1 <= day <= 31 and hour < 24 and minute < 60 and second < 61):
        raise ValueError(f"{text!r} is not a valid date-time")
    text_iso = f"{year:04d}-{month:02d}-{day:02d}T{hour:02d}:{minute:02d}:{second:02d}"
    if micro:
        text_iso += f".{micro:06d}"
    if iso:
        return text_iso
    try:
        return np.datetime64(text_iso, "us")
    except ValueError as exc:
        raise ValueError(f"{text!r} is not a date in the Gregorian calendar") from exc
