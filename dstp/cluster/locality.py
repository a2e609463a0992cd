"""Locality: pieces of a query placed on the workers that hold the files they read.

Workers need not see every file of a dataset. A worker whose copy is the
coordinator's (:class:`~.partitions.DatasetIdentity`) holds all of them; any
other is sent the coordinator's scanned dataset (its files, decodings and
coordinates — what every worker must agree on) and answers which of its files
it holds: the same relative path, size and :func:`file_fingerprint`. Such a
*partial holder* reads only those files, through the coordinator's decodings,
so a piece read there is the piece the coordinator would read.

:func:`files_read` says which files a piece of a query reads (the files its
range of the aggregation axis overlaps, and the one file a column without that
axis is read from); :func:`place_by_files` cuts a query into pieces that some
worker holds whole — at file boundaries, each piece at most an even share,
a file held by several workers split between them — and lists, per piece, the
workers that may run it. A file no worker holds leaves the query to the
coordinator, never a gap.
"""

from __future__ import annotations

import bisect
import hashlib
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping

import numpy as np

from dstp.catalog.netcdf4_ import FileHandles
from dstp.cluster.partitions import PartitionSpec, file_cuts
from dstp.query.execute import PreparedQuery

__all__ = ["Placement", "file_fingerprint", "files_read", "place_by_files", "uses_locality"]


@dataclass(frozen=True, slots=True)
class Placement:
    """One piece of a query and the workers that hold every file it reads (sorted)."""

    spec: PartitionSpec
    workers: tuple[str, ...]


def uses_locality(ds: Any) -> bool:
    """Return whether pieces of ``ds`` can be placed by file: an aggregation of several files on a grid
    (a discrete sampling geometry reads its instance tables across files, and a dataset split by variable
    reads every part for each piece, so they are left to full holders)."""
    return ds.descriptor.aggregate is not None and len(ds.files) > 1 and ds.layout is None \
        and not ds.descriptor.parts


def _overlaps(r: range, lo: int, hi: int) -> bool:
    """Return whether the increasing range ``r`` has an index in ``[lo, hi)``."""
    if not len(r) or r[-1] < lo or r[0] >= hi:
        return False
    j = max(0, -(-(lo - r.start) // r.step))
    return j < len(r) and r[j] < hi


def files_read(prepared: PreparedQuery, spec: PartitionSpec | None = None,
               starts: list[int] | None = None) -> frozenset[int]:
    """Return the indices of the files a scan of ``prepared`` (cut to ``spec``, if given) reads.

    A column along the aggregation axis is read from the files its range overlaps; one without it from
    the first file that has its variable (as ``GriddedDataset.read``); coordinates and columns held in
    memory from none. Every file when the dataset is not placed by file (:func:`uses_locality`).
    ``starts``: each file's first index on the aggregation axis, when the caller has them already."""
    scan = prepared.plan.scans[0]
    ds: Any = scan.dataset
    everything = frozenset(range(len(ds.files)))
    if not uses_locality(ds):
        return everything
    h = spec.as_hyperslab(scan.hyperslab) if spec is not None else scan.hyperslab
    agg = ds.descriptor.aggregate
    along = h.ranges[h.dims.index(agg)] if agg in h.dims else None
    if along is not None and len(along):
        starts = starts if starts is not None else [f.start for f in ds.files]
        # the files from the one holding the range's first index to the one holding its last (a bisection:
        # a placement asks this once per file boundary, so it must not walk every file each time)
        near = range(max(0, bisect.bisect_right(starts, along[0]) - 1), bisect.bisect_right(starts, along[-1]))
    else:
        near = range(0)
    need: set[int] = set()
    for name in scan.columns:
        column = ds.readable(name)
        if column is None or column.values is not None:
            continue
        if agg in column.dimensions:
            if along is None:
                return everything
            lacks = column.file_decodings  # a file without the variable reads as NULLs, not from the file
            need.update(k for k in near if _overlaps(along, ds.files[k].start, ds.files[k].start + ds.files[k].count)
                        and not (lacks and lacks[k] is None))
        else:
            need.add(next((k for k, d in enumerate(column.file_decodings) if d is not None), 0))
    return frozenset(need)


def place_by_files(prepared: PreparedQuery, holdings: Mapping[str, frozenset[int]]) -> tuple[Placement, ...] | str:
    """Return the query's pieces, each with the workers (of ``holdings``: worker → indices of the files it
    holds) that hold every file it reads; or why it cannot be placed (a file no worker holds).

    The outermost dimension is cut at every file boundary when it is the aggregation axis; neighbouring
    parts join while one worker holds them all and the piece stays within an even share
    (indices / workers); a part larger than that, held by several workers, is split evenly between them."""
    scan = prepared.plan.scans[0]
    ds: Any = scan.dataset
    h = scan.hyperslab
    dimension, first = h.dims[0], h.ranges[0]
    first_indices = [f.start for f in ds.files]
    cuts = file_cuts(first, tuple(first_indices)) if uses_locality(ds) and ds.descriptor.aggregate == dimension else []
    edges = [0, *cuts, len(first)]
    share = max(1, math.ceil(len(first) / max(1, len(holdings))))


    def holders_of(lo: int, hi: int) -> tuple[frozenset[int], frozenset[str]]:
        need = files_read(prepared, PartitionSpec(0, dimension, lo, hi), first_indices)
        return need, frozenset(w for w, held in holdings.items() if need <= held)

    pieces: list[tuple[int, int, frozenset[str]]] = []
    for lo, hi in zip(edges, edges[1:]):
        need, holders = holders_of(lo, hi)
        if not holders:
            nobody = sorted(k for k in need if not any(k in held for held in holdings.values()))
            names = [ds.files[k].path.name for k in (nobody or sorted(need))]
            shown = ", ".join(names[:3]) + (f" and {len(names) - 3} more" if len(names) > 3 else "")
            return (f"no cluster worker holds {shown}" if nobody else
                    f"no cluster worker holds all of {shown}, which one piece reads")
        if pieces and pieces[-1][2] & holders and hi - pieces[-1][0] <= share:
            start, _, before = pieces[-1]
            pieces[-1] = (start, hi, before & holders)
            continue
        parts = max(1, min(len(holders), math.ceil((hi - lo) / share)))
        bounds = [lo + round(k * (hi - lo) / parts) for k in range(parts + 1)]
        pieces += [(a, b, holders_of(a, b)[1] if parts > 1 else holders) for a, b in zip(bounds, bounds[1:]) if b > a]
    return tuple(Placement(PartitionSpec(i, dimension, lo, hi), tuple(sorted(holders)))
                 for i, (lo, hi, holders) in enumerate(pieces))


def file_fingerprint(handles: FileHandles, path: Path, coordinate: str | None) -> str:
    """Return a digest of what one file says of itself — format, dimensions, every variable's type,
    shape and attributes (packing, fill values, time units), global attributes — and the raw values
    of ``coordinate`` (its aggregation coordinate), read through ``handles`` (never opening it twice)."""
    meta = handles.inspect(path)
    h = hashlib.sha256()
    h.update(repr((path.name, path.stat().st_size, meta.format, sorted(meta.dimensions.items()), meta.unlimited,
                   sorted(meta.attrs.items()))).encode())
    for name in sorted(meta.variables):
        v = meta.variables[name]
        h.update(repr((name, v.dimensions, v.shape, v.dtype.str, sorted(v.attrs.items(), key=lambda kv: kv[0]),
                       v.default_fill)).encode())
    if coordinate and coordinate in meta.variables:
        values = np.ascontiguousarray(handles.read(path, coordinate, []))
        h.update(values.tobytes() if values.dtype.kind != "O" else repr(values.tolist()).encode())
    return h.hexdigest()
