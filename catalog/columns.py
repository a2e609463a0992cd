"""The columns of a dataset: what a query can name, and where each one's values come from.

Records are grid points, and every column lives on some of the grid's
dimensions. There are two shapes of column:

* :class:`CoordinateColumn` -- a dimension's labels (``lat(lat)``) or a scalar
  coordinate (``height``), decoded once at open and held in memory; the
  planner turns predicates on them into index ranges.
* :class:`AttributeColumn` -- a variable on one or more dimensions, read
  hyperslab by hyperslab. Its ``role`` says what it is:

  ========== ==========================================================
  data       a data variable (``temperature``)
  auxiliary  a CF auxiliary coordinate (``lat(rlat, rlon)``, ``station_name``, a DSG ``cf_role`` id)
  bounds     one vertex of a CF ``bounds``/``climatology`` variable
  derived    computed by dstp, not stored: lat/lon from a projected grid
  weight     area weights for ``weighted_avg``: the cell area CF ``cell_measures`` names,
             else cos(latitude) (never part of ``select *``)
  ========== ==========================================================

  Auxiliary, bounds and derived columns small enough are also held in
  memory (``values``), so the planner can prune 2-D latitude/longitude
  predicates to an index bounding box.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping

import numpy as np
import pyarrow as pa

from dstp.catalog.cf import Decoding
from dstp.catalog.descriptor import AttributeSpec, CoordinateSpec
from dstp.catalog.netcdf4_ import FileIdentity

__all__ = ["AttributeColumn", "ColumnTraits", "CoordinateColumn", "DataFile", "Dimension", "ROLES", "files_from_state",
           "files_state", "monotonic"]

#: What an AttributeColumn can be; see the module docstring.
ROLES = ("data", "auxiliary", "bounds", "derived", "weight")


@dataclass(frozen=True, slots=True)
class DataFile:
    """One file of a dataset and the slice of the aggregation dimension it holds."""

    path: Path
    size: int
    start: int
    count: int
    format: str
    #: The part of a dataset split by variable it belongs to (descriptor ``<part>``, in order; 0 otherwise).
    part: int = 0
    #: The version of the file this dataset serves: reads expect it, and fail once the file is another.
    identity: FileIdentity | None = None


def files_state(files: tuple[DataFile, ...]) -> tuple[Any, ...]:
    """Return ``files`` as columns (what a pickled dataset keeps): 100,000 files load in a fraction of the time
    100,000 pickled objects take."""
    folders: dict[str, int] = {}
    formats: dict[str, int] = {}
    rows = []
    for f in files:
        i = f.identity
        folder = folders.setdefault(str(f.path.parent), len(folders))
        fmt = formats.setdefault(f.format, len(formats))
        if i is None:
            rows.append((folder, f.path.name, f.size, f.start, f.count, fmt, f.part, None, 0, 0, 0, 0))
        else:
            rows.append((folder, f.path.name, f.size, f.start, f.count, fmt, f.part, i.real, i.device, i.inode,
                         i.mtime_ns, i.ctime_ns))
    return ("files-1", tuple(folders), tuple(formats), rows)


def files_from_state(state: tuple[Any, ...]) -> tuple[DataFile, ...]:
    """Return the files :func:`files_state` kept."""
    tag, folders, formats, rows = state
    if tag != "files-1":
        raise ValueError(f"unknown files state {tag!r}")
    out = []
    for folder, name, size, start, count, fmt, part, real, device, inode, mtime_ns, ctime_ns in rows:
        identity = None if real is None else FileIdentity(real, device, inode, size, mtime_ns, ctime_ns)
        out.append(DataFile(Path(f"{folders[folder]}/{name}"), size, start, count, formats[fmt], part, identity))
    return tuple(out)


@dataclass(frozen=True, slots=True)
class CoordinateColumn:
    """A coordinate column with its decoded values (one per index, or one for a scalar)."""

    spec: CoordinateSpec
    values: np.ndarray
    arrow_type: pa.DataType
    #: How the first file encodes it (calendar, units); each file's own is in ``file_decodings``.
    decoding: Decoding
    #: +1 ascending, -1 descending, 0 neither (no range pushdown then).
    monotonic: int
    #: One decoding per file of the dataset, in file order (coordinates are in every file).
    file_decodings: tuple[Decoding | None, ...] = ()
    #: The variable's attributes in the first file (what ``describe`` shows besides the descriptor's CF ones).
    attrs: Mapping[str, Any] = field(default_factory=dict)

    @property
    def name(self) -> str:
        return self.spec.name

    @property
    def dimension(self) -> str | None:
        return self.spec.dimension

    @property
    def dimensions(self) -> tuple[str, ...]:
        return (self.spec.dimension,) if self.spec.dimension else ()


@dataclass(frozen=True, slots=True)
class AttributeColumn:
    """A column read from a variable (or computed): where its values are and how to decode them, file by file."""

    spec: AttributeSpec
    #: The decoding of the first file that holds the variable (what ``describe`` shows).
    decoding: Decoding
    #: The column's type across files (see :func:`~dstp.catalog.cf.merge_decodings`).
    arrow_type: pa.DataType
    attrs: Mapping[str, Any]
    #: One decoding per file of the dataset, in file order; None where the file lacks the variable.
    file_decodings: tuple[Decoding | None, ...] = ()
    #: data, auxiliary, bounds or derived (see ROLES).
    role: str = "data"
    #: The variable's dimensions in the files when they differ from the column's (a bounds
    #: variable has its vertex dimension too; an instance variable of ragged arrays, ``lat(station)``,
    #: is on its instance dimension while the column is on the sample dimension, see :mod:`.dsg`);
    #: empty means the column's own. A char array's string length is never listed.
    variable_dims: tuple[str, ...] = ()
    #: Dimensions of the variable held at one index (the vertex of a bounds variable).
    fixed: tuple[tuple[str, int], ...] = ()
    #: The whole decoded column over its dimensions, when held in memory (see the module docstring).
    values: np.ndarray | None = None
    #: Its null mask, when ``values`` is held and has NULLs.
    mask: np.ndarray | None = None
    #: What a derived or bounds column is, for ``describe``.
    note: str = ""

    @property
    def name(self) -> str:
        return self.spec.name

    @property
    def dimensions(self) -> tuple[str, ...]:
        return self.spec.dimensions

    @property
    def file_dimensions(self) -> tuple[str, ...]:
        return self.variable_dims or self.spec.dimensions


@dataclass(frozen=True, slots=True)
class ColumnTraits:
    """What joins and time functions need to know of a column: units, CF attributes, axis, calendar, range."""

    units: str | None
    cf: Mapping[str, Any]
    axis: str | None = None
    #: CF calendar of a time column (None: not a time).
    calendar: str | None = None
    #: The time travels as ISO text (360_day, all_leap, julian).
    iso: bool = False
    #: (min, max) of numeric values held in memory, else None.
    value_range: tuple[float, float] | None = None


@dataclass(frozen=True, slots=True)
class Dimension:
    """A dimension of the dataset, with its coordinate column if it has one."""

    name: str
    size: int
    coordinate: CoordinateColumn | None
    #: Where the dimension lives when netCDF does not share it by name: a swath or grid of an HDF-EOS5 file,
    #: a group of an HDF5 file without dimension scales. A record never pairs dimensions of two homes.
    home: str | None = None


def monotonic(values: np.ndarray) -> int:
    """Return +1 if ``values`` strictly increase, -1 if they strictly decrease, else 0."""
    if values.size < 2 or values.dtype == object and any(v is None for v in values):
        return 1 if values.size < 2 else 0
    try:
        diff_pos = bool(np.all(values[1:] > values[:-1]))
        diff_neg = bool(np.all(values[1:] < values[:-1]))
    except TypeError:
        return 0
    return 1 if diff_pos else (-1 if diff_neg else 0)
