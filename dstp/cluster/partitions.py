"""Partitions: from a planned query to contiguous pieces of its hyperslab that workers run alone.

A query is partitioned only when running its pieces separately and taking
their union gives exactly the single-server answer: one local dataset, records
as grid points (no aggregate, join, DISTINCT, window or matchup), no LIMIT or
OFFSET, no sampling. Its hyperslab is cut along the outermost grid dimension —
at file boundaries when that dimension is the dataset's aggregation axis, so
a partition reads whole files ("files × hyperslab ranges") — into one piece
per worker. A worker replans the same SQL against its own copy of the catalog
and swaps the first scan's hyperslab for its piece (:func:`partition_prepared`):
the same engine, the same DuckDB SQL, over fewer grid points. Rows inside a
piece keep grid order, and pieces in index order cover the grid in order.

ORDER BY is partitioned when every key is an output column (by name or
position) and all keys put NULLs on the same side: each piece is sorted, and
the client merges the pieces by :class:`OrderKey`. Anything else is answered
by the coordinator itself (:func:`why_not_partitioned` says why).

A piece is cut by index, so it is only right when the worker's copy of the
dataset is the coordinator's: each task carries the :class:`DatasetIdentity`
the coordinator planned with, and a worker whose files or decodings differ
refuses the piece (:func:`check_identities`) instead of answering from other data.
"""

from __future__ import annotations

import bisect
import dataclasses
from dataclasses import dataclass
from typing import Any

from sqlglot import exp

from dstp.errors import CatalogError
from dstp.query.execute import PreparedQuery
from dstp.query.plan import Hyperslab

__all__ = ["DatasetIdentity", "OrderKey", "PartitionSpec", "check_identities", "check_identity", "file_cuts",
           "identities",
           "identity_of", "order_keys",
           "partition_prepared", "plan_partitions", "why_not_partitioned", "within_limits"]


@dataclass(frozen=True, slots=True)
class PartitionSpec:
    """One piece of a query's hyperslab: indices ``[start, stop)`` of its outermost grid dimension."""

    index: int
    dimension: str
    start: int
    stop: int

    def as_hyperslab(self, whole: Hyperslab) -> Hyperslab:
        """Return ``whole`` with its outermost range cut to this piece (the range's own positions)."""
        first = whole.ranges[0][self.start:self.stop]
        return dataclasses.replace(whole, ranges=(first, *whole.ranges[1:]))


@dataclass(frozen=True, slots=True)
class OrderKey:
    """One ORDER BY key as an output column."""

    column: str
    descending: bool
    nulls_first: bool


def order_keys(prepared: PreparedQuery) -> tuple[OrderKey, ...] | None:
    """Return the query's ORDER BY keys as output columns (empty: no order), or None if one is not a column."""
    q = prepared.query
    names = q.output_names
    keys: list[OrderKey] = []
    for ordered in q.order:
        node = ordered.this
        while isinstance(node, exp.Paren):
            node = node.this
        if isinstance(node, exp.Literal) and not node.is_string and node.this.isdigit():
            position = int(node.this)
            if not 1 <= position <= len(names):
                return None
            name = names[position - 1]
        elif isinstance(node, exp.Column) and not node.table and node.name in names:
            name = node.name
        else:
            return None
        keys.append(OrderKey(name, bool(ordered.args.get("desc")), bool(ordered.args.get("nulls_first"))))
    return tuple(keys)


def why_not_partitioned(prepared: PreparedQuery) -> str:
    """Return why the coordinator answers this query itself, or "" when it can be partitioned."""
    q, plan = prepared.query, prepared.plan
    if len(plan.scans) != 1 or q.matchups:
        return "it reads more than one dataset reference"
    scan = plan.scans[0]
    if scan.ref.remote:
        return "its dataset lives on another server"
    if not q.simple or q.aggregated:
        return "it reduces records (aggregates, GROUP BY, DISTINCT or a window): the coordinator runs reductions"
    if q.limit is not None or q.offset:
        return "it has LIMIT or OFFSET"
    if q.sampling is not None or scan.ref.sampling is not None:
        return "it samples records"
    tree = q.tree
    if tree is not None and tree.find(exp.Window) is not None:
        return "it uses a window function"
    h = scan.hyperslab
    if not h.dims:
        return "its grid has no dimension to cut"
    if h.strips and h.dims[0] in h.strip_dims:
        return "its outermost dimension is cut into strips by a 2-D coordinate predicate"
    if len(h.ranges[0]) < 2:
        return "its outermost dimension has fewer than two indices to share"
    keys = order_keys(prepared)
    if keys is None:
        return "it orders by an expression that is not an output column"
    if len({k.nulls_first for k in keys}) > 1:
        return "its ORDER BY keys put NULLs on different sides"
    return ""


def file_cuts(first: range, file_starts: tuple[int, ...]) -> list[int]:
    """Return the positions in ``first`` where a file begins between two indices read (a cut there keeps
    files whole; a stride may step over the first index of a file)."""
    starts = sorted(file_starts)
    return [i for i in range(1, len(first))
            if bisect.bisect_right(starts, first[i]) > bisect.bisect_right(starts, first[i - 1])]


def plan_partitions(prepared: PreparedQuery, workers: int) -> tuple[PartitionSpec, ...]:
    """Return about ``workers`` contiguous pieces of the query's outermost dimension, at file boundaries if
    it is the aggregation axis and there are enough files, else evenly (never an empty piece)."""
    scan = prepared.plan.scans[0]
    h = scan.hyperslab
    dimension, first = h.dims[0], h.ranges[0]
    n = max(1, min(workers, len(first)))
    ds: Any = scan.dataset
    bounds: list[int] = []
    if ds.descriptor.aggregate == dimension and len(ds.files) > 1:
        cuts = file_cuts(first, tuple(f.start for f in ds.files))
        if len(cuts) + 1 >= n:
            # Choose n-1 of the file boundaries closest to even shares of the indices.
            chosen: list[int] = []
            for k in range(1, n):
                target = k * len(first) / n
                best = min((c for c in cuts if c not in chosen and (not chosen or c > chosen[-1])),
                           key=lambda c: abs(c - target), default=None)
                if best is not None:
                    chosen.append(best)
            bounds = chosen
    if not bounds and n > 1:
        bounds = sorted({round(k * len(first) / n) for k in range(1, n)} - {0, len(first)})
    edges = [0, *bounds, len(first)]
    return tuple(PartitionSpec(i, dimension, lo, hi) for i, (lo, hi) in enumerate(zip(edges, edges[1:])) if hi > lo)


def partition_prepared(prepared: PreparedQuery, spec: PartitionSpec) -> PreparedQuery:
    """Return ``prepared`` reading only the piece ``spec`` of its first scan's hyperslab (same SQL, same schema)."""
    plan = prepared.plan
    scan = plan.scans[0]
    if scan.hyperslab.dims[:1] != (spec.dimension,):
        raise ValueError(f"partition cuts {spec.dimension!r} but the plan's grid is {scan.hyperslab.dims}")
    piece = dataclasses.replace(scan, hyperslab=spec.as_hyperslab(scan.hyperslab))
    return dataclasses.replace(prepared, plan=dataclasses.replace(plan, scans=(piece, *plan.scans[1:])))


def within_limits(prepared: PreparedQuery, max_rows: int, max_bytes: int) -> bool:
    """Return whether the whole result is surely within ``max_rows`` and ``max_bytes`` before it is computed.

    Then no piece can be cut at a limit, and the coordinator may answer Query before the pieces are
    computed (streamed partitions). The bound: every scanned grid point a row, each value its width
    plus a validity byte; a text column has no bound, so such a query is computed before Query answers.
    """
    rows = prepared.plan.max_rows()
    width = 0
    for f in prepared.schema:
        try:
            width += max(1, f.type.bit_width // 8) + 1
        except ValueError:  # variable width
            return False
    return rows <= max_rows and rows * width <= max_bytes


@dataclass(frozen=True, slots=True)
class DatasetIdentity:
    """What the coordinator planned a piece against: a dataset's identity digest and its files (name, size)."""

    dataset: str
    digest: str
    files: tuple[tuple[str, int], ...]


def identities(prepared: PreparedQuery) -> tuple[DatasetIdentity, ...]:
    """Return the identity of every local dataset the query scans (see ``GriddedDataset.identity``)."""
    return tuple(identity_of(scan.dataset) for scan in prepared.plan.scans if not scan.ref.remote)


def identity_of(ds: Any) -> DatasetIdentity:
    """Return the identity of one local dataset (a GriddedDataset)."""
    return DatasetIdentity(ds.id, ds.identity, tuple((f.path.name, f.size) for f in ds.files))


def check_identities(prepared: PreparedQuery, expected: tuple[DatasetIdentity, ...], where: str) -> None:
    """Raise CatalogError when the datasets ``prepared`` scans here are not those ``expected`` (the
    coordinator's), naming the files that differ; return when they are the same."""
    mine = {i.dataset: i for i in identities(prepared)}
    for want in expected:
        have = mine.get(want.dataset)
        if have is not None:
            check_identity(have, want, where)


def check_identity(have: DatasetIdentity, want: DatasetIdentity, where: str, what: str = "a piece cut by index "
                   "would read other data, so it was not run") -> None:
    """Raise CatalogError naming the files that differ when ``have`` (a worker's) is not ``want``."""
    if have.digest != want.digest:
        theirs, ours = dict(want.files), dict(have.files)
        diffs = [f"{name} missing here" for name in theirs if name not in ours]
        diffs += [f"{name} not on the coordinator" for name in ours if name not in theirs]
        diffs += [f"{name} has {ours[name]:,} bytes here, {theirs[name]:,} on the coordinator"
                  for name in theirs if name in ours and ours[name] != theirs[name]]
        detail = "; ".join(diffs[:5]) + (f"; and {len(diffs) - 5} more" if len(diffs) > 5 else "") if diffs else \
            "the same file names and sizes, but different coordinate values, variables or packing"
        raise CatalogError(f"{where}: its copy of dataset {want.dataset!r} is not the coordinator's ({detail}); "
                           f"{what} — make the worker see the same files (DSTP_CATALOG_ROOT) and restart it")
