"""A dataset grown by files appended at the end of its aggregation axis, without a rebuild.

An archive grows at its end: today's file sorts after yesterday's. A full
rebuild of a 100,000-file dataset (:meth:`GriddedDataset.open` over every
file's facts, then its whole snapshot written to the index) costs seconds; an
*append* costs the new files. :func:`extend` builds the small dataset of the
old last file and the new ones (through the same :meth:`GriddedDataset.open`,
so every per-file check and decoding is the one a cold build makes), and when
it lines up with the old dataset — the new records sort after its last, every
column keeps its type (each new file keeps its own packing, fill values and
time units, as in a cold build), the other dimensions, coordinates and columns
are equal, and no new warning — returns an :class:`Appended`: what
the new files add (their places, per-column decodings, aggregation
coordinate values). :func:`apply` makes the grown dataset from the old one and
that delta; the catalog index keeps the delta beside the snapshot (a few
hundred bytes instead of the whole dataset) and applies it at the next start
through the same function.

Anything else — a file inserted before the last, one replaced or removed, a
header that decodes otherwise, a station/profile/trajectory layout, a dataset
split by variable, a column held in memory along the aggregation axis — is
not an append: :func:`extend` returns None and the catalog rebuilds the
dataset whole, as before.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from dstp.catalog.aggregation import coverage
from dstp.catalog.cf import Decoding
from dstp.catalog.columns import AttributeColumn, CoordinateColumn, DataFile, Dimension
from dstp.catalog.dataset import GriddedDataset
from dstp.catalog.descriptor import Descriptor
from dstp.catalog.netcdf4_ import FileHandles, FileIdentity, FileSource
from dstp.errors import CatalogError

__all__ = ["Appended", "apply", "extend"]


@dataclass(frozen=True, slots=True)
class Appended:
    """What files appended at the end of a dataset's aggregation axis add to it."""

    #: The new files, placed after the old ones (their starts on the whole axis).
    files: tuple[DataFile, ...]
    #: Per column (coordinates, attributes, auxiliaries, by name): the new files' decodings, in file order.
    decodings: tuple[tuple[str, tuple[Decoding | None, ...]], ...]
    #: The aggregation coordinate's decoded values of the new files.
    values: np.ndarray
    #: The dataset's version once grown (0: the one it had).
    version: int = 0

    def to_state(self) -> tuple[Any, ...]:
        """Return what the index keeps (plain values and catalog classes: read back through its allow-list)."""
        return ("appended-1", self.files, self.decodings, self.values, self.version)

    @classmethod
    def from_state(cls, state: tuple[Any, ...]) -> "Appended":
        tag, files, decodings, values, version = state
        if tag != "appended-1" or not isinstance(values, np.ndarray):
            raise ValueError(f"unknown appended state {tag!r}")
        if not all(isinstance(f, DataFile) for f in files):
            raise ValueError("an appended state names something else than files")
        return cls(tuple(files), tuple((str(n), tuple(d)) for n, d in decodings), values, int(version))


def appendable(ds: GriddedDataset) -> bool:
    """Return whether files can be appended to ``ds`` without a rebuild (see the module's docstring)."""
    agg = ds.descriptor.aggregate
    if agg is None or ds.layout is not None or ds.descriptor.parts or ds.presence or not ds.files:
        return False
    dim = ds.dimensions.get(agg)
    coord = dim.coordinate if dim is not None else None
    if coord is None or coord.monotonic != 1 or coord.values.ndim != 1 or len(coord.values) != dim.size:  # type: ignore[union-attr]
        return False
    if any(f.part != 0 or f.identity is None for f in ds.files):
        return False
    if any(c.values is not None and agg in c.dimensions for c in [*ds.attributes.values(), *ds.auxiliaries.values()]):
        return False  # held in memory along the axis: a cold build may no longer hold it (its size limit)
    gaps = coverage(coord)[1]
    return ds.warnings[:len(gaps)] == gaps


def extend(ds: GriddedDataset, descriptor: Descriptor, new: Sequence[tuple[Path, FileIdentity]], reader: FileSource,
           handles: FileHandles) -> tuple[GriddedDataset, Appended] | None:
    """Return ``ds`` (published from ``descriptor``) grown by the files ``new`` (read through ``reader``, served
    through ``handles``) and what they add; None when they are not an append (the dataset is then rebuilt
    whole)."""
    if not new or not appendable(ds):
        return None
    last = ds.files[-1]
    assert last.identity is not None
    try:
        tail = GriddedDataset.open(descriptor, handles, files=[(last.path, last.identity), *new], reader=reader)
    except CatalogError:
        return None  # the full build says what is wrong
    agg = ds.descriptor.aggregate
    assert agg is not None
    if tail.warnings or not appendable(tail) or tail.files[0].path != last.path or tail.files[0].count != last.count:
        return None
    old_coord, tail_coord = _axis(ds, agg), _axis(tail, agg)
    n = last.count
    if old_coord.values.dtype != tail_coord.values.dtype \
            or not _equal(old_coord.values[len(old_coord.values) - n:], tail_coord.values[:n]):
        return None
    if not _alike(ds, tail, agg):
        return None
    size = ds.dimensions[agg].size
    files = tuple(replace(f, start=f.start - n + size) for f in tail.files[1:])
    # each new file keeps its own decodings (packing, fill values, time units); the column types are the old
    # ones (_alike): a type merged over every file (cf.merge_decodings: numpy's promotion, the first file's time
    # type) is then the merge of the old type and the tail's, which share the old last file
    decodings = []
    for name, column in _columns(tail).items():
        mine = _columns(ds)[name].file_decodings
        if not mine and not column.file_decodings:
            decodings.append((name, ()))  # not read from files (derived, weights): nothing per file
            continue
        if not mine or not column.file_decodings or column.file_decodings[0] != mine[-1]:
            return None
        decodings.append((name, column.file_decodings[1:]))
    delta = Appended(files, tuple(decodings), tail_coord.values[n:])
    return apply(ds, delta, handles), delta


def apply(ds: GriddedDataset, delta: Appended, handles: FileHandles | None = None) -> GriddedDataset:
    """Return a new dataset: ``ds`` with the files of ``delta`` appended (``ds`` itself is not changed)."""
    agg = ds.descriptor.aggregate
    assert agg is not None
    added = {name: decodings for name, decodings in delta.decodings}
    columns = _columns(ds)
    if set(added) != set(columns) or any(len(d) != (len(delta.files) if columns[n].file_decodings else 0)
                                         for n, d in added.items()):
        raise ValueError("an append names other columns or files than its dataset has")
    old = _axis(ds, agg)
    size = ds.dimensions[agg].size + sum(f.count for f in delta.files)
    values = np.concatenate([old.values, delta.values])
    if len(values) != size:
        raise ValueError("an append's coordinate values do not match its files")
    values.flags.writeable = old.values.flags.writeable
    coordinates: dict[str, CoordinateColumn] = {}
    for name, c in ds.coordinates.items():
        decodings = c.file_decodings + added[name]
        coordinates[name] = replace(c, values=values, file_decodings=decodings) if c is old else \
            replace(c, file_decodings=decodings)
    attributes = {name: _grown(c, added[name]) for name, c in ds.attributes.items()}
    auxiliaries = {name: _grown(c, added[name]) for name, c in ds.auxiliaries.items()}
    by_dim = {c.dimension: c for c in coordinates.values() if c.dimension}
    dimensions = {d: Dimension(d, size if d == agg else dim.size, by_dim.get(d) if dim.coordinate is not None
                               else None, dim.home) for d, dim in ds.dimensions.items()}
    old_gaps = coverage(old)[1]
    runs, gaps = coverage(coordinates[old.name])
    return replace(ds, files=ds.files + delta.files, dimensions=dimensions, coordinates=coordinates,
                   attributes=attributes, auxiliaries=auxiliaries, coverage=runs,
                   warnings=(*gaps, *ds.warnings[len(old_gaps):]),
                   handles=handles if handles is not None else ds.handles, version=delta.version or ds.version)


def _axis(ds: GriddedDataset, agg: str) -> CoordinateColumn:
    coord = ds.dimensions[agg].coordinate
    assert coord is not None
    return coord


def _grown(column: AttributeColumn, decodings: tuple[Decoding | None, ...]) -> AttributeColumn:
    return replace(column, file_decodings=column.file_decodings + decodings)


def _columns(ds: GriddedDataset) -> dict[str, CoordinateColumn | AttributeColumn]:
    return {**ds.coordinates, **ds.attributes, **ds.auxiliaries}


def _equal(a: Any, b: Any) -> bool:
    """Return whether two values are the same (arrays: same type, shape and elements, NaN equal to NaN)."""
    if isinstance(a, np.ndarray) or isinstance(b, np.ndarray):
        if not (isinstance(a, np.ndarray) and isinstance(b, np.ndarray)) or a.dtype != b.dtype or a.shape != b.shape:
            return False
        if a.dtype.kind in "fc":
            return bool(np.array_equal(a, b, equal_nan=True))
        return bool(np.array_equal(a, b))
    try:
        return bool(a == b)
    except (TypeError, ValueError):
        return False


def _alike(ds: GriddedDataset, tail: GriddedDataset, agg: str) -> bool:
    """Return whether ``tail`` (the old last file and the new ones) has the columns and grid of ``ds``."""
    if list(ds.dimensions) != list(tail.dimensions) or list(ds.coordinates) != list(tail.coordinates) \
            or list(ds.attributes) != list(tail.attributes) or list(ds.auxiliaries) != list(tail.auxiliaries):
        return False
    for name, dim in ds.dimensions.items():
        other = tail.dimensions[name]
        if dim.home != other.home or (dim.coordinate is None) != (other.coordinate is None) \
                or (name != agg and dim.size != other.size):
            return False
    if not _equal(ds.grid_mappings, tail.grid_mappings) or ds.descriptor != tail.descriptor:
        return False
    for name, c in ds.coordinates.items():
        t = tail.coordinates[name]
        if c.spec != t.spec or c.arrow_type != t.arrow_type or c.monotonic != t.monotonic and c.dimension != agg:
            return False
        if c.dimension != agg and not _equal(c.values, t.values):
            return False
    for mine, theirs in ((ds.attributes, tail.attributes), (ds.auxiliaries, tail.auxiliaries)):
        for name, c in mine.items():
            t = theirs[name]
            if (c.spec, c.arrow_type, c.role, c.variable_dims, c.fixed, c.note) != \
                    (t.spec, t.arrow_type, t.role, t.variable_dims, t.fixed, t.note):
                return False
            if not _equal(c.values, t.values) or not _equal(c.mask, t.mask):
                return False
    return True
