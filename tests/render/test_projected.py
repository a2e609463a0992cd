"""Grids on a grid mapping's axes: each place takes the cell whose x and y are nearest on the grid's own axes.

Oracle: pyproj carries the place into the CRS (built from CF parameters by ``CRS.from_cf``), then a brute-force
argmin over the file's x and y values; places within 1 % of a cell of a tie are not compared, places more than
half a cell (plus 1 %) beyond the outermost centres must be outside.
"""

from __future__ import annotations

import numpy as np
import pyproj
from hypothesis import given, settings, strategies as st

from dstp.render import Projection, Slab, sample

MAPPINGS = [
    {"grid_mapping_name": "polar_stereographic", "straight_vertical_longitude_from_pole": -45.0,
     "latitude_of_projection_origin": 90.0, "standard_parallel": 70.0},
    {"grid_mapping_name": "polar_stereographic", "straight_vertical_longitude_from_pole": 0.0,
     "latitude_of_projection_origin": -90.0, "standard_parallel": -71.0},
    {"grid_mapping_name": "lambert_conformal_conic", "standard_parallel": [30.0, 60.0],
     "longitude_of_central_meridian": 10.0, "latitude_of_projection_origin": 45.0},
    {"grid_mapping_name": "rotated_latitude_longitude", "grid_north_pole_latitude": 39.25,
     "grid_north_pole_longitude": -162.0},
]


@st.composite
def grids(draw: st.DrawFn) -> tuple[dict, np.ndarray, np.ndarray, float]:
    mapping = draw(st.sampled_from(MAPPINGS))
    rotated = mapping["grid_mapping_name"] == "rotated_latitude_longitude"
    scale = 1.0 if rotated else draw(st.sampled_from([1.0, 1000.0]))  # m or km
    span = 5.0 if rotated else 1e6 / scale  # 5° of a rotated grid, or 1,000 km in the axes' units
    ny, nx = draw(st.integers(2, 15)), draw(st.integers(2, 15))
    step = draw(st.floats(0.05, 0.4)) * span
    y0, x0 = draw(st.floats(-3, 3)) * span, draw(st.floats(-3, 3)) * span
    y = y0 + step * np.arange(ny)
    x = x0 + step * np.arange(nx)
    if draw(st.booleans()):
        y = y[::-1].copy()  # north-up grids write y descending
    return mapping, y, x, scale


@settings(max_examples=150, deadline=None)
@given(grids(), st.data())
def test_each_place_takes_the_cell_nearest_on_the_grids_own_axes(grid, data) -> None:
    mapping, y, x, scale = grid
    crs = pyproj.CRS.from_cf(mapping)
    values = np.arange(len(y) * len(x), dtype=np.float64).reshape(len(y), len(x))
    projection = Projection(y, x, crs.to_wkt(), scale)
    slab = Slab(values, *projection.centres(), projection)
    # places drawn around the grid: its own x/y spread half a grid beyond each side, carried to lon/lat
    fy = np.array(data.draw(st.lists(st.floats(-0.5, 1.5), min_size=30, max_size=30)))
    fx = np.array(data.draw(st.lists(st.floats(-0.5, 1.5), min_size=30, max_size=30)))
    gy = y.min() + fy * (y.max() - y.min())
    gx = x.min() + fx * (x.max() - x.min())
    lon, lat = pyproj.Transformer.from_crs(crs, "EPSG:4326", always_xy=True).transform(gx * scale, gy * scale)
    got = sample(slab, np.asarray(lon), np.asarray(lat))
    # the oracle: the place back in the grid's CRS, the nearest x and y of the axes
    bx, by = pyproj.Transformer.from_crs("EPSG:4326", crs, always_xy=True).transform(lon, lat)
    bx, by = np.asarray(bx) / scale, np.asarray(by) / scale
    step = abs(y[1] - y[0])
    dy, dx = np.abs(by[:, None] - y), np.abs(bx[:, None] - x)
    if not crs.is_projected:
        dx = np.abs((bx[:, None] - x + 180) % 360 - 180)
    i, j = dy.argmin(1), dx.argmin(1)
    near_y, near_x = dy.min(1), dx.min(1)
    inside = (near_y < 0.49 * step) & (near_x < 0.49 * step)
    outside = (near_y > 0.51 * step) | (near_x > 0.51 * step)
    assert (got[inside] == values[i[inside], j[inside]]).all()
    assert np.isnan(got[outside]).all()
