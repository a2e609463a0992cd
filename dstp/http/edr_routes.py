"""The OGC API – EDR door: ``/edr`` landing, conformance, collections and position, area and cube queries.

The queries and their answers are :mod:`dstp.edr`'s; this router only
translates: the dataset as the caller may see it (``describe``: hidden is
not found), one query the service runs for that caller, the answer as
CoverageJSON (``application/prs.coverage+json``), CSV, or netCDF, GeoJSON,
Parquet (:mod:`dstp.edr`). Errors are the
HTTP API's JSON ``{"error": …}`` with their status (400 for a bad query,
404 unknown collection, 413 over the size limit with the figure).
"""

from __future__ import annotations

from typing import Callable

import anyio
import orjson
import pyarrow as pa
from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse, PlainTextResponse, Response

from dstp import edr
from dstp.auth import Principal
from dstp.http.axis_cache import AxisCache
from dstp.http.facade_routes import whole_result
from dstp.service import DstpService

__all__ = ["edr_router"]


def edr_router(service: DstpService, principal_of: Callable[[Request], Principal]) -> APIRouter:
    """Return the router of ``/edr``."""
    router = APIRouter()
    axes_cache = AxisCache()

    def base(request: Request) -> str:
        return str(request.base_url).rstrip("/")

    @router.get("/edr", tags=["EDR"], summary="OGC API - EDR landing page")
    def landing(request: Request) -> JSONResponse:
        return JSONResponse(edr.landing(base(request)))

    @router.get("/edr/conformance", tags=["EDR"], summary="OGC API - EDR conformance classes")
    def conformance() -> JSONResponse:
        return JSONResponse({"conformsTo": edr.CONFORMANCE})

    @router.get("/edr/collections", tags=["EDR"], summary="Every gridded dataset as an EDR collection")
    def collections(request: Request) -> JSONResponse:
        principal = principal_of(request)
        found = []
        for s in service.datasets(principal):
            d = service.describe(s.id, principal)
            if not d.feature_type:
                found.append(edr.collection(d, base(request)))
        return JSONResponse({"links": [{"href": f"{base(request)}/edr/collections", "rel": "self",
                                        "type": "application/json"}], "collections": found})

    @router.get("/edr/collections/{dataset_id}", tags=["EDR"], summary="One dataset as an EDR collection")
    def one(request: Request, dataset_id: str) -> JSONResponse:
        return JSONResponse(edr.collection(service.describe(dataset_id, principal_of(request)), base(request)))

    @router.get("/edr/collections/{dataset_id}/{query_type}", tags=["EDR"],
                summary="position (coords=POINT(lon lat)), area (coords=POLYGON((…))) or cube (bbox=w,s,e,n) "
                        "with datetime=, z=, parameter-name=, f=CoverageJSON|CSV|netCDF|GeoJSON|Parquet")
    async def query(request: Request, dataset_id: str, query_type: str) -> Response:
        principal = principal_of(request)
        params = dict(request.query_params)

        def answer() -> Response:
            details = service.describe(dataset_id, principal)

            def run(sql: str) -> pa.Table:
                return whole_result(service, sql, principal, channel="edr")

            q = edr.parse_query(query_type, params, details)
            axes, _ = axes_cache.of(service, details, principal)
            sql, _values = edr.plan_sql(q, details, axes)
            table = run(sql)
            if q.fmt == "CSV":
                return PlainTextResponse(edr.csv_text(q, details, table), media_type="text/csv")
            if q.fmt == "NetCDF":
                body = edr.netcdf(q, details, table)
            elif q.fmt == "GeoJSON":
                body = edr.geojson_bytes(q, details, table)
            elif q.fmt == "Parquet":
                body = edr.parquet(q, details, table)
            if q.fmt in edr.MEDIA_TYPES:
                suffix = {"NetCDF": "nc", "GeoJSON": "geojson", "Parquet": "parquet"}[q.fmt]
                return Response(body, media_type=edr.MEDIA_TYPES[q.fmt], headers={
                    "Content-Disposition": f'attachment; filename="{dataset_id}-{query_type}.{suffix}"'})
            # orjson: the values of a large cube are most of the time json.dumps takes (NaN is already None)
            body = orjson.dumps(edr.coverage_json(q, details, table), option=orjson.OPT_SERIALIZE_NUMPY)
            return Response(body, media_type="application/prs.coverage+json")

        return await anyio.to_thread.run_sync(answer)

    return router
