"""A published dataset as a Zarr v3 store: metadata documents and chunks, read through the service.

Framework-free: :mod:`dstp.http.zarr_routes` serves it at ``/zarr/<dataset>/``.

    zarr.json                     the root group: global attributes, consolidated metadata of every array
    <variable>/zarr.json          one array: shape, data type, regular chunk grid, dimension names, attributes
    <variable>/c/<i>/<j>/…        one chunk: little-endian bytes, C order, full chunk size (edges padded)

What ``xr.open_zarr`` decodes equals what ``xr.open_dataset`` decodes from
the files (the values :mod:`dstp.cf_encoding` gives): packed and masked
variables arrive decoded (float, missing as NaN, no packing attributes), times
as float64 numbers in the files' units on their calendar, which xarray decodes
as it does the files. An aggregation is one store whatever its files' chunking:
chunks are cut from the dataset's grid (not the files'), so ragged edges of
the files never show. Each chunk is one hyperslab query (``dstp.hyperslabs``)
run by the service, under the caller's policy, admission and audit.

Text variables (strings, char arrays) and cell bounds are not offered yet; the
dimension coordinates, auxiliary and scalar coordinates and every numeric data
variable are.
"""

from __future__ import annotations

import base64
import math
import struct
from dataclasses import dataclass
from typing import Any, Callable, Mapping

import numpy as np
import pyarrow as pa

from dstp.cf_encoding import TimeEncoding, time_encoding, to_numpy, variable_attrs, xarray_dtype
from dstp.errors import NotFoundError, QueryError
from dstp.hyperslabs import Axis, quote_name, slab_query
from dstp.metadata import ColumnInfo, DatasetDetails
from dstp.service.chunks import StoredArray

__all__ = ["CHUNK_ELEMENTS", "ZarrStore", "axis_columns"]

#: Elements a chunk holds at most (4 MiB of float32): small enough to answer fast, large enough to stream well.
CHUNK_ELEMENTS = 2**20

Run = Callable[[str], pa.Table]
#: Returns the stored bytes of chunk ``key`` of a passed-through array (None: never written, the fill value).
Raw = Callable[[str, tuple[int, ...]], "bytes | None"]
#: Attributes a passed-through array keeps as the files have them: the client decodes with them.
PACKING = ("scale_factor", "add_offset", "missing_value", "valid_min", "valid_max", "valid_range")


@dataclass(frozen=True, slots=True)
class _Array:
    info: ColumnInfo
    dims: tuple[str, ...]
    shape: tuple[int, ...]
    chunks: tuple[int, ...]
    dtype: np.dtype
    time: TimeEncoding | None
    #: The files' chunks, passed on unchanged (None: decoded values read by queries).
    stored: StoredArray | None = None

    @property
    def fill(self) -> Any:
        return np.nan if self.dtype.kind == "f" else 0


def _chunks(shape: tuple[int, ...], itemsize: int) -> tuple[int, ...]:
    """Return a chunk shape: whole trailing dimensions, leading ones cut to keep a chunk ≤ CHUNK_ELEMENTS."""
    chunks = list(shape)
    for i in range(len(chunks)):
        if math.prod(chunks) <= CHUNK_ELEMENTS:
            break
        rest = math.prod(chunks[i + 1:]) or 1
        chunks[i] = max(1, min(chunks[i], CHUNK_ELEMENTS // rest))
    while math.prod(chunks) > CHUNK_ELEMENTS:  # one trailing row is still too big: halve the largest
        j = int(np.argmax(chunks))
        chunks[j] = max(1, chunks[j] // 2)
    return tuple(max(1, c) for c in chunks)


def _data_type(dtype: np.dtype) -> str:
    return "bool" if dtype.kind == "b" else dtype.name


def axis_columns(details: DatasetDetails) -> dict[str, str]:
    """Return dimension name → the column holding its coordinate, for the dimensions that have one."""
    names = {c.name for c in details.coordinates}
    return {d.name: d.coordinate for d in details.dimensions if d.coordinate and d.coordinate in names}


class ZarrStore:
    """The Zarr v3 view of one dataset for one caller: ``run`` runs a query as that caller."""

    def __init__(self, details: DatasetDetails, axes: dict[str, Axis], coordinate_values: dict[str, pa.Array],
                 run: Run, stored: Mapping[str, StoredArray] | None = None, raw: Raw | None = None) -> None:
        """``stored``/``raw``: the data variables as the files store them (``service.chunks.layouts``) and how
        to fetch one stored chunk (``service.chunks.raw``); those that pass through are sent unchanged."""
        if details.feature_type:
            raise NotFoundError(f"{details.summary.id} holds {details.feature_type} data, whose records are a table, "
                                "not a grid: there is no Zarr store of it; query it instead")
        self.details = details
        self.axes = axes
        self.coordinate_values = coordinate_values
        self.run = run
        self.raw = raw
        stored = stored or {}
        self.order = tuple(d.name for d in details.dimensions)
        calendars = {d.coordinate: d.calendar for d in details.dimensions if d.coordinate}
        sizes = {d.name: d.size for d in details.dimensions}
        self.arrays: dict[str, _Array] = {}
        for info in (*details.coordinates, *details.attributes):
            if info.role in ("weight", "bounds") or info.name in self.arrays:
                continue
            time = time_encoding(info, calendars.get(info.name, ""))
            dtype = xarray_dtype(info, time)
            if dtype.kind not in "biuf":
                continue  # text: not offered yet (see the module's docstring)
            dims = tuple(info.dimensions)
            shape = tuple(sizes[d] for d in dims)
            passed = stored.get(info.name) if raw is not None and info.role == "data" else None
            if passed is not None and passed.passthrough and passed.dimensions == dims and passed.shape == shape:
                self.arrays[info.name] = _Array(info, dims, shape, passed.chunks, passed.dtype, None, passed)
            else:
                self.arrays[info.name] = _Array(info, dims, shape, _chunks(shape, dtype.itemsize), dtype, time)

    # -- metadata ------------------------------------------------------------------------------------

    def kind(self, name: str) -> str:
        """Return how the chunks of ``name`` are made: "stored" (the files' own bytes) or "decoded"."""
        return "stored" if self._array(name).stored is not None else "decoded"

    def array_metadata(self, name: str) -> dict[str, Any]:
        a = self._array(name)
        if a.stored is not None:
            return self._stored_metadata(a, a.stored)
        attrs = variable_attrs(a.info, a.time)
        if a.info.role in ("auxiliary", "scalar", "derived"):
            attrs.pop("coordinates", None)
        return {
            "zarr_format": 3,
            "node_type": "array",
            "shape": list(a.shape),
            "data_type": _data_type(a.dtype),
            "chunk_grid": {"name": "regular", "configuration": {"chunk_shape": list(a.chunks)}},
            "chunk_key_encoding": {"name": "default", "configuration": {"separator": "/"}},
            "fill_value": "NaN" if a.dtype.kind == "f" else (False if a.dtype.kind == "b" else 0),
            "codecs": [{"name": "bytes", "configuration": {"endian": "little"}}],
            "attributes": _json_safe(attrs),
            "dimension_names": list(a.dims),
        }

    def _stored_metadata(self, a: _Array, s: StoredArray) -> dict[str, Any]:
        """Return the metadata of a passed-through array: the files' dtype, chunks, codecs and packing.

        HDF5's deflate is a zlib stream and its shuffle numcodecs' byte shuffle, so ``numcodecs.shuffle`` then
        ``numcodecs.zlib`` decode the files' bytes; the packing attributes make the client unpack and mask
        as xarray does from the files.
        """
        attrs = variable_attrs(a.info, None)
        attrs.update({k: _plain(s.attrs[k]) for k in PACKING if k in s.attrs})
        if "_FillValue" in s.attrs:  # xarray's Zarr v3 reader takes a float's as base64 of a little-endian double
            fill = np.asarray(s.attrs["_FillValue"]).item()
            attrs["_FillValue"] = (base64.standard_b64encode(struct.pack("<d", float(fill))).decode()
                                   if s.dtype.kind == "f" else int(fill))
        codecs: list[dict[str, Any]] = [{"name": "bytes", "configuration": {"endian": "little"}}]
        for f in s.filters:
            codecs.append({"name": "numcodecs.shuffle", "configuration": {"elementsize": s.dtype.itemsize}}
                          if f == "shuffle" else {"name": "numcodecs.zlib", "configuration": {"level": 1}})
        fill = s.fill if s.fill is not None else 0
        return {
            "zarr_format": 3,
            "node_type": "array",
            "shape": list(a.shape),
            "data_type": _data_type(s.dtype),
            "chunk_grid": {"name": "regular", "configuration": {"chunk_shape": list(s.chunks)}},
            "chunk_key_encoding": {"name": "default", "configuration": {"separator": "/"}},
            "fill_value": _json_safe({"v": float(fill) if s.dtype.kind == "f" else int(fill)})["v"],
            "codecs": codecs,
            "attributes": _json_safe(attrs),
            "dimension_names": list(a.dims),
        }

    def group_metadata(self) -> dict[str, Any]:
        """Return the root ``zarr.json``: global attributes, and every array's metadata inline (consolidated)."""
        attrs = dict(self.details.global_attributes)
        # xarray makes a data variable's auxiliary coordinates coordinates again from this attribute
        aux = [a.info.name for a in self.arrays.values() if a.info.role in ("auxiliary", "scalar", "derived")]
        if aux:
            attrs["coordinates"] = " ".join(aux)
        return {
            "zarr_format": 3,
            "node_type": "group",
            "attributes": _json_safe(attrs),
            "consolidated_metadata": {
                "kind": "inline",
                "must_understand": False,
                "metadata": {name: self.array_metadata(name) for name in self.arrays},
            },
        }

    # -- chunks --------------------------------------------------------------------------------------

    def chunk(self, name: str, index: tuple[int, ...]) -> bytes | None:
        """Return chunk ``index`` of array ``name``: its values, edges padded with the fill value; a stored
        array's chunk as the file stores it (None: never written, so the array's fill value)."""
        a = self._array(name)
        if len(index) != len(a.dims):
            raise NotFoundError(f"{name} has {len(a.dims)} dimensions; a chunk key names one index per dimension "
                                f"(c/{'/'.join('0' * len(a.dims))})" if a.dims else f"{name} is a scalar: its chunk is c")
        grid = [math.ceil(n / c) if n else 0 for n, c in zip(a.shape, a.chunks)]
        if any(not 0 <= i < g for i, g in zip(index, grid)):
            raise NotFoundError(f"chunk {'/'.join(map(str, index))} of {name} is outside its chunk grid "
                                f"{'×'.join(map(str, grid))}")
        if a.stored is not None and self.raw is not None:
            return self.raw(name, index)
        key = [slice(i * c, min((i + 1) * c, n)) for i, c, n in zip(index, a.chunks, a.shape)]
        values = self._read(a, key)
        out = np.full(a.chunks, a.fill, dtype=a.dtype)
        out[tuple(slice(0, s) for s in values.shape)] = values
        return np.ascontiguousarray(out, dtype=a.dtype.newbyteorder("<")).tobytes()

    def _read(self, a: _Array, key: list[slice]) -> np.ndarray:
        name = a.info.name
        if not a.dims:
            table = self.run(f"select {quote_name(name)} from {quote_name(self.details.summary.id)} limit 1")
            return to_numpy(table.column(0), a.dtype, a.time, name).reshape(())
        if len(a.dims) == 1 and a.dims[0] in self.coordinate_values and self._is_axis(a):
            column = self.coordinate_values[a.dims[0]]
            return to_numpy(column, a.dtype, a.time, name)[key[0]]
        slab = slab_query(self.details.summary.id, [name], a.dims, key, self.axes, self.order)
        table = self.run(slab.sql)
        expected = math.prod(slab.read_shape)
        if table.num_rows != expected:
            raise QueryError(f"the server read {table.num_rows} records for a chunk of {expected} grid points of "
                             f"{name}; this dataset's records are not a full grid")
        values = to_numpy(table.column(name), a.dtype, a.time, name).reshape(slab.read_shape)[slab.keep]
        return values.transpose([slab.grid.index(d) for d in a.dims])

    def _is_axis(self, a: _Array) -> bool:
        return self.axes[a.dims[0]].column == a.info.name

    def _array(self, name: str) -> _Array:
        a = self.arrays.get(name)
        if a is None:
            raise NotFoundError(f"{self.details.summary.id} has no array {name!r} in its Zarr store; its arrays are "
                                + ", ".join(sorted(self.arrays)))
        return a


def _plain(value: Any) -> Any:
    """Return an attribute value as JSON can carry it (arrays as lists, numpy scalars as numbers)."""
    if isinstance(value, np.ndarray):
        return value.tolist() if value.size != 1 else value.reshape(()).item()
    return value.item() if isinstance(value, np.generic) else value


def _json_safe(attrs: dict[str, Any]) -> dict[str, Any]:
    """Attributes as JSON allows: NaN and infinities as Zarr's strings, numpy scalars as Python numbers."""
    out: dict[str, Any] = {}
    for k, v in attrs.items():
        if isinstance(v, np.generic):
            v = v.item()
        if isinstance(v, float) and not math.isfinite(v):
            v = "NaN" if math.isnan(v) else ("Infinity" if v > 0 else "-Infinity")
        out[k] = v
    return out
