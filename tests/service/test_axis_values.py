"""``service.axis_values``: a dimension's coordinate values from the catalog's memory, equal to xarray's, under the
same access policy as a query (issue 34).

The oracle (tests/oracle.py) opens the same files with xarray, each decoded on its own; ``ocean`` has a
``360_day`` calendar (times as ISO text) and a descending latitude, ``ccm3`` a standard calendar (timestamps).
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Iterator

import numpy as np
import pytest

from dstp.auth import ANONYMOUS, Principal
from dstp.catalog.registry import Catalog
from dstp.errors import DatasetNotFoundError, QueryError
from dstp.service import DstpService
from dstp.settings import Settings
from tests import oracle

POLAR = Principal("alice", frozenset({"polar"}), authenticated=True, via="token")


@pytest.fixture(scope="module")
def service(catalog_root: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[DstpService]:
    root = tmp_path_factory.mktemp("axes")
    shutil.copytree(catalog_root / "ccm3", root / "ccm3")
    shutil.copytree(catalog_root / "ocean", root / "ocean")
    xml = root / "ocean" / "ocean.dstp.xml"
    text = xml.read_text()
    assert '<access policy="public"/>' in text
    xml.write_text(text.replace('<access policy="public"/>', '<access policy="restricted" groups="polar"/>'))
    svc = DstpService(Catalog.scan(root), Settings(catalog_root=root))
    yield svc
    svc.close()


def _expected(catalog_root: Path, dataset_id: str, dimension: str) -> np.ndarray:
    ds = oracle.open_dataset(catalog_root, dataset_id)
    values = ds[dimension].values
    if values.size and type(values[0]).__module__.startswith("cftime"):
        return oracle._times(values, values[0].calendar)
    return values


@pytest.mark.parametrize(("dataset_id", "principal"), [("ccm3", ANONYMOUS), ("ocean", POLAR)])
def test_every_axis_equals_xarrays(service: DstpService, catalog_root: Path, dataset_id: str,
                                   principal: Principal) -> None:
    dims = [d.name for d in service.describe(dataset_id, principal).dimensions]
    assert dims
    for dim in dims:
        got = service.axis_values(dataset_id, dim, principal).to_numpy(zero_copy_only=False)
        want = _expected(catalog_root, dataset_id, dim)
        assert got.dtype.kind == want.dtype.kind, (dim, got.dtype, want.dtype)
        assert got.tolist() == want.tolist(), dim


def test_ocean_shows_the_cases_it_stands_for(service: DstpService) -> None:
    lat = service.axis_values("ocean", "lat", POLAR).to_numpy()
    assert len(lat) > 1 and bool(np.all(np.diff(lat) < 0))  # descending, as in the files
    time = service.axis_values("ocean", "time", POLAR).to_pylist()
    assert time and all(isinstance(t, str) for t in time)  # 360_day: ISO text, as a query returns it


def test_a_hidden_dataset_is_not_found_and_an_unknown_dimension_is_named(service: DstpService) -> None:
    with pytest.raises(DatasetNotFoundError) as hidden:
        service.axis_values("ocean", "lat", ANONYMOUS)
    with pytest.raises(DatasetNotFoundError) as absent:
        service.axis_values("nowhere", "lat", ANONYMOUS)
    assert "ocean" in str(hidden.value) and "nowhere" in str(absent.value)
    assert "ocean" not in str(absent.value)  # the hidden dataset is not listed among those that exist
    with pytest.raises(QueryError, match="no dimension 'height'.*lat"):
        service.axis_values("ccm3", "height", ANONYMOUS)


@pytest.mark.parametrize(("dataset_id", "principal"), [("ccm3", ANONYMOUS), ("ocean", POLAR)])
def test_all_axes_at_once_equal_xarrays(service: DstpService, catalog_root: Path, dataset_id: str,
                                        principal: Principal) -> None:
    """``service.axes``: every axis under one access check, each equal to the oracle's; unknown names left out."""
    dims = [d.name for d in service.describe(dataset_id, principal).dimensions]
    every = service.axes(dataset_id, None, principal)
    assert list(every) == dims
    for dim in dims:
        want = _expected(catalog_root, dataset_id, dim)
        got = every[dim].to_numpy(zero_copy_only=False)
        assert got.dtype.kind == want.dtype.kind and got.tolist() == want.tolist(), dim
    assert list(service.axes(dataset_id, ["height", dims[-1]], principal)) == [dims[-1]]
    with pytest.raises(DatasetNotFoundError):
        service.axes("ocean", None, ANONYMOUS)  # hidden, as for axis_values
