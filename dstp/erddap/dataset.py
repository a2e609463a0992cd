"""The ERDDAP facade's grammar: griddap and tabledap requests translated to dstp SQL, and ERDDAP's metadata.

Nothing here reads data or knows the web framework: a request's query
string becomes one dstp query, which the router (:mod:`dstp.http.facade_routes`)
runs through the service like any other; the answer is rendered by
:mod:`dstp.erddap.formats`. docs/erddap.md lists what is supported.

**griddap** ``ID.ext?var[(start):stride:(stop)][…],var2[…]``: a dataset's
griddap axes are its default grid, and its grid variables the attributes on
exactly those dimensions. A selector is an index (``3``), ``last`` or
``last-n``, or a value in parentheses (``(1990-06-16T12:00:00Z)``,
``(45.5)``, ``(last-2.5)``, ``(now-7days)``), which picks the nearest index as
ERDDAP does; a value farther off the axis than half its average spacing is
refused as ERDDAP refuses it (404, "Your query produced no matching
results"), an index outside ``0…n-1`` is a 400. For a descending axis the two
values may come in either order. The index ranges become coordinate
predicates and ``stride()`` (:mod:`dstp.hyperslabs`), so the server reads only
that hyperslab.

**tabledap** ``ID.ext?var1,var2&var>=v&var="text"&orderBy("a,b")``: every
column of the dataset is a variable; constraints ``= != < <= > >=`` become
WHERE, ``var=NaN`` / ``var!=NaN`` become ``is null`` / ``is not null``,
``orderBy``/``orderByDescending`` become ORDER BY and ``distinct()`` a GROUP
BY of every selected column. A value may be ``now±n units``, or
``min(var)±n`` / ``max(var)±n units`` (ERDDAP's arithmetic: whole seconds,
minutes, hours, days, weeks, months or years on times; months and years as
calendar months). ``units("UCUM")`` writes the units in UCUM. ``=~`` (regular
expressions) and the aggregating ``orderByMax``/``Min``/``Count``/``Mean``/
``Sum`` are refused with a message: the query language has no regular
expressions or aggregates.

**Times** (:mod:`dstp.erddap.times`): text is a date on the column's
own calendar; a number is ERDDAP's seconds since 1970-01-01T00:00:00Z, on every
calendar: the label's seconds where dstp keeps times as timestamps
(standard, proleptic Gregorian, noleap), and on 360_day and the other
calendars dstp keeps as ISO text the number ERDDAP computes (the units'
reference date in Gregorian seconds plus the elapsed time).
"""

from __future__ import annotations

import datetime as dt
import re
from dataclasses import dataclass, field
from typing import Any, Callable
from urllib.parse import unquote_plus

import numpy as np

from dstp.errors import NotFoundError, QueryError
from dstp.erddap.times import (ERDDAP_CALENDAR, ERDDAP_TIME_UNITS, TimeAxis, finite_number, now_seconds,
                                    shift_seconds)
from dstp.hyperslabs import Axis, quote_name, slab_query, Slab, sql_literal
from dstp.metadata import ColumnInfo, DatasetDetails, DimensionInfo

__all__ = ["ErddapDataset", "GridRequest", "TableRequest", "parse_griddap", "parse_tabledap", "griddap_slab",
           "erddap_type", "ERDDAP_TIME_UNITS", "ERDDAP_CALENDAR", "ALL_DATASETS", "NO_MATCH", "render_time"]

#: The tabledap dataset that lists the catalog (ERDDAP's allDatasets).
ALL_DATASETS = "allDatasets"
#: ERDDAP's words for a request that selects nothing (``MustBe.THERE_IS_NO_DATA``), answered with 404.
NO_MATCH = "Your query produced no matching results."

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

    def time_axis(self, column: str) -> TimeAxis | None:
        """Return how ERDDAP numbers map to a time column's values (None for any other column)."""
        if not self.is_time(column):
            return None
        for d in self.details.dimensions:
            if d.coordinate == column and d.calendar:
                return TimeAxis(d.units, d.calendar)
        info = self.columns[column]
        calendar = dict(info.cf).get("calendar", "") or next(
            (d.calendar for d in self.details.dimensions if d.calendar and d.axis == "T"), "")
        units = info.units if " since " in info.units else next(
            (d.units for d in self.details.dimensions if d.calendar and d.axis == "T"), ERDDAP_TIME_UNITS)
        return TimeAxis(units, calendar if calendar not in ("", "gregorian") else "standard")

    def time_number_units(self, column: str) -> tuple[str, str]:
        """Return the units and calendar of a time column's numbers (constraints, ``.das``, tabledap ``.nc``).

        ERDDAP's seconds since 1970 on every calendar (:mod:`dstp.erddap.times`), which decode on the
        proleptic Gregorian calendar to ERDDAP's instants.
        """
        return ERDDAP_TIME_UNITS, ERDDAP_CALENDAR

    def is_time(self, column: str) -> bool:
        info = self.columns.get(column)
        return info is not None and (info.arrow_type.startswith("timestamp") or " since " in info.units)

    def axis(self, dim: DimensionInfo) -> Axis:
        return Axis(dim.name, dim.size, dim.coordinate, self.axis_values.get(dim.name), dim.order)

    def axis_numbers(self, dim: DimensionInfo) -> np.ndarray:
        """Return an axis's values as ERDDAP's numbers (seconds since 1970 for times)."""
        values = self.axis_values[dim.name]
        time = self.time_axis(dim.coordinate)
        return time.seconds(values) if time is not None else values.astype("float64")


def render_time(value: Any) -> str:
    """Return a time as ERDDAP writes it: ``2000-01-16T00:00:00Z``."""
    if value is None:
        return ""
    if isinstance(value, str):
        return value if value.endswith("Z") else value + "Z"
    if isinstance(value, dt.datetime):
        return value.strftime("%Y-%m-%dT%H:%M:%SZ")
    return str(np.datetime64(value, "s")) + "Z"


# -- values: now, min(), max() and their arithmetic ------------------------------------------------------

_NOW = re.compile(r"now(?:\s*([+\- ])\s*(\d*)\s*([A-Za-z]*))?", re.IGNORECASE)
_EXTREME = re.compile(r"(min|max)\(\s*([A-Za-z_][A-Za-z0-9_.\-]*)\s*\)(?:\s*([+\- ])\s*([0-9.eE+\-]*)\s*([A-Za-z]*))?")
_UNIT_WORDS = ("millis", "second", "seconds", "sec", "secs", "s", "minute", "minutes", "min", "mins", "hour",
               "hours", "hr", "hrs", "h", "day", "days", "d", "week", "weeks", "month", "months", "mon", "mons",
               "year", "years", "yr", "yrs", "ms", "msec", "msecs", "millisec", "millisecs", "millisecond",
               "milliseconds")
_NOW_FORM = "now[+|-positiveInteger[millis|seconds|minutes|hours|days|months|years]] (or singular units)"

#: Looks up a column's minimum or maximum value over the dataset: (column, "min" | "max") -> its value.
Extremes = Callable[[str, str], Any]


def _now_value(text: str, now: dt.datetime) -> float | None:
    """Return ERDDAP seconds of ``now[±n units]``, None when ``text`` is not of that form."""
    m = _NOW.fullmatch(text.strip())
    if m is None:
        return None
    seconds = now_seconds(now)
    if m[1] is None:
        return seconds
    amount = int(m[2]) if m[2] else 1
    unit = (m[3] or "seconds").lower()
    if unit not in _UNIT_WORDS:
        raise QueryError(f'Invalid "now" constraint: "{text.strip()}". Timestamp constraints with "now" must be in '
                         f'the form "{_NOW_FORM}"')
    return shift_seconds(seconds, amount if m[1] in "+ " else -amount, unit)


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


@dataclass(frozen=True, slots=True)
class _Where:
    """Where a selector is, for ERDDAP's messages: ``For variable=v axis#i=name Constraint="[…]"``."""

    variable: str
    index: int
    dim: DimensionInfo
    brackets: str

    def __str__(self) -> str:
        return f'For variable={self.variable} axis#{self.index}={self.dim.coordinate} Constraint="[{self.brackets}]"'


def _selector_number(ds: ErddapDataset, w: _Where, text: str, role: str, now: dt.datetime) -> float:
    """Return a ``(value)`` selector as a number on the axis's scale (ERDDAP seconds for times)."""
    text = text.strip()
    said = f'{w}: {role}="{text}"'
    numbers = ds.axis_numbers(w.dim)
    if text.startswith("last"):
        rest = text[4:].strip()
        if not rest:
            return float(numbers[-1])
        if rest[0] not in "+-":
            raise QueryError(f'Query error: Unexpected character after "last" in {role}=({text}).')
        return float(numbers[-1]) + (1 if rest[0] == "+" else -1) * finite_number(rest[1:], said)
    time = ds.time_axis(w.dim.coordinate)
    if time is not None:
        now_value = _now_value(text, now)
        if now_value is not None:
            return now_value
        bare = text.strip('"')
        if re.match(r"-?\d{1,4}-\d", bare):
            label = time.label_value(bare)
            return float(time.seconds(np.array([label], dtype=object if isinstance(label, str) else None))[0])
    return finite_number(text, said)


def _axis_text(ds: ErddapDataset, dim: DimensionInfo, number: float, element: int | None = None) -> str:
    """Return an axis value as a message shows it: the axis's own value (a time as its label ``…Z``)."""
    time = ds.time_axis(dim.coordinate)
    if element is not None:
        value = ds.axis_values[dim.name][element]
        return render_time(value) if time is not None else repr(float(value))
    return time.label(number) if time is not None else repr(float(number))


def _nearest(ds: ErddapDataset, w: _Where, text: str, role: str, now: dt.datetime) -> int:
    """Return the index of the axis value nearest a ``(value)`` selector; refuse one off the axis, as ERDDAP.

    The axis reaches half its average spacing past its ends (ERDDAP's ``destinationCoarseMin/Max``; a
    one-value axis ``max(|value|/100, 0.01)``); a value beyond is no data (404), and of two equally near
    values the larger is taken, as ERDDAP does.
    """
    numbers = ds.axis_numbers(w.dim)
    target = _selector_number(ds, w, text, role, now)
    low, high = float(np.min(numbers)), float(np.max(numbers))
    half = abs(float(numbers[-1] - numbers[0])) / (len(numbers) - 1) / 2 if len(numbers) > 1 else \
        max(abs(low) / 100, 0.01)
    slack = 1e-9 * max(1.0, abs(low), abs(high))
    if target < low - half - slack:
        raise NotFoundError(f'{NO_MATCH} Query error: {w}: {role}="{text.strip()}" is less than the axis minimum='
                            f"{_axis_text(ds, w.dim, low, int(np.argmin(numbers)))} (and even "
                            f"{_axis_text(ds, w.dim, low - half)}).")
    if target > high + half + slack:
        raise NotFoundError(f'{NO_MATCH} Query error: {w}: {role}="{text.strip()}" is greater than the axis '
                            f"maximum={_axis_text(ds, w.dim, high, int(np.argmax(numbers)))} (and even "
                            f"{_axis_text(ds, w.dim, high + half)}).")
    distance = np.abs(numbers - target)
    tied = np.flatnonzero(distance == distance.min())
    return int(tied[np.argmax(numbers[tied])])


def _selector(ds: ErddapDataset, w: _Where, text: str, role: str, now: dt.datetime) -> int:
    text = text.strip()
    n = w.dim.size
    if text.startswith("(") and text.endswith(")"):
        return _nearest(ds, w, text[1:-1], role, now)
    index: int | None = None
    if text == "last":
        index = n - 1
    elif m := re.fullmatch(r"last\s*([+-])\s*(\d+)", text):
        index = n - 1 + (1 if m[1] == "+" else -1) * int(m[2])
    elif re.fullmatch(r"\d+", text):
        index = int(text)
    if index is None or not 0 <= index <= n - 1:
        raise QueryError(f'Query error: {w}: {role}="{text}" is invalid.  It must be an integer between 0 and '
                         f"{n - 1} (or last, last-n, or a value in parentheses)")
    return index


def _axis_range(ds: ErddapDataset, w: _Where, now: dt.datetime) -> tuple[int, int, int]:
    parts = _split_top(w.brackets, ":")
    if len(parts) == 1:
        start = stop = _selector(ds, w, parts[0], "Start", now)
        stride = 1
    elif len(parts) == 2:
        start, stride, stop = _selector(ds, w, parts[0], "Start", now), 1, _selector(ds, w, parts[1], "Stop", now)
    elif len(parts) == 3:
        if not re.fullmatch(r"\s*\d+\s*", parts[1]) or int(parts[1]) < 1:
            raise QueryError(f"Query error: {w}: Stride={parts[1].strip()} is invalid: the stride of axis "
                             f"{w.dim.name} must be a whole number of 1 or more")
        start, stride = _selector(ds, w, parts[0], "Start", now), int(parts[1])
        stop = _selector(ds, w, parts[2], "Stop", now)
    else:
        raise QueryError(f"[{w.brackets}] is not [start], [start:stop] or [start:stride:stop]")
    if start > stop and parts[0].strip().startswith("("):
        start, stop = stop, start  # values of a descending axis given low to high
    if start > stop:
        raise QueryError(f"Query error: {w}: StartIndex={start} is greater than StopIndex={stop} "
                         "(start must come before stop)")
    return start, stride, stop


def parse_griddap(query: str, ds: ErddapDataset, now: dt.datetime | None = None) -> GridRequest:
    """Return the request a griddap query string stands for (QueryError or NotFoundError naming what is wrong)."""
    now = now or dt.datetime.now(dt.timezone.utc)
    axes = ds.axes
    if not axes:
        raise QueryError(f"{ds.id} is not a grid (station, profile or trajectory data): use tabledap/{ds.id}")
    axis_names = [d.name for d in axes]
    coordinate_names = [d.coordinate for d in axes]
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
        if name in axis_names or name in coordinate_names:
            i = axis_names.index(name) if name in axis_names else coordinate_names.index(name)
            dims = [(i, axes[i])]
        elif name in grid_names:
            dims = list(enumerate(axes))
        else:
            raise QueryError(f"{ds.id} has no griddap variable {name!r} (axes: {', '.join(coordinate_names)}; "
                             f"variables: {', '.join(grid_names)})")
        if brackets and len(brackets) != len(dims):
            raise QueryError(f"{name} needs {len(dims)} [ ] selectors, one per axis "
                             f"({', '.join(d.coordinate for _, d in dims)})")
        for (index, dim), b in zip(dims, brackets or [None] * len(dims)):
            r = _axis_range(ds, _Where(name, index, dim, b), now) if b is not None and b.strip() \
                else (0, 1, dim.size - 1)
            if dim.name in ranges and ranges[dim.name] != r:
                raise QueryError(f"every variable must use the same range of axis {dim.coordinate}")
            ranges[dim.name] = r
        variables.append(name)
    axes_only = all(v in axis_names or v in coordinate_names for v in variables)
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
        names = {a.name for a in axes} | {a.coordinate for a in axes}
        columns = [d.coordinate for d in dims] + [v for v in request.variables if v not in names]
    key = [slice(request.ranges[d.name][0], request.ranges[d.name][2] + 1, request.ranges[d.name][1]) for d in dims]
    slab = slab_query(ds.id, columns, [d.name for d in dims], key, {d.name: ds.axis(d) for d in dims},
                      [d.name for d in ds.details.dimensions])
    return slab, columns


# -- tabledap ----------------------------------------------------------------------------------------------

@dataclass(frozen=True, slots=True)
class TableRequest:
    """A tabledap request: columns, the dstp SQL it becomes, and how units are written."""

    columns: tuple[str, ...]
    sql: str
    #: ``units("UCUM")``: units are written in UCUM instead of the files' UDUNITS.
    ucum: bool = False


_CONSTRAINT = re.compile(r"([A-Za-z_][A-Za-z0-9_.\-]*)\s*(!=|=~|<=|>=|=|<|>)(.*)", re.DOTALL)
_FILTER = re.compile(r"(\w+)\((.*)\)", re.DOTALL)


def _extreme(ds: ErddapDataset, text: str, target: str, extremes: Extremes | None) -> float | np.datetime64 | str:
    """Return ``min(var)±n[units]`` / ``max(var)±n[units]``: a time's value, or a number."""
    m = _EXTREME.fullmatch(text.strip())
    assert m is not None
    kind, name = m[1], m[2]
    form = (f'{kind}(varName)[+|-positiveInteger[millis|seconds|minutes|hours|days|months|years]] (or singular '
            'units)' if ds.is_time(target) else f"{kind}(varName)[+|-positiveNumber]")
    said = f'Invalid "{kind}()" constraint: "{text.strip()}". Constraints with "{kind}()" must be in the form "{form}"'
    if name not in ds.columns:
        raise QueryError(f"{said}; {ds.id} has no variable {name!r}")
    if extremes is None:
        raise QueryError(f"{kind}({name}) cannot be used here")
    value = extremes(name, kind)
    if value is None:
        raise NotFoundError(f"{NO_MATCH} ({name} has no values, so {kind}({name}) has none)")
    source = ds.time_axis(name)
    number = float(source.seconds(np.array([value], dtype=object if isinstance(value, str) else None))[0]) \
        if source is not None else float(value)
    if m[3] is not None:
        sign = -1 if m[3] == "-" else 1
        amount_text, unit = m[4], m[5].lower()
        if ds.is_time(target):
            if unit and unit not in _UNIT_WORDS or not re.fullmatch(r"\d+", amount_text or "1"):
                raise QueryError(said)
            number = shift_seconds(number, sign * int(amount_text or "1"), unit or "seconds")
        else:
            if unit or not amount_text:
                raise QueryError(said)
            number += sign * finite_number(amount_text, said)
    time = ds.time_axis(target)
    return time.value(number, text.strip()) if time is not None else number


def _value_literal(ds: ErddapDataset, name: str, op: str, text: str, now: dt.datetime,
                   extremes: Extremes | None) -> str:
    info = ds.columns[name]
    text = text.strip()
    said = f"{name}{op}{text}"
    if _EXTREME.fullmatch(text):
        value = _extreme(ds, text, name, extremes)
        return sql_literal(value)
    time = ds.time_axis(name)
    if time is not None:
        seconds = _now_value(text, now)
        if seconds is None and text.lower().startswith("now"):
            raise QueryError(f'Invalid "now" constraint: "{text}". Timestamp constraints with "now" must be in the '
                             f'form "{_NOW_FORM}"')
        if seconds is not None:
            return sql_literal(time.value(seconds, said))
        bare = text.strip('"')
        if re.match(r"-?\d{1,4}-\d", bare):
            return sql_literal(time.label_value(bare))
        return sql_literal(time.value(finite_number(bare, said), said))
    if info.arrow_type == "string":
        if not (text.startswith('"') and text.endswith('"') and len(text) >= 2):
            raise QueryError(f"{name} is text: put the value in double quotes, {name}=\"{text}\"")
        return sql_literal(text[1:-1].replace('\\"', '"'))
    if text.startswith('"'):
        text = text.strip('"')
    return sql_literal(finite_number(text, said))


def _names(text: str, ds: ErddapDataset) -> list[str]:
    names = [n.strip() for n in text.strip().strip('"').split(",") if n.strip()]
    for n in names:
        if n not in ds.columns:
            raise QueryError(f"{ds.id} has no variable {n!r}")
    return names


def _units_filter(arg: str) -> bool:
    """Return whether ``units("…")`` asks for UCUM (False for UDUNITS); refuse anything else."""
    value = arg.strip().strip('"').strip()
    if value not in ("UCUM", "UDUNITS"):
        raise QueryError(f'units({arg.strip()}): the units standard must be "UDUNITS" (the default) or "UCUM"')
    return value == "UCUM"


def parse_tabledap(query: str, ds: ErddapDataset, now: dt.datetime | None = None,
                   extremes: Extremes | None = None) -> TableRequest:
    """Return the dstp query a tabledap query string stands for (QueryError naming what is wrong).

    ``extremes`` looks up a column's min or max for ``min(var)``/``max(var)`` values.
    """
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
    group = ucum = False
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
            elif name == "units":
                ucum = _units_filter(arg)
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
        if value.strip().lower() == "nan" and ds.columns[name].arrow_type != "string":
            if op not in ("=", "!="):
                raise QueryError(f"{name}{op}{value.strip()}: only = and != can compare with NaN (missing)")
            where.append(f"{quote_name(name)} is {'' if op == '=' else 'not '}null")
            continue
        where.append(f"{quote_name(name)} {'<>' if op == '!=' else op} "
                     f"{_value_literal(ds, name, op, value, now, extremes)}")
    columns = wanted or [c for c in ds.columns if c in _select_star(ds)]
    sql = f"select {', '.join(quote_name(c) for c in columns)} from {quote_name(ds.id)}"
    if where:
        sql += " where " + " and ".join(where)
    if group:
        sql += " group by " + ", ".join(quote_name(c) for c in columns)
        order = order or [quote_name(c) for c in columns]
    if order:
        sql += " order by " + ", ".join(order)
    return TableRequest(tuple(columns), sql, ucum)


def _select_star(ds: ErddapDataset) -> set[str]:
    """Return the columns of ``select *``: the default grid's coordinates, scalars, its attributes."""
    grid = set(ds.details.summary.default_grid)
    names = {c.name for c in ds.details.coordinates if c.role in ("dimension", "scalar")
             and set(c.dimensions) <= grid}
    names |= {a.name for a in ds.details.attributes if set(a.dimensions) == grid}
    return names
