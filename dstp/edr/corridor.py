"""Which cells of a latitude/longitude grid lie in an EDR corridor: centres within half its width of the line.

The line is the user's vertices joined by geodesics on the WGS84 ellipsoid (the datum of CRS84, the
coordinates EDR requests are in), and a cell is in the corridor when the geodesic distance from its centre
to the nearest point of the line is at most ``corridor-width / 2``. :class:`pyproj.Geod` solves the
geodesic problems (Karney's algorithms, as GeographicLib and PostGIS ``geography`` do), so a corridor's edge
is where the ellipsoid puts it; a sphere (haversine, 6371.0088 km) is off by up to 0.56 % of a distance, 6.1 km
at 1,000 km (200,000 random pairs; docs/edr.md). The radius query keeps its sphere, as documented.

The line is cut into pieces of at most :data:`PIECE_M` along its geodesics. A cell is out of a piece's reach
when its straight-line (chord) distance to the piece's middle, which no path on the surface can beat, passes
half the piece plus the half width; it is in when its geodesic distance to the middle or an end is at most the
half width. Only the cells left undecided by every piece — a thin band along the corridor's edges — are
searched: the distance to a piece is found by golden-section search along it (pyproj's ``fwd`` then ``inv``),
to 1 cm. A piece is short enough that the distance from a point along it has no interior maximum and minimum
both (they lie half the Earth apart), and the minimum also takes the piece's two ends, so a piece along which
the distance only falls, only rises, or rises then falls is answered right too.
"""

from __future__ import annotations

import math

import numpy as np

__all__ = ["PIECE_M", "centre_heights", "corridor_cells"]

#: The longest piece of the line, metres.
PIECE_M = 100_000.0
_GOLDEN = (math.sqrt(5.0) - 1.0) / 2.0
_TOLERANCE_M = 0.01
_A, _F = 6_378_137.0, 1 / 298.257223563  # WGS84
#: The least length of a degree of latitude on WGS84 (at the equator: the meridian's least radius of curvature,
#: a(1 − e²) = 6,335,439 m, × π/180), less a metre of margin.
_METRES_PER_DEGREE_MIN = 110_573.0


def _geod():  # type: ignore[no-untyped-def]
    from pyproj import Geod

    return Geod(ellps="WGS84")


def _ecef(lon: np.ndarray, lat: np.ndarray) -> np.ndarray:
    """Return Earth-centred Cartesian coordinates (metres) of points on the WGS84 ellipsoid, shape (…, 3)."""
    e2 = _F * (2 - _F)
    lam, phi = np.radians(lon), np.radians(lat)
    n = _A / np.sqrt(1 - e2 * np.sin(phi) ** 2)
    return np.stack([n * np.cos(phi) * np.cos(lam), n * np.cos(phi) * np.sin(lam), n * (1 - e2) * np.sin(phi)],
                    axis=-1)


def corridor_cells(lines: list[list[tuple[float, float]]], half_width_m: float, lons: np.ndarray,
                   lats: np.ndarray) -> np.ndarray:
    """Return a (len(lats), len(lons)) mask of the cells whose centres lie within ``half_width_m`` of the
    lines (each a list of (lon, lat) vertices joined by geodesics); ``lons`` on −180…180."""
    geod = _geod()
    lon2, lat2 = np.meshgrid(np.asarray(lons, "f8"), np.asarray(lats, "f8"))
    px, py = lon2.reshape(-1), lat2.reshape(-1)
    cells = _ecef(px, py)
    row_lats, row_size = np.asarray(lats, "f8"), lon2.shape[1]
    inside = np.zeros(px.size, bool)
    pieces = []
    for line in lines:
        for (lon_a, lat_a), (lon_b, lat_b) in zip(line, line[1:] if len(line) > 1 else line):
            az, _, length = geod.inv(lon_a, lat_a, lon_b, lat_b)
            count = max(1, math.ceil(length / PIECE_M))
            ends = [geod.fwd(lon_a, lat_a, az, k * length / count)[:2] for k in range(count)] + [(lon_b, lat_b)]
            pieces += [(float(a[0]), float(a[1]), float(b[0]), float(b[1])) for a, b in zip(ends, ends[1:])]
    undecided = []
    for lon0, lat0, lon1, lat1 in pieces:  # the cheap bounds first, for every piece
        az, _, length = geod.inv(lon0, lat0, lon1, lat1)
        mid = geod.fwd(lon0, lat0, az, length / 2)[:2]
        reach = length / 2 + half_width_m
        # rows whose latitude alone is out of reach (a degree of latitude is at least 110.57 km), then the chord
        rows = np.flatnonzero(np.abs(row_lats - mid[1]) * _METRES_PER_DEGREE_MIN <= reach + 1.0)
        if rows.size == 0:
            continue
        span = (rows[:, None] * row_size + np.arange(row_size)[None, :]).reshape(-1)
        chord = np.linalg.norm(cells[span] - _ecef(np.array(mid[0]), np.array(mid[1])), axis=-1)
        near = span[(chord <= reach + 1.0) & ~inside[span]]
        if near.size == 0:
            continue
        n = near.size
        to_mid = np.asarray(geod.inv(np.full(n, mid[0]), np.full(n, mid[1]), px[near], py[near])[2])
        to_ends = np.minimum(np.asarray(geod.inv(np.full(n, lon0), np.full(n, lat0), px[near], py[near])[2]),
                             np.asarray(geod.inv(np.full(n, lon1), np.full(n, lat1), px[near], py[near])[2]))
        inside[near[(to_mid <= half_width_m) | (to_ends <= half_width_m)]] = True
        undecided.append((lon0, lat0, az, length, near[to_mid <= reach]))
    for lon0, lat0, az, length, near in undecided:  # then the search, for the cells still undecided
        idx = near[~inside[near]]
        if idx.size:
            inside[idx] = _search(geod, lon0, lat0, az, length, px[idx], py[idx])[0] <= half_width_m
    return inside.reshape(lon2.shape)


def centre_heights(lines: list[list[tuple[float, float, float]]], half_width_m: float, lons: np.ndarray,
                   lats: np.ndarray, inside: np.ndarray) -> np.ndarray:
    """Return, for each cell of ``inside`` (a corridor_cells mask), the height of the line at the point nearest
    its centre — each segment's height changing linearly with the distance along it from one vertex's Z to
    the next's — and NaN for the cells outside."""
    geod = _geod()
    lon2, lat2 = np.meshgrid(np.asarray(lons, "f8"), np.asarray(lats, "f8"))
    idx = np.flatnonzero(inside.reshape(-1))
    px, py = lon2.reshape(-1)[idx], lat2.reshape(-1)[idx]
    cells = _ecef(px, py)
    best, height = np.full(idx.size, np.inf), np.full(idx.size, np.nan)
    for line in lines:
        for (lon_a, lat_a, z_a), (lon_b, lat_b, z_b) in zip(line, line[1:] if len(line) > 1 else line):
            az, _, length = geod.inv(lon_a, lat_a, lon_b, lat_b)
            count = max(1, math.ceil(length / PIECE_M))
            for k in range(count):
                start = k * length / count
                lon0, lat0 = geod.fwd(lon_a, lat_a, az, start)[:2]
                lon1, lat1 = geod.fwd(lon_a, lat_a, az, start + length / count)[:2] if k + 1 < count else (lon_b, lat_b)
                az0, _, piece = geod.inv(lon0, lat0, lon1, lat1)
                mid = geod.fwd(lon0, lat0, az0, piece / 2)[:2]
                near = np.flatnonzero(np.linalg.norm(cells - _ecef(np.array(mid[0]), np.array(mid[1])), axis=-1)
                                      <= piece / 2 + half_width_m + 1.0)
                if near.size == 0:
                    continue
                d, s = _search(geod, float(lon0), float(lat0), az0, piece, px[near], py[near])
                nearer = d < best[near]
                best[near] = np.minimum(best[near], d)
                fraction = np.clip((start + s * (length / count) / piece if piece > 0 else start + s) / length, 0, 1) \
                    if length > 0 else np.zeros(s.shape)
                height[near[nearer]] = (z_a + (z_b - z_a) * fraction)[nearer]
    out = np.full(inside.size, np.nan)
    out[idx] = height
    return out.reshape(inside.shape)


def _search(geod, lon0: float, lat0: float, az: float, length: float,  # type: ignore[no-untyped-def]
            px: np.ndarray, py: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Return the geodesic distance from each (px, py) to the piece of ``length`` from (lon0, lat0) along ``az``,
    and how far along the piece its nearest point lies."""

    def distance(s: np.ndarray) -> np.ndarray:
        qx, qy, _ = geod.fwd(np.full(px.shape, lon0), np.full(px.shape, lat0), np.full(px.shape, az), s)
        return np.asarray(geod.inv(px, py, qx, qy)[2])

    at_start, at_end = distance(np.zeros(px.shape)), distance(np.full(px.shape, length))
    best = np.minimum(at_start, at_end)
    where = np.where(at_start <= at_end, 0.0, length)
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
            nearer = np.minimum(fc, fd) < best
            where = np.where(nearer, np.where(fc <= fd, c, d), where)
            best = np.minimum(best, np.minimum(fc, fd))
    return best, where
