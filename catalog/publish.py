"""Drafting descriptors from CF/ACDD metadata: ``dstp publish FILE… --id ID``.

The draft is what a careful curator would write first: coordinates found by
name, ``axis``, ``standard_name`` and ``units``; CF bounds, auxiliary
coordinates and grid mappings left out of the attributes; the default grid
chosen as the dimensions most data variables share; files aggregated along
their record (time) dimension; title, summary, license, source and keywords
taken from the ACDD global attributes. Station, profile and trajectory
files (CF ``featureType``) and record-dimension report files are drafted as
tables of observations; text variables holding ISO 8601 times are marked
``time-format="iso8601"``. :func:`publish` then opens the draft as the server
will and writes it only if the server would serve it. Edit it afterwards if
you like; ``dstp catalog validate`` checks the result.
"""

from __future__ import annotations

import fnmatch
import re
from collections import Counter
from dataclasses import replace
from pathlib import Path
from typing import Any, Iterable, Mapping, Sequence

import numpy as np

from dstp.catalog.cf import (
    ISO8601,
    LAT_UNITS,
    LON_UNITS,
    coordinate_axis,
    decode_values,
    decoding_for,
    looks_like_time,
    parse_iso_times,
)
from dstp.catalog.descriptor import (
    DESCRIPTOR_SUFFIX,
    AttributeSpec,
    CoordinateSpec,
    CorrelationKey,
    Descriptor,
    parse_descriptor,
    render_descriptor,
)
from dstp.catalog import ugrid
from dstp.catalog.binding import check_dimension_sizes
from dstp.catalog._draft_files import (
    basename,
    common_glob,
    part_globs,
    resolve_reference,
    split_by_variable,
    union,
    within_group,
)
from dstp.catalog.dsg import feature_type, ragged_structure
from dstp.catalog.facts import FactsReader, FileFacts, Headers, Prefetch, Unreadable, gather_many
from dstp.catalog.netcdf4_ import (
    FileHandles,
    FileMeta,
    FileSource,
    VariableMeta,
    inspect_file,
    string_length_dimensions,
)
from dstp.errors import CatalogError, DataFileError, DescriptorError

__all__ = ["draft_descriptor", "drafted_summary", "drafted_title", "publish", "coordinate_axis"]

# Attributes describing storage, not meaning: kept out of a descriptor's <cf> list.
_ENCODING_ATTRS = {"_FillValue", "missing_value", "scale_factor", "add_offset", "_ChunkSizes",
                   "_Storage", "_DeflateLevel", "_Shuffle", "_Endianness", "_NoFill"}
_CF_KEPT = ("standard_name", "long_name", "cell_methods", "positive", "valid_min", "valid_max",
            "valid_range", "comment", "coordinates", "grid_mapping", "ancillary_variables",
            "flag_values", "flag_meanings", "bounds", "calendar", "cf_role")


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


def _referenced(variables: Mapping[str, VariableMeta]) -> tuple[set[str], set[str]]:
    """Return (bounds/grid-mapping names, auxiliary coordinate names) that CF attributes reference."""
    support: set[str] = set()
    auxiliary: set[str] = set()
    for var in variables.values():
        for key in ("bounds", "climatology", "grid_mapping"):
            value = var.attrs.get(key)
            if isinstance(value, str):
                refs = value.replace(":", " ").split()[:1] if key == "grid_mapping" else value.split()
                support.update(resolve_reference(variables, var.name, r) for r in refs)
        coords = var.attrs.get("coordinates")
        if isinstance(coords, str):
            auxiliary.update(resolve_reference(variables, var.name, r) for r in coords.split())
    return support & set(variables), auxiliary & set(variables)


def _column_names(variables: Mapping[str, VariableMeta], rename: Mapping[str, str]) -> dict[str, str]:
    """Return each variable's column name: its own name, or its group path joined by _ where names clash.

    ``rename`` may name a variable by its name or by its path (``Grid/precipitation``).
    """
    counts = Counter(basename(k) for k in variables)
    out = {}
    for key in variables:
        base = basename(key)
        wanted = rename.get(key) or rename.get(base) or (base if counts[base] == 1 else key.replace("/", "_"))
        out[key] = _identifier(wanted)
    return out


def _dimension_variable(variables: Mapping[str, VariableMeta], dim: str) -> VariableMeta | None:
    """Return the coordinate variable of ``dim``: same name and only that dimension, nearest the root."""
    exact = variables.get(dim)
    if exact is not None and exact.dimensions == (dim,):
        return exact
    found = [v for k, v in variables.items() if basename(k) == basename(dim) and v.dimensions == (dim,)]
    return min(found, key=lambda v: v.name.count("/")) if found else None


def drafted_title(attributes: Sequence[AttributeSpec], glob: str) -> str:
    """Return a title for files without an ACDD ``title``: what the variables are (their long names), and which
    files ("2 metre temperature and mean sea level pressure (era5_*.nc)") — never the bare id."""
    named = list(dict.fromkeys(a.description or a.name for a in attributes))
    shown = named[:3]
    words = ", ".join(shown[:-1]) + f" and {shown[-1]}" if len(shown) > 1 else shown[0]
    if len(named) > 3:
        words = ", ".join(shown) + f" and {len(named) - 3} more"
    return f"{words[:1].upper()}{words[1:]} ({glob})"


def drafted_summary(attributes: Sequence[AttributeSpec], files: int) -> str:
    """Return a summary for files with no ACDD ``summary`` nor CF ``comment``: each variable with its units."""
    shown = [f"{a.description or a.name} ({a.name}{', ' + a.units if a.units else ''})" for a in attributes[:8]]
    more = f" and {len(attributes) - 8} more" if len(attributes) > 8 else ""
    return (f"{', '.join(shown)}{more}, from {files} file{'s' if files != 1 else ''}. Drafted by dstp publish: the "
            "files have no summary attribute; write one in the descriptor.")


def draft_descriptor(
    files: Sequence[Path],
    dataset_id: str,
    *,
    rename: Mapping[str, str] | None = None,
    title: str | None = None,
    group: str | None = None,
    files_glob: str | None = None,
    reader: FileSource | None = None,
) -> Descriptor:
    """Return a descriptor drafted from the CF/ACDD metadata of ``files`` (not yet written).

    ``files_glob`` is the descriptor's files glob (default: one drafted from the file names); ``reader`` what
    the files are read through (default: each is opened here).

    Variables in netCDF-4 groups are drafted too, named by their own name (or
    their group path joined by ``_`` where two groups hold the same name);
    ``group`` limits the draft to one group and those below it. Station,
    profile and trajectory files (CF discrete sampling geometries) and
    record-dimension report files are drafted as tables of observations
    (see :mod:`.dsg`); text variables holding times are recognised by
    :func:`~dstp.catalog.cf.looks_like_time` and their values.
    """
    if not files:
        raise CatalogError("publish needs at least one netCDF file")
    paths = [Path(f).resolve() for f in files]
    folders = {p.parent for p in paths}
    if len(folders) != 1:
        raise CatalogError("all files of a dataset must be in one folder (the descriptor goes beside them)")
    folder = folders.pop()
    metas = [reader.inspect(p) for p in paths] if reader is not None else [inspect_file(p) for p in paths]
    # The server's check, before a coordinate is read: a 9 KB file declaring time = 10^9 grew this to 23 GB.
    for meta in metas:
        check_dimension_sizes([meta], set(meta.dimensions), {})
    first = union(metas)
    if group is not None:
        first = within_group(first, group)
    rename = dict(rename or {})
    names = _column_names(first.variables, rename)
    support, auxiliary = _referenced(first.variables)
    auxiliary |= set(first.coordinates) & set(first.variables)  # HDF-EOS5 geolocation fields
    support |= ugrid.structure_variables(first.variables)  # UGRID topology and connectivity: structure
    auxiliary |= ugrid.location_coordinates(first.variables) - support
    structure = ragged_structure(metas[0])
    kind = feature_type(first.attrs)
    lengths = string_length_dimensions(metas)
    instance = set(structure.instance_dimensions) if structure else set()
    sample = structure.sample_dimension if structure else None
    support |= set(structure.variables) if structure else set()
    handles = FileHandles() if reader is None else None
    source: FileSource = reader if reader is not None else handles  # type: ignore[assignment]
    try:
        text_times = _text_times(metas, first.variables, source)
        records = _record_dimensions(first, text_times) | ({sample} if sample else set())
        coordinates, coord_vars, axes = _dimension_coordinates(first, metas, names, rename, support, records,
                                                               lengths | instance, source)
    finally:
        if handles is not None:
            handles.close()

    def holds_value(name: str) -> bool:
        """Return whether a scalar variable holds a value in the files (not a container of attributes, such as a
        grid mapping or a UGRID topology, left at its fill value): only then is it a scalar coordinate."""
        if reader is not None:
            return _complete(metas, name, reader)
        once = FileHandles()
        try:
            return _complete(metas, name, once)
        finally:
            once.close()

    def servable(var: VariableMeta) -> bool:
        return decoding_for(var.dtype, var.attrs, per_character=var.per_character) is not None \
            and var.name not in first.refused

    for var in first.variables.values():
        if var.value_dimensions or var.name in coord_vars or var.name in support:
            continue
        scalar_axis = "T" if var.name in text_times else coordinate_axis(basename(var.name), var.attrs)
        if (var.name in auxiliary or scalar_axis or "cf_role" in var.attrs) and servable(var) \
                and holds_value(var.name):
            coord_vars.add(var.name)
            spec = _coordinate_spec(var, None, scalar_axis or "other", names)
            coordinates.append(replace(spec, time_format=ISO8601 if var.name in text_times else None))
    # Auxiliary coordinates: named by a data variable's CF `coordinates`, or a latitude/longitude
    # on dimensions it does not label (2-D lat/lon of rotated, projected and curvilinear grids);
    # in station, profile and trajectory files also the feature ids (cf_role), the instance
    # dimensions' own coordinate variables and what CF says is a time, latitude or longitude.
    dsg = bool(kind or structure)
    for var in first.variables.values():
        dims = var.value_dimensions
        if not dims or var.name in coord_vars or var.name in support:
            continue
        std = str(var.attrs.get("standard_name", "")).lower()
        geographic = std in ("latitude", "longitude") and dims != (basename(var.name),)
        on_records = dsg or bool(set(dims) & records)
        located = on_records and ("cf_role" in var.attrs or var.name in text_times or _dsg_axis(var) is not None)
        instance_coordinate = len(dims) == 1 and dims[0] in instance and basename(var.name) == dims[0]
        if (var.name in auxiliary or geographic or located or instance_coordinate) and servable(var):
            coord_vars.add(var.name)
            auxiliary.add(var.name)
            axis = "T" if var.name in text_times else coordinate_axis(basename(var.name), var.attrs)
            spec = _coordinate_spec(var, None, axis or "other", names)
            coordinates.append(replace(spec, dimensions=dims, time_format=ISO8601 if var.name in text_times else None))

    def on_table(var: VariableMeta) -> bool:
        """In ragged arrays a column is on the sample dimension or on one instance dimension."""
        dims = var.value_dimensions
        return not instance or not set(dims) & instance or (len(dims) == 1 and dims[0] in instance)

    data_vars = [
        v for v in first.variables.values()
        if v.value_dimensions and v.name not in coord_vars and v.name not in support and v.name not in auxiliary
        and v.name not in first.dimensions and servable(v) and on_table(v)
        and not any(d.startswith(("nv", "bnds", "nbnd", "bounds")) for d in v.value_dimensions)
    ]
    if not data_vars:
        raise CatalogError(f"{first.path.name} has no numeric data variables (nor text ones) to publish")
    # Records of ragged arrays are observations: an instance variable is a column on the sample dimension.
    record_dims = {v.name: (sample,) if sample and set(v.value_dimensions) & instance else v.value_dimensions
                   for v in data_vars}
    grids = Counter(record_dims.values())
    literal = {v.value_dimensions for v in data_vars}
    default_grid = max((g for g in grids if g in literal), key=lambda g: (grids[g], len(g)), default=None) \
        or max(grids, key=lambda g: (grids[g], len(g)))
    used_dims = {d for v in data_vars for d in v.value_dimensions} | instance | \
        {d for k in first.coordinates if k in first.variables for d in first.variables[k].value_dimensions}
    # A dimension no data variable uses is published with its coordinate variable (``date(date)`` beside a
    # grid on time × lat × lon), as xarray shows it; one without a coordinate variable is left out.
    labelled = {c.dimension for c in coordinates if c.dimension and not c.dimensions
                and c.variable in first.variables and c.dimension not in lengths | instance}
    coordinates = [c for c in coordinates if (c.dimension is None or c.dimension in used_dims | labelled)
                   and set(c.dimensions) <= used_dims | labelled]
    coordinates = _unique_index_names(coordinates, first.variables)

    aggregate = None
    groups = split_by_variable(metas, {v.name for v in data_vars}) if not (kind or structure) else [metas]
    parts: tuple[str, ...] = ()
    if len(groups) > 1:
        parts = part_globs(groups, [p.name for p in paths])
        series = [g for g in groups if len(g) > 1]
        found = {_aggregate_dimension(g, axes, exclude=lengths | instance) for g in series}
        if len(found) > 1:
            raise CatalogError(f"these files are split by variable, and their series run along different "
                               f"dimensions ({', '.join(sorted(found))}); publish each series as its own dataset")
        if not found:  # one file per part: still aggregate along time, so each series can grow by files
            timed = [m for m in metas if set(m.unlimited) | {d for d, a in axes.items() if a == "T"} & set(m.dimensions)]
            candidates = [d for m in timed for d in (*m.unlimited, *[d for d, a in axes.items() if a == "T"])]
            found = {next((d for d in candidates if all(d in m.dimensions for m in timed)), "")} - {""}
        aggregate = found.pop() if found else None
    elif len(metas) > 1:
        aggregate = sample or _aggregate_dimension(metas, axes, exclude=lengths | instance)
    attributes = [
        AttributeSpec(
            name=names[v.name],
            variable=v.name,
            dimensions=v.value_dimensions,
            units=_str_or_none(v.attrs.get("units")),
            description=_str_or_none(v.attrs.get("long_name") or v.attrs.get("description")),
            cf=_cf_pairs(v.attrs),
            time_format=ISO8601 if v.name in text_times else None,
        )
        for v in data_vars
    ]
    g = first.attrs
    keys = _correlation_keys(coordinates)
    keywords = re.split(r"\s*[,;]\s*", str(g.get("keywords", "")).strip()) if g.get("keywords") else []
    glob = common_glob([f.name for f in paths])
    return Descriptor(
        id=dataset_id,
        title=title or _str_or_none(g.get("title")) or drafted_title(attributes, glob),
        # ACDD summary or CF comment; never history, which logs how the files were made, not what they hold.
        summary=_str_or_none(g.get("summary") or g.get("comment")) or drafted_summary(attributes, len(paths)),
        license=_str_or_none(g.get("license")),
        source=_str_or_none(g.get("source") or g.get("institution")),
        keywords=tuple(k for k in keywords if k),
        files_glob=files_glob or glob,
        aggregate=aggregate,
        parts=parts,
        coordinates=tuple(coordinates),
        attributes=tuple(attributes),
        default_grid=default_grid,
        correlation_keys=keys,
        access_policy="public",
        group=(group or "").strip("/") or None,
        path=folder / f"{dataset_id}{DESCRIPTOR_SUFFIX}",
    )


def _dimension_coordinates(
    first: FileMeta,
    metas: Sequence[FileMeta],
    names: Mapping[str, str],
    rename: Mapping[str, str],
    support: set[str],
    records: set[str],
    skipped: set[str],
    handles: FileSource,
) -> tuple[list[CoordinateSpec], set[str], dict[str, str]]:
    """Return the coordinates labelling dimensions, their variables, and each labelled dimension's axis.

    A dimension is labelled by a numeric variable of its name, else (CF allows
    ``lat(y)``) by a 1-D variable recognised as an axis -- unless the dimension
    is a record dimension, where several such variables (time, lat, lon of a
    report) are auxiliary coordinates, or the variable has missing values.
    Otherwise it is labelled by its index. String lengths and the instance
    dimensions of ragged arrays are not record dimensions: ``skipped``.
    """
    axes: dict[str, str] = {}
    coordinates: list[CoordinateSpec] = []
    coord_vars: set[str] = set()
    for dim in first.dimensions:
        if dim in skipped:
            continue
        var = _dimension_variable(first.variables, dim)
        if var is not None and (var.dtype.kind not in "iuf" or not _complete(metas, var.name, handles)):
            var = None  # text, or with missing values: an auxiliary coordinate, and the index labels the dimension
        if var is None and dim not in records:
            # CF allows a 1-D variable of another name to label a dimension (lat(y)).
            var = next(
                (
                    v for v in first.variables.values()
                    if v.dimensions == (dim,) and v.dtype.kind in "iuf" and v.name not in support
                    and coordinate_axis(basename(v.name), v.attrs)
                    and (len(basename(v.name)) > 1 or coordinate_axis("", v.attrs))  # T is a temperature
                    and _complete(metas, v.name, handles)
                ),
                None,
            )
        if var is None:
            if any(dim in v.value_dimensions for v in first.variables.values()):
                coordinates.append(CoordinateSpec(name=_identifier(rename.get(dim, dim.replace("/", "_"))),
                                                  variable=dim, dimension=dim, axis="other"))
            continue
        axis = coordinate_axis(basename(var.name), var.attrs) or "other"
        axes[dim] = axis
        coord_vars.add(var.name)
        coordinates.append(_coordinate_spec(var, dim, axis, names))
    return coordinates, coord_vars, axes


def _complete(metas: Sequence[FileMeta], variable: str, handles: FileSource) -> bool:
    """Return whether a variable has a value everywhere in every file that holds it (a coordinate must)."""
    for meta in metas:
        var = meta.variables.get(variable)
        if var is None:
            continue
        dec = decoding_for(var.dtype, var.attrs, var.default_fill, per_character=var.per_character)
        if dec is None:
            return False
        try:
            _, mask = decode_values(handles.read(meta.path, variable, ()), dec)
        except ValueError as exc:
            raise DataFileError(f"{meta.path.name}: variable {variable!r}: {exc}") from None
        if mask is not None and mask.any():
            return False
    return True


def _dsg_axis(var: VariableMeta) -> str | None:
    """Return the axis CF states for a variable of a station/profile/trajectory file (not guessed from names)."""
    return coordinate_axis(var.name, var.attrs, geographic_only=True)


def _record_dimensions(meta: FileMeta, text_times: set[str]) -> set[str]:
    """Return the record dimensions: those on which two or more variables locate the records.

    An old report file keeps ``time_obs(report)``, ``lat(report)`` and
    ``lon(report)``: none of them labels ``report`` (a report is not *at* a
    latitude), they are auxiliary coordinates of its records, and may have
    missing values.
    """
    found: dict[str, set[str]] = {}
    for var in meta.variables.values():
        dims = var.value_dimensions
        if len(dims) != 1 or basename(var.name) == dims[0]:
            continue
        axis = "T" if var.name in text_times else _dsg_axis(var)
        if axis is not None:
            found.setdefault(dims[0], set()).add(axis)
    return {dim for dim, axes in found.items() if len(axes) >= 2}


def _text_times(metas: Sequence[FileMeta], variables: Mapping[str, VariableMeta], handles: FileSource) -> set[str]:
    """Return the text variables to publish as times; refuse one meant as a time whose values do not parse.

    CF's ``standard_name = time`` (or ``axis = T``) on a text variable says its
    values are times: each must parse as ISO 8601. A name or ``long_name`` that
    only hints at a time (``time_obs``) makes it a time when all its values
    parse, leaves it text when none do, and is refused when some do and some
    do not (a time with a broken value, which a scientist should hear about).
    """
    out: set[str] = set()
    for name, var in variables.items():
        if var.dtype.kind not in "SU":
            continue
        meant = looks_like_time(basename(name), var.attrs)
        if meant is False:
            continue
        parsed = failed = 0
        bad: tuple[str, str] | None = None
        for meta in metas:
            file_var = meta.variables.get(name)
            if file_var is None:
                continue
            dec = decoding_for(file_var.dtype, file_var.attrs, file_var.default_fill,
                               per_character=file_var.per_character)
            assert dec is not None
            texts, mask = decode_values(handles.read(meta.path, name, ()), dec)
            flat = np.asarray(texts, dtype=object).reshape(-1)
            present = flat if mask is None else flat[~np.asarray(mask).reshape(-1)]
            for text in dict.fromkeys(present.tolist()):  # each distinct text once, in file order
                try:
                    parse_iso_times(np.array([text], dtype=object))
                    parsed += 1
                except ValueError:
                    failed += 1
                    bad = bad or (meta.path.name, str(text))
        if bad is not None and (meant or parsed):
            why = "standard_name = time" if meant else "its name"
            raise CatalogError(
                f"{bad[0]}: variable {name!r} holds times ({why}; {parsed} distinct value(s) parse as ISO 8601) but "
                f"{bad[1]!r} is not an ISO 8601 date-time (YYYY-MM-DDTHH:MM:SSZ); correct that value in the "
                "file, or publish without the file that holds it")
        if parsed and not failed:
            out.add(name)
    return out


def _unique_index_names(coordinates: list[CoordinateSpec], variables: Mapping[str, VariableMeta]
                        ) -> list[CoordinateSpec]:
    """Return ``coordinates`` with a dimension's index column renamed ``<dim>_index`` where a variable took its name.

    ``station(station)`` holding station names is text, so it cannot label the
    dimension: it is an auxiliary coordinate called ``station``, and the index
    of the dimension ``station_index`` (a name no variable has, which is how the
    server knows to count rather than read).
    """
    taken = Counter(c.name for c in coordinates)
    out = []
    for c in coordinates:
        if c.dimension and c.variable == c.dimension and c.axis == "other" and taken[c.name] > 1 \
                and c.variable in variables:
            name = _identifier(f"{c.name}_index")
            while name in variables or name in taken:
                name = _identifier(f"{name}_")
            c = replace(c, name=name, variable=name)
        out.append(c)
    return out


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


def _aggregate_dimension(metas: Sequence[FileMeta], axes: Mapping[str, str], exclude: set[str]) -> str:
    first = metas[0]
    varying = [d for d in first.dimensions if len({m.dimensions.get(d) for m in metas}) > 1 and d not in exclude]
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
            name = "latitude" if std == "latitude" or units in LAT_UNITS else "y"
        if c.axis == "X":
            name = "longitude" if std == "longitude" or units in LON_UNITS else "x"
        keys.append(CorrelationKey(name=name or "other", column=c.name, standard_name=std, units=c.units))
    return tuple(keys)


#: What publishing reads ahead of each file: small scalars and 1-D variables (the descriptor is not drafted yet;
#: whatever else the draft reads is read when it does).
_EVERY_SMALL = Prefetch(frozenset(), frozenset(), most_dimensions=1)


def publish(
    files: Sequence[Path],
    dataset_id: str,
    *,
    rename: Mapping[str, str] | None = None,
    title: str | None = None,
    overwrite: bool = False,
    group: str | None = None,
    files_glob: str | None = None,
    processes: int = 1,
    notes: list[str] | None = None,
) -> Path:
    """Draft a descriptor for ``files`` and write it beside them; return its path.

    Each file is opened once: its header and small variables are read (by ``processes`` helper processes when
    there are many), and both the draft and the check that the server would serve it read from that.
    ``files_glob`` is the descriptor's glob (default: drafted from the names); it must match ``files`` exactly.
    ``notes`` gets what was drafted rather than taken from the files (a title, a summary), for the caller to say.
    """
    paths = sorted(Path(f).resolve() for f in files)
    if not paths:
        raise CatalogError("publish needs at least one netCDF file")
    handles = FileHandles()
    try:
        found = list(gather_many(handles, [(p, _EVERY_SMALL) for p in paths], Headers(), processes))
        bad = [f for f in found if isinstance(f, Unreadable)]
        if bad:
            more = f" (and {len(bad) - 1} more)" if len(bad) > 1 else ""
            raise DataFileError(f"{bad[0].reason}{more}")
        facts = {f.path: f for f in found if isinstance(f, FileFacts)}
        gone = [p.name for p in paths if p not in facts]
        if gone:
            raise CatalogError(f"{gone[0]} vanished while it was read; nothing was written")
        reader = FactsReader(handles, facts)
        desc = draft_descriptor(paths, dataset_id, rename=rename, title=title, group=group, files_glob=files_glob,
                                reader=reader)
        assert desc.path is not None
        metas = [reader.inspect(p) for p in paths]
        if notes is not None:
            stated = union(metas).attrs
            if title is None and not _str_or_none(stated.get("title")):
                notes.append(f"the files have no title attribute (ACDD): the title was drafted from their variables, "
                             f"{desc.title!r}; give a better one with --title or in {desc.path.name}")
            if not _str_or_none(stated.get("summary") or stated.get("comment")):
                notes.append("the files have no summary attribute (ACDD): the summary was drafted from their "
                             f"variables; write one in {desc.path.name}")
        if desc.path.exists() and not overwrite:
            raise CatalogError(f"{desc.path} exists; pass --overwrite to replace it")
        matched = sorted(p.name for p in desc.path.parent.iterdir() if fnmatch.fnmatch(p.name, desc.files_glob))
        wanted = sorted(p.name for p in paths)
        if matched != wanted:
            what = "drafted glob" if files_glob is None else "glob"
            raise CatalogError(
                f"the {what} {desc.files_glob!r} would also match {sorted(set(matched) - set(wanted))}; "
                "move the files into a folder of their own"
            )
        text = _note_units_per_file(render_descriptor(desc), desc, metas)
        _check_servable(text, desc.path, handles, reader, [(p, facts[p].identity) for p in paths])
    finally:
        handles.close()
    desc.path.write_bytes(text)
    return desc.path


def _note_units_per_file(text: bytes, desc: Descriptor, metas: Sequence[FileMeta]) -> bytes:
    """Return the descriptor with a comment above each time coordinate whose files state its units differently
    (monthly files counting days from their own month): its ``units`` are only the first file's."""
    from lxml import etree

    from dstp.catalog.cf import is_time_units

    metas = sorted(metas, key=lambda m: m.path.name)
    root = etree.fromstring(text)
    noted = False
    for c in desc.coordinates:
        stated = []
        for meta in metas:
            var = meta.variables.get(c.variable or c.name)
            units = str(var.attrs.get("units", "")) if var is not None else ""
            if is_time_units(units):
                stated.append((units, meta.path.name))
        distinct = list(dict.fromkeys(u for u, _ in stated))
        el = next((e for e in root.iter("{*}coordinate") if e.get("name") == c.name), None)
        if len(distinct) < 2 or el is None:
            continue
        note = (f" {c.name}: the files state its units differently ({stated[0][0]} in {stated[0][1]} … "
                f"{stated[-1][0]} in {stated[-1][1]}, {len(distinct)} different); each file's times are decoded "
                "with its own units, so units= below is only the first file's ")
        comment = etree.Comment(note.replace("--", "- -"))
        previous = el.getprevious()
        comment.tail = (previous.tail if previous is not None else el.getparent().text) or "\n"
        el.addprevious(comment)
        noted = True
    return etree.tostring(root, xml_declaration=True, encoding="UTF-8") if noted else text


def _check_servable(text: bytes, path: Path, handles: FileHandles, reader: FactsReader,
                    files: Sequence[tuple[Path, Any]]) -> None:
    """Open the drafted descriptor as the server will; raise CatalogError with its reason and a fix if it would refuse.

    ``dstp publish`` never writes a descriptor the server refuses: the draft is
    parsed back from its XML and opened with :meth:`GriddedDataset.open`, the
    code ``dstp serve`` runs on it (from what was read of the files already).
    """
    from dstp.catalog.dataset import GriddedDataset  # the server's own checks; dataset does not import publish

    try:
        GriddedDataset.open(parse_descriptor(text, path=path), handles, files=files, reader=reader)
    except DescriptorError as exc:
        raise CatalogError(
            f"dstp drafted a descriptor its server would refuse ({exc.message.split(': ', 1)[-1]}); nothing was "
            f"written. Publish a subset of the files, or write {path.name} by hand (docs/publishing.md) — and "
            "please report the files: the draft should have been servable") from exc
    except CatalogError as exc:
        raise CatalogError(
            f"the server would refuse these files as one dataset: {exc}; nothing was written. "
            "Make the files agree, or publish them as separate datasets") from exc
