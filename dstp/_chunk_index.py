"""Listing a netCDF-4 variable's chunks with h5py, in the helper process of :mod:`dstp.catalog.chunks`.

The helper (``python -m dstp._chunk_index``) imports this module and h5py, nothing of the catalog (objects of a
store it reads through ranges its parent fetches, :func:`object_image`): the HDF5
library h5py's wheel bundles must never share a process with the one netCDF4's wheel bundles (different
versions; upstream reports failures at open and close when both are loaded). It answers requests read
from its standard input (:func:`serve`) with plain tuples (:data:`Listing`) and ends when that input
closes, i.e. with the process that started it, however that ended.

A plain child process, not a ``multiprocessing`` one: Dask's workers are daemonic processes, which
``multiprocessing`` forbids to have children.
"""

from __future__ import annotations

import io
import os
import pickle
import signal
import sys
from typing import Any, BinaryIO, Callable

__all__ = ["DEFLATE", "MAX_LISTED_CHUNKS", "SHUFFLE", "Listing", "chunk_listing", "file_identity", "list_chunks",
           "serve"]

SHUFFLE, DEFLATE = 2, 1  # HDF5 filter ids (H5Z_FILTER_SHUFFLE, H5Z_FILTER_DEFLATE)
#: A variable stored in more chunks than this is left to netCDF-C: its index (~100 bytes a chunk) would
#: cost more memory than the lock costs time.
MAX_LISTED_CHUNKS = 100_000

#: (shape, chunk shape, numpy dtype string, filters in write order,
#:  chunk offset in elements -> (byte offset, stored size, filter mask))
Listing = tuple[tuple[int, ...], tuple[int, ...], str, tuple[int, ...], dict[tuple[int, ...], tuple[int, int, int]]]


def file_identity(st: os.stat_result) -> tuple[int, int, int, int]:
    """Return what says two opens saw the same file: device, inode, size, modification time."""
    return st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns


def list_chunks(path: str, identity: tuple[int, int, int, int], variable: str,
                max_chunks: int = MAX_LISTED_CHUNKS) -> Listing | None:
    """List ``variable``'s chunks in ``path``; None unless the file h5py opened is the one the caller checked
    (``identity``: :func:`file_identity`) and the variable is one the chunk reader decodes, in at most
    ``max_chunks`` chunks."""
    import h5py

    try:
        with h5py.File(path, "r", locking=False) as f:
            if file_identity(os.fstat(f.id.get_vfd_handle())) != identity:
                return None  # replaced or changed since the caller checked it: netCDF-C reads (and refuses) it
            return chunk_listing(f, variable, max_chunks)
    except (OSError, ValueError):
        return None  # not an HDF5 file (netCDF classic), or one h5py cannot read: netCDF-C reads it


def chunk_listing(h5file: Any, name: str, max_chunks: int = MAX_LISTED_CHUNKS) -> Listing | None:
    """Return ``name``'s chunks in an open h5py file, or None when netCDF-C must read it."""
    import h5py
    import numpy as np

    try:
        dset = h5file[name]
    except (KeyError, ValueError, TypeError):
        return None
    if not isinstance(dset, h5py.Dataset) or dset.chunks is None or not dset.shape:
        return None
    dtype = dset.dtype
    if dtype.kind not in "iuf" or dtype.metadata or not dtype.isnative or h5py.check_enum_dtype(dtype) is not None:
        return None
    plist = dset.id.get_create_plist()
    filters = tuple(plist.get_filter(i)[0] for i in range(plist.get_nfilters()))
    if any(f not in (SHUFFLE, DEFLATE) for f in filters) or len(set(filters)) != len(filters):
        return None
    if dset.id.get_num_chunks() > max_chunks:
        return None
    index: dict[tuple[int, ...], tuple[int, int, int]] = {}

    def note(info: Any) -> None:
        index[tuple(info.chunk_offset)] = (info.byte_offset, info.size, info.filter_mask)

    if hasattr(dset.id, "chunk_iter"):
        dset.id.chunk_iter(note)
    else:  # pragma: no cover - HDF5 < 1.12.3
        for i in range(dset.id.get_num_chunks()):
            note(dset.id.get_chunk_info(i))
    return tuple(dset.shape), tuple(dset.chunks), np.dtype(dtype).str, filters, index


class _Ranged(io.RawIOBase):
    """One version of one object as a read-only file h5py opens: every read is served from blocks of ``block``
    bytes, each fetched once through ``fetch`` (the parent's ranged GETs, ``If-Match`` its ETag: two versions
    never mix); the blocks a read lacks are asked for together."""

    def __init__(self, fetch: Callable[[list[tuple[int, int]]], list[bytes]], size: int, block: int) -> None:
        super().__init__()
        self.fetch, self.size, self.block = fetch, size, block
        self.blocks: dict[int, bytes] = {}
        self.position = 0

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def tell(self) -> int:
        return self.position

    def seek(self, offset: int, whence: int = 0) -> int:
        self.position = {0: 0, 1: self.position, 2: self.size}[whence] + offset
        return self.position

    def read_span(self, start: int, end: int) -> bytes:
        end = min(end, self.size)
        if end <= start:
            return b""
        first, last = start // self.block, (end - 1) // self.block
        missing = [k for k in range(first, last + 1) if k not in self.blocks]
        if missing:
            spans = [(k * self.block, min((k + 1) * self.block, self.size)) for k in missing]
            for k, (s, e), data in zip(missing, spans, self.fetch(spans)):
                if len(data) != e - s:
                    raise OSError(f"bytes {s}-{e} came short ({len(data)})")
                self.blocks[k] = data
        joined = b"".join(self.blocks[k] for k in range(first, last + 1))
        return joined[start - first * self.block:end - first * self.block]

    def readinto(self, buffer: Any) -> int:
        data = self.read_span(self.position, self.position + len(buffer))
        memoryview(buffer).cast("B")[:len(data)] = data
        self.position += len(data)
        return len(data)


def _extents(dset: Any, max_chunks: int) -> list[tuple[int, int]] | None:
    """Return the byte ranges holding ``dset``'s data ([]: none, in its header, or never written); None when
    they cannot be named (external or virtual storage, too many chunks)."""
    import h5py

    plist = dset.id.get_create_plist()
    if plist.get_external_count() > 0:
        return None
    layout = plist.get_layout()
    if layout == h5py.h5d.COMPACT:
        return []
    if layout == h5py.h5d.CONTIGUOUS:
        offset = dset.id.get_offset()
        return [] if offset is None else [(offset, offset + dset.id.get_storage_size())]
    if layout != h5py.h5d.CHUNKED or dset.id.get_num_chunks() > max_chunks:
        return None
    spans: list[tuple[int, int]] = []
    dset.id.chunk_iter(lambda info: spans.append((info.byte_offset, info.byte_offset + info.size)))
    return spans


def object_image(fetch: Callable[[list[tuple[int, int]]], list[bytes]], size: int, block: int,
                 max_chunks: int = MAX_LISTED_CHUNKS) -> dict[str, Any]:
    """Read what netCDF-C needs to open one HDF5 object of a store, by ranges, and list its chunks.

    h5py opens the object through :class:`_Ranged` and reads what netCDF-C's open and the catalog's look read:
    every object header, link, attribute (with its global heap) and chunk index, and the values of every
    dimension scale, of the HDF-EOS metadata and of small string variables. The answer: ``blocks`` (block number
    -> bytes: the parent writes them into a sparse local image that netCDF-C opens), ``listings`` (each
    variable's :func:`chunk_listing`) and ``covered`` (whether all of a variable's data lies in those blocks, so
    that netCDF-C may read it from the image); ``{"classic": True}`` for a netCDF-3 object; ``{"failed":
    reason}`` when h5py cannot read it (the parent then fetches it whole)."""
    import h5py

    ranged = _Ranged(fetch, size, block)
    if ranged.read_span(0, 4)[:3] == b"CDF":
        return {"classic": True}
    listings: dict[str, Listing | None] = {}
    spans: dict[str, list[tuple[int, int]] | None] = {}
    try:
        with h5py.File(ranged, "r", locking=False) as f:

            def look(name: str, obj: Any) -> None:
                for key in obj.attrs:
                    obj.attrs[key]  # noqa: B018 - read: its bytes (and global heap) enter the image
                if not isinstance(obj, h5py.Dataset):
                    return
                # variable-length data lives in global heaps its extents do not name: unknown unless read here
                spans[name] = None if obj.dtype.hasobject else _extents(obj, max_chunks)
                listings[name] = chunk_listing(f, name, max_chunks)
                if h5py.h5ds.is_scale(obj.id) or name.startswith("HDFEOS INFORMATION/") or \
                        (obj.dtype.kind in "OSU" and obj.size * obj.dtype.itemsize <= 2**20):
                    obj[()]  # noqa: B018 - coordinate values, EOS metadata and small strings netCDF-C reads at open
                    if obj.dtype.hasobject:
                        spans[name] = _extents(obj, max_chunks)  # read whole here: its heaps are in the image

            look("", f)
            f.visititems(look)
    except _ParentFailed:
        raise
    except Exception as exc:  # noqa: BLE001 - h5py raises its own tree; the parent fetches the object whole
        return {"failed": f"{type(exc).__name__}: {exc}"}
    have = set(ranged.blocks)

    def inside(ranges: list[tuple[int, int]] | None) -> bool:
        return ranges is not None and all(k in have for s, e in ranges if e > s
                                          for k in range(s // block, (e - 1) // block + 1))

    return {"blocks": ranged.blocks, "listings": listings, "covered": {n: inside(r) for n, r in spans.items()}}


class _ParentFailed(Exception):
    """The parent could not read the ranges asked for (it raises its own error)."""


def serve(requests: BinaryIO, answers: BinaryIO) -> None:
    """Answer pickled requests until they end (the parent closed the pipe, or ended): ``(path, identity,
    variable, max_chunks)`` with a listing; ``("image", size, block, max_chunks)`` by asking the parent for
    byte ranges (``("read", [(start, end), …])``, answered ``("bytes", […])`` or ``("error", text)``) and then
    ``("done", answer)`` (:func:`object_image`)."""
    import h5py  # noqa: F401 - imported before the first request, so that one waits for no import

    while True:
        try:
            request = pickle.load(requests)
        except EOFError:
            return
        if request[0] == "image":

            def fetch(spans: list[tuple[int, int]]) -> list[bytes]:
                pickle.dump(("read", spans), answers, pickle.HIGHEST_PROTOCOL)
                answers.flush()
                kind, value = pickle.load(requests)
                if kind != "bytes":
                    raise _ParentFailed(value)
                return value  # type: ignore[no-any-return]

            try:
                answer: Any = ("done", object_image(fetch, *request[1:]))
            except _ParentFailed as exc:
                answer = ("done", {"failed": str(exc)})
        else:
            path, identity, variable, max_chunks = request
            answer = list_chunks(path, identity, variable, max_chunks)
        pickle.dump(answer, answers, pickle.HIGHEST_PROTOCOL)
        answers.flush()


if __name__ == "__main__":
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # a Ctrl-C at the server's terminal is the server's to handle
    answers = os.fdopen(os.dup(1), "wb")
    os.dup2(2, 1)  # whatever a library prints goes to the server's log, never into an answer
    serve(sys.stdin.buffer, answers)
