"""The netCDF classic truncation check agrees with real files written by netCDF-C."""

from __future__ import annotations

from pathlib import Path

import netCDF4
import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from dstp.catalog.classic import classic_expected_size

TYPES = ["i1", "i2", "i4", "f4", "f8", "S1"]


@settings(max_examples=40, deadline=None)
@given(
    fmt=st.sampled_from(["NETCDF3_CLASSIC", "NETCDF3_64BIT_OFFSET", "NETCDF3_64BIT_DATA"]),
    nrec=st.integers(0, 5),
    dims=st.lists(st.integers(1, 7), min_size=1, max_size=3),
    variables=st.lists(st.tuples(st.sampled_from(TYPES), st.booleans(), st.integers(0, 3)), min_size=1, max_size=5),
)
def test_expected_size_matches_written_files(tmp_path_factory, fmt, nrec, dims, variables) -> None:
    path = tmp_path_factory.mktemp("classic") / "f.nc"
    with netCDF4.Dataset(path, "w", format=fmt) as nc:
        nc.createDimension("rec", None)
        for i, n in enumerate(dims):
            nc.createDimension(f"d{i}", n)
        nc.note = "x" * 3
        for k, (dtype, is_record, ndim) in enumerate(variables):
            shape_dims = (("rec",) if is_record else ()) + tuple(f"d{i}" for i in range(min(ndim, len(dims))))
            v = nc.createVariable(f"v{k}", dtype, shape_dims)
            v.units = "1"
            if is_record and nrec:
                v[:] = np.zeros((nrec,) + v.shape[1:], dtype="S1" if dtype == "S1" else dtype)
            elif not is_record:
                v[...] = np.zeros(v.shape, dtype="S1" if dtype == "S1" else dtype)
    expected = classic_expected_size(path)
    size = path.stat().st_size
    assert expected is not None and expected <= size, "a whole file must never look truncated"
    has_records = nrec > 0 and any(is_record for _, is_record, _ in variables)
    only_fixed = not any(is_record for _, is_record, _ in variables)
    if has_records or only_fixed:
        # the file ends with data: losing any of it (beyond alignment padding) must be seen
        assert expected >= size - 3


def test_hdf5_files_are_not_classic(tmp_path: Path) -> None:
    path = tmp_path / "h.nc"
    with netCDF4.Dataset(path, "w", format="NETCDF4") as nc:
        nc.createDimension("x", 2)
    assert classic_expected_size(path) is None
