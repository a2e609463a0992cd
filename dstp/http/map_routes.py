"""Routes of the maps: XYZ tiles, a point's time series, the map page, and WMS (:mod:`dstp.http.wms`).

One ``APIRouter``, included by :func:`dstp.http.app.create_app` in one line. Each
route only translates: :class:`~dstp.http.maps.MapSource` reads through the
service with the caller's principal, :mod:`dstp.render` draws.

    GET /tiles/{dataset}/{variable}/{z}/{x}/{y}.png?time=&elevation=&colormap=&vmin=&vmax=
    GET /datasets/{dataset}/series.json?variable=&lat=&lon=&elevation=
    GET /datasets/{dataset}/map?variable=
"""

from __future__ import annotations

from typing import Any, Callable

import anyio
from fastapi import APIRouter, Query, Request
from fastapi.responses import HTMLResponse, Response

from dstp.auth import Principal
from dstp.service import DstpService
from dstp.http.maps import MapSource, Style, mappable
from dstp.http.pages import CatalogView, PageRenderer
from dstp.render import COLORMAPS

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


def map_router(service: DstpService, principal_of: Callable[[Request], Principal]) -> APIRouter:
    """Return the router of the tiles, series, map page and WMS endpoints."""
    view = CatalogView(service)
    source = MapSource(view)
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

    @router.get("/datasets/{dataset}/series.json", tags=["Maps"],
                summary="Time series of the grid cell under a point")
    async def series(request: Request, dataset: str, variable: str = Query(..., description="Attribute."),
                     lat: float = Query(..., description="Latitude, degrees north."),
                     lon: float = Query(..., description="Longitude, degrees east."),
                     elevation: str = ELEVATION) -> dict[str, Any]:
        principal = principal_of(request)
        answer: dict[str, Any] = await in_thread(
            lambda: source.series(dataset, variable, lon, lat, {"elevation": elevation}, principal))
        return answer

    @router.get("/datasets/{dataset}/map", response_class=HTMLResponse, tags=["Maps"],
                summary="Interactive map page")
    async def map_page(request: Request, dataset: str, variable: str = Query("", description="Attribute")) -> Response:
        principal = principal_of(request)

        def model() -> dict[str, Any]:
            details = view.details(dataset, principal)
            layers = mappable(details)
            chosen = next((x for x in layers if x.attribute.name == variable), layers[0] if layers else None)
            info: dict[str, Any] = {"id": dataset, "title": details.summary.title, "layers": [
                x.attribute.name for x in layers], "variable": "", "colormaps": list(COLORMAPS)}
            if chosen is None:
                return info
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

    return router


def _text(value: Any) -> str:
    return value.isoformat() if hasattr(value, "isoformat") else str(value)
