"""The cells of an EDR corridor (dstp.edr.corridor) against the line sampled densely along its geodesics.

The oracle samples each segment every 10 km with pyproj's ``inv_intermediate`` and takes, for each cell
centre, the least geodesic distance to a sample: at least the distance to the line, and at most 5 km more.
A cell nearer than half the width to a sample must be in; one farther than half the width + 5 km from
every sample must be out. Lines go anywhere: across the antimeridian, near the poles, nearly antipodal.
"""

from __future__ import annotations

import numpy as np
from hypothesis import example, given, settings, strategies as st
from pyproj import Geod

from dstp.edr.corridor import corridor_cells

GEOD = Geod(ellps="WGS84")
LONS = np.arange(-175.0, 180.0, 10.0)
LATS = np.arange(-85.0, 90.0, 10.0)
STEP_M = 10_000.0


def _sampled_distance(line: list[tuple[float, float]], lon2: np.ndarray, lat2: np.ndarray) -> np.ndarray:
    samples = []
    for (x0, y0), (x1, y1) in zip(line, line[1:]):
        r = GEOD.inv_intermediate(x0, y0, x1, y1, del_s=STEP_M, initial_idx=0, terminus_idx=0,
                                  return_back_azimuth=True)
        samples += list(zip(r.lons, r.lats))
    sx, sy = np.array(samples).T
    best = np.full(lon2.size, np.inf)
    for k in range(0, sx.size, 256):
        a, b = np.meshgrid(sx[k:k + 256], lon2.ravel(), indexing="ij")
        c, e = np.meshgrid(sy[k:k + 256], lat2.ravel(), indexing="ij")
        best = np.minimum(best, GEOD.inv(a, c, b, e, return_back_azimuth=True)[2].min(axis=0))
    return best.reshape(lon2.shape)


@settings(max_examples=12, deadline=None)
@example(line=[(170.0, 10.0), (-170.0, -10.0)], half_km=300.0)    # across the antimeridian
@example(line=[(0.0, 80.0), (180.0, 80.0)], half_km=500.0)        # over the pole
@example(line=[(0.0, 0.0), (179.0, 0.5)], half_km=100.0)          # nearly antipodal ends
@given(line=st.lists(st.tuples(st.floats(-180, 180), st.floats(-85, 85)), min_size=2, max_size=4,
                     unique_by=lambda p: (round(p[0], 3), round(p[1], 3))),
       half_km=st.floats(10, 1500))
def test_the_cells_within_half_the_width_of_the_line(line: list, half_km: float) -> None:
    lon2, lat2 = np.meshgrid(LONS, LATS)
    got = corridor_cells([line], half_km * 1000.0, LONS, LATS)
    d = _sampled_distance(line, lon2, lat2)
    must_in, must_out = d <= half_km * 1000.0, d > half_km * 1000.0 + STEP_M / 2
    assert not (must_in & ~got).any(), np.argwhere(must_in & ~got)
    assert not (must_out & got).any(), np.argwhere(must_out & got)
