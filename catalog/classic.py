"""Truncation check for netCDF classic files (CDF-1, CDF-2, CDF-5).

netCDF-C reads a truncated classic file without complaint and hands back
fill values for the bytes that are missing, so a half-copied file would be
served as if it were whole. This module reads the classic header (format
spec: https://docs.unidata.ucar.edu/netcdf-c/current/file_format_specifications.html),
computes where the last variable ends, and lets the catalog refuse a file
shorter than that. HDF5-based files need no such check: HDF5 fails loudly.
"""

from __future__ import annotations

import struct
from pathlib import Path
from typing import BinaryIO

__all__ = ["classic_expected_size"]

_NC_DIMENSION, _NC_VARIABLE, _NC_ATTRIBUTE = 10, 11, 12
_TYPE_SIZE = {1: 1, 2: 1, 3: 2, 4: 4, 5: 4, 6: 8, 7: 1, 8: 2, 9: 4, 10: 8, 11: 8}
MAX_HEADER_BYTES = 64 * 2**20


class _Header:
    def __init__(self, f: BinaryIO, version: int) -> None:
        self.f = f
        self.big = version == 5  # CDF-5 uses 64-bit counts and sizes

    def _read(self, n: int) -> bytes:
        data = self.f.read(n)
        if len(data) != n:
            raise ValueError("header ends early")
        if self.f.tell() > MAX_HEADER_BYTES:
            raise ValueError("header larger than 64 MiB")
        return data

    def int32(self) -> int:
        return struct.unpack(">i", self._read(4))[0]

    def count(self) -> int:
        return struct.unpack(">q", self._read(8))[0] if self.big else struct.unpack(">i", self._read(4))[0]

    def offset(self, version: int) -> int:
        return struct.unpack(">q", self._read(8))[0] if version >= 2 else struct.unpack(">i", self._read(4))[0]

    def name(self) -> str:
        n = self.count()
        raw = self._read(n + (-n % 4))
        return raw[:n].decode("utf-8", "replace")

    def skip_attributes(self) -> None:
        tag, n = self.int32(), self.count()
        if tag == 0:
            return
        if tag != _NC_ATTRIBUTE:
            raise ValueError("bad attribute list tag")
        for _ in range(n):
            self.name()
            nc_type = self.int32()
            nelems = self.count()
            size = nelems * _TYPE_SIZE.get(nc_type, 1)
            self._read(size + (-size % 4))


def classic_expected_size(path: Path) -> int | None:
    """Return the least size a classic netCDF file must have, or None if it is not classic."""
    with open(path, "rb") as f:
        magic = f.read(4)
        if len(magic) < 4 or magic[:3] != b"CDF" or magic[3] not in (1, 2, 5):
            return None
        version = magic[3]
        h = _Header(f, version)
        numrecs = h.count()
        if numrecs < 0:  # STREAMING: length not yet written
            numrecs = 0
        tag, ndims = h.int32(), h.count()
        dim_sizes: list[int] = []
        if tag == _NC_DIMENSION:
            for _ in range(ndims):
                h.name()
                dim_sizes.append(h.count())
        elif tag != 0:
            raise ValueError("bad dimension list tag")
        h.skip_attributes()
        tag, nvars = h.int32(), h.count()
        if tag not in (0, _NC_VARIABLE):
            raise ValueError("bad variable list tag")
        end = f.tell()
        record: list[tuple[int, int, int]] = []  # (begin, vsize, unpadded size) of record variables
        for _ in range(nvars if tag else 0):
            h.name()
            ndim = h.count()
            dimids = [h.count() for _ in range(ndim)]
            h.skip_attributes()
            nc_type = h.int32()
            vsize = h.count() if h.big else h.int32()
            begin = h.offset(version)
            is_record = bool(dimids) and dim_sizes[dimids[0]] == 0
            if is_record:
                # unpadded bytes of one record of this variable
                record.append((begin, vsize, _true_size(dimids[1:], dim_sizes, nc_type, -1)))
            else:
                end = max(end, begin + _true_size(dimids, dim_sizes, nc_type, -1))
        if record and numrecs:
            # A lone record variable is not padded between records (format spec, "Note on padding").
            recsize = sum(v for _, v, _ in record) if len(record) > 1 else record[0][2]
            end = max(end, max(b + (numrecs - 1) * recsize + n for b, _, n in record))
        return end


def _true_size(dimids: list[int], dim_sizes: list[int], nc_type: int, vsize: int) -> int:
    """Return a fixed variable's byte size (vsize saturates for variables over 4 GiB)."""
    n = _TYPE_SIZE.get(nc_type, 1)
    for d in dimids:
        n *= dim_sizes[d]
    return max(n, vsize) if vsize >= 0 else n
