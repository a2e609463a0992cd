"""The ERDDAP facade's grammar: griddap and tabledap requests translated to dstp SQL, and ERDDAP's metadata.

Nothing here reads data or knows the web framework: a request's query
string becomes one dstp query, which the router (:mod:`dstp.http.facade_routes`)
runs through the service like any other; the answer is rendered by
:mod:`dstp.http.erddap_formats`. docs/erddap.md lists what is supported.

**griddap** ``ID.ext?var[(start):stride:(stop)][…],var2[…]``: a dataset's
griddap axes are its default grid, and its grid variables the attributes on
exactly those dimensions. A selector is an index (``3``), ``last`` or
``last-n``, or a value in parentheses (``(1990-06-16T12:00:00Z)``,
``(45.5)``, ``(last)``), which picks the nearest index as ERDDAP does; for a
descending axis the two values may come in either order. The index ranges
become coordinate predicates and ``stride()`` (:mod:`dstp.hyperslabs`), so
the server reads only that hyperslab.

**tabledap** ``ID.ext?var1,var2&var>=v&var="text"&orderBy("a,b")``: every
column of the dataset is a variable; constraints ``= != < <= > >=`` become
WHERE, ``var=NaN`` / ``var!=NaN`` become ``is null`` / ``is not null``,
``orderBy``/``orderByDescending`` become ORDER BY and ``distinct()`` a GROUP
BY of every selected column. ``=~`` (regular expressions) and the
aggregating ``orderByMax``/``Min``/``Count``/``Mean``/``Sum`` are refused
with a message: the query language has no regular expressions or aggregates.

**Times.** On the standard, proleptic Gregorian and noleap calendars (whose
values are timestamps in dstp) a time is written ``2000-01-16T00:00:00Z`` or
as seconds since 1970-01-01T00:00:00Z, ERDDAP's convention (erddapy sends
those): the seconds of the date's label counted on the proleptic Gregorian
calendar, leap days included, whatever the file's calendar — a noleap
2000-03-01 is 951868800 here, in ``.das``, in tabledap ``.nc`` and in
constraints alike. On 360_day and the other calendars dstp keeps as ISO text,
numbers are in the axis's own units and calendar, and the text form always
works. :meth:`ErddapDataset.time_number_units` says which.
"""

from __future__ import annotations

import datetime as dt
import math
import re
from dataclasses import dataclass, field
from typing import Any, Sequence
from urllib.parse import unquote_plus

import numpy as np

from dstp.errors import QueryError
from dstp.hyperslabs import Axis, quote_name, slab_query, Slab, sql_literal
from dstp.metadata import ColumnInfo, DatasetDetails, DimensionInfo

__all__ = ["ErddapDataset", "GridRequest", "TableRequest", "parse_griddap", "parse_tabledap", "epoch_seconds",
           "griddap_slab", "erddap_type", "ERDDAP_TIME_UNITS", "ERDDAP_CALENDAR", "ALL_DATASETS"]

ERDDAP_TIME_UNITS = "seconds since 1970-01-01T00:00:00Z"
#: The calendar ERDDAP's seconds are counted on (where dstp's times are timestamps): the one pandas, erddapy and
#: numpy count on, so a date's label, not the file's calendar, fixes its number.
ERDDAP_CALENDAR = "proleptic_gregorian"
#: The tabledap dataset that lists the catalog (ERDDAP's allDatasets).
ALL_DATASETS = "allDatasets"
_TIMESTAMP_CALENDARS = ("", "standard", "gregorian", "proleptic_gregorian", "noleap", "365_day")

_ERDDAP_TYPES = {"float": "float", "double": "double", "int8": "byte", "int16": "short", "int32": "int",
                 "int64": "long", "uint8": "ubyte", "uint16": "ushort", "uint32": "uint", "uint64": "ulong",
                 "bool": "boolean", "string": "String"}


def erddap_type(arrow_type: str) -> str:
    """Return ERDDAP's name of a column type (times are doubles of seconds, text is String)."""
    if arrow_type.startswith("timestamp"):
        return "double"
    return _ERDDAP_TYPES.get(arrow_type, "String")


@dataclass
class ErddapDataset:
    """A dstp dataset as ERDDAP sees it: griddap axes and variables, tabledap columns."""

    details: DatasetDetails
    #: Axis coordinate values as the server compares them (numbers, datetime64[us] or ISO text), by dimension.
    axis_values: dict[str, np.ndarray] = field(default_factory=dict)

    @property
    def id(self) -> str:
        return self.details.summary.id

    @property
    def axes(self) -> list[DimensionInfo]:
        """The griddap axes: the default grid's dimensions (none for station, profile and trajectory data)."""
        if self.details.feature_type:
            return []
        by_name = {d.name: d for d in self.details.dimensions}
        grid = [by_name[n] for n in self.details.summary.default_grid if n in by_name]
        return grid if all(d.coordinate for d in grid) else []

    @property
    def grid_variables(self) -> list[ColumnInfo]:
        """The griddap data variables: attributes on exactly the default grid."""
        dims = tuple(d.name for d in self.axes)
        return [a for a in self.details.attributes if dims and tuple(a.dimensions) == dims]

    @property
    def columns(self) -> dict[str, ColumnInfo]:
        """The tabledap variables: every coordinate and attribute column, by name."""
        return {c.name: c for c in (*self.details.coordinates, *self.details.attributes)}

    def calendar_of(self, column: str) -> str:
        for d in self.details.dimensions:
            if d.coordinate == column:
                return d.calendar
        return ""

    def time_number_units(self, column: str) -> tuple[str, str]:
        """Return the units and calendar of a time column's numbers (constraints, ``.das``, tabledap ``.nc``).

        ERDDAP's seconds since 1970 of the date's label, where dstp's times are timestamps (noleap too: its
        2000-03-01 is the same number as a Gregorian one, which is what erddapy sends and pandas reads); the
        axis's own units and calendar on 360_day and the other calendars dstp keeps as ISO text.
        """
        for d in self.details.dimensions:
            if d.coordinate == column and d.calendar not in _TIMESTAMP_CALENDARS:
                return d.units, d.calendar
        return ERDDAP_TIME_UNITS, ERDDAP_CALENDAR

    def is_time(self, column: str) -> bool:
        info = self.columns.get(column)
        return info is not None and (info.arrow_type.startswith("timestamp") or " since " in info.units)

    def axis(self, dim: DimensionInfo) -> Axis:
        return Axis(dim.name, dim.size, dim.coordinate, self.axis_values.get(dim.name), dim.order)


# -- times -----------------------------------------------------------------------------------------

_ISO = re.compile(r"(-?\d{1,4})-(\d\d)-(\d\d)(?:[T ](\d\d):(\d\d)(?::(\d\d)(?:\.(\d+))?)?)?(Z|[+-]00:?00)?")


def epoch_seconds(values: np.ndarray, calendar: str = "") -> np.ndarray:
    """Return times as ERDDAP numbers: seconds since 1970-01-01 (on the times' own calendar for ISO text)."""
    if values.dtype.kind == "M":
        return values.astype("datetime64[us]").astype("int64") / 1e6
    import cftime

    dates = [_cftime(str(v), calendar) for v in values]
    return np.asarray(cftime.date2num(dates, ERDDAP_TIME_UNITS, calendar or "standard"), dtype="float64")


def _cftime(text: str, calendar: str) -> Any:
    import cftime

    m = _ISO.fullmatch(text.strip())
    if m is None:
        raise QueryError(f"{text!r} is not a time; write 2000-01-16T00:00:00Z or seconds since 1970-01-01")
    y, mo, d = int(m[1]), int(m[2]), int(m[3])
    h, mi, s = int(m[4] or 0), int(m[5] or 0), int(m[6] or 0)
    return cftime.datetime(y, mo, d, h, mi, s, int((m[7] or "0")[:6].ljust(6, "0")),
                           calendar=calendar or "standard")


def time_literal(value: str, calendar: str, iso_text: bool, units: str = ERDDAP_TIME_UNITS) -> str:
    """Return the SQL literal of an ERDDAP time for a time column: ISO text, or a number in ``units``.

    On timestamps a number is always ERDDAP's seconds since 1970 (proleptic Gregorian, whatever the
    calendar); on ISO text it is counted in ``units`` on ``calendar`` (the axis's own, as ``.das`` says).
    """
    text = value.strip().strip('"')
    if iso_text:
        import cftime

        moment = _cftime(text, calendar) if _ISO.fullmatch(text) else \
            cftime.num2date(_number(text), units, calendar or "standard")
        return sql_literal(moment.strftime("%Y-%m-%dT%H:%M:%S"))
    if _ISO.fullmatch(text):
        moment = np.datetime64(_ISO.fullmatch(text)[0].rstrip("Z").split("+")[0].replace(" ", "T"), "us")  # type: ignore[index]
    else:
        moment = np.datetime64(int(round(_number(text) * 1e6)), "us")
    return sql_literal(moment)


def _number(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise QueryError(f"{text!r} is not a number") from None
    return value


def render_time(value: Any) -> str:
    """Return a time as ERDDAP writes it: ``2000-01-16T00:00:00Z``."""
    if value is None:
        return ""
    if isinstance(value, str):
        return value if value.endswith("Z") else value + "Z"
    if isinstance(value, dt.datetime):
        return value.strftime("%Y-%m-%dT%H:%M:%SZ")
    return str(np.datetime64(value, "s")) + "Z"


# -- griddap -------------------------------------------------------------------------------------------

@dataclass(frozen=True, slots=True)
class GridRequest:
    """A griddap request: the variables asked for and one index range (start, stride, stop inclusive) per axis."""

    variables: tuple[str, ...]
    ranges: dict[str, tuple[int, int, int]]
    #: True when only axis variables were asked for (their values, no data variable).
    axes_only: bool = False


_PART = re.compile(r"([A-Za-z_][A-Za-z0-9_.\-]*)((?:\[[^\]]*\])*)")


def _split_top(text: str, sep: str) -> list[str]:
    """Split on ``sep`` outside brackets, parentheses and quotes."""
    out: list[str] = []
    cur: list[str] = []
    depth, quote = 0, False
    for ch in text:
        if ch == '"':
            quote = not quote
        elif not quote and ch in "[(":
            depth += 1
        elif not quote and ch in "])":
            depth -= 1
        if ch == sep and depth == 0 and not quote:
            out.append("".join(cur))
            cur = []
        else:
            cur.append(ch)
    out.append("".join(cur))
    return out


def _nearest(ds: ErddapDataset, dim: DimensionInfo, text: str) -> int:
    """Return the index of the axis value nearest a value selector's text."""
    values = ds.axis_values[dim.name]
    n = len(values)
    text = text.strip()
    if text.startswith("last"):
        rest = text[4:].replace(" ", "")
        if not rest:
            return n - 1
        return _nearest_number(values, dim, _numbers(values, dim)[-1] + _number(rest))
    if values.dtype.kind == "M" or values.dtype == object or dim.calendar:
        target = float(epoch_seconds(np.array([text.strip('"')], dtype=object), dim.calendar)[0]) \
            if _ISO.fullmatch(text.strip('"')) else _time_number(dim, _number(text))
        return _nearest_number(values, dim, target)
    return _nearest_number(values, dim, _number(text))


def _time_number(dim: DimensionInfo, number: float) -> float:
    """Return a number given for a time axis as seconds since 1970 on the axis's calendar."""
    if dim.calendar in _TIMESTAMP_CALENDARS:
        return number  # ERDDAP's own convention
    import cftime

    moment = cftime.num2date(number, dim.units, dim.calendar)
    return float(cftime.date2num(moment, ERDDAP_TIME_UNITS, dim.calendar))


def _numbers(values: np.ndarray, dim: DimensionInfo) -> np.ndarray:
    if values.dtype.kind == "M" or values.dtype == object:
        return epoch_seconds(values, dim.calendar)
    return values.astype("float64")


def _nearest_number(values: np.ndarray, dim: DimensionInfo, target: float) -> int:
    numbers = _numbers(values, dim)
    if not math.isfinite(target):
        raise QueryError(f"{target} is not a value of axis {dim.name}")
    return int(np.argmin(np.abs(numbers - target)))


def _selector(ds: ErddapDataset, dim: DimensionInfo, text: str) -> int:
    text = text.strip()
    n = dim.size
    if text.startswith("(") and text.endswith(")"):
        return _nearest(ds, dim, text[1:-1])
    if text == "last":
        return n - 1
    m = re.fullmatch(r"last\s*-\s*(\d+)", text)
    if m:
        return n - 1 - int(m[1])
    if re.fullmatch(r"\d+", text):
        return int(text)
    raise QueryError(f"{text!r} is not an index, last, last-n or (value) of axis {dim.name}")


def _axis_range(ds: ErddapDataset, dim: DimensionInfo, brackets: str) -> tuple[int, int, int]:
    parts = _split_top(brackets, ":")
    if len(parts) == 1:
        start = stop = _selector(ds, dim, parts[0])
        stride = 1
    elif len(parts) == 2:
        start, stride, stop = _selector(ds, dim, parts[0]), 1, _selector(ds, dim, parts[1])
    elif len(parts) == 3:
        start, stop = _selector(ds, dim, parts[0]), _selector(ds, dim, parts[2])
        stride = int(parts[1]) if re.fullmatch(r"\s*\d+\s*", parts[1]) else 0
    else:
        raise QueryError(f"[{brackets}] is not [start], [start:stop] or [start:stride:stop]")
    if stride < 1:
        raise QueryError(f"the stride of axis {dim.name} must be a whole number of 1 or more")
    if start > stop and parts[0].strip().startswith("("):
        start, stop = stop, start  # values of a descending axis given low to high
    if not (0 <= start <= stop < dim.size):
        raise QueryError(f"axis {dim.name}: index range {start}:{stop} lies outside 0:{dim.size - 1} "
                         "(start must come before stop)")
    return start, stride, stop


def parse_griddap(query: str, ds: ErddapDataset) -> GridRequest:
    """Return the request a griddap query string stands for (QueryError naming what is wrong)."""
    axes = ds.axes
    if not axes:
        raise QueryError(f"{ds.id} is not a grid (station, profile or trajectory data): use tabledap/{ds.id}")
    axis_names = [d.name for d in axes]
    grid_names = [v.name for v in ds.grid_variables]
    text = unquote_plus(query).strip()
    if not text:
        return GridRequest(tuple(grid_names), {d.name: (0, 1, d.size - 1) for d in axes})
    variables: list[str] = []
    ranges: dict[str, tuple[int, int, int]] = {}
    for part in _split_top(text, ","):
        m = _PART.fullmatch(part.strip())
        if m is None:
            raise QueryError(f"cannot read {part!r}: write var[(start):stride:(stop)][…] for each axis")
        name, brackets = m[1], re.findall(r"\[([^\]]*)\]", m[2])
        if name in axis_names:
            dims = [axes[axis_names.index(name)]]
        elif name in grid_names:
            dims = axes
        else:
            raise QueryError(f"{ds.id} has no griddap variable {name!r} (axes: {', '.join(axis_names)}; "
                             f"variables: {', '.join(grid_names)})")
        if brackets and len(brackets) != len(dims):
            raise QueryError(f"{name} needs {len(dims)} [ ] selectors, one per axis ({', '.join(d.name for d in dims)})")
        for dim, b in zip(dims, brackets or [None] * len(dims)):
            r = _axis_range(ds, dim, b) if b is not None else (0, 1, dim.size - 1)
            if dim.name in ranges and ranges[dim.name] != r:
                raise QueryError(f"every variable must use the same range of axis {dim.name}")
            ranges[dim.name] = r
        variables.append(name)
    axes_only = all(v in axis_names for v in variables)
    for d in axes:
        ranges.setdefault(d.name, (0, 1, d.size - 1))
    return GridRequest(tuple(dict.fromkeys(variables)), ranges, axes_only)


def griddap_slab(request: GridRequest, ds: ErddapDataset) -> tuple[Slab, list[str]]:
    """Return the slab query of a griddap request, and its output columns (axes first, as ERDDAP lists them)."""
    axes = ds.axes
    if request.axes_only:
        dims = [d for d in axes if d.coordinate in request.variables or d.name in request.variables]
        columns = [d.coordinate for d in dims]
    else:
        dims = axes
        columns = [d.coordinate for d in dims] + [v for v in request.variables if v not in {a.name for a in axes}]
    key = [slice(request.ranges[d.name][0], request.ranges[d.name][2] + 1, request.ranges[d.name][1]) for d in dims]
    slab = slab_query(ds.id, columns, [d.name for d in dims], key, {d.name: ds.axis(d) for d in dims},
                      [d.name for d in ds.details.dimensions])
    return slab, columns


# -- tabledap ----------------------------------------------------------------------------------------------

@dataclass(frozen=True, slots=True)
class TableRequest:
    """A tabledap request: columns, the dstp SQL it becomes."""

    columns: tuple[str, ...]
    sql: str


_CONSTRAINT = re.compile(r"([A-Za-z_][A-Za-z0-9_.\-]*)\s*(!=|=~|<=|>=|=|<|>)(.*)", re.DOTALL)
_FILTER = re.compile(r"(\w+)\((.*)\)", re.DOTALL)
_RELATIVE = re.compile(r"now\s*([+-])\s*(\d+(?:\.\d+)?)\s*(second|minute|hour|day|month|year)s?", re.IGNORECASE)


def _value_literal(ds: ErddapDataset, name: str, text: str, now: dt.datetime) -> str:
    info = ds.columns[name]
    text = text.strip()
    if ds.is_time(name):
        rel = _RELATIVE.fullmatch(text)
        if text.lower() == "now" or rel:
            seconds = 0.0
            if rel:
                unit = {"second": 1, "minute": 60, "hour": 3600, "day": 86400, "month": 30 * 86400,
                        "year": 365 * 86400}[rel[3].lower()]
                seconds = (1 if rel[1] == "+" else -1) * float(rel[2]) * unit
            # now is an instant, so it is counted in ERDDAP's seconds, not the axis's units.
            return time_literal(repr(now.timestamp() + seconds), ds.calendar_of(name), info.arrow_type == "string")
        return time_literal(text, ds.calendar_of(name), info.arrow_type == "string", ds.time_number_units(name)[0])
    if info.arrow_type == "string":
        if not (text.startswith('"') and text.endswith('"') and len(text) >= 2):
            raise QueryError(f"{name} is text: put the value in double quotes, {name}=\"{text}\"")
        return sql_literal(text[1:-1].replace('\\"', '"'))
    if text.startswith('"'):
        text = text.strip('"')
    return sql_literal(_number(text))


def _names(text: str, ds: ErddapDataset) -> list[str]:
    names = [n.strip() for n in text.strip().strip('"').split(",") if n.strip()]
    for n in names:
        if n not in ds.columns:
            raise QueryError(f"{ds.id} has no variable {n!r}")
    return names


def parse_tabledap(query: str, ds: ErddapDataset, now: dt.datetime | None = None) -> TableRequest:
    """Return the dstp query a tabledap query string stands for (QueryError naming what is wrong)."""
    now = now or dt.datetime.now(dt.timezone.utc)
    parts = _split_top(unquote_plus(query), "&")
    wanted = [v.strip() for v in parts[0].split(",") if v.strip()] if parts and "=" not in parts[0] \
        and "<" not in parts[0] and ">" not in parts[0] and not _FILTER.fullmatch(parts[0].strip()) else []
    rest = parts[1:] if wanted or (parts and not parts[0].strip()) else parts
    for name in wanted:
        if name not in ds.columns:
            raise QueryError(f"{ds.id} has no variable {name!r} (variables: {', '.join(ds.columns)})")
    where: list[str] = []
    order: list[str] = []
    group = False
    for part in (p.strip() for p in rest):
        if not part:
            continue
        f = _FILTER.fullmatch(part)
        if f and f[1] in ("distinct", "orderBy", "orderByDescending", "orderByMax", "orderByMin", "orderByMinMax",
                          "orderByCount", "orderByMean", "orderBySum", "orderByClosest", "orderByLimit", "units",
                          "addVariablesWhere"):
            name, arg = f[1], f[2]
            if name == "distinct":
                group = True
            elif name == "orderBy":
                order += [quote_name(n) for n in _names(arg, ds)]
            elif name == "orderByDescending":
                order += [f"{quote_name(n)} desc" for n in _names(arg, ds)]
            else:
                raise QueryError(f"{name}() is not supported here: dstp queries return records, not "
                                 "aggregates (use orderBy, orderByDescending, distinct())")
            continue
        c = _CONSTRAINT.fullmatch(part)
        if c is None:
            raise QueryError(f"cannot read the constraint {part!r}: write variable<op>value with "
                             "=, !=, <, <=, > or >=")
        name, op, value = c[1], c[2], c[3]
        if name not in ds.columns:
            raise QueryError(f"{ds.id} has no variable {name!r}")
        if op == "=~":
            raise QueryError(f"{name}=~… (a regular expression) is not supported: dstp compares values; "
                             f"use {name}=\"…\" or a range")
        if value.strip() == "NaN":
            if op not in ("=", "!="):
                raise QueryError(f"{name}{op}NaN: only = and != can compare with NaN (missing)")
            where.append(f"{quote_name(name)} is {'' if op == '=' else 'not '}null")
            continue
        where.append(f"{quote_name(name)} {'<>' if op == '!=' else op} {_value_literal(ds, name, value, now)}")
    columns = wanted or [c for c in ds.columns if c in _select_star(ds)]
    sql = f"select {', '.join(quote_name(c) for c in columns)} from {quote_name(ds.id)}"
    if where:
        sql += " where " + " and ".join(where)
    if group:
        sql += " group by " + ", ".join(quote_name(c) for c in columns)
        order = order or [quote_name(c) for c in columns]
    if order:
        sql += " order by " + ", ".join(order)
    return TableRequest(tuple(columns), sql)


def _select_star(ds: ErddapDataset) -> set[str]:
    """Return the columns of ``select *``: the default grid's coordinates, scalars, its attributes."""
    grid = set(ds.details.summary.default_grid)
    names = {c.name for c in ds.details.coordinates if c.role in ("dimension", "scalar")
             and set(c.dimensions) <= grid}
    names |= {a.name for a in ds.details.attributes if set(a.dimensions) == grid}
    return names


def variable_list(names: Sequence[str]) -> str:
    return ", ".join(names)
