"""The xarray engine benchmark's quick mode runs every case against local xarray, values compared."""

from __future__ import annotations

import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

import pytest  # noqa: E402

from bench import xarray_engine  # noqa: E402


# local xarray's own advice when dask chunks cut the files' stored chunks (the same chunks on both sides)
@pytest.mark.filterwarnings("ignore:The specified chunks separate the stored chunks:UserWarning")
def test_every_case_equals_local_xarray(catalog_root: Path) -> None:
    result = xarray_engine.run(True, {"small": catalog_root})
    cases = {(r["dataset"], r["case"]) for r in result["rows"]}
    assert cases == {(d, c) for d in xarray_engine.DATASETS for c in xarray_engine.GOALS}
    assert all(r["values_equal"] is not False for r in result["rows"]), result["rows"]
    dask = [r for r in result["rows"] if r["case"] in ("slab", "variable", "dask", "dask ds")]
    assert all(r["values_equal"] is True for r in dask)  # compared, not skipped
    assert all(r["chunk_by_chunk_ms"] is not None for r in result["rows"] if r["case"] == "dask")
