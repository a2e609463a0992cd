"""What an EDR collection offers: the queries a dataset answers, its parameters, and the query parameters each
route reads — so that the metadata says exactly what is answered and no query parameter is silently ignored.

A grid answers position, radius, area, cube, trajectory and corridor when its X and Y axes are longitude and
latitude (CF 4.1 and 4.2: by ``standard_name`` or by units such as ``degrees_east``), for the parameters that lie
on both; a projected or rotated grid (X in km, ``grid_longitude`` in degrees) answers none, since a request's
``coords`` are CRS84 longitudes and latitudes. A station dataset (CF ``timeSeries`` with a ``timeseries_id``)
answers ``items``. A dataset that answers nothing is not an EDR collection (EDR 1.1 /req/edr/rc-data-queries: a
collection's ``data_queries`` lists at least one query).

Query parameters: each route reads its own (EDR 1.1 §8 per query type, plus ``crs`` and ``f``); any other is
refused with 400 naming it, as OGC API - Features - Part 1 (/req/core/query-param-unknown), which EDR 1.1 builds
on, requires. ``parameter_names`` — what OWSLib (0.35, 0.36) sends for ``parameter-name`` — is read as it,
declared here and in the OpenAPI description.
"""

from __future__ import annotations

import difflib
from typing import Iterable

from dstp.edr.items import station_columns
from dstp.errors import QueryError
from dstp.metadata import DatasetDetails, DimensionInfo

__all__ = ["CRS84", "GRID_QUERIES", "QUERY_PARAMETERS", "axes_by_kind", "declared_parameters", "lon_lat_axes",
           "not_offered", "parameters_of", "queries_of", "query_parameters"]

GRID_QUERIES = ("position", "radius", "area", "cube", "trajectory", "corridor")
_COMMON = ("datetime", "z", "parameter-name", "crs", "f")
#: The query parameters each route reads (EDR 1.1 §8; ``items`` and ``item``: OGC API - Features paging).
QUERY_PARAMETERS: dict[str, tuple[str, ...]] = {
    "position": ("coords", *_COMMON),
    "radius": ("coords", "within", "within-units", *_COMMON),
    "area": ("coords", *_COMMON),
    "cube": ("bbox", *_COMMON),
    "trajectory": ("coords", *_COMMON),
    "corridor": ("coords", "corridor-width", "width-units", "corridor-height", "height-units", *_COMMON),
    "items": ("bbox", "datetime", "limit", "offset", "f"),
    "item": ("datetime", "parameter-name", "crs", "f"),
}
#: Another name a widely used client sends for a parameter: OWSLib's ``query_data(parameter_names=[…])``.
_ALIASES = {"parameter_names": "parameter-name"}
#: The spellings of CRS84 (longitude, latitude on WGS84) a ``crs=`` may take: the only CRS answered.
CRS84 = ("OGC:CRS84", "CRS84", "http://www.opengis.net/def/crs/OGC/1.3/CRS84",
         "https://www.opengis.net/def/crs/OGC/1.3/CRS84", "[OGC:CRS84]")
_EAST = {"degrees_east", "degree_east", "degrees_e", "degree_e", "degreese", "degreee"}
_NORTH = {"degrees_north", "degree_north", "degrees_n", "degree_n", "degreesn", "degreen"}


def axes_by_kind(d: DatasetDetails) -> dict[str, DimensionInfo]:
    """Return the dataset's dimensions by CF axis (X, Y, Z, T), those that have one."""
    out: dict[str, DimensionInfo] = {}
    for dim in d.dimensions:
        if dim.axis in ("X", "Y", "Z", "T") and dim.coordinate and dim.axis not in out:
            out[dim.axis] = dim
    return out


def lon_lat_axes(d: DatasetDetails) -> tuple[DimensionInfo, DimensionInfo] | None:
    """Return the X and Y dimensions when they are longitude and latitude, None otherwise (absent, projected or
    rotated): a CRS84 point is matched against their values as they are."""
    by_axis = axes_by_kind(d)
    x, y = by_axis.get("X"), by_axis.get("Y")
    if x is None or y is None:
        return None
    columns = {c.name: c for c in d.coordinates}

    def is_(dim: DimensionInfo, standard: str, units: set[str]) -> bool:
        column = columns.get(dim.coordinate)
        named = dict(column.cf).get("standard_name") if column is not None else None
        unit = (dim.units or (column.units if column is not None else "")).replace(" ", "").lower()
        return named == standard or unit in units

    return (x, y) if is_(x, "longitude", _EAST) and is_(y, "latitude", _NORTH) else None


def parameters_of(d: DatasetDetails) -> tuple[str, ...]:
    """Return the parameters a collection offers: a station dataset's data variables, a grid's on its longitude
    and latitude axes (a variable on latitude alone, as ccm3's Gaussian weights ``gw``, has no cell to pick)."""
    if d.feature_type:
        return tuple(c.name for c in d.attributes)
    axes = lon_lat_axes(d)
    if axes is None:
        return ()
    return tuple(c.name for c in d.attributes if axes[0].name in c.dimensions and axes[1].name in c.dimensions)


def queries_of(d: DatasetDetails) -> tuple[str, ...]:
    """Return the EDR queries a dataset answers (none: it is not an EDR collection)."""
    if d.feature_type:
        return ("items",) if station_columns(d) is not None else ()
    return GRID_QUERIES if parameters_of(d) else ()


def not_offered(d: DatasetDetails, query: str) -> str:
    """Return why ``query`` is not answered on the dataset, naming what is (a refusal's message)."""
    name, offered = d.summary.id, queries_of(d)
    where = (f"; ask it with {', '.join(offered)}" if offered else
             f"; it is not an EDR collection (its records are at /datasets/{name})")
    if d.feature_type == "timeSeries" and not offered:
        return (f"{name} is a timeSeries dataset without a station id (no variable whose cf_role is timeseries_id): "
                f"EDR items name their station{where}")
    if d.feature_type and query == "items":
        return (f"{name} is a {d.feature_type} dataset: items (stations) are offered for station (CF timeSeries) "
                f"datasets{where}")
    if d.feature_type:
        return (f"{name} is a {'station' if offered else d.feature_type} dataset: {query} queries cut grids"
                + (f" (its data are its items: /edr/collections/{name}/items)" if offered else where))
    if query == "items":
        return (f"{name} is a grid: items (stations) are offered for station (CF timeSeries) datasets{where}")
    by_axis = axes_by_kind(d)
    x, y = by_axis.get("X"), by_axis.get("Y")
    if x is None or y is None:
        why = f"{name} has no longitude/latitude axes (X and Y)"
    elif lon_lat_axes(d) is None:
        why = (f"{name}'s X ({x.name}, {x.units or 'no units'}) and Y ({y.name}, {y.units or 'no units'}) are not "
               "longitude and latitude (a projected or rotated grid)")
    else:
        why = f"{name} has no parameter on its longitude and latitude axes ({x.name}, {y.name})"
    return f"{why}: EDR {query} queries take CRS84 longitudes and latitudes{where}"


def query_parameters(route: str, pairs: Iterable[tuple[str, str]]) -> dict[str, str]:
    """Return a request's query parameters as the route reads them, or raise QueryError naming each one it does
    not read (with the nearest it does), one given twice with different values, or a ``crs`` other than CRS84."""
    known = QUERY_PARAMETERS[route]
    out: dict[str, str] = {}
    unknown: list[str] = []
    for key, value in pairs:
        name = _ALIASES.get(key, key) if "parameter-name" in known else key
        if name not in known:
            unknown.append(key)
            continue
        if name in out and out[name] != value:
            given = [k for k, _ in pairs if _ALIASES.get(k, k) == name]
            both = " and ".join(dict.fromkeys(given)) if len(set(given)) > 1 else f"{name} twice"
            raise QueryError(f"{both} give{'s' if ' twice' in both else ''} {out[name]!r} and {value!r}: send one "
                             f"{name}" + (" (a list is a,b)" if name in ("parameter-name", "z") else ""))
        out[name] = value
    if unknown:
        # the nearest name read, if near enough: 'datetme' → datetime, but not 'coords' → crs
        hints = [f"{k!r}" + (f" (did you mean {close[0]}?)" if (close := difflib.get_close_matches(
            k, known, 1, 0.75)) else "") for k in unknown]
        what = (f"{'an' if route == 'area' else 'a'} {route} query" if route in GRID_QUERIES else
                "items" if route == "items" else "an item")
        raise QueryError(f"{'query parameters' if len(unknown) > 1 else 'query parameter'} {', '.join(hints)} "
                         f"{'are' if len(unknown) > 1 else 'is'} not read by {what}, which takes "
                         f"{', '.join(known)}")
    crs = out.get("crs", "")
    if crs and crs.strip() not in CRS84:
        raise QueryError(f"crs {crs!r} is not offered: coordinates are longitude, latitude on WGS84; send "
                         "crs=OGC:CRS84 or no crs")
    return out


def declared_parameters(routes: tuple[str, ...]) -> list[dict[str, object]]:
    """Return the OpenAPI description of the query parameters ``routes`` read (the API definition says exactly what
    is read, as OGC API - Features asks of a server that refuses the others)."""
    names = dict.fromkeys(n for r in routes for n in QUERY_PARAMETERS[r])
    if "parameter-name" in names:
        names.update(dict.fromkeys(_ALIASES))

    def readers(name: str) -> str:
        name = _ALIASES.get(name, name)
        return ", ".join(r for r in routes if name in QUERY_PARAMETERS[r])

    return [{"name": n, "in": "query", "required": False, "schema": {"type": "string"},
             "description": (f"OWSLib's name for parameter-name (the same when both are given); read by {readers(n)}"
                             if n in _ALIASES else f"read by {readers(n)}" + (
                                 "; CRS84 only" if n == "crs" else ""))} for n in names]
