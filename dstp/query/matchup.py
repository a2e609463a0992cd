"""Matchups: for each record of one side, the grid values of the other at the nearest time and place.

    select b.station, b.time, b.temp, m.temperature, m.time as model_time
      from matchup(buoys, ccm3, time => interval '1 day', position => 'nearest') as mu

``matchup(left, right, …)`` is a table in FROM. ``left`` is a dataset, a CTE or a
subquery of records (station or track observations); ``right`` is a gridded
dataset, local or remote. Every left record appears once per point of the
right grid's *other* dimensions (levels, say — filter them with WHERE), with
the right columns taken at the grid point nearest to it along each
correlation key both sides have:

=========== ========================= =====================================================
key         option (default)          meaning
=========== ========================= =====================================================
time        ``time => 'nearest'``     nearest time; ``interval '1 day'``: nearest within
                                      1 day, else NULL; ``'exact'``; ``'none'``: every time
latitude,   ``position => 'nearest'`` nearest grid cell along each axis (as xarray's
longitude                             ``sel(method='nearest')``), longitudes periodic on a
                                      global grid; ``'50 km'``: nearest, NULL beyond 50 km
                                      (great circle); ``'none'``
vertical    ``vertical => 'nearest'`` nearest level; ``'exact'``; ``'none'``
=========== ========================= =====================================================

Ties go to the larger coordinate value, as pandas' and xarray's ``nearest``
do. Keys are reconciled as in joins (:mod:`._keys`): longitudes in 0…360 or
−180…180, radians, pressures in Pa or hPa, time calendars (refused when their
dates do not correspond).

Running one (:mod:`.execute`): the left records are computed first (held in
memory), each gets the index of its nearest grid point along every matched
key (numpy ``searchsorted`` over the coordinate arrays the catalog holds), and
only the index box those records need is read from the right dataset — from
its files, or from a remote server with the box as coordinate ranges. DuckDB
then joins the two on the indices.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Sequence

import numpy as np
from sqlglot import exp

from dstp.errors import QueryError
from dstp.query._calendar import Interval, interval_of
from dstp.query._keys import compatible_times
from dstp.query._scope import ColumnMeta, DatasetRef, Source, column_meta
from dstp.query._text import error_at

__all__ = ["MatchKey", "MatchupSpec", "index_column", "nearest_indices", "parse_options"]

_MODES = {"time": ("nearest", "exact", "none"), "position": ("nearest", "none"), "vertical": ("nearest", "exact", "none")}
EARTH_RADIUS_KM = 6371.0088


def index_column(dimension: str) -> str:
    """Return the name of the column holding the right grid's index along ``dimension``."""
    return f"__dstp_i_{dimension}"


@dataclass(frozen=True, slots=True)
class MatchKey:
    """One key a matchup matches on: a left column against the right grid's coordinate along a dimension."""

    kind: str
    left: str
    right: str
    dimension: str
    mode: str
    #: time: microseconds; vertical: in the right side's units; None: no limit.
    tolerance: float | None = None


@dataclass(eq=False)
class MatchupSpec:
    """A ``matchup(left, right, …)`` of a query, decided at validation."""

    index: int
    alias: str
    left: Source
    left_name: str
    right: DatasetRef
    right_name: str
    time: str = "nearest"
    time_tolerance: Interval | None = None
    position: str = "nearest"
    max_km: float | None = None
    vertical: str = "nearest"
    explicit: tuple[str, ...] = ()
    keys: list[MatchKey] = field(default_factory=list)
    #: The SQL giving the left records (its columns: ``left_columns``).
    left_sql: str = ""
    left_columns: list[str] = field(default_factory=list)
    #: Conjuncts on the right grid's coordinates of unmatched dimensions (``lev = 850``): prune it.
    right_pushdown: list[Any] = field(default_factory=list)
    node: Any = None

    @property
    def left_table(self) -> str:
        return f"__dstp_mleft_{self.index}"

    @property
    def right_table(self) -> str:
        return f"__dstp_mright_{self.index}"

    @property
    def dimensions(self) -> tuple[str, ...]:
        return tuple(k.dimension for k in self.keys)


def parse_options(spec: MatchupSpec, options: Sequence[exp.Expression], sql: str) -> None:
    """Fill ``spec`` from the ``name => value`` arguments of ``matchup(…)``; raise for anything else."""
    for option in options:
        if not isinstance(option, exp.Kwarg):
            raise error_at(QueryError, "after the two sides, matchup takes options like time => interval '1 day', "
                           "position => 'nearest' or position => '50 km', vertical => 'nearest'", sql, option)
        name = option.this.name.lower()
        value = option.expression
        if name not in _MODES:
            raise error_at(QueryError, f"matchup has no option {name!r} (options: time, position, vertical)",
                           sql, option)
        spec.explicit = (*spec.explicit, name)
        text = value.this.lower().strip() if isinstance(value, exp.Literal) and value.is_string else None
        if text in _MODES[name]:
            setattr(spec, name, text)
            continue
        if name == "time":
            width = interval_of(value)
            if width is None or width.months or width.micros <= 0:
                raise error_at(QueryError, "time => takes 'nearest', 'exact', 'none' or a tolerance in days, hours "
                               "or minutes, e.g. time => interval '1 day'", sql, value)
            spec.time, spec.time_tolerance = "nearest", width
        elif name == "position":
            km = _kilometres(value)
            if km is None:
                raise error_at(QueryError, "position => takes 'nearest', 'none' or a distance, e.g. "
                               "position => '50 km'", sql, value)
            spec.position, spec.max_km = "nearest", km
        else:
            raise error_at(QueryError, "vertical => takes 'nearest', 'exact' or 'none'", sql, value)


def _kilometres(value: exp.Expression) -> float | None:
    text = value.this if isinstance(value, exp.Literal) else ""
    parts = str(text).lower().split()
    try:
        number = float(parts[0]) if parts else float("nan")
    except ValueError:
        return None
    if not math.isfinite(number) or number <= 0:
        return None
    if len(parts) == 1 and not value.is_string:  # type: ignore[attr-defined]
        return number
    factor = {"km": 1.0, "m": 1e-3, "kilometres": 1.0, "kilometers": 1.0, "metres": 1e-3, "meters": 1e-3}
    return number * factor[parts[1]] if len(parts) == 2 and parts[1] in factor else None


def right_axes(ref: DatasetRef) -> dict[str, tuple[str, str]]:
    """Return {key kind: (coordinate column, dimension)} of the right grid's 1-D key coordinates."""
    ds = ref.dataset
    out: dict[str, tuple[str, str]] = {}
    for name, dimension in ds.dimension_coordinates().items():
        meta = column_meta(ds, name, None)
        if meta.key is not None and meta.key not in out:
            out[meta.key] = (name, dimension)
    return out


def _key_off_axes(ref: DatasetRef, kind: str) -> str | None:
    """Return the right grid's column that carries key ``kind`` on more than one dimension, if any."""
    ds = ref.dataset
    for name in ds.column_names():
        if len(ds.column_dimensions(name)) >= 2 and column_meta(ds, name, None).key == kind:
            return str(name)
    return None


def choose_keys(spec: MatchupSpec, left_metas: dict[str, ColumnMeta], sql: str) -> None:
    """Decide which keys the matchup matches on, with the left column and right coordinate of each."""
    axes = right_axes(spec.right)
    by_kind: dict[str, list[ColumnMeta]] = {}
    for meta in left_metas.values():
        if meta.key is not None:
            by_kind.setdefault(meta.key, []).append(meta)
    keys: list[MatchKey] = []
    wanted = [("time", spec.time), ("latitude", spec.position), ("longitude", spec.position),
              ("vertical", spec.vertical)]
    for kind, mode in wanted:
        if mode == "none":
            continue
        option = "position" if kind in ("latitude", "longitude") else kind
        left = by_kind.get(kind, [])
        if kind not in axes and left and kind in ("latitude", "longitude"):
            off_axis = _key_off_axes(spec.right, kind)
            if off_axis is not None and option not in spec.explicit:
                # Dropping the key would pair each record with every cell at its time: refuse instead.
                raise error_at(QueryError, f"matchup on position: {spec.right_name}'s {kind} is {off_axis}, a 2-D "
                               "coordinate of a curvilinear grid, and dstp matches positions on 1-D grid axes only; "
                               "write position => 'none' to pair each record with every cell at its time, or "
                               "match on the grid's own axes (e.g. its rlat/rlon) in a CTE", sql, spec.node)
        if kind not in axes or not left:
            if option in spec.explicit:
                side = spec.right_name if kind not in axes else spec.left_name
                raise error_at(QueryError, f"matchup on {kind}: {side} has no {kind} key"
                               + (" on a dimension of its grid" if kind not in axes else "")
                               + f"; leave {option} => out, or write {option} => 'none'", sql, spec.node)
            continue
        if len(left) > 1:
            declared = [m for m in left if m.origin is not None
                        and m.origin[0].dataset.declared_keys().get(m.origin[1]) == kind]
            left = declared[:1] if len(declared) == 1 else left
        if len(left) > 1:
            names = ", ".join(m.name for m in left)
            raise error_at(QueryError, f"matchup on {kind}: {spec.left_name} has several {kind} columns ({names}); "
                           "select the one to match in a CTE or subquery", sql, spec.node)
        column, dimension = axes[kind]
        tolerance = None
        if kind == "time":
            why = compatible_times(left[0], column_meta(spec.right.dataset, column, spec.right))
            if why is not None:
                raise error_at(QueryError, why, sql, spec.node)
            tolerance = float(spec.time_tolerance.micros) if spec.time_tolerance is not None else None
        keys.append(MatchKey(kind, left[0].name, column, dimension, mode, tolerance))
    if not keys:
        raise error_at(QueryError, f"matchup({spec.left_name}, {spec.right_name}) has no correlation key in common "
                       "(time, latitude/longitude, vertical); a matchup pairs records by them", sql, spec.node)
    kinds = {k.kind for k in keys}
    if ("latitude" in kinds) != ("longitude" in kinds):
        raise error_at(QueryError, "a position matchup needs latitude and longitude on both sides; write "
                       "position => 'none' to match on the other keys", sql, spec.node)
    spec.keys = keys


# -- nearest grid points (run time) ------------------------------------------------------------

def nearest_indices(values: np.ndarray, grid: np.ndarray, *, valid: np.ndarray | None = None,
                    tolerance: float | None = None, exact: bool = False, period: float | None = None) -> np.ndarray:
    """Return, for each value, the index of the nearest grid coordinate (−1: missing, or none within tolerance).

    ``grid`` is monotonic (ascending or descending). Integers (times as model
    microseconds) are compared exactly; floats as float64. Ties go to the
    larger coordinate value, as pandas' ``get_indexer(method='nearest')`` does.
    ``period`` (360 for a global longitude axis) makes the axis wrap around.
    """
    integer = values.dtype.kind in "iu" and np.asarray(grid).dtype.kind in "iu"
    kind = np.int64 if integer else np.float64
    grid = np.asarray(grid, dtype=kind)
    values = np.asarray(values, dtype=kind)
    out = np.full(values.shape, -1, dtype=np.int64)
    ok_in = np.ones(values.shape, bool) if valid is None else np.asarray(valid, bool).copy()
    if not integer:
        ok_in &= np.isfinite(values)
    if grid.size == 0 or not ok_in.any():
        return out
    descending = grid.size > 1 and grid[0] > grid[-1]
    asc = grid[::-1] if descending else grid
    v = values[ok_in]
    if period is not None:
        v = asc[0] + np.mod(v - asc[0], period)
    pos = np.searchsorted(asc, v, side="left")
    below = np.clip(pos - 1, 0, asc.size - 1)
    above = np.clip(pos, 0, asc.size - 1)
    d_below = np.abs(v - asc[below])
    d_above = np.abs(asc[above] - v)
    if period is not None:  # the first point is also above the last one, one period on
        wrap_above = pos >= asc.size
        d_above = np.where(wrap_above, np.abs(asc[0] + period - v), d_above)
        above = np.where(wrap_above, 0, above)
        wrap_below = pos == 0
        d_below = np.where(wrap_below, np.abs(v - (asc[-1] - period)), d_below)
        below = np.where(wrap_below, asc.size - 1, below)
    else:
        d_above = np.where(pos >= asc.size, d_below, d_above)
        above = np.where(pos >= asc.size, below, above)
        d_below = np.where(pos == 0, d_above, d_below)
        below = np.where(pos == 0, above, below)
    take_above = d_above <= d_below
    if period is not None:  # a tie across the seam goes to the larger value: the last point
        take_above &= ~((d_above == d_below) & (pos >= asc.size))
    idx = np.where(take_above, above, below)
    dist = np.where(take_above, d_above, d_below)
    ok = np.ones(idx.shape, bool)
    if exact:
        ok &= dist == 0
    if tolerance is not None:
        ok &= dist <= tolerance
    out[ok_in] = np.where(ok, asc.size - 1 - idx if descending else idx, -1)
    return out


def great_circle_km(lat1: np.ndarray, lon1: np.ndarray, lat2: np.ndarray, lon2: np.ndarray) -> np.ndarray:
    """Return haversine distances in km between points given in degrees."""
    p1, p2 = np.deg2rad(lat1), np.deg2rad(lat2)
    dp, dl = p2 - p1, np.deg2rad(lon2 - lon1)
    h = np.sin(dp / 2) ** 2 + np.cos(p1) * np.cos(p2) * np.sin(dl / 2) ** 2
    return 2 * EARTH_RADIUS_KM * np.arcsin(np.sqrt(np.clip(h, 0.0, 1.0)))


# -- staging a matchup (run time) --------------------------------------------------------------

@dataclass(frozen=True, slots=True)
class Axis:
    """The right grid's coordinate along one matched dimension, as the matching needs it."""

    values: np.ndarray
    meta: ColumnMeta


def _degrees(values: np.ndarray, meta: ColumnMeta) -> np.ndarray:
    out = np.asarray(values, dtype=np.float64)
    return np.rad2deg(out) if meta.radians else out


def _period(grid: np.ndarray) -> float | None:
    """Return 360 when a longitude axis goes round the globe (its cells wrap), else None."""
    if grid.size < 2:
        return None
    step = float(np.median(np.abs(np.diff(grid))))
    return 360.0 if abs(float(np.max(grid) - np.min(grid)) + step - 360.0) <= 1e-6 * 360 else None


def _toward(values: np.ndarray, grid: np.ndarray) -> np.ndarray:
    """Return longitudes shifted by whole turns to lie nearest the grid's centre (−10 → 350 on a 0…360 grid)."""
    centre = (float(np.min(grid)) + float(np.max(grid))) / 2
    return values + 360.0 * np.round((centre - values) / 360.0)


def _time_axis(left: np.ndarray, left_meta: ColumnMeta, grid: np.ndarray, grid_meta: ColumnMeta
               ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Return (left, grid, valid) as integer microseconds on one time line (see the module docstring)."""
    from dstp.query._calendar import model_microseconds

    same = left_meta.calendar_family == grid_meta.calendar_family
    calendar = (grid_meta.calendar or "standard") if same else "standard"
    lv = model_microseconds(left, calendar)
    gv = model_microseconds(grid, calendar)
    missing = np.iinfo(np.int64).min
    return lv, gv, lv != missing


def stage_left(spec: MatchupSpec, left: Any, axes: dict[str, Axis]) -> tuple[dict[str, np.ndarray], dict[str, range]]:
    """Return the index columns of the left records (−1: no match) and the index box of the right grid they need.

    ``left`` is a pyarrow Table of the left records; ``axes`` the right grid's
    coordinates by dimension.
    """
    import pyarrow as pa

    indices: dict[str, np.ndarray] = {}
    n = left.num_rows
    lat_key = next((k for k in spec.keys if k.kind == "latitude"), None)
    lon_key = next((k for k in spec.keys if k.kind == "longitude"), None)
    for key in spec.keys:
        column = left.column(key.left)
        axis = axes[key.dimension]
        left_meta = spec.left.meta(key.left)
        if key.kind == "time":
            raw = column.to_numpy(zero_copy_only=False)
            if pa.types.is_timestamp(column.type):
                raw = column.cast(pa.timestamp("us")).to_numpy(zero_copy_only=False)
            lv, gv, valid = _time_axis(raw, left_meta, axis.values, axis.meta)
            found = nearest_indices(lv, gv, valid=valid, tolerance=key.tolerance, exact=key.mode == "exact")
        else:
            lv = np.asarray(column.to_numpy(zero_copy_only=False), dtype=np.float64)
            gv = np.asarray(axis.values, dtype=np.float64)
            period = None
            if key.kind in ("latitude", "longitude"):
                lv, gv = _degrees(lv, left_meta), _degrees(gv, axis.meta)
            if key.kind == "longitude":
                period = _period(gv)
                lv = _toward(lv, gv) if period is None else lv
            if key.kind == "vertical":
                lv = lv * _vertical_factor(left_meta, axis.meta)
            found = nearest_indices(lv, gv, exact=key.mode == "exact", period=period)
        indices[key.dimension] = found
    if lat_key is not None and lon_key is not None and spec.max_km is not None:
        yi, xi = indices[lat_key.dimension], indices[lon_key.dimension]
        ok = (yi >= 0) & (xi >= 0)
        lat = _degrees(np.asarray(left.column(lat_key.left).to_numpy(zero_copy_only=False), np.float64),
                       spec.left.meta(lat_key.left))
        lon = _degrees(np.asarray(left.column(lon_key.left).to_numpy(zero_copy_only=False), np.float64),
                       spec.left.meta(lon_key.left))
        glat = _degrees(axes[lat_key.dimension].values, axes[lat_key.dimension].meta)
        glon = _degrees(axes[lon_key.dimension].values, axes[lon_key.dimension].meta)
        dist = np.full(n, np.inf)
        dist[ok] = great_circle_km(lat[ok], lon[ok], glat[yi[ok]], glon[xi[ok]])
        far = ~(dist <= spec.max_km)
        indices[lat_key.dimension] = np.where(far, -1, yi)
        indices[lon_key.dimension] = np.where(far, -1, xi)
    matched = np.ones(n, bool)
    for found in indices.values():
        matched &= found >= 0
    box: dict[str, range] = {}
    for dim, found in indices.items():
        hits = found[matched]
        box[dim] = range(int(hits.min()), int(hits.max()) + 1) if hits.size else range(0, 0)
    return indices, box


def _vertical_factor(left: ColumnMeta, right: ColumnMeta) -> float:
    from dstp.query._keys import _SCALE

    a, b = _SCALE.get((left.units or "").lower()), _SCALE.get((right.units or "").lower())
    if a is None or b is None or a[0] != b[0]:
        return 1.0
    return a[1] / b[1]
