"""Routes of the maps: XYZ tiles, a point's time series, the map page, and WMS (:mod:`dstp.http.wms`).

One ``APIRouter``, included by :func:`dstp.http.app.create_app` in one line. Each
route only translates: :class:`~dstp.http.maps.MapSource` reads through the
service with the caller's principal, :mod:`dstp.render` draws.

    GET /tiles/{dataset}/{variable}/{z}/{x}/{y}.png?time=&elevation=&colormap=&vmin=&vmax=
    GET /tiles/{dataset}/{variable}/tileset.json   (OGC API – Tiles, WebMercatorQuad)
    GET /datasets/{dataset}/series.json?variable=&lat=&lon=&elevation=&within=
    GET /datasets/{dataset}/map?variable=&sql=   (sql: the query builder's records as dots)
    GET /wms?SERVICE=WMS&REQUEST=…, GET /erddap/wms/{dataset}/request?…   (WMS 1.3.0, :mod:`dstp.http.wms`)
"""

from __future__ import annotations

import math
from typing import Any, Callable

import anyio
from fastapi import APIRouter, Query, Request
from fastapi.responses import HTMLResponse, JSONResponse, PlainTextResponse, Response

from dstp.auth import Principal
from dstp.errors import BadRequestError, DstpError, NotFoundError
from dstp.http.error_responses import incident
from dstp.http.wms import Coded, CapabilityLayer, WmsParams, capabilities_xml, exception_xml, feature_info_text
from dstp.service import DstpService
from dstp.http.maps import CACHE_BYTES, MapSource, Style, mappable
from dstp.http.pages import CatalogView, PageRenderer
from dstp.render import COLORMAPS
from dstp.render.points import DOT_RADIUS
from dstp.render.raster import EARTH_RADIUS, MAX_ZOOM

__all__ = ["map_router"]

TIME = Query("", description="Time to draw (ISO, the nearest of the dataset's own times); none: the first.")
ELEVATION = Query("", description="Level to draw (the nearest of the dataset's levels); none: the first.")
COLORMAP = Query(COLORMAPS[0], description=f"Colour map: {', '.join(COLORMAPS)}.")
VMIN = Query(None, description="Value drawn in the colour map's first colour (default: the slab's least value).")
VMAX = Query(None, description="Value drawn in the colour map's last colour (default: the slab's greatest value).")


def image(body: bytes, principal: Principal, media_type: str = "image/png") -> Response:
    """Return an image response; one of a dataset only some may read never sits in a shared cache."""
    cache = "public, max-age=300" if not principal.authenticated else "private, max-age=300"
    return Response(body, media_type=media_type, headers={"Cache-Control": cache, "Vary": "Authorization, Cookie"})


def map_router(service: DstpService, principal_of: Callable[[Request], Principal], *,
               cache_bytes: int = CACHE_BYTES) -> APIRouter:
    """Return the router of the tiles, series, map page and WMS endpoints (``cache_bytes``: map_cache_bytes)."""
    view = CatalogView(service)
    source = MapSource(view, cache_bytes)
    renderer = PageRenderer()
    router = APIRouter()

    async def in_thread(work: Callable[[], Any]) -> Any:
        return await anyio.to_thread.run_sync(work)

    @router.get("/tiles/{dataset}/{variable}/{z}/{x}/{y}.png", response_class=Response, tags=["Maps"],
                summary="XYZ map tile (Web Mercator, 256 × 256 PNG)")
    async def tile(request: Request, dataset: str, variable: str, z: int, x: int, y: int, time: str = TIME,
                   elevation: str = ELEVATION, colormap: str = COLORMAP, vmin: float | None = VMIN,
                   vmax: float | None = VMAX) -> Response:
        principal = principal_of(request)
        params = {"time": time, "elevation": elevation}
        body = await in_thread(lambda: source.tile(dataset, variable, z, x, y, Style(colormap, vmin, vmax), params,
                                                   principal))
        return image(body, principal)

    @router.get("/tiles/{dataset}/{variable}/tileset.json", tags=["Maps"],
                summary="OGC API – Tiles: the tileset of an attribute (WebMercatorQuad, PNG)")
    async def tileset(request: Request, dataset: str, variable: str) -> JSONResponse:
        principal = principal_of(request)

        def body() -> dict[str, Any]:
            layer = source.layer(dataset, variable, principal)  # not found for who may not read the dataset
            base = str(request.base_url).rstrip("/")
            half = math.pi * EARTH_RADIUS
            dims = {"time": [_iso(v) for v in view.values(dataset, layer.time.name, principal)] if layer.time else [],
                    "elevation": [_text(v) for v in view.values(dataset, layer.level.name, principal)]
                    if layer.level else []}
            a = layer.attribute
            return {
                "title": f"{dataset}/{a.name}: {a.description or a.name}",
                "dataType": "map",
                "crs": "http://www.opengis.net/def/crs/EPSG/0/3857",
                "tileMatrixSetURI": "http://www.opengis.net/def/tilematrixset/OGC/1.0/WebMercatorQuad",
                "links": [
                    {"rel": "item", "type": "image/png", "templated": True,
                     "href": f"{base}/tiles/{dataset}/{a.name}/{{tileMatrix}}/{{tileCol}}/{{tileRow}}.png"},
                    {"rel": "http://www.opengis.net/def/rel/ogc/1.0/tiling-scheme", "type": "application/json",
                     "href": "http://www.opengis.net/def/tilematrixset/OGC/1.0/WebMercatorQuad"},
                ],
                "tileMatrixSetLimits": [{"tileMatrix": str(z), "minTileRow": 0, "maxTileRow": 2**z - 1,
                                         "minTileCol": 0, "maxTileCol": 2**z - 1} for z in range(MAX_ZOOM + 1)],
                "boundingBox": {"lowerLeft": [-half, -half], "upperRight": [half, half],
                                "crs": "http://www.opengis.net/def/crs/EPSG/0/3857"},
                "tileSize": 256,
                "dimensions": {k: v for k, v in dims.items() if v},
            }

        return JSONResponse(await in_thread(body))

    @router.get("/datasets/{dataset}/series.json", tags=["Maps"],
                summary="Time series of the grid cell under a point")
    async def series(request: Request, dataset: str, variable: str = Query(..., description="Attribute."),
                     lat: float = Query(..., description="Latitude, degrees north."),
                     lon: float = Query(..., description="Longitude, degrees east."),
                     elevation: str = ELEVATION,
                     within: float = Query(1.0, gt=0, le=180, description="On a station or mesh map: how far "
                                           "(degrees of arc) the nearest station or node may be from lat, lon."),
                     ) -> dict[str, Any]:
        principal = principal_of(request)
        answer: dict[str, Any] = await in_thread(
            lambda: source.series(dataset, variable, lon, lat, {"elevation": elevation}, principal, within))
        return answer

    @router.get("/datasets/{dataset}/map", response_class=HTMLResponse, tags=["Maps"],
                summary="Interactive map page")
    async def map_page(request: Request, dataset: str, variable: str = Query("", description="Attribute"),
                       sql: str = Query("", description="A query whose records (their lat/lon columns) are drawn "
                                        "as dots, as the query builder's 'See these records on the map' asks"),
                       ) -> Response:
        principal = principal_of(request)

        def model() -> dict[str, Any]:
            details = view.details(dataset, principal)
            layers = mappable(details)
            chosen = next((x for x in layers if x.attribute.name == variable), layers[0] if layers else None)
            info: dict[str, Any] = {"id": dataset, "title": details.summary.title, "layers": [
                x.attribute.name for x in layers], "variable": "", "colormaps": list(COLORMAPS), "sql": sql}
            if chosen is None:
                return info
            s = details.summary
            if s.bbox is not None:  # the page opens on the data: [[south, west], [north, east]]
                west, east = s.lon_extent or (-180.0, 180.0)
                info["bounds"] = [[s.bbox[0], west], [s.bbox[1], east + 360.0 if west > east else east]]
            m = source.slab(dataset, chosen.attribute.name, {}, principal)
            low, high = m.slab.finite_range() or (0.0, 1.0)
            info.update(variable=chosen.attribute.name, units=chosen.attribute.units, vmin=low, vmax=high,
                        times=[_text(v) for v in view.values(dataset, chosen.time.name, principal)]
                        if chosen.time else [],
                        levels=[_text(v) for v in view.values(dataset, chosen.level.name, principal)]
                        if chosen.level else [],
                        level_units=chosen.level.units if chosen.level else "")
            return info

        info = await in_thread(model)
        viewer = principal.describe() if principal.authenticated else ""
        return HTMLResponse(renderer.render("map.html", info, viewer=viewer))

    def capability_layers(principal: Principal, only: str | None) -> list[CapabilityLayer]:
        found = []
        for summary in service.datasets(principal):
            if only is not None and summary.id != only:
                continue
            details = view.details(summary.id, principal)
            for layer in mappable(details):
                bbox = (-180.0, -90.0, 180.0, 90.0)
                if summary.bbox is not None:
                    west, east = summary.lon_extent or (-180.0, 180.0)
                    if west > east:
                        west, east = -180.0, 180.0
                    bbox = (west, summary.bbox[0], east, summary.bbox[1])
                times = tuple(_iso(v) for v in view.values(summary.id, layer.time.name, principal)) \
                    if layer.time else ()
                levels = tuple(_text(v) for v in view.values(summary.id, layer.level.name, principal)) \
                    if layer.level else ()
                a = layer.attribute
                found.append(CapabilityLayer(f"{summary.id}/{a.name}", f"{summary.title}: {a.description or a.name}",
                                             f"{a.name} [{a.units}]" if a.units else a.name, a.units, bbox, times,
                                             levels, layer.level.units if layer.level else ""))
        if only is not None and not found:
            view.details(only, principal)  # not found as any unknown dataset, if it is not readable
        return found

    def wms(request: Request, principal: Principal, dataset: str | None) -> Response:
        p = WmsParams(request.query_params, dataset)
        p.check_version()
        op = p.request()
        url = str(request.url).split("?", 1)[0]
        if op == "GetCapabilities":
            title = f"dstp WMS: {dataset}" if dataset else "dstp WMS"
            body = capabilities_xml(url, title, capability_layers(principal, dataset))
            return Response(body, media_type="text/xml", headers={"Cache-Control": "private, max-age=60"})
        if op == "GetLegendGraphic":
            ds, variable = p.layer("LAYER")
            return image(source.legend(ds, variable, p.style(), p.dimensions(), principal), principal)
        ds, variable = p.layer("QUERY_LAYERS" if op == "GetFeatureInfo" else "LAYERS")
        style = p.style()
        crs, bbox = p.crs_and_bbox()
        width, height = p.integer("WIDTH"), p.integer("HEIGHT")
        if op == "GetMap":
            p.format()
            return image(source.picture(ds, variable, crs, bbox, width, height, style, p.dimensions(), principal),
                         principal)
        info_format = p.format("INFO_FORMAT", ("text/plain", "application/json"))
        i, j = p.integer("I", "InvalidPoint"), p.integer("J", "InvalidPoint")
        if not (0 <= i < width and 0 <= j < height):
            raise Coded("InvalidPoint", BadRequestError(f"I={i}, J={j} is outside the {width} × {height} map"))
        west, south, east, north = bbox
        x = west + (i + 0.5) / width * (east - west)
        y = north - (j + 0.5) / height * (north - south)
        lon, lat = (x, y) if crs != "EPSG:3857" else _from_mercator(x, y)
        # a station answers where its dot is drawn: within its radius and a pixel of its place
        degrees = (east - west) / width if crs != "EPSG:3857" else math.degrees((east - west) / width / EARTH_RADIUS)
        answer = source.value_at(ds, variable, lon, lat, p.dimensions(), principal,
                                 within=(DOT_RADIUS + 1) * degrees)
        if info_format == "application/json":
            return JSONResponse(answer)
        return PlainTextResponse(feature_info_text(answer))

    async def wms_answer(request: Request, dataset: str | None) -> Response:
        principal = principal_of(request)
        try:
            answer: Response = await in_thread(lambda: wms(request, principal, dataset))
            return answer
        except Coded as coded:
            err: Any = coded.error
            code = coded.code
        except DstpError as exc:
            err, code = exc, "LayerNotDefined" if isinstance(exc, NotFoundError) else "InvalidParameterValue"
        except Exception as exc:
            err, code = incident(exc), ""
        status = getattr(err, "http_status", 400)
        if code == "InvalidPoint":
            status = 400
        return Response(exception_xml(str(err), code), status_code=status, media_type="text/xml")

    @router.get("/wms", tags=["Maps"], summary="WMS 1.3.0: GetCapabilities, GetMap, GetFeatureInfo, GetLegendGraphic",
                response_class=Response)
    async def wms_all(request: Request) -> Response:
        return await wms_answer(request, None)

    @router.get("/erddap/wms/{dataset}/request", tags=["ERDDAP"], response_class=Response,
                summary="WMS 1.3.0 of one dataset, at ERDDAP's path")
    async def wms_one(request: Request, dataset: str) -> Response:
        return await wms_answer(request, dataset)

    return router


def _from_mercator(x: float, y: float) -> tuple[float, float]:
    return math.degrees(x / EARTH_RADIUS), math.degrees(math.atan(math.sinh(y / EARTH_RADIUS)))


def _iso(value: Any) -> str:
    """Return a time as WMS writes it: ISO 8601 with a T and a Z (the dataset's own calendar date)."""
    return _text(value).replace(" ", "T") + "Z"


def _text(value: Any) -> str:
    return value.isoformat() if hasattr(value, "isoformat") else str(value)
