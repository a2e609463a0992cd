"""Drafting descriptors from CF/ACDD metadata: ``dstp publish FILE… --id ID``.

The draft is what a careful curator would write first: coordinates found by
name, ``axis``, ``standard_name`` and ``units``; CF bounds, auxiliary
coordinates and grid mappings left out of the attributes; the default grid
chosen as the dimensions most data variables share; files aggregated along
their record (time) dimension; title, summary, license, source and keywords
taken from the ACDD global attributes. Edit it afterwards if you like;
``dstp catalog validate`` checks the result.
"""

from __future__ import annotations

import fnmatch
import os
import re
from collections import Counter
from dataclasses import replace
from pathlib import Path
from typing import Any, Iterable, Mapping, Sequence

from dstp.catalog.cf import decoding_for, is_time_units
from dstp.catalog.descriptor import (
    DESCRIPTOR_SUFFIX,
    AttributeSpec,
    CoordinateSpec,
    CorrelationKey,
    Descriptor,
    render_descriptor,
)
from dstp.catalog.netcdf4_ import FileMeta, VariableMeta, inspect_file, resolve_in_group
from dstp.errors import CatalogError

__all__ = ["draft_descriptor", "publish", "coordinate_axis"]

_LAT_UNITS = {"degrees_north", "degree_north", "degree_n", "degrees_n", "degreen", "degreesn"}
_LON_UNITS = {"degrees_east", "degree_east", "degree_e", "degrees_e", "degreee", "degreese"}
_VERTICAL_NAMES = {
    "air_pressure", "altitude", "height", "depth", "model_level_number",
    "atmosphere_hybrid_sigma_pressure_coordinate", "atmosphere_sigma_coordinate",
    "ocean_sigma_coordinate", "ocean_s_coordinate", "height_above_reference_ellipsoid",
}
_PRESSURE_UNITS = {"pa", "hpa", "mbar", "millibar", "bar", "kpa", "dbar", "decibar"}
# Attributes describing storage, not meaning: kept out of a descriptor's <cf> list.
_ENCODING_ATTRS = {"_FillValue", "missing_value", "scale_factor", "add_offset", "_ChunkSizes",
                   "_Storage", "_DeflateLevel", "_Shuffle", "_Endianness", "_NoFill"}
_CF_KEPT = ("standard_name", "long_name", "cell_methods", "positive", "valid_min", "valid_max",
            "valid_range", "comment", "coordinates", "grid_mapping", "ancillary_variables",
            "flag_values", "flag_meanings", "bounds", "calendar")


def coordinate_axis(name: str, attrs: Mapping[str, Any]) -> str | None:
    """Return the CF axis (T, Z, Y, X) a variable is recognised as, or None."""
    axis = str(attrs.get("axis", "")).upper()
    if axis in {"T", "Z", "Y", "X"}:
        return axis
    std = str(attrs.get("standard_name", "")).lower()
    units = str(attrs.get("units", "")).replace(" ", "").lower()
    if std == "time" or is_time_units(attrs.get("units")):
        return "T"
    if std in {"latitude", "grid_latitude", "projection_y_coordinate"} or units in _LAT_UNITS:
        return "Y"
    if std in {"longitude", "grid_longitude", "projection_x_coordinate"} or units in _LON_UNITS:
        return "X"
    if std in _VERTICAL_NAMES or "positive" in attrs or units in _PRESSURE_UNITS:
        return "Z"
    lowered = name.lower()
    for axis_name, names in (("T", {"time", "t"}), ("Y", {"lat", "latitude", "y"}),
                             ("X", {"lon", "longitude", "x"}), ("Z", {"lev", "level", "plev", "depth", "z"})):
        if lowered in names:
            return axis_name
    return None


def _identifier(name: str) -> str:
    ident = re.sub(r"[^A-Za-z0-9_]", "_", name)
    if not re.match(r"[A-Za-z_]", ident):
        ident = "v_" + ident
    return ident[:63]


def _cf_pairs(attrs: Mapping[str, Any]) -> tuple[tuple[str, str], ...]:
    pairs = []
    for key in _CF_KEPT:
        if key in attrs:
            value = attrs[key]
            if hasattr(value, "tolist"):
                value = value.tolist()
            if isinstance(value, (list, tuple)):
                value = " ".join(str(v) for v in value)
            pairs.append((key, str(value)))
    return tuple(pairs)


def _resolve(variables: Mapping[str, VariableMeta], owner: str, ref: str) -> str:
    """Return the key of the variable a CF attribute of ``owner`` names: in its group, else a parent's."""
    return resolve_in_group(variables, owner.rsplit("/", 1)[0] if "/" in owner else "", ref)


def _referenced(variables: Mapping[str, VariableMeta]) -> tuple[set[str], set[str]]:
    """Return (bounds/grid-mapping names, auxiliary coordinate names) that CF attributes reference."""
    support: set[str] = set()
    auxiliary: set[str] = set()
    for var in variables.values():
        for key in ("bounds", "climatology", "grid_mapping"):
            value = var.attrs.get(key)
            if isinstance(value, str):
                refs = value.replace(":", " ").split()[:1] if key == "grid_mapping" else value.split()
                support.update(_resolve(variables, var.name, r) for r in refs)
        coords = var.attrs.get("coordinates")
        if isinstance(coords, str):
            auxiliary.update(_resolve(variables, var.name, r) for r in coords.split())
    return support & set(variables), auxiliary & set(variables)


def _basename(path: str) -> str:
    return path.rsplit("/", 1)[-1]


def _column_names(variables: Mapping[str, VariableMeta], rename: Mapping[str, str]) -> dict[str, str]:
    """Return each variable's column name: its own name, or its group path joined by _ where names clash.

    ``rename`` may name a variable by its name or by its path (``Grid/precipitation``).
    """
    counts = Counter(_basename(k) for k in variables)
    out = {}
    for key in variables:
        base = _basename(key)
        wanted = rename.get(key) or rename.get(base) or (base if counts[base] == 1 else key.replace("/", "_"))
        out[key] = _identifier(wanted)
    return out


def _dimension_variable(variables: Mapping[str, VariableMeta], dim: str) -> VariableMeta | None:
    """Return the coordinate variable of ``dim``: same name and only that dimension, nearest the root."""
    exact = variables.get(dim)
    if exact is not None and exact.dimensions == (dim,):
        return exact
    found = [v for k, v in variables.items() if _basename(k) == _basename(dim) and v.dimensions == (dim,)]
    return min(found, key=lambda v: v.name.count("/")) if found else None


def _common_glob(names: Sequence[str]) -> str:
    """Return a glob matching ``names`` that later files of the series will match too.

    ``ccm3_1990-01.nc``, ``ccm3_1990-05.nc`` give ``ccm3_*.nc``: the common prefix
    is cut back to its last separator, the common suffix forward to its first.
    """
    if len(names) == 1:
        return names[0]
    prefix = os.path.commonprefix(list(names))
    suffix = os.path.commonprefix([n[::-1] for n in names])[::-1]
    prefix = prefix.rstrip("0123456789-")
    cut = max((i + 1 for i, ch in enumerate(prefix) if not ch.isalnum()), default=0)
    prefix = prefix[:cut]
    start = next((i for i, ch in enumerate(suffix) if not ch.isalnum()), len(suffix))
    suffix = suffix[start:]
    if len(prefix) + len(suffix) > min(len(n) for n in names):
        suffix = ""
    return f"{prefix}*{suffix}"


def draft_descriptor(
    files: Sequence[Path],
    dataset_id: str,
    *,
    rename: Mapping[str, str] | None = None,
    title: str | None = None,
    group: str | None = None,
) -> Descriptor:
    """Return a descriptor drafted from the CF/ACDD metadata of ``files`` (not yet written).

    Variables in netCDF-4 groups are drafted too, named by their own name (or
    their group path joined by ``_`` where two groups hold the same name);
    ``group`` limits the draft to one group and those below it.
    """
    if not files:
        raise CatalogError("publish needs at least one netCDF file")
    paths = [Path(f).resolve() for f in files]
    folders = {p.parent for p in paths}
    if len(folders) != 1:
        raise CatalogError("all files of a dataset must be in one folder (the descriptor goes beside them)")
    folder = folders.pop()
    metas = [inspect_file(p) for p in paths]
    first = _union(metas)
    if group is not None:
        first = _within(first, group)
    names = _column_names(first.variables, dict(rename or {}))
    support, auxiliary = _referenced(first.variables)

    axes: dict[str, str] = {}  # dimension -> axis
    coordinates: list[CoordinateSpec] = []
    coord_vars: set[str] = set()
    for dim in first.dimensions:
        var = _dimension_variable(first.variables, dim)
        if var is None:
            # CF allows a 1-D variable of another name to label a dimension (lat(y)).
            var = next(
                (
                    v for v in first.variables.values()
                    if v.dimensions == (dim,) and coordinate_axis(_basename(v.name), v.attrs) and v.name not in support
                ),
                None,
            )
        if var is None or decoding_for(var.dtype, var.attrs) is None:
            if any(dim in v.dimensions for v in first.variables.values()):
                coordinates.append(CoordinateSpec(name=_identifier((rename or {}).get(dim, dim.replace("/", "_"))),
                                                  variable=dim, dimension=dim, axis="other"))
            continue
        axis = coordinate_axis(_basename(var.name), var.attrs) or "other"
        axes[dim] = axis
        coord_vars.add(var.name)
        coordinates.append(_coordinate_spec(var, dim, axis, names))
    for var in first.variables.values():
        if var.dimensions or var.name in coord_vars or var.name in support:
            continue
        scalar_axis = coordinate_axis(_basename(var.name), var.attrs)
        if (var.name in auxiliary or scalar_axis) and decoding_for(var.dtype, var.attrs) is not None:
            coord_vars.add(var.name)
            coordinates.append(_coordinate_spec(var, None, scalar_axis or "other", names))
    # Auxiliary coordinates: named by a data variable's CF `coordinates`, or a latitude/longitude
    # on dimensions it does not label (2-D lat/lon of rotated, projected and curvilinear grids).
    for var in first.variables.values():
        if not var.dimensions or var.name in coord_vars or var.name in support:
            continue
        std = str(var.attrs.get("standard_name", "")).lower()
        geographic = std in ("latitude", "longitude") and var.dimensions != (_basename(var.name),)
        if (var.name in auxiliary or geographic) and decoding_for(var.dtype, var.attrs) is not None:
            coord_vars.add(var.name)
            auxiliary.add(var.name)
            spec = _coordinate_spec(var, None, coordinate_axis(_basename(var.name), var.attrs) or "other", names)
            coordinates.append(replace(spec, dimensions=var.dimensions))

    data_vars = [
        v for v in first.variables.values()
        if v.dimensions and v.name not in coord_vars and v.name not in support and v.name not in auxiliary
        and v.name not in first.dimensions and decoding_for(v.dtype, v.attrs) is not None
        and not any(d.startswith(("nv", "bnds", "nbnd", "bounds")) for d in v.dimensions)
    ]
    if not data_vars:
        raise CatalogError(f"{first.path.name} has no numeric data variables to publish")
    grids = Counter(v.dimensions for v in data_vars)
    default_grid = max(grids, key=lambda g: (grids[g], len(g)))
    used_dims = {d for v in data_vars for d in v.dimensions}
    coordinates = [c for c in coordinates if (c.dimension is None or c.dimension in used_dims)
                   and set(c.dimensions) <= used_dims]

    aggregate = _aggregate_dimension(metas, axes) if len(metas) > 1 else None
    attributes = [
        AttributeSpec(
            name=names[v.name],
            variable=v.name,
            dimensions=v.dimensions,
            units=_str_or_none(v.attrs.get("units")),
            description=_str_or_none(v.attrs.get("long_name") or v.attrs.get("description")),
            cf=_cf_pairs(v.attrs),
        )
        for v in data_vars
    ]
    g = first.attrs
    keys = _correlation_keys(coordinates)
    keywords = re.split(r"\s*[,;]\s*", str(g.get("keywords", "")).strip()) if g.get("keywords") else []
    return Descriptor(
        id=dataset_id,
        title=title or _str_or_none(g.get("title")) or dataset_id,
        summary=_str_or_none(g.get("summary") or g.get("comment") or g.get("history")),
        license=_str_or_none(g.get("license")),
        source=_str_or_none(g.get("source") or g.get("institution")),
        keywords=tuple(k for k in keywords if k),
        files_glob=_common_glob([p.name for p in paths]),
        aggregate=aggregate,
        coordinates=tuple(coordinates),
        attributes=tuple(attributes),
        default_grid=default_grid,
        correlation_keys=keys,
        access_policy="public",
        group=(group or "").strip("/") or None,
        path=folder / f"{dataset_id}{DESCRIPTOR_SUFFIX}",
    )


def _union(metas: Sequence[FileMeta]) -> FileMeta:
    """Return the first file's metadata with the variables and dimensions only later files have added.

    Real archives drop or add a variable now and then; it is published, and
    reads as NULL on the records of the files that lack it.
    """
    head = metas[0]
    variables = dict(head.variables)
    dimensions = dict(head.dimensions)
    for meta in metas[1:]:
        for name, var in meta.variables.items():
            variables.setdefault(name, var)
        for name, size in meta.dimensions.items():
            dimensions.setdefault(name, size)
    return FileMeta(head.path, head.format, dimensions, head.unlimited, variables, head.attrs)


def _within(meta: FileMeta, group: str) -> FileMeta:
    """Return ``meta`` with only the variables of ``group`` and the groups below it (``/`` is the root alone)."""
    prefix = group.strip("/")
    if not prefix:
        variables = {k: v for k, v in meta.variables.items() if "/" not in k}
    else:
        variables = {k: v for k, v in meta.variables.items() if k.startswith(prefix + "/")}
    if not variables:
        groups = sorted({k.rsplit("/", 1)[0] for k in meta.variables if "/" in k})
        raise CatalogError(f"{meta.path.name} has no variables in group {group!r} "
                           f"(its groups: {', '.join(groups) or 'none, only the root'})")
    return FileMeta(meta.path, meta.format, meta.dimensions, meta.unlimited, variables, meta.attrs)


def _str_or_none(value: Any) -> str | None:
    if value is None:
        return None
    text = " ".join(str(value).split())
    return text or None


def _coordinate_spec(var: VariableMeta, dim: str | None, axis: str, names: Mapping[str, str]) -> CoordinateSpec:
    return CoordinateSpec(
        name=names[var.name],
        variable=var.name,
        dimension=dim,
        axis=axis,
        units=_str_or_none(var.attrs.get("units")),
        calendar=_str_or_none(var.attrs.get("calendar")) if axis == "T" else None,
        cf=tuple((k, v) for k, v in _cf_pairs(var.attrs) if k not in {"calendar", "bounds"}),
    )


def _aggregate_dimension(metas: Sequence[FileMeta], axes: Mapping[str, str]) -> str:
    first = metas[0]
    varying = [d for d in first.dimensions if len({m.dimensions.get(d) for m in metas}) > 1]
    candidates = [*first.unlimited, *[d for d, a in axes.items() if a == "T"], *varying]
    for dim in candidates:
        if all(dim in m.dimensions for m in metas):
            return dim
    raise CatalogError(
        "these files have no shared record or time dimension to aggregate along; publish them as "
        "separate datasets"
    )


def _correlation_keys(coordinates: Iterable[CoordinateSpec]) -> tuple[CorrelationKey, ...]:
    """Return universal keys: time, latitude, longitude, vertical; plain x/y for projected axes."""
    keys = []
    for c in coordinates:
        if not (c.dimension or c.dimensions) or c.axis not in {"T", "Y", "X", "Z"}:
            continue
        std = dict(c.cf).get("standard_name")
        units = (c.units or "").replace(" ", "").lower()
        name = {"T": "time", "Z": "vertical"}.get(c.axis or "")
        if c.axis == "Y":
            name = "latitude" if std == "latitude" or units in _LAT_UNITS else "y"
        if c.axis == "X":
            name = "longitude" if std == "longitude" or units in _LON_UNITS else "x"
        keys.append(CorrelationKey(name=name or "other", column=c.name, standard_name=std, units=c.units))
    return tuple(keys)


def publish(
    files: Sequence[Path],
    dataset_id: str,
    *,
    rename: Mapping[str, str] | None = None,
    title: str | None = None,
    overwrite: bool = False,
    group: str | None = None,
) -> Path:
    """Draft a descriptor for ``files`` and write it beside them; return its path."""
    desc = draft_descriptor(files, dataset_id, rename=rename, title=title, group=group)
    assert desc.path is not None
    if desc.path.exists() and not overwrite:
        raise CatalogError(f"{desc.path} exists; pass --overwrite to replace it")
    matched = sorted(p.name for p in desc.path.parent.iterdir() if fnmatch.fnmatch(p.name, desc.files_glob))
    wanted = sorted(Path(f).name for f in files)
    if matched != wanted:
        raise CatalogError(
            f"the drafted glob {desc.files_glob!r} would also match {sorted(set(matched) - set(wanted))}; "
            "move the files into a folder of their own"
        )
    desc.path.write_bytes(render_descriptor(desc))
    return desc.path
