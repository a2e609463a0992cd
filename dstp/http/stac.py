"""The STAC facade: the catalog as a STAC API (collections = datasets) with the datacube extension.

Framework-free page models, as :mod:`dstp.http.pages`: the router
(:mod:`dstp.http.facade_routes`) serves them as JSON.

    /stac                         landing page (a STAC Catalog with conformsTo and links)
    /stac/conformance             the conformance classes: STAC API core and collections
    /stac/collections             every dataset the caller may read, as a STAC Collection
    /stac/collections/{id}        one of them
    /stac/collections/{id}/items  its files as Items, and /stac/search (see dstp.http.stac_items)

Each Collection carries the datacube extension (``cube:dimensions`` with
extents, steps and reference systems; ``cube:variables`` with units and
dimensions), spatial and temporal extents, and assets that say how to get
the data: the xarray URL (``dstp://``), the HTTP query API, ERDDAP griddap
and tabledap, and Arrow Flight when the server runs it.
"""

from __future__ import annotations

import calendar as _calendar
import re
from typing import Any

from dstp.edr import queries_of
from dstp.metadata import DatasetDetails, DimensionInfo

__all__ = ["STAC_VERSION", "DATACUBE", "collection", "grid_doors", "landing", "conformance", "Links"]

STAC_VERSION = "1.1.0"
DATACUBE = "https://stac-extensions.github.io/datacube/v2.2.0/schema.json"
CONFORMANCE = [
    "https://api.stacspec.org/v1.0.0/core",
    "https://api.stacspec.org/v1.0.0/collections",
    "http://www.opengis.net/spec/ogcapi-common-2/1.0/conf/collections",
    # item search over the files (dstp.http.stac_items)
    "https://api.stacspec.org/v1.0.0/item-search",
    "https://api.stacspec.org/v1.0.0/ogcapi-features",
    "http://www.opengis.net/spec/ogcapi-features-1/1.0/conf/core",
    "http://www.opengis.net/spec/ogcapi-features-1/1.0/conf/geojson",
]
_SPDX = re.compile(r"^[A-Za-z0-9][A-Za-z0-9.+-]*$")


class Links:
    """Where this server's interfaces are, as the caller reached them."""

    def __init__(self, http_base: str, grpc: str, flight: str = "") -> None:
        self.http = http_base.rstrip("/")
        self.grpc = grpc
        self.flight = flight


def _rfc3339(text: str) -> str | None:
    """Return an ISO time as RFC 3339 UTC; a day past the month's end (360_day's 02-30) becomes its last day."""
    m = re.match(r"(-?\d{4})-(\d\d)-(\d\d)(?:T(\d\d):(\d\d):(\d\d))?", text or "")
    if m is None:
        return None
    year, month, day = int(m[1]), int(m[2]), int(m[3])
    if not 1 <= year <= 9999 or not 1 <= month <= 12:
        return None
    day = min(day, _calendar.monthrange(year, month)[1])
    return f"{year:04d}-{month:02d}-{day:02d}T{m[4] or '00'}:{m[5] or '00'}:{m[6] or '00'}Z"


def _bbox(d: DatasetDetails) -> list[float]:
    """Return STAC's bbox: west, south, east, north on −180…180 (west > east across the antimeridian)."""
    box = d.summary.bbox
    if box is None:
        return [-180.0, -90.0, 180.0, 90.0]
    lat0, lat1, lon0, lon1 = box
    if d.summary.lon_extent is not None:
        lon0, lon1 = d.summary.lon_extent
    elif lon1 - lon0 >= 360.0:
        lon0, lon1 = -180.0, 180.0
    elif lon0 < -180.0 or lon1 > 180.0:  # only the ends are known (a remote dataset): put them on −180…180
        lon0, lon1 = ((lon0 + 180.0) % 360.0) - 180.0, ((lon1 + 180.0) % 360.0) - 180.0
    return [lon0, max(-90.0, lat0), lon1, min(90.0, lat1)]


def _number(text: str) -> float | None:
    try:
        return float(text)
    except ValueError:
        return None


def _dimension(dim: DimensionInfo, details: DatasetDetails) -> dict[str, Any]:
    """Return the datacube extension's description of one dimension."""
    info = next((c for c in details.coordinates if c.name == dim.coordinate), None)
    description = info.description if info is not None and info.description else dim.name
    if dim.axis == "T" and dim.calendar:
        out: dict[str, Any] = {"type": "temporal", "extent": [_rfc3339(dim.min), _rfc3339(dim.max)]}
        if dim.calendar not in ("standard", "gregorian", "proleptic_gregorian"):
            out["description"] = f"{description} ({dim.calendar} calendar; extents as dates on it)"
        return out
    lo, hi = _number(dim.min), _number(dim.max)
    if dim.axis in ("X", "Y") and dim.units.replace(" ", "").lower().startswith("degree"):
        out = {"type": "spatial", "axis": dim.axis.lower(), "extent": [lo, hi], "reference_system": 4326}
    elif dim.axis == "Z":
        out = {"type": "spatial", "axis": "z", "extent": [lo, hi]}
    elif dim.axis in ("X", "Y"):
        out = {"type": "spatial", "axis": dim.axis.lower(), "extent": [lo, hi]}
        mapping = next(iter(details.grid_mappings), None)
        if mapping is not None and mapping.wkt:
            out["reference_system"] = mapping.wkt
    else:
        out = {"type": dim.axis if dim.axis not in ("", "other") else "other", "extent": [lo, hi]}
    if dim.units:
        out["unit"] = dim.units
    out["description"] = f"{description} ({dim.size} values)"
    return out


def collection(d: DatasetDetails, links: Links) -> dict[str, Any]:
    """Return a dataset as a STAC Collection with the datacube extension."""
    s = d.summary
    base = f"{links.http}/stac"
    time_dims = [x for x in d.dimensions if x.axis == "T" and x.calendar]
    start = _rfc3339(s.time_start) if s.time_start else None
    end = _rfc3339(s.time_end) if s.time_end else None
    cube_dims = {x.name: _dimension(x, d) for x in d.dimensions}
    cube_vars: dict[str, Any] = {}
    for c in d.coordinates:
        if c.role in ("auxiliary", "derived", "bounds"):
            cube_vars[c.name] = {"dimensions": list(c.dimensions), "type": "auxiliary",
                                 "description": c.description or c.note or c.role}
            if c.units:
                cube_vars[c.name]["unit"] = c.units
    for a in d.attributes:
        var: dict[str, Any] = {"dimensions": list(a.dimensions), "type": "data"}
        if a.description:
            var["description"] = a.description
        if a.units:
            var["unit"] = a.units
        cube_vars[a.name] = var
    sql = f"select * from {s.id}"
    assets: dict[str, Any] = {
        "xarray": {"href": f"dstp://{links.grpc}/{s.id}", "title": "xarray: xr.open_dataset(href, engine='dstp')",
                   "type": "application/vnd+dstp", "roles": ["data"]},
        "query-parquet": {"href": f"{links.http}/query?sql={sql.replace(' ', '+')}&format=parquet",
                          "title": "select * as Parquet (HTTP query API)", "type": "application/vnd.apache.parquet",
                          "roles": ["data"]},
        "erddap-tabledap": {"href": f"{links.http}/erddap/tabledap/{s.id}.html", "title": "ERDDAP tabledap",
                            "type": "text/html", "roles": ["data"]},
    }
    if not d.feature_type:
        assets["erddap-griddap"] = {"href": f"{links.http}/erddap/griddap/{s.id}.html", "title": "ERDDAP griddap",
                                    "type": "text/html", "roles": ["data"]}
    assets.update(grid_doors(d, links))
    if links.flight:
        assets["flight"] = {"href": f"grpc://{links.flight}", "title": f"Arrow Flight / Flight SQL: table {s.id}",
                            "type": "application/vnd.apache.arrow.flight", "roles": ["data"]}
    return {
        "type": "Collection",
        "stac_version": STAC_VERSION,
        "stac_extensions": [DATACUBE],
        "id": s.id,
        "title": s.title or s.id,
        "description": s.summary or s.title or s.id,
        "keywords": list(s.keywords),
        "license": d.license if d.license and _SPDX.match(d.license) else "other",
        "extent": {"spatial": {"bbox": [_bbox(d)]},
                   "temporal": {"interval": [[start, end] if (start or end) or time_dims else [None, None]]}},
        "cube:dimensions": cube_dims,
        "cube:variables": cube_vars,
        "assets": assets,
        "links": [
            {"rel": "self", "href": f"{base}/collections/{s.id}", "type": "application/json"},
            {"rel": "root", "href": base, "type": "application/json"},
            {"rel": "parent", "href": base, "type": "application/json"},
            {"rel": "items", "href": f"{base}/collections/{s.id}/items", "type": "application/geo+json"},
            {"rel": "describedby", "href": f"{links.http}/datasets/{s.id}.json", "type": "application/json",
             "title": "dstp description"},
            {"rel": "alternate", "href": f"{links.http}/datasets/{s.id}", "type": "text/html",
             "title": "dataset page"},
            {"rel": "alternate", "href": f"{links.http}/erddap/info/{s.id}/index.json", "type": "application/json",
             "title": "ERDDAP info"},
        ],
    }


def landing(ids: list[str], links: Links) -> dict[str, Any]:
    """Return the STAC API landing page: a Catalog linking to the collections."""
    base = f"{links.http}/stac"
    child = [{"rel": "child", "href": f"{base}/collections/{i}", "type": "application/json"} for i in ids]
    return {
        "type": "Catalog",
        "stac_version": STAC_VERSION,
        "id": "dstp",
        "title": "dstp catalog",
        "description": "Gridded netCDF datasets served by dstp, one STAC Collection each (datacube extension).",
        "conformsTo": CONFORMANCE,
        "links": [
            {"rel": "self", "href": base, "type": "application/json"},
            {"rel": "root", "href": base, "type": "application/json"},
            {"rel": "conformance", "href": f"{base}/conformance", "type": "application/json"},
            {"rel": "data", "href": f"{base}/collections", "type": "application/json"},
            {"rel": "search", "href": f"{base}/search", "type": "application/geo+json", "method": "GET"},
            {"rel": "search", "href": f"{base}/search", "type": "application/geo+json", "method": "POST"},
            {"rel": "service-desc", "href": f"{links.http}/openapi.json", "type": "application/vnd.oai.openapi+json;version=3.0"},
            {"rel": "service-doc", "href": f"{links.http}/docs", "type": "text/html"},
            *child,
        ],
    }


def conformance() -> dict[str, Any]:
    return {"conformsTo": CONFORMANCE}


def collections(items: list[dict[str, Any]], links: Links) -> dict[str, Any]:
    base = f"{links.http}/stac"
    return {"collections": items,
            "links": [{"rel": "self", "href": f"{base}/collections", "type": "application/json"},
                      {"rel": "root", "href": base, "type": "application/json"}]}


def grid_doors(d: DatasetDetails, links: Links) -> dict[str, Any]:
    """Return the assets of a dataset's Zarr store (a grid's) and EDR collection (a dataset that answers EDR
    queries: a grid on longitude/latitude axes, a station dataset); each answers at its href."""
    dataset_id = d.summary.id
    doors: dict[str, Any] = {}
    if not d.feature_type:
        doors["zarr"] = {"href": f"{links.http}/zarr/{dataset_id}", "title": "Zarr v3 store: xr.open_zarr(href)",
                         "type": "application/vnd.zarr; version=3", "roles": ["data"]}
    if queries := queries_of(d):
        doors["edr"] = {"href": f"{links.http}/edr/collections/{dataset_id}", "type": "application/json",
                        "title": f"OGC API - EDR collection: {', '.join(queries)} queries", "roles": ["data"]}
    return doors
