"""CF decoding: fill values to NULL, packed integers to floats, times to timestamps.

The rules follow xarray's ``decode_cf`` so that a dstp result and
``xr.open_dataset(...).to_dataframe()`` agree value for value:

* ``_Unsigned = "true"`` on a signed integer variable (netCDF-3's only way to
  store unsigned data, NUG) reads its bits as the unsigned type, and
  ``"false"`` on an unsigned one as the signed type, before anything else —
  fill values included, as xarray's and netCDF4-python's coders do;
* ``_FillValue`` and ``missing_value`` become NULL (``valid_range`` is not applied,
  as in xarray): an element is missing when it *equals* one of them, so a value
  the variable's type cannot hold (a ``missing_value`` of ``-9.99e33`` on
  ``short`` data, or a double one on ``float`` data that is not a float)
  masks nothing, as in xarray and netCDF4-python ("cannot be safely cast"),
  rather than the element it would wrap or round to; a variable with no
  ``_FillValue`` also treats the netCDF default
  fill of its type as missing (what netCDF-C's tools and netCDF4-python do: it is
  what an unwritten value reads back as), except for 8-bit types, whose default
  fill is an ordinary value;
* floating NaN becomes NULL too, because SQL engines order NaN above every
  number, so ``humidity > 50`` would otherwise match a missing value;
* ``scale_factor``/``add_offset`` unpack to the float type of those attributes
  (float32 for 8- and 16-bit packed data with float32 factors, else float64);
* times (``units = "<unit> since <date>"``) decode by calendar, see below — packed
  times are unpacked first (CF 8.1 packing applies to any variable).

Calendars. ``standard``, ``gregorian``, ``proleptic_gregorian``, ``noleap`` and
``365_day`` decode to Arrow ``timestamp[us]`` holding the calendar's own
date and time labels (every noleap date is a real Gregorian date, so its label
is kept; intervals that span 29 February then differ from model time, which
is the usual reading of model output). ``360_day``, ``all_leap``/``366_day``,
``julian`` and unknown calendars have dates that do not exist in the Gregorian
calendar (2001-02-30), so they decode to ISO-8601 strings
``YYYY-MM-DDTHH:MM:SS`` that sort and compare correctly as text; time
literals in queries are normalised to the same form.

Text. A ``char`` array whose last dimension is the string length
(``station_name(station, name_strlen)``) and a netCDF-4 ``string`` variable
decode to Arrow ``string`` on the other dimensions. Char arrays are joined and
their trailing NULs and blanks stripped (xarray strips only the NULs; blanks
are fixed-width padding from Fortran writers, and ``station = 'KJFK'`` should
match), then decoded as the variable's ``_Encoding`` says, else as UTF-8,
falling back to Latin-1 for bytes that are not UTF-8. A text that is empty
(after stripping, for char arrays), or made only of its ``_FillValue``, is NULL.

Text times. A text variable the descriptor marks ``time-format="iso8601"``
(``dstp publish`` does so for ``time_obs = "2021-03-01T12:00:00Z"``, see
:func:`looks_like_time`) decodes to ``timestamp[us]``: ISO 8601 dates and
date-times, extended (``2021-03-01T12:00:00``) or basic (``20210301T120000``),
``T`` or a blank between date and time, fractions of a second, and ``Z``/``UTC``
or an offset (``+02:00``), which is applied so the column holds UTC; a value
without an offset is taken as UTC. A value that does not parse is refused,
naming it.

Decoding belongs to a file, not to a dataset. Every file of an aggregation
carries its own packing, fill values, time units and dtype, so a column
keeps one :class:`Decoding` per file and each file's hyperslab is decoded with
its own before results from several files meet. :func:`merge_decodings`
decides the column's type across files, or says why the files cannot be served
together (a calendar that changes, a time that stops being a time).
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass
from typing import Any, Mapping, Sequence

import cftime
import numpy as np
import pyarrow as pa

__all__ = [
    "ISO8601",
    "ISO_CALENDARS",
    "LAT_UNITS",
    "LON_UNITS",
    "VERTICAL_STANDARD_NAMES",
    "TIMESTAMP_CALENDARS",
    "Decoding",
    "calendar_family",
    "coordinate_axis",
    "decoding_for",
    "decode_values",
    "merge_decodings",
    "numpy_dtype_of",
    "decode_times",
    "time_literal",
    "is_time_units",
    "looks_like_time",
    "parse_iso_times",
]

TIMESTAMP_CALENDARS = frozenset({"standard", "gregorian", "proleptic_gregorian", "noleap", "365_day"})
ISO_CALENDARS = frozenset({"360_day", "all_leap", "366_day", "julian", "none"})

_SINCE = re.compile(r"^\s*\w+\s+since\s+\S", re.IGNORECASE)

LAT_UNITS = {"degrees_north", "degree_north", "degree_n", "degrees_n", "degreen", "degreesn"}
LON_UNITS = {"degrees_east", "degree_east", "degree_e", "degrees_e", "degreee", "degreese"}
VERTICAL_STANDARD_NAMES = {
    "air_pressure", "altitude", "height", "depth", "model_level_number",
    "atmosphere_hybrid_sigma_pressure_coordinate", "atmosphere_sigma_coordinate",
    "ocean_sigma_coordinate", "ocean_s_coordinate", "height_above_reference_ellipsoid",
}
_PRESSURE_UNITS = {"pa", "hpa", "mbar", "millibar", "bar", "kpa", "dbar", "decibar"}

#: The ``time_units`` of a text time column, and its ``time-format`` in a descriptor.
ISO8601 = "iso8601"


#: Attribute names CF (1.11, Appendix A) and the NUG define on variables, as they are spelled.
CF_ATTRIBUTES = (
    "_FillValue", "_Unsigned", "_Encoding", "add_offset", "scale_factor", "missing_value", "valid_min", "valid_max",
    "valid_range", "units", "calendar", "standard_name", "long_name", "axis", "positive", "bounds", "climatology",
    "coordinates", "grid_mapping", "cell_measures", "cell_methods", "formula_terms", "flag_values", "flag_masks",
    "flag_meanings", "ancillary_variables", "cf_role", "compress", "instance_dimension", "sample_dimension",
    "leap_month", "leap_year", "month_lengths", "standard_error_multiplier", "actual_range", "comment",
)
CF_BY_LOWER = {name.lower(): name for name in CF_ATTRIBUTES}


def cf_spelling(attrs: Mapping[str, Any]) -> dict[str, Any]:
    """Return ``attrs`` with each CF attribute a file spells in another case also under CF's own name.

    Some products write ``Units``, ``UNITS``, ``_fillvalue`` or ``Scale_Factor``. Where the CF name
    itself is absent and the case variants agree, the value is read as the CF attribute (the
    variant stays too). xarray and netCDF4-python read only the exact names: with ``_fillvalue``
    they mask nothing, dstp masks what the file's author marked (docs/query-language.md).
    """
    found: dict[str, list[str]] = {}
    for key in attrs:
        name = CF_BY_LOWER.get(key.lower())
        if name is not None and key != name:
            found.setdefault(name, []).append(key)
    out = dict(attrs)
    for name, variants in found.items():
        if name in attrs:
            continue
        values = [attrs[k] for k in variants]
        if all(np.array_equal(np.asarray(v), np.asarray(values[0])) for v in values[1:]):
            out[name] = values[0]
    return out


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
    #: The raw values are text: a char array or netCDF-4 strings.
    text: bool = False
    #: The raw values are a char array whose last axis is the string length (joined on decoding).
    chars: bool = False
    #: How the bytes of a char array are encoded (``_Encoding``); None tries UTF-8, then Latin-1.
    encoding: str | None = None
    #: The integer type the raw values' bits are read as (``_Unsigned``), or None to read them as stored.
    view: np.dtype | None = None
    #: Fill values of the file that no raw value can equal (they mask nothing; describe says so).
    unusable_fills: tuple[Any, ...] = ()

    @property
    def packed(self) -> bool:
        return self.scale_factor is not None or self.add_offset is not None

    @property
    def iso_time(self) -> bool:
        return self.time_units is not None and pa.types.is_string(self.arrow_type)

    @property
    def text_time(self) -> bool:
        """Return whether text values are parsed as ISO 8601 date-times."""
        return self.text and self.time_units == ISO8601


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


def _unsigned_view(dtype: np.dtype, attrs: Mapping[str, Any]) -> np.dtype | None:
    """Return the type ``_Unsigned`` says the raw integers' bits hold, or None when they hold ``dtype``."""
    flag = str(attrs.get("_Unsigned", "")).strip().lower()
    if flag == "true" and dtype.kind == "i":
        return np.dtype(f"u{dtype.itemsize}")
    if flag == "false" and dtype.kind == "u":
        return np.dtype(f"i{dtype.itemsize}")
    return None


def _fill_in(value: Any, raw: np.dtype, view: np.dtype | None) -> Any:
    """Return ``value`` as the raw values hold it (through an ``_Unsigned`` view), or None when none can equal it.

    A fill is stored in the variable's own type (netCDF-C requires it of ``_FillValue``), so under
    ``_Unsigned`` its bits are the fill: -1 in a byte is 255. Otherwise equality is exact, as numpy
    compares: -9.99e33 is no short and 1e20 as a double is no float.
    """
    if isinstance(value, float) and np.isnan(value):
        return value if (view or raw).kind == "f" else None
    if not isinstance(value, (bool, int, float)):
        return None
    with np.errstate(all="ignore"):
        for source in (raw, view) if view is not None else (raw,):
            try:
                held = np.array(value).astype(source)
            except (OverflowError, ValueError):
                continue
            if held.item() == value:
                return (held.view(view) if view is not None else held).item()
    return None


def calendar_of(attrs: Mapping[str, Any]) -> str:
    """Return the CF calendar of a time variable, lower-cased, defaulting to ``standard``."""
    cal = attrs.get("calendar", "standard")
    return str(cal).strip().lower() if cal else "standard"


#: Calendars that are the same calendar under another CF name.
_CALENDAR_ALIASES = {"gregorian": "standard", "365_day": "noleap", "366_day": "all_leap"}


def calendar_family(calendar: str) -> str:
    """Return the canonical name of a CF calendar (``gregorian`` is ``standard``, ``365_day`` is ``noleap``)."""
    return _CALENDAR_ALIASES.get(calendar, calendar)


def decoding_for(
    dtype: np.dtype, attrs: Mapping[str, Any], default_fill: Any = None, *, text_time: bool = False,
    per_character: bool = False,
) -> Decoding | None:
    """Return how to decode a variable, or None if it cannot be a query column.

    ``default_fill`` is the netCDF default fill value of the variable's type
    when the file has no ``_FillValue`` for it (see the module docstring).
    ``text_time`` parses a text variable's values as ISO 8601 date-times.
    ``per_character``: a char array each of whose characters is a value (its
    last dimension is not a string length; :class:`~dstp.catalog.netcdf4_.VariableMeta`).
    """
    if dtype.kind in "SU":
        encoding = attrs.get("_Encoding")
        fills = tuple(v.decode("latin-1") if isinstance(v, bytes) else str(v) for v in _fill_values(attrs))
        common = dict(fill_values=fills, text=True, chars=dtype.kind == "S" and not per_character,
                      encoding=str(encoding) if encoding else None)
        if text_time:
            return Decoding(arrow_type=pa.timestamp("us"), time_units=ISO8601, calendar="proleptic_gregorian",
                            **common)  # type: ignore[arg-type]
        return Decoding(arrow_type=pa.string(), **common)  # type: ignore[arg-type]
    if dtype.kind not in "iufb":
        return None
    view = _unsigned_view(dtype, attrs)
    given = _fill_values(attrs)
    if default_fill is not None and "_FillValue" not in attrs and dtype.itemsize > 1:
        given = tuple(dict.fromkeys([*given, *np.atleast_1d(np.asarray(default_fill)).tolist()]))
    held = [_fill_in(v, dtype, view) for v in given]
    fills = tuple(dict.fromkeys(h for h in held if h is not None))
    coding: dict[str, Any] = dict(fill_values=fills, view=view,
                                  unusable_fills=tuple(v for v, h in zip(given, held) if h is None))
    packed = "scale_factor" in attrs or "add_offset" in attrs
    if packed:
        coding.update(scale_factor=attrs.get("scale_factor"), add_offset=attrs.get("add_offset"),
                      float_dtype=_float_dtype(view or dtype, attrs))
    units = attrs.get("units")
    if is_time_units(units):
        calendar = calendar_of(attrs)
        arrow_type = pa.timestamp("us") if calendar in TIMESTAMP_CALENDARS else pa.string()
        return Decoding(arrow_type=arrow_type, time_units=str(units), calendar=calendar, **coding)
    if packed:
        return Decoding(arrow_type=pa.from_numpy_dtype(coding["float_dtype"]), **coding)
    if dtype.kind == "b":
        return Decoding(arrow_type=pa.bool_(), **coding)
    return Decoding(arrow_type=pa.from_numpy_dtype(view or dtype), **coding)


def coordinate_axis(name: str, attrs: Mapping[str, Any], *, geographic_only: bool = False) -> str | None:
    """Return the CF axis (T, Z, Y, X) a variable is recognised as, or None.

    ``geographic_only``: only what CF states for station/profile/trajectory data — ``axis``, a time, a
    geographic latitude or longitude; no grid or projection names, no vertical guess, no guess from the name.
    """
    axis = str(attrs.get("axis", "")).upper()
    if axis in {"T", "Z", "Y", "X"}:
        return axis
    std = str(attrs.get("standard_name", "")).lower()
    units = str(attrs.get("units", "")).replace(" ", "").lower()
    if std == "time" or is_time_units(attrs.get("units")):
        return "T"
    y_names = {"latitude"} if geographic_only else {"latitude", "grid_latitude", "projection_y_coordinate"}
    x_names = {"longitude"} if geographic_only else {"longitude", "grid_longitude", "projection_x_coordinate"}
    if std in y_names or units in LAT_UNITS:
        return "Y"
    if std in x_names or units in LON_UNITS:
        return "X"
    if geographic_only:
        return None
    if std in VERTICAL_STANDARD_NAMES or "positive" in attrs or units in _PRESSURE_UNITS:
        return "Z"
    lowered = name.lower()
    for axis_name, names in (("T", {"time", "t"}), ("Y", {"lat", "latitude", "y"}),
                             ("X", {"lon", "longitude", "x"}), ("Z", {"lev", "level", "plev", "depth", "z"})):
        if lowered in names:
            return axis_name
    return None


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
    # each distinct decoding once, in order of first use (files decoded alike share one: catalog.aggregation)
    present = list({id(d): d for d in decodings if d is not None}.values())
    if not present:
        raise ValueError("no file holds it")
    texts = {d.text and not d.text_time for d in present}
    if len(texts) > 1:
        raise ValueError("it is text in some files and numeric (or a time) in others")
    if present[0].text and not present[0].text_time:
        return pa.string()
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
    if dec.text:
        texts, text_mask = decode_text(raw, dec)
        if dec.text_time:
            return parse_iso_times(texts, text_mask)
        return texts, text_mask
    if dec.view is not None:
        raw = np.asarray(raw).view(dec.view)
    mask: np.ndarray | None = None
    for fill in dec.fill_values:
        if isinstance(fill, float) and np.isnan(fill):
            hit = np.isnan(raw) if raw.dtype.kind == "f" else None
        else:
            hit = raw == np.asarray(fill).astype(raw.dtype, copy=False)
        if hit is not None:
            mask = hit if mask is None else (mask | hit)
    if dec.time_units is not None:
        values = decode_times(_unpack(raw, dec), dec.time_units, dec.calendar or "standard", mask)
        return values, mask
    values = _unpack(raw, dec)
    if values.dtype.kind == "f":
        nan = np.isnan(values)
        if nan.any():
            mask = nan if mask is None else (mask | nan)
    if dtype is not None and values.dtype != dtype:
        values = values.astype(dtype)
    return values, mask


def _text(value: bytes, encoding: str | None) -> str:
    if encoding:
        return value.decode(encoding, "replace")
    try:
        return value.decode("utf-8")
    except UnicodeDecodeError:
        return value.decode("latin-1")


def decode_text(raw: np.ndarray, dec: Decoding) -> tuple[np.ndarray, np.ndarray | None]:
    """Return (texts as an object array, null mask or None) of a char array or netCDF-4 strings.

    A char array's last axis is its string length: it is joined, and trailing
    NULs and blanks are stripped. Empty texts and texts made only of a fill
    value are NULL.
    """
    raw = np.asarray(raw)
    if dec.chars:
        n = raw.shape[-1] if raw.ndim else 1
        shape = raw.shape[:-1] if raw.ndim else ()
        joined = np.ascontiguousarray(raw, dtype="S1").reshape(-1, n).view(f"S{n}").reshape(shape) \
            if n else np.full(shape, b"", dtype="S1")
        stripped = np.char.rstrip(joined.reshape(-1), b"\x00 ")
        try:
            decoded = np.char.decode(stripped, dec.encoding or "utf-8").astype(object)
        except UnicodeDecodeError:
            decoded = np.array([_text(bytes(b), dec.encoding) for b in stripped], dtype=object)
        mask = decoded == ""
        for fill in dec.fill_values:
            if len(fill) == 1 and fill not in "\x00 ":
                mask |= np.array([t == fill * len(t) for t in decoded], dtype=bool)
        texts = decoded
        texts[mask] = None
    else:
        items = [v.decode("utf-8", "replace") if isinstance(v, bytes) else v for v in raw.reshape(-1).tolist()]
        fills = set(dec.fill_values)
        mask = np.array([v is None or v == "" or v in fills for v in items], dtype=bool)
        texts = np.empty(len(items), dtype=object)
        texts[:] = [None if m else str(v) for v, m in zip(items, mask)]
        shape = raw.shape
    return texts.reshape(shape), (mask.reshape(shape) if mask.any() else None)


_ISO_EXTENDED = re.compile(
    r"^(-?\d{4})-(\d{2})-(\d{2})(?:[T ](\d{2}):(\d{2})(?::(\d{2})(?:[.,](\d{1,9}))?)?)?"
    r"\s*(Z|UTC|GMT|[+-]\d{2}(?::?\d{2})?)?$",
    re.IGNORECASE,
)
_ISO_BASIC = re.compile(
    r"^(\d{4})(\d{2})(\d{2})(?:T(\d{2})(\d{2})(?:(\d{2})(?:[.,](\d{1,9}))?)?)?(Z|[+-]\d{2}(?:\d{2})?)?$",
    re.IGNORECASE,
)


def _iso_instant(text: str) -> np.datetime64:
    """Return an ISO 8601 date or date-time as a UTC datetime64[us]; ValueError if it is not one."""
    m = _ISO_EXTENDED.match(text.strip()) or _ISO_BASIC.match(text.strip())
    if not m:
        raise ValueError(f"{text!r} is not an ISO 8601 date-time (YYYY-MM-DDTHH:MM:SS[Z])")
    year, month, day, hour, minute, second, fraction, zone = m.groups()
    label = f"{year}-{month}-{day}T{hour or '00'}:{minute or '00'}:{second or '00'}"
    if fraction:
        label += "." + fraction[:6]
    try:
        value = np.datetime64(label, "us")
    except ValueError:
        raise ValueError(f"{text!r} is not a valid date-time") from None
    if zone and zone.upper() not in ("Z", "UTC", "GMT"):
        sign = -1 if zone[0] == "-" else 1
        digits = zone[1:].replace(":", "")
        minutes = int(digits[:2]) * 60 + (int(digits[2:4]) if len(digits) > 2 else 0)
        value = value - np.timedelta64(sign * minutes, "m")
    return value


def parse_iso_times(texts: np.ndarray, mask: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray | None]:
    """Return (datetime64[us] instants in UTC, null mask) of ISO 8601 texts; ValueError names a bad value."""
    flat = np.asarray(texts, dtype=object).reshape(-1)
    valid = np.ones(flat.shape, bool) if mask is None else ~np.asarray(mask).reshape(-1)
    out = np.full(flat.shape, np.datetime64("NaT"), dtype="datetime64[us]")
    parsed: dict[str, np.datetime64] = {}
    for i in np.flatnonzero(valid):
        text = flat[i]
        value = parsed.get(text)
        if value is None:
            value = parsed[text] = _iso_instant(text)
        out[i] = value
    return out.reshape(np.shape(texts)), mask


def looks_like_time(name: str, attrs: Mapping[str, Any]) -> bool | None:
    """Return whether a text variable is meant to hold times: True (CF says so), None (its name hints it), False.

    ``standard_name = time`` or ``axis = T`` say so; a name or ``long_name``
    with the word time or date (``time_obs``, ``report_date``, "time of
    observation") only hints it, and publishing then keeps the variable as text
    unless its values parse.
    """
    if str(attrs.get("standard_name", "")).strip().lower() == "time" or str(attrs.get("axis", "")).upper() == "T":
        return True
    words = re.split(r"[^a-z]+", f"{name} {attrs.get('long_name', '')}".lower())
    if {"time", "date", "datetime", "timestamp"} & set(words):
        return None
    return False


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
        nums, units = _nanoseconds_as_microseconds(nums, units)
        fast = None if iso else _gregorian_instants(nums, units, calendar)
        if fast is not None:
            out[valid] = fast
        else:
            try:
                dates = cftime.num2date(nums, units, calendar=calendar, only_use_cftime_datetimes=True)
            except ValueError as exc:
                raise ValueError(f"times in {units!r} on the {calendar} calendar cannot be decoded: {exc}") from None
            texts = [_iso(d) for d in np.atleast_1d(dates)]
            out[valid] = texts if iso else _labels(texts, calendar)
    return out.reshape(np.shape(raw))


def _nanoseconds_as_microseconds(nums: np.ndarray, units: str) -> tuple[np.ndarray, str]:
    """Return times in nanoseconds (which cftime does not take) as microseconds, exactly, with their units."""
    word, _, rest = units.strip().partition(" ")
    if word.lower() not in ("nanosecond", "nanoseconds", "ns", "nsec", "nsecs"):
        return nums, units
    values = np.asarray(nums)
    whole = values % 1000 == 0 if values.dtype.kind in "iu" else np.isfinite(values) & (np.fmod(values, 1000) == 0)
    if not np.all(whole):
        first = values[~whole].reshape(-1)[0]
        raise ValueError(f"time {first} in {units!r} is not a whole number of microseconds; dstp keeps times "
                         "to the microsecond")
    return values // 1000 if values.dtype.kind in "iu" else values / 1000, f"microseconds {rest}"


def _labels(texts: list[str], calendar: str) -> np.ndarray:
    """Return date-time labels as timestamps; a label no Gregorian date has is refused, saying which."""
    try:
        return np.array(texts, dtype="datetime64[us]")
    except ValueError:
        bad = next(t for t in texts if not _is_gregorian_label(t))
        raise ValueError(f"{bad} is a date of the {calendar} calendar (Julian before 1582-10-15) that no Gregorian "
                         f"calendar has; dstp shows {calendar} times as timestamps of their labels, so it cannot "
                         "show this one") from None


def _is_gregorian_label(text: str) -> bool:
    try:
        np.datetime64(text, "us")
    except ValueError:
        return False
    return True


#: Microseconds per CF time unit (the units cftime accepts).
_MICROSECONDS = {
    **dict.fromkeys(("microsecond", "microseconds", "us"), 1),
    **dict.fromkeys(("millisecond", "milliseconds", "msec", "msecs", "ms"), 1_000),
    **dict.fromkeys(("second", "seconds", "sec", "secs", "s"), 1_000_000),
    **dict.fromkeys(("minute", "minutes", "min", "mins"), 60_000_000),
    **dict.fromkeys(("hour", "hours", "hr", "hrs", "h"), 3_600_000_000),
    **dict.fromkeys(("day", "days", "d"), 86_400_000_000),
}
#: The first day of the Gregorian calendar: before it, CF's standard calendar is Julian.
_GREGORIAN_START = np.datetime64("1582-10-15", "us")


def _gregorian_instants(nums: np.ndarray, units: str, calendar: str) -> np.ndarray | None:
    """Return instants computed with numpy, or None where only cftime gets them right.

    Station data carries a time per observation, millions of them: cftime
    builds one Python object per value (~6 s per million). On the Gregorian
    calendars, an offset that is a whole number of microseconds from an epoch
    after 1582-10-15 is plain arithmetic, exactly what cftime computes; anything
    else (fractions of a microsecond, Julian dates, other calendars) goes to cftime.
    """
    if calendar not in ("standard", "gregorian", "proleptic_gregorian"):
        return None
    factor = _MICROSECONDS.get(units.split()[0].lower())
    if factor is None:
        return None
    epoch = _epoch(units, calendar)
    values = np.asarray(nums)
    if values.dtype.kind in "iu":
        if values.size and np.abs(values.astype(np.float64)).max() * factor >= 2**62:
            return None
        offsets = values.astype(np.int64) * factor
    elif values.dtype.kind == "f":
        scaled = values.astype(np.float64) * factor
        if not np.all(np.isfinite(scaled)) or np.any(np.abs(scaled) >= 2**53) or np.any(scaled != np.rint(scaled)):
            return None
        offsets = scaled.astype(np.int64)
    else:
        return None
    instants = epoch + offsets.astype("timedelta64[us]")
    if calendar != "proleptic_gregorian" and instants.size and (epoch < _GREGORIAN_START
                                                                or instants.min() < _GREGORIAN_START):
        return None
    return instants


@functools.lru_cache(maxsize=1024)
def _epoch(units: str, calendar: str) -> np.datetime64:
    """Return the instant of time 0 in ``units`` (cftime parses the units: a file's worth of times once)."""
    return np.datetime64(_iso(cftime.num2date(0, units, calendar=calendar, only_use_cftime_datetimes=True)), "us")


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
