"""EDR queries: their parameters (:func:`parse_query`), what they pick on a dataset's axes (:func:`resolve`),
the SQL that reads it with its size known before (:func:`plan_sql`), and which records an answer holds."""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, replace
from typing import Any

import numpy as np
import pyarrow as pa

from dstp.edr.corridor import centre_heights, corridor_cells
from dstp.edr.offers import GRID_QUERIES, axes_by_kind, lon_lat_axes, parameters_of
from dstp.errors import QueryError, ResultTooLargeError
from dstp.hyperslabs import Axis, quote_name, sql_literal
from dstp.metadata import DatasetDetails

__all__ = ["CONFORMANCE", "DISTANCE_UNITS", "FORMATS", "ITEM_FORMATS", "MAX_VALUES", "QUERY_TYPES", "EdrQuery",
           "axes_by_kind", "common_parameters", "dims_of", "inside_rows", "parse_query", "plan_sql", "points",
           "records", "refuse_over_limit", "resolve", "trajectory_rows"]

#: The most values (records × parameters) one EDR answer holds.
MAX_VALUES = 20_000_000

CONFORMANCE = [
    "http://www.opengis.net/spec/ogcapi-edr-1/1.1/conf/core",
    "http://www.opengis.net/spec/ogcapi-edr-1/1.1/conf/collections",
    "http://www.opengis.net/spec/ogcapi-edr-1/1.1/conf/json",
    "http://www.opengis.net/spec/ogcapi-edr-1/1.1/conf/covjson",
    "http://www.opengis.net/spec/ogcapi-common-1/1.0/conf/core",
    "http://www.opengis.net/spec/ogcapi-common-2/1.0/conf/collections",
]
QUERY_TYPES = GRID_QUERIES
#: Kilometres per unit of ``within-units``.
DISTANCE_UNITS = {"km": 1.0, "m": 0.001, "mi": 1.609344, "nmi": 1.852}
EARTH_RADIUS_KM = 6371.0088  # the IUGG mean radius
FORMATS = ("CoverageJSON", "CSV", "NetCDF", "GeoJSON", "Parquet")
#: What one station's observations (an item) are answered as.
ITEM_FORMATS = ("CoverageJSON", "CSV", "GeoJSON")


@dataclass(frozen=True, slots=True)
class EdrQuery:
    kind: str
    #: position: (lon, lat), or a list of them (MULTIPOINT); area: the polygon's exterior ring; cube: west, south, east, north
    geometry: Any
    start: str | None
    end: str | None
    z: tuple[float, float] | tuple[float, ...] | None
    z_list: bool
    parameters: tuple[str, ...]
    fmt: str
    #: radius: the distance from the point, in km; corridor: half the corridor's width, in km
    within_km: float = 0.0
    #: trajectory: each vertex's height (LINESTRING Z) and time in Unix seconds (LINESTRING M), or empty
    vertex_z: tuple[float, ...] = ()
    vertex_m: tuple[float, ...] = ()
    #: … and the level and time each one picks (values of the axes, by :func:`resolve`)
    picked_z: tuple[Any, ...] = ()
    picked_t: tuple[Any, ...] = ()
    #: corridor: the lines (lists of (lon, lat)); by :func:`resolve`, the (y, x) mask of the cells inside and
    #: their stored coordinates as complex numbers x + iy
    lines: tuple[tuple[tuple[float, float], ...], ...] = ()
    cell_mask: Any = None
    cell_keys: Any = None
    #: corridor with LINESTRING Z: half its height (in the vertical axis's units), the lines with their heights;
    #: by :func:`resolve`, the line's height nearest each cell of cell_keys, and the (cell, level) pairs inside
    half_height: float = 0.0
    line_heights: tuple[tuple[tuple[float, float, float], ...], ...] = ()
    cell_heights: Any = None
    cell_levels: int = 0


def _instant(text: str) -> str | None:
    text = text.strip()
    if text in ("", ".."):
        return None
    if not re.fullmatch(r"-?\d{4,}-\d\d-\d\d([T ]\d\d:\d\d(:\d\d(\.\d+)?)?)?(Z|[+-]00:?00)?", text):
        raise QueryError(f"datetime {text!r} is not an ISO 8601 instant (2001-03-01T00:00:00Z); an interval is a/b, "
                         "an open end ..")
    return re.sub(r"(Z|[+-]00:?00)$", "", text).replace("T", " ")


def parse_query(kind: str, params: dict[str, str], details: DatasetDetails) -> EdrQuery:
    """Return an EDR query of ``kind`` from its parameters, or raise QueryError naming what to fix."""
    from shapely import wkt
    from shapely.errors import ShapelyError

    if kind not in QUERY_TYPES:
        raise QueryError(f"query type {kind!r} is not offered; this server answers {', '.join(QUERY_TYPES)}")
    geometry: Any
    if kind == "cube":
        text = params.get("bbox", "")
        try:
            box = [float(v) for v in text.split(",")]
        except ValueError:
            box = []
        if len(box) != 4:
            raise QueryError(f"bbox {text!r} is not four numbers west,south,east,north")
        w, s, e, n = box
        if not (-90 <= s <= n <= 90 and -180 <= w <= e <= 180):
            raise QueryError(f"bbox {text!r} is not west,south,east,north in degrees with west ≤ east and south ≤ "
                             "north (a box across the antimeridian: ask for its two halves)")
        geometry = (w, s, e, n)
    else:
        text = params.get("coords", "")
        if not text:
            example = {"position": "POINT(lon lat)", "radius": "POINT(lon lat)", "area": "POLYGON((lon lat, …))"}.get(
                kind, "LINESTRING(lon lat, …)")
            raise QueryError(f"a {kind} query needs coords= ({example})")
        try:
            shape = wkt.loads(text)
        except (ShapelyError, ValueError, TypeError):
            raise QueryError(f"coords {text!r} is not well-known text (WKT), e.g. POINT(-20 40)") from None
        want = {"position": "Point", "radius": "Point", "area": "Polygon", "trajectory": "LineString",
                "corridor": "LineString"}[kind]
        if kind == "position" and shape.geom_type == "MultiPoint" and not shape.is_empty:
            want = "MultiPoint"
        if kind in ("trajectory", "corridor") and shape.geom_type == "MultiLineString" and not shape.is_empty:
            want = "MultiLineString"
        if shape.geom_type != want or shape.is_empty:
            raise QueryError(f"a {kind} query takes a {want.upper()}; coords is a {shape.geom_type.upper()}"
                             + (" EMPTY" if shape.is_empty else ""))
        if kind in ("trajectory", "corridor"):
            return _line_query(kind, text, shape, params, details)
        elif want == "MultiPoint":  # several positions: a list of (lon, lat), answered point by point
            geometry = [(float(p.x), float(p.y)) for p in shape.geoms]
            if not all(-180 <= lon <= 360 and -90 <= lat <= 90 for lon, lat in geometry):
                raise QueryError(f"coords {text!r} is not lon lat in degrees")
        elif kind in ("position", "radius"):
            geometry = (float(shape.x), float(shape.y))
            if not (-180 <= geometry[0] <= 360 and -90 <= geometry[1] <= 90):
                raise QueryError(f"coords {text!r} is not lon lat in degrees")
        else:
            geometry = shape
    return EdrQuery(kind, geometry, *common_parameters(params, details), within_km=_within_km(kind, params))


def common_parameters(params: dict[str, str], details: DatasetDetails
            ) -> tuple[str | None, str | None, Any, bool, tuple[str, ...], str]:
    """Return start, end, z, z_list, parameters and format of a query's common parameters."""
    start = end = None
    if params.get("datetime"):
        text = params["datetime"]
        a, slash, b = text.partition("/")
        start, end = _instant(a), (_instant(b) if slash else _instant(a))
        if start is None and end is None:
            raise QueryError(f"datetime {text!r} names no instant")
    z: Any = None
    z_list = False
    if params.get("z"):
        text = params["z"]
        repeat = re.fullmatch(r"R(\d+)/([^/]+)/([^/]+)", text.strip())
        try:
            if repeat:  # Rn/first/step: n levels from first, step apart (each answered by its nearest level)
                n, first, step = int(repeat[1]), float(repeat[2]), float(repeat[3])
                if not 1 <= n <= 10_000:
                    raise QueryError(f"z {text!r} asks for {n} levels; Rn/first/step takes 1 to 10,000")
                z = tuple(first + i * step for i in range(n))
                z_list = True
            elif "/" in text:
                lo, _, hi = text.partition("/")
                z = (float(lo), float(hi))
            else:
                z = tuple(float(v) for v in text.split(","))
                z_list = True
        except ValueError:
            raise QueryError(f"z {text!r} is not a level, a list of levels a,b, an interval a/b or Rn/first/step "
                             "(n levels from first, step apart)") from None
    names = list(parameters_of(details))
    parameters = tuple(p.strip() for p in params.get("parameter-name", "").split(",") if p.strip()) or tuple(names)
    unknown = [p for p in parameters if p not in names]
    if unknown:
        off_grid = {c.name: c.dimensions for c in details.attributes}.get(unknown[0])
        where = (f" on its longitude/latitude grid ({unknown[0]}'s dimensions: {', '.join(off_grid) or 'none'})"
                 if off_grid is not None else "")
        raise QueryError(f"parameter-name {unknown[0]!r} is not a parameter of {details.summary.id}{where}; its "
                         f"parameters are {', '.join(names)}")
    fmt = params.get("f", "CoverageJSON") or "CoverageJSON"
    fmt = {"coveragejson": "CoverageJSON", "covjson": "CoverageJSON", "json": "CoverageJSON", "csv": "CSV",
           "netcdf": "NetCDF", "nc": "NetCDF", "geojson": "GeoJSON", "parquet": "Parquet"}.get(
        fmt.lower(), fmt)
    if fmt not in FORMATS:
        raise QueryError(f"f={fmt!r} is not offered; choose one of {', '.join(FORMATS)}")
    return start, end, z, z_list, parameters, fmt


def _within_km(kind: str, params: dict[str, str]) -> float:
    within = 0.0
    if kind == "radius":
        text, unit = params.get("within", ""), params.get("within-units", "km") or "km"
        if unit not in DISTANCE_UNITS:
            raise QueryError(f"within-units={unit!r} is not offered; use one of {', '.join(DISTANCE_UNITS)}")
        try:
            within = float(text) * DISTANCE_UNITS[unit]
        except ValueError:
            raise QueryError(f"a radius query needs within= (a distance; within-units km, m, mi or nmi), got {text!r}") \
                from None
        if not 0 < within <= math.pi * EARTH_RADIUS_KM:
            raise QueryError(f"within={text} {unit} is not a distance between 0 and half the Earth's circumference")
    return within


def _line_query(kind: str, text: str, shape: Any, params: dict[str, str], details: DatasetDetails) -> EdrQuery:
    """Return a trajectory or corridor query of a (MULTI)LINESTRING, with or without Z and M."""
    parts = list(shape.geoms) if shape.geom_type == "MultiLineString" else [shape]
    has_z, has_m = bool(shape.has_z), bool(getattr(shape, "has_m", False))
    tag = "LINESTRING" + (" ZM" if has_z and has_m else " Z" if has_z else " M" if has_m else "")
    lines = [[tuple(float(v) for v in c) for c in part.coords] for part in parts]
    vertices = [c for line in lines for c in line]
    if not all(-180 <= c[0] <= 360 and -90 <= c[1] <= 90 for c in vertices):
        raise QueryError(f"coords {text!r} is not lon lat in degrees")
    if not all(math.isfinite(v) for c in vertices for v in c):
        raise QueryError(f"coords {text!r} holds a value that is not a number")
    axes = axes_by_kind(details)
    if kind == "corridor" and has_m:
        raise QueryError(f"coords {text!r}: a corridor with a time per vertex ({tag}) is not answered yet; send "
                         "LINESTRING(lon lat, …) or LINESTRING Z with datetime=")
    if has_z and params.get("z"):
        raise QueryError(f"coords {text!r} gives each vertex its height ({tag}) and z={params['z']!r} gives "
                         "another: EDR forbids both; drop z=")
    if has_m and params.get("datetime"):
        raise QueryError(f"coords {text!r} gives each vertex its time ({tag}, Unix seconds) and "
                         f"datetime={params['datetime']!r} gives another: EDR forbids both; drop datetime=")
    if has_z and "Z" not in axes:
        raise QueryError(f"coords {text!r} gives each vertex a height ({tag}), but {details.summary.id} has no "
                         "vertical axis; send LINESTRING(lon lat, …)")
    if has_m and "T" not in axes:
        raise QueryError(f"coords {text!r} gives each vertex a time ({tag}), but {details.summary.id} has no time "
                         "axis; send LINESTRING(lon lat, …)")
    half = 0.0
    if kind == "corridor":
        half = _corridor_half_width(params, details, has_z)
        if has_z:  # a 3-D corridor: each cell's levels within half the height of the line's height there
            return EdrQuery(kind, [(c[0], c[1]) for c in vertices], *common_parameters(params, details),
                            within_km=half, lines=tuple(tuple((c[0], c[1]) for c in line) for line in lines),
                            half_height=_corridor_half_height(params, details),
                            line_heights=tuple(tuple((c[0], c[1], c[2]) for c in line) for line in lines))
    return EdrQuery(kind, [(c[0], c[1]) for c in vertices], *common_parameters(params, details), within_km=half,
                    vertex_z=tuple(c[2] for c in vertices) if has_z else (),
                    vertex_m=tuple(c[-1] for c in vertices) if has_m else (),
                    lines=tuple(tuple((c[0], c[1]) for c in line) for line in lines))


def _corridor_half_height(params: dict[str, str], details: DatasetDetails) -> float:
    """Return half a 3-D corridor's height from corridor-height and height-units (the vertical axis's units)."""
    z = axes_by_kind(details)["Z"]
    height, unit = params.get("corridor-height", ""), params.get("height-units", "")
    if not height or not unit:
        raise QueryError(f"a corridor with a height per vertex (LINESTRING Z) needs corridor-height= (its whole "
                         f"height) and height-units= ({z.units or 'the units of ' + z.name})")
    if unit.replace(" ", "").lower() != (z.units or "").replace(" ", "").lower():
        raise QueryError(f"height-units={unit!r} is not offered: {details.summary.id}'s levels ({z.name}) are in "
                         f"{z.units or 'no stated units'}; send height-units={z.units!r}")
    try:
        value = float(height)
    except ValueError:
        value = math.nan
    if not (math.isfinite(value) and value > 0):
        raise QueryError(f"corridor-height={height!r} is not a positive number (the corridor's whole height in "
                         f"{unit})")
    return value / 2


def _corridor_half_width(params: dict[str, str], details: DatasetDetails, has_z: bool) -> float:
    """Return half a corridor's width in km from corridor-width and width-units (both required)."""
    width, unit = params.get("corridor-width", ""), params.get("width-units", "")
    units = ", ".join(DISTANCE_UNITS)
    if not width:
        raise QueryError(f"a corridor query needs corridor-width= (the corridor's whole width) and width-units= "
                         f"({units})")
    if not unit:
        raise QueryError(f"corridor-width={width!r} needs width-units= (one of {units})")
    if unit.lower() not in DISTANCE_UNITS:
        raise QueryError(f"width-units={unit!r} is not offered; use one of {units}")
    try:
        km = float(width) * DISTANCE_UNITS[unit.lower()]
    except ValueError:
        raise QueryError(f"corridor-width={width!r} is not a number (the corridor's whole width in {unit})") \
            from None
    if not 0 < km / 2 <= math.pi * EARTH_RADIUS_KM:
        raise QueryError(f"corridor-width={width} {unit} is not a width between 0 and the Earth's circumference")
    height, height_units = params.get("corridor-height", ""), params.get("height-units", "")
    if (height or height_units) and not has_z:
        if "Z" in axes_by_kind(details):
            raise QueryError(f"corridor-height={height!r}: a corridor's height is centred on each vertex's own "
                             "height: send LINESTRING Z (lon lat z, …), or drop corridor-height and height-units "
                             f"and pick {details.summary.id}'s levels with z=")
        try:
            ok = float(height) > 0 and bool(height_units)
        except ValueError:
            ok = False
        if not ok:
            raise QueryError(f"corridor-height={height!r} height-units={height_units!r}: give both, a positive "
                             "height and its units")
        # a dataset with no vertical axis has nothing a height could narrow: the corridor is its cells
    return km / 2


def _dataset_lon(lon: float, values: np.ndarray) -> float:
    """Return a −180…180 longitude in the convention the dataset stores (0…360 when its values exceed 180)."""
    return lon % 360.0 if values.size and float(np.nanmax(values)) > 180.0 else ((lon + 180.0) % 360.0) - 180.0


def _nearest(values: np.ndarray, target: float) -> Any:
    """Return the value nearest ``target``; of two as near, the larger, as xarray's ``sel(method="nearest")``
    (pandas) takes it whichever way the axis runs."""
    as_float = values.astype("f8")
    distance = np.abs(as_float - target)
    ties = np.flatnonzero(distance == distance.min())
    return values[int(ties[np.argmax(as_float[ties])])]


def resolve(q: EdrQuery, details: DatasetDetails, axes: dict[str, Axis]) -> EdrQuery:
    """Return ``q`` with what it picks on the dataset's axes: each vertex's level (nearest) and time (nearest,
    Unix seconds on the dataset's calendar) of a trajectory with Z or M, the cells of a corridor."""
    by_axis = axes_by_kind(details)
    if q.vertex_z and q.kind == "trajectory":
        zv = axes[by_axis["Z"].name].values
        assert zv is not None
        q = replace(q, picked_z=tuple(_nearest(zv, v) for v in q.vertex_z))
    if q.vertex_m:
        t = by_axis["T"]
        tv = axes[t.name].values
        assert tv is not None
        seconds = _epoch_seconds(tv, t.calendar or "standard")
        # a tie goes to the later time, as xarray's sel(method="nearest") (pandas) takes it
        last = seconds.size - 1
        q = replace(q, picked_t=tuple(tv[last - int(np.argmin(np.abs(seconds - m)[::-1]))] for m in q.vertex_m))
    if q.kind == "corridor" and "X" in by_axis and "Y" in by_axis:
        xs, ys = axes[by_axis["X"].name].values, axes[by_axis["Y"].name].values
        assert xs is not None and ys is not None
        xf, yf = xs.astype("f8"), ys.astype("f8")
        mask = corridor_cells([list(line) for line in q.lines], q.within_km * 1000.0, ((xf + 180.0) % 360.0) - 180.0,
                              yf)
        heights = None
        if q.line_heights:  # 3-D: a cell is kept with the levels within half the height of the line's there
            zv = axes[by_axis["Z"].name].values
            assert zv is not None
            heights = centre_heights([list(line) for line in q.line_heights], q.within_km * 1000.0,
                                     ((xf + 180.0) % 360.0) - 180.0, yf, mask)
            levels = (np.abs(zv.astype("f8")[None, None, :] - heights[:, :, None]) <= q.half_height).sum(axis=2)
            mask = mask & (levels > 0)
            q = replace(q, cell_levels=int(levels[mask].sum()))
        iy, ix = np.nonzero(mask)
        q = replace(q, cell_mask=mask, cell_keys=xf[ix] + 1j * yf[iy],
                    cell_heights=heights[iy, ix] if heights is not None else None)
    return q


def _epoch_seconds(values: np.ndarray, calendar: str) -> np.ndarray:
    """Return a time axis as seconds since 1970-01-01 on its calendar (Unix time on the Gregorian ones)."""
    if values.dtype.kind == "M" and calendar in ("standard", "gregorian", "proleptic_gregorian"):
        return values.astype("datetime64[us]").astype("int64") / 1e6
    import cftime

    dates = []
    for v in values:
        m = re.match(r"(-?\d+)-(\d+)-(\d+)(?:[T ](\d+):(\d+)(?::(\d+)(?:\.(\d+))?)?)?", str(v))
        if m is None:
            raise QueryError(f"time {v!r} of the dataset is not an instant a LINESTRING M can be matched to")
        y, mo, d, hh, mm, ss, frac = m.groups()
        dates.append(cftime.datetime(int(y), int(mo), int(d), int(hh or 0), int(mm or 0), int(ss or 0),
                                     int(((frac or "") + "000000")[:6]), calendar=calendar))
    return np.asarray(cftime.date2num(dates, "seconds since 1970-01-01", calendar=calendar), dtype="f8")


def points(q: EdrQuery) -> bool:
    """Return whether ``q`` is a position query at several points (``MULTIPOINT``)."""
    return q.kind == "position" and isinstance(q.geometry, list)


def plan_sql(q: EdrQuery, details: DatasetDetails, axes: dict[str, Axis]) -> tuple[str, int]:
    """Return the SQL answering ``q`` and the number of values it returns (records × parameters), known before
    it runs from the axes; raise ResultTooLargeError (413) past MAX_VALUES."""
    by_axis = axes_by_kind(details)
    if lon_lat_axes(details) is None:  # the routes refuse it first (offers.not_offered says why)
        raise QueryError(f"{details.summary.id} has no longitude/latitude axes (X and Y): EDR {q.kind} queries "
                         "take CRS84 longitudes and latitudes")
    x, y = by_axis["X"], by_axis["Y"]
    xs, ys = axes[x.name].values, axes[y.name].values
    assert xs is not None and ys is not None
    where: list[str] = []
    counts: dict[str, int] = {}
    if q.kind == "trajectory" or points(q):
        cells = sorted({(_nearest(xs, _dataset_lon(lon, xs)), _nearest(ys, lat)) for lon, lat in q.geometry})
        where.append("(" + " or ".join(f"({quote_name(x.coordinate)} = {sql_literal(cx)} and "
                                       f"{quote_name(y.coordinate)} = {sql_literal(cy)})" for cx, cy in cells) + ")")
        counts[x.name], counts[y.name] = len(cells), 1
    elif q.kind == "position":
        lon = _dataset_lon(q.geometry[0], xs)
        lx, ly = _nearest(xs, lon), _nearest(ys, q.geometry[1])
        where += [f"{quote_name(x.coordinate)} = {sql_literal(lx)}", f"{quote_name(y.coordinate)} = {sql_literal(ly)}"]
        counts[x.name] = counts[y.name] = 1
    elif q.kind == "corridor":
        if q.cell_mask is None or not q.cell_mask.any():
            raise QueryError(f"no cell centre of {details.summary.id} lies within {q.within_km:g} km of the line; "
                             "widen corridor-width or move the line")
        where.append(_cells_sql(q.cell_mask, xs, ys, x.coordinate, y.coordinate))
        counts[x.name], counts[y.name] = int(q.cell_mask.sum()), 1
        if q.cell_heights is not None:  # 3-D: the levels any cell keeps; the count is of (cell, level) pairs
            zd = by_axis["Z"]
            lo_z, hi_z = float(np.min(q.cell_heights)) - q.half_height, float(np.max(q.cell_heights)) + q.half_height
            where.append(f"{quote_name(zd.coordinate)} between {sql_literal(lo_z)} and {sql_literal(hi_z)}")
            counts[x.name], counts[zd.name] = q.cell_levels, 1
    else:
        w, s, e, n = q.geometry if q.kind == "cube" else _radius_box(q) if q.kind == "radius" else q.geometry.bounds
        lo, hi = _dataset_lon(w, xs), _dataset_lon(e, xs)
        if e - w >= 360.0:  # all the way round
            picked_x = np.ones(xs.size, bool)
        elif lo > hi:  # the box straddles the dataset's seam (0° on 0…360 storage): ask for both sides
            picked_x = (xs >= lo) | (xs <= hi)
            where.append(f"({quote_name(x.coordinate)} >= {sql_literal(lo)} or {quote_name(x.coordinate)} <= "
                         f"{sql_literal(hi)})")
        else:
            picked_x = (xs >= lo) & (xs <= hi)
            where.append(f"{quote_name(x.coordinate)} between {sql_literal(lo)} and {sql_literal(hi)}")
        where.append(f"{quote_name(y.coordinate)} between {sql_literal(float(s))} and {sql_literal(float(n))}")
        counts[x.name] = int(picked_x.sum())
        counts[y.name] = int(((ys >= s) & (ys <= n)).sum())
    if "T" in by_axis:
        t = by_axis["T"]
        tv = axes[t.name].values
        if q.start is not None or q.end is not None:
            lo_t, hi_t = _time_literal(q.start, tv), _time_literal(q.end, tv)
            column = quote_name(t.coordinate)
            if lo_t is not None:
                where.append(f"{column} >= {lo_t}")
            if hi_t is not None:
                where.append(f"{column} <= {hi_t}")
            counts[t.name] = _count_between(tv, q.start, q.end)
        elif q.picked_t:
            picked = sorted(set(q.picked_t))
            literal = (lambda v: f"timestamp '{str(v).replace('T', ' ')}'") if tv is not None and \
                tv.dtype.kind == "M" else sql_literal
            where.append(f"{quote_name(t.coordinate)} in ({', '.join(literal(v) for v in picked)})")
            counts[t.name] = len(picked)
    elif q.start is not None or q.end is not None:
        raise QueryError(f"{details.summary.id} has no time axis; drop datetime=")
    if "Z" in by_axis and q.z is not None:
        zd = by_axis["Z"]
        zv = axes[zd.name].values
        assert zv is not None
        column = quote_name(zd.coordinate)
        if q.z_list:
            picked = [_nearest(zv, v) for v in q.z]
            where.append(f"{column} in ({', '.join(sql_literal(v) for v in picked)})")
            counts[zd.name] = len(set(picked))
        else:
            lo_z, hi_z = sorted(q.z)
            where.append(f"{column} between {sql_literal(lo_z)} and {sql_literal(hi_z)}")
            counts[zd.name] = int(((zv >= lo_z) & (zv <= hi_z)).sum())
    elif "Z" in by_axis and q.picked_z:
        zd = by_axis["Z"]
        picked = sorted(set(q.picked_z))
        where.append(f"{quote_name(zd.coordinate)} in ({', '.join(sql_literal(v) for v in picked)})")
        counts[zd.name] = len(picked)
    elif q.z is not None:
        raise QueryError(f"{details.summary.id} has no vertical axis; drop z=")
    dims = dims_of(q, details)
    records = math.prod(counts.get(d.name, d.size) for d in details.dimensions if d.name in dims)
    values = records * len(q.parameters)
    refuse_over_limit(values, f"this {q.kind} query would return {values:,} values ({records:,} records × "
                      f"{len(q.parameters)} parameters)", "a smaller area, fewer times or levels, or fewer parameters")
    coords = [quote_name(d.coordinate) for d in details.dimensions if d.name in dims and d.coordinate]
    sql = (f"select {', '.join(coords + [quote_name(p) for p in q.parameters])} from "
           f"{quote_name(details.summary.id)} where {' and '.join(where)}")
    return sql, values


def _cells_sql(mask: np.ndarray, xs: np.ndarray, ys: np.ndarray, x: str, y: str) -> str:
    """Return a predicate holding the (y, x) cells of ``mask``: up to 16 bands of rows, each with the runs of
    columns its cells take (the records read; the cells outside are dropped by :func:`inside_rows`)."""
    rows = np.flatnonzero(mask.any(axis=1))
    terms = []
    for band in np.array_split(rows, min(16, rows.size)):
        cols = np.flatnonzero(mask[band].any(axis=0))
        runs = np.split(cols, np.flatnonzero(np.diff(cols) > 1) + 1)
        if len(runs) > 4:
            runs = [cols]
        across = " or ".join(f"{quote_name(x)} between {sql_literal(xs[r].min())} and {sql_literal(xs[r].max())}"
                             for r in runs)
        terms.append(f"({quote_name(y)} between {sql_literal(ys[band].min())} and {sql_literal(ys[band].max())} "
                     f"and ({across}))")
    return "(" + " or ".join(terms) + ")"


def _radius_box(q: EdrQuery) -> tuple[float, float, float, float]:
    """Return a west, south, east, north box holding every point within ``q.within_km`` of ``q.geometry``."""
    lon, lat = q.geometry
    dlat = math.degrees(q.within_km / EARTH_RADIUS_KM)
    south, north = max(-90.0, lat - dlat), min(90.0, lat + dlat)
    if south <= -90.0 or north >= 90.0:
        return -180.0, south, 180.0, north  # over a pole: every longitude
    dlon = math.degrees(q.within_km / (EARTH_RADIUS_KM * math.cos(math.radians(max(abs(south), abs(north))))))
    if dlon >= 180.0:
        return -180.0, south, 180.0, north
    west, east = ((lon - dlon + 180.0) % 360.0) - 180.0, ((lon + dlon + 180.0) % 360.0) - 180.0
    return (west, south, east, north) if west <= east else (-180.0, south, 180.0, north)


def great_circle_km(lon0: float, lat0: float, lon: np.ndarray, lat: np.ndarray) -> np.ndarray:
    """Return the haversine distances (km) from (lon0, lat0) to each (lon, lat), on the IUGG mean sphere."""
    p0, p = math.radians(lat0), np.radians(lat)
    dp, dl = p - p0, np.radians(lon - lon0)
    h = np.sin(dp / 2) ** 2 + math.cos(p0) * np.cos(p) * np.sin(dl / 2) ** 2
    return 2 * EARTH_RADIUS_KM * np.arcsin(np.sqrt(np.clip(h, 0.0, 1.0)))


def dims_of(q: EdrQuery, details: DatasetDetails) -> set[str]:
    cols = {c.name: c for c in details.attributes}
    dims: set[str] = set()
    for p in q.parameters:
        dims |= set(cols[p].dimensions)
    return dims


def _time_literal(text: str | None, values: np.ndarray | None) -> str | None:
    if text is None:
        return None
    if values is not None and values.dtype.kind == "M":
        return f"timestamp '{text}'"
    return sql_literal(text.replace(" ", "T") if values is not None and values.size and "T" in str(values[0])
                       else text)


def _count_between(values: np.ndarray | None, start: str | None, end: str | None) -> int:
    if values is None:
        return 0
    if values.dtype.kind == "M":
        lo = np.datetime64(start.replace(" ", "T")) if start else None
        hi = np.datetime64(end.replace(" ", "T")) if end else None
        keep = np.ones(values.size, bool)
        if lo is not None:
            keep &= values >= lo
        if hi is not None:
            keep &= values <= hi
        return int(keep.sum())
    text = np.array([str(v).replace("T", " ") for v in values])
    keep = np.ones(values.size, bool)
    if start:
        keep &= text >= start
    if end:
        keep &= text <= end
    return int(keep.sum())


def inside_rows(q: EdrQuery, details: DatasetDetails, table: pa.Table) -> np.ndarray | None:
    """Return which records an area, radius or corridor query keeps (None: all), by their cell centres."""
    if q.kind not in ("area", "radius", "corridor"):
        return None
    ax = axes_by_kind(details)
    xs = table.column(ax["X"].coordinate).to_numpy(zero_copy_only=False).astype("f8")
    ys = table.column(ax["Y"].coordinate).to_numpy(zero_copy_only=False).astype("f8")
    if q.kind == "corridor" and q.cell_heights is not None:  # 3-D: the cell's levels near the line's height
        order = np.argsort(q.cell_keys)
        keys, heights = q.cell_keys[order], q.cell_heights[order]
        at = np.clip(np.searchsorted(keys, xs + 1j * ys), 0, keys.size - 1)
        level = table.column(ax["Z"].coordinate).to_numpy(zero_copy_only=False).astype("f8")
        return (keys[at] == xs + 1j * ys) & (np.abs(level - heights[at]) <= q.half_height)
    if q.kind == "corridor":
        return np.isin(xs + 1j * ys, q.cell_keys)
    xs = ((xs + 180.0) % 360.0) - 180.0
    if q.kind == "radius":
        return great_circle_km(q.geometry[0], q.geometry[1], xs, ys) <= q.within_km
    from shapely import contains_xy, intersects_xy

    return np.asarray(contains_xy(q.geometry, xs, ys) | intersects_xy(q.geometry, xs, ys))


def trajectory_rows(q: EdrQuery, details: DatasetDetails, table: pa.Table) -> list[int]:
    """Return, vertex by vertex, the records of the vertex's nearest cell (every time and level, in order)."""
    ax = axes_by_kind(details)
    xs = table.column(ax["X"].coordinate).to_numpy(zero_copy_only=False).astype("f8")
    ys = table.column(ax["Y"].coordinate).to_numpy(zero_copy_only=False).astype("f8")
    grid_x, grid_y = np.unique(xs), np.unique(ys)
    # the storage convention (0…360 or −180…180) is the whole axis's: the cells read may all lie below 180°
    try:
        whole = np.array([float(ax["X"].max)])
    except ValueError:
        whole = grid_x
    # LINESTRING Z / M: each vertex's own level and time (as resolve picked them)
    levels = table.column(ax["Z"].coordinate).to_numpy(zero_copy_only=False) \
        if q.picked_z and ax["Z"].coordinate in table.column_names else None
    times = table.column(ax["T"].coordinate).to_numpy(zero_copy_only=False) \
        if q.picked_t and ax["T"].coordinate in table.column_names else None
    if times is not None and times.dtype.kind == "M":
        times = times.astype("datetime64[us]")
    rows: list[int] = []
    for i, (lon, lat) in enumerate(q.geometry):
        cx = _nearest(grid_x, _dataset_lon(lon, whole)) if grid_x.size else np.nan
        cy = _nearest(grid_y, lat) if grid_y.size else np.nan
        hit = (xs == cx) & (ys == cy)
        if levels is not None:
            hit &= levels == q.picked_z[i]
        if times is not None:
            hit &= times == q.picked_t[i]
        rows += np.flatnonzero(hit).tolist()
    return rows



def records(q: EdrQuery, details: DatasetDetails, table: pa.Table) -> pa.Table:
    """Return the records the answer holds, in the CSV answer's order."""
    if q.kind == "trajectory" or points(q):
        return table.take(pa.array(trajectory_rows(q, details, table), pa.int64()))
    keep = inside_rows(q, details, table)
    return table if keep is None else table.filter(pa.array(keep))




def refuse_over_limit(values: int, what: str, smaller: str) -> None:
    """Raise ResultTooLargeError (413) saying ``what`` when ``values`` passes :data:`MAX_VALUES`."""
    if values > MAX_VALUES:
        raise ResultTooLargeError(f"{what}; the limit is {MAX_VALUES:,}: ask for {smaller}")
