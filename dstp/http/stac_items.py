"""STAC items and item search: one Item per file of a dataset, searched by bbox, datetime, collection and id.

Framework-free models, as :mod:`dstp.http.stac`: the router
(:mod:`dstp.http.facade_routes`) serves them.

    /stac/collections/{id}/items   the dataset's files as Items (limit, offset; next links)
    /stac/search                   GET and POST: bbox, datetime, collections, ids, limit (STAC API - Item Search)

An Item is one file: its ``start_datetime``/``end_datetime`` are the first and
last value of the aggregation axis the file holds (as the catalog read them
from the file), its bbox and geometry the dataset's (files of one dataset
share their grid). Its assets say how to read it: the file's records through
the HTTP query API (a time range equal to the file's), and the dataset's
doors — OPeNDAP, ERDDAP, xarray, and for a grid its Zarr store and EDR collection. A file without times has ``datetime`` null
and the dataset's time range, if any. Instants are RFC 3339 UTC; a day past
a month's end on a 360_day calendar (02-30) becomes the month's last day, as
the collection's extent does.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass
from typing import Any, Iterable, Sequence

from dstp.errors import QueryError
from dstp.http.stac import STAC_VERSION, Links, _bbox, _rfc3339, grid_doors
from dstp.metadata import DatasetDetails, FileInfo

__all__ = ["ITEM_CONFORMANCE", "Search", "item_of", "items_of", "parse_search", "feature_collection"]

ITEM_CONFORMANCE = [
    "https://api.stacspec.org/v1.0.0/item-search",
    "https://api.stacspec.org/v1.0.0/ogcapi-features",
    "http://www.opengis.net/spec/ogcapi-features-1/1.0/conf/core",
    "http://www.opengis.net/spec/ogcapi-features-1/1.0/conf/geojson",
]
#: Items per page unless ``limit`` says otherwise; and the most one page holds.
DEFAULT_LIMIT = 10
MAX_LIMIT = 10_000


@dataclass(frozen=True, slots=True)
class Search:
    """An item search: every field optional (None: no constraint)."""

    bbox: tuple[float, float, float, float] | None = None
    start: dt.datetime | None = None
    end: dt.datetime | None = None
    collections: tuple[str, ...] | None = None
    ids: tuple[str, ...] | None = None
    limit: int = DEFAULT_LIMIT
    offset: int = 0

    def with_offset(self, offset: int) -> "Search":
        return Search(self.bbox, self.start, self.end, self.collections, self.ids, self.limit, offset)


def _instant(text: str, what: str) -> dt.datetime | None:
    """Return an RFC 3339 instant (or a date) as an aware datetime; ``..`` or empty is open (None)."""
    text = text.strip()
    if text in ("", ".."):
        return None
    try:
        value = dt.datetime.fromisoformat(text.replace("Z", "+00:00").replace("z", "+00:00"))
    except ValueError:
        raise QueryError(f"datetime {what} {text!r} is not an RFC 3339 instant; write e.g. 2000-01-01T00:00:00Z, "
                         "an interval 2000-01-01T00:00:00Z/2000-12-31T23:59:59Z, or ../2000-01-01T00:00:00Z") from None
    return value if value.tzinfo is not None else value.replace(tzinfo=dt.timezone.utc)


def _interval(text: str) -> tuple[dt.datetime | None, dt.datetime | None]:
    if "/" in text:
        a, _, b = text.partition("/")
        start, end = _instant(a, "start"), _instant(b, "end")
        if start is None and end is None:
            raise QueryError(f"datetime {text!r} is open at both ends; give at least one instant")
        if start is not None and end is not None and start > end:
            raise QueryError(f"datetime {text!r} ends before it starts")
        return start, end
    one = _instant(text, "")
    if one is None:
        raise QueryError(f"datetime {text!r} names no instant")
    return one, one


def _names(value: Any, what: str) -> tuple[str, ...] | None:
    if value is None or value == "":
        return None
    if isinstance(value, str):
        return tuple(v.strip() for v in value.split(",") if v.strip())
    if isinstance(value, (list, tuple)) and all(isinstance(v, str) for v in value):
        return tuple(value)
    raise QueryError(f"{what} must be a list of strings (or, in a URL, comma-separated)")


def parse_search(params: dict[str, Any]) -> Search:
    """Return the search of a GET query string or a POST body (STAC API - Item Search), or raise QueryError."""
    bbox_value = params.get("bbox")
    bbox = None
    if bbox_value not in (None, ""):
        parts = bbox_value.split(",") if isinstance(bbox_value, str) else bbox_value
        try:
            numbers = [float(p) for p in parts]
        except (TypeError, ValueError):
            raise QueryError(f"bbox {bbox_value!r} is not four numbers west,south,east,north") from None
        if len(numbers) == 6:  # 3-D: west, south, min z, east, north, max z
            numbers = [numbers[0], numbers[1], numbers[3], numbers[4]]
        if len(numbers) != 4:
            raise QueryError(f"bbox {bbox_value!r} has {len(numbers)} numbers; give west,south,east,north")
        w, s, e, n = numbers
        if not (-90 <= s <= n <= 90) or not (-180 <= w <= 180 and -180 <= e <= 180):
            raise QueryError(f"bbox {bbox_value!r} is not west,south,east,north in degrees "
                             "(−180…180, −90…90, south ≤ north; west > east crosses the antimeridian)")
        bbox = (w, s, e, n)
    start = end = None
    if params.get("datetime") not in (None, ""):
        start, end = _interval(str(params["datetime"]))
    try:
        limit = int(params.get("limit", DEFAULT_LIMIT))
        offset = int(params.get("offset", 0) or 0)
    except (TypeError, ValueError):
        raise QueryError("limit and offset must be whole numbers") from None
    if not 1 <= limit <= MAX_LIMIT:
        raise QueryError(f"limit {limit} is out of range; give 1…{MAX_LIMIT}")
    if offset < 0:
        raise QueryError("offset must not be negative")
    return Search(bbox, start, end, _names(params.get("collections"), "collections"), _names(params.get("ids"), "ids"),
                  limit, offset)


def _parse_item_time(text: str) -> dt.datetime | None:
    value = _rfc3339(text) if text else None
    return dt.datetime.fromisoformat(value.replace("Z", "+00:00")) if value else None


def _item_id(dataset_id: str, f: FileInfo) -> str:
    return f"{dataset_id}/{f.name}"


def _time_axis(d: DatasetDetails) -> bool:
    """Whether the files' first/last values are times (the aggregation axis is a time axis)."""
    agg = d.aggregate_dimension
    return any(x.name == agg and x.axis == "T" and x.calendar for x in d.dimensions)


def _span(d: DatasetDetails, f: FileInfo) -> tuple[str | None, str | None]:
    if _time_axis(d) and f.first:
        return _rfc3339(f.first), _rfc3339(f.last or f.first)
    s = d.summary
    return (_rfc3339(s.time_start) if s.time_start else None), (_rfc3339(s.time_end) if s.time_end else None)


def _polygon(box: list[float]) -> dict[str, Any]:
    w, s, e, n = box
    return {"type": "Polygon", "coordinates": [[[w, s], [e, s], [e, n], [w, n], [w, s]]]}


def item_of(d: DatasetDetails, f: FileInfo, links: Links) -> dict[str, Any]:
    """Return one file of a dataset as a STAC Item."""
    s = d.summary
    base = f"{links.http}/stac"
    start, end = _span(d, f)
    box = _bbox(d)
    props: dict[str, Any] = {"datetime": start if start is not None and start == end else None,
                             "dstp:file": f.name, "dstp:records_start": f.start, "dstp:records": f.count,
                             "file:size": f.size_bytes}
    if props["datetime"] is None and (start is not None or end is not None):
        props["start_datetime"], props["end_datetime"] = start, end
    assets: dict[str, Any] = {}
    agg = next((x for x in d.dimensions if x.name == d.aggregate_dimension), None)
    if agg is not None and agg.coordinate and f.first:
        coord = agg.coordinate.replace('"', '""')
        first, last = f.first.replace("'", "''"), (f.last or f.first).replace("'", "''")
        literal = "timestamp " if _time_axis(d) and agg.calendar in ("standard", "gregorian", "proleptic_gregorian") \
            else ""
        if literal or not _time_axis(d):
            lo = f"{literal}'{first}'" if literal else first
            hi = f"{literal}'{last}'" if literal else last
            sql = f'select * from {s.id} where "{coord}" between {lo} and {hi}'
            from urllib.parse import quote

            assets["records"] = {"href": f"{links.http}/query?sql={quote(sql)}&format=parquet",
                                 "title": f"the records of {f.name} as Parquet (HTTP query API)",
                                 "type": "application/vnd.apache.parquet", "roles": ["data"]}
    assets["opendap"] = {"href": f"{links.http}/opendap/{s.id}", "title": "the dataset over OPeNDAP (DAP2/DAP4)",
                         "type": "application/vnd.opendap.dap4.dataset-metadata+xml", "roles": ["data"]}
    assets["xarray"] = {"href": f"dstp://{links.grpc}/{s.id}", "title": "xarray: xr.open_dataset(href, engine='dstp')",
                        "type": "application/vnd+dstp", "roles": ["data"]}
    if not d.feature_type:
        assets["erddap-griddap"] = {"href": f"{links.http}/erddap/griddap/{s.id}.html", "title": "ERDDAP griddap",
                                    "type": "text/html", "roles": ["data"]}
    assets.update(grid_doors(d, links))
    return {
        "type": "Feature",
        "stac_version": STAC_VERSION,
        "stac_extensions": [],
        "id": _item_id(s.id, f),
        "collection": s.id,
        "geometry": _polygon(box) if box[0] <= box[2] else None,
        "bbox": box,
        "properties": props,
        "assets": assets,
        "links": [
            {"rel": "self", "href": f"{base}/collections/{s.id}/items/{_quote_id(f.name)}",
             "type": "application/geo+json"},
            {"rel": "collection", "href": f"{base}/collections/{s.id}", "type": "application/json"},
            {"rel": "parent", "href": f"{base}/collections/{s.id}", "type": "application/json"},
            {"rel": "root", "href": base, "type": "application/json"},
        ],
    }


def _quote_id(name: str) -> str:
    from urllib.parse import quote

    return quote(name, safe="")


def _boxes_meet(a: Sequence[float], b: Sequence[float]) -> bool:
    """Whether two west,south,east,north boxes intersect (either may cross the antimeridian: west > east)."""
    if a[1] > b[3] or b[1] > a[3]:
        return False

    def spans(box: Sequence[float]) -> list[tuple[float, float]]:
        return [(box[0], box[2])] if box[0] <= box[2] else [(box[0], 180.0), (-180.0, box[2])]

    return any(w1 <= e2 and w2 <= e1 for w1, e1 in spans(a) for w2, e2 in spans(b))


def _matches(item: dict[str, Any], search: Search) -> bool:
    if search.ids is not None and item["id"] not in search.ids:
        return False
    if search.bbox is not None and not _boxes_meet(item["bbox"], search.bbox):
        return False
    if search.start is not None or search.end is not None:
        p = item["properties"]
        first = _parse_item_time(p.get("start_datetime") or p.get("datetime") or "")
        last = _parse_item_time(p.get("end_datetime") or p.get("datetime") or "")
        if first is None or last is None:
            return False  # no time: it cannot be said to meet the interval
        if search.end is not None and first > search.end or search.start is not None and last < search.start:
            return False
    return True


def items_of(details: Iterable[DatasetDetails], links: Links, search: Search) -> tuple[list[dict[str, Any]], int]:
    """Return the page of matching items (in collection order, then file order) and how many match in all."""
    page: list[dict[str, Any]] = []
    matched = 0
    for d in details:
        if search.bbox is not None and not _boxes_meet(_bbox(d), search.bbox):
            continue
        for f in d.files:
            item = item_of(d, f, links)
            if not _matches(item, search):
                continue
            if search.offset <= matched < search.offset + search.limit:
                page.append(item)
            matched += 1
    return page, matched


def feature_collection(items: list[dict[str, Any]], matched: int, self_href: str,
                       next_link: dict[str, Any] | None, extra: Sequence[dict[str, Any]] = ()) -> dict[str, Any]:
    body: dict[str, Any] = {
        "type": "FeatureCollection",
        "features": items,
        "numberMatched": matched,
        "numberReturned": len(items),
        "links": [{"rel": "self", "href": self_href, "type": "application/geo+json"}, *extra],
    }
    if next_link is not None:
        body["links"].append(next_link)
    return body

