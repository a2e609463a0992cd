"""A published dataset: its descriptor bound to files, dimensions and columns.

``GriddedDataset.open`` checks the descriptor against the files (variables
exist, dimensions agree, files line up along the aggregation dimension),
decodes the coordinates once, and from then on reads hyperslabs on demand.
Files aggregate along one record dimension: file k covers indices
``[start_k, start_k + count_k)`` of it, ordered by their first coordinate.
"""

from __future__ import annotations

import glob
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping

import numpy as np
import pyarrow as pa

from dstp.catalog.cf import Decoding, decode_values, decoding_for
from dstp.catalog.descriptor import AttributeSpec, CoordinateSpec, Descriptor
from dstp.catalog.netcdf4_ import FileHandles, FileMeta, ReadStats, inspect_file
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
    decoding: Decoding
    #: +1 ascending, -1 descending, 0 neither (no range pushdown then).
    monotonic: int

    @property
    def name(self) -> str:
        return self.spec.name

    @property
    def dimension(self) -> str | None:
        return self.spec.dimension


@dataclass(frozen=True, slots=True)
class AttributeColumn:
    """A data column: where to read it and how to decode it."""

    spec: AttributeSpec
    decoding: Decoding
    arrow_type: pa.DataType
    attrs: Mapping[str, Any]

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

    def read(
        self,
        variable: str,
        var_dims: tuple[str, ...],
        index: Mapping[str, slice],
        decoding: Decoding,
        stats: ReadStats | None = None,
    ) -> tuple[np.ndarray, np.ndarray | None]:
        """Return decoded (values, null mask) of ``variable`` over the index ranges ``index``.

        ``index`` maps each of ``var_dims`` to a slice with a positive step. A range
        along the aggregation dimension may span files; it is read file by file.
        """
        agg = self.descriptor.aggregate
        if agg is None or agg not in var_dims or len(self.files) == 1:
            raw = self.handles.read(self.files[0].path, variable, [index[d] for d in var_dims], stats)
            return decode_values(raw, decoding)
        axis = var_dims.index(agg)
        want = index[agg]
        parts: list[np.ndarray] = []
        for f in self.files:
            lo, hi = f.start, f.start + f.count
            # first selected index >= lo, honouring the step
            start = want.start if want.start >= lo else want.start + -(-(lo - want.start) // want.step) * want.step
            stop = min(want.stop, hi)
            if start >= stop:
                continue
            local = [index[d] for d in var_dims]
            local[axis] = slice(start - lo, stop - lo, want.step)
            parts.append(self.handles.read(f.path, variable, local, stats))
        raw = parts[0] if len(parts) == 1 else np.concatenate(parts, axis=axis)
        return decode_values(raw, decoding)

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
        dim_sizes = dict(first.dimensions)
        if agg:
            if agg not in dim_sizes:
                raise DescriptorError(f"aggregate dimension {agg!r} is not in {first.path.name}", path=where)
            dim_sizes[agg] = agg_size
        for meta in metas[1:]:
            for name, size in meta.dimensions.items():
                if name != agg and name in first.dimensions and size != first.dimensions[name]:
                    raise DataFileError(
                        f"{meta.path.name}: dimension {name!r} has {size} points, "
                        f"{first.path.name} has {first.dimensions[name]}"
                    )
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
        return ds


def _order_files(
    metas: list[FileMeta], agg: str | None, spec: CoordinateSpec | None, handles: FileHandles
) -> list[FileMeta]:
    """Order files along the aggregation dimension by their first coordinate value, else by name."""
    if len(metas) < 2 or agg is None or spec is None:
        return metas
    firsts: list[tuple[Any, str]] = []
    for meta in metas:
        var = meta.variables.get(spec.variable)
        if var is None or var.dimensions != (agg,):
            raise DataFileError(f"{meta.path.name}: coordinate {spec.variable!r} along {agg!r} is missing")
        dec = decoding_for(var.dtype, var.attrs)
        if var.shape[0] == 0 or dec is None:
            firsts.append((None, meta.path.name))
            continue
        raw = handles.read(meta.path, spec.variable, [slice(0, 1)])
        value, _ = decode_values(raw, dec)
        firsts.append((value[0], meta.path.name))
    if any(v is None for v, _ in firsts):
        return metas
    order = sorted(range(len(metas)), key=lambda i: (firsts[i][0], firsts[i][1]))
    return [metas[i] for i in order]


def _attribute_columns(
    descriptor: Descriptor, metas: list[FileMeta], dim_sizes: dict[str, int], where: str
) -> dict[str, AttributeColumn]:
    first = metas[0]
    out: dict[str, AttributeColumn] = {}
    for spec in descriptor.attributes:
        var = first.variables.get(spec.variable)
        if var is None:
            raise DescriptorError(
                f"attribute {spec.name!r}: variable {spec.variable!r} is not in {first.path.name}", path=where
            )
        if var.dimensions != spec.dimensions:
            raise DescriptorError(
                f"attribute {spec.name!r}: descriptor says dimensions {' '.join(spec.dimensions)}, "
                f"{first.path.name} has {' '.join(var.dimensions) or '(scalar)'}",
                path=where,
            )
        for d in spec.dimensions:
            if d not in dim_sizes:
                raise DescriptorError(f"attribute {spec.name!r}: unknown dimension {d!r}", path=where)
        for meta in metas[1:]:
            other = meta.variables.get(spec.variable)
            if other is None or other.dimensions != var.dimensions:
                raise DataFileError(f"{meta.path.name}: variable {spec.variable!r} is missing or differs")
        dec = decoding_for(var.dtype, var.attrs)
        if dec is None:
            raise DescriptorError(
                f"attribute {spec.name!r}: variable {spec.variable!r} has type {var.dtype}, "
                "which is not numeric",
                path=where,
            )
        out[spec.name] = AttributeColumn(spec=spec, decoding=dec, arrow_type=dec.arrow_type, attrs=var.attrs)
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
        # A dimension without a coordinate variable is labelled by its index.
        values = np.arange(dim_sizes[spec.dimension], dtype=np.int64)
        dec = Decoding(arrow_type=pa.int64())
        return CoordinateColumn(spec, values, pa.int64(), dec, 1)
    expected = (spec.dimension,) if spec.dimension else ()
    if var.dimensions != expected:
        raise DescriptorError(
            f"coordinate {spec.name!r}: variable {spec.variable!r} has dimensions "
            f"{var.dimensions or '(scalar)'}, expected {expected or '(scalar)'}",
            path=where,
        )
    dec = decoding_for(var.dtype, var.attrs)
    if dec is None:
        raise DescriptorError(f"coordinate {spec.name!r}: variable {spec.variable!r} is not numeric", path=where)
    agg = ds.descriptor.aggregate
    if spec.dimension is not None and spec.dimension == agg and len(ds.files) > 1:
        values, mask = ds.read(spec.variable, expected, {agg: slice(0, dim_sizes[agg], 1)}, dec)
    else:
        index = {spec.dimension: slice(None)} if spec.dimension else {}
        raw = ds.handles.read(first.path, spec.variable, [index[d] for d in expected])
        values, mask = decode_values(raw, dec)
    if mask is not None and mask.any():
        raise DataFileError(f"coordinate {spec.name!r} has missing values; coordinates must be complete")
    values = np.asarray(values).reshape(-1) if spec.dimension else np.asarray(values).reshape(1)
    return CoordinateColumn(spec, values, dec.arrow_type, dec, _monotonic(values) if spec.dimension else 1)
