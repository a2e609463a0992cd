"""What a netCDF/HDF5 file's header says: :class:`FileMeta` and :class:`VariableMeta`, read from an open file.

    read_header(ds, path) -> FileMeta      dimensions (scoped by group), variables, attributes, HDF-EOS5 fields

The caller opens the file and holds ``NETCDF_LOCK`` (:mod:`.netcdf4_`, which
owns the handle cache and the lock); this module only reads the header of the
``netCDF4.Dataset`` it is handed, so the rules of a header — group scoping of
dimensions, char arrays as text or per character, HDF-EOS5 swaths and grids,
a truncated classic file — live apart from how files are opened and cached.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Callable, Iterator, Mapping, Sequence

import numpy as np

from dstp.catalog import hdfeos, ugrid
from dstp.catalog.cf import cf_spelling
from dstp.catalog.classic import classic_expected_size
from dstp.errors import DataFileError

__all__ = ["FileMeta", "VariableMeta", "computed_values", "read_header", "resolve_in_group",
           "string_length_dimensions", "unmappable"]


@dataclass(frozen=True, slots=True)
class VariableMeta:
    """What a file says about one variable, read once at catalog load."""

    name: str
    dimensions: tuple[str, ...]
    shape: tuple[int, ...]
    dtype: np.dtype
    attrs: dict[str, Any]
    #: netCDF's default fill value for the type, when the variable has no ``_FillValue`` and is pre-filled.
    default_fill: Any = None
    #: A ``char`` array whose last dimension is not a string length (see :func:`_per_character`): each
    #: character is a value of its own, as ``TEMP_QC(N_PROF, N_LEVELS)`` holds one flag per level.
    per_character: bool = False

    @property
    def is_chars(self) -> bool:
        """Return whether this is a ``char`` array, whose last dimension is the string length."""
        return self.dtype.kind == "S" and bool(self.dimensions) and not self.per_character

    @property
    def value_dimensions(self) -> tuple[str, ...]:
        """Return the dimensions of its values: a char array's string length is not one of them.

        ``station_name(station, name_strlen)`` holds one text per station, so its
        values are on ``(station,)``; every other variable's are on its dimensions.
        """
        return self.dimensions[:-1] if self.is_chars else self.dimensions


@dataclass(frozen=True, slots=True)
class FileMeta:
    """What a file says about itself: format, dimensions, variables, global attributes."""

    path: Path
    format: str
    dimensions: dict[str, int]
    unlimited: tuple[str, ...]
    variables: dict[str, VariableMeta]
    attrs: dict[str, Any]
    #: Where each dimension that netCDF does not share lives: a swath or grid of an HDF-EOS5 file, an HDF5 group
    #: without dimension scales (``phony_dim_N``). Dimensions of different homes are never paired in a record;
    #: a dimension without a home is a netCDF dimension, shared by name (see :meth:`GriddedDataset.untied`).
    homes: dict[str, str] = field(default_factory=dict)
    #: Variables the file's own convention makes coordinates (HDF-EOS5 geolocation fields).
    coordinates: frozenset[str] = frozenset()
    #: Variables dstp does not serve, with the reason (an HDF-EOS field with an Offset of unstated sign).
    refused: dict[str, str] = field(default_factory=dict)
    #: What a curator should know about the file (an HDF-EOS grid projection that is not read).
    notes: tuple[str, ...] = ()


#: A dimension of up to this many points is always believed (its coordinate takes at most 32 MiB).
DIMENSION_ALWAYS_BELIEVED = 4 * 2**20
#: Beyond that, a file must hold at least one byte per this many points of each of its dimensions.
DIMENSION_POINTS_PER_FILE_BYTE = 8

_PHONY = re.compile(r"phony_dim_\d+")


def _attrs(obj: Any) -> dict[str, Any]:
    """Return a variable's or file's attributes; one-element arrays become numpy scalars.

    Numeric attributes keep their numpy type: CF decoding depends on it (a
    float32 ``scale_factor`` unpacks to float32).
    """
    out: dict[str, Any] = {}
    for key in obj.ncattrs():
        value = obj.getncattr(key)
        if isinstance(value, np.ndarray) and value.size == 1 and value.dtype.kind in "iufb":
            value = value.reshape(())[()]
        out[key] = value
    return out


def _numpy_dtype(dtype: Any) -> np.dtype:
    try:
        return np.dtype(dtype)
    except TypeError:  # VLen, compound and enum types: never published as columns
        return np.dtype(object)


def _default_fill(var: Any, attrs: Mapping[str, Any]) -> Any:
    """Return the value an unwritten element of ``var`` reads back as, if it has no ``_FillValue`` (``attrs``: its
    attributes as the file spells them)."""
    if "_FillValue" in attrs:
        return None
    try:
        value = var.get_fill_value()  # None when the variable is not pre-filled (NOFILL)
    except (AttributeError, TypeError, RuntimeError):
        return None
    if value is None or np.ndim(value) != 0:
        return None
    return value


def resolve_in_group(variables: Mapping[str, Any], group: str, name: str) -> str:
    """Return the key of variable ``name`` seen from ``group``: in it, else in its parents, else ``name``.

    netCDF-4's scoping rule for dimensions, applied to the names CF attributes
    and descriptors give (``coordinates="lat lon"`` inside ``/Grid``).
    """
    if name.startswith("/"):
        return name.strip("/")
    group = group.strip("/")
    while group:
        key = f"{group}/{name}"
        if key in variables:
            return key
        group = group.rsplit("/", 1)[0] if "/" in group else ""
    return name


def _check_classic_length(path: Path, name: str) -> None:
    try:
        expected = classic_expected_size(path)
    except ValueError as exc:
        raise DataFileError(f"{name}: unreadable netCDF classic header ({exc})") from exc
    size = path.stat().st_size
    # Allow the last variable's 4-byte alignment padding to be absent.
    if expected is not None and size < expected - 3:
        raise DataFileError(
            f"{name} is truncated: it has {size} bytes but its header describes {expected}; "
            "copy the file again"
        )


def _groups(ds: Any, prefix: str = "") -> Iterator[tuple[str, Any]]:
    """Yield (path, group) for a file's root ("") and every group below it ("Grid", "Grid/Sub")."""
    yield prefix, ds
    for name, group in ds.groups.items():
        yield from _groups(group, f"{prefix}/{name}" if prefix else name)


def _dimension_keys(ds: Any) -> Callable[[str, Any], str]:
    """Return the key of a dimension as a variable of a group sees it: ``key(group path, dimension)``.

    netCDF-4 scopes dimensions by group, and CF (1.8, 2.7) finds a dimension's
    coordinate variable by proximity: the variable of the dimension's name in the
    referring group, else in its parents. Most files define each name once, or
    in several groups with the same size and the same coordinate values (or
    none), and a dimension is then known by its plain name. Where one name has
    several sizes, or coordinate variables with different values (``/Europe/lat``
    and ``/Africa/lat``, both of 4 points; or one ``lat`` dimension in the root
    labelled by each group's own ``lat``), each is known by the path of the group
    whose variable labels it — or, without one, that defines it: ``Europe/lat``.

    A file without groups (most) defines each name once: every dimension is known by its name, without the
    walk below (a tenth of a millisecond a file, a tenth of a cold index build's reading).
    """
    if not ds.groups:
        return _plain_key
    groups = dict(_groups(ds))

    def defined_in(dim: Any) -> str:
        return str(dim.group().path).strip("/")

    def labelled_in(path: str, dim: Any) -> str | None:
        """Return the group, from ``path`` upward, whose variable named like ``dim`` is 1-D on it."""
        home = defined_in(dim)
        while True:
            var = groups[path].variables.get(dim.name)
            if var is not None and var.ndim == 1 and var.get_dims()[0].name == dim.name \
                    and defined_in(var.get_dims()[0]) == home:
                return path
            if path == home or not path:
                return None
            path = path.rsplit("/", 1)[0] if "/" in path else ""

    uses: dict[tuple[str, str], tuple[str, str | None, int]] = {}  # (group, name) -> (defined, labelled, size)
    for path, group in groups.items():
        for dim in group.dimensions.values():
            uses[(path, dim.name)] = (path, labelled_in(path, dim), len(dim))
        for var in group.variables.values():
            for dim in var.get_dims():
                uses[(path, dim.name)] = (defined_in(dim), labelled_in(path, dim), len(dim))
    variants: dict[str, set[tuple[str, str | None, int]]] = {}
    for (_, name), use in uses.items():
        variants.setdefault(name, set()).add(use)

    def coordinate(path: str, name: str) -> np.ndarray:
        return np.asarray(groups[path].variables[name][:])

    plain: set[str] = set()
    for name, found in variants.items():
        if len(found) == 1:
            plain.add(name)
            continue
        labels = [coordinate(c, name) for c in sorted({c for _, c, _ in found if c is not None})]
        same_size = len({n for _, _, n in found}) == 1
        if same_size and all(np.array_equal(labels[0], x, equal_nan=x.dtype.kind == "f") for x in labels[1:]):
            plain.add(name)

    def key(path: str, dim: Any) -> str:
        if dim.name in plain:
            return str(dim.name)
        defined, labelled, _ = uses[(path, dim.name)]
        owner = labelled if labelled is not None else defined
        return f"{owner}/{dim.name}" if owner else str(dim.name)

    return key


def _plain_key(path: str, dim: Any) -> str:
    return str(dim.name)


def read_header(ds: Any, path: Path, local: Path | None = None) -> FileMeta:
    """Return the metadata of an open file (the caller holds NETCDF_LOCK); ``local``: where its bytes are, when
    ``path`` names an object of a store."""
    try:
        key = _dimension_keys(ds)
        variables: dict[str, VariableMeta] = {}
        dimensions: dict[str, int] = {}
        unlimited: list[str] = []
        homes: dict[str, str] = {}

        # By Dimension object (each lives in its group's ``dimensions`` while ``ds`` is open, so ids are not
        # reused): a variable's shape is len() of its dimensions (netCDF4-python's Variable.shape), asked of
        # netCDF-C once per dimension, not once per variable — len() of an unlimited dimension looks at every
        # variable; and a dimension met again in the same group is known by the same name.
        lengths: dict[int, int] = {}
        named: dict[tuple[str, int], str] = {}

        def length(dim: Any) -> int:
            found = lengths.get(id(dim))
            if found is None:
                found = lengths[id(dim)] = int(len(dim))
            return found

        def seen(gpath: str, dim: Any) -> str:
            known = named.get((gpath, id(dim)))
            if known is not None:
                return known
            name = key(gpath, dim)
            if name not in dimensions:
                dimensions[name] = length(dim)
            if dim.isunlimited() and name not in unlimited:
                unlimited.append(name)
            if _PHONY.fullmatch(dim.name):  # netCDF-C's name for an HDF5 axis without a dimension scale
                homes.setdefault(name, f"group /{str(dim.group().path).strip('/')}")
            named[(gpath, id(dim))] = name
            return name

        for gpath, group in _groups(ds):
            for dim in group.dimensions.values():
                seen(gpath, dim)
            for name, var in group.variables.items():
                full = f"{gpath}/{name}" if gpath else name
                of = var.get_dims()
                dims = tuple(seen(gpath, d) for d in of)
                attrs = _attrs(var)
                variables[full] = VariableMeta(
                    name=full,
                    dimensions=dims,
                    shape=tuple(length(d) for d in of),
                    dtype=_numpy_dtype(var.dtype),
                    attrs=cf_spelling(attrs),
                    default_fill=_default_fill(var, attrs),
                )
        variables = _per_character(variables)
        if ds.data_model.startswith("NETCDF3"):
            _check_classic_length(local or path, path.name)
        homes.update(ugrid.location_homes(variables))  # a mesh's nodes, edges and faces are never paired
        meta = FileMeta(path=path, format=ds.data_model, dimensions=dimensions, unlimited=tuple(unlimited),
                        variables=variables, attrs=_attrs(ds), homes=homes)
        structures = _eos_structures(ds, path)
        return _with_eos_dimensions(meta, structures) if structures else meta
    except DataFileError:
        raise
    except (OSError, RuntimeError) as exc:
        raise DataFileError(f"cannot read the metadata of {path}: {exc}") from exc
    except Exception as exc:  # noqa: BLE001 - netCDF4-python fails on some HDF5 layouts with any exception
        raise unmappable(path, exc) from exc


def _eos_structures(ds: Any, path: Path) -> tuple[hdfeos.EosStructure, ...]:
    """Return the swaths and grids of an HDF-EOS5 file's ``StructMetadata.0`` (``()`` for other files)."""
    group = ds.groups.get(hdfeos.METADATA_GROUP)
    if group is None or "StructMetadata.0" not in group.variables:
        return ()
    parts = []
    for k in range(100):  # StructMetadata.0, .1, …: one text cut in pieces of 32,000 characters
        var = group.variables.get(f"StructMetadata.{k}")
        if var is None:
            break
        value = var[...]
        value = value.tobytes() if isinstance(value, np.ndarray) and value.dtype.kind == "S" else \
            (value.reshape(-1)[0] if isinstance(value, np.ndarray) else value)
        parts.append(value.decode("utf-8", "replace") if isinstance(value, bytes) else str(value))
    try:
        return hdfeos.read_structures("".join(parts).replace("\0", ""))
    except ValueError as exc:
        raise DataFileError(f"{path.name}: its HDF-EOS5 StructMetadata.0 cannot be read ({exc}); without it the "
                            "dimensions of its swaths are unknown — it is not published") from exc


def _with_eos_dimensions(meta: FileMeta, structures: tuple[hdfeos.EosStructure, ...]) -> FileMeta:
    """Return ``meta`` with the fields of its HDF-EOS5 swaths and grids on the dimensions StructMetadata.0 names."""
    try:
        naming = hdfeos.name_dimensions(structures, {k: v.shape for k, v in meta.variables.items()}, meta.dimensions)
    except ValueError as exc:
        raise DataFileError(f"{meta.path.name}: {exc}") from exc
    variables: dict[str, VariableMeta] = {}
    refused: dict[str, str] = {}
    for name, var in meta.variables.items():
        dims = naming.dimensions.get(name)
        if dims is None:
            variables[name] = var
            continue
        attrs = hdfeos.cf_attributes(var.attrs, naming.fields[name], name in naming.geolocation)
        variables[name] = replace(var, dimensions=dims, attrs=attrs)
        why = hdfeos.refusal(var.attrs, name)
        if why is not None:
            refused[name] = why
    for name, axis in naming.computed.items():
        variables[name] = VariableMeta(name, (axis.dimension,), axis.values.shape, axis.values.dtype, dict(axis.attrs))
    used = {d for v in variables.values() for d in v.dimensions}
    dimensions = {d: n for d, n in meta.dimensions.items() if d in used or not _PHONY.fullmatch(d)}
    for d, n in naming.sizes.items():
        dimensions.setdefault(d, n)
    homes = {d: h for d, h in meta.homes.items() if d in dimensions}
    homes.update(naming.homes)
    unlimited = tuple(dict.fromkeys([*(d for d in meta.unlimited if d in dimensions), *naming.unlimited]))
    return replace(meta, dimensions=dimensions, unlimited=unlimited, variables=variables, homes=homes,
                   coordinates=meta.coordinates | naming.geolocation, refused={**meta.refused, **refused},
                   notes=(*meta.notes, *naming.notes))


def computed_values(ds: Any, path: Path, variable: str) -> np.ndarray | None:
    """Return the values of a coordinate computed from an HDF-EOS5 grid definition, or None if not one."""
    if not hdfeos.is_computed(variable):
        return None
    try:
        ds[variable]
        return None  # the file has a variable of that name: it is read
    except (KeyError, IndexError):
        pass
    for s in _eos_structures(ds, path):
        if s.kind == "grid" and s.name == variable.split("/")[2]:
            axes, _ = hdfeos.grid_axes(s)
            found = axes.get(variable.rsplit("/", 1)[1])
            if found is not None:
                return found[1]
    return None


def _per_character(variables: dict[str, VariableMeta]) -> dict[str, VariableMeta]:
    """Return ``variables`` with the char arrays whose last dimension is not a string length marked per character.

    A char array's last dimension is its string length only where that
    dimension is nothing else: no coordinate variable has its name, and every
    variable on it is a char array that ends with it (``PLATFORM_NUMBER(N_PROF,
    STRING8)``). Otherwise -- Argo's ``TEMP_QC(N_PROF, N_LEVELS)``, whose
    ``N_LEVELS`` also holds ``TEMP`` -- every character is a value on the grid.
    This is xarray's rule (``conventions.decode_cf_variables``, ``stackable``).
    """
    held_otherwise: set[str] = set()
    for var in variables.values():
        chars = var.dtype.kind == "S" and bool(var.dimensions)
        held_otherwise.update(var.dimensions if not chars else var.dimensions[:-1])
    marked = dict(variables)
    for name, var in variables.items():
        if var.dtype.kind == "S" and var.dimensions:
            last = var.dimensions[-1]
            if last in held_otherwise or last in variables:
                marked[name] = replace(var, per_character=True)
    return marked


def unmappable(path: Path, exc: Exception) -> DataFileError:
    """Return the error for a file netCDF4-python failed on with an exception of its own (not a C error)."""
    return DataFileError(
        f"cannot read {path.name}: netCDF4-python cannot map its HDF5 layout to netCDF "
        f"({type(exc).__name__}: {exc}); it fails so on dimension scales kept in another group than the data "
        "they label, for one — rewrite the file with the scales beside the data (h5py), then publish it again"
    )


def string_length_dimensions(metas: Sequence[FileMeta]) -> set[str]:
    """Return the dimensions that are only ever the string length of char arrays (``name_strlen``).

    They are not dimensions of any column, so files may differ in them (one
    file's station names are 8 characters long, the next file's 12).
    """
    lengths: set[str] = set()
    others: set[str] = set()
    for meta in metas:
        for var in meta.variables.values():
            if var.is_chars:
                lengths.add(var.dimensions[-1])
            others.update(var.value_dimensions)
    return lengths - others
