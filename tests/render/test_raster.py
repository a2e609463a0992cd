"""Nearest-cell sampling of rectilinear grids: any layout real archives use, against a brute-force oracle."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings, strategies as st

from dstp.render import Slab, colour, sample, tile_lonlat


@st.composite
def grids(draw: st.DrawFn) -> tuple[np.ndarray, np.ndarray, bool]:
    n_lat = draw(st.integers(2, 12))
    lat_step = draw(st.floats(0.5, 10))
    lat0 = draw(st.floats(-80, 80 - lat_step * (n_lat - 1))) if lat_step * (n_lat - 1) < 160 else -80.0
    lat = lat0 + lat_step * np.arange(n_lat)
    if draw(st.booleans()):
        lat = lat[::-1]  # descending, as many ocean models write it
    whole = draw(st.booleans())
    n_lon = draw(st.integers(2, 40))
    lon_step = 360 / n_lon if whole else draw(st.floats(0.5, 300 / n_lon))
    lon0 = draw(st.floats(-180, 360))
    lon = lon0 + lon_step * np.arange(n_lon)
    lon = lon % 360 if draw(st.booleans()) else (lon + 180) % 360 - 180  # 0…360 or −180…180
    return lat, lon, whole


@settings(max_examples=200, deadline=None)
@given(grids(), st.data())
def test_each_point_takes_the_nearest_cell_or_none_outside(grid, data) -> None:
    lat, lon, whole = grid
    values = np.arange(len(lat) * len(lon), dtype=np.float64).reshape(len(lat), len(lon))
    slab = Slab(values, lat, lon)
    plat = np.array(data.draw(st.lists(st.floats(-89, 89), min_size=1, max_size=20)))
    plon = np.array(data.draw(st.lists(st.floats(-180, 180), min_size=len(plat), max_size=len(plat))))
    got = sample(slab, plon, plat)
    dlat = np.abs(plat[:, None] - lat)
    dlon = np.abs((plon[:, None] - lon + 180) % 360 - 180)
    step_lat = np.abs(np.diff(lat)).min()
    # the spacing on the circle, in the grid's own order: [359, 0] is 1° apart, not 359°
    step_lon = np.abs((np.diff(lon) + 180) % 360 - 180).min() if not whole else 360 / len(lon)
    i, j = dlat.argmin(1), dlon.argmin(1)
    near_lat, near_lon = dlat.min(1), dlon.min(1)
    clear_inside = (near_lat < 0.49 * step_lat) & (near_lon < 0.49 * step_lon)
    clear_outside = (near_lat > 0.51 * step_lat) | (near_lon > 0.51 * step_lon)
    assert (got[clear_inside] == values[i, j][clear_inside]).all()
    assert np.isnan(got[clear_outside]).all()


def test_a_cell_straddling_the_antimeridian_is_found_from_both_sides() -> None:
    slab = Slab(np.array([[1.0, 2.0, 3.0]]), np.array([0.0]), np.array([170.0, 180.0, 190.0]))
    assert sample(slab, np.array([-179.0, 179.0, 171.0, -171.0, 0.0]), np.zeros(5)).tolist()[:4] == [2, 2, 1, 3]
    assert np.isnan(sample(slab, np.array([0.0]), np.zeros(1))[0])


def test_tile_zero_spans_the_mercator_world_and_missing_values_are_transparent() -> None:
    lon, lat = tile_lonlat(0, 0, 0)
    assert lon[0, 0] > -180 and lon[0, -1] < 180 and 84.9 < lat[0, 0] < 85.06 and lat[-1, 0] == -lat[0, 0]
    rgba = colour(np.array([np.nan, 0.0, 1.0]), "viridis", 0.0, 1.0)
    assert rgba[0].tolist() == [0, 0, 0, 0] and rgba[1, 3] == 255 and rgba[2, 3] == 255


def test_a_two_cell_grid_across_0_degrees_has_its_step_on_the_circle() -> None:
    # The case hypothesis found for the test's own oracle: lon [359, 0] is 1° apart, not 359° (sorted).
    lat, lon = np.array([0.0, 1.0]), np.array([359.0, 0.0])
    slab = Slab(np.arange(4, dtype=np.float64).reshape(2, 2), lat, lon)
    got = sample(slab, np.array([0.3, 359.2, 1.0, 357.0]), np.array([0.0, 1.0, 0.0, 0.0]))
    assert got[0] == 1.0 and got[1] == 2.0  # the nearest cells: (lat 0, lon 0), (lat 1, lon 359)
    assert np.isnan(got[2]) and np.isnan(got[3])  # a whole step or more from any cell: outside
