"""CRC-32C arithmetic: checksums of pieces combined into the checksum of the whole.

A download receives blocks out of order on several stripes and checks each
one as it arrives; :func:`combine` then yields the CRC-32C of the whole range
from the blocks' CRCs and lengths, so the final end-to-end check needs no
second pass over a gigabyte of output. :func:`crc32c_of_file` is the
whole-file value a server publishes and a finished download is checked against;
:func:`block_crcs_of_file` gives it together with each block's own CRC-32C, which
the frames carrying those blocks then reuse (one pass over the file, not two).
:func:`combine` is zlib's ``crc32_combine``
(operators over GF(2)) for the Castagnoli polynomial; the operator for a
length is computed once and cached, and most blocks share one length.
"""

from __future__ import annotations

import mmap
import os
from functools import lru_cache
from pathlib import Path
from typing import Any, Callable

from dstp.transport import native

__all__ = ["CHECKSUM_CHUNK", "block_crcs_of_file", "combine", "crc32c", "crc32c_of_file"]

_POLY = 0x82F63B78  # CRC-32C, reflected


def _implementation() -> Callable[[Any, int], int]:
    """Return the native extension's CRC-32C when it was built — whether or not the native data path
    is switched on (same values; no ``import crc32c``, whose importlib.metadata cost 41 ms of a
    client's start-up) — else the ``crc32c`` package's; both release the GIL."""
    if native.available():
        return native.crc32c
    import crc32c as package

    return package.crc32c  # type: ignore[no-any-return]


_crc32c = _implementation()


def crc32c(data: Any, value: int = 0) -> int:
    """Return the CRC-32C of ``data`` (any buffer), continuing from ``value``."""
    return _crc32c(data, value)


def _times(matrix: tuple[int, ...], vector: int) -> int:
    total, i = 0, 0
    while vector:
        if vector & 1:
            total ^= matrix[i]
        vector >>= 1
        i += 1
    return total


def _square(matrix: tuple[int, ...]) -> tuple[int, ...]:
    return tuple(_times(matrix, matrix[n]) for n in range(32))


@lru_cache(maxsize=64)
def _zeros_operator(length: int) -> tuple[int, ...]:
    """Return the GF(2) operator that appends ``length`` zero bytes to a CRC register."""
    odd = (_POLY,) + tuple(1 << n for n in range(31))  # one zero bit
    even = _square(odd)  # two zero bits
    odd = _square(even)  # four zero bits
    result: tuple[int, ...] | None = None
    while True:
        even = _square(odd)  # one zero byte on the first pass, then doubling
        if length & 1:
            result = even if result is None else tuple(_times(even, row) for row in result)
        length >>= 1
        if not length:
            break
        odd = _square(even)
        if length & 1:
            result = odd if result is None else tuple(_times(odd, row) for row in result)
        length >>= 1
        if not length:
            break
    assert result is not None
    return result


def combine(crc1: int, crc2: int, length2: int) -> int:
    """Return the CRC-32C of A‖B given crc(A), crc(B) and len(B)."""
    if length2 <= 0:
        return crc1
    return _times(_zeros_operator(length2), crc1) ^ crc2


#: Bytes checksummed per step of :func:`crc32c_of_file` (a view of the memory map, released after).
CHECKSUM_CHUNK = 64 * 2**20


def crc32c_of_file(path: Path, offset: int = 0, length: int = -1) -> int:
    """Return the CRC-32C of ``length`` bytes of ``path`` from ``offset`` (-1: to the end)."""
    size = os.path.getsize(path)
    if length < 0:
        length = size - offset
    if length == 0:
        return crc32c(b"")
    value = 0
    with open(path, "rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as mm:
        view = memoryview(mm)
        try:
            for start in range(offset, offset + length, CHECKSUM_CHUNK):
                chunk = view[start:min(offset + length, start + CHECKSUM_CHUNK)]
                value = crc32c(chunk, value)
                chunk.release()
        finally:
            view.release()
    return value


def block_crcs_of_file(path: Path, offset: int, length: int, block: int) -> tuple[int, tuple[int, ...]]:
    """Return the CRC-32C of ``length`` bytes of ``path`` from ``offset`` and of each ``block``-byte piece of it.

    The pieces start at ``offset`` (the last may be shorter); the whole value is combined from theirs,
    so the file is read once.
    """
    if length <= 0:
        return crc32c(b""), ()
    pieces = []
    whole = crc32c(b"")
    with open(path, "rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as mm:
        view = memoryview(mm)
        try:
            for start in range(offset, offset + length, block):
                size = min(offset + length, start + block) - start
                piece = view[start:start + size]
                value = crc32c(piece)
                piece.release()
                pieces.append(value)
                whole = combine(whole, value, size)
        finally:
            view.release()
    return whole, tuple(pieces)
