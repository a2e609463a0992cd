"""netCDF output round trips on the standard, noleap and 360_day calendars: one writer behind
`dstp query -o x.nc`, `GET /query?format=nc` and `dstp.to_xarray(t).to_netcdf()`.

Each file is opened with xarray and compared with the original files as
xarray decodes them on its own (tests/oracle.py): the same values, units and
calendar, and (CLI and HTTP, which know the dataset's time units) the same
time units.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Iterator

import cftime
import httpx
import netCDF4
import numpy as np
import pytest
import xarray as xr

import dstp
import oracle
from dstp.server import DstpServer
from dstp.settings import Settings

CASES = [  # (dataset, query, attribute, calendar)
    ("station", "select time, lat, lon, t2m, d2m from station where lat > 40", "t2m", "standard"),
    ("ccm3", "select * from ccm3 where lat > 60 and lev > 500", "temperature", "noleap"),
    ("ocean", "select * from ocean where depth < 20 and lat < -40", "salinity", "360_day"),
]
CFTIME = xr.coders.CFDatetimeCoder(use_cftime=True)


@pytest.fixture(scope="module")
def nc_server(catalog_root: Path) -> Iterator[DstpServer]:
    with DstpServer(Settings(catalog_root=catalog_root, port=0, http_port=0, data_port=-1, udt_port=-1)) as srv:
        yield srv


def _original(catalog_root: Path, dataset: str) -> tuple[str, str]:
    """Return (time units, calendar) of the dataset's first file, read with netCDF4 directly."""
    spec = oracle.DATASETS[dataset]
    first = sorted((catalog_root / spec["folder"]).glob(spec["glob"]))[0]
    with netCDF4.Dataset(first) as nc:
        return nc["time"].units, nc["time"].calendar


def _same_time_units(a: str, b: str, calendar: str) -> bool:
    """Return whether two CF time units are the same (`days since 1990-01-01` = `days since 1990-01-01 00:00:00`)."""
    return a.split(" since ")[0] == b.split(" since ")[0] and \
        cftime.num2date(0, a, calendar) == cftime.num2date(0, b, calendar)


def _iso(values: np.ndarray) -> list[str]:
    return [t.isoformat() for t in values]


def _check(path: Path, catalog_root: Path, dataset: str, attribute: str, calendar: str,
           dataset_units: bool) -> None:
    ref = oracle.open_dataset(catalog_root, dataset)
    units, original_calendar = _original(catalog_root, dataset)
    assert original_calendar == calendar
    with xr.open_dataset(path, decode_times=CFTIME) as got:
        time = got["time"]
        assert time.encoding["calendar"] == calendar
        assert " since " in time.encoding["units"]
        if dataset_units:  # written by dstp's writer, which knows the dataset
            assert _same_time_units(time.encoding["units"], units, calendar), (time.encoding["units"], units)
            assert got.attrs["Conventions"] == "CF-1.8" and "dstp query: select" in got.attrs["history"]
        assert got[attribute].attrs["units"] == ref[attribute].attrs["units"]
        # the same grid points: coordinates by value, times by their calendar labels
        ref_times = _iso(ref["time"].values)
        assert all(type(t) is type(ref["time"].values[0]) for t in time.values)  # same calendar class
        sub = ref[attribute].isel(time=[ref_times.index(t) for t in _iso(time.values)])
        sub = sub.sel({d: got[d].values for d in sub.dims if d != "time"})
        values = got[attribute].transpose(*sub.dims).values
        assert values.size > 0
        np.testing.assert_array_equal(values, sub.values)  # NaN where the files hold fill values


@pytest.mark.parametrize("dataset, sql, attribute, calendar", CASES, ids=[c[3] for c in CASES])
def test_netcdf_round_trip_on_every_calendar(nc_server: DstpServer, catalog_root: Path, tmp_path: Path,
                                             dataset: str, sql: str, attribute: str, calendar: str) -> None:
    # 1. the CLI
    cli = tmp_path / "cli.nc"
    done = subprocess.run([sys.executable, "-m", "dstp.cli", "query", sql, "--server", nc_server.endpoints.grpc,
                           "-o", str(cli)], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    _check(cli, catalog_root, dataset, attribute, calendar, dataset_units=True)

    # 2. the HTTP API
    r = httpx.get(f"http://{nc_server.endpoints.http}/query", params={"sql": sql, "format": "nc"}, timeout=60)
    assert r.status_code == 200, r.text
    assert r.headers["x-dstp-truncated"] == "false"
    web = tmp_path / "web.nc"
    web.write_bytes(r.content)
    _check(web, catalog_root, dataset, attribute, calendar, dataset_units=True)

    # 3. Python: to_xarray gives a Dataset plain to_netcdf() writes (calendar in encoding, not attrs)
    with dstp.connect(nc_server.endpoints.grpc) as client:
        ds = dstp.to_xarray(client.query(sql))
    assert ds["time"].encoding["calendar"] == calendar and "calendar" not in ds["time"].attrs
    py = tmp_path / "py.nc"
    ds.to_netcdf(py)
    _check(py, catalog_root, dataset, attribute, calendar, dataset_units=False)


def test_empty_results_write_too(nc_server: DstpServer, tmp_path: Path) -> None:
    with dstp.connect(nc_server.endpoints.grpc) as client:
        for sql in ("select * from ocean where lat > 100", "select * from ccm3 where lat > 100"):
            path = tmp_path / "empty.nc"
            dstp.to_xarray(client.query(sql)).to_netcdf(path)
            # xarray's default decoder refuses empty axes on non-standard calendars; cftime reads them
            with xr.open_dataset(path, decode_times=CFTIME) as got:
                assert got.sizes["lat"] == 0 and got["time"].size == 0
            path.unlink()


def test_cli_refuses_nc_without_the_grid_before_fetching(nc_server: DstpServer, tmp_path: Path) -> None:
    out = tmp_path / "x.nc"
    done = subprocess.run([sys.executable, "-m", "dstp.cli", "query", "select temperature from ocean", "--server",
                           nc_server.endpoints.grpc, "-o", str(out)], capture_output=True, text=True, timeout=60)
    assert done.returncode == 1
    assert "lacks the coordinate columns" in done.stderr and "lat" in done.stderr and "Traceback" not in done.stderr
    assert list(tmp_path.iterdir()) == []
