"""OPeNDAP through the clients scientists have, each answer compared with xarray on the files (tests/opendap_site.py).

netCDF-C's ncdump and nccopy (DAP2 and, with ``dap4://``, DAP4), NCO's ncks, CDO (sinfo, sellonlatbox),
netCDF4-python, xarray's default engine and its pydap engine, pydap's own client, and R's ncdf4. The
datasets aggregate 3 files on the standard, noleap and 360_day calendars, latitudes north to south,
longitudes on 0…360 and −180…180, with a variable packed differently in every file.
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path
from typing import Any, Iterator

import netCDF4
import numpy as np
import pytest
import xarray as xr
from hypothesis import HealthCheck, given, settings, strategies as st

from opendap_site import CFTIME, DATASETS, labels, local, run, same, serve, tool, write_site

SLOW = settings(max_examples=12, deadline=None, derandomize=True,
                suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    root = tmp_path_factory.mktemp("opendap-clients")
    write_site(root)
    srv = serve(root)
    assert srv.endpoints is not None
    yield {"root": root, "host": srv.endpoints.http, "url": f"http://{srv.endpoints.http}/opendap"}
    srv.stop()


def _numbers(text: str, name: str) -> np.ndarray:
    """Return the values ncdump prints for ``name`` (``_`` as NaN)."""
    body = text.split(f" {name} =", 1)[1].split(";", 1)[0]
    return np.array([np.nan if w == "_" else float(w) for w in re.findall(r"[^\s,]+", body)])


# -- netCDF-C: ncdump, nccopy (DAP2 and DAP4) ----------------------------------------------------------------------

@pytest.mark.parametrize("name", DATASETS)
def test_ncdump_header_shows_every_variable_with_its_cf_attributes(site: dict[str, Any], name: str) -> None:
    want = local(site["root"], name)
    header = run("ncdump", "-h", f"{site['url']}/{name}")
    for v in ("tas", "pr"):
        assert re.search(rf"float {v}\(time, lat, lon\) ;", header), header
    assert f'time:calendar = "{want.time.encoding["calendar"]}"' in header
    assert f"time = UNLIMITED ; // ({want.sizes['time']} currently)" in header
    assert 'pr:units = "mm day-1"' in header and 'tas:units = "K"' in header
    # values are served decoded: no packing attribute may tell a client to decode them again
    assert "scale_factor" not in header and "add_offset" not in header


@pytest.mark.parametrize("name", DATASETS)
@pytest.mark.parametrize("scheme", ["http", "dap4"])
def test_ncdump_prints_a_hyperslab_equal_to_the_files(site: dict[str, Any], name: str, scheme: str) -> None:
    want = local(site["root"], name)
    base = f"{scheme}://{site['host']}/opendap/{name}"
    for v in ("tas", "pr"):
        ce = f"?{v}[1:1:5][0:2:4][0:1:5]" if scheme == "http" else f"?dap4.ce=/{v}[1:1:5][0:2:4][0:1:5]"
        text = run("ncdump", "-p", "9,17", "-v", v, base + ce)
        same(_numbers(text, v).reshape(5, 3, 6).astype("f4"), want[v].values[1:6, 0:5:2, 0:6])


@pytest.mark.parametrize("name", DATASETS)
@pytest.mark.parametrize("scheme", ["http", "dap4"])
def test_nccopy_copies_the_aggregation_as_one_file(site: dict[str, Any], name: str, scheme: str,
                                                   tmp_path: Path) -> None:
    want = local(site["root"], name)
    out = tmp_path / "copy.nc"
    run("nccopy", f"{scheme}://{site['host']}/opendap/{name}", str(out))
    with xr.open_dataset(out, decode_times=CFTIME) as got:
        assert labels(got.time.values) == labels(want.time.values)
        for v in ("tas", "pr", "lat", "lon"):
            same(got[v].values, want[v].values)
            assert got[v].attrs.get("units") == want[v].attrs.get("units"), v
        assert got.time.encoding["calendar"] == want.time.encoding["calendar"]
        assert labels(got.forecast_reference_time.values) == labels(want.forecast_reference_time.values)


# -- NCO and CDO ---------------------------------------------------------------------------------------------

@pytest.mark.parametrize("name", DATASETS)
def test_ncks_cuts_a_strided_subset(site: dict[str, Any], name: str, tmp_path: Path) -> None:
    want = local(site["root"], name)
    out = tmp_path / "cut.nc"
    run("ncks", "-O", "-v", "pr,tas", "-d", "time,2,9", "-d", "lat,0,4,2", "-d", "lon,1,4",
        f"{site['url']}/{name}", str(out))
    with xr.open_dataset(out, decode_times=CFTIME) as got:
        for v in ("pr", "tas"):
            same(got[v].values, want[v].values[2:10, 0:5:2, 1:5])
        assert labels(got.time.values) == labels(want.time.values[2:10])


@pytest.mark.parametrize("name", DATASETS)
def test_cdo_sinfo_lists_the_times_of_every_file(site: dict[str, Any], name: str) -> None:
    want = local(site["root"], name)
    text = run("cdo", "sinfo", f"{site['url']}/{name}")
    listed = re.findall(r"(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d)", text.split("Time coordinate", 1)[1])
    assert [t.replace(" ", "T") for t in listed[1:]] == labels(want.time.values)  # [0] is RefTime
    # the reference time, units and calendar as CDO reads them from the first file (CDO says 365_day for noleap)
    first = run("cdo", "sinfo", str(sorted((site["root"] / name).glob("*.nc"))[0]))
    assert re.findall(r"RefTime = .*", text) == re.findall(r"RefTime = .*", first)


@pytest.mark.parametrize("name", DATASETS)
def test_cdo_sellonlatbox_selects_the_box_of_the_files(site: dict[str, Any], name: str, tmp_path: Path) -> None:
    want = local(site["root"], name)
    lon, lat = want.lon.values, want.lat.values
    west, east = float(lon[1]) - 0.1, float(lon[3]) + 0.1
    south, north = float(min(lat[1], lat[3])) - 0.1, float(max(lat[1], lat[3])) + 0.1
    out = tmp_path / "box.nc"
    run("cdo", "-s", "-f", "nc4", f"-sellonlatbox,{west},{east},{south},{north}", "-selname,tas",
        f"{site['url']}/{name}", str(out))
    box = want.tas.where((want.lon >= west) & (want.lon <= east), drop=True)
    box = box.where((box.lat >= south) & (box.lat <= north), drop=True)
    with xr.open_dataset(out, decode_times=CFTIME) as got:
        same(got.lon.values, box.lon.values)
        order = np.argsort(got.lat.values) if got.lat.values[0] < got.lat.values[-1] else slice(None)
        same(got.lat.values, box.lat.values)
        same(got.tas.values, box.values)
        assert labels(got.time.values) == labels(want.time.values)
        del order


# -- Python: netCDF4, xarray (netcdf4 and pydap engines), pydap ----------------------------------------------

@st.composite
def hyperslabs(draw: st.DrawFn, sizes: tuple[int, ...]) -> tuple[slice, ...]:
    out = []
    for n in sizes:
        start = draw(st.integers(0, n - 1))
        stop = draw(st.integers(start, n - 1))
        out.append(slice(start, stop + 1, draw(st.integers(1, 4))))
    return tuple(out)


@pytest.mark.parametrize("name", DATASETS)
@pytest.mark.parametrize("scheme", ["http", "dap4"])
def test_netcdf4_python_reads_any_hyperslab_as_numpy_slices_the_files(site: dict[str, Any], name: str,
                                                                       scheme: str) -> None:
    want = local(site["root"], name)

    with netCDF4.Dataset(f"{scheme}://{site['host']}/opendap/{name}") as nc:
        @SLOW
        @given(key=hyperslabs(want.tas.shape), variable=st.sampled_from(["tas", "pr"]))
        def check(key: tuple[slice, ...], variable: str) -> None:
            same(nc[variable][key], want[variable].values[key])

        check()


def _open(site: dict[str, Any], name: str, client: str) -> xr.Dataset:
    """Open a dataset with xarray's netcdf4 engine, or its pydap engine on a pydap dataset (DAP2 or DAP4).

    The pydap engine takes ``dap2://``/``dap4://`` URLs, from which pydap tries HTTPS first and, on a plain-HTTP
    server, falls back after urllib3's retries (~3 s a request); handing it pydap's dataset opened with
    ``protocol=`` exercises the same engine without that wait (the ``dap4://`` scheme itself is tested below).
    """
    from pydap.client import open_url

    url = f"{site['url']}/{name}"
    if client == "netcdf4":
        return xr.open_dataset(url, engine="netcdf4", decode_times=CFTIME)
    store = xr.backends.PydapDataStore(open_url(url, protocol=client), protocol=client)
    return xr.open_dataset(store, decode_times=CFTIME)


def _same_dataset(got: xr.Dataset, want: xr.Dataset) -> None:
    assert dict(got.sizes) == {**dict(want.sizes)}
    assert labels(got.time.values) == labels(want.time.values)
    for v in ("tas", "pr", "lat", "lon", "date"):
        same(got[v].values, want[v].values)
        assert got[v].dtype == want[v].dtype, v
        for key in ("units", "standard_name", "long_name"):
            assert got[v].attrs.get(key) == want[v].attrs.get(key), (v, key)
    same(got.tas[3:9:2, ::-1, 2].values, want.tas.values[3:9:2, ::-1, 2])
    np.testing.assert_array_equal((got.time - got.forecast_reference_time).values,
                                  (want.time - want.forecast_reference_time).values)


@pytest.mark.parametrize("name", DATASETS)
@pytest.mark.parametrize("client", ["netcdf4", "dap2", "dap4"])
def test_xarray_opens_the_url_as_it_opens_the_files(site: dict[str, Any], name: str, client: str) -> None:
    with _open(site, name, client) as got:
        _same_dataset(got, local(site["root"], name))


def test_xarray_pydap_engine_takes_the_dap4_url_scheme(site: dict[str, Any]) -> None:
    with xr.open_dataset(f"dap4://{site['host']}/opendap/std_east", engine="pydap", decode_times=CFTIME) as got:
        _same_dataset(got, local(site["root"], "std_east"))


@pytest.mark.parametrize("name", DATASETS)
@pytest.mark.parametrize("protocol", ["dap2", "dap4"])
def test_pydap_client_reads_hyperslabs_as_numpy_slices_the_files(site: dict[str, Any], name: str,
                                                                 protocol: str) -> None:
    from pydap.client import open_url

    want = local(site["root"], name)
    remote = open_url(f"{site['url']}/{name}", protocol=protocol)

    @SLOW
    @given(key=hyperslabs(want.tas.shape), variable=st.sampled_from(["tas", "pr"]))
    def check(key: tuple[slice, ...], variable: str) -> None:
        array = remote[variable][variable] if protocol == "dap2" else remote[variable]
        # pydap hands the values as sent: decoded floats, NaN where missing
        same(np.asarray(array[key].data), want[variable].values[key])

    check()


# -- R ---------------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("name", DATASETS)
def test_r_ncdf4_reads_a_hyperslab(site: dict[str, Any], name: str) -> None:
    want = local(site["root"], name)
    script = (f'library(ncdf4); nc <- nc_open("{site["url"]}/{name}"); '
              'v <- ncvar_get(nc, "pr", start = c(2, 1, 3), count = c(4, 5, 6)); '
              'cat(sprintf("%.9g", as.vector(v)), sep = "\\n"); '
              'cat("CAL", ncatt_get(nc, "time", "calendar")$value, "\\n"); nc_close(nc)')
    text = run("Rscript", "-e", script)
    values = np.array([float(w) if w != "NA" else np.nan for w in text.split("CAL")[0].split()])
    # R's arrays are Fortran order: (lon, lat, time); start/count counted from 1 in that order
    got = values.reshape(4, 5, 6, order="F").transpose(2, 1, 0).astype("f4")
    same(got, want.pr.values[2:8, 0:5, 1:5])
    assert text.split("CAL")[1].split()[0] == want.time.encoding["calendar"]


def test_every_client_is_installed() -> None:
    for name in ("ncdump", "nccopy", "ncks", "cdo", "Rscript"):
        tool(name)
    subprocess.run([tool("Rscript"), "-e", "library(ncdf4)"], check=True, capture_output=True, timeout=60)
