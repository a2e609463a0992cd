"""Page models: one JSON-ready dict per page, rendered as HTML by a template or sent as is.

Every page has a JSON twin at the same path plus ``.json``; both come from
the same model here, so the HTML and the JSON can never disagree.
:class:`CatalogView` caches what pages need from the service (descriptions,
the search index, coordinate values): a catalog does not change while it is
served. Every answer is for one :class:`~dstp.auth.Principal`: the service
says which datasets it may read (``service.require``, ``service.datasets``),
the cache only saves recomputing what it may see; a dataset it may not read
is not found, and absent from search hits, facets and counts.
"""

from __future__ import annotations

import hashlib
import math
import re
import threading
from typing import Any, Mapping, Sequence
from urllib.parse import urlencode

import pyarrow as pa
from jinja2 import Environment, FileSystemLoader, StrictUndefined, select_autoescape

from dstp.auth import Principal
from dstp.errors import DstpError
from dstp.metadata import DatasetDetails, file_axis, units_label
from dstp.service import DstpService, QueryHandle
from dstp.transport.wire.values import size_estimate
from dstp.http import STATIC_DIR, TEMPLATES_DIR
from dstp.http.quicklook import geographic_columns, plain_number
from dstp.http.builder import AGGREGATES, OPERATORS, TIME_BUCKETS, BuilderState, sql_identifier
from dstp.http.paging import DEFAULT_PAGE, summaries
from dstp.http.search import CatalogFilter, SearchIndex
from dstp.service.feed import MAX_PAGE
from dstp.http.shapes import column_json, details_json, summary_json
from dstp.http.snippets import FORMAT_LABELS, Endpoints, download_links, query_url, snippets

__all__ = ["CatalogView", "PageRenderer", "builder_page", "catalog_page", "dataset_page"]

#: Dimensions longer than this get a text box instead of a list of values in the quicklook form.
MAX_LISTED_VALUES = 1000
#: Search indexes kept, one per set of datasets some principal can see.
INDEXES_KEPT = 32
#: Most datasets the unfiltered catalog page counts facets over (each needs its description, once per version).
FACETS_MAX = 1_000


class CatalogView:
    """What the pages show about a catalog, computed once per dataset through the service."""

    def __init__(self, service: DstpService) -> None:
        self.service = service
        self._lock = threading.Lock()
        self._details: dict[str, tuple[int, DatasetDetails]] = {}
        self._indexes: dict[tuple[Any, ...], SearchIndex] = {}

    def details(self, dataset_id: str, principal: Principal) -> DatasetDetails:
        """Return the description of ``dataset_id`` (DatasetNotFoundError if unknown or not readable by ``principal``)."""
        self.service.require(principal, dataset_id)
        # kept per version: a dataset changed while served (a new file) is described again
        version = self.service.catalog.get(dataset_id).version
        with self._lock:
            kept = self._details.get(dataset_id)
        if kept is None or kept[0] != version:
            kept = (version, self.service.describe(dataset_id, principal))
            with self._lock:
                self._details[dataset_id] = kept
        return kept[1]

    def index(self, principal: Principal) -> SearchIndex:
        """Return the search index of the datasets ``principal`` may read."""
        catalog = self.service.catalog
        visible = (catalog.version, *(s.id for s in self.service.datasets(principal)))
        with self._lock:
            found = self._indexes.get(visible)
        if found is None:
            found = SearchIndex(self.details(i, principal) for i in visible[1:])
            with self._lock:
                self._indexes[visible] = found
                while len(self._indexes) > INDEXES_KEPT:
                    self._indexes.pop(next(iter(self._indexes)))
        return found

    def table(self, sql: str, principal: Principal) -> pa.Table:
        """Return the whole result of a small query, run like any other (limits, slots, access)."""
        execution = self.service.queries.run(sql, principal=principal)
        try:
            return pa.Table.from_batches(list(execution.batches()), schema=execution.schema)
        finally:
            execution.close()

    def estimate(self, sql: str, principal: Principal) -> dict[str, Any]:
        """Return how big ``sql``'s result will be, from its plan, without running it (QueryError if it does not
        plan): records and bytes (exact, or the most there can be), grid points read, and whether the server's
        max_result_rows would cut it."""
        handle = QueryHandle("", self.service.queries.prepare(sql, principal), principal=principal)
        estimate = size_estimate(handle.estimated_rows, handle.estimated_bytes, handle.max_rows, handle.max_bytes,
                                 handle.prepared.scan_rows)
        cap = self.service.settings.max_result_rows
        records = estimate["records"]
        # Whether max_result_rows cuts it: known when the count is exact or the bound is under the cap.
        over = None if records < 0 else False if records <= cap else True if estimate["exact"] else None
        if records > cap:
            estimate["text"] += (f" (the server stops a result at {cap:,} records)" if estimate["exact"]
                                 else f"; the server stops a result at {cap:,} records")
        return estimate | {"max_result_rows": cap, "over_max_result_rows": over}

    def values(self, dataset_id: str, dimension: str, principal: Principal) -> list[Any]:
        """Return the coordinate values of one dimension, in index order ([] for a dimension it lacks).

        From the catalog's memory (:meth:`DstpService.axis_values`): no query runs, no admission slot is taken.
        """
        found = self.service.axes(dataset_id, [dimension], principal)
        return found[dimension].to_pylist() if dimension in found else []

    def values_of(self, dataset_id: str, dimensions: Sequence[str], principal: Principal) -> dict[str, list[Any]]:
        """Return :meth:`values` of several dimensions under one access check (those the dataset lacks left out)."""
        return {name: array.to_pylist() for name, array in self.service.axes(dataset_id, dimensions, principal).items()}


def _query_string(f: CatalogFilter, attributes: tuple[str, ...]) -> str:
    params = [("q", f.q), *(("attribute", a) for a in attributes), ("start", f.start), ("end", f.end)]
    if f.bbox:
        params.append(("bbox", ",".join(f"{x:g}" for x in f.bbox)))
    text = urlencode([(k, v) for k, v in params if v])
    return f"?{text}" if text else ""


def catalog_page(view: CatalogView, f: CatalogFilter, principal: Principal, offset: int = 0,
                 limit: int = DEFAULT_PAGE) -> dict[str, Any]:
    """Return one page of the catalog page: the filter, matching datasets (by id; best first when searched), facets
    (with toggle links), and links to the next and previous pages.

    Only datasets ``principal`` may read are searched, counted and faceted. Without a filter the page comes from
    the catalog's listing in memory (:meth:`DstpService.page`), and facets are counted only while there are at
    most FACETS_MAX datasets (counting them reads every dataset's description).
    """
    offset, limit = max(0, offset), max(1, min(limit, MAX_PAGE))
    if f.active:
        index = view.index(principal)
        hits = index.search(f)
        total = len(hits)
        shown = [summary_json(h.summary) | {"matches": list(h.matches), "score": h.score}
                 for h in hits[offset:offset + limit]]
        values = index.facets(hits, f)
    else:
        page = view.service.page(offset, limit, "", principal)
        total = page.total
        shown = [summary_json(s) | {"matches": [], "score": 0} for s in summaries(page)]
        values = []
        if total <= FACETS_MAX:
            index = view.index(principal)
            values = index.facets(index.search(f), f)
    facets = []
    for v in values:
        toggled = tuple(a for a in f.attributes if a.casefold() != v.value.casefold()) if v.selected \
            else (*f.attributes, v.value)
        facets.append({"value": v.value, "count": v.count, "selected": v.selected,
                       "href": "/" + _query_string(f, toggled)})
    here = _query_string(f, f.attributes)

    def at(start: int) -> str:
        joiner = "&" if here else "?"
        return f"/{here}{joiner}{urlencode({'offset': start, 'limit': limit})}"

    return {
        "filter": {"q": f.q, "attribute": list(f.attributes), "start": f.start, "end": f.end,
                   "bbox": list(f.bbox) if f.bbox else None},
        "query_string": here,
        "count": total,
        "datasets": shown,
        "facets": {"attribute": facets, "counted": f.active or total <= FACETS_MAX},
        "paging": {"offset": offset, "limit": limit, "total": total,
                   "next": at(offset + limit) if offset + limit < total else None,
                   "prev": at(max(0, offset - limit)) if offset > 0 else None},
    }


def _shown(value: Any) -> str:
    return value.isoformat() if hasattr(value, "isoformat") else str(value)


def _labels(values: list[Any]) -> list[str]:
    """Return coordinate values as a person reads them: numbers rounded, yet each still names its own point.

    Quicklooks pick the grid point nearest the value asked for, so a label is good
    as long as it is nearer its own point than any other: four significant
    figures, more where the grid is finer than that. Times read as dates.
    """
    if not all(isinstance(v, float) for v in values):
        return [_when(_shown(v)) for v in values]
    ordered = sorted(set(values))
    half = min((b - a for a, b in zip(ordered, ordered[1:])), default=math.inf) / 2
    for digits in range(4, 18):
        labels = [plain_number(v, digits) for v in values]  # 100000, not 1e+05
        if all(abs(float(text) - v) < half for text, v in zip(labels, values)):
            return labels
    return [repr(v) for v in values]


def _when(text: str) -> str:
    """Return an ISO date-time as a date, with the time of day only when it is not midnight."""
    m = re.fullmatch(r"(-?\d{4,}-\d\d-\d\d)[T ](\d\d:\d\d)(:\d\d(?:\.\d+)?)?", text)
    if m is None:
        return text
    day, hour, seconds = m.groups()
    seconds = seconds if seconds and seconds.strip(":0.") else ""
    return day if hour == "00:00" and not seconds else f"{day} {hour}{seconds}"


def dataset_page(view: CatalogView, dataset_id: str, principal: Principal) -> dict[str, Any]:
    """Return the dataset page: the full description plus quicklook choices and links."""
    d = view.details(dataset_id, principal)
    axes = {x.name: x.axis for x in d.dimensions}
    mappable = [a.name for a in d.attributes if {"X", "Y"} <= {axes.get(n) for n in a.dimensions}
                or len(a.dimensions) == 1 and geographic_columns(d, a.dimensions) is not None]
    series = [a.name for a in d.attributes if "T" in {axes.get(n) for n in a.dimensions}]
    choices, labels, points = {}, {}, {}
    listed = view.values_of(dataset_id, [x.name for x in d.dimensions if x.size <= MAX_LISTED_VALUES], principal)
    for x in d.dimensions:
        if x.size <= MAX_LISTED_VALUES:
            values = listed[x.name]
            choices[x.name] = [_shown(v) for v in values]
            plain = _labels(values)
            if values:  # where the point forms start: the middle of the axis, as labelled
                points[x.name] = plain[len(values) // 2]
            # What the options say: numbers with their units ("100000 Pa"); times as dates.
            numeric = all(isinstance(v, float) for v in values) and x.units and " since " not in x.units
            labels[x.name] = [f"{label} {x.units}" for label in plain] if numeric else plain
    return details_json(d) | {
        "file_axis": file_axis(d),
        # A dimension's units as shown: "per file: A … B" where its files state them differently.
        "units_labels": {x.name: units_label(d, x) for x in d.dimensions},
        "quicklook": {"map_attributes": mappable, "series_attributes": series, "values": choices,
                      "labels": labels, "points": points},
        "links": {
            "html": f"/datasets/{dataset_id}",
            "json": f"/datasets/{dataset_id}.json",
            "query_builder": f"/datasets/{dataset_id}/query",
            "quicklook": f"/datasets/{dataset_id}/quicklook.png",
            "timeseries": f"/datasets/{dataset_id}/timeseries.png",
        },
    }


def _file_range(f: Mapping[str, Any]) -> str:
    """Return the stretch of the aggregation axis a file holds: dates (or values) when known, else indices."""
    first, last = f.get("first", ""), f.get("last", "")
    if first:
        return _when(first) if first == last or not last else f"{_when(first)} … {_when(last)}"
    if f["count"] == 0 and f["start"] == 0:
        return "all of the dataset"  # a file not aggregated along an axis, and no time axis to tell
    if f["count"] <= 1:
        return f"index {f['start']}"
    return f"index {f['start']} … {f['start'] + f['count'] - 1}"


def _estimate_or_why(view: CatalogView, sql: str, principal: Principal) -> dict[str, Any]:
    """Return the size estimate of the builder's SQL, or why it has none ({"error": message}: it does not plan)."""
    try:
        return view.estimate(sql, principal)
    except DstpError as exc:
        return {"error": exc.message}


def builder_page(view: CatalogView, state: BuilderState, sql: str | None, endpoints: Endpoints,
                 principal: Principal) -> dict[str, Any]:
    """Return the query builder page for ``state`` (or for the verbatim ``sql`` when given)."""
    d = view.details(state.dataset, principal)
    text = sql.strip() if sql and sql.strip() else state.sql(d)
    columns = [*d.coordinates, *d.attributes]
    times = [c.name for c in columns if " since " in c.units or "timestamp" in c.arrow_type]
    return {
        "dataset": d.summary.id,
        "title": d.summary.title,
        "columns": [column_json(c) for c in columns],
        "operators": list(OPERATORS),
        "aggregates": [f for f in AGGREGATES if f != "weighted_avg" or any(c.name == "area_weight" for c in columns)],
        # Group keys: the grid's coordinates, then the time buckets of each time column.
        "group_options": [*(c.name for c in d.coordinates if c.role in ("dimension", "scalar", "auxiliary")),
                          *(f"{b}({t})" for t in times for b in TIME_BUCKETS)],
        "formats": FORMAT_LABELS,
        "state": {"select": list(state.columns), "where": [c.encode() for c in state.conditions],
                  "limit": state.limit, "sql": sql or "", "group": list(state.groups),
                  "agg": [a.encode() for a in state.aggregates]},
        "sql": text,
        "estimate": _estimate_or_why(view, text, principal),
        "preview_url": query_url(text, "json", limit=100),
        "downloads": download_links(text),
        "snippets": snippets(text, endpoints),
    }


def _filesize(n: int) -> str:
    size = float(n)
    for unit in ("B", "kB", "MB", "GB", "TB"):
        if size < 1000 or unit == "TB":
            return f"{size:.0f} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1000
    return f"{n} B"


class PageRenderer:
    """Renders page models with the bundled Jinja2 templates (autoescaped, strict)."""

    def __init__(self) -> None:
        self.env = Environment(
            loader=FileSystemLoader(TEMPLATES_DIR),
            autoescape=select_autoescape(["html"]),
            undefined=StrictUndefined,
            trim_blocks=True,
            lstrip_blocks=True,
        )
        versions = {
            p.name: hashlib.sha256(p.read_bytes()).hexdigest()[:10] for p in STATIC_DIR.iterdir() if p.is_file()
        }
        # Asset URLs carry a content hash, so browsers may cache them for good.
        self.env.globals["static"] = lambda name: f"/static/{name}?v={versions.get(name, '0')}"
        self.env.filters["filesize"] = _filesize
        self.env.filters["thousands"] = lambda n: f"{n:,}"
        self.env.filters["file_range"] = _file_range

    def render(self, template: str, page: Mapping[str, Any], **extra: Any) -> str:
        """Return the HTML of ``template`` for ``page``."""
        return self.env.get_template(template).render(page=page, **extra)
