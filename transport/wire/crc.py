"""CRC-32C arithmetic: checksums of pieces combined into the checksum of the whole.

A download receives blocks out of order on several stripes and checks each
one as it arrives; :func:`combine` then yields the CRC-32C of the whole range
from the blocks' CRCs and lengths, so the final end-to-end check needs no
second pass over a gigabyte of output. It is zlib's ``crc32_combine``
(operators over GF(2)) for the Castagnoli polynomial; the operator for a
length is computed once and cached, and most blocks share one length.
"""

from __future__ import annotations

from functools import lru_cache
from typing import Any, Callable

from dstp.transport import native

__all__ = ["combine", "crc32c"]

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
