"""Quicklooks: a map of one attribute at a chosen time and level, and a time series at a point.

Both ask the query engine itself, with every other dimension fixed by an
equality on its coordinate, so pushdown reads one hyperslab::

    select lat, lon, temperature from ccm3 where time = '1990-03-16 12:00:00' and lev = 850.0

A value asked for (``time=1990-03``, ``lev=850``, ``lat=41.9``) picks the
nearest grid point; a dimension not mentioned takes its first value. Maps
need an attribute on both a Y (latitude) and an X (longitude) axis; time
series need a T axis. Grids with 2-D latitude/longitude (rotated, projected,
curvilinear: auxiliary or derived coordinates) are drawn in geographic space
(``pcolormesh`` on the 2-D coordinates); station, profile and trajectory
tables (one dimension, with latitude/longitude columns on it) are drawn as a
map of points, at most ``MAX_POINTS`` of them (a repeatable sample beyond). Missing values are drawn as masked (grey), descending
latitudes and text times (360_day and other calendars) are handled.
Rendering uses matplotlib's Agg canvas without pyplot (no global state).
"""

from __future__ import annotations

import datetime as dt
import math
import io
import re
import threading
from dataclasses import dataclass, replace
from typing import Any, Callable, Mapping, Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from dstp.errors import QueryError, UnknownColumnError
from dstp.metadata import ColumnInfo, DatasetDetails, DimensionInfo
from dstp.http.builder import sql_identifier

__all__ = ["Selection", "geographic_columns", "map_selection", "render_map", "render_series", "series_selection"]

#: Matplotlib is not thread-safe; figures are drawn one at a time.
_DRAW_LOCK = threading.Lock()
_ISO = re.compile(r"(-?\d+)(?:-(\d\d)(?:-(\d\d)(?:[T ](\d\d)(?::(\d\d)(?::(\d\d))?)?)?)?)?")
_AXIS_PARAM = {"Y": ("lat", "latitude"), "X": ("lon", "longitude"), "T": ("time",), "Z": ("lev", "level", "depth")}

ValuesOf = Callable[[str], Sequence[Any]]


#: Station maps draw at most this many observations (a repeatable sample beyond).
MAX_POINTS = 20_000


@dataclass(frozen=True, slots=True)
class Selection:
    """A slice to draw: the SQL that reads it and the value chosen for each fixed dimension."""

    attribute: ColumnInfo
    sql: str
    fixed: tuple[tuple[str, str], ...]
    #: Coordinate columns of the free axes (map: y then x; series: time).
    free: tuple[str, ...]
    free_units: tuple[str, ...]
    #: Latitude and longitude columns to draw in geographic space (2-D or per observation), if any.
    geographic: tuple[str, str] | None = None
    #: "grid" (a field on two axes) or "points" (observations of a station/trajectory table).
    kind: str = "grid"
    #: ``fixed`` as a person reads it, for the title: numbers in plain digits with their units ("100000 Pa").
    fixed_shown: tuple[tuple[str, str], ...] = ()


def geographic_columns(details: DatasetDetails, dims: Sequence[str]) -> tuple[str, str] | None:
    """Return the (latitude, longitude) coordinate columns living on ``dims`` (auxiliary or derived)."""
    found: dict[str, str] = {}
    for c in details.coordinates:
        std = dict(c.cf).get("standard_name", "")
        if c.role in ("auxiliary", "derived") and std in ("latitude", "longitude") and c.dimensions \
                and set(c.dimensions) <= set(dims) and std not in found:
            found[std] = c.name
    return (found["latitude"], found["longitude"]) if len(found) == 2 else None


def grid_axes(details: DatasetDetails, attribute_dims: Sequence[str], dims: list[DimensionInfo]) -> list[DimensionInfo]:
    """Return ``dims`` with axes Y and X given to the dimensions of a 2-D latitude (its first and its second)
    when they have none of their own: an ocean model's curvilinear grid on index dimensions (NEMO's
    ``nav_lat(y, x)``), whose rows and columns are then drawn where their latitude and longitude put them."""
    if any(d.axis == "Y" for d in dims) and any(d.axis == "X" for d in dims):
        return dims
    geo = geographic_columns(details, attribute_dims)
    lat = next((c for c in details.coordinates if geo is not None and c.name == geo[0]), None)
    if lat is None or len(lat.dimensions) != 2:
        return dims
    row, column = lat.dimensions
    return [replace(d, axis="Y") if d.name == row else replace(d, axis="X") if d.name == column else d
            for d in dims]


def _column(d: DimensionInfo) -> str:
    return d.coordinate or d.name


def _time_key(text: str) -> float:
    """Return a number that orders ISO times on any calendar, close to days for distances."""
    m = _ISO.fullmatch(text.strip())
    if m is None:
        raise QueryError(f"{text!r} is not a date or time such as 1990-03-16 or 1990-03-16T12:00")
    y, mo, d, h, mi, s = (int(g) if g else default for g, default in zip(m.groups(), (0, 1, 1, 0, 0, 0)))
    return y * 372.0 + (mo - 1) * 31 + (d - 1) + (h * 3600 + mi * 60 + s) / 86400


def _nearest(values: Sequence[Any], wanted: str, name: str) -> Any:
    if not values:
        raise QueryError(f"{name} has no values")
    first = values[0]
    if isinstance(first, (dt.datetime, dt.date)):
        key = _time_key(wanted)
        return min(values, key=lambda v: abs(_time_key(v.isoformat()) - key))
    if isinstance(first, str):
        key = _time_key(wanted)
        return min(values, key=lambda v: abs(_time_key(v) - key))
    try:
        target = float(wanted)
    except ValueError as exc:
        raise QueryError(f"{name}={wanted!r} is not a number") from exc
    return min(values, key=lambda v: abs(float(v) - target))


def _literal(value: Any) -> str:
    if isinstance(value, dt.datetime):
        return f"'{value.isoformat(sep=' ')}'"
    if isinstance(value, str):
        return "'" + value.replace("'", "''") + "'"
    if isinstance(value, float):
        return repr(value)
    return str(value)


def _shown(value: Any) -> str:
    return value.isoformat() if isinstance(value, (dt.datetime, dt.date)) else str(value)


def plain_number(value: float, digits: int = 6) -> str:
    """Return ``value`` to ``digits`` significant figures in plain digits where they stay short (100000, not
    1e+05; 0.0001235), in exponent form only below 1e-4 or from 1e9 on."""
    if not math.isfinite(value):
        return str(value)
    if value == 0 or 1e-4 <= abs(value) < 1e9:
        text = str(np.format_float_positional(value, precision=digits, unique=False, fractional=False, trim="-"))
    else:
        text = f"{value:.{digits}g}"
    return "0" if text == "-0" else text


def _readable(value: Any, units: str) -> str:
    """Return a coordinate value for a title: a time as ISO text, a number in plain digits with its units."""
    if isinstance(value, (int, float, np.integer, np.floating)) and not isinstance(value, bool):
        return f"{plain_number(float(value))} {units}".strip()
    return _shown(value)


def _wanted(d: DimensionInfo, params: Mapping[str, str]) -> str | None:
    for key in (d.name, d.coordinate, *_AXIS_PARAM.get(d.axis, ())):
        if key and params.get(key, "").strip():
            return params[key].strip()
    return None


def _attribute(details: DatasetDetails, name: str) -> ColumnInfo:
    for a in details.attributes:
        if a.name == name:
            return a
    names = ", ".join(a.name for a in details.attributes)
    raise UnknownColumnError(f"{details.summary.id} has no attribute {name!r}; its attributes are {names}")


def _select(
    details: DatasetDetails, attribute: str, free_axes: tuple[str, ...], params: Mapping[str, str], values_of: ValuesOf
) -> Selection:
    a = _attribute(details, attribute)
    dims = grid_axes(details, a.dimensions, [d for d in details.dimensions if d.name in a.dimensions])
    free = [next((d for d in dims if d.axis == axis), None) for axis in free_axes]
    if any(f is None for f in free):
        wanted = " and ".join({"Y": "latitude", "X": "longitude", "T": "time"}[x] for x in free_axes)
        raise QueryError(f"{a.name} is on {' × '.join(a.dimensions) or 'no dimension'}; this plot needs {wanted}")
    chosen = [f for f in free if f is not None]
    conditions, fixed, shown = [], [], []
    for d in dims:
        if d in chosen:
            continue
        values = list(values_of(d.name))
        asked = _wanted(d, params)
        value = _nearest(values, asked, d.name) if asked is not None else values[0]
        conditions.append(f"{sql_identifier(_column(d))} = {_literal(value)}")
        fixed.append((d.name, _shown(value)))
        shown.append((d.name, _readable(value, d.units if " since " not in d.units else "")))
    columns = ", ".join(sql_identifier(_column(f)) for f in chosen)
    sql = f"select {columns}, {sql_identifier(a.name)} from {sql_identifier(details.summary.id)}"
    if conditions:
        sql += " where " + " and ".join(conditions)
    return Selection(a, sql, tuple(fixed), tuple(_column(f) for f in chosen), tuple(f.units for f in chosen),
                     fixed_shown=tuple(shown))


def map_selection(details: DatasetDetails, attribute: str, params: Mapping[str, str], values_of: ValuesOf) -> Selection:
    """Return the lat/lon slice of ``attribute`` at the time/level chosen in ``params``.

    On a grid with 2-D latitude/longitude the slice also selects them, to be
    drawn in geographic space; an attribute of a station/trajectory table
    (one dimension with latitude/longitude on it) is a map of its points.
    """
    a = _attribute(details, attribute)
    if len(a.dimensions) == 1:
        geo = geographic_columns(details, a.dimensions)
        if geo is not None:
            lat, lon = geo
            sql = (f"select {sql_identifier(lat)}, {sql_identifier(lon)}, {sql_identifier(a.name)} "
                   f"from {sql_identifier(details.summary.id)} tablesample {MAX_POINTS} rows repeatable (1) "
                   f"where {sql_identifier(a.name)} is not null")
            return Selection(a, sql, (), (lat, lon), ("degrees_north", "degrees_east"), geo, "points")
    s = _select(details, attribute, ("Y", "X"), params, values_of)
    geo = geographic_columns(details, a.dimensions)
    if geo is None:
        return s
    head, rest = s.sql.split(" from ", 1)
    sql = f"{head}, {sql_identifier(geo[0])}, {sql_identifier(geo[1])} from {rest}"
    return Selection(s.attribute, sql, s.fixed, s.free, s.free_units, geo, "grid", s.fixed_shown)


def series_selection(
    details: DatasetDetails, attribute: str, params: Mapping[str, str], values_of: ValuesOf
) -> Selection:
    """Return the time series of ``attribute`` at the grid point nearest ``params`` (lat, lon, level…)."""
    return _select(details, attribute, ("T",), params, values_of)


def _values(table: pa.Table, name: str) -> np.ndarray:
    col = table.column(name)
    if pa.types.is_integer(col.type) or pa.types.is_floating(col.type) or pa.types.is_decimal(col.type):
        return pc.cast(col, pa.float64()).to_numpy()  # nulls become NaN
    return np.asarray(col.to_pylist(), dtype=object)


def _label(c: ColumnInfo) -> str:
    name = c.description or dict(c.cf).get("long_name") or c.name
    return f"{name} [{c.units}]" if c.units else name


def _png(fig: Any) -> bytes:
    buf = io.BytesIO()
    fig.savefig(buf, format="png")
    return buf.getvalue()


def _figure(width: float, height: float, bottom: float, right: float) -> Any:
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    # Fixed margins: a layout engine would triple the drawing time.
    fig = Figure(figsize=(width, height), dpi=100)
    fig.subplots_adjust(left=0.09, right=right, top=0.86, bottom=bottom)
    FigureCanvasAgg(fig)
    return fig


def _plain_ticks(*axes: Any) -> None:
    """Label ticks in plain digits (101325, not 1.013e5 with an offset) where the values allow it."""
    from matplotlib.ticker import ScalarFormatter

    for axis in axes:
        formatter = ScalarFormatter(useOffset=False)
        low, high = (abs(v) for v in axis.get_view_interval())
        formatter.set_scientific(not (max(low, high) < 1e9 and (max(low, high) >= 1e-4 or max(low, high) == 0)))
        axis.set_major_formatter(formatter)


def _title(dataset: str, s: Selection, extra: str = "") -> str:
    fixed = ", ".join(f"{k} = {v}" for k, v in (s.fixed_shown or s.fixed))
    return f"{dataset}: {s.attribute.name}{extra}" + (f"\n{fixed}" if fixed else "")


def render_map(table: pa.Table, dataset: str, s: Selection) -> bytes:
    """Return a PNG map of the slice in ``table`` with a colour bar in the attribute's units."""
    with _DRAW_LOCK:
        return _png(map_figure(table, dataset, s))


def map_figure(table: pa.Table, dataset: str, s: Selection) -> Any:
    """Return the matplotlib figure of :func:`render_map` (call it holding ``_DRAW_LOCK``)."""
    from matplotlib import colormaps

    if s.kind == "points":
        return _points_figure(table, dataset, s)
    y_name, x_name = s.free
    ys, yi = np.unique(_values(table, y_name), return_inverse=True)
    xs, xi = np.unique(_values(table, x_name), return_inverse=True)
    grid = np.full((len(ys), len(xs)), np.nan)
    grid[yi, xi] = _values(table, s.attribute.name)
    data = np.ma.masked_invalid(grid)
    x_label = f"{x_name} [{s.free_units[1]}]" if s.free_units[1] else x_name
    y_label = f"{y_name} [{s.free_units[0]}]" if s.free_units[0] else y_name
    mesh_x: Any = xs
    mesh_y: Any = ys
    if s.geographic is not None:
        # A rotated or projected grid drawn where it lies: each cell at its own latitude and longitude.
        lat, lon = np.full(grid.shape, np.nan), np.full(grid.shape, np.nan)
        lat[yi, xi] = _values(table, s.geographic[0])
        lon[yi, xi] = _values(table, s.geographic[1])
        if np.isfinite(lat).all() and np.isfinite(lon).all():
            mesh_x, mesh_y = lon, lat
            x_label, y_label = f"{s.geographic[1]} [degrees_east]", f"{s.geographic[0]} [degrees_north]"
    fig = _figure(8.0, 4.6, 0.11, 0.9)
    ax = fig.add_subplot()
    if data.count():
        cmap = colormaps["viridis"].with_extremes(bad="#c8c8c8")
        mesh = ax.pcolormesh(mesh_x, mesh_y, data, shading="nearest", cmap=cmap)
        bar = fig.colorbar(mesh, ax=ax, label=_label(s.attribute), fraction=0.05, pad=0.02)
        _plain_ticks(ax.xaxis, ax.yaxis, bar.ax.yaxis)
    else:
        ax.text(0.5, 0.5, "no data: every value of this slice is missing", ha="center", va="center",
                transform=ax.transAxes)
    ax.set_xlabel(x_label)
    ax.set_ylabel(y_label)
    ax.set_title(_title(dataset, s), fontsize=10)
    return fig


def _points_figure(table: pa.Table, dataset: str, s: Selection) -> Any:
    """Return a map of observations: one dot per record at its latitude/longitude, coloured by value."""
    from matplotlib import colormaps

    assert s.geographic is not None
    lat, lon = _values(table, s.geographic[0]), _values(table, s.geographic[1])
    values = _values(table, s.attribute.name)
    where = np.isfinite(lat) & np.isfinite(lon) & np.isfinite(values)
    fig = _figure(8.0, 4.6, 0.11, 0.9)
    ax = fig.add_subplot()
    if where.any():
        dots = ax.scatter(lon[where], lat[where], c=values[where], s=14, cmap=colormaps["viridis"],
                          edgecolors="none")
        bar = fig.colorbar(dots, ax=ax, label=_label(s.attribute), fraction=0.05, pad=0.02)
        _plain_ticks(bar.ax.yaxis)
    else:
        ax.text(0.5, 0.5, "no data: no observation with a position and a value", ha="center", va="center",
                transform=ax.transAxes)
    ax.set_xlabel(f"{s.geographic[1]} [degrees_east]")
    ax.set_ylabel(f"{s.geographic[0]} [degrees_north]")
    ax.grid(True, alpha=0.3)
    shown = f" ({int(where.sum()):,} observations{', sampled' if table.num_rows >= MAX_POINTS else ''})"
    ax.set_title(_title(dataset, s, shown), fontsize=10)
    return fig


def render_series(table: pa.Table, dataset: str, s: Selection) -> bytes:
    """Return a PNG line plot of the time series in ``table`` (gaps where values are missing)."""
    with _DRAW_LOCK:
        return _png(series_figure(table, dataset, s))


def series_figure(table: pa.Table, dataset: str, s: Selection) -> Any:
    """Return the matplotlib figure of :func:`render_series` (call it holding ``_DRAW_LOCK``)."""
    (t_name,) = s.free
    times = table.column(t_name)
    values = _values(table, s.attribute.name)
    order: Any = np.argsort(np.asarray(times.to_pylist(), dtype=object), kind="stable") if len(times) else []
    fig = _figure(8.0, 3.6, 0.27, 0.97)
    ax = fig.add_subplot()
    if pa.types.is_timestamp(times.type) or pa.types.is_date(times.type):
        x = times.to_numpy()[order]
    else:  # text times of calendars numpy cannot hold: evenly spaced, labelled
        labels = [str(v)[:10] for v in np.asarray(times.to_pylist(), dtype=object)[order]]
        x = np.arange(len(labels))
        step = max(1, len(labels) // 8)
        ax.set_xticks(x[::step], labels[::step], rotation=30, ha="right")
    y = values[order] if len(values) else values
    if np.isfinite(y).any():
        ax.plot(x, y, marker="o", markersize=3, linewidth=1.2)
        _plain_ticks(ax.yaxis)
    else:
        ax.text(0.5, 0.5, "no data: every value at this point is missing", ha="center", va="center",
                transform=ax.transAxes)
    ax.set_xlabel(t_name)
    ax.set_ylabel(_label(s.attribute))
    ax.grid(True, alpha=0.3)
    ax.set_title(_title(dataset, s, " time series"), fontsize=10)
    return fig
