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
refuses the dataset with the file and variable named (:mod:`.aggregation`).

Besides the descriptor's coordinates and attributes, a dataset has the
columns CF implies (:mod:`.columns`): auxiliary coordinates the descriptor
lists with ``dimensions=``, one column per vertex of each coordinate's
``bounds`` (``lat_lower``/``lat_upper``), and -- for a projected or rotated
grid with a grid mapping but no 2-D latitude/longitude -- ``lat``/``lon``
derived with pyproj (:mod:`.gridmapping`).
"""

from __future__ import annotations

import glob
import math
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Mapping

import numpy as np
import pyarrow as pa

from dstp.catalog.aggregation import coverage, file_decodings, nulls, order_files
from dstp.catalog.cf import Decoding, decode_values, decoding_for, merge_decodings, numpy_dtype_of
from dstp.catalog.columns import AttributeColumn, CoordinateColumn, DataFile, Dimension, monotonic
from dstp.catalog.descriptor import AttributeSpec, CoordinateSpec, Descriptor
from dstp.catalog.gridmapping import GridMapping, geographic, grid_mappings
from dstp.catalog.netcdf4_ import FileHandles, FileMeta, ReadStats, inspect_file, resolve_in_group
from dstp.errors import DataFileError, DescriptorError

__all__ = ["AttributeColumn", "CoordinateColumn", "DataFile", "Dimension", "GriddedDataset"]

#: Auxiliary and derived columns up to this many elements are held in memory (2-D pushdown).
IN_MEMORY_ELEMENTS = 4 * 2**20


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
    #: Auxiliary coordinates, bounds vertices and derived lat/lon, by column name.
    auxiliaries: dict[str, AttributeColumn] = field(default_factory=dict)
    #: CF grid mappings of the data variables, by grid mapping variable name.
    grid_mappings: dict[str, GridMapping] = field(default_factory=dict)
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
        """Return every query column: coordinates, auxiliary/bounds/derived columns, then attributes."""
        return [*self.coordinates, *self.auxiliaries, *self.attributes]

    def readable(self, name: str) -> AttributeColumn | None:
        """Return the column read through :meth:`read` called ``name`` (data or auxiliary), if any."""
        return self.attributes.get(name) or self.auxiliaries.get(name)

    def column_dimensions(self, name: str) -> tuple[str, ...]:
        """Return the dimensions a column lives on (empty for a scalar)."""
        col = self.readable(name)
        return col.dimensions if col is not None else self.coordinates[name].dimensions

    def dimension_order(self, dims: set[str] | tuple[str, ...]) -> tuple[str, ...]:
        """Return ``dims`` in the dataset's canonical order (outermost first)."""
        return tuple(d for d in self.dimensions if d in dims)

    # -- reading -----------------------------------------------------------------------

    def missing_from(self, column: AttributeColumn | CoordinateColumn) -> tuple[str, ...]:
        """Return the names of the files that lack a column's variable (it reads as NULL there)."""
        if isinstance(column, AttributeColumn) and column.role == "derived":
            return ()
        return tuple(f.path.name for f, d in zip(self.files, column.file_decodings) if d is None)

    def read(
        self,
        column: AttributeColumn | CoordinateColumn,
        index: Mapping[str, slice],
        stats: ReadStats | None = None,
    ) -> tuple[np.ndarray, np.ndarray | None]:
        """Return decoded (values, null mask) of a column over the index ranges ``index``.

        ``index`` maps each of the column's dimensions to a slice with a positive
        step and an explicit stop. A range along the aggregation dimension may
        span files; it is read file by file, each part decoded with its own
        file's attributes, then joined. Files that lack the variable contribute
        NULLs. Columns held in memory are sliced, not read.
        """
        dims = column.dimensions
        if isinstance(column, AttributeColumn) and column.values is not None:
            where = tuple(index[d] for d in dims)
            mask = column.mask[where] if column.mask is not None else None
            return column.values[where], mask
        if isinstance(column, AttributeColumn):
            var_dims, fixed = column.file_dimensions, dict(column.fixed)
        else:
            var_dims, fixed = dims, {}
        variable = column.spec.variable
        dtype = numpy_dtype_of(column.arrow_type)
        decodings = column.file_decodings

        def local_index(overrides: Mapping[str, slice]) -> list[slice]:
            return [slice(fixed[d], fixed[d] + 1) if d in fixed else overrides.get(d, index[d]) for d in var_dims]

        def squeeze(part: tuple[np.ndarray, np.ndarray | None]) -> tuple[np.ndarray, np.ndarray | None]:
            if not fixed:
                return part
            axes = tuple(i for i, d in enumerate(var_dims) if d in fixed)
            values, mask = part
            return values.squeeze(axis=axes), None if mask is None else mask.squeeze(axis=axes)

        agg = self.descriptor.aggregate
        if agg is None or agg not in dims or len(self.files) == 1:
            k = next((i for i, d in enumerate(decodings) if d is not None), 0)
            raw = self.handles.read(self.files[k].path, variable, local_index({}), stats)
            return squeeze(decode_values(raw, decodings[k] or column.decoding, dtype))
        axis = dims.index(agg)
        want = index[agg]
        parts: list[tuple[np.ndarray, np.ndarray | None]] = []
        for f, dec in zip(self.files, decodings):
            lo, hi = f.start, f.start + f.count
            # first selected index >= lo, honouring the step
            start = want.start if want.start >= lo else want.start + -(-(lo - want.start) // want.step) * want.step
            stop = min(want.stop, hi)
            if start >= stop:
                continue
            here = slice(start - lo, stop - lo, want.step)
            if dec is None:
                shape = tuple(len(range(here.start, here.stop, here.step)) if d == agg
                              else len(range(index[d].start or 0, index[d].stop, index[d].step or 1)) for d in dims)
                parts.append(nulls(shape, dtype))
                continue
            raw = self.handles.read(f.path, variable, local_index({agg: here}), stats)
            parts.append(squeeze(decode_values(raw, dec, dtype)))
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
        descriptor = _in_group(descriptor, metas)
        agg = descriptor.aggregate
        if len(metas) > 1 and agg is None:
            raise DescriptorError(
                f"{len(metas)} files match {descriptor.files_glob!r} but no aggregate dimension is named",
                path=where,
            )
        coord_specs = {c.dimension: c for c in descriptor.coordinates if c.dimension}
        metas = order_files(metas, agg, coord_specs.get(agg) if agg else None, handles)
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
            if spec.auxiliary:
                continue
            coords[spec.name] = _coordinate_column(ds, spec, metas, dim_sizes, where)
        by_dim = {c.dimension: c for c in coords.values() if c.dimension}
        ds.dimensions = {d: Dimension(d, dim_sizes[d], by_dim.get(d)) for d in order}
        ds.coordinates = coords
        for d in ds.dimensions:
            if d not in by_dim and d in attributes:
                raise DescriptorError(f"attribute {d!r} clashes with the index column of dimension {d!r}", path=where)
        for spec in descriptor.coordinates:
            if spec.auxiliary:
                ds.auxiliaries[spec.name] = _auxiliary_column(ds, spec, metas, dim_sizes, where)
        _add_bounds(ds, metas)
        ds.grid_mappings = grid_mappings(
            {**first.variables, **{k: v for m in metas[1:] for k, v in m.variables.items() if k not in first.variables}},
            [a.attrs for a in attributes.values()],
        )
        _add_geographic(ds)
        if agg and agg in by_dim:
            ds.coverage, ds.warnings = coverage(by_dim[agg])
        return ds


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
        decodings = file_decodings(metas, spec.variable, spec.dimensions, "variable")
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
    decodings = file_decodings(metas, spec.variable, expected, "coordinate")
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
        values, mask = _same_in_every_file(ds, spec.variable, arrow_type, list(zip(metas, decodings)), expected,
                                           dim_sizes)
    if mask is not None and mask.any():
        raise DataFileError(f"coordinate {spec.name!r} has missing values; coordinates must be complete")
    values = np.asarray(values).reshape(-1) if spec.dimension else np.asarray(values).reshape(1)
    order = monotonic(values) if spec.dimension else 1
    return CoordinateColumn(spec, values, arrow_type, dec, order, decodings)


def _same_in_every_file(
    ds: GriddedDataset,
    variable: str,
    arrow_type: pa.DataType,
    holders: list[tuple[FileMeta, Decoding | None]],
    dims: tuple[str, ...],
    dim_sizes: dict[str, int],
) -> tuple[np.ndarray, np.ndarray | None]:
    """Return a variable that does not run along the aggregation axis; refuse files whose values differ."""
    index = [slice(0, dim_sizes[d], 1) for d in dims]
    dtype = numpy_dtype_of(arrow_type)
    result: tuple[np.ndarray, np.ndarray | None] | None = None
    reference = ""
    for meta, dec in holders:
        if dec is None:
            continue
        raw = ds.handles.read(meta.path, variable, index)
        values, mask = decode_values(raw, dec, dtype)
        if mask is not None:
            values = np.where(mask, values.dtype.type(0) if values.dtype.kind in "iufb" else values, values)
        if result is None:
            result, reference = (values, mask), meta.path.name
            continue
        same_mask = (mask is None or not mask.any()) == (result[1] is None or not result[1].any()) and (
            mask is None or result[1] is None or np.array_equal(mask, result[1]))
        if not (same_mask and np.array_equal(values, result[0])):
            flat, ref = np.asarray(values).reshape(-1), np.asarray(result[0]).reshape(-1)
            differ = np.flatnonzero(flat != ref) if flat.shape == ref.shape else np.array([0])
            at = int(differ[0]) if differ.size else 0
            mine = flat[at] if flat.size else None
            theirs = ref[at] if ref.size else None
            raise DataFileError(
                f"{meta.path.name}: coordinate {variable!r} differs from {reference} "
                f"(index {at}: {mine!r} vs {theirs!r}); files aggregated along "
                f"{ds.descriptor.aggregate!r} must share every other coordinate"
            )
    assert result is not None
    return result


def _in_group(descriptor: Descriptor, metas: list[FileMeta]) -> Descriptor:
    """Return ``descriptor`` with variable names resolved in its group (``<files group="Grid">``)."""
    if not descriptor.group:
        return descriptor
    known: dict[str, Any] = {k: v for m in metas for k, v in m.variables.items()}

    def resolve(name: str) -> str:
        return resolve_in_group(known, descriptor.group or "", name)

    return replace(
        descriptor,
        coordinates=tuple(replace(c, variable=resolve(c.variable)) for c in descriptor.coordinates),
        attributes=tuple(replace(a, variable=resolve(a.variable)) for a in descriptor.attributes),
    )


def _auxiliary_column(
    ds: GriddedDataset, spec: CoordinateSpec, metas: list[FileMeta], dim_sizes: dict[str, int], where: str
) -> AttributeColumn:
    """Return an auxiliary coordinate (CF ``coordinates``): a variable on dimensions it does not label."""
    for d in spec.dimensions:
        if d not in dim_sizes:
            raise DescriptorError(f"coordinate {spec.name!r}: unknown dimension {d!r}", path=where)
    holder = next((m for m in metas if spec.variable in m.variables), None)
    if holder is None:
        raise DescriptorError(f"coordinate {spec.name!r}: variable {spec.variable!r} is in none of the files",
                              path=where)
    var = holder.variables[spec.variable]
    decodings = file_decodings(metas, spec.variable, spec.dimensions, "coordinate")
    dec = next(d for d in decodings if d is not None)
    attr_spec = AttributeSpec(spec.name, spec.variable, spec.dimensions, spec.units,
                              dict(spec.cf).get("long_name"), spec.cf)
    column = AttributeColumn(attr_spec, dec, merge_decodings(decodings), var.attrs, decodings, role="auxiliary")
    return _in_memory(ds, column, metas, dim_sizes)


def _in_memory(
    ds: GriddedDataset, column: AttributeColumn, metas: list[FileMeta], dim_sizes: dict[str, int]
) -> AttributeColumn:
    """Return ``column`` with its values held in memory when small and off the aggregation axis.

    Those are the columns the planner prunes 2-D predicates with; files that
    hold them must agree, as for any other coordinate.
    """
    agg = ds.descriptor.aggregate
    if agg in column.dimensions or math.prod(dim_sizes[d] for d in column.dimensions) > IN_MEMORY_ELEMENTS:
        return column
    if column.fixed or column.variable_dims:
        values, mask = ds.read(column, {d: slice(0, dim_sizes[d], 1) for d in column.dimensions})
    else:
        values, mask = _same_in_every_file(ds, column.spec.variable, column.arrow_type,
                                           list(zip(metas, column.file_decodings)), column.dimensions, dim_sizes)
    if mask is not None and not mask.any():
        mask = None
    return AttributeColumn(column.spec, column.decoding, column.arrow_type, column.attrs, column.file_decodings,
                           column.role, column.variable_dims, column.fixed, values, mask, column.note)


def _add_bounds(ds: GriddedDataset, metas: list[FileMeta]) -> None:
    """Add one column per vertex of each coordinate's CF ``bounds`` or ``climatology`` variable."""
    first = metas[0]
    sizes = {d.name: d.size for d in ds.dimensions.values()}
    owners: list[tuple[str, str, tuple[str, ...]]] = []
    for c in ds.coordinates.values():
        owners.append((c.name, c.spec.variable, c.dimensions))
    for a in list(ds.auxiliaries.values()):
        owners.append((a.name, a.spec.variable, a.dimensions))
    taken = set(ds.column_names())
    for name, variable, dims in owners:
        owner = first.variables.get(variable)
        if owner is None or not dims:
            continue
        bounds_name = owner.attrs.get("bounds") or owner.attrs.get("climatology")
        bounds = first.variables.get(str(bounds_name)) if isinstance(bounds_name, str) else None
        if bounds is None or len(bounds.dimensions) != len(dims) + 1 or bounds.dimensions[:-1] != dims:
            continue
        vertex_dim = bounds.dimensions[-1]
        n = bounds.shape[-1]
        labels = ["lower", "upper"] if n == 2 else [f"vertex_{k}" for k in range(n)]
        inherit = {k: owner.attrs[k] for k in ("units", "calendar") if k in owner.attrs}
        try:
            decodings = file_decodings(metas, bounds.name, bounds.dimensions, "bounds")
        except DataFileError:
            continue  # bounds that do not aggregate are not offered; the coordinate itself still is
        decodings = tuple(
            None if d is None else decoding_for(m.variables[bounds.name].dtype,
                                                {**inherit, **m.variables[bounds.name].attrs},
                                                m.variables[bounds.name].default_fill)
            for m, d in zip(metas, decodings)
        )
        dec = next((d for d in decodings if d is not None), None)
        if dec is None:
            continue
        arrow_type = merge_decodings(decodings)
        for k, label in enumerate(labels):
            column_name = f"{name}_{label}"
            if column_name in taken:
                continue
            spec = AttributeSpec(column_name, bounds.name, dims, str(inherit.get("units", "")) or None,
                                 f"{label} bound of {name}" if n == 2 else f"vertex {k} of the cell of {name}")
            column = AttributeColumn(spec, dec, arrow_type, bounds.attrs, decodings, role="bounds",
                                     variable_dims=bounds.dimensions, fixed=((vertex_dim, k),),
                                     note=f"vertex {k} of {bounds.name}")
            ds.auxiliaries[column_name] = _in_memory(ds, column, metas, sizes)
            taken.add(column_name)


def _add_geographic(ds: GriddedDataset) -> None:
    """Derive lat/lon with pyproj for a projected or rotated grid that has a grid mapping but no 2-D lat/lon."""
    if not ds.grid_mappings:
        return
    geographic_names = {"latitude", "longitude"}
    for col in [*ds.auxiliaries.values()]:
        if dict(col.spec.cf).get("standard_name") in geographic_names:
            return
    for c in ds.coordinates.values():
        if dict(c.spec.cf).get("standard_name") in geographic_names:
            return
    axes = {c.spec.axis: c for c in ds.coordinates.values() if c.dimension and c.spec.axis in ("X", "Y")}
    if "X" not in axes or "Y" not in axes:
        return
    x, y = axes["X"], axes["Y"]
    mapping = next((m for m in ds.grid_mappings.values() if m.wkt and m.grid_mapping_name != "latitude_longitude"),
                   None)
    if mapping is None or x.values.dtype.kind not in "if" or len(x.values) * len(y.values) > IN_MEMORY_ELEMENTS:
        return
    try:
        lat, lon = geographic(mapping, x.values, y.values, x.spec.units, y.spec.units)
    except ValueError as exc:
        ds.warnings = (*ds.warnings, f"no derived lat/lon: {exc}")
        return
    dims = (y.dimension, x.dimension)
    assert dims[0] is not None and dims[1] is not None
    taken = set(ds.column_names())
    for base, values, std, units in (("lat", lat, "latitude", "degrees_north"),
                                     ("lon", lon, "longitude", "degrees_east")):
        name = base if base not in taken else f"{base}_derived"
        note = f"derived with pyproj from {x.name}, {y.name} and grid mapping {mapping.name!r}"
        spec = AttributeSpec(name, "", dims, units, f"{std} ({note})", (("standard_name", std), ("units", units)))  # type: ignore[arg-type]
        ordered = tuple(d for d in ds.dimensions if d in dims)
        if ordered != dims:
            values = values.T
            spec = AttributeSpec(name, "", ordered, units, spec.description, spec.cf)  # type: ignore[arg-type]
        ds.auxiliaries[name] = AttributeColumn(
            spec, Decoding(arrow_type=pa.float64()), pa.float64(), {}, (), role="derived", values=values, note=note)
