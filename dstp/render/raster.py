"""Nearest-cell rendering of a lat/lon field onto map pixels (XYZ tiles, WMS GetMap).

Each output pixel takes the value of the grid cell its centre falls in, or none
(transparent) outside the data:

* rectilinear grids (1-D latitude and longitude): the cell is found by a binary
  search over the cell edges (midpoints between coordinates), per axis.
  Latitudes may ascend or descend; longitudes may be on 0…360 or −180…180 and may
  cross the antimeridian: they are put on one unwrapped ascending run that starts
  after the largest gap of the circle, so a global grid wraps and a regional one
  stops at its own edges;
* grids on a grid mapping's axes (rotated pole, polar stereographic, Lambert…:
  :class:`Projection`): each pixel's lon/lat is carried into the grid's own x/y by
  pyproj (EPSG:4326 → the catalog's CRS WKT), then the same binary search per axis —
  so a pixel takes the cell whose x and y it lies between, the cell the file means,
  and nothing beyond half a cell past the outermost centres;
* curvilinear grids without a grid mapping (2-D latitude and longitude): the nearest
  cell centre by a KD-tree (scipy's ``cKDTree``) on points of the unit sphere,
  no further than three quarters of the typical spacing of neighbouring centres
  (a cell's half-diagonal is ~0.71 of it), so pixels beyond the grid's edge stay
  empty.

Web Mercator (EPSG:3857, the XYZ tile scheme) is inverted in closed form
(``lat = atan(sinh(π(1 − 2y)))``); it is a sphere of radius 6378137 m by
definition, so pyproj would compute the same numbers more slowly.

Colouring uses matplotlib's colour maps (``cmap(x, bytes=True)`` of the value
scaled to 0…1 by vmin/vmax) without pyplot, and Pillow writes the PNG. numpy's
fancy indexing does the sampling in one gather; datashader (not installed here)
aggregates points into pixels and would add numba and dask for no gain on a gather.
"""

from __future__ import annotations

import io
import math
import threading
from dataclasses import dataclass
from typing import Any

import numpy as np

from dstp.errors import BadRequestError

__all__ = ["COLORMAPS", "Projection", "Slab", "bbox_lonlat", "colour", "legend_png", "png", "sample", "tile_lonlat"]

#: Colour maps a request may name (matplotlib's); the first is the default.
COLORMAPS = ("viridis", "plasma", "inferno", "magma", "cividis", "turbo", "coolwarm", "RdBu_r", "Blues",
             "YlOrRd", "gray")
#: Web Mercator's sphere radius (EPSG:3857), metres.
EARTH_RADIUS = 6378137.0
#: Deepest XYZ zoom accepted (tiles of ~1 cm at the equator beyond).
MAX_ZOOM = 30
#: Largest image a request may ask for, pixels per side.
MAX_PIXELS = 4096

_CMAP_LOCK = threading.Lock()
_LOCAL = threading.local()  # pyproj Transformers are not thread-safe: one per thread and CRS


@dataclass(frozen=True, slots=True, eq=False)
class Projection:
    """A grid on a grid mapping's axes: its y and x coordinate values, the CRS (WKT), metres per axis unit.

    ``scale`` converts the axes' units to the CRS's (1000 for km); 1 for a rotated pole's degrees.
    """

    y: np.ndarray
    x: np.ndarray
    crs: str
    scale: float = 1.0

    def centres(self) -> tuple[np.ndarray, np.ndarray]:
        """Return the latitude and longitude (EPSG:4326) of each cell centre, 2-D (y, x)."""
        import pyproj

        gx, gy = np.meshgrid(np.asarray(self.x, dtype=np.float64) * self.scale,
                             np.asarray(self.y, dtype=np.float64) * self.scale)
        lon, lat = pyproj.Transformer.from_crs(pyproj.CRS.from_user_input(self.crs), "EPSG:4326",
                                               always_xy=True).transform(gx, gy)
        return np.asarray(lat, dtype=np.float64), np.asarray(lon, dtype=np.float64)


class Slab:
    """One 2-D field with its latitudes and longitudes: 1-D of (ny,) and (nx,), or 2-D like ``values``.

    With a ``projection`` (2-D latitude/longitude, the cell centres' places) cells are found on the grid
    mapping's own axes. The sampling index (cell edges or a KD-tree) is built on first use and kept.
    """

    __slots__ = ("values", "lat", "lon", "projection", "_index", "_lock")

    def __init__(self, values: np.ndarray, lat: np.ndarray, lon: np.ndarray,
                 projection: Projection | None = None) -> None:
        self.values = np.asarray(values, dtype=np.float64)
        self.lat = np.asarray(lat, dtype=np.float64)
        self.lon = np.asarray(lon, dtype=np.float64)
        if self.values.ndim != 2:
            raise ValueError(f"a slab is 2-D, not {self.values.shape}")
        if self.curvilinear:
            if self.lat.shape != self.values.shape or self.lon.shape != self.values.shape:
                raise ValueError("2-D latitude and longitude must have the values' shape")
        elif self.lat.shape != (self.values.shape[0],) or self.lon.shape != (self.values.shape[1],):
            raise ValueError("1-D latitude and longitude must match the values' rows and columns")
        if projection is not None and (projection.y.shape, projection.x.shape) != (
                (self.values.shape[0],), (self.values.shape[1],)):
            raise ValueError("a projection's y and x must match the values' rows and columns")
        self.projection = projection
        self._index: Any = None
        self._lock = threading.Lock()

    @property
    def curvilinear(self) -> bool:
        """Return whether latitude and longitude are 2-D."""
        return self.lat.ndim == 2

    def finite_range(self) -> tuple[float, float] | None:
        """Return the least and greatest finite value, None if every value is missing."""
        finite = self.values[np.isfinite(self.values)]
        return (float(finite.min()), float(finite.max())) if finite.size else None

    def locate(self, lon: np.ndarray, lat: np.ndarray) -> np.ndarray:
        """Return the flat index into ``values`` of the cell under each (lon, lat), −1 outside the data."""
        with self._lock:
            if self._index is None:
                self._index = _ProjectedIndex(self.projection) if self.projection is not None else \
                    _KdIndex(self.lat, self.lon) if self.curvilinear else _EdgeIndex(self.lat, self.lon)
            index = self._index
        return index.locate(np.asarray(lon, dtype=np.float64), np.asarray(lat, dtype=np.float64),
                            self.values.shape)


def _edges(ascending: np.ndarray, whole: float) -> np.ndarray:
    """Return the n + 1 cell edges of ascending centres: midpoints, and half a spacing beyond each end."""
    if len(ascending) == 1:
        return np.array([ascending[0] - whole / 2, ascending[0] + whole / 2])
    mids = (ascending[1:] + ascending[:-1]) / 2
    first = ascending[0] - (ascending[1] - ascending[0]) / 2
    last = ascending[-1] + (ascending[-1] - ascending[-2]) / 2
    return np.concatenate([[first], mids, [last]])


class _Axis:
    """Cell finder along one axis: binary search over the edges of its centres (any order).

    A ``period`` axis (longitudes, a rotated pole's x) is put on one unwrapped ascending run that starts after
    the largest gap of the circle, and a wanted value is brought onto that run.
    """

    def __init__(self, centres: np.ndarray, period: float | None) -> None:
        self.period = period
        if period is None:
            self.order = np.argsort(centres, kind="stable")
            self.edges = _edges(centres[self.order], 0.0)
            return
        wrapped = (centres + period / 2) % period - period / 2
        order = np.argsort(wrapped, kind="stable")
        circle = wrapped[order]
        if len(circle) > 1:
            gaps = np.diff(np.concatenate([circle, [circle[0] + period]]))
            start = (int(np.argmax(gaps)) + 1) % len(circle)
            order = np.roll(order, -start)
            circle = np.roll(circle, -start)
            circle[len(circle) - start:] += period if start else 0.0
        self.order = order
        self.edges = _edges(circle, period)

    def locate(self, wanted: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Return (index into the centres, inside) of each wanted coordinate."""
        if self.period is not None:
            start = self.edges[0]
            wanted = start + np.mod(wanted - start, self.period)
        k = np.searchsorted(self.edges, wanted, side="right") - 1
        ok = (k >= 0) & (k < len(self.order)) & np.isfinite(wanted)
        return self.order[np.clip(k, 0, len(self.order) - 1)], ok


class _EdgeIndex:
    """Cell finder of a rectilinear grid: a binary search per axis."""

    def __init__(self, lat: np.ndarray, lon: np.ndarray) -> None:
        self.lat = _Axis(lat, None)
        self.lat.edges = _edges(lat[self.lat.order], 180.0)  # one latitude: a band of 180°
        self.lon = _Axis(lon, 360.0)

    def locate(self, lon: np.ndarray, lat: np.ndarray, shape: tuple[int, ...]) -> np.ndarray:
        rows, i_ok = self.lat.locate(lat)
        cols, j_ok = self.lon.locate(lon)
        return np.where(i_ok & j_ok, rows * shape[1] + cols, -1)


def _transformer(crs: str) -> Any:
    """Return this thread's pyproj Transformer from EPSG:4326 (x = longitude) to ``crs``."""
    import pyproj

    cache: dict[str, Any] | None = getattr(_LOCAL, "transformers", None)
    if cache is None:
        cache = _LOCAL.transformers = {}
    found = cache.get(crs)
    if found is None:
        found = cache[crs] = pyproj.Transformer.from_crs("EPSG:4326", pyproj.CRS.from_user_input(crs),
                                                         always_xy=True)
    return found


class _ProjectedIndex:
    """Cell finder of a grid on a grid mapping's axes: lon/lat into the CRS's x/y (pyproj), then per axis."""

    def __init__(self, p: Projection) -> None:
        import pyproj

        geographic = not pyproj.CRS.from_user_input(p.crs).is_projected  # a rotated pole: x/y in degrees
        self.crs, self.scale = p.crs, p.scale
        self.y = _Axis(np.asarray(p.y, dtype=np.float64), None)
        self.x = _Axis(np.asarray(p.x, dtype=np.float64), 360.0 if geographic else None)

    def locate(self, lon: np.ndarray, lat: np.ndarray, shape: tuple[int, ...]) -> np.ndarray:
        with np.errstate(invalid="ignore"):
            gx, gy = _transformer(self.crs).transform(np.ascontiguousarray(lon), np.ascontiguousarray(lat),
                                                      errcheck=False)
            gx, gy = np.asarray(gx, dtype=np.float64) / self.scale, np.asarray(gy, dtype=np.float64) / self.scale
            gx[~np.isfinite(gx)], gy[~np.isfinite(gy)] = np.nan, np.nan
        rows, i_ok = self.y.locate(gy)
        cols, j_ok = self.x.locate(gx)
        return np.where(i_ok & j_ok, rows * shape[1] + cols, -1)


def _unit(lon: np.ndarray, lat: np.ndarray) -> np.ndarray:
    lam, phi = np.radians(lon), np.radians(lat)
    return np.stack([np.cos(phi) * np.cos(lam), np.cos(phi) * np.sin(lam), np.sin(phi)], axis=-1)


class _KdIndex:
    """Cell finder of a curvilinear grid: the nearest centre on the sphere, within a distance."""

    def __init__(self, lat: np.ndarray, lon: np.ndarray) -> None:
        from scipy.spatial import cKDTree

        flat = np.flatnonzero(np.isfinite(lat) & np.isfinite(lon))
        self.cells = flat
        points = _unit(lon.ravel()[flat], lat.ravel()[flat])
        self.tree = cKDTree(points)
        if len(flat) > 1:
            probe = points[:: max(1, len(flat) // 4000)]
            spacing = float(np.median(self.tree.query(probe, k=2)[0][:, 1]))
        else:
            spacing = math.radians(1.0)
        self.max_distance = 0.75 * spacing

    def locate(self, lon: np.ndarray, lat: np.ndarray, shape: tuple[int, ...]) -> np.ndarray:
        if not len(self.cells):
            return np.full(lon.shape, -1)
        distance, k = self.tree.query(_unit(lon, lat), distance_upper_bound=self.max_distance)
        found = np.isfinite(distance)
        return np.where(found, self.cells[np.clip(k, 0, len(self.cells) - 1)], -1)


def sample(slab: Slab, lon: np.ndarray, lat: np.ndarray) -> np.ndarray:
    """Return the value of the cell under each (lon, lat): NaN outside the data or where it is missing."""
    flat = slab.locate(lon, lat)
    out = np.full(flat.shape, np.nan)
    inside = flat >= 0
    out[inside] = slab.values.ravel()[flat[inside]]
    return out


def _size(width: int, height: int) -> None:
    if not (1 <= width <= MAX_PIXELS and 1 <= height <= MAX_PIXELS):
        raise BadRequestError(f"an image of {width} × {height} pixels cannot be drawn: each side must be 1 to "
                              f"{MAX_PIXELS}")


def tile_lonlat(z: int, x: int, y: int, size: int = 256) -> tuple[np.ndarray, np.ndarray]:
    """Return the longitude and latitude of each pixel centre of XYZ tile z/x/y (rows from the north)."""
    if not 0 <= z <= MAX_ZOOM:
        raise BadRequestError(f"zoom {z} is out of range: tiles exist for zoom 0 to {MAX_ZOOM}")
    n = 2**z
    if not (0 <= x < n and 0 <= y < n):
        raise BadRequestError(f"tile {z}/{x}/{y} does not exist: at zoom {z}, x and y run from 0 to {n - 1}")
    steps = (np.arange(size) + 0.5) / size
    lon = (x + steps) / n * 360.0 - 180.0
    lat = np.degrees(np.arctan(np.sinh(np.pi * (1.0 - 2.0 * (y + steps) / n))))
    return np.broadcast_to(lon, (size, size)), np.broadcast_to(lat[:, None], (size, size))


def bbox_lonlat(crs: str, bbox: tuple[float, float, float, float], width: int,
                height: int) -> tuple[np.ndarray, np.ndarray]:
    """Return the lon/lat of each pixel centre of an image of ``bbox`` = (min x, min y, max x, max y).

    x and y are longitude and latitude for ``CRS:84`` and ``EPSG:4326`` (the caller puts WMS 1.3.0's
    lat,lon order of EPSG:4326 right), metres of Web Mercator for ``EPSG:3857``.
    """
    _size(width, height)
    min_x, min_y, max_x, max_y = bbox
    if not (min_x < max_x and min_y < max_y):
        raise BadRequestError(f"BBOX {min_x},{min_y},{max_x},{max_y} is empty: its minimum must be below its "
                              "maximum on both axes")
    xs = min_x + (np.arange(width) + 0.5) / width * (max_x - min_x)
    ys = max_y - (np.arange(height) + 0.5) / height * (max_y - min_y)
    if crs == "EPSG:3857":
        xs = np.degrees(xs / EARTH_RADIUS)
        ys = np.degrees(np.arctan(np.sinh(ys / EARTH_RADIUS)))
    return np.broadcast_to(xs, (height, width)), np.broadcast_to(ys[:, None], (height, width))


def _colormap(name: str) -> Any:
    if name not in COLORMAPS:
        raise BadRequestError(f"colour map {name!r} is not offered; choose one of {', '.join(COLORMAPS)}")
    from matplotlib import colormaps

    with _CMAP_LOCK:  # a colour map builds its lookup table on first use
        cmap = colormaps[name]
        cmap(0.5)
    return cmap


def colour(values: np.ndarray, colormap: str, vmin: float, vmax: float) -> np.ndarray:
    """Return RGBA bytes (…, 4) of ``values`` through ``colormap`` scaled vmin…vmax; NaN is transparent."""
    if not (math.isfinite(vmin) and math.isfinite(vmax) and vmin < vmax):
        raise BadRequestError(f"vmin={vmin} and vmax={vmax} make no colour range: both finite and vmin < vmax")
    cmap = _colormap(colormap)
    scaled = (values - vmin) / (vmax - vmin)
    missing = ~np.isfinite(scaled)
    rgba: np.ndarray = cmap(np.where(missing, 0.0, scaled), bytes=True)
    rgba[missing] = 0
    return rgba


def png(rgba: np.ndarray) -> bytes:
    """Return ``rgba`` (height, width, 4 bytes) as a PNG."""
    from PIL import Image

    buf = io.BytesIO()
    Image.fromarray(np.ascontiguousarray(rgba, dtype=np.uint8), "RGBA").save(buf, format="PNG", compress_level=1)
    return buf.getvalue()


def legend_png(colormap: str, vmin: float, vmax: float, label: str, width: int = 80, height: int = 260) -> bytes:
    """Return a vertical colour bar (vmax on top) with its range and ``label`` written beside it."""
    from PIL import Image, ImageDraw

    _size(width, height)
    bar = colour(np.linspace(vmax, vmin, height)[:, None].repeat(20, axis=1), colormap, vmin, vmax)
    image = Image.new("RGBA", (width, height), (255, 255, 255, 255))
    image.paste(Image.fromarray(bar, "RGBA"), (0, 0))
    draw = ImageDraw.Draw(image)
    draw.text((24, 0), f"{vmax:.4g}", fill=(0, 0, 0, 255))
    draw.text((24, height - 12), f"{vmin:.4g}", fill=(0, 0, 0, 255))
    draw.text((24, height // 2 - 6), label[:10], fill=(0, 0, 0, 255))
    buf = io.BytesIO()
    image.save(buf, format="PNG")
    return buf.getvalue()
