"""kerchunk references of a published dataset: its files readable as Zarr by others, in place (issue 36).

    file_references(ds, k)      {"version": 1, "refs": …} of the dataset's k-th file: always right
    combined_references(ds)     one reference set along the aggregation axis, or CatalogError naming why not

A reference set (kerchunk's version 1 format, read by fsspec's ``ReferenceFileSystem``) is a Zarr v2 group
whose chunk keys point at byte ranges of the files: ``"t2m/0.1.2": [url, offset, length]``. It is written from
what the catalog knows of each file: its header (:class:`~dstp.catalog.headers.FileMeta`, from the catalog
index) and its chunk listings (the direct chunk reader's, :class:`~dstp.catalog.chunks.ChunkReader`, kept in
the index; an object's come from the look that read its header by ranges). What those do not say — where a
contiguous variable lies, a chunked one of another type or filter — h5py reads from the file's header in a
process of its own (:mod:`dstp._storage_layout`); of a store object, from its header image (no data GET).

Decoding belongs to a file: Zarr has one ``fill_value`` and one set of attributes per array, so one array can
stand for many files only when each file would decode alike. :func:`combined_references` checks that every
file agrees on each variable's type, filters, fill value, chunk shape and CF decoding attributes (packing,
units, calendar, fills, valid range), that chunks along the axis line up with the files (each file but the
last holds whole chunks) and that the variables off the axis hold the same bytes in every file; otherwise it
refuses, naming the first file and what differs. The axis coordinate and its bounds are written inline (their
values, uncompressed), as kerchunk's ``MultiZarrToZarr`` does, so that a time chunk of 1,024 steps need not
divide a month. The per-file form has none of these conditions.

What is not written: netCDF-3 files (refused), variables in groups, of strings, enums or compound types, with
filters other than shuffle and deflate, a chunk stored with a filter skipped, chunks never written in a
variable without ``_FillValue`` (Zarr would fill them with another value than netCDF does), and a variable
written less far along an unlimited dimension than the dimension (netCDF reads fill values past its end):
each is named in the export's notes.
"""

from __future__ import annotations

import base64
import json
import math
import os
import pickle
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable, Mapping, Sequence

import numpy as np

from dstp._chunk_index import DEFLATE, SHUFFLE
from dstp.catalog.dataset import GriddedDataset
from dstp.catalog.netcdf4_ import FileIdentity, FileMeta
from dstp.errors import CatalogError

__all__ = ["DECODING_ATTRIBUTES", "References", "combined_references", "file_references", "file_url"]

#: The attributes that change how a variable's stored values decode (CF: packing, fills, time, validity):
#: files whose variable differs in one of these cannot share one Zarr array.
DECODING_ATTRIBUTES = ("scale_factor", "add_offset", "_FillValue", "missing_value", "_Unsigned", "units", "calendar",
                       "valid_min", "valid_max", "valid_range")

#: Inline data of one variable (an unwritten contiguous variable's fill values; the axis coordinate of a combined
#: set) is written up to this size.
INLINE_BYTES = 4 * 2**20

_SKIPPED_FILTER = "a chunk of it was stored with a filter skipped (Zarr applies one pipeline to every chunk)"


@dataclass(frozen=True, slots=True)
class _Stored:
    """Where one variable's bytes lie in one file, in Zarr's terms."""

    shape: tuple[int, ...]
    chunks: tuple[int, ...]
    dtype: str
    #: HDF5 filter ids in write order (shuffle, deflate).
    filters: tuple[int, ...]
    #: chunk offset in elements -> (byte offset, stored size)
    index: dict[tuple[int, ...], tuple[int, int]]
    #: The whole variable's raw bytes, when they are written inline (compact storage, never written).
    inline: bytes | None = None


@dataclass(frozen=True, slots=True)
class References:
    """A reference set and what was left out of it."""

    refs: dict[str, Any]
    #: Variables not written, each with the file and the reason.
    notes: tuple[str, ...] = ()

    def document(self) -> dict[str, Any]:
        """Return the kerchunk version 1 document."""
        return {"version": 1, "refs": self.refs}


def file_url(ds: GriddedDataset, k: int) -> str:
    """Return where others read the dataset's k-th file: its absolute path, or its store URL (``s3://bucket/
    prefix/key``, ``https://…``: the store's configured URL, which never holds a credential)."""
    f = ds.files[k]
    real = f.identity.real if f.identity is not None else ""
    if real.startswith("store://"):
        name, _, key = real[len("store://"):].partition("/")
        objects = ds.handles.objects
        assert objects is not None
        return f"{objects.stores[name].config.url.rstrip('/')}/{key}"
    return os.path.realpath(f.path)


# -- what the catalog and h5py say about each file ------------------------------------------------------------


def _layouts(ds: GriddedDataset, files: Sequence[int]) -> dict[int, tuple[FileMeta, dict[str, _Stored | str]]]:
    """Return each file's header and, per variable of the root group, its storage or why it has none usable."""
    out: dict[int, tuple[FileMeta, dict[str, _Stored | str]]] = {}
    asks: list[tuple[str, list[str], bool]] = []
    asked: list[tuple[int, FileIdentity | None, bool]] = []
    for k in files:
        f = ds.files[k]
        if not f.format.startswith("NETCDF4") and f.format != "HDF5":
            raise CatalogError(f"{f.path.name} is a {f.format} file: references are written for netCDF-4/HDF5 files "
                               f"only (a classic file's record variables interleave); dataset {ds.id!r} cannot be "
                               "exported")
        meta = ds.handles.inspect(f.path)
        stored: dict[str, _Stored | str] = {}
        rest: list[str] = []
        for name, var in meta.variables.items():
            if "/" in name:
                stored[name] = "it is in a group (only the root group is exported)"
                continue
            layout = ds.handles.chunks.layout(f.path, name, f.identity) if ds.handles.chunks is not None else None
            if layout is not None:
                unmasked = _unmasked(layout.index)
                stored[name] = _Stored(layout.shape, layout.chunks, layout.dtype.str, layout.filters, unmasked) \
                    if unmasked is not None else _SKIPPED_FILTER
            else:
                rest.append(name)
        out[k] = (meta, stored)
        if rest:
            objects = ds.handles.objects
            if objects is not None and objects.owns(f.path):
                local, image = objects.local(f.path, f.identity)  # the header image: made at the scan, kept
                asks.append((str(local), rest, image))
                asked.append((k, None, image))
            else:
                asks.append((str(f.path), rest, False))
                asked.append((k, f.identity, False))
    if asks:
        for (k, identity, _), answer in zip(asked, _ask_h5py(asks)):
            f = ds.files[k]
            if "failed" in answer:
                raise CatalogError(f"h5py cannot read the header of {f.path.name} ({answer['failed']}); dataset "
                                   f"{ds.id!r} cannot be exported")
            if identity is not None and tuple(answer["identity"]) != (identity.device, identity.inode, identity.size,
                                                                      identity.mtime_ns):
                raise CatalogError(f"{f.path.name} changed since the catalog published it; let the catalog look at "
                                   "it again (dstp catalog reload), then export again")
            for name, storage in answer["variables"].items():
                out[k][1][name] = _from_h5py(storage, out[k][0], name)
    return out


def _unmasked(index: Mapping[tuple[int, ...], tuple[int, int, int]]) -> dict[tuple[int, ...], tuple[int, int]] | None:
    if any(mask for _, _, mask in index.values()):
        return None
    return {offset: (start, size) for offset, (start, size, _) in index.items()}


def _ask_h5py(asks: list[tuple[str, list[str], bool]]) -> list[dict[str, Any]]:
    """Return :func:`dstp._storage_layout.storage_of` of each request, from one helper process."""
    done = subprocess.run([sys.executable, "-m", "dstp._storage_layout"], input=pickle.dumps(asks),
                          capture_output=True, timeout=600, check=False)
    if done.returncode != 0:
        raise CatalogError(f"reading file headers with h5py failed (exit status {done.returncode}): "
                           f"{done.stderr.decode(errors='replace').strip()[-500:]}")
    return pickle.loads(done.stdout)  # type: ignore[no-any-return]


def _from_h5py(storage: tuple[Any, ...], meta: FileMeta, name: str) -> _Stored | str:
    kind = storage[0]
    if kind == "refused":
        return str(storage[1])
    if kind == "compact":
        _, shape, dtype, raw = storage
        return _Stored(shape, _whole(shape), dtype, (), {}, raw)
    if kind == "contiguous":
        _, shape, dtype, offset, nbytes = storage
        if offset is None:  # never written: every element reads as the fill value
            var = meta.variables[name]
            fill = var.attrs.get("_FillValue", var.default_fill)
            count = math.prod(shape)
            if fill is None or count * np.dtype(dtype).itemsize > INLINE_BYTES:
                return "never written, and netCDF's fill value for it is not known or too big to write inline"
            return _Stored(shape, _whole(shape), dtype, (), {}, np.full(shape, fill, np.dtype(dtype)).tobytes())
        return _Stored(shape, _whole(shape), dtype, (), {(0,) * len(shape): (offset, nbytes)} if nbytes else {})
    _, shape, chunks, dtype, filters, index = storage
    unmasked = _unmasked(index)
    if unmasked is None:
        return _SKIPPED_FILTER
    return _Stored(shape, chunks, dtype, filters, unmasked)


def _whole(shape: tuple[int, ...]) -> tuple[int, ...]:
    return tuple(max(1, n) for n in shape)


# -- one Zarr array -------------------------------------------------------------------------------------------


def _json_value(value: Any) -> Any:
    """Return an attribute's value as JSON holds it (numpy scalars and arrays as numbers and lists)."""
    if isinstance(value, np.ndarray):
        return [_json_value(v) for v in value.tolist()] if value.ndim else _json_value(value.item())
    if isinstance(value, np.generic):
        return _json_value(value.item())
    if isinstance(value, bytes):
        return value.decode("utf-8", errors="replace")
    if isinstance(value, (list, tuple)):
        return [_json_value(v) for v in value]
    return value


def _fill_value(value: Any, dtype: np.dtype) -> Any:
    """Return a ``_FillValue`` as a Zarr v2 ``fill_value``."""
    if value is None:
        return None
    if dtype.kind == "S":
        raw = value if isinstance(value, bytes) else np.asarray(value, dtype).tobytes()
        return base64.standard_b64encode(raw).decode()
    number = np.asarray(value).astype(dtype).item()
    if isinstance(number, float):
        if math.isnan(number):
            return "NaN"
        if math.isinf(number):
            return "Infinity" if number > 0 else "-Infinity"
    return number


def _codecs(filters: tuple[int, ...], itemsize: int) -> list[dict[str, Any]] | str:
    out: list[dict[str, Any]] = []
    for f in filters:
        if f == SHUFFLE:
            out.append({"id": "shuffle", "elementsize": itemsize})
        elif f == DEFLATE:
            out.append({"id": "zlib", "level": 1})  # the level only matters to a writer
        else:
            return f"it is stored with HDF5 filter {f} (only shuffle and deflate are described)"
    return out


def _array(name: str, meta: FileMeta, stored: _Stored, url: str) -> tuple[dict[str, Any], str | None]:
    """Return the references of one variable of one file ({key: value}), or the reason it has none."""
    var = meta.variables[name]
    dtype = np.dtype(stored.dtype)
    if tuple(var.shape) != stored.shape:
        return {}, (f"it is {stored.shape} in HDF5 but {tuple(var.shape)} in netCDF (written less far along an "
                    "unlimited dimension: netCDF reads fill values past its end)")
    codecs = _codecs(stored.filters, dtype.itemsize)
    if isinstance(codecs, str):
        return {}, codecs
    chunk_counts = [-(-n // c) for n, c in zip(stored.shape, stored.chunks)]
    keys: dict[str, Any] = {}
    if stored.inline is not None:
        keys[".".join("0" for _ in stored.shape) or "0"] = "base64:" + base64.b64encode(stored.inline).decode()
    else:
        for offset, (start, size) in stored.index.items():
            grid = [o // c for o, c in zip(offset, stored.chunks)]
            if any(g >= n for g, n in zip(grid, chunk_counts)):
                continue  # a chunk of an extent since shrunk: no element of the variable is in it
            keys[".".join(map(str, grid)) or "0"] = [url, start, size]
    fill = var.attrs.get("_FillValue")
    if len(keys) < math.prod(chunk_counts) and fill is None:
        return {}, ("chunks of it were never written and it has no _FillValue (netCDF reads them as its default "
                    "fill value, Zarr would not)")
    refs = _array_meta(name, meta, stored, stored.shape)
    refs.update({f"{name}/{key}": value for key, value in keys.items()})
    return refs, None


def _group(meta: FileMeta) -> dict[str, Any]:
    return {".zgroup": json.dumps({"zarr_format": 2}),
            ".zattrs": json.dumps({k: _json_value(v) for k, v in meta.attrs.items()})}


def file_references(ds: GriddedDataset, k: int) -> References:
    """Return the references of the dataset's k-th file (every variable of its root group that can be described;
    the others named in the notes)."""
    return _file_references(ds, k, _layouts(ds, [k])[k])


def _file_references(ds: GriddedDataset, k: int, layout: tuple[FileMeta, dict[str, _Stored | str]]) -> References:
    meta, stored = layout
    url = file_url(ds, k)
    refs, notes = _group(meta), []
    for name in meta.variables:
        where = stored.get(name, "not described")
        array, why = _array(name, meta, where, url) if isinstance(where, _Stored) else ({}, where)
        if why is not None:
            notes.append(f"{ds.files[k].path.name}: {name!r} not written: {why}")
        refs.update(array)
    return References(refs, tuple(notes))


def all_file_references(ds: GriddedDataset) -> Iterable[tuple[int, References]]:
    """Yield (k, references) of every file of the dataset."""
    layouts = _layouts(ds, range(len(ds.files)))
    for k in range(len(ds.files)):
        yield k, _file_references(ds, k, layouts[k])


# -- one set along the aggregation axis ------------------------------------------------------------------------


def _refuse(ds: GriddedDataset, k: int, what: str) -> CatalogError:
    return CatalogError(f"dataset {ds.id!r}: {ds.files[k].path.name} {what}, so one Zarr array cannot stand for "
                        "all its files (kerchunk's combined references would decode it wrongly); export one reference "
                        "set per file with --per-file")


def _encoding(stored: _Stored, meta: FileMeta, name: str) -> dict[str, Any]:
    attrs = meta.variables[name].attrs
    return {"dtype": stored.dtype, "filters": stored.filters,
            **{a: _json_value(attrs[a]) if a in attrs else None for a in DECODING_ATTRIBUTES}}


def _same(a: Any, b: Any) -> bool:
    return json.dumps(a, sort_keys=True) == json.dumps(b, sort_keys=True)


def combined_references(ds: GriddedDataset) -> References:
    """Return one reference set of the whole dataset along its aggregation axis; raise CatalogError naming the
    first file and attribute that differ when its files do not decode alike (see the module's docstring)."""
    axis = ds.descriptor.aggregate
    if ds.descriptor.parts:
        raise CatalogError(f"dataset {ds.id!r} is split by variable (<part>): export it with --per-file")
    layouts = _layouts(ds, range(len(ds.files)))
    if len(ds.files) == 1 or axis is None:
        if len(ds.files) != 1:
            raise CatalogError(f"dataset {ds.id!r} has {len(ds.files)} files and no aggregation axis: export them "
                               "with --per-file")
        return _file_references(ds, 0, layouts[0])
    lengths = [layouts[k][0].dimensions.get(axis, 0) for k in range(len(ds.files))]
    r0 = next((k for k, n in enumerate(lengths) if n), 0)  # a file with no record yet says nothing along the axis
    meta0, stored0 = layouts[r0]
    refs, notes = _group(meta0), []
    bounds = meta0.variables[axis].attrs.get("bounds") if axis in meta0.variables else None
    for name, var in meta0.variables.items():
        first = stored0.get(name)
        if not isinstance(first, _Stored):
            notes.append(f"{ds.files[r0].path.name}: {name!r} not written: {first or 'not described'}")
            continue
        along = axis in var.dimensions
        if along and var.dimensions[0] != axis:
            raise CatalogError(f"dataset {ds.id!r}: {name!r} has the aggregation axis {axis!r} as dimension "
                               f"{var.dimensions.index(axis) + 1}, not the first; export it with --per-file")
        for k in range(len(ds.files)):
            if k == r0:
                continue
            meta, stored = layouts[k]
            here = stored.get(name)
            if name not in meta.variables:
                raise _refuse(ds, k, f"has no variable {name!r}")
            if along and lengths[k] == 0:
                continue  # no record yet: it adds nothing along the axis
            if not isinstance(here, _Stored):
                raise _refuse(ds, k, f"cannot refer to {name!r} ({here})")
            mine, theirs = _encoding(here, meta, name), _encoding(first, meta0, name)
            for key in mine:
                if not _same(mine[key], theirs[key]):
                    raise _refuse(ds, k, f"differs from {ds.files[r0].path.name} in {name!r}'s {key} "
                                         f"({mine[key]!r}, not {theirs[key]!r})")
            if not along and (here.shape != first.shape or _held(ds, k, name, here) != _held(ds, r0, name, first)):
                raise _refuse(ds, k, f"holds other values of {name!r}, which is not along {axis!r}, than "
                                     f"{ds.files[r0].path.name}")
        if along and name in (axis, bounds):
            array, why = _inline_along(ds, name, meta0, first, lengths)
        elif along:
            array, why = _chunks_along(ds, name, layouts, lengths, r0)
        else:
            array, why = _array(name, meta0, first, file_url(ds, r0))
        if why is not None:
            raise CatalogError(f"dataset {ds.id!r}: {why}; export one reference set per file with --per-file")
        refs.update(array)
    return References(refs, tuple(notes))


def _raw(ds: GriddedDataset, k: int, name: str, shape: tuple[int, ...]) -> np.ndarray:
    f = ds.files[k]
    return np.ascontiguousarray(ds.handles.read(f.path, name, tuple(slice(0, n) for n in shape), version=f.identity))


def _held(ds: GriddedDataset, k: int, name: str, stored: _Stored) -> bytes:
    """Return what file k holds of ``name``, to compare files: its raw values; of a store's object, its stored
    bytes by ranged GETs (never the whole copy netCDF-C would read a contiguous variable from), so that two
    objects holding equal values stored differently are refused, never merged wrongly."""
    f = ds.files[k]
    objects = ds.handles.objects
    if objects is None or not objects.owns(f.path):
        return _raw(ds, k, name, stored.shape).tobytes()
    if stored.inline is not None:
        return stored.inline
    keys = sorted(stored.index)
    ranges = [(stored.index[o][0], stored.index[o][0] + stored.index[o][1]) for o in keys]
    return repr(keys).encode() + b"".join(objects.read_ranges(f.path, f.identity, ranges))


def _inline_along(ds: GriddedDataset, name: str, meta0: FileMeta, first: _Stored,
                  lengths: list[int]) -> tuple[dict[str, Any], str | None]:
    """Return the references of the axis coordinate (or its bounds): every file's values, concatenated inline."""
    dtype = np.dtype(first.dtype)
    parts = [_raw(ds, k, name, (n, *first.shape[1:])).astype(dtype, copy=False)
             for k, n in enumerate(lengths) if n]
    values = np.concatenate(parts) if parts else np.empty((0, *first.shape[1:]), dtype)
    if values.nbytes > INLINE_BYTES:
        return {}, f"{name!r} over all files ({values.nbytes} bytes) is too big to write inline"
    shape = tuple(values.shape)
    refs = _array_meta(name, meta0, _Stored(shape, _whole(shape), dtype.str, (), {}), shape)
    refs[f"{name}/" + (".".join("0" for _ in shape) or "0")] = "base64:" + base64.b64encode(values.tobytes()).decode()
    return refs, None


def _chunks_along(ds: GriddedDataset, name: str, layouts: Mapping[int, tuple[FileMeta, dict[str, _Stored | str]]],
                  lengths: list[int], r0: int) -> tuple[dict[str, Any], str | None]:
    """Return the references of a variable along the axis: each file's chunks, moved along it; or why not."""
    meta0, stored0 = layouts[r0]
    first = stored0[name]
    assert isinstance(first, _Stored)
    step = first.chunks[0]
    refs: dict[str, Any] = {}
    at = 0
    for k, n in enumerate(lengths):
        if n == 0:
            continue
        stored = layouts[k][1][name]
        assert isinstance(stored, _Stored)
        if stored.chunks != first.chunks or stored.shape[1:] != first.shape[1:]:
            return {}, (f"{ds.files[k].path.name} stores {name!r} in chunks of {stored.chunks} of {stored.shape}, "
                        f"{ds.files[r0].path.name} in chunks of {first.chunks} of {first.shape}")
        if at % step:
            previous = max(j for j in range(k) if lengths[j])
            return {}, (f"{ds.files[previous].path.name} holds {lengths[previous]} steps of {name!r} along "
                        f"{ds.descriptor.aggregate!r}, which its chunks of {step} do not divide: the chunks of "
                        f"{ds.files[k].path.name} do not line up with the combined array's")
        array, why = _array(name, layouts[k][0], stored, file_url(ds, k))
        if why is not None:
            return {}, f"{ds.files[k].path.name}: {name!r}: {why}"
        shift = at // step
        for key, value in array.items():
            if key.endswith((".zarray", ".zattrs")):
                continue
            head, _, rest = key[len(name) + 1:].partition(".")
            refs[f"{name}/{int(head) + shift}" + (f".{rest}" if rest else "")] = value
        at += n
    # every file but the last holds whole chunks: the combined grid is theirs end to end, and each file's own
    # chunks were checked for gaps above
    refs.update(_array_meta(name, meta0, first, (at, *first.shape[1:])))
    return refs, None


def _array_meta(name: str, meta: FileMeta, first: _Stored, shape: tuple[int, ...]) -> dict[str, Any]:
    """Return the ``.zarray`` and ``.zattrs`` of a combined variable of ``shape``."""
    var = meta.variables[name]
    dtype = np.dtype(first.dtype)
    codecs = _codecs(first.filters, dtype.itemsize)
    assert not isinstance(codecs, str)
    zarray = {"zarr_format": 2, "shape": list(shape), "chunks": list(first.chunks), "dtype": dtype.str,
              "compressor": None, "filters": codecs or None,
              "fill_value": _fill_value(var.attrs.get("_FillValue"), dtype), "order": "C"}
    attrs = {k: _json_value(v) for k, v in var.attrs.items() if k != "_FillValue"}
    attrs["_ARRAY_DIMENSIONS"] = list(var.dimensions)
    return {f"{name}/.zarray": json.dumps(zarray), f"{name}/.zattrs": json.dumps(attrs)}
