"""The Zarr v3 store door: ``/zarr/<dataset>/…`` for xr.open_zarr, zarr-python, zarrita.js, GDAL.

The store's documents and chunks are made by :mod:`dstp.zarr_v3`; this
router only translates: it asks the service for the dataset as the caller
may see it (``describe``: a hidden dataset is not found, 404, like any
unknown one), and every decoded chunk is one query the service runs for that
caller (policy, admission, audit); a chunk passed through unchanged from a
netCDF-4 file comes from ``service.chunks.raw``, under the same policy,
admission and audit (``X-Dstp-Chunk: stored`` or ``decoded`` says which). A key the store does not hold is a 404, which
Zarr readers take as "not there"; errors are JSON ``{"error": …}`` as on the
rest of the HTTP API.

Coordinate values (what a hyperslab's predicates are built from) come from
the catalog's memory (``DstpService.axis_values``), kept per dataset version.
"""

from __future__ import annotations

from typing import Callable

import anyio
import pyarrow as pa
from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse, Response

from dstp.auth import Principal
from dstp.errors import NotFoundError
from dstp.http.axis_cache import AxisCache
from dstp.http.facade_routes import whole_result
from dstp.service import DstpService
from dstp.zarr_v3 import ZarrStore

__all__ = ["zarr_router"]

def zarr_router(service: DstpService, principal_of: Callable[[Request], Principal]) -> APIRouter:
    """Return the router of ``/zarr/<dataset>/…``."""
    router = APIRouter()
    axes_cache = AxisCache()

    def store(dataset_id: str, principal: Principal) -> ZarrStore:
        details = service.describe(dataset_id, principal)

        def run(sql: str) -> pa.Table:
            return whole_result(service, sql, principal, channel="zarr")

        def raw(name: str, key: tuple[int, ...]) -> bytes | None:
            return service.chunks.raw(dataset_id, name, key, principal, channel="zarr")

        axes, values = axes_cache.of(service, details, principal)
        return ZarrStore(details, axes, values, run, service.chunks.layouts(dataset_id, principal), raw)

    async def in_thread(work: Callable[[], Response]) -> Response:
        return await anyio.to_thread.run_sync(work)

    @router.get("/zarr/{dataset_id}/zarr.json", tags=["Zarr"],
                summary="A dataset as a Zarr v3 group: attributes and every array's metadata (consolidated)")
    async def group(request: Request, dataset_id: str) -> Response:
        principal = principal_of(request)
        return await in_thread(lambda: JSONResponse(store(dataset_id, principal).group_metadata()))

    @router.get("/zarr/{dataset_id}/{array}/zarr.json", tags=["Zarr"], summary="One array's Zarr v3 metadata")
    async def array(request: Request, dataset_id: str, array: str) -> Response:
        principal = principal_of(request)
        return await in_thread(lambda: JSONResponse(store(dataset_id, principal).array_metadata(array)))

    @router.get("/zarr/{dataset_id}/{array}/c", tags=["Zarr"], include_in_schema=False)
    @router.get("/zarr/{dataset_id}/{array}/c/{index:path}", tags=["Zarr"],
                summary="One chunk: little-endian values in C order, e.g. /zarr/ccm3/temperature/c/0/0/0/0")
    async def chunk(request: Request, dataset_id: str, array: str, index: str = "") -> Response:
        principal = principal_of(request)
        try:
            key = tuple(int(p) for p in index.split("/")) if index else ()
        except ValueError:
            raise NotFoundError(f"chunk key c/{index} is not a list of chunk indices (c/0/1/2)") from None

        def answer() -> Response:
            zarr = store(dataset_id, principal)
            data = zarr.chunk(array, key)
            if data is None:  # never written: Zarr readers take a missing key as the fill value
                raise NotFoundError(f"chunk {'/'.join(map(str, key))} of {dataset_id}/{array} was never written "
                                    "to its file: its values are the array's fill_value")
            return Response(data, media_type="application/octet-stream", headers={"X-Dstp-Chunk": zarr.kind(array)})

        return await in_thread(answer)

    @router.get("/zarr/{dataset_id}/{rest:path}", include_in_schema=False)
    async def other(request: Request, dataset_id: str, rest: str) -> Response:
        principal = principal_of(request)
        service.describe(dataset_id, principal)  # an unknown or hidden dataset is not found, like any other
        raise NotFoundError(f"the Zarr store of {dataset_id} holds no key {rest!r}: its keys are zarr.json, "
                            "<array>/zarr.json and <array>/c/<i>/<j>/…")

    return router
