"""HDF-EOS5 files: the dimension names, geolocation and grid definitions that only ``StructMetadata.0`` holds.

NASA's Aura products (MLS, OMI, TES, HIRDLS Level 2 swaths, OMI Level 3 grids) keep their fields in
``/HDFEOS/SWATHS/<swath>/Data Fields`` and ``/Geolocation Fields`` (grids: ``/HDFEOS/GRIDS/<grid>/Data Fields``;
zonal means: ``/HDFEOS/ZAS/<za>/Data Fields``). Their dimensions are named only in the ODL text of
``/HDFEOS INFORMATION/StructMetadata.0``; HDF5 itself has no dimension scales there, so netCDF-C invents
``phony_dim_N`` per group and size — different names for the ``nTimes`` of the data and of the geolocation.

:func:`read_structures` parses that text (:func:`parse_odl`: the ``GROUP=``/``OBJECT=`` blocks and
``Key=value`` lines HDF-EOS writes; no ODL package on PyPI is kept up and the dialect is small), and
:func:`name_dimensions` gives every field its dimensions in the order of its ``DimList``:

* a dimension is known by its name (``nTimes``), or by ``<swath>/<name>`` where several swaths or grids
  define the name — different swaths are never assumed to share a dimension;
* every dimension has a *home* (``swath 'O3'``): dimensions of different homes are never paired in one record
  (the query planner refuses such a query; see :meth:`~dstp.catalog.dataset.GriddedDataset.untied`);
* a ``DimensionMap`` with offset 0 and increment 1 makes the geolocation dimension the data dimension; any
  other map (or an ``IndexDimensionMap``) keeps the geolocation dimension apart, in a home of its own:
  dstp does not interpolate geolocation onto data;
* geolocation fields are coordinates of their swath;
* a grid in geographic projection (``HE5_GCTP_GEO``) gets ``lat(YDim)`` and ``lon(XDim)``, computed from
  ``UpperLeftPointMtrs``/``LowerRightMtrs`` (packed degrees-minutes-seconds), ``GridOrigin`` and
  ``PixelRegistration`` (:func:`grid_axes`); other projections are served on their ``XDim``/``YDim`` indices
  with a note saying so.

HDF-EOS attributes are read as their CF equivalents where the meaning is the same (:func:`cf_attributes`):
``MissingValue`` as ``missing_value``, ``Units`` as ``units``, ``Title`` as ``long_name``, ``ScaleFactor`` as
``scale_factor``. A field with a nonzero ``Offset`` is refused (:func:`refusal`): HDF-EOS products disagree
whether it is added or subtracted, and a guess would be a wrong answer.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any, Iterator, Mapping

import numpy as np

__all__ = [
    "ComputedAxis",
    "EosField",
    "EosNaming",
    "EosStructure",
    "METADATA_GROUP",
    "cf_attributes",
    "grid_axes",
    "is_computed",
    "name_dimensions",
    "parse_odl",
    "read_structures",
    "refusal",
]

#: The group that holds ``StructMetadata.0`` (and ``.1``, … when longer than 32,000 characters).
METADATA_GROUP = "HDFEOS INFORMATION"
_FOLDERS = {"swath": "SWATHS", "grid": "GRIDS", "zonal average": "ZAS"}
_GEOGRAPHIC = {"HE5_GCTP_GEO", "GCTP_GEO"}


# -- ODL ---------------------------------------------------------------------------------------------------------

@dataclass(frozen=True, slots=True)
class Block:
    """A ``GROUP=name`` or ``OBJECT=name`` block of ODL text and what it holds."""

    name: str
    items: tuple[tuple[str, Any], ...]

    def get(self, key: str, default: Any = None) -> Any:
        return next((v for k, v in self.items if k == key and not isinstance(v, Block)), default)

    def blocks(self) -> list[Block]:
        return [v for _, v in self.items if isinstance(v, Block)]

    def block(self, name: str) -> Block | None:
        return next((b for b in self.blocks() if b.name == name), None)


def _statements(text: str) -> Iterator[tuple[str, str]]:
    """Yield (key, raw value) of each ``key=value`` statement; a value is quoted, parenthesised or one line."""
    i, n = 0, len(text)
    while i < n:
        while i < n and text[i] in " \t\r\n\0":
            i += 1
        if i >= n:
            return
        eq = text.find("=", i)
        line_end = text.find("\n", i)
        if eq < 0 or (0 <= line_end < eq):  # a line without "=": END, or noise
            if text[i:(line_end if line_end >= 0 else n)].strip().strip("\0") in ("END", ""):
                i = n if line_end < 0 else line_end + 1
                continue
            raise ValueError(f"unexpected text {text[i:(line_end if line_end >= 0 else n)].strip()[:60]!r}")
        key = text[i:eq].strip()
        j = eq + 1
        while j < n and text[j] in " \t":
            j += 1
        if j < n and text[j] == '"':
            end = text.find('"', j + 1)
            if end < 0:
                raise ValueError(f"unterminated text after {key}=")
            yield key, text[j:end + 1]
            i = end + 1
        elif j < n and text[j] == "(":
            depth, k, quoted = 0, j, False
            while k < n:
                c = text[k]
                if c == '"':
                    quoted = not quoted
                elif not quoted and c == "(":
                    depth += 1
                elif not quoted and c == ")":
                    depth -= 1
                    if depth == 0:
                        break
                k += 1
            if k >= n:
                raise ValueError(f"unbalanced parentheses after {key}=")
            yield key, text[j:k + 1]
            i = k + 1
        else:
            end = text.find("\n", j)
            end = n if end < 0 else end
            yield key, text[j:end].strip().strip("\0")
            i = end + 1


def _split_top(text: str) -> list[str]:
    parts, depth, quoted, start = [], 0, False, 0
    for k, c in enumerate(text):
        if c == '"':
            quoted = not quoted
        elif not quoted and c == "(":
            depth += 1
        elif not quoted and c == ")":
            depth -= 1
        elif not quoted and depth == 0 and c == ",":
            parts.append(text[start:k])
            start = k + 1
    parts.append(text[start:])
    return [p.strip() for p in parts if p.strip()]


def _value(raw: str) -> Any:
    """Return an ODL value: text for quoted or bare words, int or float for numbers, tuple for (…)."""
    raw = raw.strip()
    if raw.startswith('"'):
        return raw[1:-1]
    if raw.startswith("("):
        return tuple(_value(p) for p in _split_top(raw[1:-1]))
    try:
        return int(raw)
    except ValueError:
        pass
    try:
        return float(raw)
    except ValueError:
        return raw


def parse_odl(text: str) -> Block:
    """Return ODL text (``StructMetadata.0``) as nested blocks; ValueError where it is not ODL."""
    stack: list[tuple[str, list[tuple[str, Any]]]] = [("", [])]
    for key, raw in _statements(text):
        if key in ("GROUP", "OBJECT"):
            stack.append((str(_value(raw)), []))
        elif key in ("END_GROUP", "END_OBJECT"):
            if len(stack) == 1:
                raise ValueError(f"{key}={raw} closes nothing")
            name, items = stack.pop()
            stack[-1][1].append((name, Block(name, tuple(items))))
        else:
            stack[-1][1].append((key, _value(raw)))
    if len(stack) != 1:
        raise ValueError(f"block {stack[-1][0]!r} is never closed")
    return Block("", tuple(stack[0][1]))


# -- structures ---------------------------------------------------------------------------------------------------

@dataclass(frozen=True, slots=True)
class EosField:
    """A field of a swath, grid or zonal mean: the group that holds it and its dimensions, outermost first."""

    name: str
    group: str
    dims: tuple[str, ...]
    unlimited: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class DimensionMap:
    """A swath's ``DimensionMap``: geolocation dimension ``geo`` samples data dimension ``data``."""

    geo: str
    data: str
    offset: int | None
    increment: int | None

    @property
    def identity(self) -> bool:
        return self.offset == 0 and self.increment == 1


@dataclass(frozen=True, slots=True)
class EosStructure:
    """One swath, grid or zonal mean of ``StructMetadata.0``."""

    kind: str
    name: str
    dimensions: Mapping[str, int]
    fields: tuple[EosField, ...]
    maps: tuple[DimensionMap, ...] = ()
    #: The grid's definition (XDim, YDim, UpperLeftPointMtrs, …) as written, for grids.
    grid: Mapping[str, Any] = field(default_factory=dict)

    @property
    def path(self) -> str:
        return f"HDFEOS/{_FOLDERS[self.kind]}/{self.name}"

    @property
    def home(self) -> str:
        return f"{self.kind} {self.name!r}"


def _names(value: Any) -> tuple[str, ...]:
    if value is None:
        return ()
    return tuple(str(v) for v in (value if isinstance(value, tuple) else (value,)))


def _fields(block: Block, group: str) -> list[EosField]:
    out = []
    for obj in block.blocks():
        name = next((v for k, v in obj.items if k.endswith("FieldName") and isinstance(v, str)), None)
        if name is None:
            continue
        dims = _names(obj.get("DimList"))
        maxdims = _names(obj.get("MaxdimList"))
        unlimited = tuple(d for d, m in zip(dims, maxdims) if m.lower() == "unlim")
        out.append(EosField(name, group, dims, unlimited))
    return out


def read_structures(text: str) -> tuple[EosStructure, ...]:
    """Return the swaths, grids and zonal means ``StructMetadata.0`` describes; ValueError if it is unreadable."""
    root = parse_odl(text)
    out: list[EosStructure] = []
    for top, kind, name_key in (("SwathStructure", "swath", "SwathName"), ("GridStructure", "grid", "GridName"),
                                ("ZaStructure", "zonal average", "ZaName")):
        holder = root.block(top)
        if holder is None:
            continue
        for block in holder.blocks():
            name = block.get(name_key)
            if not isinstance(name, str):
                continue
            dims: dict[str, int] = {}
            dim_block = block.block("Dimension")
            for obj in dim_block.blocks() if dim_block else []:
                dim_name, size = obj.get("DimensionName"), obj.get("Size")
                if isinstance(dim_name, str) and isinstance(size, int):
                    dims[dim_name] = size
            fields: list[EosField] = []
            for group_name, folder in (("GeoField", "Geolocation Fields"), ("DataField", "Data Fields"),
                                       ("ProfileField", "Profile Fields")):
                sub = block.block(group_name)
                if sub is not None:
                    fields += _fields(sub, folder)
            maps = []
            for map_group in ("DimensionMap", "IndexDimensionMap"):
                sub = block.block(map_group)
                for obj in sub.blocks() if sub else []:
                    geo, data = obj.get("GeoDimension"), obj.get("DataDimension")
                    if isinstance(geo, str) and isinstance(data, str):
                        offset, increment = obj.get("Offset"), obj.get("Increment")
                        maps.append(DimensionMap(geo, data, offset if isinstance(offset, int) else None,
                                                 increment if isinstance(increment, int) else None))
            grid = {k: v for k, v in block.items if not isinstance(v, Block)} if kind == "grid" else {}
            if kind == "grid":
                for axis in ("XDim", "YDim"):
                    if isinstance(grid.get(axis), int):
                        dims.setdefault(axis, grid[axis])
            out.append(EosStructure(kind, name, dims, tuple(fields), tuple(maps), grid))
    return tuple(out)


# -- attributes --------------------------------------------------------------------------------------------------

_NO_UNITS = {"", "nounits", "none", "n/a", "na", "unitless"}
_DEGREES = {"deg", "degs", "degree", "degrees", "deg.", "degrees_north", "degrees_east", "degree_north",
            "degree_east"}


def _text(value: Any) -> str | None:
    if isinstance(value, bytes):
        value = value.decode("utf-8", "replace")
    return value.strip() if isinstance(value, str) else None


def cf_attributes(attrs: Mapping[str, Any], name: str, geolocation: bool) -> dict[str, Any]:
    """Return a field's attributes with the CF names of HDF-EOS ones added (the file's own are kept as they are)."""
    out = dict(attrs)
    if "missing_value" not in out and "MissingValue" in out:
        out["missing_value"] = out["MissingValue"]
    units = _text(out.get("Units"))
    if units is not None and units.lower() in _NO_UNITS and _text(out.get("units")) == units:
        del out["units"]  # read under CF's name by cf_spelling; "NoUnits" is HDF-EOS for none
    if "units" not in out and units is not None and units.lower() not in _NO_UNITS:
        out["units"] = units
    title = _text(out.get("Title"))
    if "long_name" not in out and title:
        out["long_name"] = title
    scale = out.get("ScaleFactor")
    if "scale_factor" not in out and isinstance(scale, (int, float, np.number)) and float(scale) != 1.0:
        out["scale_factor"] = scale
    lowered = name.lower()
    if geolocation and lowered in ("latitude", "longitude"):
        out.setdefault("standard_name", lowered)
        if str(out.get("units", "deg")).lower() in _DEGREES:
            out["units"] = "degrees_north" if lowered == "latitude" else "degrees_east"
    return out


def refusal(attrs: Mapping[str, Any], name: str) -> str | None:
    """Return why a field is not served (a nonzero HDF-EOS ``Offset``), or None."""
    offset = attrs.get("Offset")
    if isinstance(offset, np.ndarray) and offset.size == 1:
        offset = offset.reshape(())[()]
    if "add_offset" in attrs or not isinstance(offset, (int, float, np.number)) or float(offset) == 0.0:
        return None
    scale = attrs.get("ScaleFactor")
    scale_text = f"{float(scale):g}" if isinstance(scale, (int, float, np.number)) else "absent"
    return (f"field {name!r} has HDF-EOS Offset = {float(offset):g} (ScaleFactor = {scale_text}); "
            "HDF-EOS products differ on whether the offset is added or subtracted, so dstp does not guess: "
            "not served. Add CF scale_factor/add_offset attributes to the file to serve it")


# -- naming dimensions -------------------------------------------------------------------------------------------

@dataclass(frozen=True, slots=True)
class ComputedAxis:
    """A coordinate HDF-EOS defines by formula, not by values in the file: a geographic grid's lat or lon."""

    dimension: str
    values: np.ndarray
    attrs: Mapping[str, Any]


@dataclass(frozen=True, slots=True)
class EosNaming:
    """What ``StructMetadata.0`` says about a file's variables, keyed as the netCDF view keys them."""

    #: variable key -> its dimension keys
    dimensions: dict[str, tuple[str, ...]]
    #: dimension key -> size
    sizes: dict[str, int]
    unlimited: tuple[str, ...]
    #: dimension key -> its home (see the module docstring)
    homes: dict[str, str]
    #: variable keys of geolocation fields (coordinates of their swath)
    geolocation: frozenset[str]
    #: field variable key -> the field's name (for attribute reading)
    fields: dict[str, str]
    #: key of each computed coordinate (``HDFEOS/GRIDS/<grid>/lat``) -> its values
    computed: dict[str, ComputedAxis]
    notes: tuple[str, ...]


def is_computed(variable: str) -> bool:
    """Return whether ``variable`` names a coordinate computed from a grid definition (see :func:`grid_axes`)."""
    parts = variable.split("/")
    return len(parts) == 4 and parts[0] == "HDFEOS" and parts[1] == "GRIDS" and parts[3] in ("lat", "lon")


def name_dimensions(structures: tuple[EosStructure, ...], shapes: Mapping[str, tuple[int, ...]],
                    netcdf_sizes: Mapping[str, int]) -> EosNaming:
    """Return the dimensions of every field ``structures`` list and the file holds (``shapes``: variable key ->
    shape); ValueError, naming the field, where a field's shape contradicts its DimList."""
    defined: dict[str, int] = {}
    for s in structures:
        for d in {*s.dimensions, *(d for f in s.fields for d in f.dims)}:
            defined[d] = defined.get(d, 0) + 1

    def key(s: EosStructure, dim: str) -> str:
        plain = defined.get(dim, 0) == 1
        return dim if plain else f"{s.name}/{dim}"

    dims_of: dict[str, tuple[str, ...]] = {}
    sizes: dict[str, int] = {}
    homes: dict[str, str] = {}
    unlimited: list[str] = []
    geolocation: set[str] = set()
    fields: dict[str, str] = {}
    notes: list[str] = []
    computed: dict[str, ComputedAxis] = {}
    where: dict[str, str] = {}
    for s in structures:
        tied = {m.geo: m.data for m in s.maps if m.identity}
        apart = {m.geo: m for m in s.maps if not m.identity and m.geo != m.data}

        def keyed(dim: str, s: EosStructure = s, tied: dict[str, str] = tied) -> str:
            return key(s, tied.get(dim, dim))

        for f in s.fields:
            var = f"{s.path}/{f.group}/{f.name}"
            shape = shapes.get(var)
            if shape is None:
                continue
            if len(shape) != len(f.dims):
                raise ValueError(f"StructMetadata.0 gives field {var!r} the dimensions ({', '.join(f.dims)}), but it "
                                 f"has {len(shape)}; the file is inconsistent")
            keys = tuple(keyed(d) for d in f.dims)
            for d, k, n in zip(f.dims, keys, shape):
                if k in sizes and sizes[k] != n:
                    raise ValueError(
                        f"StructMetadata.0 puts field {var!r} on dimension {d!r} of {s.kind} {s.name!r}, but it has "
                        f"{n} points there where {where[k]!r} has {sizes[k]}; the file is inconsistent")
                sizes.setdefault(k, n)
                where.setdefault(k, var)
                if d in apart:
                    m = apart[d]
                    how = (f"offset {m.offset}, increment {m.increment}" if m.offset is not None
                           else "an index map")
                    homes[k] = (f"{s.kind} {s.name!r}, geolocation dimension {d!r} (mapped onto {m.data!r} by "
                                f"{how}; dstp does not interpolate geolocation)")
                else:
                    homes.setdefault(k, s.home)
                if d in f.unlimited and k not in unlimited:
                    unlimited.append(k)
            dims_of[var] = keys
            fields[var] = f.name
            if f.group == "Geolocation Fields":
                geolocation.add(var)
        if s.kind == "grid":
            held = (sizes.get(key(s, "XDim")), sizes.get(key(s, "YDim")))
            axes: dict[str, tuple[str, np.ndarray, dict[str, Any]]] = {}
            note: str | None = None
            if None in held:
                note = None  # no field on the grid's axes: nothing to locate
            elif held != (s.grid.get("XDim"), s.grid.get("YDim")):  # the text alone never sizes an array
                note = (f"grid {s.name!r}: StructMetadata.0 says XDim = {s.grid.get('XDim')}, YDim = "
                        f"{s.grid.get('YDim')}, but its fields have {held[0]} × {held[1]} points; no lat/lon")
            else:
                axes, note = grid_axes(s)
            if note:
                notes.append(note)
            for name, (dim, values, attrs) in axes.items():
                k = key(s, dim)
                var = f"{s.path}/{name}"
                if var in shapes or sizes.get(k, len(values)) != len(values):
                    continue
                sizes.setdefault(k, len(values))
                homes.setdefault(k, s.home)
                computed[var] = ComputedAxis(k, values, attrs)
    for k, n in list(sizes.items()):
        if k in netcdf_sizes and netcdf_sizes[k] != n:
            raise ValueError(f"dimension {k!r} has {n} points in StructMetadata.0 and {netcdf_sizes[k]} in the file")
    return EosNaming(dims_of, sizes, tuple(unlimited), homes, frozenset(geolocation), fields, computed, tuple(notes))


# -- grids -------------------------------------------------------------------------------------------------------

def _degrees(packed: float) -> float:
    """Return degrees from HDF-EOS packed DMS (DDDMMMSSS.SS); ValueError if minutes or seconds exceed 59."""
    sign = -1.0 if packed < 0 else 1.0
    v = abs(float(packed))
    deg = int(v // 1_000_000)
    minutes = int((v - deg * 1_000_000) // 1000)
    seconds = v - deg * 1_000_000 - minutes * 1000
    if minutes >= 60 or seconds >= 60:
        raise ValueError(f"{packed!r} is not packed degrees-minutes-seconds (DDDMMMSSS.SS)")
    return sign * (deg + minutes / 60 + seconds / 3600)


def _pair(value: Any) -> tuple[float, float] | None:
    if isinstance(value, tuple) and len(value) == 2 and all(isinstance(v, (int, float)) for v in value):
        return float(value[0]), float(value[1])
    return None


def grid_axes(s: EosStructure) -> tuple[dict[str, tuple[str, np.ndarray, dict[str, Any]]], str | None]:
    """Return ({"lat": ("YDim", values, attrs), "lon": …}, note) of a geographic grid; ({}, why) for others.

    ``UpperLeftPointMtrs``/``LowerRightMtrs`` of a ``HE5_GCTP_GEO`` grid are packed DMS degrees of the
    grid's outer corners; ``GridOrigin`` says which corner element [0, 0] is at, and ``PixelRegistration``
    whether values are at cell centres (the default) or corners.
    """
    g = s.grid
    projection = str(g.get("Projection", ""))
    nx, ny = g.get("XDim"), g.get("YDim")
    if projection not in _GEOGRAPHIC:
        return {}, (f"grid {s.name!r}: projection {projection or '(none)'} is not read (dstp reads HE5_GCTP_GEO); "
                    "its fields are served on XDim/YDim indices, without latitude and longitude")
    ul, lr = _pair(g.get("UpperLeftPointMtrs")), _pair(g.get("LowerRightMtrs"))
    if not isinstance(nx, int) or not isinstance(ny, int) or ul is None or lr is None or nx < 1 or ny < 1:
        return {}, f"grid {s.name!r}: XDim, YDim, UpperLeftPointMtrs or LowerRightMtrs missing; no lat/lon"
    if max(abs(v) for v in (*ul, *lr)) < 1000:  # under 1 arc-minute as DMS: plain degrees, written wrongly
        return {}, (f"grid {s.name!r}: corners {ul} and {lr} look like plain degrees, not the packed "
                    "degrees-minutes-seconds (DDDMMMSSS.SS) HDF-EOS defines; no lat/lon rather than a guess")
    try:
        west, north, east, south = _degrees(ul[0]), _degrees(ul[1]), _degrees(lr[0]), _degrees(lr[1])
    except ValueError as exc:
        return {}, f"grid {s.name!r}: {exc}; no lat/lon"
    if not (-90 <= south < north <= 90 and west < east and east - west <= 360):
        return {}, (f"grid {s.name!r}: corners ({west:g}, {north:g}) and ({east:g}, {south:g}) are not a "
                    "latitude-longitude box; no lat/lon")
    origin = str(g.get("GridOrigin", "HE5_HDFE_GD_UL")).upper()
    corner = str(g.get("PixelRegistration", "HE5_HDFE_CENTER")).upper().endswith("CORNER")
    shift = 0.0 if corner else 0.5
    lon = west + (np.arange(nx) + shift) * (east - west) / nx
    lat = north - (np.arange(ny) + shift) * (north - south) / ny
    if origin.endswith(("_UR", "_LR")):
        lon = lon[::-1] if not corner else east - np.arange(nx) * (east - west) / nx
    if origin.endswith(("_LL", "_LR")):
        lat = lat[::-1] if not corner else south + np.arange(ny) * (north - south) / ny
    how = f"computed from the definition of grid {s.name!r} in StructMetadata.0"
    return {
        "lat": ("YDim", lat, {"standard_name": "latitude", "units": "degrees_north", "long_name": f"latitude ({how})"}),
        "lon": ("XDim", lon, {"standard_name": "longitude", "units": "degrees_east",
                              "long_name": f"longitude ({how})"}),
    }, None
