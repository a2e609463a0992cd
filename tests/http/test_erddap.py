"""The ERDDAP facade through erddapy (unchanged, from PyPI), against the native client's answers.

erddapy builds the URLs (search, info, griddap from the dataset's .ncml,
tabledap with its own time conversion) and parses the answers (.csvp with
pandas, .nc and .ncCF with netCDF4/xarray); the native gRPC client's result
of the equivalent SQL is the reference.
"""

from __future__ import annotations

import io

import httpx
import numpy as np
import pandas as pd
import pyarrow.parquet as pq
import pytest
import xarray as xr

import erddapy
import dstp
from dstp.server import DstpServer


@pytest.fixture(scope="module")
def native(web_server: DstpServer) -> dstp.Client:
    assert web_server.endpoints is not None
    with dstp.connect(web_server.endpoints.grpc) as c:
        yield c


@pytest.fixture(scope="module")
def server_url(base_url: str) -> str:
    return f"{base_url}/erddap"


def iso(values: object) -> list[str]:
    """Return times as ISO text without a zone (ERDDAP's ``…Z`` and dstp's timestamps/text alike)."""
    out = []
    for v in np.asarray(values).reshape(-1):
        text = v.isoformat() if hasattr(v, "isoformat") else str(np.datetime64(v, "s")) if \
            isinstance(v, np.datetime64) else str(v)
        out.append(text.replace(" ", "T").rstrip("Z")[:19])
    return out


def test_search_and_info_through_erddapy(server_url: str, native: dstp.Client) -> None:
    e = erddapy.ERDDAP(server=server_url, protocol="griddap")
    found = pd.read_csv(e.get_search_url(search_for="salinity", response="csv"))
    assert found["Dataset ID"].tolist() == ["ocean"]
    everything = pd.read_csv(e.get_search_url(search_for="temperature", response="csv"))
    assert set(everything["Dataset ID"]) <= {s.id for s in native.datasets()} and "ccm3" in set(everything["Dataset ID"])
    info = pd.read_csv(e.get_info_url("ccm3", response="csv"))
    units = info[(info["Variable Name"] == "temperature") & (info["Attribute Name"] == "units")]["Value"]
    assert units.tolist() == ["K"]
    assert e.get_var_by_attr(dataset_id="ccm3", standard_name="air_temperature") == ["temperature"]
    nothing = httpx.get(e.get_search_url(search_for="nosuchword", response="csv"))
    assert nothing.status_code == 404 and nothing.text.startswith("Error {\n    code=404;")


def test_griddap_through_erddapy_equals_the_native_client(server_url: str, native: dstp.Client) -> None:
    e = erddapy.ERDDAP(server=server_url, protocol="griddap")
    e.dataset_id = "ocean"  # reads ocean.ncml: axes, ranges, variables
    assert set(e.variables) == {"temperature", "salinity"}
    e.constraints["time>="] = e._constraints_original["time<="]  # erddapy starts at the last time step
    e.constraints["lat>="], e.constraints["lat<="] = 42.5, 57.5  # value selectors pick the nearest index
    e.variables = ["salinity"]
    frame = e.to_pandas()
    want = native.query("select time, depth, lat, lon, salinity from ocean "
                        "where time = '2000-12-16' and lat between 42.5 and 57.5").to_pandas()
    assert len(frame) == len(want) > 0
    assert iso(frame["time (UTC)"]) == iso(want["time"])
    np.testing.assert_array_equal(frame["lat (degrees_north)"].to_numpy(), want["lat"].to_numpy("f8"))
    np.testing.assert_array_equal(frame["salinity (0.001)"].to_numpy(), want["salinity"].to_numpy("f8"))
    ds = e.to_xarray()
    grid = dstp.to_xarray(native.query("select time, depth, lat, lon, salinity from ocean "
                                       "where time = '2000-12-16' and lat between 42.5 and 57.5"))
    np.testing.assert_array_equal(ds.salinity.values, grid.salinity.values)
    assert iso(ds.time.values) == iso(grid.time.values) and ds.time.encoding["calendar"] == "360_day"


def test_griddap_selectors_pick_the_same_slab(http: httpx.Client, native: dstp.Client) -> None:
    r = http.get("/erddap/griddap/ccm3.csv?temperature[last][1:3:7][(30):1:(50)][0:16:63]")
    assert r.status_code == 200, r.text
    got = pd.read_csv(io.StringIO(r.text), skiprows=[1])
    full = dstp.to_xarray(native.query("select time, lev, lat, lon, temperature from ccm3"))
    want = full.temperature.isel(time=-1, lev=slice(1, 8, 3), lon=slice(0, 64, 16)).sel(lat=slice(30, 50))
    np.testing.assert_array_equal(got["temperature"].to_numpy("f4"), want.values.reshape(-1))
    assert got.columns.tolist() == ["time", "lev", "lat", "lon", "temperature"]
    by_value = http.get("/erddap/griddap/ccm3.json?temperature[(1990-12-16T12:00:00Z)][(37.2):3:(992.6)]"
                        "[(31):1:(48)][(0):16:(350)]").json()["table"]
    assert [row[-1] for row in by_value["rows"]] == pytest.approx(got["temperature"].tolist())
    assert by_value["columnUnits"][-1] == "K"


def test_griddap_formats(http: httpx.Client, native: dstp.Client) -> None:
    query = "?humidity[0][7][0:1:31][0:1:63]"
    nc = http.get("/erddap/griddap/ccm3.nc" + query)
    assert nc.status_code == 200 and nc.headers["content-type"] == "application/x-netcdf"
    import netCDF4

    with netCDF4.Dataset("mem.nc", memory=nc.content) as f:
        assert f["humidity"].shape == (1, 1, 32, 64) and f["time"].calendar == "noleap"
    want = native.query("select humidity from ccm3 where time = '1990-01-16 12:00' and lev = 992.6")
    table = pq.read_table(io.BytesIO(http.get("/erddap/griddap/ccm3.parquet" + query).content))
    assert table.column("humidity").equals(want.column("humidity"))
    page = http.get("/erddap/griddap/ccm3.htmlTable" + query)
    assert page.headers["content-type"].startswith("text/html") and page.text.count("<tr>") == 2 + 32 * 64
    assert "Float32 humidity[time = 12][lev = 8][lat = 32][lon = 64];" in http.get("/erddap/griddap/ccm3.dds").text
    das = http.get("/erddap/griddap/ccm3.das").text
    assert 'String units "seconds since 1970-01-01T00:00:00Z";' in das and "Float64 actual_range 3.5, 992.6;" in das


def test_tabledap_through_erddapy_equals_the_native_client(server_url: str, native: dstp.Client) -> None:
    e = erddapy.ERDDAP(server=server_url, protocol="tabledap")
    e.dataset_id = "station"
    e.variables = ["time", "lat", "lon", "t2m"]
    e.constraints = {"time>=": "2001-01-05T00:00:00Z", "lat>": 45}
    frame = e.to_pandas()
    want = native.query("select time, lat, lon, t2m from station where time >= '2001-01-05' and lat > 45")
    assert len(frame) == want.num_rows > 0
    assert iso(frame["time (UTC)"]) == iso(want.column("time").to_numpy())
    np.testing.assert_array_equal(frame["t2m (K)"].to_numpy("f4"), want.column("t2m").to_numpy(zero_copy_only=False))
    ds = e.to_xarray()  # .ncCF
    assert ds.attrs["featureType"] == "point"
    np.testing.assert_array_equal(ds.t2m.values, want.column("t2m").to_numpy(zero_copy_only=False))
    assert iso(ds.time.values) == iso(want.column("time").to_numpy())


def test_tabledap_constraints_and_order(http: httpx.Client, native: dstp.Client) -> None:
    r = http.get('/erddap/tabledap/station.json?time,lat,d2m&d2m=NaN&orderByDescending("lat")')
    rows = r.json()["table"]["rows"]
    want = native.query("select time, lat, d2m from station where d2m is null order by lat desc").to_pandas()
    assert [row[1] for row in rows] == want["lat"].tolist() and all(row[2] is None for row in rows)
    bad = http.get("/erddap/tabledap/station.csv?t2m&t2m=~\"2.*\"")
    assert bad.status_code == 400 and "regular expression" in bad.text and bad.text.startswith("Error {")
    assert http.get("/erddap/tabledap/station.csv?t2m&orderByMax(\"t2m\")").status_code == 400
    missing = http.get("/erddap/tabledap/nosuch.csv")
    assert missing.status_code == 404 and 'message="Not Found:' in missing.text


def test_distinct_is_a_group_by_where_the_language_has_one(http: httpx.Client, native: dstp.Client) -> None:
    r = http.get("/erddap/tabledap/ccm3.csv?lev&lat>80&distinct()")
    if r.status_code == 200:
        got = pd.read_csv(io.StringIO(r.text), skiprows=[1])["lev"].tolist()
        assert got == sorted(set(native.query("select lev from ccm3 where lat > 80").column("lev").to_pylist()))
    else:
        assert r.status_code == 400 and "GROUP BY" in r.text, r.text


def test_all_datasets_lists_the_catalog(http: httpx.Client, native: dstp.Client) -> None:
    r = http.get("/erddap/tabledap/allDatasets.csv?datasetID,dataStructure,minTime")
    got = pd.read_csv(io.StringIO(r.text), skiprows=[1])
    assert got["datasetID"].tolist() == sorted(s.id for s in native.datasets())
    assert dict(zip(got["datasetID"], got["dataStructure"]))["ccm3"] == "grid"
    assert http.get("/erddap/tabledap/allDatasets.csv?nosuch").status_code == 400
