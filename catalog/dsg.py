"""Discrete sampling geometries (CF chapter 9): station, profile and trajectory data as tables of observations.

A DSG file holds a collection of *features* (time series at stations,
profiles, trajectories) and their *elements* (the observations). dstp serves
it as records, one per observation, with the instance variables (station id,
latitude, longitude, altitude) broadcast to the observations of their feature
-- as ERDDAP's tabledap does. How the records are made depends on the file's
representation (CF §9.3):

* **Orthogonal and incomplete multidimensional arrays** (``temp(station, time)``,
  ``time(station, obs)``) are ordinary grids: records are grid points, the
  instance variables auxiliary coordinates on the instance dimension. In the
  incomplete representation a feature shorter than the longest is padded with
  missing values; :func:`presence_columns` names the coordinates whose NULLs
  mark padding, and a record exists only where they have a value.
* **Ragged arrays** stack every feature along one *sample* dimension (``obs``).
  A *count* variable (``row_size(station)``, attribute ``sample_dimension``)
  says that feature i owns the next ``row_size[i]`` observations (contiguous);
  an *index* variable (``station_index(obs)``, attribute ``instance_dimension``)
  names each observation's feature (indexed). A time series of profiles uses
  both: observations to profiles by count, profiles to stations by index.
  Every column then lives on the sample dimension: an instance variable
  ``lat(station)`` is read for the stations a block of observations belongs to
  and gathered (:meth:`FeatureLayout.gather`). Files aggregate along the
  sample dimension; each file has its own stations (the instance dimensions may
  differ between files). Observations that belong to no feature (space
  reserved beyond the counted rows, or a missing index) are not records.

:class:`FeatureLayout` holds one :class:`Link` per instance dimension per
file; the links of a count variable are held in memory as run offsets (one
integer per feature), index variables are read with the observations they
index.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Mapping, Sequence

import numpy as np

from dstp.catalog.aggregation import nulls
from dstp.catalog.cf import VERTICAL_STANDARD_NAMES, Decoding, decode_values, decoding_for, numpy_dtype_of
from dstp.catalog.netcdf4_ import FileIdentity, FileMeta, FileSource, ReadStats, VariableMeta
from dstp.errors import DataFileError

__all__ = [
    "FEATURE_TYPES",
    "FeatureLayout",
    "Link",
    "RaggedStructure",
    "feature_type",
    "open_layout",
    "presence_axes",
    "ragged_structure",
]

#: Index variables up to this many elements are checked when the dataset opens (larger ones as they are read).
CHECKED_INDEX_ELEMENTS = 4 * 2**20

#: CF featureType values (case-insensitive in files), by lower-cased name.
FEATURE_TYPES = {t.lower(): t for t in (
    "point", "timeSeries", "trajectory", "profile", "timeSeriesProfile", "trajectoryProfile")}

#: The element coordinates whose padding marks a missing observation (CF Table 9.1's mandatory t/z).
_ELEMENT_AXES = {
    "timeSeries": ("T",),
    "trajectory": ("T",),
    "profile": ("Z",),
    "timeSeriesProfile": ("T", "Z"),
    "trajectoryProfile": ("T", "Z"),
}


def feature_type(attrs: Mapping[str, Any]) -> str:
    """Return a file's CF ``featureType`` in CF's spelling (``timeSeries``), or "" when absent or unknown."""
    value = attrs.get("featureType", attrs.get("featuretype", ""))
    return FEATURE_TYPES.get(str(value).strip().lower(), "")


def presence_axes(kind: str) -> tuple[str, ...]:
    """Return the axes (T, Z) of a feature type's element coordinates: padding where they are missing."""
    return _ELEMENT_AXES.get(kind, ())


@dataclass(frozen=True, slots=True)
class RaggedStructure:
    """How a ragged-array file links its features to its sample dimension (from attributes alone)."""

    sample_dimension: str
    #: instance dimension -> (parent dimension, "count" or "index", variable)
    links: tuple[tuple[str, str, str, str], ...]

    @property
    def instance_dimensions(self) -> tuple[str, ...]:
        """Return the instance dimensions, outermost first (stations before profiles)."""
        parents = {dim: parent for dim, parent, _, _ in self.links}
        depth: dict[str, int] = {}
        for dim in parents:
            d, n = dim, 0
            while d in parents and n <= len(parents):
                d, n = parents[d], n + 1
            depth[dim] = n
        return tuple(sorted(parents, key=lambda d: -depth[d]))

    @property
    def variables(self) -> tuple[str, ...]:
        """Return the count and index variables: structure, not columns."""
        return tuple(v for _, _, _, v in self.links)

    def kinds(self) -> dict[str, str]:
        return {dim: kind for dim, _, kind, _ in self.links}


def _integer(var: VariableMeta) -> bool:
    return var.dtype.kind in "iu" and len(var.dimensions) == 1


def ragged_structure(meta: FileMeta) -> RaggedStructure | None:
    """Return a file's ragged-array structure, None when it has none; DataFileError when it is inconsistent.

    Count variables carry ``sample_dimension`` (the dimension they count), index
    variables ``instance_dimension`` (the dimension they index); CF requires both
    to be integer and one-dimensional.
    """
    links: list[tuple[str, str, str, str]] = []
    name = meta.path.name
    for var in meta.variables.values():
        for attr, kind in (("sample_dimension", "count"), ("instance_dimension", "index")):
            target = var.attrs.get(attr)
            if not isinstance(target, str):
                continue
            target = target.strip()
            if not _integer(var):
                raise DataFileError(
                    f"{name}: {kind} variable {var.name!r} (attribute {attr}) must be an integer variable on one "
                    f"dimension, not {var.dtype} on ({', '.join(var.dimensions)})")
            if target not in meta.dimensions:
                raise DataFileError(f"{name}: {kind} variable {var.name!r} names dimension {target!r} "
                                    f"({attr}), which the file does not have")
            own = var.dimensions[0]
            # count: instance `own` owns runs of `target`; index: each `own` element names an instance of `target`
            links.append((own, target, kind, var.name) if kind == "count" else (target, own, kind, var.name))
    if not links:
        return None
    instance = [dim for dim, _, _, _ in links]
    if len(set(instance)) != len(instance):
        twice = next(d for d in instance if instance.count(d) > 1)
        raise DataFileError(f"{name}: dimension {twice!r} is linked to its elements by two ragged-array variables")
    parents = {parent for _, parent, _, _ in links}
    samples = parents - set(instance)
    if len(samples) != 1:
        raise DataFileError(f"{name}: its ragged-array variables do not lead to one sample dimension "
                            f"({', '.join(sorted(samples)) or 'a cycle'})")
    return RaggedStructure(samples.pop(), tuple(sorted(links)))


@dataclass(frozen=True, slots=True)
class Link:
    """How one file's elements of ``parent`` map to features along ``dimension``."""

    dimension: str
    parent: str
    kind: str
    variable: str
    #: Features in this file (the dimension's size).
    size: int
    #: count: where each feature's run starts, with the total at the end (size + 1 values).
    offsets: np.ndarray | None = None
    #: index: how the index variable decodes (its fill values mark elements of no feature).
    decoding: Decoding | None = None
    #: Every element of ``parent`` belongs to a feature (checked at open; False when unknown).
    complete: bool = False


def _check_index(meta: FileMeta, link: Link, handles: FileSource) -> bool:
    """Refuse an index variable that names a feature the file does not have; return whether none is missing."""
    assert link.decoding is not None
    values, mask = decode_values(handles.read(meta.path, link.variable, ()), link.decoding)
    values = np.asarray(values)
    bad = (values < 0) | (values >= link.size)
    if mask is not None:
        bad &= ~mask
    if bad.any():
        at = int(np.flatnonzero(bad)[0])
        raise DataFileError(
            f"{meta.path.name}: index variable {link.variable!r} says {int(values[at])} at {link.parent} {at}, "
            f"but dimension {link.dimension!r} has {link.size} elements")
    return mask is None or not mask.any()


def _links(meta: FileMeta, structure: RaggedStructure, handles: FileSource) -> dict[str, Link]:
    """Return one file's links: count variables read now (small), index variables described."""
    out: dict[str, Link] = {}
    name = meta.path.name
    for dim, parent, kind, variable in structure.links:
        var = meta.variables[variable]
        dec = decoding_for(var.dtype, var.attrs, var.default_fill, per_character=var.per_character)
        assert dec is not None  # integer
        size = meta.dimensions[dim]
        if kind == "index":
            link = Link(dim, parent, kind, variable, size, decoding=dec)
            if meta.dimensions[parent] <= CHECKED_INDEX_ELEMENTS:
                link = replace(link, complete=_check_index(meta, link, handles))
            out[dim] = link
            continue
        values, mask = decode_values(handles.read(meta.path, variable, ()), dec)
        counts = np.where(mask, 0, values) if mask is not None else np.asarray(values)  # CF: missing = none yet
        counts = counts.astype(np.int64)
        if (counts < 0).any():
            at = int(np.flatnonzero(counts < 0)[0])
            raise DataFileError(f"{name}: count variable {variable!r} is negative at {dim} {at} ({counts[at]})")
        offsets = np.concatenate([[0], np.cumsum(counts)])
        if offsets[-1] > meta.dimensions[parent]:
            raise DataFileError(
                f"{name}: count variable {variable!r} adds up to {int(offsets[-1])} elements but dimension "
                f"{parent!r} has {meta.dimensions[parent]}; the file is inconsistent")
        out[dim] = Link(dim, parent, kind, variable, size, offsets=offsets,
                        complete=bool(offsets[-1] == meta.dimensions[parent]))
    return out


@dataclass
class FeatureLayout:
    """A dataset's discrete sampling geometry: its feature type and, for ragged arrays, how to broadcast."""

    #: CF featureType (``timeSeries``), or "" for files without one.
    feature_type: str
    #: orthogonal multidimensional, incomplete multidimensional, contiguous ragged, indexed ragged, …
    representation: str
    #: Ragged arrays: the dimension every column lives on; else None.
    sample_dimension: str | None = None
    #: Ragged arrays: the instance dimensions, outermost first; they are not dataset dimensions.
    instance_dimensions: tuple[str, ...] = ()
    #: Ragged arrays: the count and index variables, which are structure, not columns.
    structure_variables: tuple[str, ...] = ()
    paths: tuple[Path, ...] = ()
    #: One mapping per file: instance dimension -> Link.
    links: tuple[dict[str, Link], ...] = ()
    #: Per file: every element of the sample dimension belongs to a feature (known without reading).
    complete: tuple[bool, ...] = ()
    handles: FileSource | None = field(default=None, repr=False)
    #: Per file: the version a read expects (the dataset's DataFile identities); empty: the published one.
    versions: tuple[FileIdentity | None, ...] = ()
    _cache: OrderedDict[tuple[int, str, int, int, int], np.ndarray] = field(default_factory=OrderedDict, repr=False)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    @property
    def ragged(self) -> bool:
        return self.sample_dimension is not None

    def __getstate__(self) -> dict[str, Any]:
        """Return what pickling keeps: not the open-file cache, the lock, nor what was read into the cache."""
        return {**self.__dict__, "handles": None, "_cache": OrderedDict(), "_lock": None}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state, _lock=threading.Lock())

    def describe(self) -> str:
        """Return one line saying what the records are, for ``describe``."""
        kind = self.feature_type or "no featureType"
        if not self.ragged:
            return f"{kind}; {self.representation}"
        parts = []
        for dim in self.instance_dimensions:
            link = self.links[0][dim] if self.links else None
            if link is not None:
                how = "counted by" if link.kind == "count" else "indexed by"
                parts.append(f"{dim} {how} {link.variable!r}")
        return (f"{kind}; {self.representation} along {self.sample_dimension!r} ({', '.join(parts)}); "
                f"one record per observation, instance variables broadcast to it")

    def broadcast_note(self, dimension: str) -> str:
        """Return the note of a column read from an instance variable on ``dimension``."""
        return f"one value per {dimension}, broadcast to its observations along {self.sample_dimension!r}"

    # -- mapping observations to features ------------------------------------------------

    def resolve(self, k: int, dim: str, part: slice, stats: ReadStats | None = None) -> np.ndarray:
        """Return, for the elements ``part`` of file k's sample dimension, their feature along ``dim`` (-1: none)."""
        key = (k, dim, part.start, part.stop, part.step or 1)
        with self._lock:
            hit = self._cache.get(key)
            if hit is not None:
                self._cache.move_to_end(key)
                return hit
        link = self.links[k][dim]
        if link.parent == self.sample_dimension:
            parents = np.arange(part.start, part.stop, part.step or 1, dtype=np.int64)
        else:
            parents = self.resolve(k, link.parent, part, stats)
        if link.kind == "count":
            assert link.offsets is not None
            out = np.searchsorted(link.offsets, parents, side="right") - 1
            out[(parents < 0) | (parents >= link.offsets[-1])] = -1
        else:
            assert link.decoding is not None
            values, mask = self._gather_raw(k, link.variable, link.decoding, parents, stats, np.dtype(np.int64))
            out = np.where(mask, -1, values).astype(np.int64)
            bad = ((out >= link.size) | (out < 0)) & ~mask
            if bad.any():
                at = int(np.flatnonzero(bad)[0])
                raise DataFileError(
                    f"{self.paths[k].name}: index variable {link.variable!r} says {int(values[at])} at "
                    f"{link.parent} {int(parents[at])}, but dimension {dim!r} has {link.size} elements")
        out.setflags(write=False)
        with self._lock:
            self._cache[key] = out
            while len(self._cache) > 16:
                self._cache.popitem(last=False)
        return out

    def linked(self, k: int, part: slice, stats: ReadStats | None = None) -> np.ndarray | None:
        """Return which elements ``part`` of file k's sample dimension belong to a feature (None: all, known)."""
        if self.complete[k]:
            return None
        inner = [d for d, link in self.links[k].items() if link.parent == self.sample_dimension]
        ok = np.ones(len(range(part.start, part.stop, part.step or 1)), dtype=bool)
        for dim in inner:
            ok &= self.resolve(k, dim, part, stats) >= 0
        return ok

    def gather(
        self, k: int, variable: str, dec: Decoding, dim: str, part: slice, dtype: np.dtype,
        stats: ReadStats | None = None,
    ) -> tuple[np.ndarray, np.ndarray | None]:
        """Return an instance variable of file k, on ``dim``, for the elements ``part`` of the sample dimension."""
        features = self.resolve(k, dim, part, stats)
        values, mask = self._gather_raw(k, variable, dec, features, stats, dtype)
        return values, (mask if mask.any() else None)

    def _gather_raw(
        self, k: int, variable: str, dec: Decoding, where: np.ndarray, stats: ReadStats | None,
        dtype: np.dtype | None = None,
    ) -> tuple[np.ndarray, np.ndarray]:
        """Return decoded ``variable[where]`` of file k (one read of the span ``where`` covers), NULL where -1."""
        valid = where >= 0
        dtype = dtype if dtype is not None else numpy_dtype_of(dec.arrow_type)
        if not valid.any():
            return nulls(where.shape, dtype)
        lo, hi = int(where[valid].min()), int(where[valid].max()) + 1
        assert self.handles is not None
        index = [slice(lo, hi)] + ([slice(None)] if dec.chars else [])
        try:
            span, span_mask = decode_values(self.handles.read(self.paths[k], variable, index, stats,
                                                                        self.versions[k] if self.versions else None),
                                                     dec, dtype)
        except ValueError as exc:
            raise DataFileError(f"{self.paths[k].name}: variable {variable!r}: {exc}") from None
        picked = np.where(valid, where - lo, 0)
        values = span[picked]
        mask = ~valid if span_mask is None else (~valid | span_mask[picked])
        return values, mask


def open_layout(metas: Sequence[FileMeta], handles: FileSource, aggregate: str | None) -> FeatureLayout | None:
    """Return the DSG layout of a dataset's files (in file order), or None when they are not DSG files.

    Refuses files whose ragged structure differs, or a ragged dataset aggregated
    along anything but its sample dimension.
    """
    holders: dict[str, str] = {}
    for meta in metas:
        holders.setdefault(feature_type(meta.attrs), meta.path.name)
    kinds = sorted(k for k in holders if k)
    kind = kinds[0] if kinds else ""
    if len(kinds) > 1:
        shown = ", ".join(f"{holders[k]} holds {k}" for k in kinds)
        raise DataFileError(f"the files hold different feature types ({shown}); "
                            "publish each feature type as its own dataset")
    structures = [ragged_structure(m) for m in metas]
    first = structures[0]
    for meta, s in zip(metas[1:], structures[1:]):
        if s != first:
            raise DataFileError(
                f"{meta.path.name}: its ragged-array layout ({_layout_text(s)}) differs from "
                f"{metas[0].path.name}'s ({_layout_text(first)}); files of one dataset must share it")
    if first is None:
        if not kind:
            return None
        return FeatureLayout(kind, "one record per observation" if kind == "point" else "multidimensional array",
                             paths=tuple(m.path for m in metas))
    if len(metas) > 1 and aggregate != first.sample_dimension:
        raise DataFileError(
            f"files with ragged arrays aggregate along their sample dimension {first.sample_dimension!r}, "
            f"not {aggregate!r}; set <files aggregate=\"{first.sample_dimension}\">")
    links = tuple(_links(m, first, handles) for m in metas)
    complete = tuple(all(link.complete for link in file_links.values() if link.parent == first.sample_dimension)
                     for file_links in links)
    kinds_used = set(first.kinds().values())
    representation = ("contiguous ragged array" if kinds_used == {"count"} else
                      "indexed ragged array" if kinds_used == {"index"} else "ragged array (contiguous and indexed)")
    return FeatureLayout(kind, representation, first.sample_dimension, first.instance_dimensions,
                         first.variables, tuple(m.path for m in metas), links, complete, handles)


def _layout_text(structure: RaggedStructure | None) -> str:
    if structure is None:
        return "none"
    return ", ".join(f"{v}: {d} → {p}" for d, p, _, v in structure.links)


def _element_coordinate(axis: str, attrs: Mapping[str, Any]) -> bool:
    """Return whether a variable's own attributes make it the feature's time (T) or vertical (Z) coordinate."""
    std = str(attrs.get("standard_name", "")).strip().lower()
    declared = str(attrs.get("axis", "")).strip().upper()
    if axis == "T":
        return std == "time" or declared == "T"
    return declared == "Z" or "positive" in attrs or std in VERTICAL_STANDARD_NAMES


def presence_columns(kind: str, candidates: Sequence[tuple[str, tuple[str, ...], str | None, Mapping[str, Any]]]
                     ) -> tuple[tuple[str, ...], ...]:
    """Return the columns whose NULLs mark padding in a multidimensional DSG, in groups: no record where every
    column of a group is NULL.

    ``candidates`` are auxiliary coordinates as (column, dimensions, axis in the
    descriptor, attributes in the files). They are the feature's ``cf_role`` id
    (a missing id is an unused instance slot, CF §9.6), each a group of its own,
    and, in the incomplete representation, its element coordinates on two or
    more dimensions, one group per axis: the time of time series and
    trajectories (``standard_name = time`` or ``axis = T``; a
    ``forecast_reference_time`` with time units is not one), the vertical
    coordinate of profiles (``axis = Z``, ``positive`` or a vertical standard
    name) -- or, when no variable says so itself, the one the descriptor gives
    that axis. An axis may have several: Argo's ``PRES`` and ``PRES_ADJUSTED``
    both say ``axis = "Z"``, and the adjusted one is all missing in a real-time
    profile; a level is padding only where neither locates it.
    """
    if not kind:
        return ()
    out: list[tuple[str, ...]] = [(name,) for name, dims, _, attrs in candidates if attrs.get("cf_role") and dims]
    for axis in presence_axes(kind):
        on_elements = [(name, given, attrs) for name, dims, given, attrs in candidates if len(dims) >= 2]
        chosen = [name for name, _, attrs in on_elements if _element_coordinate(axis, attrs)] \
            or [name for name, given, _ in on_elements if given == axis]
        taken = {n for group in out for n in group}
        group = tuple(name for name in chosen if name not in taken)
        if group:
            out.append(group)
    return tuple(out)
