"""Routes of the facades: ERDDAP (``/erddap/…``), STAC (``/stac/…``) and the API docs page (``/docs``).

One ``APIRouter``, included by :func:`dstp.http.app.create_app` in one line.
Like the app's own routes each one only translates: the ERDDAP grammar
(:mod:`dstp.erddap.dataset`) and STAC models (:mod:`dstp.http.stac`) turn a
request into service calls — ``service.queries.run(sql, …, principal)`` for data,
``service.datasets``/``describe`` for metadata — with the principal the
app's middleware established (``principal_of``), so access policy, limits
and errors are the service's. ERDDAP answers its errors in ERDDAP's own
plain-text shape (``Error { code=…; message="…"; }``) with the dstp status.
"""

from __future__ import annotations

import datetime as dt
import threading
from typing import Any, Callable

import anyio
import numpy as np
import pyarrow as pa
from fastapi import APIRouter, Path, Query, Request
from fastapi.responses import HTMLResponse, JSONResponse, PlainTextResponse, RedirectResponse, Response

from dstp.auth import Principal
from dstp.errors import DatasetNotFoundError, LimitExceededError, NotFoundError, QueryError
from dstp.hyperslabs import kept_rows
from dstp.erddap import formats as fmt
from dstp.http import stac
from dstp.http import stac_items as stac_items_
from dstp.erddap.dataset import ALL_DATASETS, NO_MATCH, ErddapDataset, griddap_slab, parse_griddap, parse_tabledap
from dstp.http.erddap_meta import all_datasets, erddap_matches, info_table, listing_table
from dstp.http.erddap_search import BOUNDS, CATEGORIES, advanced_matches, parse_search
from dstp.http.error_responses import incident
from dstp.http.pages import CatalogView
from dstp.http.paging import DEFAULT_PAGE, erddap_page, next_offset, page_url, summaries
from dstp.metadata import DatasetDetails, DatasetSummary
from dstp.service.feed import MAX_PAGE
from dstp.service import DstpService
from dstp.settings import Settings

__all__ = ["facade_router", "MAX_ASSEMBLED_BYTES", "whole_result"]

#: Largest result (Arrow bytes) an ERDDAP answer assembles before it is sent (ERDDAP too writes whole files).
MAX_ASSEMBLED_BYTES = 512 * 2**20

GRID_FORMATS = ("csv", "csvp", "json", "htmlTable", "nc", "parquet", "das", "dds", "ncml", "html")
TABLE_FORMATS = ("csv", "csvp", "json", "htmlTable", "nc", "ncCF", "parquet", "das", "dds", "html")
LIST_FORMATS = ("csv", "csvp", "json", "htmlTable", "html")
ERDDAP_VERSION = "2.23"
#: Datasets a search or list page holds when the request names no itemsPerPage (ERDDAP's default).
ERDDAP_PAGE = 1000

DATASET_EXT = Path(..., description="Dataset id and format, e.g. ccm3.csv, ccm3.nc, ccm3.das",
                   examples=["ccm3.csv"])


def _erddap_error(exc: BaseException) -> PlainTextResponse:
    err = incident(exc)
    return PlainTextResponse(fmt.error_body(err.http_status, err.message), status_code=err.http_status)


def _split(name: str, allowed: tuple[str, ...]) -> tuple[str, str]:
    dataset, dot, ext = name.rpartition(".")
    if not dot or not dataset:
        raise QueryError(f"{name!r} names no format: write <datasetID>.<format>, format one of {', '.join(allowed)}")
    if ext not in allowed:
        raise QueryError(f"format .{ext} is not supported here; use one of {', '.join('.' + a for a in allowed)}")
    return dataset, ext


def whole_result(service: DstpService, sql: str, principal: Principal,
                 cancel: threading.Event | None = None, channel: str = "direct") -> pa.Table:
    """Return the whole result of ``sql`` run by the service for a door that answers in one piece (ERDDAP files,
    Zarr chunks, EDR and OPeNDAP answers; ``channel`` names the door in the audit log): LimitExceededError past
    MAX_ASSEMBLED_BYTES, or when the server would truncate it."""
    execution = service.queries.run(sql, cancel, principal, channel=channel)
    try:
        batches, size = [], 0
        for batch in execution.batches():
            size += batch.nbytes
            if size > MAX_ASSEMBLED_BYTES:
                raise LimitExceededError(f"the request needs more than {MAX_ASSEMBLED_BYTES // 2**20} MiB; "
                                         "ask for a smaller subset (fewer variables, a narrower range or a stride)")
            batches.append(batch)
        if execution.summary.truncated:
            raise LimitExceededError(f"the result is larger than this server sends ({execution.summary.truncated_reason});"
                                     " ask for a smaller subset")
        return pa.Table.from_batches(batches, schema=execution.schema)
    finally:
        execution.close()


class _Facade:
    """The ERDDAP and STAC faces of one service: dataset views with their axis values."""

    def __init__(self, service: DstpService, settings: Settings, principal_of: Callable[[Request], Principal]):
        self.service = service
        self.settings = settings
        self.principal_of = principal_of

    def dataset(self, dataset_id: str, principal: Principal) -> ErddapDataset:
        """Return the ERDDAP view of a dataset (DatasetNotFoundError as for any unknown one)."""
        details = self.service.describe(dataset_id, principal)
        ds = ErddapDataset(details)
        # From the catalog's memory (service.axis_values): no query, no admission slot, no cache of our own.
        arrays = self.service.axes(dataset_id, [d.name for d in ds.axes], principal)
        for d in ds.axes:
            values = np.asarray(arrays[d.name].to_numpy(zero_copy_only=False))
            ds.axis_values[d.name] = values.astype("datetime64[us]") if values.dtype.kind == "M" else values
        return ds

    def extreme(self, ds: ErddapDataset, column: str, kind: str, principal: Principal) -> Any:
        """Return a column's least or greatest value over the dataset (``min(var)``/``max(var)``), None if none.

        An axis's from the values held in memory; any other column's by one query, ordered and limited.
        """
        for d in ds.axes or ds.details.dimensions:
            if d.coordinate == column and d.name in ds.axis_values and len(ds.axis_values[d.name]):
                values = ds.axis_values[d.name]
                if values.dtype.kind in "iufM":
                    return values.min() if kind == "min" else values.max()
                return sorted(str(v) for v in values)[0 if kind == "min" else -1]
        name = '"' + column.replace('"', '""') + '"'
        table = self.table(f'select {name} from "{ds.id}" where {name} is not null order by {name} '
                           f'{"asc" if kind == "min" else "desc"} limit 1', principal)
        if not table.num_rows:
            return None
        value = table.column(0).to_numpy(zero_copy_only=False)[0]
        return value.astype("datetime64[us]") if isinstance(value, np.datetime64) else value

    def table(self, sql: str, principal: Principal, cancel: threading.Event | None = None) -> pa.Table:
        """Return the whole result of ``sql`` run by the service (413 past MAX_ASSEMBLED_BYTES or a server limit)."""
        return whole_result(self.service, sql, principal, cancel)

    def base(self, request: Request) -> str:
        return str(request.base_url).rstrip("/")

    def links(self, request: Request) -> stac.Links:
        from dstp.transport.wire.values import reachable_endpoint

        host = request.url.hostname or self.settings.host
        grpc = self.service.channels.get("grpc")
        flight = self.service.channels.get("flight")
        target = reachable_endpoint(grpc.endpoint, host) if grpc is not None and grpc.endpoint else \
            f"{host}:{self.settings.port}"
        return stac.Links(self.base(request), target,
                          reachable_endpoint(flight.endpoint, host) if flight is not None else "")


def _send(body: bytes | str, ext: str, name: str) -> Response:
    headers = {}
    if ext in ("nc", "ncCF", "parquet"):
        headers["Content-Disposition"] = f'attachment; filename="{name}.{"nc" if ext == "ncCF" else ext}"'
    return Response(body, media_type=fmt.MEDIA_TYPES.get(ext, "text/plain"), headers=headers)


def erddap_paging(request: Request, most: int | None = MAX_PAGE) -> tuple[str, tuple[int, int] | None]:
    """Return the request's query string without ERDDAP's page= and itemsPerPage=, and the (offset, limit) they
    ask for (None: not given; the limit at most ``most``)."""
    params = {k: v for k, v in request.query_params.items()}
    rest = "&".join(part for part in request.url.query.split("&")
                    if part.split("=", 1)[0] not in ("page", "itemsPerPage"))
    return rest, erddap_page(params, most)


def erddap_slice(request: Request, found: list[DatasetDetails]) -> list[DatasetDetails]:
    """Return the page of ``found`` ERDDAP's page= and itemsPerPage= ask for (ERDDAP's defaults: page 1 of 1,000);
    DatasetNotFoundError, as ERDDAP answers, when it holds none."""
    offset, limit = erddap_paging(request, most=None)[1] or (0, ERDDAP_PAGE)
    chosen = found[offset:offset + limit]
    if not chosen:
        if not found:
            raise DatasetNotFoundError("Your query produced no matching results. (nRows = 0)")
        raise DatasetNotFoundError(f"Your query produced no matching results. (page={offset // limit + 1} is past the "
                                   f"last page, {-(-len(found) // limit)}, of {len(found):,} matching datasets at "
                                   f"itemsPerPage={limit})")
    return chosen


def facade_router(service: DstpService, settings: Settings,
                  principal_of: Callable[[Request], Principal], view: CatalogView) -> APIRouter:
    """Return the router of the ERDDAP and STAC facades and of ``/docs``; ERDDAP's searches and lists page over
    ``view``'s search index (built once per catalog version and set of datasets a principal may read)."""
    facade = _Facade(service, settings, principal_of)
    router = APIRouter()

    async def in_thread(work: Callable[[], Any]) -> Any:
        return await anyio.to_thread.run_sync(work)

    # -- ERDDAP ---------------------------------------------------------------------------------

    @router.get("/erddap", include_in_schema=False)
    @router.get("/erddap/index.html", response_class=HTMLResponse, tags=["ERDDAP"],
                summary="ERDDAP facade: what it offers")
    def erddap_home(request: Request) -> Response:
        base = f"{facade.base(request)}/erddap"
        items = "".join(f'<li><a href="{base}/{p}">{p}</a></li>' for p in (
            "info/index.html", "search/index.html?searchFor=temperature", "tabledap/allDatasets.htmlTable",
            "griddap/index.html", "tabledap/index.html"))
        return HTMLResponse(f"<!DOCTYPE html><html><head><meta charset='UTF-8'><title>dstp ERDDAP facade</title>"
                            f"</head><body><h1>ERDDAP-compatible access to dstp</h1><ul>{items}</ul>"
                            "<p>See docs/erddap.md.</p></body></html>")

    @router.get("/erddap/version", response_class=PlainTextResponse, tags=["ERDDAP"],
                summary="The ERDDAP version whose URL grammar this facade follows")
    def erddap_version() -> str:
        return f"ERDDAP_version={ERDDAP_VERSION}\n"

    def grid_answer(request: Request, name: str) -> Response:
        principal = principal_of(request)
        dataset_id, ext = _split(name, GRID_FORMATS)
        if dataset_id == "index":
            return list_answer(request, ext, "griddap")
        ds = facade.dataset(dataset_id, principal)
        if not ds.axes:
            raise DatasetNotFoundError(f"{dataset_id} is not a griddap dataset (station, profile or trajectory "
                                       f"data is a table): use tabledap/{dataset_id}.{ext}")
        if ext == "das":
            return _send(fmt.das(ds, grid=True), ext, dataset_id)
        if ext == "dds":
            request_ = parse_griddap(request.url.query, ds) if request.url.query.strip() else None
            return _send(fmt.dds(ds, grid=True, request=request_), ext, dataset_id)
        if ext == "ncml":
            return _send(fmt.ncml(ds, f"{facade.base(request)}/erddap/griddap/{dataset_id}"), ext, dataset_id)
        if ext == "html":
            return _send(fmt.render(fmt.from_arrow(pa.table({"variable": [v.name for v in ds.grid_variables]})),
                                    "htmlTable", f"griddap {dataset_id}"), ext, dataset_id)
        grid = parse_griddap(request.url.query, ds)
        slab, columns = griddap_slab(grid, ds)
        table = facade.table(slab.sql, principal)
        keep = kept_rows(slab)
        if keep is not None:
            table = table.take(pa.array(keep))
        shape = [len(range(n)[k]) for n, k in zip(slab.read_shape, slab.keep)]
        if ext == "nc":
            return _send(fmt.grid_netcdf(table, ds, slab.grid, shape, columns[:len(slab.grid)], slab.sql), ext,
                         dataset_id)
        if ext == "parquet":
            return _send(fmt.parquet(table), ext, dataset_id)
        return _send(fmt.render(fmt.from_arrow(table, ds), ext, dataset_id), ext, dataset_id)

    def table_answer(request: Request, name: str) -> Response:
        principal = principal_of(request)
        dataset_id, ext = _split(name, TABLE_FORMATS)
        if dataset_id == "index":
            return list_answer(request, ext, "tabledap")
        if dataset_id == ALL_DATASETS:
            if ext not in LIST_FORMATS:
                raise QueryError(f"allDatasets answers {', '.join('.' + f for f in LIST_FORMATS)}")
            query, paged = erddap_paging(request, most=None)
            ids = [s.id for s in service.datasets(principal)] if paged is None else \
                [s.id for s in pages_of(paged[0], paged[1], principal)]
            listing = all_datasets([service.describe(i, principal) for i in ids], facade.base(request), query)
            return _send(fmt.render(listing, "htmlTable" if ext == "html" else ext, ALL_DATASETS), ext, ALL_DATASETS)
        ds = facade.dataset(dataset_id, principal)
        if ext == "das":
            return _send(fmt.das(ds, grid=False), ext, dataset_id)
        if ext == "html":
            return _send(fmt.render(fmt.from_arrow(pa.table({"variable": list(ds.columns)})), "htmlTable",
                                    f"tabledap {dataset_id}"), ext, dataset_id)
        request_ = parse_tabledap(request.url.query, ds, extremes=lambda column, kind: facade.extreme(
            ds, column, kind, principal))
        if ext == "dds":
            return _send(fmt.dds(ds, grid=False, columns=request_.columns if request.url.query.strip() else None),
                         ext, dataset_id)
        table = facade.table(request_.sql, principal)
        if table.num_rows == 0:  # ERDDAP's answer to a query that matches nothing, in every format
            raise NotFoundError(f"{NO_MATCH} (nRows = 0)")
        if ext in ("nc", "ncCF"):
            return _send(fmt.table_netcdf(table, ds, request_.sql, cf=ext == "ncCF"), ext, dataset_id)
        if ext == "parquet":
            return _send(fmt.parquet(table), ext, dataset_id)
        return _send(fmt.render(fmt.from_arrow(table, ds, ucum=request_.ucum), ext, dataset_id), ext, dataset_id)

    def pages_of(offset: int, limit: int, principal: Principal) -> list[DatasetSummary]:
        """Return ``limit`` datasets from ``offset``, by id, in as many of the service's pages (1,000 at most) as it
        takes: an ERDDAP page of 5,000 was cut to 1,000, and a client reading on at page 2 skipped 4,000."""
        found: list[DatasetSummary] = []
        while len(found) < limit:
            page = service.page(offset + len(found), min(MAX_PAGE, limit - len(found)), "", principal)
            found += summaries(page)
            if next_offset(page) is None:
                break
        return found

    def list_answer(request: Request, ext: str, protocol: str) -> Response:
        if ext not in LIST_FORMATS:
            raise QueryError(f"dataset lists answer {', '.join('.' + f for f in LIST_FORMATS)}")
        principal = principal_of(request)
        if protocol:  # griddap/index, tabledap/index: one page of those the protocol serves
            details = erddap_slice(request, erddap_matches(view.index(principal), "", protocol))
        else:  # info/index: one page (ERDDAP's page=1&itemsPerPage=1000 unless asked otherwise)
            offset, limit = erddap_paging(request, most=None)[1] or (0, ERDDAP_PAGE)
            details = [service.describe(s.id, principal) for s in pages_of(offset, limit, principal)]
        listing = listing_table(details, facade.base(request))
        return _send(fmt.render(listing, "htmlTable" if ext == "html" else ext, "datasets"), ext, "datasets")

    @router.get("/erddap/griddap/{name}", tags=["ERDDAP"], response_class=Response,
                summary="ERDDAP griddap: a hyperslab by index or value, e.g. ccm3.csv?temperature[(1990-07-16):1:(last)][0][(30):1:(50)][0:4:63]",
                description="Formats: " + ", ".join("." + f for f in GRID_FORMATS) + ". The query string "
                "is var[start:stride:stop][…] per axis (index, last, last-n or (value)); see docs/erddap.md.")
    async def griddap(request: Request, name: str = DATASET_EXT) -> Response:
        try:
            return await in_thread(lambda: grid_answer(request, name))
        except Exception as exc:  # noqa: BLE001 - ERDDAP clients read ERDDAP's error shape
            return _erddap_error(exc)

    @router.get("/erddap/tabledap/{name}", tags=["ERDDAP"], response_class=Response,
                summary="ERDDAP tabledap: records as a table, e.g. ccm3.csvp?time,lat,temperature&lat>=60&orderBy(\"time\")",
                description="Formats: " + ", ".join("." + f for f in TABLE_FORMATS) + ". allDatasets lists "
                "the catalog. Constraints = != < <= > >=, distinct(), orderBy(), orderByDescending().")
    async def tabledap(request: Request, name: str = DATASET_EXT) -> Response:
        try:
            return await in_thread(lambda: table_answer(request, name))
        except Exception as exc:  # noqa: BLE001
            return _erddap_error(exc)

    @router.get("/erddap/info/{dataset_id}/index.{ext}", tags=["ERDDAP"], response_class=Response,
                summary="ERDDAP info: a dataset's variables and attributes (Row Type, Variable Name, …)")
    async def info(request: Request, dataset_id: str, ext: str) -> Response:
        def answer() -> Response:
            if ext not in LIST_FORMATS:
                raise QueryError(f"info answers {', '.join('.' + f for f in LIST_FORMATS)}")
            ds = facade.dataset(dataset_id, principal_of(request))
            return _send(fmt.render(info_table(ds), "htmlTable" if ext == "html" else ext, dataset_id), ext,
                         dataset_id)
        try:
            return await in_thread(answer)
        except Exception as exc:  # noqa: BLE001
            return _erddap_error(exc)

    @router.get("/erddap/info/index.{ext}", tags=["ERDDAP"], response_class=Response,
                summary="ERDDAP: every dataset, with links")
    async def info_index(request: Request, ext: str) -> Response:
        try:
            return await in_thread(lambda: list_answer(request, ext, ""))
        except Exception as exc:  # noqa: BLE001
            return _erddap_error(exc)

    @router.get("/erddap/search/{page}.{ext}", tags=["ERDDAP"], response_class=Response,
                summary="ERDDAP search: index.EXT?searchFor=words, advanced.EXT?searchFor=…&protocol=griddap"
                        "&minLon=…&maxLon=…&minLat=…&maxLat=…&minTime=…&maxTime=…&standard_name=…",
                description="advanced also takes " + ", ".join(CATEGORIES + BOUNDS) + " (ERDDAP's meanings: "
                "a dataset matches when its extent overlaps the box and it has each category value; (ANY) or "
                "empty is no constraint). Unknown parameters and malformed values are refused (400); see "
                "docs/erddap.md.")
    async def search(request: Request, page: str, ext: str,
                     searchFor: str = Query("", description="Words that must all match (ids, titles, "
                                            "attributes, standard names…)", examples=["temperature"]),
                     protocol: str = Query("(ANY)", description="griddap, tabledap or (ANY)")) -> Response:
        def answer() -> Response:
            if page not in ("index", "advanced") or ext not in LIST_FORMATS:
                raise QueryError("search is /erddap/search/index.<fmt> or advanced.<fmt>, fmt csv, json, htmlTable")
            wanted = parse_search(request.query_params.multi_items(), page, dt.datetime.now(dt.timezone.utc))
            found = advanced_matches(view.index(principal_of(request)), wanted)
            listing = listing_table(erddap_slice(request, found), facade.base(request))
            return _send(fmt.render(listing, "htmlTable" if ext == "html" else ext, "search"), ext, "search")
        try:
            return await in_thread(answer)
        except Exception as exc:  # noqa: BLE001
            return _erddap_error(exc)

    # -- STAC -------------------------------------------------------------------------------------

    def visible(request: Request) -> list[str]:
        return [s.id for s in service.datasets(principal_of(request))]

    @router.get("/stac", tags=["STAC"], summary="STAC API landing page: a Catalog of the datasets")
    def stac_landing(request: Request) -> JSONResponse:
        return JSONResponse(stac.landing(visible(request), facade.links(request)))

    @router.get("/stac/conformance", tags=["STAC"], summary="STAC API conformance classes")
    def stac_conformance() -> JSONResponse:
        return JSONResponse(stac.conformance())

    @router.get("/stac/collections", tags=["STAC"],
                summary="Every dataset as a STAC Collection (datacube extension)")
    def stac_collections(request: Request,
                         limit: int = Query(DEFAULT_PAGE, ge=1, le=MAX_PAGE, description="Collections per page."),
                         offset: int = Query(0, ge=0, description="Collections to skip (the next link names it).")
                         ) -> JSONResponse:
        principal, links = principal_of(request), facade.links(request)
        page = service.page(offset, limit, "", principal)
        body = stac.collections([stac.collection(service.describe(s.id, principal), links) for s in summaries(page)],
                                links)
        # STAC API - Collections: numberMatched/numberReturned and next/prev links (OGC API - Common 2)
        body["numberMatched"], body["numberReturned"] = page.total, len(page.datasets)
        base = facade.base(request)
        nxt = next_offset(page)
        if nxt is not None:
            body["links"].append({"rel": "next", "type": "application/json", "method": "GET",
                                  "href": base + page_url(request.url.path, request.query_params, nxt, limit)})
        if page.offset > 0:
            body["links"].append({"rel": "prev", "type": "application/json", "method": "GET",
                                  "href": base + page_url(request.url.path, request.query_params,
                                                          max(0, page.offset - limit), limit)})
        return JSONResponse(body)

    @router.get("/stac/collections/{dataset_id}", tags=["STAC"], summary="One dataset as a STAC Collection")
    def stac_collection(request: Request, dataset_id: str = Path(..., examples=["ccm3"])) -> JSONResponse:
        return JSONResponse(stac.collection(service.describe(dataset_id, principal_of(request)),
                                            facade.links(request)))

    @router.get("/stac/collections/{dataset_id}/items", tags=["STAC"],
                summary="A collection's items: one per file, with its time span (limit, offset, bbox, datetime)")
    def stac_items(request: Request, dataset_id: str) -> JSONResponse:
        details = service.describe(dataset_id, principal_of(request))
        params = dict(request.query_params)
        params["collections"] = dataset_id
        search = stac_items_.parse_search(params)
        found, matched = stac_items_.items_of([details], facade.links(request), search)
        return _item_page(request, found, matched, search, extra=[
            {"rel": "collection", "href": f"{facade.base(request)}/stac/collections/{dataset_id}",
             "type": "application/json"}])

    @router.get("/stac/collections/{dataset_id}/items/{item}", tags=["STAC"],
                summary="One item: a file of the dataset")
    def stac_item(request: Request, dataset_id: str, item: str) -> JSONResponse:
        details = service.describe(dataset_id, principal_of(request))
        f = next((f for f in details.files if f.name == item), None)
        if f is None:
            raise NotFoundError(f"dataset {dataset_id} has no file {item!r}; its items are listed at "
                                f"/stac/collections/{dataset_id}/items")
        return JSONResponse(stac_items_.item_of(details, f, facade.links(request)),
                            media_type="application/geo+json")

    def _item_page(request: Request, found: list[dict[str, Any]], matched: int, search: stac_items_.Search,
                   post: dict[str, Any] | None = None, extra: Any = ()) -> JSONResponse:
        base = facade.base(request)
        self_href = base + request.url.path + (f"?{request.url.query}" if request.url.query else "")
        nxt: dict[str, Any] | None = None
        if search.offset + len(found) < matched:
            offset = search.offset + len(found)
            if post is None:
                nxt = {"rel": "next", "type": "application/geo+json", "method": "GET",
                       "href": base + page_url(request.url.path, request.query_params, offset, search.limit)}
            else:  # STAC API: a POST search's next link repeats the body with the new token
                nxt = {"rel": "next", "type": "application/geo+json", "method": "POST", "merge": False,
                       "href": base + request.url.path, "body": {**post, "offset": offset, "limit": search.limit}}
        body = stac_items_.feature_collection(found, matched, self_href, nxt, [
            {"rel": "root", "href": f"{base}/stac", "type": "application/json"}, *extra])
        return JSONResponse(body, media_type="application/geo+json")

    def _search(request: Request, params: dict[str, Any], post: dict[str, Any] | None) -> JSONResponse:
        principal, links = principal_of(request), facade.links(request)
        search = stac_items_.parse_search(params)
        wanted = search.collections
        ids = [s.id for s in service.datasets(principal)] if wanted is None else list(wanted)
        if search.ids is not None and wanted is None:  # an item id names its collection: dataset/file
            ids = [i for i in ids if any(x.startswith(i + "/") for x in search.ids)]
        details = []
        for dataset_id in ids:
            try:
                details.append(service.describe(dataset_id, principal))
            except DatasetNotFoundError:
                continue  # an unknown or hidden collection matches nothing (STAC: no error for a filter)
        found, matched = stac_items_.items_of(details, links, search)
        return _item_page(request, found, matched, search, post)

    @router.get("/stac/search", tags=["STAC"],
                summary="STAC API item search: bbox, datetime, collections, ids, limit (files as items)")
    def stac_search_get(request: Request) -> JSONResponse:
        return _search(request, dict(request.query_params), None)

    @router.post("/stac/search", tags=["STAC"], summary="STAC API item search with a JSON body")
    async def stac_search_post(request: Request) -> JSONResponse:
        try:
            body = await request.json()
        except ValueError:
            raise QueryError("the search body is not JSON; send e.g. {\"collections\": [\"ccm3\"], \"limit\": 10}") \
                from None
        if not isinstance(body, dict):
            raise QueryError("the search body must be a JSON object")
        return await anyio.to_thread.run_sync(lambda: _search(request, body, body))

    # -- the API's docs, offline --------------------------------------------------------------

    @router.get("/docs", response_class=HTMLResponse, tags=["API"],
                summary="This API's description with copy-paste examples (no CDN: works offline)")
    def docs(request: Request) -> HTMLResponse:
        from dstp.http.api_docs import docs_page

        return HTMLResponse(docs_page(request.app.openapi(), facade.base(request)))

    @router.get("/redoc", include_in_schema=False)
    def redoc() -> RedirectResponse:
        return RedirectResponse("/docs")

    return router
