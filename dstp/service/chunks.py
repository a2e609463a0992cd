"""Stored chunks: a dataset's variables as the files store them, for doors that pass chunks through (Zarr).

    chunks.layouts(dataset_id, principal)            -> {column: StoredArray}: dtype, chunk grid, filters,
                                                        raw attributes, and whether chunks pass through
    chunks.raw(dataset_id, column, key, principal)   -> the stored bytes of one chunk (None: never written)

A variable's chunks pass through unchanged when every file of the dataset
stores it the same way: chunked with only HDF5's shuffle and deflate (the
pipeline :mod:`dstp.catalog.chunks` decodes itself), one dtype, one chunk
shape, one packing (``scale_factor``, ``add_offset``, fill values) and the
aggregation axis cut at chunk boundaries (each file starts on a chunk
boundary; only the last file may end inside a chunk). Then chunk ``key`` of
the aggregated array is one chunk of one file, and its bytes are the file's.
A chunk written with a filter skipped (HDF5's filter mask) is decoded and
encoded again with the full pipeline, so every chunk of an array has its codecs.

``passthrough`` is False, with the reason, when the files differ (per-file
packing or epochs, ragged chunks across an aggregation) or a float32 packing
that JSON attributes cannot carry (a client would unpack in float64, not as
xarray does from the file): the door then serves decoded values it reads
with queries. Each :meth:`raw` takes an admission slot and writes an audit
line, as a query does; a dataset the principal may not read is not found.
"""

from __future__ import annotations

import threading
import zlib
from dataclasses import dataclass
from typing import Any, Mapping

import numpy as np

from dstp._chunk_index import DEFLATE, SHUFFLE
from dstp.auth import ANONYMOUS, Principal
from dstp.catalog.cf import Decoding
from dstp.catalog.chunks import ChunkLayout, decode_chunk
from dstp.catalog.columns import AttributeColumn
from dstp.catalog.dataset import GriddedDataset
from dstp.catalog.registry import Catalog
from dstp.errors import DataFileError, NotFoundError
from dstp.service.access import Access
from dstp.service.admission import Admission
from dstp.service.audit import AuditLog

__all__ = ["StoredArray", "StoredChunks"]

#: Deflate level of a chunk encoded again (its filter was skipped when written).
REENCODE_LEVEL = 4


@dataclass(frozen=True, slots=True)
class StoredArray:
    """One data variable as its files store it."""

    column: str
    variable: str
    dimensions: tuple[str, ...]
    shape: tuple[int, ...]
    #: The raw (stored) numpy type, little-endian.
    dtype: np.dtype
    #: The stored chunk shape (the file's), or () when the variable is not chunked alike everywhere.
    chunks: tuple[int, ...]
    #: Filters in write order: "shuffle", "deflate".
    filters: tuple[str, ...]
    #: The variable's attributes in the first file, raw (packing and fill values as stored).
    attrs: Mapping[str, Any]
    #: The raw fill value (``_FillValue`` or netCDF's default for the type) that unwritten chunks hold.
    fill: Any
    passthrough: bool
    #: Why the chunks do not pass through ("" when they do).
    reason: str


class StoredChunks:
    """The stored chunks of one catalog's datasets."""

    def __init__(self, catalog: Catalog, access: Access, admission: Admission, audit: AuditLog) -> None:
        self.catalog = catalog
        self.access = access
        self.admission = admission
        self.audit = audit
        self._lock = threading.Lock()
        self._layouts: dict[tuple[str, str], dict[str, StoredArray]] = {}

    def layouts(self, dataset_id: str, principal: Principal = ANONYMOUS) -> dict[str, StoredArray]:
        """Return the data variables of a gridded dataset as stored (DatasetNotFoundError if not readable)."""
        self.access.require(principal, dataset_id)
        ds = self.catalog.get(dataset_id)
        key = (dataset_id, ds.identity)
        with self._lock:
            known = self._layouts.get(key)
        if known is not None:
            return known
        found = {name: _stored(ds, col) for name, col in ds.attributes.items() if _servable(ds, col)}
        with self._lock:
            self._layouts[key] = found
        return found

    def raw(self, dataset_id: str, column: str, key: tuple[int, ...], principal: Principal = ANONYMOUS,
            *, channel: str = "zarr") -> bytes | None:
        """Return chunk ``key`` (chunk indices) of a passed-through variable as stored, None if never written."""
        array = self.layouts(dataset_id, principal).get(column)
        if array is None or not array.passthrough:
            raise NotFoundError(f"{dataset_id}/{column} has no stored chunks to pass through")
        if len(key) != len(array.shape) or any(not 0 <= k < -(-n // c) for k, n, c in
                                               zip(key, array.shape, array.chunks)):
            raise NotFoundError(f"{dataset_id}/{column} has no chunk {'.'.join(map(str, key))} "
                                f"(its chunk grid is {[-(-n // c) for n, c in zip(array.shape, array.chunks)]})")
        ds = self.catalog.get(dataset_id)
        slot = self.admission.acquire(principal.share_key, "transfers", f"chunk of {dataset_id}/{column}")
        started, sent, outcome = slot.started, 0, "error"
        try:
            data = self._read(ds, array, key)
            sent, outcome = (len(data) if data is not None else 0), "ok"
            return data
        finally:
            slot.release(sent)
            self.audit.record("chunk", f"{dataset_id}/{column}/{'/'.join(map(str, key))}", principal=principal.name,
                              credential=principal.key, channel=channel, datasets=(dataset_id,), outcome=outcome,
                              sent=sent, seconds=self.admission.clock() - started)

    def _read(self, ds: GriddedDataset, array: StoredArray, key: tuple[int, ...]) -> bytes | None:
        reader = ds.handles.chunks
        assert reader is not None  # a passthrough layout was listed by it
        offset = [k * c for k, c in zip(key, array.chunks)]
        k = 0
        agg = ds.descriptor.aggregate
        if agg in array.dimensions and len(ds.files) > 1:
            axis = array.dimensions.index(agg)
            k = next(i for i, f in enumerate(ds.files) if f.start <= offset[axis] < f.start + f.count)
            offset[axis] -= ds.files[k].start
        path, version = ds.files[k].path, ds.files[k].identity
        layout = reader.layout(path, array.variable, version)
        if layout is None:
            raise NotFoundError(f"{path.name}: {array.variable!r} is no longer stored in chunks")
        try:
            stored = reader.raw(path, array.variable, tuple(offset), version)
        except OSError as exc:
            raise DataFileError(f"cannot read a chunk of {array.variable!r} from {path.name}: {exc}") from exc
        if stored is None:
            return None
        data, mask = stored
        return data if mask == 0 else _encode(decode_chunk(data, layout, mask), layout)


def _servable(ds: GriddedDataset, col: AttributeColumn) -> bool:
    """Return whether a column is a data variable the store can show as an array of its own."""
    return (col.role == "data" and col.values is None and not col.fixed and not col.variable_dims
            and ds.layout is None and bool(col.dimensions) and all(d is not None for d in col.file_decodings)
            and not col.decoding.text and col.decoding.time_units is None and ds.part_of(col) == 0
            and all(f.part == 0 for f in ds.files))


def _encode(values: np.ndarray, layout: ChunkLayout) -> bytes:
    """Return a decoded chunk encoded with the layout's whole pipeline (shuffle, then deflate)."""
    data = np.ascontiguousarray(values, layout.dtype).tobytes()
    for f in layout.filters:
        if f == SHUFFLE and layout.dtype.itemsize > 1:
            data = np.frombuffer(data, np.uint8).reshape(-1, layout.dtype.itemsize).T.tobytes()
        elif f == DEFLATE:
            data = zlib.compress(data, REENCODE_LEVEL)
    return data


def _packing(dec: Decoding) -> str:
    """Return a file's packing of a variable as text (equal text: equal unpacking)."""
    def typed(value: Any) -> str:
        return "" if value is None else f"{np.asarray(value).dtype.str}:{np.asarray(value).tolist()!r}"
    return "|".join([typed(dec.scale_factor), typed(dec.add_offset), str(dec.view),
                     *(typed(v) for v in dec.fill_values)])


def _stored(ds: GriddedDataset, col: AttributeColumn) -> StoredArray:
    """Return how ``col`` is stored, and whether its chunks can pass through (else why not)."""
    variable, dims = col.spec.variable, col.dimensions
    shape = tuple(ds.dimensions[d].size for d in dims)
    attrs = dict(col.attrs)
    dec = col.decoding
    fill = next(iter(dec.fill_values), None)
    reader = ds.handles.chunks

    def refuse(reason: str, dtype: np.dtype | None = None) -> StoredArray:
        return StoredArray(col.name, variable, dims, shape, np.dtype(dtype or "f8"), (), (), attrs, fill, False,
                           reason)

    if reader is None:
        return refuse("direct chunk reads are off (direct_chunks = false)")
    layouts: list[ChunkLayout] = []
    for f in ds.files:
        if not f.format.startswith("NETCDF4"):
            return refuse(f"{f.path.name} is {f.format}, not netCDF-4: it has no HDF5 chunks to pass on")
        layout = reader.layout(f.path, variable, f.identity)
        if layout is None:
            return refuse(f"{f.path.name} stores {variable!r} contiguous, or with filters other than "
                          "shuffle and deflate, or it is a type dstp leaves to netCDF-C")
        layouts.append(layout)
    first = layouts[0]
    agg = ds.descriptor.aggregate
    for f, layout in zip(ds.files, layouts):
        expected = tuple(f.count if d == agg and len(ds.files) > 1 else n for d, n in zip(dims, shape))
        if layout.shape != expected:
            return refuse(f"{f.path.name} stores {variable!r} with shape {layout.shape}, not the dataset's "
                          f"{expected} for its slice (a new or renamed dimension)", layout.dtype)
    for f, layout in zip(ds.files, layouts):
        if layout.dtype != first.dtype or layout.chunks != first.chunks or layout.filters != first.filters:
            return refuse(f"{f.path.name} stores {variable!r} as {layout.dtype} in chunks {layout.chunks} with "
                          f"filters {layout.filters}; {ds.files[0].path.name} as {first.dtype} in {first.chunks} "
                          f"with {first.filters}", first.dtype)
    packing = {_packing(d) for d in col.file_decodings if d is not None}
    if len(packing) > 1:
        return refuse(f"the files pack {variable!r} differently (scale_factor, add_offset or fill values)",
                      first.dtype)
    if any(np.asarray(attrs[a]).dtype != np.float64 for a in ("scale_factor", "add_offset") if a in attrs):
        return refuse(f"{variable!r} is packed with float32 scale_factor/add_offset: JSON attributes would make a "
                      "client unpack in float64, not float32 as xarray does from the file", first.dtype)
    if "_Unsigned" in attrs:
        return refuse(f"{variable!r} has _Unsigned, which Zarr clients do not read", first.dtype)
    if agg in dims and len(ds.files) > 1:
        step = first.chunks[dims.index(agg)]
        for f in ds.files[:-1]:
            if f.start % step or f.count % step:
                return refuse(f"{f.path.name} holds {agg} {f.start}…{f.start + f.count - 1}, not whole chunks of "
                              f"{step} (ragged chunks across the aggregation)", first.dtype)
        if ds.files[-1].start % step:
            return refuse(f"{ds.files[-1].path.name} starts inside a chunk of {agg}", first.dtype)
    filters = tuple("shuffle" if f == SHUFFLE else "deflate" for f in first.filters)
    fill = np.asarray(attrs["_FillValue"] if "_FillValue" in attrs else fill if fill is not None else 0,
                      first.dtype).item()
    return StoredArray(col.name, variable, dims, shape, first.dtype, first.chunks, filters, attrs, fill, True, "")
