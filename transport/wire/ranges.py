"""Byte ranges of a file transfer: merged, subtracted and cut into shares.

A download keeps the (start, end) ranges it has written (:mod:`dstp.transport.client.files`)
and asks for the rest; a scale-out download cuts the missing (offset, length) ranges into
one share per worker (``dstp/cluster/coordinator.py``).
"""

from __future__ import annotations

from typing import Iterable, Sequence

__all__ = ["merge_ranges", "split_ranges", "subtract_ranges"]


def merge_ranges(ranges: Iterable[tuple[int, int]]) -> list[tuple[int, int]]:
    """Return (start, end) ranges merged and sorted."""
    out: list[tuple[int, int]] = []
    for start, end in sorted(r for r in ranges if r[1] > r[0]):
        if out and start <= out[-1][1]:
            out[-1] = (out[-1][0], max(out[-1][1], end))
        else:
            out.append((start, end))
    return out


def subtract_ranges(whole: tuple[int, int], done: Iterable[tuple[int, int]]) -> list[tuple[int, int]]:
    """Return the (start, end) parts of ``whole`` not covered by ``done``."""
    missing, cursor = [], whole[0]
    for start, end in merge_ranges(done):
        if end <= cursor or start >= whole[1]:
            continue
        if start > cursor:
            missing.append((cursor, min(start, whole[1])))
        cursor = max(cursor, end)
    if cursor < whole[1]:
        missing.append((cursor, whole[1]))
    return missing


def split_ranges(ranges: Sequence[tuple[int, int]], shares: int, align: int = 1) -> list[list[tuple[int, int]]]:
    """Cut (offset, length) ``ranges`` into at most ``shares`` contiguous shares of about equal bytes.

    Every share but the last holds a multiple of ``align`` bytes (a block size); a share may span
    several ranges, and none is empty. Together they cover exactly ``ranges``, in order.
    """
    total = sum(n for _, n in ranges)
    if total <= 0 or shares < 1:
        return []
    align = max(1, align)
    each = -(-total // shares)
    each = -(-each // align) * align
    out: list[list[tuple[int, int]]] = [[]]
    room = each
    for offset, length in ranges:
        while length > 0:
            if room == 0:
                out.append([])
                room = each
            take = min(length, room)
            out[-1].append((offset, take))
            offset, length, room = offset + take, length - take, room - take
    return out
