"""Every facade against xarray on the files (issue 32): the xarray backend, ERDDAP through erddapy, /query?format=nc.

Archives on the standard, noleap and 360_day calendars, on 0…360 and −180…180 longitudes, latitudes north to
south, several files each with its own time epoch (tests/facade_archives.py). The oracle is xarray opening
the files itself (``open_mfdataset``, cftime dates); hypothesis draws the slabs and constraints. ERDDAP's
numbers for times are computed here from ERDDAP's rule (``Calendar2.unitsSinceToEpochSeconds``: the reference
date of the dataset's time units on the Gregorian calendar plus the elapsed time; on the calendars dstp keeps
as timestamps the label's own seconds, docs/erddap.md), never taken from dstp.
"""

from __future__ import annotations

import datetime as dt
import itertools
from pathlib import Path
from typing import Any, Iterator

import cftime
import httpx
import netCDF4
import numpy as np
import pandas as pd
import pytest
import xarray as xr
from hypothesis import HealthCheck, given, settings, strategies as st

import erddapy
from dstp.catalog.publish import publish
from dstp.server import DstpServer
from dstp.settings import Settings

from facade_archives import Layout, model_archive

CALENDARS = {"std": "standard", "nol": "noleap", "d360": "360_day"}
LONGITUDES = ("east", "west")
DATASETS = [f"{c}_{lon}" for c, lon in itertools.product(CALENDARS, LONGITUDES)]
CFTIME = xr.coders.CFDatetimeCoder(use_cftime=True)
#: How a file stores values (xarray moves them to ``encoding``), and a time's own units and calendar.
STORAGE = {"_FillValue", "missing_value", "scale_factor", "add_offset", "units", "calendar"}

SLOW = settings(max_examples=15, deadline=None, derandomize=True,
                suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    root = tmp_path_factory.mktemp("facade-oracle")
    for name in DATASETS:
        cal, lon = name.split("_")
        publish(model_archive(root / name, Layout(calendar=CALENDARS[cal], lon=lon, files=3, steps=4,
                                                  seed=len(name) + hash(cal) % 7)), name)
    publish(model_archive(root / "bare_date", Layout(rank=False)), "bare_date")
    srv = DstpServer(Settings(catalog_root=root, port=0, http_port=0, data_port=-1, udt_port=-1, batch_rows=4096))
    srv.start()
    assert srv.endpoints is not None
    with httpx.Client(base_url=f"http://{srv.endpoints.http}", timeout=60) as http:
        yield {"root": root, "http": http, "grpc": srv.endpoints.grpc, "erddap": f"http://{srv.endpoints.http}/erddap"}
    srv.stop()


_local: dict[tuple[str, str], xr.Dataset] = {}


def local(root: Path, name: str) -> xr.Dataset:
    """The oracle: xarray on the files of ``name``, concatenated along time, loaded."""
    key = (str(root), name)
    if key not in _local:
        files = sorted((root / name).glob("*.nc"))
        with xr.open_mfdataset(files, combine="nested", concat_dim="time", data_vars="minimal", coords="minimal",
                               compat="override", decode_times=CFTIME) as ds:
            _local[key] = ds.load()
    return _local[key]


def labels(values: Any) -> list[str]:
    return [v.strftime("%Y-%m-%dT%H:%M:%S") if hasattr(v, "strftime") else
            str(np.datetime64(v, "s")) for v in np.asarray(values).reshape(-1)]


def erddap_seconds(root: Path, name: str) -> np.ndarray:
    """ERDDAP's number of each time of ``name`` (the oracle's rule, see the module docstring)."""
    first = sorted((root / name).glob("*.nc"))[0]
    with netCDF4.Dataset(first) as nc:
        units, calendar = nc["time"].units, nc["time"].calendar
    times = local(root, name)["time"].values
    if calendar == "360_day":
        base = pd.Timestamp(units.split(" since ")[1], tz="UTC").timestamp()
        return np.round(base + np.asarray(cftime.date2num(list(times), units, calendar)) * 86400, 3)
    return np.array([pd.Timestamp(label, tz="UTC").timestamp() for label in labels(times)])


def text(value: Any) -> str:
    array = np.asarray(value)
    if array.ndim and array.size > 1:
        return " ".join(text(v) for v in array)
    item = array.item() if array.size == 1 else value
    return repr(float(item)) if isinstance(item, float) else str(item)


def same_values(got: np.ndarray, want: np.ndarray) -> None:
    np.testing.assert_array_equal(np.asarray(got, dtype="f8"), np.asarray(want, dtype="f8"))


@st.composite
def slabs(draw: st.DrawFn, sizes: dict[str, int], strided: bool = True) -> dict[str, slice]:
    out = {}
    for dim, n in sizes.items():
        start = draw(st.integers(0, n - 1))
        stop = draw(st.integers(start, n - 1))
        step = draw(st.integers(1, 3)) if strided else 1
        out[dim] = slice(start, stop + 1, step)
    return out


SIZES = {"time": 12, "lat": 5, "lon": 6}


# -- the xarray backend -----------------------------------------------------------------------------------------

@pytest.mark.parametrize("name", DATASETS)
def test_backend_opens_what_xarray_opens(site: dict[str, Any], name: str) -> None:
    want = local(site["root"], name)
    got = xr.open_dataset(f"dstp://{site['grpc']}/{name}", engine="dstp", decode_times=CFTIME).load()
    assert set(want.variables) <= set(got.variables), set(want.variables) - set(got.variables)
    assert set(want.coords) <= set(got.coords)
    assert dict(got.sizes) == dict(want.sizes)
    for v in want.variables:
        if want[v].dtype.kind == "O":
            assert labels(got[v].values) == labels(want[v].values), v
        else:
            same_values(got[v].values, want[v].values)
            assert got[v].dtype == want[v].dtype, v
        missing = {k: text(x) for k, x in want[v].attrs.items() if k not in STORAGE}
        assert {k: text(got[v].attrs.get(k)) for k in missing} == missing, v
    assert {k: got.attrs.get(k) for k in want.attrs} == {k: text(x) for k, x in want.attrs.items()}
    # the scalar auxiliary time is decoded on the file's calendar: differences work as on the files
    np.testing.assert_array_equal((got.time - got.forecast_reference_time).values,
                                  (want.time - want.forecast_reference_time).values)


def test_backend_shows_a_dimension_only_its_coordinate_uses(site: dict[str, Any]) -> None:
    want = local(site["root"], "bare_date")
    got = xr.open_dataset(f"dstp://{site['grpc']}/bare_date", engine="dstp", decode_times=CFTIME)
    assert "date" in want.coords and "rank" not in want.variables
    same_values(got["date"].values, want["date"].values)
    assert {k: text(v) for k, v in want["date"].attrs.items()} == dict(got["date"].attrs)


@pytest.mark.parametrize("name", ["d360_east", "nol_west"])
def test_backend_decodes_a_scalar_time_on_its_files_calendar(site: dict[str, Any], name: str) -> None:
    want = local(site["root"], name)
    got = xr.open_dataset(f"dstp://{site['grpc']}/{name}", engine="dstp", decode_times=CFTIME)
    assert got.forecast_reference_time.values.item().calendar == want.forecast_reference_time.values.item().calendar
    assert labels(got.forecast_reference_time.values) == labels(want.forecast_reference_time.values)
    np.testing.assert_array_equal((got.time - got.forecast_reference_time).values,
                                  (want.time - want.forecast_reference_time).values)


@SLOW
@given(data=st.data())
def test_backend_slabs_equal_xarrays(site: dict[str, Any], data: st.DataObject) -> None:
    name = data.draw(st.sampled_from(DATASETS))
    slab = data.draw(slabs(SIZES))
    want = local(site["root"], name).tas.isel(slab)
    got = xr.open_dataset(f"dstp://{site['grpc']}/{name}", engine="dstp", decode_times=CFTIME).tas.isel(slab)
    same_values(got.values, want.values)
    assert labels(got.time.values) == labels(want.time.values)
    same_values(got.lat.values, want.lat.values)
    same_values(got.lon.values, want.lon.values)


# -- ERDDAP through erddapy -------------------------------------------------------------------------------------

@SLOW
@given(data=st.data())
def test_griddap_slabs_through_erddapy_equal_xarrays(site: dict[str, Any], data: st.DataObject) -> None:
    name = data.draw(st.sampled_from(DATASETS))
    slab = data.draw(slabs(SIZES))
    want = local(site["root"], name).tas.isel(slab)
    e = erddapy.ERDDAP(server=site["erddap"], protocol="griddap")
    e.dataset_id = name
    e.variables = ["tas"]
    full = local(site["root"], name)
    for dim, s in slab.items():
        values = full[dim].values
        last = range(values.size)[s][-1]
        show = (lambda v: labels([v])[0] + "Z") if dim == "time" else (lambda v: repr(float(v)))
        e.constraints[f"{dim}>="], e.constraints[f"{dim}<="] = show(values[s.start]), show(values[last])
        e.constraints[f"{dim}_step"] = s.step
    got = e.to_xarray(decode_times=CFTIME)
    same_values(got.tas.values, want.values)
    attrs = {k: text(x) for k, x in want.attrs.items() if k not in STORAGE | {"coordinates"}}
    assert {k: text(got.tas.attrs.get(k)) for k in attrs} == attrs
    assert got.crs.attrs["grid_mapping_name"] == local(site["root"], name).crs.attrs["grid_mapping_name"]
    assert labels(got.time.values) == labels(want.time.values)
    same_values(got.lon.values, want.lon.values)
    csv = e.to_pandas()
    same_values(csv["tas (K)"].to_numpy(), want.transpose("time", "lat", "lon").values.reshape(-1))


@SLOW
@given(data=st.data())
def test_tabledap_constraints_through_erddapy_select_what_erddap_selects(site: dict[str, Any],
                                                                        data: st.DataObject) -> None:
    name = data.draw(st.sampled_from(DATASETS))
    full = local(site["root"], name)
    seconds = erddap_seconds(site["root"], name)
    t0, t1 = sorted(data.draw(st.lists(st.integers(0, len(seconds) - 1), min_size=2, max_size=2)))
    # erddapy takes Gregorian text and sends its seconds: pick instants between the axis's times
    low = dt.datetime.fromtimestamp(seconds[t0] - 3600, dt.timezone.utc)
    high = dt.datetime.fromtimestamp(seconds[t1] + 3600, dt.timezone.utc)
    lat = np.sort(full.lat.values)
    la, lb = sorted(data.draw(st.lists(st.sampled_from(list(lat)), min_size=2, max_size=2)))
    e = erddapy.ERDDAP(server=site["erddap"], protocol="tabledap")
    e.dataset_id, e.variables = name, ["time", "lat", "lon", "tas"]
    e.constraints = {"time>=": low.strftime("%Y-%m-%dT%H:%M:%SZ"), "time<=": high.strftime("%Y-%m-%dT%H:%M:%SZ"),
                     "lat>=": float(la), "lat<=": float(lb)}
    chosen = (seconds >= erddapy.core.url.parse_dates(e.constraints["time>="])) & \
        (seconds <= erddapy.core.url.parse_dates(e.constraints["time<="]))
    frame = full.tas.isel(time=np.flatnonzero(chosen)).sel(lat=(full.lat >= la) & (full.lat <= lb)) \
        .to_dataframe().reset_index()
    want = pd.DataFrame({"time": [t + "Z" for t in labels(frame.time.values)], "lat": frame.lat, "lon": frame.lon,
                         "tas": frame.tas}).sort_values(["time", "lat", "lon"]).reset_index(drop=True)
    got = e.to_pandas().rename(columns=lambda c: c.split(" ")[0]).sort_values(["time", "lat", "lon"]) \
        .reset_index(drop=True)
    assert got["time"].tolist() == want["time"].tolist()
    same_values(got[["lat", "lon", "tas"]].to_numpy(), want[["lat", "lon", "tas"]].to_numpy())
    table = e.to_xarray()  # .ncCF: a table holds no grid-mapping variable, so it names none
    attrs = {k: text(x) for k, x in full.tas.attrs.items() if k not in STORAGE | {"coordinates", "grid_mapping"}}
    assert {k: text(table.tas.attrs.get(k)) for k in attrs} == attrs


# -- /query?format=nc -------------------------------------------------------------------------------------------

@SLOW
@given(data=st.data())
def test_query_nc_equals_xarray(site: dict[str, Any], data: st.DataObject, tmp_path_factory: Any) -> None:
    name = data.draw(st.sampled_from(DATASETS))
    slab = data.draw(slabs(SIZES, strided=False))
    full = local(site["root"], name)
    want = full.tas.isel(slab)
    t = labels(want.time.values)
    lat, lon = want.lat.values, want.lon.values
    sql = (f"select time, lat, lon, tas from {name} where time between '{t[0]}' and '{t[-1]}' "
           f"and lat between {float(lat.min())!r} and {float(lat.max())!r} "
           f"and lon between {float(lon.min())!r} and {float(lon.max())!r}")
    r = site["http"].get("/query", params={"sql": sql, "format": "nc"})
    assert r.status_code == 200, r.text
    path = tmp_path_factory.mktemp("nc") / "q.nc"
    path.write_bytes(r.content)
    with xr.open_dataset(path, decode_times=CFTIME, decode_coords="all") as got:
        same_values(got.tas.values, want.values)
        assert labels(got.time.values) == t
        same_values(got.lat.values, lat)
        same_values(got.lon.values, lon)
        missing = {k: text(x) for k, x in want.attrs.items() if k not in STORAGE | {"grid_mapping", "coordinates"}}
        assert {k: text(got.tas.attrs.get(k)) for k in missing} == missing
