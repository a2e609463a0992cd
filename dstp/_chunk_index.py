"""Listing a netCDF-4 variable's chunks with h5py, in the helper process of :mod:`dstp.catalog.chunks`.

The helper (``python -m dstp._chunk_index``) imports this module and h5py, nothing of the catalog: the HDF5
library h5py's wheel bundles must never share a process with the one netCDF4's wheel bundles (different
versions; upstream reports failures at open and close when both are loaded). It answers requests read
from its standard input (:func:`serve`) with plain tuples (:data:`Listing`) and ends when that input
closes, i.e. with the process that started it, however that ended.

A plain child process, not a ``multiprocessing`` one: Dask's workers are daemonic processes, which
``multiprocessing`` forbids to have children.
"""

from __future__ import annotations

import os
import pickle
import signal
import sys
from typing import Any, BinaryIO

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


def serve(requests: BinaryIO, answers: BinaryIO) -> None:
    """Answer pickled ``(path, identity, variable, max_chunks)`` requests with pickled listings until the
    requests end (the parent closed the pipe, or ended)."""
    import h5py  # noqa: F401 - imported before the first request, so that one waits for no import

    while True:
        try:
            path, identity, variable, max_chunks = pickle.load(requests)
        except EOFError:
            return
        pickle.dump(list_chunks(path, identity, variable, max_chunks), answers, pickle.HIGHEST_PROTOCOL)
        answers.flush()


if __name__ == "__main__":
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # a Ctrl-C at the server's terminal is the server's to handle
    answers = os.fdopen(os.dup(1), "wb")
    os.dup2(2, 1)  # whatever a library prints goes to the server's log, never into an answer
    serve(sys.stdin.buffer, answers)
