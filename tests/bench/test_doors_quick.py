"""The doors benchmark's quick mode reads one slab through every door, each checked against xarray on the files
(a door whose values differ stops the run and shows here as an error), and through each HTTP door's recording and
replay of dstp's answers (checked the same way); no timing asserted."""

from __future__ import annotations

import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from bench import doors  # noqa: E402


def test_every_door_reads_the_slab_of_the_files(catalog_root: Path) -> None:
    result = doors.run(True, {"small": catalog_root})
    (loopback,) = result["measured"]
    assert "error" not in loopback, loopback.get("error")
    http_doors = {"netCDF-C DAP2", "netCDF-C DAP4", "pydap DAP4", "Zarr v3 (xr.open_zarr)", "EDR cube (CoverageJSON)",
                  "ERDDAP griddap .nc"}
    assert {r["how"] for r in loopback["rows"]} == {
        "xarray, local files", "dstp client", "Flight", "xarray engine=dstp", *http_doors,
        *(f"{d} (replay floor)" for d in http_doors)}
    # every HTTP door was recorded, and its replays asked only for what dstp had answered
    assert set(loopback["http"]) == http_doors
    for door, counts in loopback["http"].items():
        assert counts["requests"] >= 1 and counts["connections"] >= 1, door
        assert counts["replay_misses"] == 0, door
        assert all(t.endswith("→ 200") for t in counts["targets"]), (door, counts["targets"])
    assert all(r["values"] == loopback["rows"][0]["values"] > 0 for r in loopback["rows"])
    assert "| ERDDAP griddap .nc |" in doors.markdown(result)
