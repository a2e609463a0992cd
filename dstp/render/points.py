"""Observations at their own places (station tables, a UGRID mesh's nodes) drawn as dots, and found by a click.

A dot is a disc of :data:`DOT_RADIUS` pixels with a black outline, in the colour of its
value (:func:`dstp.render.raster.colour`), drawn by Pillow where the map's projection
puts its longitude/latitude: Web Mercator for XYZ tiles, the BBOX's CRS for WMS. A dot
is drawn on the copy of the world nearest the picture, so one past the antimeridian
still shows. A click answers the place nearest it on the great circle, if that is
within what the caller allows (the dot's radius in degrees at the map's scale).
"""

from __future__ import annotations

import math
from typing import Callable

import numpy as np

from dstp.render.raster import EARTH_RADIUS, MAX_ZOOM, colour

__all__ = ["DOT_RADIUS", "Points", "ToPixel", "bbox_to_pixel", "dots", "tile_to_pixel"]

#: Radius of a dot, pixels.
DOT_RADIUS = 5

#: Carries longitudes/latitudes to fractional (column, row) of a picture.
ToPixel = Callable[[np.ndarray, np.ndarray], tuple[np.ndarray, np.ndarray]]


class Points:
    """Values at their own latitudes and longitudes (1-D, one per observation or node); ``keys`` name each
    place in the dataset (a mesh's node index), or are empty."""

    __slots__ = ("values", "lat", "lon", "keys")

    def __init__(self, values: np.ndarray, lat: np.ndarray, lon: np.ndarray, keys: np.ndarray | None = None) -> None:
        self.values = np.asarray(values, dtype=np.float64)
        self.lat = np.asarray(lat, dtype=np.float64)
        self.lon = np.asarray(lon, dtype=np.float64)
        self.keys = np.asarray(keys if keys is not None else [], dtype=np.float64)
        if not (self.values.ndim == 1 and self.lat.shape == self.values.shape == self.lon.shape):
            raise ValueError("points need one latitude and one longitude per value")

    def finite_range(self) -> tuple[float, float] | None:
        """Return the least and greatest finite value, None if every value is missing."""
        finite = self.values[np.isfinite(self.values)]
        return (float(finite.min()), float(finite.max())) if finite.size else None

    def nearest(self, lon: float, lat: float, within: float) -> int | None:
        """Return the index of the place nearest (lon, lat) on the great circle, None if farther than ``within``
        degrees of arc (or there is none)."""
        ok = np.isfinite(self.lat) & np.isfinite(self.lon)
        if not ok.any():
            return None
        la, lo = np.radians(self.lat), np.radians(self.lon)
        h = np.sin((la - math.radians(lat)) / 2) ** 2 + np.cos(la) * math.cos(math.radians(lat)) * \
            np.sin((lo - math.radians(lon)) / 2) ** 2
        h = np.where(ok, h, np.inf)
        k = int(np.argmin(h))
        arc = math.degrees(2 * math.asin(math.sqrt(min(1.0, float(h[k])))))
        return k if arc <= within else None


def _mercator_y(lat: np.ndarray) -> np.ndarray:
    """Return Web Mercator's y of latitudes as a fraction of the world's height from the north (0…1)."""
    phi = np.radians(np.clip(lat, -85.0511287798, 85.0511287798))
    return (1.0 - np.log(np.tan(np.pi / 4 + phi / 2)) / np.pi) / 2


def tile_to_pixel(z: int, x: int, y: int, size: int = 256) -> ToPixel:
    """Return the projection of XYZ tile z/x/y: lon/lat to its (column, row), on the copy of the world nearest."""
    if not 0 <= z <= MAX_ZOOM:
        raise ValueError(f"zoom {z} is out of range")
    n = 2**z
    centre = (x + 0.5) / n * 360.0 - 180.0

    def to_pixel(lon: np.ndarray, lat: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        lon = np.asarray(lon, dtype=np.float64)
        lon = lon + np.round((centre - lon) / 360.0) * 360.0
        return ((lon + 180.0) / 360.0 * n - x) * size, (_mercator_y(np.asarray(lat)) * n - y) * size

    return to_pixel


def bbox_to_pixel(crs: str, bbox: tuple[float, float, float, float], width: int, height: int) -> ToPixel:
    """Return the projection of a WMS picture of ``bbox`` (min x, min y, max x, max y in ``crs``, x east)."""
    min_x, min_y, max_x, max_y = bbox

    def to_pixel(lon: np.ndarray, lat: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        lon, lat = np.asarray(lon, dtype=np.float64), np.asarray(lat, dtype=np.float64)
        if crs == "EPSG:3857":
            half = math.pi * EARTH_RADIUS
            mx = np.radians(lon) * EARTH_RADIUS
            mx = mx + np.round(((min_x + max_x) / 2 - mx) / (2 * half)) * 2 * half
            my = (0.5 - _mercator_y(lat)) * 2 * half
            return (mx - min_x) / (max_x - min_x) * width, (max_y - my) / (max_y - min_y) * height
        lon = lon + np.round(((min_x + max_x) / 2 - lon) / 360.0) * 360.0
        return (lon - min_x) / (max_x - min_x) * width, (max_y - lat) / (max_y - min_y) * height

    return to_pixel


def dots(points: Points, to_pixel: ToPixel, width: int, height: int, colormap: str, vmin: float,
         vmax: float) -> np.ndarray:
    """Return the RGBA picture (height, width, 4) of ``points`` as outlined discs; missing values are not drawn."""
    from PIL import Image, ImageDraw

    image = Image.new("RGBA", (width, height), (0, 0, 0, 0))
    draw = ImageDraw.Draw(image)
    col, row = to_pixel(points.lon, points.lat)
    r = DOT_RADIUS
    with np.errstate(invalid="ignore"):
        seen = np.isfinite(points.values) & np.isfinite(col) & np.isfinite(row) & (col >= -r) & \
            (col <= width + r) & (row >= -r) & (row <= height + r)
    rgba = colour(points.values[seen], colormap, vmin, vmax)
    for c, w, fill in zip(col[seen], row[seen], rgba):
        draw.ellipse((c - r, w - r, c + r, w + r), fill=tuple(int(v) for v in fill), outline=(0, 0, 0, 255))
    return np.asarray(image)
