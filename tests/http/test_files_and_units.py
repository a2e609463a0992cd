"""What a dataset's files hold, as the page, its JSON, ``dstp describe`` and the descriptor say it.

A dataset of one file looked empty: its file table said "index 0", the JSON ``count: 0, first: '', last: ''``
and ``describe`` showed no time range. A dataset whose monthly files count time from their own month
("days since 1990-03-01" in March) was labelled with the first file's units everywhere, though each file is
decoded with its own. The oracle is xarray reading each file on its own.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path
from typing import Iterator

import httpx
import netCDF4
import numpy as np
import pandas as pd
import pytest
import xarray as xr

import dstp
from dstp.catalog.publish import publish
from dstp.server import DstpServer
from http_fixtures import web_settings

MONTHS = [f"1990-{m:02d}" for m in range(1, 13)]


def _grid_file(path: Path, times: list[float] | None, units: str | None, title: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    with netCDF4.Dataset(path, "w") as nc:
        nc.title = title
        nc.Conventions = "CF-1.8"
        dims: tuple[str, ...] = ("lat", "lon")
        if times is not None:
            nc.createDimension("time", None)
            t = nc.createVariable("time", "f8", ("time",))
            t.units, t.calendar, t.standard_name, t.axis = units, "standard", "time", "T"
            t[:] = times
            dims = ("time", *dims)
        nc.createDimension("lat", 3)
        nc.createDimension("lon", 4)
        lat = nc.createVariable("lat", "f8", ("lat",))
        lat.units, lat.standard_name = "degrees_north", "latitude"
        lat[:] = [-30.0, 0.0, 30.0]
        lon = nc.createVariable("lon", "f8", ("lon",))
        lon.units, lon.standard_name = "degrees_east", "longitude"
        lon[:] = [0.0, 90.0, 180.0, 270.0]
        v = nc.createVariable("t2m", "f4", dims)
        v.units, v.long_name = "K", "2 m temperature"
        v[:] = np.arange(int(np.prod([len(nc.dimensions[d]) for d in dims])), dtype="f4").reshape(
            [len(nc.dimensions[d]) for d in dims]) + 250
    return path


@pytest.fixture(scope="module")
def archive(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("files")
    publish([_grid_file(root / "one" / "one_2001.nc", [0, 6, 12, 18], "hours since 2001-01-01", "One file")], "one")
    publish([_grid_file(root / "static" / "orography.nc", None, None, "Static field")], "static")
    # Each month counts days from its own first day: 0 and 14 are the 1st and the 15th of that month.
    monthly = [_grid_file(root / "monthly" / f"m_{m}.nc", [0, 14], f"days since {m}-01", "Monthly restarts")
               for m in MONTHS]
    publish(monthly, "monthly")
    return root


@pytest.fixture(scope="module")
def server(archive: Path) -> Iterator[DstpServer]:
    srv = DstpServer(web_settings(archive))
    srv.start()
    yield srv
    srv.stop()


@pytest.fixture(scope="module")
def http(server: DstpServer) -> Iterator[httpx.Client]:
    assert server.endpoints is not None
    with httpx.Client(base_url=f"http://{server.endpoints.http}", timeout=30) as c:
        yield c


@pytest.fixture(scope="module")
def client(server: DstpServer) -> Iterator[dstp.Client]:
    assert server.endpoints is not None
    with dstp.connect(server.endpoints.grpc) as c:
        yield c


def _describe(server: DstpServer, dataset: str) -> str:
    assert server.endpoints is not None
    proc = subprocess.run([sys.executable, "-m", "dstp.cli", "describe", dataset, "--server", server.endpoints.grpc],
                          capture_output=True, text=True, timeout=60, env={"COLUMNS": "160", "PATH": "/usr/bin"})
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


def _file_table(html: str) -> str:
    return html.split('id="files-table"', 1)[1].split("</table>", 1)[0]


def test_a_one_file_dataset_says_which_times_its_file_holds(archive, server, client, http) -> None:
    with xr.open_dataset(archive / "one" / "one_2001.nc") as ds:
        times = pd.to_datetime(ds["time"].values)
    for f in (client.describe("one").files[0], httpx_json(http, "/datasets/one.json")["files"][0]):
        f = f if isinstance(f, dict) else {"count": f.count, "first": f.first, "last": f.last, "start": f.start}
        assert (f["start"], f["count"]) == (0, len(times)) == (0, 4)
        assert (pd.Timestamp(f["first"]), pd.Timestamp(f["last"])) == (times[0], times[-1])
    table = _file_table(http.get("/datasets/one").text)
    assert "<th>time range</th>" in table and "index 0" not in table
    assert "2001-01-01 00:00 … 2001-01-01 18:00" in table or "2001-01-01 … 2001-01-01 18:00" in table, table
    described = _describe(server, "one")
    row = next(line for line in described.splitlines() if "one_2001.nc" in line)
    assert "2001-01-01T00:00:00" in row and "2001-01-01T18:00:00" in row, described
    assert "first time" in described and "last time" in described


def test_a_one_file_dataset_without_times_holds_all_of_it(http) -> None:
    table = _file_table(http.get("/datasets/static").text)
    assert "all of the dataset" in table and "index 0" not in table, table


def httpx_json(http: httpx.Client, path: str) -> dict:
    response = http.get(path)
    assert response.status_code == 200, response.text
    return dict(response.json())


def test_units_that_restart_each_month_are_labelled_per_file(archive, server, client, http) -> None:
    label = "per file: days since 1990-01-01 … days since 1990-12-01"
    coordinate = next(c for c in client.describe("monthly").coordinates if c.name == "time")
    assert coordinate.note.startswith(label + " (12 different units, m_1990-01.nc … m_1990-12.nc"), coordinate.note
    page = httpx_json(http, "/datasets/monthly.json")
    assert page["units_labels"]["time"] == label
    dimensions = http.get("/datasets/monthly").text.split('id="dimensions-table"', 1)[1].split("</table>", 1)[0]
    assert label in dimensions, dimensions
    described = _describe(server, "monthly")
    assert re.search(r"per file: days since 1990-01-01 … days since\s+1990-12-01|" + re.escape(label), described), \
        described
    xml = (archive / "monthly" / "monthly.dstp.xml").read_text()
    assert ("<!-- time: the files state its units differently (days since 1990-01-01 in m_1990-01.nc … days since "
            "1990-12-01 in m_1990-12.nc, 12 different)") in xml, xml
    # The labels changed; the data did not: each file decoded with its own units, as xarray decodes it alone.
    want = []
    for m in MONTHS:
        with xr.open_dataset(archive / "monthly" / f"m_{m}.nc") as ds:
            want += list(pd.to_datetime(ds["time"].values))
    got = client.query("select distinct time from monthly order by time").column("time").to_pylist()
    assert [pd.Timestamp(t) for t in got] == want and want[5] == pd.Timestamp("1990-03-15")


def test_units_that_agree_get_no_per_file_label(client) -> None:
    coordinate = next(c for c in client.describe("one").coordinates if c.name == "time")
    assert coordinate.note == "" and coordinate.units == "hours since 2001-01-01"
