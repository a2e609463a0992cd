"""Files without ACDD title and summary get a useful drafted title, said to be drafted, and never "era5 era5".

ERA5 files from the CDS carry ``history`` ("grib_to_netcdf …") and no ``title`` or ``summary``: `dstp publish`
took the summary from ``history`` and the id for the title, so the catalog showed "era5 era5" with a log
line as its description, and said nothing about it.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import httpx
import netCDF4
import numpy as np

from dstp.catalog.descriptor import parse_descriptor
from dstp.server import DstpServer
from http_fixtures import web_settings

HISTORY = "2024-03-01 10:00:00 GMT by grib_to_netcdf-2.28.1: /opt/ecmwf/mars-client/bin/grib_to_netcdf -S param -o x.nc"


def _era5(path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    with netCDF4.Dataset(path, "w") as nc:
        nc.Conventions, nc.history = "CF-1.6", HISTORY
        nc.createDimension("time", None)
        nc.createDimension("latitude", 2)
        nc.createDimension("longitude", 3)
        t = nc.createVariable("time", "i4", ("time",))
        t.units, t.calendar, t.long_name = "hours since 1900-01-01 00:00:00.0", "gregorian", "time"
        t[:] = [1_000_000, 1_000_001]
        lat = nc.createVariable("latitude", "f4", ("latitude",))
        lat.units, lat.long_name = "degrees_north", "latitude"
        lat[:] = [50.0, 49.75]
        lon = nc.createVariable("longitude", "f4", ("longitude",))
        lon.units, lon.long_name = "degrees_east", "longitude"
        lon[:] = [0.0, 0.25, 0.5]
        for name, long_name, units in (("t2m", "2 metre temperature", "K"), ("msl", "Mean sea level pressure", "Pa")):
            v = nc.createVariable(name, "f4", ("time", "latitude", "longitude"))
            v.units, v.long_name = units, long_name
            v[:] = np.ones((2, 2, 3), dtype="f4")
    return path


def _publish(*args: str) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run([sys.executable, "-m", "dstp.cli", "publish", *args], capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 0, proc.stderr
    return proc


def test_a_title_is_drafted_from_the_variables_and_said_to_be(tmp_path: Path) -> None:
    files = [_era5(tmp_path / "era5" / f"era5_2014-0{m}.nc") for m in (1, 2)]
    proc = _publish(*map(str, files), "--id", "era5")
    drafted = "2 metre temperature and Mean sea level pressure (era5_*.nc)"
    assert (f"dstp: warning: the files have no title attribute (ACDD): the title was drafted from their "
            f"variables, '{drafted}'; give a better one with --title or in era5.dstp.xml") in proc.stderr
    assert "dstp: warning: the files have no summary attribute (ACDD)" in proc.stderr
    desc = parse_descriptor((tmp_path / "era5" / "era5.dstp.xml").read_bytes())
    assert desc.title == drafted
    assert desc.summary is not None and "grib_to_netcdf" not in desc.summary
    assert desc.summary.startswith("2 metre temperature (t2m, K), Mean sea level pressure (msl, Pa), from 2 files.")


def test_files_with_a_title_and_summary_are_not_warned_about(tmp_path: Path) -> None:
    path = _era5(tmp_path / "titled" / "one.nc")
    with netCDF4.Dataset(path, "a") as nc:
        nc.title, nc.summary = "ERA5 hourly single levels, Europe", "Hourly reanalysis of 2 m temperature and MSLP."
    proc = _publish(str(path), "--id", "titled")
    assert "warning" not in proc.stderr
    desc = parse_descriptor((tmp_path / "titled" / "titled.dstp.xml").read_bytes())
    assert (desc.title, desc.summary) == ("ERA5 hourly single levels, Europe",
                                          "Hourly reanalysis of 2 m temperature and MSLP.")


def test_the_pages_never_show_the_id_twice(tmp_path: Path) -> None:
    root = tmp_path / "catalog"
    _publish(str(_era5(root / "era5" / "era5_2014-01.nc")), "--id", "era5")
    _publish(str(_era5(root / "same" / "same.nc")), "--id", "same", "--title", "same")  # a title that is the id
    with DstpServer(web_settings(root)) as srv:
        assert srv.endpoints is not None
        with httpx.Client(base_url=f"http://{srv.endpoints.http}", timeout=30) as http:
            era5 = http.get("/datasets/era5").text
            assert ('<h1>2 metre temperature and Mean sea level pressure (era5_2014-01.nc) <code class="id">era5'
                    '</code></h1>') in era5
            same = http.get("/datasets/same").text
            assert '<h1><code class="id">same</code></h1>' in same
            catalog = http.get("/").text
            assert catalog.count(">same<") == 1 and "same same" not in catalog
            heading = http.get("/datasets/same/query").text.split("<h1>", 1)[1].split("</h1>", 1)[0]
            assert heading.count(">same<") == 1 and "subtitle" not in heading, heading
