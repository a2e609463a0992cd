"""The Zarr/EDR benchmark's quick mode runs every path end to end, each checked against xarray on the files."""

from __future__ import annotations

import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from bench import zarr_edr  # noqa: E402


def test_every_path_reads_the_slab_of_the_files(catalog_root: Path) -> None:
    result = zarr_edr.run(True, {"small": catalog_root})
    assert [r["how"] for r in result["rows"]] == ["xarray, local files", "dstp client (gRPC)", "Zarr: xr.open_zarr",
                                                  "EDR cube, CoverageJSON", "EDR cube, netCDF"]
    assert all(r["values"] == result["rows"][0]["values"] > 0 for r in result["rows"])
    assert result["zarr_chunks"] == "stored"  # ccm3's T: deflate+shuffle alike in every file, passed through
