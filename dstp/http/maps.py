"""What the map doors (XYZ tiles, WMS, the map page) share: slabs read through the service, and caches.

A slab is read the way the quicklook reads one (:func:`dstp.http.quicklook.map_selection`:
one query fixing time and level by equality, so pushdown reads one hyperslab),
through :class:`~dstp.http.pages.CatalogView` and so the service — its access
policy, admission slots, limits and audit. Access is asked on every request
before any cache is looked at, so a cached tile of a restricted dataset is never
shown to someone who may not read it. Caches are keyed by the dataset's catalog
version: a dataset that changes (a new file) is read again.

    MapSource(view)
      .layer(dataset, variable, principal)        -> Layer (dimensions, units, values)
      .slab(dataset, variable, params, principal) -> MapSlab (the field and its fixed dimensions)
      .tile(dataset, variable, z, x, y, style, params, principal) -> PNG bytes
      .series(dataset, variable, lon, lat, params, principal)     -> the time series at that point (JSON)
      .picture(dataset, variable, crs, bbox, width, height, style, params, principal) -> PNG bytes (WMS GetMap)
      .value_at(dataset, variable, lon, lat, params, principal)   -> the cell's value there (GetFeatureInfo)
"""

from __future__ import annotations

import concurrent.futures
import threading
from collections import OrderedDict
from dataclasses import dataclass, replace
from typing import Any, Callable, Generic, Hashable, Mapping, TypeVar

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from dstp.auth import Principal
from dstp.catalog.gridmapping import metres_per_unit
from dstp.errors import BadRequestError, QueryError
from dstp.metadata import ColumnInfo, DatasetDetails, DimensionInfo
from dstp.http.pages import CatalogView
from dstp.http.builder import sql_identifier
from dstp.http.quicklook import Selection, geographic_columns, grid_axes, map_selection, series_selection
from dstp.render import COLORMAPS, Projection, Slab, bbox_lonlat, colour, legend_png, png, sample, tile_lonlat
from dstp.render.points import Points, bbox_to_pixel, dots, tile_to_pixel

__all__ = ["Layer", "MapSlab", "MapSource", "Style", "CACHE_BYTES"]

#: Memory for maps when none is given (the ``map_cache_bytes`` setting): half slabs, half PNGs.
CACHE_BYTES = 256 * 2**20
#: Places of a station or trajectory map drawn (the first in latitude, longitude order).
MAX_PLACES = 20_000

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")


class Lru(Generic[K, V]):
    """A thread-safe least-recently-used map bounded in bytes (``size`` of each value); a value larger than the
    whole capacity is not kept."""

    def __init__(self, capacity: int, size: Callable[[V], int]) -> None:
        self.capacity = capacity
        self.size = size
        self.held = 0
        self._items: OrderedDict[K, tuple[V, int]] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, key: K) -> V | None:
        with self._lock:
            found = self._items.get(key)
            if found is None:
                return None
            self._items.move_to_end(key)
            return found[0]

    def put(self, key: K, value: V) -> None:
        n = self.size(value)
        if n > self.capacity:
            return
        with self._lock:
            old = self._items.pop(key, None)
            self.held += n - (old[1] if old is not None else 0)
            self._items[key] = (value, n)
            while self.held > self.capacity:
                _, (_, dropped) = self._items.popitem(last=False)
                self.held -= dropped

    def __len__(self) -> int:
        with self._lock:
            return len(self._items)


@dataclass(frozen=True, slots=True)
class Style:
    """How values become colours: a colour map and its range (None: the slab's own least and greatest)."""

    colormap: str = COLORMAPS[0]
    vmin: float | None = None
    vmax: float | None = None

    def resolved(self, slab: Slab | Points) -> tuple[str, float, float]:
        """Return (colour map, vmin, vmax), filling an open end from the slab's values."""
        found = slab.finite_range() or (0.0, 1.0)
        low = found[0] if self.vmin is None else self.vmin
        high = found[1] if self.vmax is None else self.vmax
        if low == high and self.vmin is None and self.vmax is None:
            low, high = low - 0.5, high + 0.5
        return self.colormap, low, high


@dataclass(frozen=True, slots=True)
class Layer:
    """A mappable attribute of a dataset: its column, and its time and level dimensions if any."""

    dataset: str
    attribute: ColumnInfo
    time: DimensionInfo | None
    level: DimensionInfo | None
    curvilinear: bool
    #: The grid mapping's CRS (WKT) when the Y/X axes are its x/y (rotated pole, polar stereographic…), else "".
    crs: str = ""
    #: Metres per unit of a projected grid's axes (1000 for km); 1 for degrees.
    scale: float = 1.0
    #: "grid"; "points" (a station/trajectory table's observations); "mesh" (a UGRID mesh's nodes or faces).
    kind: str = "grid"
    #: A mesh's location dimension (nodes or faces, each with its own latitude and longitude).
    location: DimensionInfo | None = None


@dataclass(frozen=True, slots=True)
class MapSlab:
    """A slab read for a map: the field, the coordinate values of its rows and columns, and what was fixed."""

    slab: Slab | Points
    rows: np.ndarray
    columns: np.ndarray
    free: tuple[str, ...]
    fixed: tuple[tuple[str, str], ...]
    version: int

    def nbytes(self) -> int:
        """Return the bytes its arrays hold (values, latitudes, longitudes, axes; not a KD-tree built later)."""
        s = self.slab
        keys = s.keys.nbytes if isinstance(s, Points) else 0
        return s.values.nbytes + s.lat.nbytes + s.lon.nbytes + self.rows.nbytes + self.columns.nbytes + keys


def _floats(table: pa.Table, name: str) -> np.ndarray:
    return np.asarray(pc.cast(table.column(name), pa.float64()).to_numpy(zero_copy_only=False), dtype=np.float64)


#: CF's units of latitude and longitude (``degrees`` alone may be a rotated grid's, so it is not enough).
LATITUDE_UNITS = ("degrees_north", "degree_north", "degree_n", "degrees_n", "degreen", "degreesn")
LONGITUDE_UNITS = ("degrees_east", "degree_east", "degree_e", "degrees_e", "degreee", "degreese")


def _geographic_axis(details: DatasetDetails, d: DimensionInfo, std: str, units: tuple[str, ...]) -> bool:
    """Return whether dimension ``d``'s coordinate is latitude or longitude itself (not grid_latitude, not x)."""
    coordinate = next((c for c in details.coordinates if c.name == (d.coordinate or d.name)), None)
    standard = dict(coordinate.cf).get("standard_name", "") if coordinate is not None else ""
    return standard == std or (not standard and d.units.strip().lower() in units)


def _grid_mapping(details: DatasetDetails, a: ColumnInfo) -> str:
    """Return the WKT of ``a``'s grid mapping, "" without one pyproj understood."""
    name = dict(a.cf).get("grid_mapping", "").split(":")[0].strip()
    return next((m.wkt for m in details.grid_mappings if m.name == name and m.wkt and not m.problem), "")


def _scale(crs: str, y: DimensionInfo, x: DimensionInfo) -> float | None:
    """Return metres per unit of a projected grid's axes (1 for a rotated pole's degrees), None if not lengths."""
    import pyproj

    if not pyproj.CRS.from_user_input(crs).is_projected:
        return 1.0
    fy, fx = metres_per_unit(y.units), metres_per_unit(x.units)
    return fx if fx is not None and fx == fy else None


def mappable(details: DatasetDetails) -> list[Layer]:
    """Return the attributes of a gridded dataset on latitude × longitude axes, on a grid mapping's axes
    (drawn through its CRS), or with 2-D latitude/longitude.

    A grid whose Y/X axes are neither (projected metres, a rotated grid's degrees) with neither a grid mapping
    pyproj understood nor 2-D latitude/longitude is left out: drawing its axes as degrees would put the data
    in the wrong place.
    """
    found = []
    for a in details.attributes:
        dims = grid_axes(details, a.dimensions, [d for d in details.dimensions if d.name in a.dimensions])
        y = next((d for d in dims if d.axis == "Y"), None)
        x = next((d for d in dims if d.axis == "X"), None)
        if len(dims) == 1 and geographic_columns(details, a.dimensions) is not None:  # observations
            found.append(Layer(details.summary.id, a, None, None, False, kind="points"))
            continue
        if details.feature_type:
            continue
        location = _location(details, a, dims)
        if location is not None and (y is None or x is None):  # a UGRID mesh's nodes or faces
            found.append(Layer(details.summary.id, a, next((d for d in dims if d.axis == "T"), None),
                               next((d for d in dims if d.axis == "Z"), None), False, kind="mesh",
                               location=location))
            continue
        if y is None or x is None:
            continue
        curvilinear = geographic_columns(details, a.dimensions) is not None
        crs, scale = "", 1.0
        if not (_geographic_axis(details, y, "latitude", LATITUDE_UNITS)
                and _geographic_axis(details, x, "longitude", LONGITUDE_UNITS)):
            crs = _grid_mapping(details, a)
            factor = _scale(crs, y, x) if crs else None
            if factor is None:
                crs = ""
                if not curvilinear:
                    continue
            else:
                scale = factor
        time = next((d for d in dims if d.axis == "T"), None)
        level = next((d for d in dims if d.axis == "Z"), None)
        found.append(Layer(details.summary.id, a, time, level, curvilinear, crs, scale))
    return found


def _location(details: DatasetDetails, a: ColumnInfo, dims: list[DimensionInfo]) -> DimensionInfo | None:
    """Return the one dimension of ``a`` whose places have their own 1-D latitude and longitude, if any."""
    geo = geographic_columns(details, a.dimensions)
    lat = next((c for c in details.coordinates if geo is not None and c.name == geo[0]), None)
    if lat is None or len(lat.dimensions) != 1:
        return None
    return next((d for d in dims if d.name == lat.dimensions[0]), None)


def mesh_selection(details: DatasetDetails, layer: Layer, params: Mapping[str, str],
                   values_of: Callable[[str], Any]) -> Selection:
    """Return the slice of a mesh variable: its places' values, keys, latitudes and longitudes at one time and
    level — the quicklook's selection of a series along the location dimension, with the places added."""
    assert layer.location is not None
    name = layer.location.name
    dims = tuple(replace(d, axis="T" if d.name == name else "other" if d.axis == "T" else d.axis)
                 for d in details.dimensions)
    s = series_selection(replace(details, dimensions=dims), layer.attribute.name, params, values_of)
    lat, lon = geographic_columns(details, layer.attribute.dimensions) or ("", "")
    head, rest = s.sql.split(" from ", 1)
    sql = f"{head}, {sql_identifier(lat)}, {sql_identifier(lon)} from {rest}"
    return Selection(s.attribute, sql, s.fixed, s.free, s.free_units, (lat, lon), "points", s.fixed_shown)


def station_selection(details: DatasetDetails, layer: Layer, values_of: Callable[[str], Any]) -> Selection:
    """Return the dots of a station/trajectory attribute: at each place its latest observation (one query,
    grouped by place, at most :data:`MAX_PLACES`); without a time coordinate, the quicklook's sample."""
    a = layer.attribute
    time = _time_coordinate(details, a)
    geo = geographic_columns(details, a.dimensions)
    if time is None or geo is None:
        return map_selection(details, a.name, {}, values_of)
    lat, lon = (sql_identifier(c) for c in geo)
    v, t = sql_identifier(a.name), sql_identifier(time)
    sql = (f"select {lat}, {lon}, arg_max({v}, {t}) as {v} from {sql_identifier(details.summary.id)} "
           f"where {v} is not null group by {lat}, {lon} order by {lat}, {lon} limit {MAX_PLACES}")
    return Selection(a, sql, (), geo, ("degrees_north", "degrees_east"), geo, "points")


def _time_coordinate(details: DatasetDetails, a: ColumnInfo) -> str | None:
    return next((c.name for c in details.coordinates if dict(c.cf).get("standard_name") == "time"
                 and c.dimensions and set(c.dimensions) <= set(a.dimensions)), None)


class MapSource:
    """Slabs, tiles and series of datasets, read through a :class:`CatalogView` with the caller's principal."""

    def __init__(self, view: CatalogView, cache_bytes: int = CACHE_BYTES) -> None:
        self.view = view
        self._slabs: Lru[tuple[Any, ...], MapSlab] = Lru(cache_bytes // 2, MapSlab.nbytes)
        self._tiles: Lru[tuple[Any, ...], bytes] = Lru(cache_bytes - cache_bytes // 2, len)
        #: Called when a request waits for another's read of the same slab (tests observe the collapse).
        self.on_wait: Callable[[], None] | None = None
        self._lock = threading.Lock()
        self._reading: dict[tuple[Any, ...], concurrent.futures.Future[MapSlab]] = {}
        #: Slabs read through the service (not from the cache nor another request's read), for tests.
        self.reads = 0

    def layer(self, dataset: str, variable: str, principal: Principal) -> Layer:
        """Return the layer of ``variable`` (DatasetNotFoundError if ``principal`` may not read the dataset)."""
        details = self.view.details(dataset, principal)
        layers = mappable(details)
        for layer in layers:
            if layer.attribute.name == variable:
                return layer
        names = ", ".join(x.attribute.name for x in layers) or "none"
        raise QueryError(f"{dataset} has no attribute {variable!r} on a latitude/longitude grid to map; "
                         f"its mappable attributes are: {names}")

    def _params(self, layer: Layer, params: Mapping[str, str]) -> dict[str, str]:
        chosen = {}
        for key, dim in (("time", layer.time), ("elevation", layer.level)):
            if dim is not None and params.get(key, "").strip():
                chosen[dim.name] = params[key].strip()
        return chosen

    def slab(self, dataset: str, variable: str, params: Mapping[str, str], principal: Principal) -> MapSlab:
        """Return the slab (or the points) of ``variable`` at the time and elevation in ``params`` (nearest values).

        Requests for a slab being read wait for that one read (no lock is held across it) instead of each
        reading it: access was asked of each before (``layer``), and the reader's errors are theirs too.
        """
        layer = self.layer(dataset, variable, principal)
        details = self.view.details(dataset, principal)
        values_of: Callable[[str], Any] = lambda dim: self.view.values(dataset, dim, principal)  # noqa: E731
        if layer.kind == "mesh":
            s = mesh_selection(details, layer, self._params(layer, params), values_of)
        elif layer.kind == "points":
            s = station_selection(details, layer, values_of)
        else:
            s = map_selection(details, variable, self._params(layer, params), values_of)
        version = self.view.service.catalog.get(dataset).version
        key = (dataset, version, variable, s.fixed)
        with self._lock:
            found = self._slabs.get(key)
            if found is not None:
                return found
            pending = self._reading.get(key)
            mine = pending is None
            if pending is None:
                pending = self._reading[key] = concurrent.futures.Future()
        if not mine:
            if self.on_wait is not None:
                self.on_wait()
            return pending.result()
        try:
            found = self._read(layer, s, version, principal)
        except BaseException as exc:
            with self._lock:
                self._reading.pop(key, None)
            pending.set_exception(exc)
            raise
        with self._lock:
            self._slabs.put(key, found)
            self._reading.pop(key, None)
            self.reads += 1
        pending.set_result(found)
        return found

    def _read(self, layer: Layer, s: Selection, version: int, principal: Principal) -> MapSlab:
        table = self.view.table(s.sql, principal)
        variable = layer.attribute.name
        if s.kind == "points":  # a station table's observations, a mesh's nodes or faces
            assert s.geographic is not None
            keys = _floats(table, s.free[0]) if layer.kind == "mesh" else None
            points = Points(_floats(table, variable), _floats(table, s.geographic[0]),
                            _floats(table, s.geographic[1]), keys)
            return MapSlab(points, np.empty(0), np.empty(0), s.free, s.fixed, version)
        y_name, x_name = s.free
        rows, ri = np.unique(_floats(table, y_name), return_inverse=True)
        cols, ci = np.unique(_floats(table, x_name), return_inverse=True)
        values = np.full((len(rows), len(cols)), np.nan)
        values[ri, ci] = _floats(table, variable)
        # on a grid mapping's axes cells are found in its x/y, and lat/lon (the file's, the catalog's derived
        # ones, or pyproj's) only say where the centres are
        projection = Projection(rows, cols, layer.crs, layer.scale) if layer.crs else None
        slab: Slab
        if s.geographic is not None:
            lat, lon = np.full(values.shape, np.nan), np.full(values.shape, np.nan)
            lat[ri, ci] = _floats(table, s.geographic[0])
            lon[ri, ci] = _floats(table, s.geographic[1])
            slab = Slab(values, lat, lon, projection)
        elif projection is not None:
            slab = Slab(values, *projection.centres(), projection)
        else:
            slab = Slab(values, rows, cols)
        return MapSlab(slab, rows, cols, (y_name, x_name), s.fixed, version)

    def tile(self, dataset: str, variable: str, z: int, x: int, y: int, style: Style, params: Mapping[str, str],
             principal: Principal) -> bytes:
        """Return the 256 × 256 PNG of XYZ tile z/x/y (Web Mercator), transparent outside the data."""
        lon, lat = tile_lonlat(z, x, y)  # a bad tile address is refused before any read
        m = self.slab(dataset, variable, params, principal)
        colormap, vmin, vmax = style.resolved(m.slab)
        key = (dataset, m.version, variable, m.fixed, z, x, y, colormap, vmin, vmax)
        found = self._tiles.get(key)
        if found is None:
            if isinstance(m.slab, Points):
                found = png(dots(m.slab, tile_to_pixel(z, x, y), 256, 256, colormap, vmin, vmax))
            else:
                found = png(colour(sample(m.slab, lon, lat), colormap, vmin, vmax))
            self._tiles.put(key, found)
        return found

    def _place(self, layer: Layer, m: MapSlab, lon: float, lat: float, within: float) -> int | None:
        """Return the observation or node whose dot is at (lon, lat): the nearest within ``within`` degrees."""
        assert isinstance(m.slab, Points)
        return m.slab.nearest(lon, lat, within)

    def series(self, dataset: str, variable: str, lon: float, lat: float, params: Mapping[str, str],
               principal: Principal, within: float = 1.0) -> dict[str, Any]:
        """Return the time series of the cell under (lon, lat): times as the dataset writes them, values, units.

        On a station or mesh map, of the station or node nearest (lon, lat) within ``within`` degrees of arc.
        """
        layer = self.layer(dataset, variable, principal)
        details = self.view.details(dataset, principal)
        if layer.kind == "points":
            return self._station_series(details, layer, lon, lat, params, principal, within)
        if layer.time is None:
            raise QueryError(f"{dataset}.{variable} has no time axis, so it has no time series")
        m = self.slab(dataset, variable, params, principal)
        if isinstance(m.slab, Points):  # a mesh: the node's (or face's) series
            assert layer.location is not None
            k = self._place(layer, m, lon, lat, within)
            if k is None:
                raise BadRequestError(f"{dataset}.{variable} has no {layer.location.name} within {within:.3g}° of "
                                      f"({lat:g}°N, {lon:g}°E): click on a dot")
            chosen = {layer.location.name: repr(float(m.slab.keys[k]))}
            cell = {"lat": float(m.slab.lat[k]), "lon": float(m.slab.lon[k])}
        else:
            flat = int(m.slab.locate(np.array([lon]), np.array([lat]))[0])
            if flat < 0:
                raise BadRequestError(f"lat={lat}, lon={lon} is outside the grid of {dataset}.{variable}")
            row, col = divmod(flat, m.slab.values.shape[1])
            dims = {(d.coordinate or d.name): d.name for d in details.dimensions}
            chosen = {dims.get(m.free[0], m.free[0]): repr(float(m.rows[row])),
                      dims.get(m.free[1], m.free[1]): repr(float(m.columns[col]))}
            cell = {"lat": float(m.slab.lat.ravel()[flat] if m.slab.curvilinear else m.slab.lat[row]),
                    "lon": float(m.slab.lon.ravel()[flat] if m.slab.curvilinear else m.slab.lon[col])}
        if layer.level is not None and params.get("elevation", "").strip():
            chosen[layer.level.name] = params["elevation"].strip()
        s = series_selection(details, variable, chosen, lambda dim: self.view.values(dataset, dim, principal))
        table = self.view.table(s.sql, principal)
        (t_name,) = s.free
        return _series(dataset, variable, layer, cell, dict(s.fixed), table, t_name)

    def _station_series(self, details: DatasetDetails, layer: Layer, lon: float, lat: float,
                        params: Mapping[str, str], principal: Principal, within: float) -> dict[str, Any]:
        """Return the observations of the station whose dot is at (lon, lat), in time order."""
        dataset, variable = layer.dataset, layer.attribute.name
        m = self.slab(dataset, variable, params, principal)
        k = self._place(layer, m, lon, lat, within)
        if k is None:
            raise BadRequestError(f"{dataset}.{variable} has no station within {within:.3g}° of "
                                  f"({lat:g}°N, {lon:g}°E): click on a dot")
        time = _time_coordinate(details, layer.attribute)
        if time is None:
            raise QueryError(f"{dataset}.{variable} has no time coordinate, so it has no time series")
        assert isinstance(m.slab, Points)
        geo_lat, geo_lon = geographic_columns(details, layer.attribute.dimensions) or ("", "")
        place = {"lat": float(m.slab.lat[k]), "lon": float(m.slab.lon[k])}
        sql = (f"select {sql_identifier(time)}, {sql_identifier(variable)} from {sql_identifier(dataset)} "
               f"where {sql_identifier(geo_lat)} = {place['lat']!r} and {sql_identifier(geo_lon)} = {place['lon']!r}")
        return _series(dataset, variable, layer, place, {}, self.view.table(sql, principal), time)

    def picture(self, dataset: str, variable: str, crs: str, bbox: tuple[float, float, float, float], width: int,
                height: int, style: Style, params: Mapping[str, str], principal: Principal) -> bytes:
        """Return a PNG of ``bbox`` (min x, min y, max x, max y in ``crs``: CRS:84/EPSG:4326 lon/lat or EPSG:3857)."""
        lon, lat = bbox_lonlat(crs, bbox, width, height)
        m = self.slab(dataset, variable, params, principal)
        colormap, vmin, vmax = style.resolved(m.slab)
        if isinstance(m.slab, Points):
            return png(dots(m.slab, bbox_to_pixel(crs, bbox, width, height), width, height, colormap, vmin, vmax))
        return png(colour(sample(m.slab, lon, lat), colormap, vmin, vmax))

    def legend(self, dataset: str, variable: str, style: Style, params: Mapping[str, str],
               principal: Principal) -> bytes:
        """Return the colour bar of ``style`` over the slab's range (or the one asked for), labelled with units."""
        layer = self.layer(dataset, variable, principal)
        m = self.slab(dataset, variable, params, principal)
        colormap, vmin, vmax = style.resolved(m.slab)
        return legend_png(colormap, vmin, vmax, layer.attribute.units)

    def value_at(self, dataset: str, variable: str, lon: float, lat: float, params: Mapping[str, str],
                 principal: Principal, within: float = 1.0) -> dict[str, Any]:
        """Return the value of the cell under (lon, lat) with the cell's centre and what was fixed (None outside).

        On a station or mesh map: of the place nearest (lon, lat) within ``within`` degrees (its dot's radius).
        """
        layer = self.layer(dataset, variable, principal)
        m = self.slab(dataset, variable, params, principal)
        answer: dict[str, Any] = {"dataset": dataset, "variable": variable, "units": layer.attribute.units,
                                  "fixed": dict(m.fixed), "lon": lon, "lat": lat, "value": None, "cell": None}
        if isinstance(m.slab, Points):
            k = self._place(layer, m, lon, lat, within)
            if k is not None:
                value = float(m.slab.values[k])
                answer["value"] = value if np.isfinite(value) else None
                answer["cell"] = {"lat": float(m.slab.lat[k]), "lon": float(m.slab.lon[k])}
            return answer
        flat = int(m.slab.locate(np.array([lon]), np.array([lat]))[0])
        if flat >= 0:
            row, col = divmod(flat, m.slab.values.shape[1])
            value = float(m.slab.values[row, col])
            answer["value"] = value if np.isfinite(value) else None
            answer["cell"] = {"lat": float(m.slab.lat.ravel()[flat] if m.slab.curvilinear else m.slab.lat[row]),
                              "lon": float(m.slab.lon.ravel()[flat] if m.slab.curvilinear else m.slab.lon[col])}
        return answer


def _series(dataset: str, variable: str, layer: Layer, cell: dict[str, float], fixed: dict[str, str],
            table: pa.Table, t_name: str) -> dict[str, Any]:
    """Return a series answer: the place, what was fixed, times (as the dataset writes them) and values in order."""
    times = [v.isoformat() if hasattr(v, "isoformat") else str(v) for v in table.column(t_name).to_pylist()]
    values = _floats(table, variable)
    order = sorted(range(len(times)), key=lambda i: (times[i], values[i]))
    return {"dataset": dataset, "variable": variable, "units": layer.attribute.units, "cell": cell, "fixed": fixed,
            "time": [times[i] for i in order],
            "values": [None if not np.isfinite(values[i]) else float(values[i]) for i in order]}
