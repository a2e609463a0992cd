"""OGC API – Environmental Data Retrieval 1.1 on the query engine: position, radius, area, cube, trajectory.

Framework-free: :mod:`dstp.http.edr_routes` serves it at ``/edr``. An EDR
query becomes one dstp SQL query (the service runs it under the caller's
policy, admission and audit) and its records become CoverageJSON or CSV, or
netCDF (CF), GeoJSON or Parquet (``f=``; see :func:`netcdf`, :func:`geojson`, :func:`parquet`):

- **position** ``coords=POINT(lon lat)``: the grid cell nearest the point
  (nearest coordinate value along each horizontal axis, as
  ``ds.sel(lat=…, lon=…, method="nearest")``; a tie goes to the lower index),
  every time and level asked for — a CoverageJSON ``PointSeries``;
- **area** ``coords=POLYGON((…))``: the cells whose centres lie inside the
  polygon (or on its edge) — a ``Grid`` whose cells outside are null;
- **cube** ``bbox=west,south,east,north``: the cells whose centres lie in the box — a ``Grid``;
- **radius** ``coords=POINT(lon lat)&within=R&within-units=km``: the cells whose centres lie within R
  along the great circle (haversine on the IUGG mean sphere, 6371.0088 km) — a ``Grid``, cells outside null;
- **trajectory** ``coords=LINESTRING(lon lat, …)``: vertex by vertex, the nearest cell's values at every
  time and level asked for — a ``Trajectory`` (a composite axis of (t, z, x, y) tuples).

``datetime`` (an instant, or ``a/b`` with ``..`` for an open end) and ``z``
(a value, ``a/b``, or a list ``a,b``) narrow the time and vertical axes;
``parameter-name`` picks the variables (default: all). Longitudes are
−180…180 in requests whatever the files store (0…360 is converted). Before
anything is read the size is known from the axes; past :data:`MAX_VALUES`
values the query is refused (413) with that figure.
"""

from __future__ import annotations

import csv
import io
import json
import math
import re
import tempfile
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from dstp.catalog.netcdf4_ import NETCDF_LOCK
from dstp.cf_encoding import TimeEncoding, variable_attrs
from dstp.errors import QueryError, ResultTooLargeError
from dstp.hyperslabs import Axis, quote_name, sql_literal
from dstp.metadata import ColumnInfo, DatasetDetails, DimensionInfo

__all__ = ["MAX_VALUES", "MEDIA_TYPES", "EdrQuery", "collection", "coverage_json", "csv_text", "geojson", "netcdf",
           "parquet", "parse_query", "plan_sql", "records"]

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
QUERY_TYPES = ("position", "radius", "area", "cube", "trajectory")
#: Kilometres per unit of ``within-units``.
DISTANCE_UNITS = {"km": 1.0, "m": 0.001, "mi": 1.609344, "nmi": 1.852}
EARTH_RADIUS_KM = 6371.0088  # the IUGG mean radius
FORMATS = ("CoverageJSON", "CSV", "NetCDF", "GeoJSON", "Parquet")


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
    #: radius: the distance from the point, in km
    within_km: float = 0.0


def axes_by_kind(d: DatasetDetails) -> dict[str, DimensionInfo]:
    """Return the dataset's dimensions by CF axis (X, Y, Z, T), those that have one."""
    out: dict[str, DimensionInfo] = {}
    for dim in d.dimensions:
        if dim.axis in ("X", "Y", "Z", "T") and dim.coordinate and dim.axis not in out:
            out[dim.axis] = dim
    return out


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
            raise QueryError(f"a {kind} query needs coords= ({'POINT(lon lat)' if kind == 'position' else 'POLYGON((lon lat, …))'})")
        try:
            shape = wkt.loads(text)
        except (ShapelyError, ValueError, TypeError):
            raise QueryError(f"coords {text!r} is not well-known text (WKT), e.g. POINT(-20 40)") from None
        want = {"position": "Point", "radius": "Point", "area": "Polygon", "trajectory": "LineString"}[kind]
        if kind == "position" and shape.geom_type == "MultiPoint" and not shape.is_empty:
            want = "MultiPoint"
        if shape.geom_type != want:
            raise QueryError(f"a {kind} query takes a {want.upper()}; coords is a {shape.geom_type.upper()}")
        if kind == "trajectory":
            if shape.has_z or getattr(shape, "has_m", False):
                raise QueryError(f"coords {text!r}: a trajectory with heights or times per vertex (LINESTRING Z, M or "
                                 "ZM) is not answered yet; send LINESTRING(lon lat, …) with z= and datetime=")
            geometry = [(float(x), float(y)) for x, y in shape.coords]
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
    names = [c.name for c in details.attributes]
    parameters = tuple(p.strip() for p in params.get("parameter-name", "").split(",") if p.strip()) or tuple(names)
    unknown = [p for p in parameters if p not in names]
    if unknown:
        raise QueryError(f"parameter-name {unknown[0]!r} is not a parameter of {details.summary.id}; its parameters "
                         f"are {', '.join(names)}")
    fmt = params.get("f", "CoverageJSON") or "CoverageJSON"
    fmt = {"coveragejson": "CoverageJSON", "covjson": "CoverageJSON", "json": "CoverageJSON", "csv": "CSV",
           "netcdf": "NetCDF", "nc": "NetCDF", "geojson": "GeoJSON", "parquet": "Parquet"}.get(
        fmt.lower(), fmt)
    if fmt not in FORMATS:
        raise QueryError(f"f={fmt!r} is not offered; choose one of {', '.join(FORMATS)}")
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
    return EdrQuery(kind, geometry, start, end, z, z_list, parameters, fmt, within)


def _dataset_lon(lon: float, values: np.ndarray) -> float:
    """Return a −180…180 longitude in the convention the dataset stores (0…360 when its values exceed 180)."""
    return lon % 360.0 if values.size and float(np.nanmax(values)) > 180.0 else ((lon + 180.0) % 360.0) - 180.0


def _nearest(values: np.ndarray, target: float) -> Any:
    distance = np.abs(values.astype("f8") - target)
    return values[int(np.argmin(distance))]


def points(q: EdrQuery) -> bool:
    """Return whether ``q`` is a position query at several points (``MULTIPOINT``)."""
    return q.kind == "position" and isinstance(q.geometry, list)


def plan_sql(q: EdrQuery, details: DatasetDetails, axes: dict[str, Axis]) -> tuple[str, int]:
    """Return the SQL answering ``q`` and the number of values it returns (records × parameters), known before
    it runs from the axes; raise ResultTooLargeError (413) past MAX_VALUES."""
    by_axis = axes_by_kind(details)
    if "X" not in by_axis or "Y" not in by_axis:
        raise QueryError(f"{details.summary.id} has no longitude/latitude axes (X and Y): EDR position, area and "
                         "cube queries need them")
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
    elif q.z is not None:
        raise QueryError(f"{details.summary.id} has no vertical axis; drop z=")
    dims = dims_of(q, details)
    records = math.prod(counts.get(d.name, d.size) for d in details.dimensions if d.name in dims)
    values = records * len(q.parameters)
    if values > MAX_VALUES:
        raise ResultTooLargeError(f"this {q.kind} query would return {values:,} values ({records:,} records × "
                                 f"{len(q.parameters)} parameters); the limit is {MAX_VALUES:,}: ask for a smaller "
                                 "area, fewer times or levels, or fewer parameters")
    coords = [quote_name(d.coordinate) for d in details.dimensions if d.name in dims and d.coordinate]
    sql = (f"select {', '.join(coords + [quote_name(p) for p in q.parameters])} from "
           f"{quote_name(details.summary.id)} where {' and '.join(where)}")
    return sql, values


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


# -- answers ---------------------------------------------------------------------------------------------

_COVJSON_AXIS = {"X": "x", "Y": "y", "Z": "z", "T": "t"}


def iso(value: Any) -> str:
    if isinstance(value, np.datetime64):
        return str(value.astype("datetime64[s]")) + "Z"
    if hasattr(value, "isoformat"):
        return value.isoformat().replace("+00:00", "") + ("Z" if "T" in value.isoformat() else "")
    return str(value).replace(" ", "T") + "Z"


def _plain(values: np.ndarray) -> list[Any]:
    return [None if isinstance(v, float) and math.isnan(v) else v for v in values.tolist()]


def coverage_json(q: EdrQuery, details: DatasetDetails, table: pa.Table) -> dict[str, Any]:
    """Return the records of an EDR query as a CoverageJSON Coverage (PointSeries, Grid or Trajectory)."""
    if q.kind == "trajectory":
        return _trajectory_json(q, details, table)
    if points(q):  # MULTIPOINT: one PointSeries per point, in the order asked
        coverages = []
        for lon, lat in q.geometry:
            one = replace(q, geometry=(lon, lat))
            rows = trajectory_rows(replace(q, geometry=[(lon, lat)]), details, table)
            coverages.append(coverage_json(one, details, table.take(pa.array(rows, pa.int64()))))
        return {"type": "CoverageCollection", "coverages": coverages,
                "parameters": {p: _parameter(c) for c in details.attributes for p in q.parameters if p == c.name}}
    dims = [d for d in details.dimensions if d.name in dims_of(q, details) and d.coordinate]
    axes: dict[str, Any] = {}
    index_of: list[np.ndarray] = []
    names: list[str] = []
    for d in dims:
        raw = table.column(d.coordinate).to_numpy(zero_copy_only=False)
        # each record's place along the axis, the axis in the order its values first appear (the files' order)
        _, first, inverse = np.unique(raw, return_index=True, return_inverse=True)
        appearance = np.argsort(first, kind="stable")
        rank = np.empty(len(first), dtype=np.int64)
        rank[appearance] = np.arange(len(first), dtype=np.int64)
        ordered = raw[first[appearance]]
        index_of.append(rank[np.asarray(inverse).reshape(-1)])
        key = _COVJSON_AXIS.get(d.axis, d.name)
        names.append(key)
        if d.axis == "T":
            axes[key] = {"values": [iso(v) for v in ordered]}
        elif d.axis == "X":
            axes[key] = {"values": [((float(v) + 180.0) % 360.0) - 180.0 for v in ordered]}
        else:
            axes[key] = {"values": [v.item() if hasattr(v, "item") else v for v in ordered]}
    shape = [len(axes[n]["values"]) for n in names]
    kept = inside_rows(q, details, table)
    inside = np.ones(table.num_rows, bool) if kept is None else kept
    ranges: dict[str, Any] = {}
    parameters: dict[str, Any] = {}
    cols = {c.name: c for c in details.attributes}
    for p in q.parameters:
        grid = np.full(shape, np.nan)
        values = table.column(p).to_numpy(zero_copy_only=False).astype("f8")
        flat = np.ravel_multi_index(tuple(index_of), shape) if shape else np.zeros(table.num_rows, np.int64)
        grid.reshape(-1)[flat[inside]] = values[inside]
        ranges[p] = {"type": "NdArray", "dataType": "float", "axisNames": names, "shape": shape,
                     "values": _plain(grid.reshape(-1))}
        parameters[p] = _parameter(cols[p])
    domain_type = "PointSeries" if q.kind == "position" else "Grid"  # area, radius: cells outside are null
    return {
        "type": "Coverage",
        "domain": {"type": "Domain", "domainType": domain_type, "axes": axes,
                   "referencing": [{"coordinates": ["x", "y"], "system": {
                       "type": "GeographicCRS", "id": "http://www.opengis.net/def/crs/OGC/1.3/CRS84"}}]
                   + ([{"coordinates": ["t"], "system": {"type": "TemporalRS", "calendar": _calendar(details)}}]
                      if "t" in axes else [])},
        "parameters": parameters,
        "ranges": ranges,
    }


def _calendar(details: DatasetDetails) -> str:
    t = axes_by_kind(details).get("T")
    cal = (t.calendar if t is not None else "") or "standard"
    return "Gregorian" if cal in ("standard", "gregorian", "proleptic_gregorian") else cal


def _parameter(c: ColumnInfo) -> dict[str, Any]:
    out: dict[str, Any] = {"type": "Parameter", "observedProperty": {"label": {"en": c.description or c.name}}}
    standard = dict(c.cf).get("standard_name")
    if standard:
        out["observedProperty"]["id"] = f"http://vocab.nerc.ac.uk/standard_name/{standard}/"
    if c.units:
        out["unit"] = {"symbol": c.units}
    return out


def csv_text(q: EdrQuery, details: DatasetDetails, table: pa.Table) -> str:
    """Return the records of an EDR query as CSV (one row per record; area and radius: only the cells inside;
    trajectory: vertex by vertex)."""
    out = io.StringIO()
    writer = csv.writer(out)
    writer.writerow(table.column_names)
    columns = [table.column(i).to_pylist() for i in range(table.num_columns)]
    keep = inside_rows(q, details, table)
    order = trajectory_rows(q, details, table) if q.kind == "trajectory" or points(q) else range(table.num_rows)
    for i in order:
        if keep is None or keep[i]:
            writer.writerow(["" if v is None else iso(v) if hasattr(v, "isoformat") else v
                             for v in (c[i] for c in columns)])
    return out.getvalue()


def inside_rows(q: EdrQuery, details: DatasetDetails, table: pa.Table) -> np.ndarray | None:
    """Return which records an area or radius query keeps (None: all), by their cell centres."""
    if q.kind not in ("area", "radius"):
        return None
    ax = axes_by_kind(details)
    xs = table.column(ax["X"].coordinate).to_numpy(zero_copy_only=False).astype("f8")
    ys = table.column(ax["Y"].coordinate).to_numpy(zero_copy_only=False).astype("f8")
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
    rows: list[int] = []
    for lon, lat in q.geometry:
        cx = _nearest(grid_x, _dataset_lon(lon, whole)) if grid_x.size else np.nan
        cy = _nearest(grid_y, lat) if grid_y.size else np.nan
        rows += np.flatnonzero((xs == cx) & (ys == cy)).tolist()
    return rows


def _trajectory_json(q: EdrQuery, details: DatasetDetails, table: pa.Table) -> dict[str, Any]:
    rows = trajectory_rows(q, details, table)
    ax = axes_by_kind(details)
    found = [("t", ax.get("T")), ("z", ax.get("Z")), ("x", ax.get("X")), ("y", ax.get("Y"))]
    parts = [(k, d) for k, d in found if d is not None and d.coordinate in table.column_names]
    columns = {k: table.column(d.coordinate).to_pylist() for k, d in parts}
    tuples = []
    for i in rows:
        one = []
        for k, _ in parts:
            v = columns[k][i]
            one.append(iso(v) if k == "t" else ((float(v) + 180.0) % 360.0) - 180.0 if k == "x" else v)
        tuples.append(one)
    cols = {c.name: c for c in details.attributes}
    ranges = {}
    for p in q.parameters:
        values = table.column(p).to_numpy(zero_copy_only=False).astype("f8")
        ranges[p] = {"type": "NdArray", "dataType": "float", "axisNames": ["composite"], "shape": [len(rows)],
                     "values": _plain(values[rows]) if rows else []}
    return {
        "type": "Coverage",
        "domain": {"type": "Domain", "domainType": "Trajectory", "axes": {"composite": {
            "dataType": "tuple", "coordinates": [k for k, _ in parts], "values": tuples}},
            "referencing": [{"coordinates": ["x", "y"], "system": {
                "type": "GeographicCRS", "id": "http://www.opengis.net/def/crs/OGC/1.3/CRS84"}}]},
        "parameters": {p: _parameter(cols[p]) for p in q.parameters},
        "ranges": ranges,
    }


def collection(details: DatasetDetails, base: str) -> dict[str, Any]:
    """Return a dataset as an EDR collection: extents, parameters and the queries it answers."""
    s = details.summary
    url = f"{base}/edr/collections/{s.id}"
    extent: dict[str, Any] = {}
    if s.bbox is not None:
        lat0, lat1, lon0, lon1 = s.bbox
        if lon1 - lon0 >= 359.0 or lon1 > 180.0:
            lon0, lon1 = -180.0, 180.0
        extent["spatial"] = {"bbox": [[lon0, lat0, lon1, lat1]], "crs": "OGC:CRS84"}
    if s.time_start:
        extent["temporal"] = {"interval": [[s.time_start, s.time_end]], "trs": _calendar(details)}
    z = axes_by_kind(details).get("Z")
    if z is not None:
        extent["vertical"] = {"interval": [[z.min, z.max]], "vrs": z.units or z.coordinate}
    queries = {k: {"link": {"href": f"{url}/{k}", "rel": "data", "variables": {
        "query_type": k, "output_formats": list(FORMATS), "default_output_format": "CoverageJSON"}}}
        for k in QUERY_TYPES}
    return {
        "id": s.id, "title": s.title or s.id, "description": s.summary or s.title or s.id,
        "extent": extent, "data_queries": queries, "output_formats": list(FORMATS),
        "crs": ["OGC:CRS84"],
        "parameter_names": {c.name: _parameter(c) for c in details.attributes},
        "links": [{"href": url, "rel": "self", "type": "application/json"},
                  {"href": f"{base}/datasets/{s.id}", "rel": "alternate", "type": "text/html"}],
    }


def landing(base: str) -> dict[str, Any]:
    return {"title": "dstp OGC API - EDR", "description": "The datasets of this dstp server as EDR collections.",
            "links": [{"href": f"{base}/edr", "rel": "self", "type": "application/json"},
                      {"href": f"{base}/edr/conformance", "rel": "conformance", "type": "application/json"},
                      {"href": f"{base}/edr/collections", "rel": "data", "type": "application/json"},
                      {"href": f"{base}/openapi.json", "rel": "service-desc", "type": "application/json"}]}


# -- netCDF, GeoJSON and Parquet (the records the CSV answer holds; netCDF: a CF file on the query's grid) --

MEDIA_TYPES = {"NetCDF": "application/x-netcdf", "GeoJSON": "application/geo+json",
               "Parquet": "application/vnd.apache.parquet"}


def records(q: EdrQuery, details: DatasetDetails, table: pa.Table) -> pa.Table:
    """Return the records the answer holds, in the CSV answer's order."""
    if q.kind == "trajectory" or points(q):
        return table.take(pa.array(trajectory_rows(q, details, table), pa.int64()))
    keep = inside_rows(q, details, table)
    return table if keep is None else table.filter(pa.array(keep))


def parquet(q: EdrQuery, details: DatasetDetails, table: pa.Table) -> bytes:
    out = io.BytesIO()
    pq.write_table(records(q, details, table), out)
    return out.getvalue()


def geojson(q: EdrQuery, details: DatasetDetails, table: pa.Table) -> dict[str, Any]:
    """Return the records as a FeatureCollection of Points (properties: times as ISO text, missing as null)."""
    ax = axes_by_kind(details)
    x, y = ax["X"].coordinate, ax["Y"].coordinate
    features = []
    for row in records(q, details, table).to_pylist():
        lon, lat = float(row.pop(x)), float(row.pop(y))
        props = {k: (iso(v) if hasattr(v, "isoformat") else
                     None if isinstance(v, float) and math.isnan(v) else v) for k, v in row.items()}
        features.append({"type": "Feature", "geometry": {"type": "Point",
                                                         "coordinates": [((lon + 180.0) % 360.0) - 180.0, lat]},
                         "properties": props})
    return {"type": "FeatureCollection", "features": features, "numberReturned": len(features)}


def netcdf(q: EdrQuery, details: DatasetDetails, table: pa.Table) -> bytes:
    """Return the answer as a CF netCDF-4 file (see the module docstring)."""
    import xarray as xr

    cols = {c.name: c for c in details.attributes}
    dims = [d for d in details.dimensions if d.name in dims_of(q, details) and d.coordinate]

    def axis_values(d: Any, column: Any) -> tuple[np.ndarray, dict[str, Any]]:
        if d.axis == "T" or " since " in d.units:
            enc = TimeEncoding(d.units, d.calendar or "standard")
            return enc.encode(column), {"units": d.units, "calendar": enc.calendar, "standard_name": "time",
                                        "axis": "T"}
        extra = {"X": {"standard_name": "longitude", "axis": "X"}, "Y": {"standard_name": "latitude", "axis": "Y"},
                 "Z": {"axis": "Z"}}.get(d.axis, {})
        return np.asarray(column.to_numpy(zero_copy_only=False)), {**({"units": d.units} if d.units else {}),
                                                                   **extra}

    if q.kind == "trajectory" or points(q):
        kept = records(q, details, table)
        coords = {}
        for d in dims:
            values, attrs = axis_values(d, kept.column(d.coordinate))
            coords[d.coordinate] = xr.Variable("obs", values, attrs)
        data = {p: xr.Variable("obs", kept.column(p).to_numpy(zero_copy_only=False).astype("f8"),
                               variable_attrs(cols[p])) for p in q.parameters}
        ds = xr.Dataset(data, coords=coords, attrs={"featureType": "point" if points(q) else "trajectory"})
    else:
        index_of, coords, shape = [], {}, []
        for d in dims:
            column = table.column(d.coordinate)
            raw = column.to_numpy(zero_copy_only=False)
            _, first = np.unique(raw, return_index=True)
            order = np.sort(first)
            lookup = {v: i for i, v in enumerate(raw[order].tolist())}
            index_of.append(np.array([lookup[v] for v in raw.tolist()], dtype=np.int64))
            values, attrs = axis_values(d, column.take(pa.array(order)))
            coords[d.name] = xr.Variable(d.name, values, attrs)
            shape.append(len(order))
        keep = inside_rows(q, details, table)
        inside = np.ones(table.num_rows, bool) if keep is None else keep
        flat = np.ravel_multi_index(tuple(index_of), shape) if shape else np.zeros(table.num_rows, np.int64)
        data = {}
        for p in q.parameters:
            grid = np.full(shape, np.nan)
            values = table.column(p).to_numpy(zero_copy_only=False).astype("f8")
            grid.reshape(-1)[flat[inside]] = values[inside]
            data[p] = xr.Variable([d.name for d in dims], grid, variable_attrs(cols[p]))
        ds = xr.Dataset(data, coords=coords)
    ds.attrs.update({"Conventions": "CF-1.8", "source": f"dstp OGC API EDR {q.kind} query of {details.summary.id}"})
    encoding = {n: {"_FillValue": None} for n in ds.coords}
    with tempfile.TemporaryDirectory(prefix="dstp-edr-") as folder:
        path = Path(folder) / "answer.nc"
        with NETCDF_LOCK:
            ds.to_netcdf(path, engine="netcdf4", encoding=encoding)
        return path.read_bytes()


def geojson_bytes(q: EdrQuery, details: DatasetDetails, table: pa.Table) -> bytes:
    return json.dumps(geojson(q, details, table), separators=(",", ":")).encode()
