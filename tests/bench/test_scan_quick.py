"""The scan benchmark's quick mode runs every configuration end to end and they agree on the result."""

from __future__ import annotations

import math
import sys
from pathlib import Path

import netCDF4

REPO = Path(__file__).resolve().parents[2]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from bench import scan  # noqa: E402


def test_every_scan_configuration_answers_the_same_rows(catalog_root: Path) -> None:
    result = scan.run(True, {"small": catalog_root})
    assert result["errors"] == [] and result["same_rows"]
    assert {(r["config"], r["transport"]) for r in result["rows"] if r["n"] == 1} == \
        {(c, t) for c in scan.CONFIGS for t in scan.TRANSPORTS}
    records = 0
    for path in sorted((catalog_root / "ccm3").glob("ccm3_*.nc")):  # select * is every grid point of T
        with netCDF4.Dataset(path) as ds:
            records += math.prod(ds["T"].shape)
    assert all(r["rows"] == records for r in result["rows"])
    for row in result["rows"]:  # each row says which channel carried it; auto's reasons are kept
        assert row["channels"] and all(c.split()[0] in ("striped", "grpc") for c in row["channels"]), row
        assert all(c.startswith("auto:") == (row["transport"] == "auto") for c in row["choices"]), row
