"""The OPeNDAP benchmark's quick mode runs every path, each checked against xarray on the files, no timing asserted."""

from __future__ import annotations

import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from bench import dap  # noqa: E402


def test_every_dap_path_reads_the_slab_of_the_files(catalog_root: Path) -> None:
    result = dap.run(True, {"small": catalog_root})
    paths = {r["how"] for r in result["rows"]}
    assert paths == {"xarray, local files", "dstp client (gRPC)", "Flight", "netCDF-C DAP2", "netCDF-C DAP4",
                     "pydap DAP2", "pydap DAP4"}
    assert all(r["values"] == result["rows"][0]["values"] > 0 for r in result["rows"])
