"""The HTTP doors onto the catalog for browsers and scripts: the catalog page and its JSON, one dataset's page,
quicklook maps and series, the query builder, where the server listens, and the API's own description.

One ``APIRouter``, included by :func:`dstp.http.app.create_app`. Each route turns its request into a call on the
page models (:mod:`dstp.http.pages`, framework-free) or the service, and the answer into HTML, JSON or PNG:

    GET /  /datasets  /index.json  /datasets.json       the catalog (filters, pages, facets)
    GET /datasets/{id}  /datasets/{id}.json              one dataset
    GET /datasets/{id}/quicklook.png  timeseries.png     drawn server-side
    GET /datasets/{id}/query  query.json  /query-builder the query builder
    GET /server.json  /api.json  /api                    where this server listens; this API's description
"""

from __future__ import annotations

from typing import Any, Callable, Sequence
from urllib.parse import urlencode

from fastapi import APIRouter, Depends, Query, Request
from fastapi.responses import HTMLResponse, JSONResponse, RedirectResponse, Response

from dstp import __version__
from dstp.auth import ANONYMOUS, Principal
from dstp.catalog.registry import CatalogPage
from dstp.http.builder import BuilderState
from dstp.http.error_responses import openapi_errors
from dstp.http.html_pages import HtmlPages
from dstp.http.pages import CatalogView, builder_page, catalog_page, dataset_page
from dstp.http.paging import DEFAULT_PAGE, link_header, summaries
from dstp.http.quicklook import map_selection, render_map, render_series, series_selection
from dstp.http.search import CatalogFilter
from dstp.http.shapes import summary_json
from dstp.http.snippets import Endpoints
from dstp.service import DstpService
from dstp.service.feed import MAX_PAGE
from dstp.settings import Settings
from dstp.transport.wire.values import reachable_endpoint

__all__ = ["PAGE_ERRORS", "catalog_router", "endpoints"]

PAGE_ERRORS = openapi_errors(400, 404, 500)


def endpoints(request: Request, service: DstpService, settings: Settings, principal: Principal = ANONYMOUS,
              needs_token: bool = False) -> Endpoints:
    """Return where clients reach this server, as seen by the browser that asked."""
    host = request.url.hostname or settings.host
    grpc = service.channels.get("grpc")
    target = grpc.endpoint if grpc is not None and grpc.endpoint else ""
    if not target:  # the gRPC server has not told the service where it listens
        target = f"{host}:{settings.port}" if settings.port else f"{host}:GRPC_PORT"
    else:
        target = reachable_endpoint(target, host)
    return Endpoints(str(request.base_url).rstrip("/"), target, tls=settings.tls,
                     token=principal.authenticated or needs_token)


def catalog_router(service: DstpService, settings: Settings, view: CatalogView, html: HtmlPages,
                   principal_of: Callable[[Request], Principal]) -> APIRouter:
    """Return the routes of the catalog pages, dataset pages, quicklooks, query builder and API description."""
    router = APIRouter()
    PRINCIPAL = Depends(principal_of)

    # -- catalog ------------------------------------------------------------------------

    Q = Query("", description="Full-text search over ids, titles, summaries, keywords, attributes, units, "
              "standard names; every word must match.")
    ATTR = Query([], description="Attribute name or CF standard name the dataset must have (repeatable).")
    START = Query("", description="Keep datasets whose time span overlaps [start, end]; ISO 8601 prefix.")
    END = Query("", description="End of the time span (ISO 8601 prefix; 1990 means all of 1990).")
    BBOX = Query("", description="lat0,lat1,lon0,lon1: keep datasets whose region overlaps this box.")
    PAGE_LIMIT = Query(None, ge=1, le=MAX_PAGE, description="Datasets per page (at most 1,000).")
    HOME_LIMIT = Query(DEFAULT_PAGE, ge=1, le=MAX_PAGE, description="Datasets per page (at most 1,000).")
    PAGE_OFFSET = Query(0, ge=0, description="Datasets to skip (the Link header's next page names it).")

    @router.get("/", response_class=HTMLResponse, summary="Catalog page", responses=PAGE_ERRORS)
    @router.get("/datasets", response_class=HTMLResponse, include_in_schema=False)
    def catalog_html(q: str = Q, attribute: list[str] = ATTR, start: str = START, end: str = END,
                     bbox: str = BBOX, limit: int = HOME_LIMIT, offset: int = PAGE_OFFSET,
                     principal: Principal = PRINCIPAL) -> HTMLResponse:
        return html.page("catalog.html", catalog_page(view, CatalogFilter.parse(q, attribute, start, end, bbox), principal,
                                                 offset, limit), principal)

    @router.get("/index.json", summary="Catalog page as JSON: filter, one page of hits (best first), facets, paging",
             responses=PAGE_ERRORS)
    def catalog_json(q: str = Q, attribute: list[str] = ATTR, start: str = START, end: str = END,
                     bbox: str = BBOX, limit: int = HOME_LIMIT, offset: int = PAGE_OFFSET,
                     principal: Principal = PRINCIPAL) -> dict[str, Any]:
        return catalog_page(view, CatalogFilter.parse(q, attribute, start, end, bbox), principal, offset, limit)

    @router.get("/datasets.json", summary="The published datasets: a JSON array of summaries (same filters as /)",
             description="With `limit` (and `offset`) one page, by id (best first when filtered): the header "
             "X-Total-Count says how many match, and Link names the next and previous pages (RFC 8288). "
             "Without either, every dataset.", responses=PAGE_ERRORS)
    def datasets_json(request: Request, q: str = Q, attribute: list[str] = ATTR, start: str = START,
                      end: str = END, bbox: str = BBOX, limit: int | None = PAGE_LIMIT, offset: int = PAGE_OFFSET,
                      principal: Principal = PRINCIPAL) -> Response:
        f = CatalogFilter.parse(q, attribute, start, end, bbox)
        if limit is None and not offset:  # the whole listing, as before paging
            listed = [summary_json(s) for s in service.datasets(principal)] if not f.active else \
                [summary_json(h.summary) for h in view.index(principal).search(f)]
            return JSONResponse(listed, headers={"X-Total-Count": str(len(listed))})
        size = DEFAULT_PAGE if limit is None else limit
        if f.active:  # the full search (attributes, units, standard names…), one slice of it
            hits = view.index(principal).search(f)
            page = CatalogPage(len(hits), offset, tuple(hits[offset:offset + size]), service.catalog.version)
            body = [summary_json(h.summary) for h in page.datasets]  # type: ignore[union-attr]
        else:  # the catalog's own page, by id, from memory
            page = service.page(offset, size, f.q, principal)
            body = [summary_json(s) for s in summaries(page)]
        headers = {"X-Total-Count": str(page.total)}
        links = link_header(request.url.path, request.query_params, page, size)
        if links:
            headers["Link"] = links
        return JSONResponse(body, headers=headers)

    # -- one dataset --------------------------------------------------------------------

    @router.get("/datasets/{dataset_id}.json", summary="Full description of one dataset", responses=PAGE_ERRORS)
    def dataset_json(dataset_id: str, principal: Principal = PRINCIPAL) -> dict[str, Any]:
        return dataset_page(view, dataset_id, principal)

    @router.get("/datasets/{dataset_id}", response_class=HTMLResponse, summary="Dataset page", responses=PAGE_ERRORS)
    def dataset_html(dataset_id: str, principal: Principal = PRINCIPAL) -> HTMLResponse:
        return html.page("dataset.html", dataset_page(view, dataset_id, principal), principal)

    def png(body: bytes, fixed: tuple[tuple[str, str], ...], principal: Principal) -> Response:
        # A quicklook of a dataset only some may read must not sit in a shared cache.
        cache = "public, max-age=300" if not principal.authenticated else "private, max-age=300"
        headers = {"Cache-Control": cache, "X-Dstp-Fixed": urlencode(fixed), "Vary": "Authorization, Cookie"}
        return Response(body, media_type="image/png", headers=headers)

    ATTRIBUTE = Query(..., description="The attribute to draw.")
    FIXED = ("Other dimensions are chosen by name (time=1990-03-16, lev=850, depth=5, or the coordinate's "
             "name): the nearest grid value is used, a dimension not given takes its first value.")

    @router.get("/datasets/{dataset_id}/quicklook.png", response_class=Response, summary="Map of one attribute",
             description="A 2-D latitude/longitude slice drawn server-side. " + FIXED, responses=PAGE_ERRORS)
    def quicklook(dataset_id: str, request: Request, attribute: str = ATTRIBUTE,
                  principal: Principal = PRINCIPAL) -> Response:
        d = view.details(dataset_id, principal)
        s = map_selection(d, attribute, request.query_params, lambda dim: view.values(dataset_id, dim, principal))
        return png(render_map(view.table(s.sql, principal), dataset_id, s), s.fixed, principal)

    @router.get("/datasets/{dataset_id}/timeseries.png", response_class=Response, summary="Time series at a point",
             description="The attribute along time at the grid point nearest lat=, lon=. " + FIXED,
             responses=PAGE_ERRORS)
    def timeseries(dataset_id: str, request: Request, attribute: str = ATTRIBUTE,
                   principal: Principal = PRINCIPAL) -> Response:
        d = view.details(dataset_id, principal)
        s = series_selection(d, attribute, request.query_params, lambda dim: view.values(dataset_id, dim, principal))
        return png(render_series(view.table(s.sql, principal), dataset_id, s), s.fixed, principal)

    # -- query builder ------------------------------------------------------------------

    SELECT = Query([], description="Output column (repeatable); none means select *.")
    WHERE = Query([], description="Condition column:operator:value (repeatable), e.g. humidity:>:50.")
    LIMIT = Query("", description="Row limit written into the SQL.")
    SQL = Query("", description="Verbatim SQL; overrides select/where/limit/group/agg.")
    GROUP = Query([], description="Group key (repeatable): a column, or year(t), month(t), season(t), day(t) of a "
                  "time column.")
    AGG = Query([], description="Aggregate function:column (repeatable), e.g. avg:temperature, count:*.")

    def builder(request: Request, dataset_id: str, select: list[str], where: list[str], limit: str,
                sql: str, principal: Principal, group: Sequence[str] = (), agg: Sequence[str] = ()) -> dict[str, Any]:
        state = BuilderState.parse(dataset_id, select, where, limit, group, agg)
        ends = endpoints(request, service, settings, principal, not html.allow_anonymous)
        return builder_page(view, state, sql or None, ends, principal)

    @router.get("/datasets/{dataset_id}/query.json", summary="Query builder state: SQL, snippets, download links",
             responses=PAGE_ERRORS)
    def builder_json(request: Request, dataset_id: str, select: list[str] = SELECT, where: list[str] = WHERE,
                     limit: str = LIMIT, sql: str = SQL, group: list[str] = GROUP, agg: list[str] = AGG,
                     principal: Principal = PRINCIPAL) -> dict[str, Any]:
        return builder(request, dataset_id, select, where, limit, sql, principal, group, agg)

    @router.get("/datasets/{dataset_id}/query", response_class=HTMLResponse, summary="Query builder page",
             responses=PAGE_ERRORS)
    def builder_html(request: Request, dataset_id: str, select: list[str] = SELECT, where: list[str] = WHERE,
                     limit: str = LIMIT, sql: str = SQL, group: list[str] = GROUP, agg: list[str] = AGG,
                     principal: Principal = PRINCIPAL) -> HTMLResponse:
        return html.page("query.html", builder(request, dataset_id, select, where, limit, sql, principal, group, agg),
                    principal)

    @router.get("/query-builder", include_in_schema=False)
    def builder_redirect(dataset: str, principal: Principal = PRINCIPAL) -> RedirectResponse:
        view.details(dataset, principal)
        return RedirectResponse(f"/datasets/{dataset}/query")


    @router.get("/server.json", summary="Where this server listens: HTTP, gRPC and data channels, and its version")
    def server_json(request: Request) -> dict[str, Any]:
        ends = endpoints(request, service, settings)
        host = request.url.hostname or settings.host

        def seen(kind: str) -> str:
            info = service.channels.get(kind)
            if info is None or not info.endpoint:
                return ""
            return reachable_endpoint(info.endpoint, host)

        return {"version": __version__, "http": ends.http_base, "grpc": ends.grpc_target, "data": seen("striped"),
                "udt": seen("udt"), "channels": [k for k in ("grpc", "striped", "udt") if k in service.channels]}

    @router.get("/api.json", summary="This API's OpenAPI description (same as /openapi.json)")
    def api_json(request: Request) -> dict[str, Any]:
        return request.app.openapi()

    @router.get("/api", response_class=HTMLResponse, summary="This API's description as a page (works offline)")
    def api_html(request: Request, principal: Principal = PRINCIPAL) -> HTMLResponse:
        return html.page("api.html", request.app.openapi(), principal)

    return router
