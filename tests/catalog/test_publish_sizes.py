"""`dstp publish` and `dstp catalog validate` refuse a dimension its file cannot back before allocating it (issue 33).

A 9 KB netCDF-4 file declaring ``time = 10^9`` grew `dstp publish` to 23.4 GB and had it OOM-killed: the
draft read the whole ``time`` variable to check it has no missing values, while the server refuses the same
file at scan from its size alone (``check_dimension_sizes``). Both commands run here in their own process
under an address-space limit of 2 GiB, so the old behaviour fails with MemoryError instead of taking the host.
"""

from __future__ import annotations

import resource
import subprocess
import sys
from pathlib import Path

import netCDF4

HUGE = 10**9
LIMIT_BYTES = 2 * 2**30


def _time_bomb(folder: Path) -> Path:
    """A netCDF-4 file of a few kilobytes whose ``time`` dimension and coordinate declare 10^9 points."""
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "bomb.nc"
    with netCDF4.Dataset(path, "w", format="NETCDF4") as nc:
        nc.createDimension("time", HUGE)
        time = nc.createVariable("time", "f8", ("time",), zlib=True, chunksizes=(4096,))  # no chunk written
        time.units = "days since 2000-01-01"
        time.standard_name = "time"
        nc.createVariable("sst", "f4", ("time",), zlib=True, chunksizes=(4096,))
    return path


def _dstp(*args: str) -> subprocess.CompletedProcess[str]:
    def limit() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (LIMIT_BYTES, LIMIT_BYTES))

    return subprocess.run([sys.executable, "-m", "dstp.cli", *args], capture_output=True, text=True, timeout=300,
                          preexec_fn=limit)


def test_publish_refuses_a_dimension_its_file_cannot_back(tmp_path: Path) -> None:
    bomb = _time_bomb(tmp_path / "bomb")
    assert bomb.stat().st_size < 64 * 1024
    result = _dstp("publish", str(bomb), "--id", "bomb")
    assert result.returncode != 0
    assert "MemoryError" not in result.stderr and "Traceback" not in result.stderr, result.stderr[-2000:]
    assert "bomb.nc: dimension 'time' declares 1,000,000,000 points" in result.stderr, result.stderr[-2000:]
    assert not (bomb.parent / "bomb.dstp.xml").exists()


def test_validate_refuses_it_too(tmp_path: Path) -> None:
    bomb = _time_bomb(tmp_path / "bomb")
    (bomb.parent / "bomb.dstp.xml").write_text("""<?xml version="1.0"?>
<dataset xmlns="urn:dstp:descriptor:1" id="bomb" version="1">
  <title>bomb</title>
  <files glob="bomb.nc"/>
  <coordinates><coordinate name="time" variable="time" dimension="time" axis="T"/></coordinates>
  <attributes default-grid="time"><attribute name="sst" dimensions="time"/></attributes>
</dataset>
""")
    result = _dstp("catalog", "validate", str(tmp_path))
    assert result.returncode == 1
    assert "ERROR" in result.stdout and "declares 1,000,000,000 points" in result.stdout, result.stdout + result.stderr
