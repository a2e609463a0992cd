"""Where each variable's bytes lie in a netCDF-4/HDF5 file, read with h5py in a process of its own.

``python -m dstp._storage_layout`` reads one pickled list of requests ``(path, variables, image)`` from its
standard input and writes one pickled list of answers (:func:`storage_of`); ``dstp catalog export-references``
(:mod:`dstp.catalog.references`) runs it once per export. A process of its own, as the chunk lister's
(:mod:`dstp._chunk_index`): the HDF5 library h5py's wheel bundles must never share a process with the one
netCDF4's wheel bundles.

What it answers, per variable (:data:`Storage`):

* ``("contiguous", shape, dtype, offset, nbytes)``: one extent; ``offset`` None when nothing was ever written;
* ``("compact", shape, dtype, raw)``: the values live in the object header: their bytes;
* ``("chunked", shape, chunks, dtype, filters, index)``: ``filters`` the pipeline's filter ids in write order,
  ``index`` chunk offset (elements) -> (byte offset, stored size, filter mask) — what
  :func:`dstp._chunk_index.chunk_listing` lists, for any type and filter;
* ``("refused", reason)``: what a byte-range reference cannot describe.

An *image* (``image`` true: a sparse local copy of a store object holding its header blocks only,
:mod:`dstp.catalog.objects`) answers contiguous and compact variables only: a chunk index it may not hold is
never read from it.
"""

from __future__ import annotations

import os
import pickle
import sys
from typing import Any

__all__ = ["Storage", "describe", "storage_of"]

#: One variable's storage; see the module's docstring.
Storage = tuple[Any, ...]


def describe(h5file: Any, name: str, image: bool = False) -> Storage:
    """Return where ``name``'s bytes lie in an open h5py file."""
    import h5py
    import numpy as np

    try:
        dset = h5file[name]
    except (KeyError, ValueError, TypeError) as exc:
        return ("refused", f"h5py cannot open it ({exc})")
    if not isinstance(dset, h5py.Dataset):
        return ("refused", "not an HDF5 dataset")
    dtype = dset.dtype
    if dtype.kind not in "iufbS" or dtype.metadata or h5py.check_enum_dtype(dtype) is not None \
            or h5py.check_string_dtype(dtype) is not None and h5py.check_string_dtype(dtype).length is None:
        return ("refused", f"its type ({dtype}) has no fixed size in bytes (strings, enums, compound types)")
    plist = dset.id.get_create_plist()
    if plist.get_external_count() > 0:
        return ("refused", "its data is in external files")
    layout = plist.get_layout()
    shape = tuple(dset.shape)
    if layout == h5py.h5d.COMPACT:
        return ("compact", shape, np.dtype(dtype).str, np.ascontiguousarray(dset[()]).tobytes())
    if layout == h5py.h5d.CONTIGUOUS:
        offset = dset.id.get_offset()
        return ("contiguous", shape, np.dtype(dtype).str, offset, dset.id.get_storage_size())
    if layout != h5py.h5d.CHUNKED:
        return ("refused", "its layout is virtual")
    if image:
        return ("refused", "chunked in a way the catalog's chunk listing does not hold")
    filters = tuple(plist.get_filter(i)[0] for i in range(plist.get_nfilters()))
    index: dict[tuple[int, ...], tuple[int, int, int]] = {}

    def note(info: Any) -> None:
        index[tuple(info.chunk_offset)] = (info.byte_offset, info.size, info.filter_mask)

    dset.id.chunk_iter(note)
    return ("chunked", shape, tuple(dset.chunks), np.dtype(dtype).str, filters, index)


def storage_of(path: str, variables: list[str], image: bool) -> dict[str, Any]:
    """Return ``{"identity": (device, inode, size, mtime_ns), "variables": {name: Storage}}`` of one file, or
    ``{"failed": reason}`` when h5py cannot open it (netCDF-3, damaged)."""
    import h5py

    try:
        with h5py.File(path, "r", locking=False) as f:
            st = os.fstat(f.id.get_vfd_handle())
            return {"identity": (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns),
                    "variables": {name: describe(f, name, image) for name in variables}}
    except (OSError, ValueError) as exc:
        return {"failed": f"{type(exc).__name__}: {exc}"}


if __name__ == "__main__":
    requests = pickle.load(sys.stdin.buffer)
    answers = os.fdopen(os.dup(1), "wb")
    os.dup2(2, 1)  # whatever a library prints goes to stderr, never into the answer
    pickle.dump([storage_of(*request) for request in requests], answers, pickle.HIGHEST_PROTOCOL)
    answers.flush()
