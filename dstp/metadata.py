"""Discovery metadata: what ListDatasets and Describe say about a dataset.

Plain value types built from a :class:`GriddedDataset`, shared by every
adapter (gRPC, HTTP, CLI) so that a dataset reads the same everywhere.
"""

from __future__ import annotations

import threading
import weakref
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable, Mapping, Sequence

if TYPE_CHECKING:  # clients import these value types without loading the catalog (netCDF4, HDF5)
    from dstp.catalog.dataset import AttributeColumn, CoordinateColumn, GriddedDataset

__all__ = [
    "ColumnInfo",
    "CoverageRun",
    "DatasetDetails",
    "DatasetSummary",
    "DimensionInfo",
    "FileInfo",
    "GridMappingInfo",
    "KeyInfo",
    "dataset_details",
    "dataset_summary",
    "file_axis",
    "render_value",
    "units_label",
    "units_per_file",
]


@dataclass(frozen=True, slots=True)
class DatasetSummary:
    id: str
    title: str
    summary: str
    keywords: tuple[str, ...]
    attributes: tuple[str, ...]
    default_grid: tuple[str, ...]
    default_grid_rows: int
    time_start: str
    time_end: str
    bbox: tuple[float, float, float, float] | None  # lat_min, lat_max, lon_min, lon_max
    size_bytes: int
    access_policy: str
    #: The longitudes' extent on −180…180 as (west, east): west > east when it crosses the antimeridian,
    #: (−180, 180) when it goes round the globe; None when unknown (no longitudes, or a remote dataset).
    lon_extent: tuple[float, float] | None = None
    #: The dataset's version in its catalog: one more at every change of its descriptor or files (0: unknown).
    version: int = 0


@dataclass(frozen=True, slots=True)
class DimensionInfo:
    name: str
    size: int
    coordinate: str
    min: str
    max: str
    order: int
    units: str
    calendar: str
    axis: str


@dataclass(frozen=True, slots=True)
class ColumnInfo:
    name: str
    variable: str
    dimensions: tuple[str, ...]
    units: str
    description: str
    arrow_type: str
    cf: tuple[tuple[str, str], ...]
    packed: bool
    nullable: bool
    coordinate: bool
    #: Files that lack the variable: the column is NULL on their records.
    missing_from: tuple[str, ...] = ()
    #: dimension, scalar, auxiliary, bounds, derived (coordinates) or data (attributes).
    role: str = ""
    #: How a derived or bounds column is made (e.g. "derived with pyproj from x, y and grid mapping 'crs'").
    note: str = ""


@dataclass(frozen=True, slots=True)
class GridMappingInfo:
    """A CF grid mapping: its variable, CF name and parameters, and the CRS as WKT 2 and PROJ."""

    name: str
    grid_mapping_name: str
    parameters: tuple[tuple[str, str], ...]
    wkt: str
    proj: str
    problem: str = ""
    #: The grid mapping variable's own (raw) value in the first file, as text, and its numpy dtype ("" if unread).
    value: str = ""
    dtype: str = ""


@dataclass(frozen=True, slots=True)
class FileInfo:
    name: str
    size_bytes: int
    format: str
    start: int
    count: int
    #: First and last value of the aggregation coordinate in this file (dates for times), "" if none.
    first: str = ""
    last: str = ""


@dataclass(frozen=True, slots=True)
class CoverageRun:
    """A stretch of the aggregation axis with no gap: first and last value, index range [start, stop)."""

    first: str
    last: str
    start: int
    stop: int


@dataclass(frozen=True, slots=True)
class KeyInfo:
    name: str
    column: str
    standard_name: str
    units: str


@dataclass(frozen=True, slots=True)
class DatasetDetails:
    summary: DatasetSummary
    dimensions: tuple[DimensionInfo, ...]
    coordinates: tuple[ColumnInfo, ...]
    attributes: tuple[ColumnInfo, ...]
    files: tuple[FileInfo, ...]
    correlation_keys: tuple[KeyInfo, ...]
    aggregate_dimension: str
    global_attributes: tuple[tuple[str, str], ...]
    license: str
    source: str
    descriptor_xml: str
    #: The aggregation axis as runs without gaps (one run when the files are complete).
    coverage: tuple[CoverageRun, ...] = ()
    #: Things a curator should know that do not stop serving (gaps, overlapping files).
    warnings: tuple[str, ...] = ()
    #: CF grid mappings of the data variables.
    grid_mappings: tuple[GridMappingInfo, ...] = ()
    #: CF ``featureType`` of station, profile and trajectory data (``timeSeries``), "" for grids.
    feature_type: str = ""
    #: What a record is and how the files' representation makes it (for discrete sampling geometries).
    layout: str = ""


def render_value(value: Any) -> str:
    """Return a coordinate value or attribute as text (ISO 8601 for instants)."""
    import numpy as np

    if isinstance(value, np.datetime64):
        return str(value.astype("datetime64[s]")) if value == value.astype("datetime64[s]") else str(value)
    if isinstance(value, np.ndarray):
        return " ".join(render_value(v) for v in value.reshape(-1).tolist())
    if isinstance(value, (np.floating, float)):
        return repr(float(value)) if np.isfinite(value) else str(float(value))
    if isinstance(value, np.generic):
        return str(value.item())
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    return str(value)


def _axis_of(ds: GriddedDataset, axis: str) -> CoordinateColumn | None:
    for c in ds.coordinates.values():
        if c.dimension and c.spec.axis == axis:
            return c
    return None


def _range(c: CoordinateColumn) -> tuple[Any, Any]:
    values = c.values
    if values.dtype == object:
        texts = sorted(str(v) for v in values)
        return texts[0], texts[-1]
    return values.min(), values.max()


def _degrees(units: str | None, direction: str) -> bool:
    """Return whether ``units`` are CF degrees north/east (a bounding box needs them)."""
    text = (units or "").replace(" ", "").lower()
    return text.startswith("degree") and (text.endswith(direction) or text.endswith(direction[0]))


def _kept(kind: str, ds: GriddedDataset, make: Callable[[GriddedDataset], Any]) -> Any:
    """Return ``make(ds)``, made once per dataset object.

    A published dataset is never changed: the catalog publishes a new object at every change (a new version),
    so what is made of one object stays true as long as it lives. Kept beside it, by its id, and dropped with
    it (a weak reference): an unpaged listing of 10,000 datasets made every summary and description again
    at every request (2.9 s for ERDDAP allDatasets, 0.7 s for /datasets.json).
    """
    key = (kind, id(ds))
    with _KEPT_LOCK:
        hit = _KEPT.get(key)
    if hit is not None and hit[0]() is ds:
        return hit[1]
    made = make(ds)

    def gone(ref: weakref.ref[GriddedDataset]) -> None:
        with _KEPT_LOCK:
            if _KEPT.get(key, (None,))[0] is ref:
                del _KEPT[key]

    with _KEPT_LOCK:
        _KEPT[key] = (weakref.ref(ds, gone), made)
    return made


_KEPT: dict[tuple[str, int], tuple[weakref.ref[GriddedDataset], Any]] = {}
_KEPT_LOCK = threading.Lock()


def dataset_summary(ds: GriddedDataset) -> DatasetSummary:
    """Return the catalog-listing view of a dataset (made once per dataset object)."""
    summary: DatasetSummary = _kept("summary", ds, _dataset_summary)
    return summary


def _dataset_summary(ds: GriddedDataset) -> DatasetSummary:
    d = ds.descriptor
    time_start = time_end = ""
    t = _axis_of(ds, "T")
    if t is not None and len(t.values):
        lo, hi = _range(t)
        time_start, time_end = render_value(lo), render_value(hi)
    else:
        time_start, time_end = _auxiliary_time_range(ds)
    bbox = None
    lat, lon = _axis_of(ds, "Y"), _axis_of(ds, "X")
    if (lat is not None and lon is not None and _degrees(lat.spec.units, "north")
            and _degrees(lon.spec.units, "east") and lat.values.dtype.kind in "if" and lon.values.dtype.kind in "if"):
        bbox = (float(lat.values.min()), float(lat.values.max()), float(lon.values.min()), float(lon.values.max()))
        lon_extent = longitude_extent(lon.values)
    else:
        bbox = _auxiliary_bbox(ds)
        lon_extent = longitude_extent(_auxiliary_longitudes(ds)) if bbox is not None else None
    return DatasetSummary(
        id=d.id,
        title=d.title,
        summary=d.summary or "",
        keywords=d.keywords,
        attributes=tuple(ds.attributes),
        default_grid=d.default_grid,
        default_grid_rows=ds.grid_size(d.default_grid),
        time_start=time_start,
        time_end=time_end,
        bbox=bbox,
        size_bytes=ds.size_bytes,
        access_policy=d.access_policy,
        lon_extent=lon_extent,
        version=ds.version,
    )


def _auxiliary_time_range(ds: GriddedDataset) -> tuple[str, str]:
    """Return the first and last instant of a time auxiliary coordinate held in memory (station data), or ("", "")."""
    import numpy as np

    for a in ds.auxiliaries.values():
        if a.values is None or a.values.dtype.kind != "M" or a.role != "auxiliary":
            continue
        values = a.values if a.mask is None else a.values[~a.mask]
        values = values[~np.isnat(values)]
        if values.size:
            return render_value(values.min()), render_value(values.max())
    return "", ""


def longitude_extent(values: Any) -> tuple[float, float] | None:
    """Return the extent of longitudes (degrees east, any convention) on −180…180 as (west, east).

    The extent is the circle less its largest gap between neighbouring longitudes, so a region stored on
    0…360 (200…212.5) is (−160, −147.5) and one across the antimeridian (170…190, or 350…10 stored on
    −180…180) has west > east, as STAC's bbox says it. Longitudes with no gap wider than twice their usual
    spacing go round the globe: (−180, 180).
    """
    import numpy as np

    v = np.asarray(values, dtype="float64").reshape(-1)
    v = v[np.isfinite(v)]
    if not v.size:
        return None
    u = np.unique(np.round(((v + 180.0) % 360.0) - 180.0, 9))
    if u.size == 1:
        return float(u[0]), float(u[0])
    gaps = np.diff(np.append(u, u[0] + 360.0))
    widest = int(np.argmax(gaps))
    usual = float(np.median(np.delete(gaps, widest)))
    if gaps[widest] <= 2 * usual:
        return -180.0, 180.0
    return float(u[(widest + 1) % u.size]), float(u[widest])


def _auxiliary_longitudes(ds: GriddedDataset) -> Any:
    """Return the longitudes of a 2-D (or derived) longitude coordinate held in memory, else an empty array."""
    import numpy as np

    for a in ds.auxiliaries.values():
        std = dict(a.spec.cf).get("standard_name") or ("longitude" if _degrees(a.spec.units, "east") else "")
        if std == "longitude" and a.values is not None and a.values.dtype.kind == "f" \
                and a.role in ("auxiliary", "derived"):
            return a.values if a.mask is None else a.values[~a.mask]
    return np.empty(0)


def _auxiliary_bbox(ds: GriddedDataset) -> tuple[float, float, float, float] | None:
    """Return the bounding box of 2-D (or derived) latitude/longitude held in memory, if the dataset has them."""
    found: dict[str, Any] = {}
    for a in ds.auxiliaries.values():
        std = dict(a.spec.cf).get("standard_name") or (
            "latitude" if _degrees(a.spec.units, "north") else "longitude" if _degrees(a.spec.units, "east") else "")
        if std in ("latitude", "longitude") and a.values is not None and a.values.dtype.kind == "f" \
                and std not in found and a.role in ("auxiliary", "derived"):
            import numpy as np

            values = a.values if a.mask is None else a.values[~a.mask]
            finite = values[np.isfinite(values)]
            if finite.size:
                found[std] = (float(finite.min()), float(finite.max()))
    if len(found) < 2:
        return None
    return (*found["latitude"], *found["longitude"])


#: File attributes ``cf`` leaves out: how a file stores values (the server has applied them, each file its own),
#: the units (a field of their own) and HDF5's dimension-scale bookkeeping, which no reader of the data needs.
_STORAGE_ATTRS = frozenset({"_FillValue", "missing_value", "scale_factor", "add_offset", "_Unsigned", "units",
                            "_ChunkSizes", "_Storage", "_DeflateLevel", "_Shuffle", "_Endianness", "_NoFill",
                            "_Netcdf4Dimid", "_Netcdf4Coordinates", "DIMENSION_LIST", "REFERENCE_LIST", "CLASS",
                            "NAME", "_nc3_strict"})


def _all_attributes(spec_cf: tuple[tuple[str, Any], ...], attrs: Mapping[str, Any]) -> tuple[tuple[str, str], ...]:
    """Return a variable's attributes as text: the first file's (but storage), the descriptor's CF ones over them."""
    merged: dict[str, Any] = {k: v for k, v in attrs.items() if k not in _STORAGE_ATTRS}
    merged.update(dict(spec_cf))
    return tuple((k, render_value(v)) for k, v in merged.items())


#: The start of a time coordinate's note when its files state its units differently (the label ``describe`` shows).
PER_FILE = "per file: "


def units_per_file(c: CoordinateColumn, files: Sequence[str]) -> str:
    """Return "per file: A … B (N different units; …)" when the files of a time coordinate state its units
    differently (monthly files counting days from their own month), else "".

    The descriptor's and the first file's units would label every file's times with one file's units, which
    misleads (each file's times are decoded with its own units, so the values are right).
    """
    stated = [(d.time_units, name) for d, name in zip(c.file_decodings, files) if d is not None and d.time_units]
    distinct = list(dict.fromkeys(u for u, _ in stated))
    if len(distinct) < 2:
        return ""
    (first, first_file), (last, last_file) = stated[0], stated[-1]
    if len(distinct) == 2:
        shown = f"{distinct[0]}, {distinct[1]}"
    else:
        shown = f"{first} … {last}" if first != last else f"{distinct[0]} … {distinct[-1]}"
    return (f"{PER_FILE}{shown} ({len(distinct)} different units, {first_file} … {last_file}; each file's times "
            "are decoded with its own)")


def units_label(d: "DatasetDetails", dim: DimensionInfo) -> str:
    """Return the units to show for a dimension: "per file: A … B" when its files state them differently."""
    coordinate = next((c for c in d.coordinates if c.name == dim.coordinate), None)
    if coordinate is not None and coordinate.note.startswith(PER_FILE):
        return coordinate.note.split(" (", 1)[0]
    return dim.units


def _coordinate_info(c: CoordinateColumn, files: Sequence[str] = ()) -> ColumnInfo:
    return ColumnInfo(
        name=c.name,
        variable=c.spec.variable,
        dimensions=(c.dimension,) if c.dimension else (),
        units=c.spec.units or "",
        description=dict(c.spec.cf).get("long_name", "") or render_value(c.attrs.get("long_name", "")),
        arrow_type=str(c.arrow_type),
        cf=_all_attributes(c.spec.cf, c.attrs),
        packed=c.decoding.packed,
        nullable=False,
        coordinate=True,
        role="dimension" if c.dimension else "scalar",
        note=units_per_file(c, files),
    )


def _auxiliary_info(a: AttributeColumn, missing_from: tuple[str, ...]) -> ColumnInfo:
    cf = dict(a.spec.cf)
    return ColumnInfo(
        name=a.name,
        variable=a.spec.variable,
        dimensions=a.dimensions,
        units=a.spec.units or cf.get("units", ""),
        description=a.spec.description or cf.get("long_name", ""),
        arrow_type=str(a.arrow_type),
        cf=_all_attributes(a.spec.cf, a.attrs),
        packed=a.decoding.packed,
        nullable=a.mask is not None or a.values is None,
        coordinate=True,
        missing_from=missing_from,
        role=a.role,
        note=a.note,
    )


def _declares_missing(a: AttributeColumn, missing_from: tuple[str, ...], table: bool) -> bool:
    """Return whether a data column is ``nullable``: whether it holds NULL where xarray's CF decoding masks.

    True for floats (NaN), text, times, packed and derived columns, a variable some file lacks,
    station/profile/trajectory tables (padding), and integers whose files give ``_FillValue`` or
    ``missing_value``: xarray turns those integers into floats. False for integers without them, whose
    type xarray keeps; there only an element equal to netCDF's default fill (never written) reads as
    NULL (``catalog/cf.py``).
    """
    import pyarrow as pa

    if table or missing_from or not a.file_decodings or not pa.types.is_integer(a.arrow_type):
        return True
    if "_FillValue" in a.attrs or "missing_value" in a.attrs:
        return True
    # ``attrs`` are the first file's: a file that decodes the variable otherwise may declare a fill.
    first = a.decoding
    return any(d is None or d.arrow_type != first.arrow_type or d.view != first.view
               or d.fill_values != first.fill_values for d in a.file_decodings)


def _attribute_info(a: AttributeColumn, missing_from: tuple[str, ...], table: bool) -> ColumnInfo:
    return ColumnInfo(
        name=a.name,
        variable=a.spec.variable,
        dimensions=a.dimensions,
        units=a.spec.units or "",
        description=a.spec.description or "",
        arrow_type=str(a.arrow_type),
        cf=_all_attributes(a.spec.cf, a.attrs),
        packed=a.decoding.packed,
        nullable=_declares_missing(a, missing_from, table),
        coordinate=False,
        missing_from=missing_from,
        role="data",
    )


def dataset_details(ds: GriddedDataset) -> DatasetDetails:
    """Return everything Describe reports about a dataset (made once per dataset object)."""
    details: DatasetDetails = _kept("details", ds, _dataset_details)
    return details


def _dataset_details(ds: GriddedDataset) -> DatasetDetails:
    d = ds.descriptor
    dims = []
    for dim in ds.dimensions.values():
        c = dim.coordinate
        if c is not None and len(c.values):
            lo, hi = _range(c)
            dims.append(
                DimensionInfo(
                    name=dim.name, size=dim.size, coordinate=c.name, min=render_value(lo), max=render_value(hi),
                    order=c.monotonic, units=c.spec.units or "", calendar=c.decoding.calendar or "",
                    axis=c.spec.axis or "other",
                )
            )
        else:
            dims.append(DimensionInfo(dim.name, dim.size, "", "0", str(max(0, dim.size - 1)), 1, "", "", "other"))
    descriptor_xml = d.path.read_text(encoding="utf-8") if d.path is not None and d.path.exists() else ""
    return DatasetDetails(
        summary=dataset_summary(ds),
        dimensions=tuple(dims),
        coordinates=(*(_coordinate_info(c, [f.path.name for f in ds.files]) for c in ds.coordinates.values()),
                     *(_auxiliary_info(a, ds.missing_from(a)) for a in ds.auxiliaries.values())),
        attributes=tuple(_attribute_info(a, ds.missing_from(a), table=ds.layout is not None)
                         for a in ds.attributes.values()),
        files=tuple(_file_info(ds, f) for f in ds.files),
        correlation_keys=tuple(
            KeyInfo(k.name, k.column, k.standard_name or "", k.units or "") for k in d.correlation_keys
        ),
        aggregate_dimension=d.aggregate or "",
        global_attributes=_global_attributes(ds),
        license=d.license or "",
        source=d.source or "",
        descriptor_xml=descriptor_xml,
        coverage=_coverage_runs(ds),
        warnings=ds.warnings,
        grid_mappings=tuple(
            GridMappingInfo(m.name, m.grid_mapping_name, m.parameters, m.wkt, m.proj, m.problem,
                            *_mapping_value(ds, m.name))
            for m in ds.grid_mappings.values()
        ),
        feature_type=ds.layout.feature_type if ds.layout is not None else "",
        layout=ds.layout.describe() if ds.layout is not None else "",
    )


def _mapping_value(ds: GriddedDataset, name: str) -> tuple[str, str]:
    """Return the raw value of a grid mapping variable in the first file that has it, and its dtype.

    The variable holds no data, but files give it a value (often 0 or 1, or netCDF's default fill) that
    xarray shows; ("", "") when no file can give it (a remote dataset, a file that became unreadable).
    """
    import numpy as np

    from dstp.errors import DataFileError

    for f in ds.files:
        try:
            value = ds.handles.read(f.path, name, ())
        except DataFileError:
            continue
        array = np.asarray(value)
        return render_value(array.reshape(-1)[0] if array.size else ""), str(array.dtype)
    return "", ""


def _global_attributes(ds: GriddedDataset) -> tuple[tuple[str, str], ...]:
    """Return the first file's global attributes, then what dstp makes of a discrete sampling geometry.

    ``dstp:feature_type`` and ``dstp:layout`` travel with the global attributes
    so that every adapter shows them without a field of their own.
    """
    shown = [(k, render_value(v)) for k, v in ds.global_attrs.items()]
    if ds.layout is not None:
        shown.append(("dstp:feature_type", ds.layout.feature_type))
        shown.append(("dstp:layout", ds.layout.describe()))
    return tuple(shown)


def _aggregation_coordinate(ds: GriddedDataset) -> CoordinateColumn | None:
    agg = ds.descriptor.aggregate
    dim = ds.dimensions.get(agg) if agg else None
    return dim.coordinate if dim is not None else None


def _file_info(ds: GriddedDataset, f: Any) -> FileInfo:
    """Return a file's listing, with the first and last aggregation coordinate it holds.

    A dataset not aggregated along an axis (one file, or files that each hold every record of their
    variables) has each file hold the whole time axis: its first and last time, and all its steps — not
    "index 0" and no dates, which made a one-file dataset look empty.
    """
    coord = _aggregation_coordinate(ds)
    first = last = ""
    if coord is not None and f.count > 0:
        first, last = render_value(coord.values[f.start]), render_value(coord.values[f.start + f.count - 1])
    elif coord is None and not ds.descriptor.aggregate:
        time = _axis_of(ds, "T")
        if time is not None and len(time.values):
            values = time.values
            return FileInfo(f.path.name, f.size, f.format, 0, len(values), render_value(values[0]),
                            render_value(values[-1]))
    return FileInfo(f.path.name, f.size, f.format, f.start, f.count, first, last)


def file_axis(d: DatasetDetails) -> str:
    """Return the dimension a file's first and last values are along: the aggregation's, else the time axis
    (a dataset not aggregated along an axis), else ""."""
    if d.aggregate_dimension:
        return d.aggregate_dimension
    return next((x.name for x in d.dimensions if x.axis == "T"), "")


def _coverage_runs(ds: GriddedDataset) -> tuple[CoverageRun, ...]:
    coord = _aggregation_coordinate(ds)
    if coord is None:
        return ()
    return tuple(
        CoverageRun(render_value(coord.values[a]), render_value(coord.values[b - 1]), a, b)
        for a, b in ds.coverage if b > a
    )
