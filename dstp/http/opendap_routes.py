"""The OPeNDAP door: ``/opendap/{dataset}`` answers DAP2 (``.das``, ``.dds``, ``.dods``, ``.ver``) and DAP4
(``.dmr``, ``.dmr.xml``, ``.dap``).

It only translates. A request's dataset is described by the service with the
caller's principal (so a dataset the caller may not read is the same 404 as an
unknown one), its constraint expression becomes one index hyperslab per
variable (:mod:`dstp.opendap.constraint`), and each hyperslab is read with a
dstp query run by the service (:func:`dstp.hyperslabs.slab_query`: coordinate
predicates and ``stride()``), so admission, limits and the audit (channel
``opendap``) are the service's. The documents and encodings are
:mod:`dstp.opendap`'s. Errors are DAP2 ``Error {…};`` objects on the DAP2
suffixes and DAP4 ``<Error>`` documents on the DAP4 ones, with the dstp status.
"""

from __future__ import annotations

import math
import threading
from typing import Any, Callable

import anyio
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from fastapi import APIRouter, Request
from fastapi.responses import HTMLResponse, Response

from dstp.auth import Principal
from dstp.errors import BadRequestError, DstpError, LimitExceededError, RouteNotFoundError
from dstp.erddap.dataset import ErddapDataset
from dstp.http.error_responses import incident
from dstp.http.facade_routes import whole_result
from dstp.hyperslabs import kept_rows, quote_name, slab_query
from dstp.metadata import DatasetDetails
from dstp.opendap import dap2, dap4
from dstp.opendap.constraint import Projection, filter_sql, parse_dap2, parse_dap4, resolve, whole
from dstp.opendap.model import DapDataset, axis_numbers, build_dataset, time_numbers
from dstp.service import DstpService

__all__ = ["opendap_router", "MAX_ANSWER_BYTES", "DAP2_SUFFIXES", "DAP4_SUFFIXES"]

#: Largest answer (bytes of values) the door assembles before sending it.
MAX_ANSWER_BYTES = 512 * 2**20
DAP2_SUFFIXES = (".das", ".dds", ".dods", ".ver")
DAP4_SUFFIXES = (".dmr.xml", ".dmr", ".dap")
_SERVER = "dstp/opendap"
_HEADERS = {"XDODS-Server": "dods/3.2", "XOPeNDAP-Server": _SERVER, "XDAP": "2.0"}

Ranges = tuple[tuple[int, int, int], ...]


def _axis_values(service: DstpService, details: DatasetDetails, principal: Principal) -> dict[str, np.ndarray]:
    """Return each dimension's coordinate values as the server compares them (numbers, datetime64[us], ISO text),
    from the catalog's memory (``DstpService.axis_values``: no query, no admission slot)."""
    values: dict[str, np.ndarray] = {}
    arrays = service.axes(details.summary.id, [d.name for d in details.dimensions if d.coordinate], principal)
    for d in details.dimensions:
        if not d.coordinate:
            continue
        column = np.asarray(arrays[d.name].to_numpy(zero_copy_only=False))
        if len(column) == d.size:
            values[d.name] = column.astype("datetime64[us]") if column.dtype.kind == "M" else column
    return values


class _Door:
    """The OPeNDAP face of one service: the virtual file of a dataset, and its hyperslabs read as arrays."""

    def __init__(self, service: DstpService) -> None:
        self.service = service
        self._lock = threading.Lock()
        #: Axis values per (dataset, version): a file published later makes a new version, never a stale axis.
        self._axes: dict[tuple[str, int], dict[str, np.ndarray]] = {}

    def dataset(self, dataset_id: str, principal: Principal) -> DapDataset:
        details = self.service.describe(dataset_id, principal)  # the access check: 404 for whoever may not read
        key = (dataset_id, details.summary.version)
        with self._lock:
            axes = self._axes.get(key)
        if axes is None:
            axes = _axis_values(self.service, details, principal)
            with self._lock:
                if len(self._axes) >= 256:
                    self._axes.clear()
                self._axes[key] = axes
        return build_dataset(details, axes)

    def read(self, ds: DapDataset, name: str, ranges: Ranges, principal: Principal, mask: str = "") -> np.ndarray:
        """Return a variable's values at ``ranges`` in its served type, shaped as the ranges.

        ``mask``: an SQL condition (a DAP4 filter); where it fails the value is read as missing.
        """
        v = ds.variables[name]
        shape = tuple(len(range(a, c + 1, b)) for a, b, c in ranges)
        if v.source == "constant":
            return np.asarray(v.constant, dtype=v.dtype)
        if v.source == "axis":
            (a, b, c), = ranges
            return axis_numbers(ds, v.dims[0], slice(a, c + 1, b))
        view: ErddapDataset = ds.view
        order = [d.name for d in view.details.dimensions]
        if not v.dims:
            column = self._table(f"select {quote_name(name)} from {quote_name(ds.id)} limit 1", principal).column(0)
            return self._values(ds, name, column).reshape(())
        infos = {d.name: d for d in view.details.dimensions}
        key = [slice(a, c + 1, b) for a, b, c in ranges]
        slab = slab_query(ds.id, [name], v.dims, key, {d: view.axis(infos[d]) for d in v.dims}, order)
        sql = slab.sql
        if mask:
            column = quote_name(name)
            head = f"select {column} from "
            assert sql.startswith(head), sql
            sql = f"select case when {mask} then {column} end as {column} from " + sql[len(head):]
        table = self._table(sql, principal)
        keep = kept_rows(slab)
        column = table.column(0) if keep is None else table.column(0).take(pa.array(keep))
        grid_shape = tuple(len(range(n)[k]) for n, k in zip(slab.read_shape, slab.keep))
        values = self._values(ds, name, column).reshape(grid_shape)
        if slab.grid != v.dims:
            values = values.transpose([slab.grid.index(d) for d in v.dims])
        assert values.shape == shape, (values.shape, shape)
        return values

    def _values(self, ds: DapDataset, name: str, column: pa.ChunkedArray) -> np.ndarray:
        v = ds.variables[name]
        if v.time is not None:
            if pa.types.is_timestamp(column.type):
                stamps = pc.cast(column, pa.timestamp("us", column.type.tz), safe=False)
                raw: Any = np.asarray(stamps.to_numpy(zero_copy_only=False)).astype("datetime64[us]")
            else:
                raw = np.asarray(column.to_pylist(), dtype=object)
            return time_numbers(raw, *v.time)
        if v.dtype.kind == "O":
            return np.asarray(["" if s is None else s for s in column.to_pylist()], dtype=object)
        if column.null_count:
            if v.dtype.kind != "f":
                raise BadRequestError(f"{name} has missing values and an integer type")  # model promotes these
            column = pc.fill_null(pc.cast(column, pa.float64()), float("nan"))
        return np.asarray(column.to_numpy(zero_copy_only=False)).astype(v.dtype, copy=False)

    def _table(self, sql: str, principal: Principal) -> pa.Table:
        return whole_result(self.service, sql, principal, channel="opendap")


def _check_size(ds: DapDataset, parts: list[tuple[str, Ranges]]) -> None:
    total = sum(math.prod(len(range(a, c + 1, b)) for a, b, c in r) * (ds.variables[n].dtype.itemsize or 8)
                for n, r in parts)
    if total > MAX_ANSWER_BYTES:
        raise LimitExceededError(f"the answer would hold {total / 2**20:.0f} MiB of values, more than the "
                                 f"{MAX_ANSWER_BYTES // 2**20} MiB one OPeNDAP answer may: ask for a smaller "
                                 "hyperslab (fewer variables, narrower ranges or a stride)")


def dap2_answer(ds: DapDataset, projections: list[Projection]) -> dap2.Answer:
    """Return the DAP2 answer of projections: Grids whole or sliced, Structures of Grid members, arrays."""
    if not projections:
        projections = [Projection(n) for n in ds.variables]
    items: list[dap2.AnswerItem] = []
    for p in projections:
        target, ranges = resolve(ds, p)
        if p.member and not f"{p.name}.{p.member}" in ds.variables:
            existing = next((i for i in items if i.kind == "structure" and i.name == p.name), None)
            if existing is not None:
                if target not in {n for n, _ in existing.parts}:
                    items[items.index(existing)] = dap2.AnswerItem("structure", p.name, (*existing.parts,
                                                                                          (target, ranges)))
                continue
            items.append(dap2.AnswerItem("structure", p.name, ((target, ranges),)))
            continue
        if any(i.name == target for i in items):
            continue
        if ds.is_grid(target):
            dims = ds.variables[target].dims
            maps = tuple((d, (r,)) for d, r in zip(dims, ranges))
            items.append(dap2.AnswerItem("grid", target, ((target, ranges), *maps)))
        else:
            items.append(dap2.AnswerItem("array", target, ((target, ranges),)))
    # libdap sends the dataset's variables in the DDS's order, whatever the projection's; netCDF-C relies on it
    order = list(ds.variables)
    return sorted(items, key=lambda i: order.index(i.name) if i.name in order else len(order))


def dap4_selection(ds: DapDataset, projections: list[Projection]) -> tuple[list[tuple[str, Ranges]], dict[str, str]]:
    """Return the variables a DAP4 expression selects, in DMR order, and the SQL condition of each filter."""
    if not projections:
        return dap4.order(ds, [(n, whole(ds, n)) for n in ds.variables]), {}
    out: dict[str, Ranges] = {}
    masks: dict[str, str] = {}
    for p in projections:
        target, ranges = resolve(ds, p, dap4=True)
        out.setdefault(target, ranges)
        if p.filter:
            masks[target] = filter_sql(ds, target, p.filter)
    return dap4.order(ds, list(out.items())), masks


def _split(name: str) -> tuple[str, str]:
    for suffix in (*DAP4_SUFFIXES, *DAP2_SUFFIXES):
        if name.endswith(suffix) and len(name) > len(suffix):
            return name[: -len(suffix)], suffix
    raise RouteNotFoundError(f"{name!r} names no OPeNDAP response: add one of "
                             f"{', '.join(DAP2_SUFFIXES + DAP4_SUFFIXES)} to the dataset id, e.g. /opendap/{name}.dds")


def _dap4_query(request: Request) -> tuple[str, bool]:
    ce = request.query_params.get("dap4.ce", "")
    # On unless refused: netCDF-C 4.9 asks nothing and expects them (the DAP4 draft's rule); pydap says which
    checksum = request.query_params.get("dap4.checksum", "true").strip().lower() != "false"
    return ce, checksum


def opendap_router(service: DstpService, principal_of: Callable[[Request], Principal]) -> APIRouter:
    """Return the router of ``/opendap``."""
    door = _Door(service)
    router = APIRouter()

    def answer(request: Request, name: str) -> Response:
        dataset_id, suffix = _split(name)
        principal = principal_of(request)
        if suffix == ".ver":
            ds = door.dataset(dataset_id, principal)
            return Response(f"Core version: DAP/{dap2.DAP2_VERSION}\nServer version: {_SERVER}\n",
                            media_type="text/plain", headers={**_HEADERS, "Content-Description": "dods-version"})
        ds = door.dataset(dataset_id, principal)
        if suffix == ".das":
            return Response(dap2.das(ds), media_type="text/plain; charset=UTF-8",
                            headers={**_HEADERS, "Content-Description": "dods-das"})
        if suffix in (".dds", ".dods"):
            projections = parse_dap2(request.url.query)
            items = dap2_answer(ds, projections)
            if suffix == ".dds":
                return Response(dap2.dds(ds, items), media_type="text/plain; charset=UTF-8",
                                headers={**_HEADERS, "Content-Description": "dods-dds"})
            parts = [p for item in items for p in item.parts]
            _check_size(ds, parts)
            arrays = {(n, r): door.read(ds, n, r, principal) for n, r in parts}
            body = b"".join(dap2.dods(ds, items, lambda n, r: arrays[(n, r)]))
            return Response(body, media_type="application/octet-stream",
                            headers={**_HEADERS, "Content-Description": "dods-data"})
        ce, checksum = _dap4_query(request)
        selection, masks = dap4_selection(ds, parse_dap4(ce))
        if suffix in (".dmr", ".dmr.xml"):
            return Response(dap4.dmr(ds, selection), media_type="application/vnd.opendap.dap4.dataset-metadata+xml",
                            headers={"XDAP": "4.0", "XOPeNDAP-Server": _SERVER})
        _check_size(ds, selection)
        payloads = [dap4.encode(door.read(ds, n, r, principal, masks.get(n, "")), ds.variables[n].dtype)
                    for n, r in selection]
        sums = {n: dap4.crc32(p) for (n, _), p in zip(selection, payloads)} if checksum else None
        body = b"".join(dap4.dap_chunks(dap4.dmr(ds, selection, sums), payloads, sums, [n for n, _ in selection]))
        return Response(body, media_type="application/vnd.opendap.dap4.data",
                        headers={"XDAP": "4.0", "XOPeNDAP-Server": _SERVER})

    def error(exc: BaseException, name: str) -> Response:
        err = exc if isinstance(exc, DstpError) else incident(exc)
        if name.endswith(DAP4_SUFFIXES):
            return Response(dap4.error_document(err.http_status, err.message), status_code=err.http_status,
                            media_type="application/vnd.opendap.dap4.errors+xml",
                            headers={"XDAP": "4.0", "XOPeNDAP-Server": _SERVER})
        return Response(dap2.error_body(err.http_status, err.message), status_code=err.http_status,
                        media_type="text/plain; charset=UTF-8", headers={**_HEADERS, "Content-Description": "dods-error"})

    @router.get("/opendap/", include_in_schema=False)
    @router.get("/opendap", response_class=HTMLResponse, tags=["OPeNDAP"],
                summary="OPeNDAP: the datasets, each with its DAP2 and DAP4 URLs")
    async def listing(request: Request) -> Response:
        def page() -> Response:
            base = str(request.base_url).rstrip("/") + "/opendap"
            rows = "".join(f'<li>{s.id}: <a href="{base}/{s.id}.dds">.dds</a> <a href="{base}/{s.id}.das">.das</a> '
                           f'<a href="{base}/{s.id}.dmr">.dmr</a> — ncdump -h {base}/{s.id}</li>'
                           for s in service.datasets(principal_of(request)))
            return HTMLResponse(f"<!DOCTYPE html><html><head><meta charset='UTF-8'><title>dstp OPeNDAP</title>"
                                f"</head><body><h1>OPeNDAP (DAP2 and DAP4)</h1><ul>{rows}</ul>"
                                "<p>See docs/opendap.md.</p></body></html>")
        return await anyio.to_thread.run_sync(page)

    @router.get("/opendap/{name:path}", tags=["OPeNDAP"], response_class=Response,
                summary="OPeNDAP: ID.das, ID.dds, ID.dods?tas[0:1:2][0:4][3] (DAP2); ID.dmr, ID.dap?dap4.ce=/tas[0:2] "
                        "(DAP4)", description="docs/opendap.md lists what each response holds.")
    async def opendap(request: Request, name: str) -> Response:
        try:
            return await anyio.to_thread.run_sync(lambda: answer(request, name))
        except Exception as exc:  # noqa: BLE001 - DAP clients read DAP's error shape
            return error(exc, name)

    return router
