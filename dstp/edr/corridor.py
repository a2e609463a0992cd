"""Which cells of a latitude/longitude grid lie in an EDR corridor: centres within half its width of the line.

The line is the user's vertices joined by geodesics on the WGS84 ellipsoid (the datum of CRS84, the
coordinates EDR requests are in), and a cell is in the corridor when the geodesic distance from its centre
to the nearest point of the line is at most ``corridor-width / 2``. :class:`pyproj.Geod` solves the
geodesic problems (Karney's algorithms, as GeographicLib and PostGIS ``geography`` do), so a corridor's edge
is where the ellipsoid puts it; a sphere would move it by up to ~0.5 % of the distance (the radius query
keeps its sphere, as documented).

The distance to one geodesic segment is found by golden-section search along it (pyproj's ``fwd`` then
``inv``), to 1 cm. Each segment is first cut into pieces of at most :data:`PIECE_M`, short enough that
the distance from a point along a piece has no interior maximum and minimum both (they are half the
Earth apart); the minimum also takes the piece's two ends, so a piece along which the distance only falls,
only rises or rises then falls is answered right too. Cells farther from a piece's middle than half the
piece plus the half width cannot be within it (triangle inequality) and are never searched.
"""

from __future__ import annotations

import math

import numpy as np

__all__ = ["PIECE_M", "corridor_cells"]

#: The longest piece of the line one search covers, metres.
PIECE_M = 500_000.0
#: The least meridional radius of curvature of WGS84 (at the equator), metres: a degree of latitude is at
#: least this many metres × π/180 long, which bounds the distance between two latitudes from below.
_MERIDIAN_MIN_M = 6_335_439.0
_GOLDEN = (math.sqrt(5.0) - 1.0) / 2.0
_TOLERANCE_M = 0.01


def _geod():  # type: ignore[no-untyped-def]
    from pyproj import Geod

    return Geod(ellps="WGS84")


def corridor_cells(lines: list[list[tuple[float, float]]], half_width_m: float, lons: np.ndarray,
                   lats: np.ndarray) -> np.ndarray:
    """Return a (len(lats), len(lons)) mask of the cells whose centres lie within ``half_width_m`` of the
    lines (each a list of (lon, lat) vertices joined by geodesics); ``lons`` on −180…180."""
    geod = _geod()
    lon2, lat2 = np.meshgrid(np.asarray(lons, "f8"), np.asarray(lats, "f8"))
    inside = np.zeros(lon2.shape, bool)
    for line in lines:
        for (lon_a, lat_a), (lon_b, lat_b) in zip(line, line[1:] if len(line) > 1 else line):
            az, _, length = geod.inv(lon_a, lat_a, lon_b, lat_b)
            pieces = max(1, math.ceil(length / PIECE_M))
            step = length / pieces
            for k in range(pieces):
                lon0, lat0, _ = geod.fwd(lon_a, lat_a, az, k * step)
                lon1, lat1, _ = geod.fwd(lon_a, lat_a, az, (k + 1) * step) if k + 1 < pieces else (lon_b, lat_b, 0)
                _piece(geod, float(lon0), float(lat0), float(lon1), float(lat1), half_width_m, lon2, lat2, inside)
    return inside


def _piece(geod, lon0: float, lat0: float, lon1: float, lat1: float, half_width_m: float,  # type: ignore[no-untyped-def]
           lon2: np.ndarray, lat2: np.ndarray, inside: np.ndarray) -> None:
    az, _, length = geod.inv(lon0, lat0, lon1, lat1)
    mid_lon, mid_lat, _ = geod.fwd(lon0, lat0, az, length / 2)
    reach = length / 2 + half_width_m
    # rows whose latitude alone puts them out of reach, then cells out of reach of the piece's middle
    rows = np.abs(lat2[:, 0] - mid_lat) * math.radians(1.0) * _MERIDIAN_MIN_M <= reach + 1.0
    if not rows.any():
        return
    plon, plat = lon2[rows].reshape(-1), lat2[rows].reshape(-1)
    todo = ~inside[rows].reshape(-1)
    _, _, to_mid = geod.inv(np.full(plon.shape, mid_lon), np.full(plon.shape, mid_lat), plon, plat)
    todo &= np.asarray(to_mid) <= reach
    idx = np.flatnonzero(todo)
    if idx.size == 0:
        return
    px, py = plon[idx], plat[idx]

    def distance(s: np.ndarray) -> np.ndarray:
        qx, qy, _ = geod.fwd(np.full(px.shape, lon0), np.full(px.shape, lat0), np.full(px.shape, az), s)
        return np.asarray(geod.inv(px, py, qx, qy)[2])

    best = np.minimum(distance(np.zeros(px.shape)), distance(np.full(px.shape, length)))
    lo, hi = np.zeros(px.shape), np.full(px.shape, length)
    if length > _TOLERANCE_M:
        c, d = hi - _GOLDEN * (hi - lo), lo + _GOLDEN * (hi - lo)
        fc, fd = distance(c), distance(d)
        for _ in range(int(math.ceil(math.log(_TOLERANCE_M / length) / math.log(_GOLDEN))) + 1):
            left = fc < fd  # the minimum lies in [lo, d]
            hi = np.where(left, d, hi)
            lo = np.where(left, lo, c)
            new_c, new_d = hi - _GOLDEN * (hi - lo), lo + _GOLDEN * (hi - lo)
            probe = np.where(left, new_c, new_d)
            fp = distance(probe)
            fd, fc = np.where(left, fc, fp), np.where(left, fp, fd)
            c, d = np.where(left, new_c, d), np.where(left, c, new_d)
            best = np.minimum(best, np.minimum(fc, fd))
    flat = inside[rows].reshape(-1)
    flat[idx] |= best <= half_width_m
    inside[rows] = flat.reshape(inside[rows].shape)
