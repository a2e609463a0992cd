"""gRPC ``AxisValues``: a dimension's values as the server holds them in memory, for the xarray backend (issue 34).

The values are those of ``DstpService.axis_values`` (tests/service/test_axis_values.py), here checked over the
wire against the oracle: xarray on the same files, each decoded on its own (tests/oracle.py).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import dstp
from tests import oracle


def _expected(catalog_root: Path, dataset_id: str, dimension: str) -> np.ndarray:
    values = oracle.open_dataset(catalog_root, dataset_id)[dimension].values
    if values.size and type(values[0]).__module__.startswith("cftime"):
        return oracle._times(values, values[0].calendar)
    return values


@pytest.mark.parametrize("dataset_id", ["ccm3", "ocean"])
def test_every_axis_over_grpc_equals_xarrays(client: dstp.Client, catalog_root: Path, dataset_id: str) -> None:
    dims = client.describe(dataset_id).dimensions
    assert dims
    for d in dims:
        got = client.axis_values(dataset_id, d.name).to_numpy(zero_copy_only=False)
        want = _expected(catalog_root, dataset_id, d.name)
        assert len(got) == d.size
        assert got.dtype.kind == want.dtype.kind and got.tolist() == want.tolist(), d.name


def test_an_unknown_dimension_or_dataset_is_refused_by_name(client: dstp.Client) -> None:
    with pytest.raises(dstp.QueryError, match="no dimension 'height'.*lat"):
        client.axis_values("ccm3", "height")
    with pytest.raises(dstp.DatasetNotFoundError, match="nowhere"):
        client.axis_values("nowhere", "lat")
