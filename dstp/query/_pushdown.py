"""Pushdown: from conditions on coordinates to the index ranges (a hyperslab) a scan reads.

Coordinate predicates in a reference's conjuncts (``lat between 30 and 40``,
``time >= '2001-01-01'``, ``lev = 850``, ``lon in (…)``) are turned into index
ranges, so hyperslabs outside them are never read. Predicates on 2-D
coordinates held in memory (a curvilinear grid's ``lat(y, x)``) narrow the box
to the cells that can match, and may cut it into strips. A strict bound
(``lat > 30``) leaves out a value equal to it when the coordinate's type holds
the bound exactly; one it cannot hold (``lat > 30.1`` on float32) is widened by
rounding, since DuckDB may compare in either precision. Pushdown prunes, and
a pushed-down range can never change a result: the WHERE still runs in DuckDB
on the records read, except the conjuncts :mod:`._exact` proves — DuckDB
evaluating each on the coordinate values at every index the hyperslab reads
finds it true at all of them — which are left out of the SQL it runs.
Strides (``stride(ccm3, lat = 4)``) keep the indices 0, k, 2k, … of a dimension.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pyarrow as pa
from sqlglot import exp

from dstp.catalog.dataset import AttributeColumn, CoordinateColumn, GriddedDataset

__all__ = ["Hyperslab", "conjuncts", "hyperslab_of", "index_range", "value_range"]


@dataclass(frozen=True, slots=True)
class Hyperslab:
    """Index ranges (start, stop, step) over the dataset's index space, one per grid dimension.

    A predicate on a 2-D coordinate (a curvilinear grid's ``lat(y, x)``) may
    cut the box further into *strips*: consecutive runs of ``y`` indices, each
    with its own ``x`` range, so that a band of latitude across a rotated grid
    is read as a few narrow boxes rather than one wide one. ``strip_dims``
    names the two dimensions, ``strips`` holds (y range, x range) pairs in
    increasing ``y``, inside ``ranges``.
    """

    dims: tuple[str, ...]
    ranges: tuple[range, ...]
    strip_dims: tuple[str, ...] = ()
    strips: tuple[tuple[range, range], ...] = ()
    #: The cells of the strip dimensions that can satisfy the 2-D predicates (over the box's
    #: ``strip_dims`` ranges); the scan drops the others before DuckDB sees them.
    cells: np.ndarray | None = field(default=None, compare=False)

    @property
    def shape(self) -> tuple[int, ...]:
        """Return the shape of the bounding box (strips lie inside it)."""
        return tuple(len(r) for r in self.ranges)

    @property
    def size(self) -> int:
        """Return the number of grid points read: the box, or the strips times the other dimensions."""
        if not self.strips:
            return math.prod(self.shape)
        others = math.prod(len(r) for d, r in zip(self.dims, self.ranges) if d not in self.strip_dims)
        return others * sum(len(y) * len(x) for y, x in self.strips)

    def as_dict(self) -> dict[str, tuple[int, int, int]]:
        return {d: (r.start, r.stop, r.step) for d, r in zip(self.dims, self.ranges)}


def _conjuncts(node: exp.Expression | None) -> list[exp.Expression]:
    if node is None:
        return []
    while isinstance(node, exp.Paren):
        node = node.this
    if isinstance(node, exp.And):
        return _conjuncts(node.this) + _conjuncts(node.expression)
    return [node]


def _constant(node: exp.Expression, coord: CoordinateColumn | AttributeColumn) -> Any | None:
    """Return the value of a literal in the coordinate's representation, or None."""
    while isinstance(node, exp.Paren):
        node = node.this
    negate = False
    if isinstance(node, exp.Neg):
        negate, node = True, node.this
    if coord.decoding.time_units is not None:
        if isinstance(node, exp.Cast) and isinstance(node.this, exp.Literal):
            return np.datetime64(node.this.this.replace(" ", "T"), "us")
        if isinstance(node, exp.Literal) and node.is_string and coord.decoding.iso_time:
            return node.this
        return None
    if isinstance(node, exp.Literal) and node.is_string and pa.types.is_string(coord.arrow_type):
        return node.this  # text: station_name = 'KJFK'
    if isinstance(node, exp.Literal) and not node.is_string:
        try:
            value = float(node.this)
        except ValueError:
            return None
        return -value if negate else value
    return None


@dataclass(slots=True)
class _Interval:
    lo: Any = None
    hi: Any = None
    #: The bound itself is outside (``lat > 30``): a coordinate value equal to it is not read.
    lo_open: bool = False
    hi_open: bool = False

    def clip_lo(self, v: Any, open_: bool = False) -> None:
        if self.lo is None or v > self.lo:
            self.lo, self.lo_open = v, open_
        elif v == self.lo:
            self.lo_open = self.lo_open or open_

    def clip_hi(self, v: Any, open_: bool = False) -> None:
        if self.hi is None or v < self.hi:
            self.hi, self.hi_open = v, open_
        elif v == self.hi:
            self.hi_open = self.hi_open or open_


def _interval_of(conj: exp.Expression, coords: dict[str, CoordinateColumn]) -> tuple[str, _Interval] | None:
    """Return (coordinate name, closed value interval) a conjunct confines a coordinate to."""
    flip: dict[Any, Any] = {exp.GT: exp.LT, exp.GTE: exp.LTE, exp.LT: exp.GT, exp.LTE: exp.GTE, exp.EQ: exp.EQ}
    if isinstance(conj, tuple(flip)):
        kind: Any = type(conj)
        col, other = conj.this, conj.expression
        if not isinstance(col, exp.Column):
            col, other, kind = conj.expression, conj.this, flip[type(conj)]
        if not isinstance(col, exp.Column) or col.name not in coords:
            return None
        value = _constant(other, coords[col.name])
        if value is None:
            return None
        iv = _Interval()
        if kind in (exp.GT, exp.GTE, exp.EQ):
            iv.clip_lo(value, kind is exp.GT)
        if kind in (exp.LT, exp.LTE, exp.EQ):
            iv.clip_hi(value, kind is exp.LT)
        return col.name, iv
    if isinstance(conj, exp.Between) and isinstance(conj.this, exp.Column) and conj.this.name in coords:
        coord = coords[conj.this.name]
        lo, hi = _constant(conj.args["low"], coord), _constant(conj.args["high"], coord)
        if lo is None or hi is None:
            return None
        return conj.this.name, _Interval(lo, hi)
    if isinstance(conj, exp.In) and isinstance(conj.this, exp.Column) and conj.this.name in coords \
            and not conj.args.get("query"):
        coord = coords[conj.this.name]
        values = [_constant(e, coord) for e in conj.expressions]
        known = [v for v in values if v is not None]
        if not values or len(known) != len(values):
            return None
        return conj.this.name, _Interval(min(known), max(known))
    return None


def _index_range(coord: CoordinateColumn, iv: _Interval) -> range:
    """Return the index range whose coordinate values may fall in ``iv`` (conservatively)."""
    values = coord.values
    n = len(values)
    lo, hi, lo_open, hi_open = iv.lo, iv.hi, iv.lo_open, iv.hi_open
    if values.dtype.kind == "f":
        # DuckDB may compare in the column's precision: a bound the column's type cannot hold exactly is
        # widened by float32 rounding (and closed); one it holds compares the same in either precision.
        eps = 2.0**-20 if values.dtype.itemsize == 4 else 2.0**-44
        if lo is not None and not _held(lo, values.dtype):
            lo, lo_open = lo - eps * max(1.0, abs(lo)), False
        if hi is not None and not _held(hi, values.dtype):
            hi, hi_open = hi + eps * max(1.0, abs(hi)), False
    asc = values if coord.monotonic > 0 else values[::-1]
    if asc.dtype == object:
        asc = asc.astype(str)
    i0 = 0 if lo is None else int(np.searchsorted(asc, lo, side="right" if lo_open else "left"))
    i1 = n if hi is None else int(np.searchsorted(asc, hi, side="left" if hi_open else "right"))
    if i1 <= i0:
        return range(0, 0)
    if coord.monotonic > 0:
        return range(i0, i1)
    return range(n - i1, n - i0)


def _held(value: Any, dtype: np.dtype) -> bool:
    """Return whether a float literal is exactly a value of ``dtype`` (then no precision can round it)."""
    if not isinstance(value, float) or not math.isfinite(value):
        return False
    with np.errstate(over="ignore"):
        return float(dtype.type(value)) == value


def _widen(iv: _Interval, dtype: np.dtype) -> _Interval:
    """Return ``iv`` widened by float32 rounding, as ``_index_range`` does (DuckDB may compare in float)."""
    if dtype.kind != "f":
        return iv
    eps = 2.0**-20 if dtype.itemsize == 4 else 2.0**-44
    lo = None if iv.lo is None else iv.lo - eps * max(1.0, abs(iv.lo))
    hi = None if iv.hi is None else iv.hi + eps * max(1.0, abs(iv.hi))
    return _Interval(lo, hi)


def _prune_by_auxiliaries(ds: GriddedDataset, conjuncts: list[exp.Expression],
                          ranges: dict[str, range]) -> tuple[tuple[str, ...], np.ndarray] | None:
    """Narrow ``ranges`` to the index bounding box of the cells that can satisfy predicates on 2-D coordinates.

    Auxiliary coordinates held in memory (a curvilinear grid's ``lat(y, x)`` and
    ``lon(y, x)``, derived lat/lon, station positions) are tested cell by cell
    against every interval the WHERE clause's top-level AND puts on them; the
    cells that pass give, per dimension, the first and last index to read.
    Conservative like every pushdown: the whole WHERE still runs afterwards.
    """
    held = {name: col for name, col in ds.auxiliaries.items()
            if col.values is not None and col.dimensions and all(d in ranges for d in col.dimensions)}
    if not held:
        return None
    masks: dict[tuple[str, ...], np.ndarray] = {}
    for conj in conjuncts:
        found = _interval_of(conj, held)  # type: ignore[arg-type]
        if found is None:
            continue
        name, iv = found
        col = held[name]
        dims = col.dimensions
        window = tuple(slice(ranges[d].start, ranges[d].stop) for d in dims)
        values = col.values[window]  # type: ignore[index]
        if values.dtype == object and col.mask is not None:
            values = np.where(col.mask[window], "", values)  # NULLs are dropped below; "" keeps them comparable
        iv = _widen(iv, values.dtype)
        try:
            ok = np.ones(values.shape, dtype=bool)
            if iv.lo is not None:
                ok &= values >= iv.lo
            if iv.hi is not None:
                ok &= values <= iv.hi
        except TypeError:
            continue  # a literal of another type: leave it to DuckDB's error
        if col.mask is not None:
            ok &= ~col.mask[window]
        masks[dims] = ok if dims not in masks else masks[dims] & ok
    before = dict(ranges)
    for dims, ok in masks.items():
        for axis, d in enumerate(dims):
            hit = np.flatnonzero(ok.any(axis=tuple(i for i in range(ok.ndim) if i != axis)))
            base = ranges[d].start
            ranges[d] = range(base + int(hit[0]), base + int(hit[-1]) + 1) if hit.size else range(base, base)
    # The cell mask of the one 2-D group, cut to the new box, for strips (see Hyperslab).
    two_d = [(dims, ok) for dims, ok in masks.items() if len(dims) == 2 and ok.any()]
    if len(two_d) != 1:
        return None
    dims, ok = two_d[0]
    window = tuple(slice(ranges[d].start - before[d].start, ranges[d].stop - before[d].start) for d in dims)
    return dims, ok[window]


#: A strip must save at least this share of the box, and this many cells, to be worth another read.
STRIP_MIN_SAVING = 0.01
STRIP_MIN_CELLS = 256
MAX_STRIPS = 64


def _strips(ok: np.ndarray, y0: int, x0: int) -> tuple[tuple[range, range], ...]:
    """Return (y range, x range) strips covering the true cells of a 2-D mask, fewer cells than its box.

    Rows with no true cell are skipped; a run of rows is split in two where
    that saves the most cells, while the saving is worth an extra read.
    """
    rows = ok.any(axis=1)
    lo = np.where(rows, ok.argmax(axis=1), 0)
    hi = np.where(rows, ok.shape[1] - 1 - ok[:, ::-1].argmax(axis=1), -1)
    box = ok.size
    runs: list[tuple[int, int]] = []
    start: int | None = None
    filled_rows: list[bool] = [bool(v) for v in np.asarray(rows).reshape(-1)]
    for i, filled in enumerate([*filled_rows, False]):
        if filled and start is None:
            start = i
        elif not filled and start is not None:
            runs.append((start, i))
            start = None

    def area(a: int, b: int) -> int:
        return (b - a) * int(hi[a:b].max() - lo[a:b].min() + 1)

    pending: list[tuple[int, int]] = list(runs)
    done: list[tuple[int, int]] = []
    while pending:
        a, b = pending.pop()
        if b - a < 2 or len(done) + len(pending) + 1 >= MAX_STRIPS:
            done.append((a, b))
            continue
        left_lo = np.minimum.accumulate(lo[a:b])
        left_hi = np.maximum.accumulate(hi[a:b])
        right_lo = np.minimum.accumulate(lo[a:b][::-1])[::-1]
        right_hi = np.maximum.accumulate(hi[a:b][::-1])[::-1]
        n = np.arange(1, b - a)
        cost = n * (left_hi[:-1] - left_lo[:-1] + 1) + (b - a - n) * (right_hi[1:] - right_lo[1:] + 1)
        k = int(cost.argmin())
        saving = area(a, b) - int(cost[k])
        if saving < max(STRIP_MIN_CELLS, STRIP_MIN_SAVING * box):
            done.append((a, b))
            continue
        pending += [(a, a + k + 1), (a + k + 1, b)]
    done.sort()
    return tuple((range(y0 + a, y0 + b), range(x0 + int(lo[a:b].min()), x0 + int(hi[a:b].max()) + 1))
                 for a, b in done)


def conjuncts(node: exp.Expression | None) -> list[exp.Expression]:
    """Return the operands of the top-level AND of ``node``."""
    return _conjuncts(node)


def index_range(coord: CoordinateColumn, lo: Any, hi: Any) -> range:
    """Return the index range whose coordinate values may fall in [lo, hi] (None: unbounded)."""
    return _index_range(coord, _Interval(lo, hi))


def hyperslab_of(ds: GriddedDataset, grid: tuple[str, ...], conditions: list[exp.Expression],
                 strides: dict[str, int], *, frozen: tuple[str, ...] = ()) -> Hyperslab:
    """Return the hyperslab of ``grid`` that ``conditions`` (conjuncts, columns by name) leave to read.

    Dimensions in ``frozen`` keep their whole range (a matchup's key dimensions,
    narrowed at run time instead).
    """
    ranges = {d: range(0, ds.dimensions[d].size) for d in grid}
    coords = {
        c.name: c for c in ds.coordinates.values()
        if c.dimension in ranges and c.monotonic != 0 and c.dimension not in frozen
    }
    for conj in conditions:
        found = _interval_of(conj, coords)
        if found is None:
            continue
        name, iv = found
        dim = coords[name].dimension
        assert dim is not None
        try:
            r = _index_range(coords[name], iv)
        except TypeError:
            continue  # a literal of another type: leave it to DuckDB's error
        cur = ranges[dim]
        ranges[dim] = range(max(cur.start, r.start), max(max(cur.start, r.start), min(cur.stop, r.stop)))
    cells = _prune_by_auxiliaries(ds, [c for c in conditions if not _touches(c, frozen, ds)], ranges)
    for dim, step in strides.items():
        r = ranges[dim]
        start = -(-r.start // step) * step
        ranges[dim] = range(start, max(start, r.stop), step)
    strip_dims: tuple[str, ...] = ()
    strips: tuple[tuple[range, range], ...] = ()
    cell_mask = None
    if cells is not None and not set(cells[0]) & set(strides):
        (y, x), ok = cells
        if grid.index(y) > grid.index(x):
            y, x, ok = x, y, ok.T
        strips = _strips(ok, ranges[y].start, ranges[x].start)
        if len(strips) > 1 or (strips and (strips[0][0] != ranges[y] or strips[0][1] != ranges[x])):
            strip_dims = (y, x)
        else:
            strips = ()
        cell_mask = ok if strips else None
    return Hyperslab(grid, tuple(ranges[d] for d in grid), strip_dims, strips, cell_mask)


def _touches(conj: exp.Expression, frozen: tuple[str, ...], ds: GriddedDataset) -> bool:
    if not frozen:
        return False
    for column in conj.find_all(exp.Column):
        col = ds.readable(column.name)
        if col is not None and set(col.dimensions) & set(frozen):
            return True
    return False


def value_range(ds: GriddedDataset, column: str, hyperslab: Hyperslab) -> tuple[Any, Any] | None:
    """Return (min, max) of a column's values inside a hyperslab, when the catalog holds them; else None."""
    ranges = dict(zip(hyperslab.dims, hyperslab.ranges))
    coord = ds.coordinates.get(column)
    if coord is not None and coord.dimension in ranges:
        values = coord.values[ranges[coord.dimension]]
    else:
        held = ds.auxiliaries.get(column)
        if held is None or held.values is None or held.mask is not None \
                or not all(d in ranges for d in held.dimensions):
            return None
        values = held.values[tuple(slice(ranges[d].start, ranges[d].stop, ranges[d].step) for d in held.dimensions)]
    if values.size == 0:
        return None
    if values.dtype == object:
        texts = sorted(str(v) for v in values.reshape(-1))
        return texts[0], texts[-1]
    if values.dtype.kind == "f" and not np.isfinite(values).all():
        return None
    return values.min(), values.max()
