"""The zarr_sources benchmark's quick mode reads the sample through kerchunk references and the netCDF files,
and the answers are equal."""

from __future__ import annotations

import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from bench import zarr_sources  # noqa: E402


def test_references_answer_as_the_netcdf_files(catalog_root: Path) -> None:
    result = zarr_sources.run(True, {"small": catalog_root})
    assert [r["how"] for r in result["rows"]] == ["netCDF files", "kerchunk references"]
    assert result["equal"] and result["files"] > 1
