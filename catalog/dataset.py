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
columns CF implies (:mod:`.columns`, bound to the files by :mod:`.binding`):
auxiliary coordinates the descriptor lists with ``dimensions=``, one column
per vertex of each coordinate's ``bounds`` (``lat_lower``/``lat_upper``), and
-- for a projected or rotated grid with a grid mapping but no 2-D
latitude/longitude -- ``lat``/``lon`` derived with pyproj (:mod:`.gridmapping`).

Station, profile and trajectory files (CF discrete sampling geometries) keep
a :class:`~dstp.catalog.dsg.FeatureLayout`: in ragged arrays every column
lives on the sample dimension and instance variables are gathered for the
observations read; grid points that are not observations (padding, unused
space) are reported by :meth:`GriddedDataset.present` and dropped by the scan.
"""

from __future__ import annotations

import bisect
import glob
import hashlib
import math
from dataclasses import dataclass, field, replace
from functools import cached_property
from pathlib import Path
from typing import Any, Iterable, Iterator, Mapping, Sequence, cast

import numpy as np

from dstp.catalog.aggregation import coverage, nulls
from dstp.catalog.binding import (
    IN_MEMORY_ELEMENTS,
    add_bounds,
    add_geographic,
    add_weights,
    attribute_columns,
    auxiliary_column,
    check_dimension_sizes,
    check_ragged_descriptor,
    check_text_times,
    coordinate_column,
    parts_agree,
)
from dstp.catalog.cf import CF_BY_LOWER, Decoding, decode_values, numpy_dtype_of
from dstp.catalog.readahead import ReadAhead
from dstp.catalog.columns import (
    AttributeColumn,
    ColumnTraits,
    CoordinateColumn,
    DataFile,
    Dimension,
    files_from_state,
    files_state,
)
from dstp.catalog.descriptor import Descriptor
from dstp.catalog.dsg import FeatureLayout, open_layout, presence_columns
from dstp.catalog.gridmapping import GridMapping, grid_mappings
from dstp.catalog.netcdf4_ import (
    FileHandles,
    FileIdentity,
    FileMeta,
    FileSource,
    ReadStats,
    resolve_in_group,
    string_length_dimensions,
)
from dstp.catalog.parts import line_up, part_of_each
from dstp.errors import DataFileError, DescriptorError

__all__ = ["IN_MEMORY_ELEMENTS", "AttributeColumn", "CoordinateColumn", "DataFile", "Dimension", "GriddedDataset",
           "matching_files"]


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
    #: The discrete sampling geometry of station, profile and trajectory files (None for grids).
    layout: FeatureLayout | None = None
    #: Columns whose NULLs mark padding of a multidimensional DSG, in groups: no record where every column of
    #: a group is NULL (see :mod:`.dsg`).
    presence: tuple[tuple[str, ...], ...] = ()
    #: The dataset's version in its catalog: one more at every change of its descriptor or files (0: none given).
    version: int = 0

    @property
    def id(self) -> str:
        return self.descriptor.id

    @property
    def size_bytes(self) -> int:
        return sum(f.size for f in self.files)

    @cached_property
    def identity(self) -> str:
        """Return a digest of what a query over this dataset reads: its files (name, size, place on the
        aggregation axis, format), dimension sizes, decoded coordinate values, and every column's type and
        per-file decodings. Two hosts serving equal files give equal identities, wherever the files are;
        a missing, extra, resized or differently packed file changes it."""
        h = hashlib.sha256()

        def add(*parts: object) -> None:
            h.update(repr(parts).encode())
            h.update(b"\0")

        add(self.id, self.descriptor.aggregate)
        for f in self.files:
            add("file", f.path.name, f.size, f.start, f.count, f.format, f.part)
        for name, dim in self.dimensions.items():
            add("dim", name, dim.size)
        for name, coord in self.coordinates.items():
            values = np.ascontiguousarray(coord.values)
            add("coord", name, str(coord.arrow_type), values.dtype.str, values.shape, coord.file_decodings)
            h.update(values.tobytes() if values.dtype.kind != "O" else repr(values.tolist()).encode())
        for name, col in [*self.auxiliaries.items(), *self.attributes.items()]:
            add("column", name, str(col.arrow_type), col.role, col.file_decodings)
        return h.hexdigest()

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

    def star_columns(self) -> list[str]:
        """Return the columns ``select *`` stands for: the default grid's coordinates, then its attributes.

        Index columns of dimensions without a coordinate variable, coordinates, auxiliary and derived
        coordinates on the default grid (2-D lat/lon), scalar coordinates, then the attributes on exactly
        the default grid. Bounds and weights only on request.
        """
        grid = self.descriptor.default_grid
        coords = [c.name for c in self.coordinates.values() if c.dimension in grid]
        coords.sort(key=lambda n: grid.index(self.coordinates[n].dimension))  # type: ignore[arg-type]
        index_dims = [d for d in grid if self.dimensions[d].coordinate is None]
        scalars = [c.name for c in self.coordinates.values() if c.dimension is None]
        auxiliaries = [a.name for a in self.auxiliaries.values()
                       if a.role in ("auxiliary", "derived") and a.dimensions and set(a.dimensions) <= set(grid)]
        attrs = [a.name for a in self.attributes.values() if a.dimensions == grid]
        return [*index_dims, *coords, *auxiliaries, *scalars, *attrs]

    def untied(self, grid: tuple[str, ...], names: Iterable[str]) -> str | None:
        """Return why no record can hold the grid ``grid`` of the columns ``names``, or None when one can.

        Dimensions of different homes (two swaths of an HDF-EOS5 file, the data and geolocation groups of an
        HDF5 file without dimension scales or StructMetadata.0, a geolocation dimension mapped onto a data
        dimension at another resolution) are tied to nothing: pairing them would be the cross product of
        unrelated points, not records. Dimensions without a home are netCDF's, shared by name.
        """
        homes: dict[str, str] = {}
        for d in grid:
            home = self.dimensions[d].home
            if home is not None:
                homes.setdefault(home, d)
        if len(homes) < 2:
            return None
        (h1, d1), (h2, d2) = list(homes.items())[:2]
        by_dim = {d: n for n in reversed(list(names)) for d in self.column_dimensions(n)}

        def who(d: str) -> str:
            return f"column {by_dim[d]}" if d in by_dim else "select * (the default grid)"

        return (f"{who(d1)} is on dimension {d1!r} of {h1} and {who(d2)} on dimension {d2!r} of {h2}; these "
                f"dimensions are not tied to each other in {self.id}, so no record pairs their values (it would be "
                "a cross product of unrelated points) — query the columns of each in a query of its own")

    def dimension_coordinates(self) -> dict[str, str]:
        """Return {coordinate column: dimension} of the monotonic 1-D coordinates (what nearest matching needs)."""
        return {c.name: c.dimension for c in self.coordinates.values() if c.dimension and c.monotonic != 0}

    def declared_keys(self) -> dict[str, str]:
        """Return {column: correlation key} as the descriptor declares them."""
        return {k.column: k.name for k in self.descriptor.correlation_keys}

    def key_info(self, name: str) -> ColumnTraits:
        """Return the units, CF attributes, axis, calendar and value range of column ``name``."""
        coord = self.coordinates.get(name)
        if coord is not None:
            dec, cf, axis, values = coord.decoding, dict(coord.spec.cf), coord.spec.axis, coord.values
            units = coord.spec.units
        else:
            column = self.readable(name)
            assert column is not None, name
            dec, cf, values, units = column.decoding, {**column.attrs, **dict(column.spec.cf)}, column.values, \
                column.spec.units
            axis = str(cf["axis"]) if "axis" in cf else None
        is_time = dec.time_units is not None
        numeric = values is not None and values.size and values.dtype.kind in "iuf"
        finite = values[np.isfinite(values)] if numeric and values.dtype.kind == "f" else values  # type: ignore[index]
        value_range = (float(finite.min()), float(finite.max())) if numeric and finite.size else None  # type: ignore[union-attr]
        return ColumnTraits(units=None if is_time else units, cf=cf, axis=axis,
                            calendar=(dec.calendar or "standard") if is_time else None,
                            iso=dec.iso_time, value_range=value_range)

    # -- reading -----------------------------------------------------------------------

    def missing_from(self, column: AttributeColumn | CoordinateColumn) -> tuple[str, ...]:
        """Return the names of the files that lack a column's variable (it reads as NULL there)."""
        if isinstance(column, AttributeColumn) and (column.role == "derived" or not column.file_decodings):
            return ()
        holding = {f.part for f, d in zip(self.files, column.file_decodings) if d is not None}
        return tuple(f.path.name for f, d in zip(self.files, column.file_decodings) if d is None and f.part in holding)

    def part_of(self, column: AttributeColumn | CoordinateColumn) -> int:
        """Return the part of a dataset split by variable that a column is read from: the first that holds it."""
        return next((f.part for f, d in zip(self.files, column.file_decodings) if d is not None), 0)

    def read(
        self,
        column: AttributeColumn | CoordinateColumn,
        index: Mapping[str, slice],
        stats: ReadStats | None = None,
        part: int | None = None,
    ) -> tuple[np.ndarray, np.ndarray | None]:
        """Return decoded (values, null mask) of a column over the index ranges ``index``.

        ``index`` maps each of the column's dimensions to a slice with a positive
        step and an explicit stop. A range along the aggregation dimension may
        span files; it is read file by file, each part decoded with its own
        file's attributes, then joined. Files that lack the variable contribute
        NULLs. Columns held in memory are sliced, not read. In a dataset split by
        variable the column is read from ``part``, by default the first that holds it.
        """
        dims = column.dimensions
        if isinstance(column, AttributeColumn) and column.values is not None:
            where = tuple(index[d] for d in dims)
            mask = column.mask[where] if column.mask is not None else None
            return column.values[where], mask
        dtype = numpy_dtype_of(column.arrow_type)
        decodings = column.file_decodings
        agg = self.descriptor.aggregate
        part = self.part_of(column) if part is None else part
        if agg is None or agg not in dims or len(self.files) == 1:
            k = next((i for i, d in enumerate(decodings) if d is not None and self.files[i].part == part), 0)
            return self._read_file(k, column, decodings[k] or column.decoding, index, dtype, stats)
        axis = dims.index(agg)
        parts: list[tuple[np.ndarray, np.ndarray | None]] = []
        # Consecutive files decoded alike are decoded together (the values are those of decoding each: decoding
        # is element by element): a block over 1,000 one-day files is one decoding, not 1,000.
        together = not (isinstance(column, AttributeColumn) and (column.fixed or column.file_dimensions != dims
                                                                 or self.layout is not None))
        pending: list[tuple[int, slice]] = []

        def flush() -> None:
            if pending:
                parts.append(self._read_files(pending, column, index, axis, dtype, stats))
                pending.clear()

        for k, here in self._file_parts(index[agg], part):
            dec = decodings[k]
            if dec is None:
                flush()
                shape = tuple(len(range(here.start, here.stop, here.step)) if d == agg
                              else len(range(index[d].start or 0, index[d].stop, index[d].step or 1)) for d in dims)
                parts.append(nulls(shape, dtype))
                continue
            if pending and not (together and not dec.text and decodings[pending[-1][0]] is dec):
                flush()
            pending.append((k, here))
        flush()
        if len(parts) == 1:
            return parts[0]
        values = np.concatenate([v for v, _ in parts], axis=axis)
        if all(m is None for _, m in parts):
            return values, None
        masks = [np.zeros(v.shape, bool) if m is None else m for v, m in parts]
        return values, np.concatenate(masks, axis=axis)

    def read_ahead(self, budget: int) -> ReadAhead | None:
        """Return a read-ahead for one scan of this dataset (:mod:`.readahead`), holding at most ``budget`` decoded
        bytes ahead of it; None when no file is an object of a store (disk reads need none) or ``budget`` is 0."""
        objects, chunks = self.handles.objects, self.handles.chunks
        if budget <= 0 or objects is None or chunks is None:
            return None
        first = next((f.path for f in self.files if objects.owns(f.path) and not objects.is_zarr(f.path)), None)
        if first is None:
            return None
        return ReadAhead(budget, lambda: objects.window(first), threads=objects.stores[
            objects.store_of(first)].config.concurrency)

    def prefetch(self, column: AttributeColumn | CoordinateColumn, index: Mapping[str, slice],
                 ahead: ReadAhead) -> None:
        """Start reading ahead what :meth:`read` of ``column`` over ``index`` will fetch from a store: the chunks of
        each file the range spans, all at once (a point's series over 12 monthly objects: one round, not 12)."""
        if not isinstance(column, AttributeColumn) or column.values is not None or self.layout is not None:
            return
        dims, decodings, agg = column.dimensions, column.file_decodings, self.descriptor.aggregate
        part = self.part_of(column)
        if agg is None or agg not in dims or len(self.files) == 1:
            k = next((i for i, d in enumerate(decodings) if d is not None and self.files[i].part == part), 0)
            targets = [(k, index)]
        else:
            targets = [(k, {**index, agg: here}) for k, here in self._file_parts(index[agg], part)
                       if decodings[k] is not None]
        fixed = dict(column.fixed)
        for k, local_index in targets:
            dec = decodings[k] or column.decoding
            if dec.chars:
                continue
            local = [slice(fixed[d], fixed[d] + 1) if d in fixed else local_index[d] for d in column.file_dimensions]
            self.handles.prefetch(self.files[k].path, column.spec.variable, local, self.files[k].identity, ahead)

    @cached_property
    def _part_files(self) -> dict[int, tuple[list[int], list[int]] | None]:
        """Return per part (its files' numbers, each one's end on the aggregation axis), in file order, when
        those files follow one another without overlap (then a range finds its first file by bisection);
        None for a part whose files do not."""
        out: dict[int, tuple[list[int], list[int]] | None] = {}
        for k, f in enumerate(self.files):
            found = out.setdefault(f.part, ([], []))
            if found is None:
                continue
            ks, ends = found
            if ends and f.start < ends[-1]:
                out[f.part] = None  # out of order or overlapping: every file is looked at
                continue
            ks.append(k)
            ends.append(f.start + f.count)
        return out

    def _file_parts(self, want: slice, part: int = 0) -> Iterator[tuple[int, slice]]:
        """Yield (file number, slice local to it) for a slice of the aggregation dimension (in one part).

        The files it spans are found by bisection when the part's files follow one another (a block of a
        full scan looked at every file of the dataset: a 5,000-file scan cost 2.5× per file what a 1,000-file
        one did, issue 38); else every file is looked at.
        """
        if self.descriptor.aggregate is None or len(self.files) == 1:
            yield 0, want
            return
        ordered = self._part_files.get(part)
        if ordered is not None:
            ks, ends = ordered
            candidates: Iterable[int] = (ks[j] for j in range(bisect.bisect_right(ends, want.start), len(ks)))
        else:
            candidates = (k for k, f in enumerate(self.files) if f.part == part)
        for k in candidates:
            f = self.files[k]
            lo, hi = f.start, f.start + f.count
            if ordered is not None and lo >= want.stop:
                return  # the files after it start later still
            # first selected index >= lo, honouring the step
            start = want.start if want.start >= lo else want.start + -(-(lo - want.start) // want.step) * want.step
            stop = min(want.stop, hi)
            if start < stop:
                yield k, slice(start - lo, stop - lo, want.step)

    def _read_files(
        self,
        files: list[tuple[int, slice]],
        column: AttributeColumn | CoordinateColumn,
        index: Mapping[str, slice],
        axis: int,
        dtype: np.dtype,
        stats: ReadStats | None,
    ) -> tuple[np.ndarray, np.ndarray | None]:
        """Return the parts of consecutive files (file number, slice local to it along the aggregation axis) that
        share one decoding: read file by file, decoded together (file by file when their raw types differ, or a
        value does not decode, so that the error names its file)."""
        agg = self.descriptor.aggregate
        assert agg is not None
        dec = column.file_decodings[files[0][0]]
        assert dec is not None
        if len(files) == 1:
            k, here = files[0]
            return self._read_file(k, column, dec, {**index, agg: here}, dtype, stats)
        variable = column.spec.variable
        raws = []
        for k, here in files:
            local = [here if d == agg else index[d] for d in column.dimensions]
            raws.append(self.handles.read(self.files[k].path, variable, local, stats, self.files[k].identity))
        if len({r.dtype for r in raws}) == 1:
            try:
                return decode_values(np.concatenate(raws, axis=axis), dec, dtype)
            except ValueError:
                pass
        decoded = [self._decode_file(k, variable, raw, dec, dtype) for (k, _), raw in zip(files, raws)]
        values = np.concatenate([v for v, _ in decoded], axis=axis)
        if all(m is None for _, m in decoded):
            return values, None
        return values, np.concatenate([np.zeros(v.shape, bool) if m is None else m for v, m in decoded], axis=axis)

    def _decode_file(self, k: int, variable: str, raw: np.ndarray, dec: Decoding,
                     dtype: np.dtype) -> tuple[np.ndarray, np.ndarray | None]:
        try:
            return decode_values(raw, dec, dtype)
        except ValueError as exc:
            raise DataFileError(f"{self.files[k].path.name}: variable {variable!r}: {exc}") from None

    def _read_file(
        self,
        k: int,
        column: AttributeColumn | CoordinateColumn,
        dec: Decoding,
        index: Mapping[str, slice],
        dtype: np.dtype,
        stats: ReadStats | None,
    ) -> tuple[np.ndarray, np.ndarray | None]:
        """Return one file's part of a column: ``index`` is local to file k."""
        path, variable, layout = self.files[k].path, column.spec.variable, self.layout
        if isinstance(column, AttributeColumn):
            var_dims, fixed = column.file_dimensions, dict(column.fixed)
            if layout is not None and layout.ragged and len(var_dims) == 1 \
                    and var_dims[0] in layout.instance_dimensions:
                assert layout.sample_dimension is not None
                return layout.gather(k, variable, dec, var_dims[0], index[layout.sample_dimension], dtype, stats)
        else:
            var_dims, fixed = column.dimensions, {}
        local = [slice(fixed[d], fixed[d] + 1) if d in fixed else index[d] for d in var_dims]
        if dec.chars:
            local.append(slice(None))  # the string length, joined by decoding
        raw = self.handles.read(path, variable, local, stats, self.files[k].identity)
        try:
            values, mask = decode_values(raw, dec, dtype)
        except ValueError as exc:
            raise DataFileError(f"{path.name}: variable {variable!r}: {exc}") from None
        if fixed:
            axes = tuple(i for i, d in enumerate(var_dims) if d in fixed)
            values, mask = values.squeeze(axis=axes), None if mask is None else mask.squeeze(axis=axes)
        return values, mask

    def has_presence(self, grid: tuple[str, ...]) -> bool:
        """Return whether some grid points of ``grid`` may not be records (padding, unused space; see .dsg)."""
        layout = self.layout
        if layout is not None and layout.ragged and layout.sample_dimension in grid and not all(layout.complete):
            return True
        return any(set(self.column_dimensions(name)) <= set(grid) for group in self.presence for name in group)

    def present(
        self, grid: tuple[str, ...], index: Mapping[str, slice], stats: ReadStats | None = None
    ) -> list[tuple[tuple[str, ...], np.ndarray]]:
        """Return which grid points of a block are records, as masks on some of the grid's dimensions.

        A discrete sampling geometry pads: an incomplete multidimensional array
        with missing times or levels, a ragged array with space beyond its
        features. Those grid points are not observations (:mod:`.dsg`).
        """
        out: list[tuple[tuple[str, ...], np.ndarray]] = []
        layout = self.layout
        if layout is not None and layout.ragged and layout.sample_dimension in grid and not all(layout.complete):
            sample = layout.sample_dimension
            masks = []
            for k, here in self._file_parts(index[sample]):
                linked = layout.linked(k, here, stats)
                masks.append(np.ones(len(range(here.start, here.stop, here.step or 1)), bool)
                             if linked is None else linked)
            out.append(((sample,), np.concatenate(masks) if masks else np.zeros(0, bool)))
        for group in self.presence:
            # A point is a record where any column of the group locates it (Argo's PRES or PRES_ADJUSTED).
            located: tuple[tuple[str, ...], np.ndarray] | None = None
            for name in group:
                column = self.readable(name)
                if column is None or not set(column.dimensions) <= set(grid):
                    continue
                _, mask = self.read(column, {d: index[d] for d in column.dimensions}, stats)
                if mask is None or not mask.any():
                    located = None
                    break
                if located is None:
                    located = (column.dimensions, ~mask)
                elif located[0] == column.dimensions:
                    located = (column.dimensions, located[1] | ~mask)
                else:  # columns of one axis on different dimensions: each alone cannot tell padding
                    located = None
                    break
            if located is not None:
                out.append(located)
        return out

    def close(self) -> None:
        self.handles.close()

    def __getstate__(self) -> dict[str, Any]:
        """Return what pickling keeps: everything but the open-file cache (the catalog index puts the live one
        back, :meth:`attach`), with the files as columns."""
        return {**self.__dict__, "handles": None, "files": files_state(self.files)}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state, files=files_from_state(state["files"]))

    def attach(self, handles: FileHandles) -> "GriddedDataset":
        """Return this dataset (unpickled) reading through ``handles``."""
        self.handles = handles
        if self.layout is not None:
            self.layout.handles = handles
        return self

    # -- construction ------------------------------------------------------------------

    @classmethod
    def open(cls, descriptor: Descriptor, handles: FileHandles | None = None, *,
             files: Sequence[tuple[Path, FileIdentity]] | None = None,
             reader: FileSource | None = None) -> "GriddedDataset":
        """Return the dataset a descriptor publishes; raise DescriptorError/DataFileError if it cannot.

        ``files`` are its files and the version of each (default: what the descriptor's glob matches, as they
        are when read). ``reader`` is what headers and values are read through while the dataset is built (the
        catalog index's :class:`~dstp.catalog.facts.FactsReader`: a dataset rebuilt from what it kept opens no
        file); the dataset then reads through ``handles``.
        """
        if descriptor.path is None:
            raise DescriptorError("descriptor has no location to resolve its files against")
        # not `handles or …`: FileHandles has a length (its open files), so an empty cache is falsy
        handles = handles if handles is not None else FileHandles()
        build: FileSource = reader if reader is not None else handles
        folder = descriptor.path.parent
        where = str(descriptor.path)
        paths = [p for p, _ in files] if files is not None else matching_files(descriptor)
        if not paths:
            raise DescriptorError(f"files glob {descriptor.files_glob!r} matches no file", path=where)
        parts = part_of_each(paths, folder, descriptor, where)
        metas = [build.inspect(p) for p in paths]
        versions = dict(files) if files is not None else {p: build.identity(p) for p in paths}
        descriptor = _in_group(descriptor, metas)
        agg = descriptor.aggregate
        coord_specs = {c.dimension: c for c in descriptor.coordinates if c.dimension}
        metas, files_, agg_size = line_up(metas, parts, agg, coord_specs.get(agg) if agg else None, build, where,
                                          versions)
        first = metas[0]
        layout = open_layout(metas, build, agg)
        if layout is not None:
            layout.versions = tuple(f.identity for f in files_)
        if layout is not None and descriptor.parts:
            raise DescriptorError("<part> is for gridded files split by variable; these are station, profile or "
                                  f"trajectory files ({layout.feature_type}): publish each part apart", path=where)
        # Dimensions that may differ between files: the aggregated one, the string lengths of char
        # arrays, and the instance dimensions of ragged arrays (each file has its own stations).
        free = {agg, *string_length_dimensions(metas), *(layout.instance_dimensions if layout else ())}
        dim_sizes: dict[str, int] = {}
        seen_in: dict[str, str] = {}
        for meta in metas:
            for name, size in meta.dimensions.items():
                if name in dim_sizes and size != dim_sizes[name] and name not in free:
                    raise DataFileError(
                        f"{meta.path.name}: dimension {name!r} has {size} points, "
                        f"{seen_in[name]} has {dim_sizes[name]}; files of one dataset must share their grid"
                    )
                dim_sizes.setdefault(name, size)
                seen_in.setdefault(name, meta.path.name)
        if agg:
            if not descriptor.parts and agg not in first.dimensions:
                raise DescriptorError(f"aggregate dimension {agg!r} is not in {first.path.name}", path=where)
            dim_sizes[agg] = agg_size
        if layout is not None and layout.ragged:
            check_ragged_descriptor(descriptor, layout, where)
        # Before any coordinate is read or built: a declared size the files cannot back is refused.
        named = {c.dimension for c in descriptor.coordinates if c.dimension} | \
            {d for c in descriptor.coordinates for d in c.dimensions} | \
            {d for a in descriptor.attributes for d in a.dimensions}
        check_dimension_sizes(metas, named & set(dim_sizes), dim_sizes,
                              {p: v.size for p, v in versions.items() if v is not None})  # objects: no stat
        attributes = attribute_columns(descriptor, metas, dim_sizes, where, layout, [f.part for f in files_])
        used_dims = [d for a in attributes.values() for d in a.dimensions]
        # then the dimensions only coordinates are on (an HDF-EOS5 geolocation dimension no data field shares,
        # a date(date) beside a time × lat × lon grid); auxiliaries of station data are on instance dimensions,
        # which are not dimensions of records
        coord_dims = [d for c in descriptor.coordinates
                      for d in ((c.dimension,) if c.dimension else c.dimensions if layout is None else ())
                      if d in dim_sizes]
        labelled = [c.dimension for c in descriptor.coordinates if c.dimension and not c.auxiliary]
        order = list(dict.fromkeys([*descriptor.default_grid, *used_dims, *coord_dims, *labelled]))
        ds = cls(
            descriptor=descriptor,
            files=tuple(files_),
            dimensions={},
            coordinates={},
            attributes=attributes,
            global_attrs=first.attrs,
            handles=cast(FileHandles, build),  # what binding reads through while building; handles once built
            layout=layout,
        )
        coords: dict[str, CoordinateColumn] = {}
        for spec in descriptor.coordinates:
            if spec.auxiliary:
                continue
            coords[spec.name] = coordinate_column(ds, spec, metas, dim_sizes, where)
        by_dim = {c.dimension: c for c in coords.values() if c.dimension}
        homes: dict[str, str] = {}
        for meta in metas:
            for d, home in meta.homes.items():
                homes.setdefault(d, home)
        ds.dimensions = {d: Dimension(d, dim_sizes[d], by_dim.get(d), homes.get(d)) for d in order}
        ds.coordinates = coords
        for d in ds.dimensions:
            if d not in by_dim and d in attributes:
                raise DescriptorError(f"attribute {d!r} clashes with the index column of dimension {d!r}", path=where)
        for spec in descriptor.coordinates:
            if spec.auxiliary:
                ds.auxiliaries[spec.name] = auxiliary_column(ds, spec, metas, dim_sizes, where)
        add_bounds(ds, metas)
        for column in ds.auxiliaries.values():
            parts_agree(ds, column)
        ds.grid_mappings = grid_mappings(
            {**first.variables, **{k: v for m in metas[1:] for k, v in m.variables.items() if k not in first.variables}},
            [(a.spec.variable, a.attrs) for a in attributes.values()],
        )
        add_geographic(ds)
        add_weights(ds, metas)
        if agg and agg in by_dim:
            ds.coverage, gaps = coverage(by_dim[agg])
            ds.warnings = (*ds.warnings, *gaps)
        if layout is not None and not layout.ragged:
            candidates = [(c.name, c.dimensions, c.axis, ds.auxiliaries[c.name].attrs)
                          for c in descriptor.coordinates if c.auxiliary]
            ds.presence = presence_columns(layout.feature_type, candidates)
            if layout.feature_type != "point":
                incomplete = any(len(ds.column_dimensions(n)) >= 2 for group in ds.presence for n in group)
                layout.representation = ("incomplete" if incomplete else "orthogonal") + " multidimensional array"
        for column in [*ds.attributes.values(), *ds.auxiliaries.values(), *ds.coordinates.values()]:
            check_text_times(ds, column, metas)
        ds.warnings = (*ds.warnings, *_unusable_fills(ds, metas), *_case_variants(ds),
                       *dict.fromkeys(n for m in metas for n in m.notes))
        ds.handles = handles
        if layout is not None:
            layout.handles = handles
        return ds


def matching_files(descriptor: Descriptor) -> list[Path]:
    """Return the files a descriptor's glob matches, in name order: regular files inside its folder (a link
    that leads outside is not one of them)."""
    assert descriptor.path is not None
    folder = descriptor.path.parent
    paths = sorted(
        Path(p)
        for p in glob.glob(str(folder / descriptor.files_glob), recursive=True)
        if Path(p).is_file()
    )
    root = folder.resolve()
    return [p for p in paths if p.resolve().is_relative_to(root)]


def _case_variants(ds: GriddedDataset) -> list[str]:
    """Return one warning naming the CF attributes read from another spelling (``Units`` as ``units``), if any."""
    read_as: dict[str, list[str]] = {}
    for column in [*ds.attributes.values(), *ds.auxiliaries.values()]:
        for key, value in column.attrs.items():
            name = CF_BY_LOWER.get(key.lower())
            if name is not None and key != name and column.attrs.get(name) is value:
                read_as.setdefault(f"{key!r} as {name!r}", []).append(column.name)
    if not read_as:
        return []
    shown = "; ".join(f"{k} ({', '.join(v[:4])}{' …' if len(v) > 4 else ''})" for k, v in read_as.items())
    return [f"attributes read under their CF names: {shown}; xarray and netCDF4-python read only the exact CF "
            "spelling, so they neither mask, unpack nor label by these"]


def _unusable_fills(ds: GriddedDataset, metas: list[FileMeta]) -> list[str]:
    """Return a warning per column whose fill values its files' types cannot hold (they mask nothing)."""
    out = []
    for column in [*ds.attributes.values(), *ds.auxiliaries.values(), *ds.coordinates.values()]:
        hits = [(m.path.name, d) for m, d in zip(metas, column.file_decodings) if d is not None and d.unusable_fills]
        if hits:
            name, dec = hits[0]
            more = f" (and {len(hits) - 1} more files)" if len(hits) > 1 else ""
            values = ", ".join(repr(v) for v in dec.unusable_fills)
            out.append(f"{column.name}: {name}{more}: fill value {values} cannot be held by the variable's type, so "
                       "it marks nothing missing (as in xarray and netCDF4-python); if elements were meant to be "
                       "missing, set _FillValue/missing_value in the variable's own type")
    return out


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
