"""Binding a descriptor's columns to the files: each column checked against them, and decoded where held in memory.

:meth:`GriddedDataset.open <dstp.catalog.dataset.GriddedDataset.open>` calls
these, one per kind of column: data variables (:func:`attribute_columns`),
coordinates labelling a dimension (:func:`coordinate_column`), auxiliary
coordinates (:func:`auxiliary_column`), one column per vertex of CF bounds
(:func:`add_bounds`), lat/lon derived for projected grids
(:func:`add_geographic`) and the area weight of ``weighted_avg``
(:func:`add_weights`). Each refuses what the files contradict, naming the
file and the variable. Instance variables of ragged arrays become columns on
the sample dimension (:func:`on_samples`, see :mod:`.dsg`); text times are
checked value by value (:func:`check_text_times`).
"""

from __future__ import annotations

import math
from pathlib import Path
from dataclasses import replace
from typing import TYPE_CHECKING, Any, Mapping

import numpy as np
import pyarrow as pa

from dstp.catalog import ugrid
from dstp.catalog.aggregation import file_decodings
from dstp.catalog.cf import ISO8601, LAT_UNITS, Decoding, decode_values, decoding_for, merge_decodings, numpy_dtype_of
from dstp.catalog.columns import AttributeColumn, CoordinateColumn, monotonic
from dstp.catalog.descriptor import AttributeSpec, CoordinateSpec, Descriptor
from dstp.catalog.dsg import FeatureLayout
from dstp.catalog.gridmapping import cell_areas, geographic
from dstp.catalog.headers import DIMENSION_ALWAYS_BELIEVED, DIMENSION_POINTS_PER_FILE_BYTE
from dstp.catalog.netcdf4_ import FileMeta, VariableMeta, resolve_in_group
from dstp.errors import DataFileError, DescriptorError

if TYPE_CHECKING:
    from dstp.catalog.dataset import GriddedDataset

__all__ = [
    "IN_MEMORY_ELEMENTS",
    "IN_MEMORY_TEXTS",
    "add_bounds",
    "add_geographic",
    "add_weights",
    "attribute_columns",
    "auxiliary_column",
    "check_dimension_sizes",
    "check_ragged_descriptor",
    "check_text_times",
    "coordinate_column",
    "in_memory",
    "on_samples",
    "parts_agree",
    "refuse_unserved",
    "same_in_every_file",
]

#: Auxiliary and derived columns up to this many elements are held in memory (2-D pushdown).
IN_MEMORY_ELEMENTS = 4 * 2**20
#: Text columns are Python objects in memory: held only up to this many (station ids, not per observation).
IN_MEMORY_TEXTS = 256 * 2**10


def check_dimension_sizes(metas: list[FileMeta], dimensions: set[str], sizes: Mapping[str, int],
                          file_bytes: Mapping[Path, int] | None = None) -> None:
    """Refuse a dimension whose declared size the files cannot back, before anything of its size is allocated.

    A coordinate is held in memory (an index coordinate is ``arange(size)``): a
    tiny file declaring a 10⁹-point dimension would have the server allocate
    gigabytes at start. Real data takes at least about a byte per point even
    compressed, so a file of ``b`` bytes may declare at most
    ``DIMENSION_POINTS_PER_FILE_BYTE × b`` points along a dimension (and the
    dataset, along the aggregated one, that many per byte of all its files);
    up to ``DIMENSION_ALWAYS_BELIEVED`` points are always accepted.
    """
    total = 0
    for meta in metas:
        size = file_bytes[meta.path] if file_bytes is not None and meta.path in file_bytes else _file_bytes(meta)
        total += size
        for name in dimensions:
            points = meta.dimensions.get(name, 0)
            if points > max(DIMENSION_ALWAYS_BELIEVED, DIMENSION_POINTS_PER_FILE_BYTE * size):
                raise DataFileError(_too_large(meta.path.name, name, points, size))
    for name in dimensions:
        points = sizes.get(name, 0)
        if points > max(DIMENSION_ALWAYS_BELIEVED, DIMENSION_POINTS_PER_FILE_BYTE * total):
            raise DataFileError(_too_large(f"the files of {metas[0].path.parent.name}", name, points, total))


def _file_bytes(meta: FileMeta) -> int:
    try:
        return meta.path.stat().st_size
    except OSError:
        return 0


def _too_large(where: str, name: str, points: int, size: int) -> str:
    return (f"{where}: dimension {name!r} declares {points:,} points, but {size:,} bytes of file cannot hold "
            f"data for that many; the file is damaged (or made to exhaust memory) — it is not published")


def check_ragged_descriptor(descriptor: Descriptor, layout: FeatureLayout, where: str) -> None:
    """Refuse a descriptor that treats a ragged array's instance dimension as a dimension of records."""
    sample = layout.sample_dimension
    for spec in descriptor.coordinates:
        if spec.dimension in layout.instance_dimensions:
            raise DescriptorError(
                f"coordinate {spec.name!r} labels {spec.dimension!r}, an instance dimension of the ragged arrays "
                f"along {sample!r}; write dimensions=\"{spec.dimension}\" instead of dimension=, and the server "
                "broadcasts it to the observations", path=where)
    for d in descriptor.default_grid:
        if d in layout.instance_dimensions:
            raise DescriptorError(
                f"default-grid names {d!r}, an instance dimension of the ragged arrays along {sample!r}; "
                f"records are observations: write default-grid=\"{sample}\"", path=where)


def on_samples(column: AttributeColumn, layout: FeatureLayout | None, where: str) -> AttributeColumn:
    """Return ``column`` on the sample dimension when its variable is an instance variable of ragged arrays."""
    if layout is None or not layout.ragged:
        return column
    dims = column.dimensions
    inside = [d for d in dims if d in layout.instance_dimensions]
    if not inside:
        return column
    assert layout.sample_dimension is not None
    if len(dims) != 1:
        raise DescriptorError(
            f"column {column.name!r}: variable {column.spec.variable!r} is on ({', '.join(dims)}); in ragged arrays "
            f"a column is on the sample dimension {layout.sample_dimension!r} or on one instance dimension "
            f"({', '.join(layout.instance_dimensions)})", path=where)
    return replace(column, spec=replace(column.spec, dimensions=(layout.sample_dimension,)), variable_dims=dims,
                   note=column.note or layout.broadcast_note(dims[0]))


def check_text_times(ds: GriddedDataset, column: AttributeColumn | CoordinateColumn, metas: list[FileMeta]) -> None:
    """Refuse a text time column any of whose values is not an ISO 8601 date-time, naming file and value.

    Held-in-memory columns were decoded already; the others are read whole, file
    by file, once (text times live in small report files).
    """
    if not column.decoding.text_time or (isinstance(column, AttributeColumn) and column.values is not None) \
            or isinstance(column, CoordinateColumn):
        return
    for meta, dec in zip(metas, column.file_decodings):
        if dec is None:
            continue
        try:
            decode_values(ds.handles.read(meta.path, column.spec.variable, ()), dec)
        except ValueError as exc:
            raise DataFileError(
                f"{meta.path.name}: variable {column.spec.variable!r}: {exc}; correct the file, or remove "
                f"time-format=\"iso8601\" from column {column.name!r} in the descriptor to serve it as text"
            ) from None


def refuse_unserved(metas: list[FileMeta], variable: str, column: str, where: str) -> None:
    """Refuse a column on a variable that its file's convention keeps dstp from decoding (see FileMeta.refused)."""
    for meta in metas:
        why = meta.refused.get(variable)
        if why is not None:
            raise DescriptorError(f"column {column!r}: {meta.path.name}: {why}", path=where)


def attribute_columns(
    descriptor: Descriptor, metas: list[FileMeta], dim_sizes: dict[str, int], where: str,
    layout: FeatureLayout | None, parts: list[int] | None = None,
) -> dict[str, AttributeColumn]:
    out: dict[str, AttributeColumn] = {}
    for spec in descriptor.attributes:
        if parts is not None and len(set(parts)) > 1:
            _in_one_part(spec.variable, metas, parts, descriptor)
        holder = next((m for m in metas if spec.variable in m.variables), None)
        if holder is None:
            raise DescriptorError(
                f"attribute {spec.name!r}: variable {spec.variable!r} is in none of the files", path=where
            )
        refuse_unserved(metas, spec.variable, spec.name, where)
        var = holder.variables[spec.variable]
        if var.value_dimensions != spec.dimensions:
            raise DescriptorError(
                f"attribute {spec.name!r}: descriptor says dimensions {' '.join(spec.dimensions)}, "
                f"{holder.path.name} has {' '.join(var.value_dimensions) or '(scalar)'}",
                path=where,
            )
        for d in spec.dimensions:
            if d not in dim_sizes:
                raise DescriptorError(f"attribute {spec.name!r}: unknown dimension {d!r}", path=where)
        text_time = spec.time_format == ISO8601
        if decoding_for(var.dtype, var.attrs, text_time=text_time, per_character=var.per_character) is None:
            raise DescriptorError(
                f"attribute {spec.name!r}: variable {spec.variable!r} has type {var.dtype}, "
                "which is neither numeric nor text",
                path=where,
            )
        # Files that lack the variable read as NULL along the aggregation axis; a variable
        # off that axis is read from the first file that has it.
        decodings = file_decodings(metas, spec.variable, spec.dimensions, "variable", text_time=text_time)
        dec = next(d for d in decodings if d is not None)
        column = AttributeColumn(
            spec=spec, decoding=dec, arrow_type=merge_decodings(decodings), attrs=var.attrs,
            file_decodings=decodings,
        )
        out[spec.name] = on_samples(column, layout, where)
    return out


def _in_one_part(variable: str, metas: list[FileMeta], parts: list[int], descriptor: Descriptor) -> None:
    """Refuse a data variable that files of two parts of a dataset split by variable both hold."""
    holders: dict[int, str] = {}
    for meta, part in zip(metas, parts):
        if variable in meta.variables:
            holders.setdefault(part, meta.path.name)
    if len(holders) > 1:
        shown = " and ".join(f"{name} (part {descriptor.parts[p]!r})" for p, name in holders.items())
        raise DataFileError(
            f"variable {variable!r} is in {shown}; in a dataset split by variable each data variable belongs to one "
            "part — put the files that hold it in one part, or publish the parts as separate datasets")


def parts_agree(ds: GriddedDataset, column: AttributeColumn) -> None:
    """Refuse an auxiliary or bounds column on the aggregation axis that two parts hold with different values."""
    agg = ds.descriptor.aggregate
    held = sorted({f.part for f, d in zip(ds.files, column.file_decodings) if d is not None})
    if agg is None or agg not in column.dimensions or len(held) < 2 or column.values is not None:
        return
    whole = {d: slice(0, ds.dimensions[d].size, 1) for d in column.dimensions}
    mine, my_mask = ds.read(column, whole, part=held[0])
    for part in held[1:]:
        theirs, their_mask = ds.read(column, whole, part=part)
        same_mask = (my_mask is None or not my_mask.any()) == (their_mask is None or not their_mask.any()) and (
            my_mask is None or their_mask is None or np.array_equal(my_mask, their_mask))
        valid = ~my_mask if my_mask is not None else np.ones(np.shape(mine), bool)
        if not same_mask or not np.array_equal(np.asarray(mine)[valid], np.asarray(theirs)[valid]):
            names = [next(f.path.name for f in ds.files if f.part == p) for p in (held[0], part)]
            raise DataFileError(
                f"{names[1]}: {column.spec.variable!r} differs from {names[0]}'s part; files split by variable "
                f"must agree on what they share — remove it from one part, or publish the parts apart")


def coordinate_column(
    ds: GriddedDataset, spec: CoordinateSpec, metas: list[FileMeta], dim_sizes: dict[str, int], where: str
) -> CoordinateColumn:
    # In a dataset split by variable (.parts) a coordinate is in every file of the parts that hold it.
    parts = [f.part for f in ds.files]
    held = {p for m, p in zip(metas, parts) if spec.variable in m.variables} or {parts[0]}
    first = next(m for m, p in zip(metas, parts) if p in held)
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
    refuse_unserved(metas, spec.variable, spec.name, where)
    expected = (spec.dimension,) if spec.dimension else ()
    if var.value_dimensions != expected:
        raise DescriptorError(
            f"coordinate {spec.name!r}: variable {spec.variable!r} has dimensions "
            f"{var.value_dimensions or '(scalar)'}, expected {expected or '(scalar)'}",
            path=where,
        )
    text_time = spec.time_format == ISO8601
    if decoding_for(var.dtype, var.attrs, text_time=text_time, per_character=var.per_character) is None:
        raise DescriptorError(f"coordinate {spec.name!r}: variable {spec.variable!r} is neither numeric nor text",
                              path=where)
    agg = ds.descriptor.aggregate
    on_agg = spec.dimension is not None and spec.dimension == agg
    # Off the aggregation axis its values must be the same in every file: unit labels may differ then.
    labels: list[str] | None = None if on_agg else []
    decodings = file_decodings(metas, spec.variable, expected, "coordinate", text_time=text_time, labels=labels)
    absent = [m.path.name for m, d, p, f in zip(metas, decodings, parts, ds.files) if d is None and (
        p in held or on_agg and f.count > 0)]
    if absent:
        raise DataFileError(f"{absent[0]}: coordinate variable {spec.variable!r} is missing, other files have it")
    dec = next(d for d in decodings if d is not None)
    arrow_type = merge_decodings(decodings)
    column = CoordinateColumn(spec, np.empty(0), arrow_type, dec, 1, decodings)
    if on_agg:
        assert agg is not None
        values, mask = ds.read(column, {agg: slice(0, dim_sizes[agg], 1)})
        _same_in_every_part(ds, column, sorted(held), values, mask, dim_sizes[agg])
    else:
        values, mask = same_in_every_file(ds, spec.variable, arrow_type, list(zip(metas, decodings)), expected,
                                           dim_sizes)
    if mask is not None and mask.any() and spec.dimension is None:
        role = str(var.attrs.get("cf_role", ""))
        what = (f"the {role} of a mesh (UGRID), whose attributes describe the mesh; it is structure, not data"
                if role == "mesh_topology" else "a container of attributes, left at its fill value")
        raise DataFileError(
            f"{first.path.name}: scalar coordinate {spec.name!r} holds no value: variable {spec.variable!r} is {what}; "
            f"remove <coordinate name=\"{spec.name}\"> from the descriptor (dstp publish leaves such variables out)")
    if mask is not None and mask.any():
        at = int(np.flatnonzero(np.asarray(mask).reshape(-1))[0])
        holder = next((f for f in ds.files if f.start <= at < f.start + f.count and f.part == ds.part_of(column)),
                      ds.files[0]) \
            if spec.dimension == agg else ds.files[0]
        raise DataFileError(
            f"{holder.path.name}: coordinate {spec.name!r} has missing values (first at {spec.dimension} "
            f"{at - holder.start if spec.dimension == agg else at}); a dimension's coordinate must be complete — "
            f"list {spec.variable!r} as an auxiliary coordinate (dimensions=\"{spec.dimension}\") instead, "
            "which may have NULLs")
    ds.warnings = (*ds.warnings, *(labels or ()))
    values = np.asarray(values).reshape(-1) if spec.dimension else np.asarray(values).reshape(1)
    order = monotonic(values) if spec.dimension else 1
    return CoordinateColumn(spec, values, arrow_type, dec, order, decodings, attrs=var.attrs)


def _same_in_every_part(ds: GriddedDataset, column: CoordinateColumn, held: list[int], values: np.ndarray,
                        mask: np.ndarray | None, size: int) -> None:
    """Refuse a dataset split by variable whose parts label the aggregation dimension differently."""
    agg = ds.descriptor.aggregate
    assert agg is not None
    for part in held[1:]:
        theirs, their_mask = ds.read(column, {agg: slice(0, size, 1)}, part=part)
        mine, other = np.asarray(values).reshape(-1), np.asarray(theirs).reshape(-1)
        differ = np.flatnonzero(mine != other)
        if differ.size or (mask is None) != (their_mask is None):
            at = int(differ[0]) if differ.size else 0
            names = [next(f.path.name for f in ds.files if f.part == p) for p in (held[0], part)]
            raise DataFileError(
                f"{names[1]}: coordinate {column.spec.variable!r} differs from {names[0]}'s part (index {at}: "
                f"{other[at]!r} vs {mine[at]!r}); files split by variable must share their {agg!r} — publish the "
                "parts as separate datasets")


def same_in_every_file(
    ds: GriddedDataset,
    variable: str,
    arrow_type: pa.DataType,
    holders: list[tuple[FileMeta, Decoding | None]],
    dims: tuple[str, ...],
    dim_sizes: dict[str, int],
) -> tuple[np.ndarray, np.ndarray | None]:
    """Return a variable that does not run along the aggregation axis; refuse files whose values differ."""
    dtype = numpy_dtype_of(arrow_type)
    result: tuple[np.ndarray, np.ndarray | None] | None = None
    reference = ""
    same_as_reference: tuple[Decoding, str, tuple[int, ...], bytes] | None = None
    for meta, dec in holders:
        if dec is None:
            continue
        index = [slice(0, dim_sizes[d], 1) for d in dims] + ([slice(None)] if dec.chars else [])
        raw = ds.handles.read(meta.path, variable, index)
        if raw.dtype.kind != "O":
            # the same raw bytes decoded the same way are the same values: 100,000 files' latitudes need no
            # decoding nor comparing once the first is known
            seen = (dec, raw.dtype.str, raw.shape, raw.tobytes())
            if result is not None and same_as_reference is not None and seen[0] is same_as_reference[0] \
                    and seen[1:] == same_as_reference[1:]:
                continue
            if result is None:
                same_as_reference = seen
        try:
            values, mask = decode_values(raw, dec, dtype)
        except ValueError as exc:
            raise DataFileError(f"{meta.path.name}: variable {variable!r}: {exc}") from None
        if mask is not None:  # compare only the values that are there
            neutral: Any = {"M": np.datetime64(0, "us"), "O": ""}.get(values.dtype.kind, 0)
            values = np.where(mask, values.dtype.type(neutral) if values.dtype.kind != "O" else neutral, values)
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


def auxiliary_column(
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
    refuse_unserved(metas, spec.variable, spec.name, where)
    var = holder.variables[spec.variable]
    decodings = file_decodings(metas, spec.variable, spec.dimensions, "coordinate",
                               text_time=spec.time_format == ISO8601)
    dec = next(d for d in decodings if d is not None)
    attr_spec = AttributeSpec(spec.name, spec.variable, spec.dimensions, spec.units,
                              dict(spec.cf).get("long_name"), spec.cf, spec.time_format)
    column = AttributeColumn(attr_spec, dec, merge_decodings(decodings), var.attrs, decodings, role="auxiliary")
    column = on_samples(column, ds.layout, where)
    sizes = {**dim_sizes, **{d.name: d.size for d in ds.dimensions.values()}}
    return in_memory(ds, column, metas, sizes)


def in_memory(
    ds: GriddedDataset, column: AttributeColumn, metas: list[FileMeta], dim_sizes: dict[str, int]
) -> AttributeColumn:
    """Return ``column`` with its values held in memory when small and off the aggregation axis.

    Those are the columns the planner prunes 2-D predicates with; files that
    hold them must agree, as for any other coordinate.
    """
    agg = ds.descriptor.aggregate
    size = math.prod(dim_sizes[d] for d in column.dimensions)
    limit = IN_MEMORY_TEXTS if pa.types.is_string(column.arrow_type) else IN_MEMORY_ELEMENTS
    if agg in column.dimensions or size > limit:
        return column
    if column.fixed or column.variable_dims:
        values, mask = ds.read(column, {d: slice(0, dim_sizes[d], 1) for d in column.dimensions})
    else:
        values, mask = same_in_every_file(ds, column.spec.variable, column.arrow_type,
                                           list(zip(metas, column.file_decodings)), column.dimensions, dim_sizes)
    if mask is not None and not mask.any():
        mask = None
    return AttributeColumn(column.spec, column.decoding, column.arrow_type, column.attrs, column.file_decodings,
                           column.role, column.variable_dims, column.fixed, values, mask, column.note)


def add_bounds(ds: GriddedDataset, metas: list[FileMeta]) -> None:
    """Add one column per vertex of each coordinate's CF ``bounds`` or ``climatology`` variable."""
    sizes = {d.name: d.size for d in ds.dimensions.values()}
    owners: list[tuple[str, str, tuple[str, ...]]] = []
    for c in ds.coordinates.values():
        owners.append((c.name, c.spec.variable, c.dimensions))
    for a in list(ds.auxiliaries.values()):
        owners.append((a.name, a.spec.variable, a.dimensions))
    taken = set(ds.column_names())
    for name, variable, dims in owners:
        first = next((m for m in metas if variable in m.variables), metas[0])  # a part of a split dataset
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

        def inherited(meta: FileMeta, variable: str = variable, owner: VariableMeta = owner) -> dict[str, Any]:
            """CF 7.1: bounds take units and calendar from their coordinate — in their own file."""
            own = meta.variables.get(variable, owner)
            return {k: own.attrs[k] for k in ("units", "calendar") if k in own.attrs}

        try:
            decodings = file_decodings(metas, bounds.name, bounds.dimensions, "bounds", inherit=inherited)
        except DataFileError:
            continue  # bounds that do not aggregate are not offered; the coordinate itself still is
        dec = next((d for d in decodings if d is not None), None)
        if dec is None:
            continue
        arrow_type = merge_decodings(decodings)
        for k, label in enumerate(labels):
            column_name = f"{name}_{label}"
            if column_name in taken:
                continue
            spec = AttributeSpec(column_name, bounds.name, dims, str(inherited(first).get("units", "")) or None,
                                 f"{label} bound of {name}" if n == 2 else f"vertex {k} of the cell of {name}")
            column = AttributeColumn(spec, dec, arrow_type, bounds.attrs, decodings, role="bounds",
                                     variable_dims=bounds.dimensions, fixed=((vertex_dim, k),),
                                     note=f"vertex {k} of {bounds.name}")
            ds.auxiliaries[column_name] = in_memory(ds, column, metas, sizes)
            taken.add(column_name)


def add_geographic(ds: GriddedDataset) -> None:
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


#: The name of the weight column (:func:`add_weights`).
WEIGHT_COLUMN = "area_weight"


def _cell_area_variable(ds: GriddedDataset, metas: list[FileMeta]) -> tuple[str, str] | None:
    """Return (variable, how it is known) of the files' own cell areas: the variable CF ``cell_measures =
    "area: <variable>"`` names on the data variables, else MPAS's ``areaCell(nCells)``; None if neither."""
    for column in ds.attributes.values():
        text = str(column.attrs.get("cell_measures", ""))
        words = text.replace(":", ": ").split()
        for key, value in zip(words, words[1:]):
            if key == "area:":
                found = resolve_in_group({k: v for m in metas for k, v in m.variables.items()},
                                         column.spec.variable.rsplit("/", 1)[0] if "/" in column.spec.variable else "",
                                         value)
                if any(found in m.variables for m in metas):
                    return found, "CF cell_measures"
    mpas = metas[0].variables.get("areaCell")
    if mpas is not None and mpas.dimensions == ("nCells",) and "nCells" in ds.dimensions:
        return "areaCell", "MPAS"
    return None


def _sphere_radius(ds: GriddedDataset) -> float:
    """Return the Earth radius (m) the file states: a CF grid mapping's earth_radius, MPAS's sphere_radius."""
    for mapping in ds.grid_mappings.values():
        value = dict(mapping.parameters).get("earth_radius")
        try:
            return float(str(value).split()[0])
        except (TypeError, ValueError, IndexError):
            pass
    for key in ("sphere_radius", "earth_radius"):
        value = ds.global_attrs.get(key)
        if isinstance(value, (int, float, np.number)) and float(value) > 0:
            return float(value)
    return ugrid.EARTH_RADIUS


def _mesh_areas(ds: GriddedDataset, metas: list[FileMeta]) -> tuple[tuple[str, ...], np.ndarray, str, str] | str | None:
    """Return (dimensions, areas, units, how) of the faces of a UGRID mesh the records are on; a sentence when they
    are on a mesh's faces whose areas cannot be had; None when no mesh's faces are in use."""
    first = metas[0]

    def read(variable: str) -> tuple[np.ndarray, np.ndarray | None]:
        result: tuple[np.ndarray, np.ndarray | None] | None = None
        for meta in metas:  # every file of the dataset has the one mesh, or none is weighted
            var = meta.variables.get(variable)
            if var is None:
                continue
            dec = decoding_for(var.dtype, var.attrs, var.default_fill)
            if dec is None:
                raise ValueError(f"{variable!r} is neither numeric nor text")
            values, mask = decode_values(ds.handles.read(meta.path, variable, ()), dec)
            if result is None:
                result = (values, mask)
            elif values.shape != result[0].shape or not np.array_equal(values, result[0], equal_nan=values.dtype.kind == "f"):
                raise ValueError(f"{variable!r} differs between {first.path.name} and {meta.path.name}")
        if result is None:
            raise ValueError(f"{variable!r} is in none of the files")
        return result

    found = ugrid.mesh_areas(first.variables, read, set(ds.dimensions), _sphere_radius(ds), IN_MEMORY_ELEMENTS)
    if found is None or isinstance(found, str):
        return found
    dim, areas, how = found
    return (dim,), areas, "m2", how


def add_weights(ds: GriddedDataset, metas: list[FileMeta]) -> None:
    """Add ``area_weight``: the cell area of CF ``cell_measures``, else cos(latitude) where latitude is geographic.

    ``weighted_avg(temperature, area_weight)`` is then an area-weighted mean, as
    ``xarray``'s ``weighted(np.cos(np.deg2rad(ds.lat))).mean()`` is on a regular
    latitude-longitude grid. The column has role ``weight``: it is selectable
    by name and never part of ``select *``.
    """
    if WEIGHT_COLUMN in ds.column_names() or ds.layout is not None:  # station data has no cells
        return
    sizes = {d.name: d.size for d in ds.dimensions.values()}
    own = _cell_area_variable(ds, metas)
    if own is not None:
        variable, known = own
        holder = next(m for m in metas if variable in m.variables)
        var = holder.variables[variable]
        dims = var.value_dimensions
        if dims and all(d in sizes for d in dims) and ds.descriptor.aggregate not in dims:
            decodings = file_decodings(metas, variable, dims, "variable")
            dec = next(d for d in decodings if d is not None)
            units = str(var.attrs.get("units", "")) or None
            spec = AttributeSpec(WEIGHT_COLUMN, variable, dims, units,
                                 f"cell area ({variable}, {known})", (("standard_name", "cell_area"),))
            column = AttributeColumn(spec, dec, merge_decodings(decodings), var.attrs, decodings, role="weight",
                                     note=f"the cell area {variable!r} of the files ({known})")
            ds.auxiliaries[WEIGHT_COLUMN] = in_memory(ds, column, metas, sizes)
            return
    # On a mesh, cos(latitude) is not proportional to a face's area: the faces' own areas, or none.
    areas = _mesh_areas(ds, metas)
    latitude = _geographic_latitude(ds) if areas is None else None
    if areas is None and latitude is None:
        areas = _mapped_cell_areas(ds)
    reason = latitude if isinstance(latitude, str) else areas if isinstance(areas, str) else None
    if reason is not None:
        ds.warnings = (*ds.warnings, f"no {WEIGHT_COLUMN}: {reason}")
        return
    cf: tuple[tuple[str, str], ...] = ()
    if isinstance(latitude, tuple):
        dims, lat, name = latitude
        values = np.cos(np.deg2rad(np.asarray(lat, dtype=np.float64)))
        units, how = "1", f"cos({name}) in radians, proportional to the area of a latitude-longitude cell"
    elif isinstance(areas, tuple):
        dims, values, units, how = areas
        cf = (("standard_name", "cell_area"),)
    else:
        return
    spec = AttributeSpec(WEIGHT_COLUMN, "", dims, units, f"cell area: {how}", cf)
    ds.auxiliaries[WEIGHT_COLUMN] = AttributeColumn(
        spec, Decoding(arrow_type=pa.float64()), pa.float64(), {}, (), role="weight", values=values,
        note=f"the cell area: {how}")


def _mapped_cell_areas(ds: GriddedDataset) -> tuple[tuple[str, ...], np.ndarray, str, str] | str | None:
    """Return (dimensions, areas, units, how) of the cells of a rotated or projected grid, from its grid mapping
    and 1-D axes; a sentence when the grid has a 2-D latitude but no way to its cell areas; None otherwise."""
    two_d = next((a.name for a in ds.auxiliaries.values() if len(a.dimensions) >= 2 and a.role in (
        "auxiliary", "derived") and (dict(a.spec.cf).get("standard_name") or a.attrs.get("standard_name")) == "latitude"),
        None)
    if two_d is None:
        return None
    refusal = (f"its latitude {two_d} is 2-D, and cos(latitude) is not proportional to the area of such cells; "
               "name the cell areas with CF cell_measures = \"area: VARIABLE\", or give the grid a CF grid_mapping "
               "and 1-D projection axes")
    axes = {c.spec.axis: c for c in ds.coordinates.values() if c.dimension and c.spec.axis in ("X", "Y")}
    mapping = next((m for m in ds.grid_mappings.values() if m.wkt and m.grid_mapping_name != "latitude_longitude"),
                   None)
    if mapping is None or "X" not in axes or "Y" not in axes:
        return refusal
    x, y = axes["X"], axes["Y"]
    if x.values.dtype.kind not in "if" or y.values.dtype.kind not in "if" or min(len(x.values), len(y.values)) < 2 \
            or len(x.values) * len(y.values) > IN_MEMORY_ELEMENTS:
        return refusal
    try:
        values, units, how = cell_areas(mapping, x.values, y.values, x.spec.units, y.spec.units)
    except ValueError as exc:
        return f"{refusal} ({exc})"
    dims = (str(y.dimension), str(x.dimension))
    ordered = tuple(d for d in ds.dimensions if d in dims)
    return ordered, (values if ordered == dims else values.T), units, how


def _geographic_latitude(ds: GriddedDataset) -> tuple[tuple[str, ...], np.ndarray, str] | str | None:
    """Return (dimensions, values, name) of the dataset's one 1-D geographic latitude held in memory; a sentence
    when there are several (groups each with a latitude axis of its own: no one weight serves them); else None."""
    found: dict[tuple[str, ...], tuple[np.ndarray, str]] = {}
    for c in ds.coordinates.values():
        std = dict(c.spec.cf).get("standard_name")
        units = (c.spec.units or "").replace(" ", "").lower()
        if c.dimension and (std == "latitude" or units in LAT_UNITS) and c.values.dtype.kind in "iuf":
            found.setdefault((c.dimension,), (c.values, c.name))
    for a in ds.auxiliaries.values():
        std = dict(a.spec.cf).get("standard_name") or a.attrs.get("standard_name")
        units = (a.spec.units or "").replace(" ", "").lower()
        if a.role in ("auxiliary", "derived") and len(a.dimensions) == 1 and a.values is not None \
                and a.values.dtype.kind in "iuf" and (std == "latitude" or units in LAT_UNITS) and a.mask is None:
            found.setdefault(a.dimensions, (a.values, a.name))
    if len(found) > 1:
        names = ", ".join(name for _, name in found.values())
        return (f"the dataset has several latitude axes ({names}); weight by one of them yourself, e.g. "
                "weighted_avg(x, cos(radians(LATITUDE)))")
    return next(((dims, values, name) for dims, (values, name) in found.items()), None)
