"""The items of an EDR collection of stations (CF ``timeSeries``): its stations, and one station's observations.

A station dataset is a table of observations with the station's id (the variable whose ``cf_role`` is
``timeseries_id``), latitude and longitude broadcast to each (:mod:`dstp.catalog.dsg`). Its items are its
stations, ordered by id: ``/items`` is a GeoJSON FeatureCollection of Points paged by ``limit`` (default
:data:`DEFAULT_LIMIT`, at most :data:`MAX_LIMIT`) and ``offset``, narrowed by ``bbox`` (west,south,east,north
on −180…180; the station's position) and ``datetime`` (stations with an observation then); each feature says
its first and last time and how many observations it has. ``/items/{id}`` is that station's observations in
the files' order: a CoverageJSON ``PointSeries``, or CSV, or GeoJSON (one Point feature per observation).
Gridded datasets have no items (their cells are asked for with the other queries).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa

from dstp.errors import QueryError
from dstp.hyperslabs import quote_name, sql_literal
from dstp.metadata import ColumnInfo, DatasetDetails

__all__ = ["DEFAULT_LIMIT", "MAX_LIMIT", "ItemsQuery", "StationColumns", "feature_collection", "item_sql",
           "parse_items", "station_columns", "stations_sql"]

DEFAULT_LIMIT = 10
MAX_LIMIT = 10_000


@dataclass(frozen=True, slots=True)
class StationColumns:
    """The columns of a station dataset that make its items."""

    id: ColumnInfo
    lat: str
    lon: str
    time: ColumnInfo | None


@dataclass(frozen=True, slots=True)
class ItemsQuery:
    bbox: tuple[float, float, float, float] | None
    limit: int
    offset: int
    start: str | None
    end: str | None


def station_columns(details: DatasetDetails) -> StationColumns | None:
    """Return the id, latitude, longitude and time columns of a station (timeSeries) dataset, None otherwise."""
    if details.feature_type != "timeSeries":
        return None
    cols = details.coordinates
    ident = next((c for c in cols if dict(c.cf).get("cf_role") == "timeseries_id"), None)

    def named(standard: str, units: str) -> str | None:
        found = next((c for c in cols if dict(c.cf).get("standard_name") == standard), None) or \
            next((c for c in cols if c.units.replace(" ", "").lower() == units), None)
        return found.name if found is not None else None

    lat, lon = named("latitude", "degrees_north"), named("longitude", "degrees_east")
    time = next((c for c in cols if dict(c.cf).get("standard_name") == "time" or c.arrow_type.startswith("timestamp")),
                None)
    if ident is None or lat is None or lon is None:
        return None
    return StationColumns(ident, lat, lon, time)


def _time_bounds(columns: StationColumns, start: str | None, end: str | None) -> list[str]:
    if start is None and end is None:
        return []
    if columns.time is None:
        raise QueryError("this station dataset has no time coordinate; drop datetime=")
    column = quote_name(columns.time.name)
    literal = (lambda v: f"timestamp '{v}'") if columns.time.arrow_type.startswith("timestamp") else sql_literal
    return ([f"{column} >= {literal(start)}"] if start else []) + ([f"{column} <= {literal(end)}"] if end else [])


def parse_items(params: dict[str, str], start: str | None, end: str | None) -> ItemsQuery:
    """Return the paging, bbox and datetime of an items request, or raise QueryError quoting what is wrong."""
    box = None
    if params.get("bbox"):
        text = params["bbox"]
        try:
            values = [float(v) for v in text.split(",")]
        except ValueError:
            values = []
        if len(values) != 4 or not (-90 <= values[1] <= values[3] <= 90 and -180 <= values[0] <= 180
                                    and -180 <= values[2] <= 180):
            raise QueryError(f"bbox {text!r} is not west,south,east,north in degrees (−180…180, −90…90)")
        box = (values[0], values[1], values[2], values[3])
    try:
        limit = int(params.get("limit", DEFAULT_LIMIT) or DEFAULT_LIMIT)
        offset = int(params.get("offset", 0) or 0)
    except ValueError:
        raise QueryError(f"limit={params.get('limit')!r} and offset={params.get('offset')!r} must be whole numbers") \
            from None
    if not 1 <= limit <= MAX_LIMIT or offset < 0:
        raise QueryError(f"limit={limit} offset={offset}: limit takes 1 to {MAX_LIMIT:,}, offset 0 or more")
    return ItemsQuery(box, limit, offset, start, end)


def stations_sql(details: DatasetDetails, columns: StationColumns, q: ItemsQuery) -> str:
    """Return the SQL listing every station: id, position, observations, first and last time (by id)."""
    ident = quote_name(columns.id.name)
    when = (f", min({quote_name(columns.time.name)}) as first_time, max({quote_name(columns.time.name)}) "
            "as last_time") if columns.time is not None else ""
    where = _time_bounds(columns, q.start, q.end)
    return (f"select {ident} as id, min({quote_name(columns.lat)}) as lat, min({quote_name(columns.lon)}) as lon, "
            f"count(*) as observations{when} from {quote_name(details.summary.id)}"
            + (f" where {' and '.join(where)}" if where else "") + f" group by {ident} order by {ident}")


def item_sql(details: DatasetDetails, columns: StationColumns, station: Any, parameters: tuple[str, ...],
             start: str | None, end: str | None) -> str:
    """Return the SQL of one station's observations (time, position, the parameters asked for); ``station`` is
    its id as the station list holds it (text or a number)."""
    picked = [c for c in (columns.time.name if columns.time else None, columns.lat, columns.lon) if c]
    where = [f"{quote_name(columns.id.name)} = {sql_literal(station)}"] + _time_bounds(columns, start, end)
    return (f"select {', '.join(quote_name(c) for c in picked + list(parameters))} from "
            f"{quote_name(details.summary.id)} where {' and '.join(where)}")


def _lon(value: float) -> float:
    return ((float(value) + 180.0) % 360.0) - 180.0


def _text(value: Any) -> str | None:
    if value is None:
        return None
    if isinstance(value, np.datetime64) or hasattr(value, "isoformat"):
        text = value.isoformat() if hasattr(value, "isoformat") else str(value)
        return text.replace(" ", "T") + ("Z" if "T" in text or " " in text else "")
    return str(value).replace(" ", "T") + "Z"


def feature_collection(stations: pa.Table, q: ItemsQuery, details: DatasetDetails, url: str,
                       params: dict[str, str]) -> dict[str, Any]:
    """Return one page of the stations as a GeoJSON FeatureCollection (OGC API Features paging: the links keep
    the request's bbox and datetime)."""
    from urllib.parse import urlencode

    def page_link(offset: int, rel: str) -> dict[str, str]:
        kept = {k: params[k] for k in ("bbox", "datetime") if params.get(k)}
        return {"href": f"{url}/items?{urlencode({**kept, 'offset': offset, 'limit': q.limit})}", "rel": rel,
                "type": "application/geo+json"}

    rows = stations.to_pylist()
    if q.bbox is not None:
        w, s, e, n = q.bbox
        rows = [r for r in rows if s <= r["lat"] <= n and
                (w <= _lon(r["lon"]) <= e if w <= e else _lon(r["lon"]) >= w or _lon(r["lon"]) <= e)]
    page = rows[q.offset:q.offset + q.limit]
    names = [c.name for c in details.attributes]
    features = []
    for r in page:
        ident = str(r["id"])
        props: dict[str, Any] = {"label": ident, "observations": r["observations"], "parameter-name": names,
                                 "edrqueryendpoint": f"{url}/items/{ident}"}
        if "first_time" in r:
            props["datetime"] = f"{_text(r['first_time'])}/{_text(r['last_time'])}"
        features.append({"type": "Feature", "id": ident,
                         "geometry": {"type": "Point", "coordinates": [_lon(r["lon"]), float(r["lat"])]},
                         "properties": props})
    links = [page_link(q.offset, "self")]
    if q.offset + q.limit < len(rows):
        links.append(page_link(q.offset + q.limit, "next"))
    if q.offset > 0:
        links.append(page_link(max(0, q.offset - q.limit), "prev"))
    return {"type": "FeatureCollection", "features": features, "numberMatched": len(rows),
            "numberReturned": len(features), "links": links}
