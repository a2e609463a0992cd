"""The OGC API – EDR door: ``/edr`` landing, conformance, collections, their queries and station items.

The queries and their answers are :mod:`dstp.edr`'s; this router only
translates: the dataset as the caller may see it (``describe``: hidden is
not found), one query the service runs for that caller, the answer as
CoverageJSON (``application/prs.coverage+json``), CSV, or netCDF, GeoJSON,
Parquet (:mod:`dstp.edr`). Errors are the
HTTP API's JSON ``{"error": …}`` with their status (400 for a bad query,
404 unknown collection, 413 over the size limit with the figure).
"""

from __future__ import annotations

import csv
import io
from typing import Callable

import anyio
import orjson
import pyarrow as pa
from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse, PlainTextResponse, Response

from dstp import edr
from dstp.auth import Principal
from dstp.edr import items as edr_items
from dstp.errors import NotFoundError, QueryError
from dstp.hyperslabs import Axis
from dstp.metadata import DatasetDetails
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
            if edr.queries_of(d):  # a dataset that answers no query is not an EDR collection
                found.append(edr.collection(d, base(request)))
        return JSONResponse({"links": [{"href": f"{base(request)}/edr/collections", "rel": "self",
                                        "type": "application/json"}], "collections": found})

    @router.get("/edr/collections/{dataset_id}", tags=["EDR"], summary="One dataset as an EDR collection")
    def one(request: Request, dataset_id: str) -> JSONResponse:
        details = service.describe(dataset_id, principal_of(request))
        if not edr.queries_of(details):
            raise NotFoundError(edr.not_offered(details, "items" if details.feature_type else "position"))
        return JSONResponse(edr.collection(details, base(request)))

    def stations(dataset_id: str, principal: Principal) -> tuple[DatasetDetails, edr_items.StationColumns]:
        details = service.describe(dataset_id, principal)
        columns = edr_items.station_columns(details)
        if columns is None or "items" not in edr.queries_of(details):
            raise QueryError(edr.not_offered(details, "items"))
        return details, columns

    @router.get("/edr/collections/{dataset_id}/items", tags=["EDR"],
                summary="The stations of a station dataset as GeoJSON (bbox=, datetime=, limit=, offset=)",
                openapi_extra={"parameters": edr.declared_parameters(("items",))})
    async def items(request: Request, dataset_id: str) -> Response:
        principal = principal_of(request)
        pairs = request.query_params.multi_items()

        def answer() -> Response:
            details, columns = stations(dataset_id, principal)
            params = edr.query_parameters("items", pairs)
            if params.get("f", "json").lower() not in ("json", "geojson", "application/geo+json", "application/json"):
                raise QueryError(f"f={params['f']!r} is not offered for items: they are GeoJSON (f=GeoJSON)")
            start, end, *_ = edr.common_parameters({"datetime": params.get("datetime", "")}, details)
            q = edr_items.parse_items(params, start, end)
            table = whole_result(service, edr_items.stations_sql(details, columns, q), principal, channel="edr")
            page = edr_items.feature_collection(table, q, details, f"{base(request)}/edr/collections/{dataset_id}",
                                                params)
            return Response(orjson.dumps(page), media_type="application/geo+json")

        return await anyio.to_thread.run_sync(answer)

    @router.get("/edr/collections/{dataset_id}/items/{item_id}", tags=["EDR"],
                summary="One station's observations (parameter-name=, datetime=, f=CoverageJSON|CSV|GeoJSON)",
                openapi_extra={"parameters": edr.declared_parameters(("item",))})
    async def item(request: Request, dataset_id: str, item_id: str) -> Response:
        principal = principal_of(request)
        pairs = request.query_params.multi_items()

        def answer() -> Response:
            details, columns = stations(dataset_id, principal)
            params = edr.query_parameters("item", pairs)
            start, end, _, _, parameters, fmt = edr.common_parameters({**params, "z": ""}, details)
            if fmt not in edr.ITEM_FORMATS:
                raise QueryError(f"f={params.get('f')!r} is not offered for an item; choose one of "
                                 f"{', '.join(edr.ITEM_FORMATS)}")
            q = edr_items.ItemsQuery(None, 1, 0, start, end)
            found = [r for r in whole_result(service, edr_items.stations_sql(details, columns, q), principal,
                                             channel="edr").to_pylist() if str(r["id"]) == item_id]
            if not found:
                raise NotFoundError(f"{item_id!r} is not a station of {dataset_id}"
                                    + (" with observations then" if start or end else "")
                                    + f"; its stations are listed at /edr/collections/{dataset_id}/items")
            values = found[0]["observations"] * len(parameters)
            edr.refuse_over_limit(values, f"station {item_id!r} would return {values:,} values "
                                  f"({found[0]['observations']:,} observations × {len(parameters)} parameters)",
                                  "a shorter datetime= or fewer parameters")
            table = whole_result(service, edr_items.item_sql(details, columns, found[0]["id"], parameters, start,
                                                             end), principal, channel="edr")
            time = columns.time.name if columns.time is not None else None
            if fmt == "CSV":
                out = io.StringIO()
                writer = csv.writer(out)
                writer.writerow(table.column_names)
                for row in table.to_pylist():
                    writer.writerow(["" if v is None else edr.iso(v) if hasattr(v, "isoformat") else v
                                     for v in row.values()])
                return PlainTextResponse(out.getvalue(), media_type="text/csv")
            if fmt == "GeoJSON":
                features = [{"type": "Feature", "geometry": {"type": "Point", "coordinates": [
                    ((float(r.pop(columns.lon)) + 180.0) % 360.0) - 180.0, float(r.pop(columns.lat))]},
                    "properties": {"id": item_id, **{k: edr.iso(v) if hasattr(v, "isoformat") else v
                                                      for k, v in r.items()}}} for r in table.to_pylist()]
                return Response(orjson.dumps({"type": "FeatureCollection", "features": features,
                                              "numberReturned": len(features)}, option=orjson.OPT_SERIALIZE_NUMPY),
                                media_type="application/geo+json")
            body = edr.station_coverage(details, time, columns.lat, columns.lon, parameters, table)
            return Response(orjson.dumps(body, option=orjson.OPT_SERIALIZE_NUMPY),
                            media_type="application/prs.coverage+json")

        return await anyio.to_thread.run_sync(answer)

    @router.get("/edr/collections/{dataset_id}/{query_type}", tags=["EDR"],
                summary="position (coords=POINT(lon lat)), radius, area (coords=POLYGON((…))), cube (bbox=w,s,e,n), "
                        "trajectory or corridor (coords=LINESTRING(…), corridor-width=, width-units=) "
                        "with datetime=, z=, parameter-name=, f=CoverageJSON|CSV|netCDF|GeoJSON|Parquet; any other "
                        "query parameter is refused",
                openapi_extra={"parameters": edr.declared_parameters(edr.QUERY_TYPES)})
    async def query(request: Request, dataset_id: str, query_type: str) -> Response:
        principal = principal_of(request)
        pairs = request.query_params.multi_items()

        def answer() -> Response:
            details = service.describe(dataset_id, principal)

            def run(sql: str) -> pa.Table:
                return whole_result(service, sql, principal, channel="edr")

            if query_type not in edr.QUERY_TYPES:
                raise QueryError(f"query type {query_type!r} is not offered; this server answers "
                                 f"{', '.join(edr.QUERY_TYPES)} and items")
            if query_type not in edr.queries_of(details):
                raise QueryError(edr.not_offered(details, query_type))
            params = edr.query_parameters(query_type, pairs)
            q = edr.parse_query(query_type, params, details)
            axes, _ = axes_cache.of(service, details, principal)
            q = edr.resolve(q, details, axes)
            groups = edr.dimension_groups(q, details)
            if len(groups) > 1:  # parameters on different dimensions: each set answered on its own axes
                return mixed(q, [edr.group_query(q, details, g) for g in groups], details, axes, run)
            q = edr.group_query(q, details, groups[0])  # no z= or heights on parameters without levels
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

    def mixed(q: edr.EdrQuery, queries: list[edr.EdrQuery], details: DatasetDetails, axes: dict[str, Axis],
              run: Callable[[str], pa.Table]) -> Response:
        planned = [edr.plan_sql(one, details, axes) for one in queries]  # each refuses past the limit alone
        values = sum(v for _, v in planned)
        edr.refuse_over_limit(values, f"this {q.kind} query would return {values:,} values (" + " + ".join(
            f"{v:,} of {', '.join(one.parameters)}" for one, (_, v) in zip(queries, planned)) + ")",
                              "a smaller area, fewer times or levels, or fewer parameters")
        parts = [(one, run(sql)) for one, (sql, _) in zip(queries, planned)]
        if q.fmt == "CSV":
            return PlainTextResponse(edr.mixed_csv_text(parts, details), media_type="text/csv")
        if q.fmt in edr.MEDIA_TYPES:
            body = {"NetCDF": edr.mixed_netcdf, "GeoJSON": edr.mixed_geojson_bytes,
                    "Parquet": edr.mixed_parquet}[q.fmt](parts, details)
            suffix = {"NetCDF": "nc", "GeoJSON": "geojson", "Parquet": "parquet"}[q.fmt]
            return Response(body, media_type=edr.MEDIA_TYPES[q.fmt], headers={
                "Content-Disposition": f'attachment; filename="{details.summary.id}-{q.kind}.{suffix}"'})
        return Response(orjson.dumps(edr.mixed_coverage_json(parts, details), option=orjson.OPT_SERIALIZE_NUMPY),
                        media_type="application/prs.coverage+json")

    return router
