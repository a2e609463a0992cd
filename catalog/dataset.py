"""A published dataset: its descriptor bound to files, dimensions and columns.

``GriddedDataset.open`` checks the descriptor against the files (variables
exist, dimensions agree, files line up along the aggregation dimension),
decodes the coordinates once, and from then on reads hyperslabs on demand.
Files aggregate along one record dimension: file k covers indices
``[start_k, start_k + count_k)`` of it, ordered by their first coordinate.

Every file is decoded with its own attributes (packing, fill values, time
units, dtype): a column holds one :class:`~dstp.catalog.cf.Decoding` per file,
and :meth:`GriddedDataset.read` decodes each file's part of a hyperslab with
that file's decoding before the parts meet. A variable missing from some
files reads as NULL there. What cannot be reconciled -- a calendar or units
that change, a variable whose dimensions change, coordinates that differ --
refuses the dataset with the file and variable named. Gaps and overlaps along
the aggregation axis are kept in ``coverage`` and ``warnings``.
"""

from __future__ import annotations

import glob
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping

import numpy as np
import pyarrow as pa

from dstp.catalog.cf import (
    Decoding,
    calendar_family,
    decode_values,
    decoding_for,
    merge_decodings,
    numpy_dtype_of,
)
from dstp.catalog.descriptor import AttributeSpec, CoordinateSpec, Descriptor
from dstp.catalog.netcdf4_ import FileHandles, FileMeta, ReadStats, VariableMeta, inspect_file
from dstp.errors import DataFileError, DescriptorError

__all__ = ["AttributeColumn", "CoordinateColumn", "DataFile", "Dimension", "GriddedDataset"]


@dataclass(frozen=True, slots=True)
class DataFile:
    """One file of a dataset and the slice of the aggregation dimension it holds."""

    path: Path
    size: int
    start: int
    count: int
    format: str


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

    @property
    def name(self) -> str:
        return self.spec.name

    @property
    def dimension(self) -> str | None:
        return self.spec.dimension


@dataclass(frozen=True, slots=True)
class AttributeColumn:
    """A data column: where to read it and how to decode it, file by file."""

    spec: AttributeSpec
    #: The decoding of the first file that holds the variable (what ``describe`` shows).
    decoding: Decoding
    #: The column's type across files (see :func:`~dstp.catalog.cf.merge_decodings`).
    arrow_type: pa.DataType
    attrs: Mapping[str, Any]
    #: One decoding per file of the dataset, in file order; None where the file lacks the variable.
    file_decodings: tuple[Decoding | None, ...] = ()

    @property
    def name(self) -> str:
        return self.spec.name

    @property
    def dimensions(self) -> tuple[str, ...]:
        return self.spec.dimensions


@dataclass(frozen=True, slots=True)
class Dimension:
    """A dimension of the dataset, with its coordinate column if it has one."""

    name: str
    size: int
    coordinate: CoordinateColumn | None


def _monotonic(values: np.ndarray) -> int:
    if values.size < 2 or values.dtype == object and any(v is None for v in values):
        return 1 if values.size < 2 else 0
    try:
        diff_pos = bool(np.all(values[1:] > values[:-1]))
        diff_neg = bool(np.all(values[1:] < values[:-1]))
    except TypeError:
        return 0
    return 1 if diff_pos else (-1 if diff_neg else 0)


@dataclass
class GriddedDataset:
    """A dataset ready to serve: files, dimensions and columns, all checked."""

    descriptor: Descriptor
    files: tuple[DataFile, ...]
    dimensions: dict[str, Dimension]
    coordinates: dict[str, CoordinateColumn]
    attributes: dict[str, AttributeColumn]
    global_attrs: dict[str, Any]
    handles: FileHandles = field(repr=False)
    #: Index runs [start, stop) of the aggregation axis with no gap inside (one run when complete).
    coverage: tuple[tuple[int, int], ...] = ()
    #: What a curator should know but that does not stop serving (gaps, overlapping files).
    warnings: tuple[str, ...] = ()

    @property
    def id(self) -> str:
        return self.descriptor.id

    @property
    def size_bytes(self) -> int:
        return sum(f.size for f in self.files)

    def grid_size(self, dims: tuple[str, ...]) -> int:
        return math.prod(self.dimensions[d].size for d in dims)

    def column_names(self) -> list[str]:
        """Return every query column: coordinates first, then attributes."""
        return [*self.coordinates, *self.attributes]

    def dimension_order(self, dims: set[str] | tuple[str, ...]) -> tuple[str, ...]:
        """Return ``dims`` in the dataset's canonical order (outermost first)."""
        return tuple(d for d in self.dimensions if d in dims)

    # -- reading -----------------------------------------------------------------------

    def missing_from(self, column: "AttributeColumn | CoordinateColumn") -> tuple[str, ...]:
        """Return the names of the files that lack a column's variable (it reads as NULL there)."""
        return tuple(f.path.name for f, d in zip(self.files, column.file_decodings) if d is None)

    def read(
        self,
        column: "AttributeColumn | CoordinateColumn",
        index: Mapping[str, slice],
        stats: ReadStats | None = None,
    ) -> tuple[np.ndarray, np.ndarray | None]:
        """Return decoded (values, null mask) of a column over the index ranges ``index``.

        ``index`` maps each of the column's dimensions to a slice with a positive
        step. A range along the aggregation dimension may span files; it is read
        file by file, each part decoded with its own file's attributes, then
        joined. Files that lack the variable contribute NULLs.
        """
        var_dims = column.dimensions if isinstance(column, AttributeColumn) else (
            (column.dimension,) if column.dimension else ())
        variable = column.spec.variable
        dtype = numpy_dtype_of(column.arrow_type)
        decodings = column.file_decodings
        agg = self.descriptor.aggregate
        if agg is None or agg not in var_dims or len(self.files) == 1:
            k = next((i for i, d in enumerate(decodings) if d is not None), 0)
            raw = self.handles.read(self.files[k].path, variable, [index[d] for d in var_dims], stats)
            return decode_values(raw, decodings[k] or column.decoding, dtype)
        axis = var_dims.index(agg)
        want = index[agg]
        parts: list[tuple[np.ndarray, np.ndarray | None]] = []
        for f, dec in zip(self.files, decodings):
            lo, hi = f.start, f.start + f.count
            # first selected index >= lo, honouring the step
            start = want.start if want.start >= lo else want.start + -(-(lo - want.start) // want.step) * want.step
            stop = min(want.stop, hi)
            if start >= stop:
                continue
            local = [index[d] for d in var_dims]
            local[axis] = slice(start - lo, stop - lo, want.step)
            if dec is None:
                shape = tuple(len(range(sl.start or 0, sl.stop, sl.step or 1)) for sl in local)
                parts.append(_nulls(shape, dtype))
                continue
            raw = self.handles.read(f.path, variable, local, stats)
            parts.append(decode_values(raw, dec, dtype))
        if len(parts) == 1:
            return parts[0]
        values = np.concatenate([v for v, _ in parts], axis=axis)
        if all(m is None for _, m in parts):
            return values, None
        masks = [np.zeros(v.shape, bool) if m is None else m for v, m in parts]
        return values, np.concatenate(masks, axis=axis)

    def close(self) -> None:
        self.handles.close()

    # -- construction ------------------------------------------------------------------

    @classmethod
    def open(cls, descriptor: Descriptor, handles: FileHandles | None = None) -> "GriddedDataset":
        """Return the dataset a descriptor publishes; raise DescriptorError/DataFileError if it cannot."""
        if descriptor.path is None:
            raise DescriptorError("descriptor has no location to resolve its files against")
        handles = handles or FileHandles()
        folder = descriptor.path.parent
        where = str(descriptor.path)
        paths = sorted(
            Path(p)
            for p in glob.glob(str(folder / descriptor.files_glob), recursive=True)
            if Path(p).is_file()
        )
        root = folder.resolve()
        paths = [p for p in paths if p.resolve().is_relative_to(root)]
        if not paths:
            raise DescriptorError(f"files glob {descriptor.files_glob!r} matches no file", path=where)
        metas = [inspect_file(p) for p in paths]
        agg = descriptor.aggregate
        if len(metas) > 1 and agg is None:
            raise DescriptorError(
                f"{len(metas)} files match {descriptor.files_glob!r} but no aggregate dimension is named",
                path=where,
            )
        coord_specs = {c.dimension: c for c in descriptor.coordinates if c.dimension}
        metas = _order_files(metas, agg, coord_specs.get(agg) if agg else None, handles)
        files, agg_size = [], 0
        for meta in metas:
            count = meta.dimensions.get(agg, 0) if agg else 0
            files.append(
                DataFile(meta.path, meta.path.stat().st_size, agg_size, count, meta.format)
            )
            agg_size += count
        first = metas[0]
        dim_sizes: dict[str, int] = {}
        seen_in: dict[str, str] = {}
        for meta in metas:
            for name, size in meta.dimensions.items():
                if name == agg:
                    continue
                if name in dim_sizes and size != dim_sizes[name]:
                    raise DataFileError(
                        f"{meta.path.name}: dimension {name!r} has {size} points, "
                        f"{seen_in[name]} has {dim_sizes[name]}; files of one dataset must share their grid"
                    )
                dim_sizes.setdefault(name, size)
                seen_in.setdefault(name, meta.path.name)
        if agg:
            if agg not in first.dimensions:
                raise DescriptorError(f"aggregate dimension {agg!r} is not in {first.path.name}", path=where)
            dim_sizes[agg] = agg_size
        attributes = _attribute_columns(descriptor, metas, dim_sizes, where)
        used_dims = [d for a in descriptor.attributes for d in a.dimensions]
        order = list(dict.fromkeys([*descriptor.default_grid, *used_dims]))
        ds = cls(
            descriptor=descriptor,
            files=tuple(files),
            dimensions={},
            coordinates={},
            attributes=attributes,
            global_attrs=first.attrs,
            handles=handles,
        )
        coords: dict[str, CoordinateColumn] = {}
        for spec in descriptor.coordinates:
            coords[spec.name] = _coordinate_column(ds, spec, metas, dim_sizes, where)
        by_dim = {c.dimension: c for c in coords.values() if c.dimension}
        ds.dimensions = {d: Dimension(d, dim_sizes[d], by_dim.get(d)) for d in order}
        ds.coordinates = coords
        for d in ds.dimensions:
            if d not in by_dim and d in attributes:
                raise DescriptorError(f"attribute {d!r} clashes with the index column of dimension {d!r}", path=where)
        if agg and agg in by_dim:
            ds.coverage, ds.warnings = _coverage(by_dim[agg])
        return ds


def _nulls(shape: tuple[int, ...], dtype: np.dtype) -> tuple[np.ndarray, np.ndarray]:
    """Return a block of NULLs: placeholder values of ``dtype`` and an all-true mask."""
    values = np.full(shape, None, dtype=object) if dtype == np.dtype(object) else np.zeros(shape, dtype=dtype)
    return values, np.ones(shape, dtype=bool)


def _first_values(handles: FileHandles, meta: FileMeta, variable: str, agg: str) -> Any:
    """Return the first decoded value of a file's aggregation coordinate, or None when it has none."""
    var = meta.variables.get(variable)
    if var is None or var.dimensions != (agg,):
        raise DataFileError(f"{meta.path.name}: coordinate {variable!r} along {agg!r} is missing")
    dec = decoding_for(var.dtype, var.attrs, var.default_fill)
    if var.shape[0] == 0 or dec is None:
        return None
    raw = handles.read(meta.path, variable, [slice(0, 1)])
    value, mask = decode_values(raw, dec)
    if mask is not None and mask.any():
        raise DataFileError(f"{meta.path.name}: the first value of coordinate {variable!r} is missing")
    return value[0]


def _order_files(
    metas: list[FileMeta], agg: str | None, spec: CoordinateSpec | None, handles: FileHandles
) -> list[FileMeta]:
    """Order files along the aggregation dimension by their first coordinate value, else by name."""
    if len(metas) < 2 or agg is None or spec is None:
        return metas
    firsts = [(_first_values(handles, meta, spec.variable, agg), meta.path.name) for meta in metas]
    if any(v is None for v, _ in firsts):
        return metas
    kinds = {type(v) for v, _ in firsts}
    if len(kinds) > 1:  # times in some files, numbers in others: _coordinate_column says why
        return metas
    order = sorted(range(len(metas)), key=lambda i: (firsts[i][0], firsts[i][1]))
    return [metas[i] for i in order]


def _file_decodings(
    metas: list[FileMeta], variable: str, dims: tuple[str, ...], what: str
) -> tuple[Decoding | None, ...]:
    """Return each file's decoding of ``variable`` (None where absent); refuse files that disagree."""
    decodings: list[Decoding | None] = []
    reference: VariableMeta | None = None
    reference_file = ""
    for meta in metas:
        var = meta.variables.get(variable)
        if var is None:
            decodings.append(None)
            continue
        if var.dimensions != dims:
            raise DataFileError(
                f"{meta.path.name}: {what} {variable!r} has dimensions ({', '.join(var.dimensions)}), "
                f"expected ({', '.join(dims)}); a variable must keep its dimensions in every file"
            )
        dec = decoding_for(var.dtype, var.attrs, var.default_fill)
        if dec is None:
            raise DataFileError(f"{meta.path.name}: {what} {variable!r} has type {var.dtype}, which is not numeric")
        if reference is None:
            reference, reference_file = var, meta.path.name
        elif dec.time_units is None:
            mine, theirs = _units(var.attrs), _units(reference.attrs)
            if mine != theirs:
                raise DataFileError(
                    f"{meta.path.name}: {what} {variable!r} has units {mine or '(none)'!r} but "
                    f"{reference_file} has {theirs or '(none)'!r}; dstp does not convert units between files — "
                    "convert the files, or publish them as separate datasets"
                )
        decodings.append(dec)
    try:
        merge_decodings(decodings)
    except ValueError as exc:
        raise DataFileError(f"{what} {variable!r}: {exc}; files: {_calendars(metas, variable)}") from None
    return tuple(decodings)


def _units(attrs: Mapping[str, Any]) -> str:
    return " ".join(str(attrs.get("units", "")).split())


def _calendars(metas: list[FileMeta], variable: str) -> str:
    parts = []
    for meta in metas:
        var = meta.variables.get(variable)
        if var is not None:
            cal = var.attrs.get("calendar", "standard") if "since" in _units(var.attrs) else "-"
            parts.append(f"{meta.path.name} ({_units(var.attrs) or 'no units'}; {cal})")
    return ", ".join(parts[:6]) + (" …" if len(parts) > 6 else "")


def _attribute_columns(
    descriptor: Descriptor, metas: list[FileMeta], dim_sizes: dict[str, int], where: str
) -> dict[str, AttributeColumn]:
    out: dict[str, AttributeColumn] = {}
    for spec in descriptor.attributes:
        holder = next((m for m in metas if spec.variable in m.variables), None)
        if holder is None:
            raise DescriptorError(
                f"attribute {spec.name!r}: variable {spec.variable!r} is in none of the files", path=where
            )
        var = holder.variables[spec.variable]
        if var.dimensions != spec.dimensions:
            raise DescriptorError(
                f"attribute {spec.name!r}: descriptor says dimensions {' '.join(spec.dimensions)}, "
                f"{holder.path.name} has {' '.join(var.dimensions) or '(scalar)'}",
                path=where,
            )
        for d in spec.dimensions:
            if d not in dim_sizes:
                raise DescriptorError(f"attribute {spec.name!r}: unknown dimension {d!r}", path=where)
        if decoding_for(var.dtype, var.attrs) is None:
            raise DescriptorError(
                f"attribute {spec.name!r}: variable {spec.variable!r} has type {var.dtype}, "
                "which is not numeric",
                path=where,
            )
        # Files that lack the variable read as NULL along the aggregation axis; a variable
        # off that axis is read from the first file that has it.
        decodings = _file_decodings(metas, spec.variable, spec.dimensions, "variable")
        dec = next(d for d in decodings if d is not None)
        out[spec.name] = AttributeColumn(
            spec=spec, decoding=dec, arrow_type=merge_decodings(decodings), attrs=var.attrs,
            file_decodings=decodings,
        )
    return out


def _coordinate_column(
    ds: GriddedDataset, spec: CoordinateSpec, metas: list[FileMeta], dim_sizes: dict[str, int], where: str
) -> CoordinateColumn:
    first = metas[0]
    var = first.variables.get(spec.variable)
    if spec.dimension is not None and spec.dimension not in dim_sizes:
        raise DescriptorError(f"coordinate {spec.name!r}: unknown dimension {spec.dimension!r}", path=where)
    if var is None:
        if spec.dimension is None:
            raise DescriptorError(f"coordinate {spec.name!r}: variable {spec.variable!r} not found", path=where)
        if any(spec.variable in m.variables for m in metas):
            raise DataFileError(
                f"{first.path.name}: coordinate variable {spec.variable!r} is missing, other files have it"
            )
        # A dimension without a coordinate variable is labelled by its index.
        values = np.arange(dim_sizes[spec.dimension], dtype=np.int64)
        dec = Decoding(arrow_type=pa.int64())
        return CoordinateColumn(spec, values, pa.int64(), dec, 1, (dec,) * len(metas))
    expected = (spec.dimension,) if spec.dimension else ()
    if var.dimensions != expected:
        raise DescriptorError(
            f"coordinate {spec.name!r}: variable {spec.variable!r} has dimensions "
            f"{var.dimensions or '(scalar)'}, expected {expected or '(scalar)'}",
            path=where,
        )
    if decoding_for(var.dtype, var.attrs) is None:
        raise DescriptorError(f"coordinate {spec.name!r}: variable {spec.variable!r} is not numeric", path=where)
    decodings = _file_decodings(metas, spec.variable, expected, "coordinate")
    absent = [m.path.name for m, d in zip(metas, decodings) if d is None]
    if absent:
        raise DataFileError(f"{absent[0]}: coordinate variable {spec.variable!r} is missing, other files have it")
    dec = decodings[0]
    assert dec is not None
    arrow_type = merge_decodings(decodings)
    column = CoordinateColumn(spec, np.empty(0), arrow_type, dec, 1, decodings)
    agg = ds.descriptor.aggregate
    if spec.dimension is not None and spec.dimension == agg:
        values, mask = ds.read(column, {agg: slice(0, dim_sizes[agg], 1)})
    else:
        values, mask = _same_in_every_file(ds, column, metas, spec.dimension, dim_sizes)
    if mask is not None and mask.any():
        raise DataFileError(f"coordinate {spec.name!r} has missing values; coordinates must be complete")
    values = np.asarray(values).reshape(-1) if spec.dimension else np.asarray(values).reshape(1)
    monotonic = _monotonic(values) if spec.dimension else 1
    return CoordinateColumn(spec, values, arrow_type, dec, monotonic, decodings)


def _same_in_every_file(
    ds: GriddedDataset, column: CoordinateColumn, metas: list[FileMeta], dim: str | None, dim_sizes: dict[str, int]
) -> tuple[np.ndarray, np.ndarray | None]:
    """Return a coordinate that does not run along the aggregation axis; refuse files whose values differ."""
    index = [slice(0, dim_sizes[dim], 1)] if dim else []
    dtype = numpy_dtype_of(column.arrow_type)
    result: tuple[np.ndarray, np.ndarray | None] | None = None
    for meta, dec in zip(metas, column.file_decodings):
        assert dec is not None
        raw = ds.handles.read(meta.path, column.spec.variable, index)
        values, mask = decode_values(raw, dec, dtype)
        if result is None:
            result = (values, mask)
            continue
        if not np.array_equal(values, result[0]):
            differ = np.flatnonzero(np.asarray(values).reshape(-1) != np.asarray(result[0]).reshape(-1))
            at = int(differ[0]) if differ.size else 0
            mine = np.asarray(values).reshape(-1)[at] if np.size(values) else None
            theirs = np.asarray(result[0]).reshape(-1)[at] if np.size(result[0]) else None
            raise DataFileError(
                f"{meta.path.name}: coordinate {column.spec.variable!r} differs from {metas[0].path.name} "
                f"(index {at}: {mine!r} vs {theirs!r}); files aggregated along "
                f"{ds.descriptor.aggregate!r} must share every other coordinate"
            )
    assert result is not None
    return result


def _coverage(coord: CoordinateColumn) -> tuple[tuple[tuple[int, int], ...], tuple[str, ...]]:
    """Return the aggregation axis' covered index runs (split at gaps) and warnings about gaps and overlaps.

    A gap is a step more than 1.5 times the median step (a missing month in
    monthly files: 59–62 days against about 30). Needs at least three points.
    """
    values = coord.values
    n = len(values)
    if n < 3:
        return ((0, n),) if n else (), ()
    numbers = _as_numbers(coord)
    steps = np.diff(numbers)
    warnings: list[str] = []
    if coord.monotonic == 0:
        repeats = int(np.sum(steps == 0))
        what = f"{repeats} repeated value(s)" if repeats else "values out of order"
        warnings.append(
            f"coordinate {coord.name!r} is not monotonic along the files ({what}): files overlap; "
            "pushdown on it is off and records appear once per file"
        )
        return ((0, n),), tuple(warnings)
    steps = np.abs(steps)
    typical = float(np.median(steps))
    runs: list[tuple[int, int]] = []
    begin = 0
    for i in np.flatnonzero(steps > 1.5 * typical):
        runs.append((begin, int(i) + 1))
        begin = int(i) + 1
    runs.append((begin, n))
    if len(runs) > 1:
        shown = ", ".join(f"{_label(values[b - 1])} → {_label(values[b])}" for b, _ in runs[1:])
        warnings.append(f"{len(runs) - 1} gap(s) along {coord.name!r} (steps over 1.5× the usual): {shown}")
    return tuple(runs), tuple(warnings)


def _label(value: Any) -> str:
    if isinstance(value, np.datetime64):
        return str(value.astype("datetime64[s]"))
    return str(value)


def _as_numbers(coord: CoordinateColumn) -> np.ndarray:
    """Return a coordinate's values as numbers (instants as days since their first)."""
    values = coord.values
    if values.dtype.kind == "M":
        return (values - values[0]).astype("timedelta64[us]").astype(np.float64) / 86_400e6
    if values.dtype == object and coord.decoding.calendar is not None:
        import cftime

        calendar = calendar_family(coord.decoding.calendar)
        dates = [cftime.datetime.strptime(str(v)[:19], "%Y-%m-%dT%H:%M:%S", calendar=calendar) for v in values]
        return np.asarray(cftime.date2num(dates, f"days since {str(values[0])[:10]}", calendar=calendar), float)
    return np.asarray(values, dtype=np.float64)
