"""The xarray backend (engine="dstp") against xarray opening the same files itself.

The oracle is xarray with its own netCDF4 engine on the published files,
concatenated along the aggregation dimension; dstp's names (``T`` is
``temperature``) come from the oracle's published mapping. The server's read
counters (the FetchSummary of every backend query, gathered by
``record_reads``) show that a selection reads only its hyperslab.
"""

from __future__ import annotations

import math
import pickle
import shutil
from pathlib import Path
from typing import Iterator

import netCDF4
import numpy as np
import pytest
import xarray as xr
from hypothesis import given, settings
from hypothesis import strategies as st

import dstp
import oracle
from builders import ROTATED_POLE, rotated_pole
from dstp.catalog.publish import publish
from dstp.client._backend import record_reads
from dstp.server import DstpServer
from dstp.settings import Settings

ROTATED = ROTATED_POLE
NAMES = {**oracle.DATASETS, "rotpole": {"folder": "rotpole", "glob": "rotpole.nc", "agg": None, "rename": {}},
         "ints": {"folder": "ints", "glob": "ints_*.nc", "agg": "time", "rename": {}},
         "unwritten": {"folder": "unwritten", "glob": "unwritten.nc", "agg": None, "rename": {}}}


def _rotpole(folder: Path) -> None:
    """A CORDEX-like rotated-pole file: tas(time, rlat, rlon) with 2-D lat/lon auxiliary coordinates."""
    def values(lat: np.ndarray, lon: np.ndarray) -> np.ndarray:
        tas = (270 + np.arange(4 * 20 * 24).reshape(4, 20, 24) % 37).astype(np.float32)
        tas[1, 3:5, 7] = 1e20  # the fill value: missing
        return tas

    folder.mkdir()
    rotated_pole(folder / "rotpole.nc", "tas", values, rlat=np.linspace(-10, 10, 20), rlon=np.linspace(-12, 12, 24),
                 times=[0, 6, 12, 18], time_units="hours since 2001-01-01", calendar="proleptic_gregorian",
                 standard_name="air_temperature", fill_value=1e20)
    publish([folder / "rotpole.nc"], "rotpole")


def _ints(folder: Path) -> None:
    """Two files of integer variables, each kind xarray decodes differently: kept integers, masked, packed."""
    folder.mkdir()
    files = []
    for k in range(2):
        path = folder / f"ints_{k}.nc"
        with netCDF4.Dataset(path, "w") as nc:
            nc.createDimension("time", None)
            nc.createDimension("lat", 3)
            nc.createDimension("lon", 4)
            time = nc.createVariable("time", "f8", ("time",))
            time.units, time.calendar, time.standard_name = "days since 2000-01-01", "standard", "time"
            time[:] = [10.0 * k, 10.0 * k + 5]
            lat = nc.createVariable("lat", "f4", ("lat",))
            lat.units, lat.standard_name = "degrees_north", "latitude"
            lat[:] = [10.0, 20.0, 30.0]
            lon = nc.createVariable("lon", "f4", ("lon",))
            lon.units, lon.standard_name = "degrees_east", "longitude"
            lon[:] = [0.0, 90.0, 180.0, 270.0]
            base = np.arange(24).reshape(2, 3, 4) + 24 * k

            def var(name: str, kind: str, values: np.ndarray, **attrs: object) -> None:
                fill = attrs.pop("_FillValue", None)
                v = nc.createVariable(name, kind, ("time", "lat", "lon"), fill_value=fill)
                v.set_auto_maskandscale(False)  # the raw values below are what the file holds
                v.units = "1"
                for key, value in attrs.items():
                    v.setncattr(key, value)
                v[:] = values

            # kept integers by xarray: no _FillValue, no missing_value, no packing
            var("i64", "i8", np.int64(2**53) + 1 + base)                      # beyond float64's integers
            var("u8", "u1", (base * 37 % 256).astype(np.uint8))
            var("i8", "i1", (base - 20).astype(np.int8))
            var("u32", "u4", np.uint32(4_000_000_000) + base.astype(np.uint32))
            var("su", "i2", (-(base + 1)).astype(np.int16), _Unsigned="true")  # uint16 65535-base
            # masked by xarray (floats): a _FillValue, a missing_value, the netCDF default as _FillValue
            masked = base.astype(np.int16)
            masked[0, 1, 1] = -999
            var("i16f", "i2", masked, _FillValue=np.int16(-999))
            missing = base.astype(np.int32)
            missing[1, 2, 3] = -1
            var("i32m", "i4", missing, missing_value=np.int32(-1))
            ushort = base.astype(np.uint16)
            ushort[0, 0, 0] = 65535
            var("u16f", "u2", ushort, _FillValue=np.uint16(65535))
            # a _FillValue in the second file only: xarray's concat makes the whole variable float64
            later = (base * 1000).astype(np.int32)
            if k:
                later[0, 0, 2] = -5
                var("i32late", "i4", later, _FillValue=np.int32(-5))
            else:
                var("i32late", "i4", later)
            # packed: floats
            var("pk", "i2", (base * 7 - 100).astype(np.int16), scale_factor=np.float32(0.01),
                add_offset=np.float32(10.0))
        files.append(path)
    publish(files, "ints")


def _unwritten(folder: Path) -> None:
    """An int32 variable without _FillValue holding netCDF's default fill (an unwritten element)."""
    folder.mkdir()
    path = folder / "unwritten.nc"
    with netCDF4.Dataset(path, "w") as nc:
        nc.createDimension("lat", 3)
        nc.createDimension("lon", 2)
        lat = nc.createVariable("lat", "f4", ("lat",))
        lat.units, lat.standard_name = "degrees_north", "latitude"
        lat[:] = [10.0, 20.0, 30.0]
        lon = nc.createVariable("lon", "f4", ("lon",))
        lon.units, lon.standard_name = "degrees_east", "longitude"
        lon[:] = [0.0, 90.0]
        count = nc.createVariable("count", "i4", ("lat", "lon"))
        count.units = "1"
        count[0, :] = [7, 8]
        count[1, :] = [9, 10]  # row 2 is never written: it reads back as the default fill
    publish([path], "unwritten")


@pytest.fixture(scope="module")
def root(catalog_root: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    here = tmp_path_factory.mktemp("backend")
    for name in ("ccm3", "ocean", "station", "axes"):
        shutil.copytree(catalog_root / name, here / name)
    _rotpole(here / "rotpole")
    _ints(here / "ints")
    _unwritten(here / "unwritten")
    return here


@pytest.fixture(scope="module")
def url(root: Path) -> Iterator[str]:
    settings = Settings(catalog_root=root, port=0, http_port=-1, data_port=-1, udt_port=-1, batch_rows=4096)
    with DstpServer(settings) as srv:
        assert srv.endpoints is not None
        yield f"dstp://{srv.endpoints.grpc}"


def local(root: Path, dataset: str, **kwargs: object) -> xr.Dataset:
    """Return the dataset as xarray opens its files (default decoding), concatenated, with dstp's names."""
    spec = NAMES[dataset]
    files = sorted((root / spec["folder"]).glob(spec["glob"]))
    parts = []
    for f in files:
        with xr.open_dataset(f, **kwargs) as part:  # type: ignore[arg-type]
            parts.append(part.load())
    ds = parts[0] if len(parts) == 1 else xr.concat(parts, dim=spec["agg"], data_vars="minimal",
                                                     coords="minimal", compat="override")
    if spec["agg"]:
        ds = ds.sortby(spec["agg"])
    return ds.rename(spec["rename"])


def same(got: xr.DataArray | xr.Variable, want: xr.DataArray | xr.Variable, what: str) -> None:
    g, w = np.asarray(got.values), np.asarray(want.values)
    assert g.shape == w.shape, (what, g.shape, w.shape)
    if w.dtype.kind == "f":
        np.testing.assert_array_equal(g.astype("f8"), w.astype("f8"), err_msg=what)
    else:
        assert g.tolist() == w.tolist(), what


@pytest.mark.parametrize("dataset", ["ccm3", "ocean", "station", "rotpole", "ints"])
def test_the_dataset_opens_as_the_files_do(url: str, root: Path, dataset: str) -> None:
    want = local(root, dataset)
    got = xr.open_dataset(f"{url}/{dataset}", engine="dstp")
    for dim, size in want.sizes.items():
        if dim in got.dims or dim not in ("nbnd", "bnds"):
            assert got.sizes[dim] == size, dim
    for name, var in want.data_vars.items():
        if name in ("time_bnds", "crs", "rotated_pole") or var.dtype.kind == "O":
            continue
        assert name in got.data_vars, name
        assert got[name].dims == var.dims, name
        assert got[name].dtype == var.dtype, name
        same(got[name], var, name)
        for key, value in var.attrs.items():
            assert str(got[name].attrs.get(key)) == str(value), (name, key)
    for name, coord in want.coords.items():
        assert name in got.coords, name
        same(got[name], coord, name)
    time = next((c for c in want.coords if want[c].attrs.get("standard_name") == "time"
                 or "calendar" in want[c].encoding), None)
    if time is not None:
        assert got[time].encoding["units"] == want[time].encoding["units"]
        assert got[time].encoding.get("calendar", "standard") == want[time].encoding.get("calendar", "standard")
        assert got[time].dtype == want[time].dtype  # datetime64 on the standard calendar, cftime otherwise
    for key, value in want.attrs.items():
        assert str(got.attrs[key]) == str(value), key


def test_integers_stay_integers_where_xarray_keeps_them(url: str, root: Path) -> None:
    want = local(root, "ints")
    got = xr.open_dataset(f"{url}/ints", engine="dstp")
    kept = {"i64": "int64", "u8": "uint8", "i8": "int8", "u32": "uint32", "su": "uint16"}
    floats = {"i16f": "float32", "i32m": "float64", "u16f": "float32", "i32late": "float64", "pk": "float32"}
    assert {n: str(want[n].dtype) for n in {**kept, **floats}} == {**kept, **floats}  # the oracle's own types
    with dstp.connect(url.removeprefix("dstp://")) as c:  # what the backend decides from
        nullable = {a.name: a.nullable for a in c.describe("ints").attributes}
    assert nullable == {**dict.fromkeys(kept, False), **dict.fromkeys(floats, True)}
    for name in kept:
        assert got[name].dtype == want[name].dtype, name
        assert got[name].values.tolist() == want[name].values.tolist(), name  # every value, exactly
    assert int(got.i64[0, 0, 0]) == int(want.i64[0, 0, 0]) == 2**53 + 1  # float64 would give 2**53
    for name in floats:
        assert got[name].dtype == want[name].dtype, name
        np.testing.assert_array_equal(got[name].values, want[name].values, err_msg=name)
        assert np.isnan(got[name].values).any() or name == "pk", name
    same(got.i64.isel(time=slice(1, 3), lon=slice(1, None, 2)), want.i64.isel(time=slice(1, 3), lon=slice(1, None, 2)),
         "i64 slab")


def test_an_unwritten_integer_element_is_refused_not_guessed(url: str, root: Path) -> None:
    want = local(root, "unwritten")
    assert want["count"].dtype == np.int32 and int(want["count"][2, 0]) == netCDF4.default_fillvals["i4"]
    got = xr.open_dataset(f"{url}/unwritten", engine="dstp")
    assert got["count"].dtype == np.int32
    same(got["count"].isel(lat=slice(0, 2)), want["count"].isel(lat=slice(0, 2)), "written rows")
    with pytest.raises(ValueError, match=r"count: the server sent 2 missing value\(s\).*default fill value"):
        got["count"].load()


def test_auxiliary_coordinates_and_the_grid_mapping_travel(url: str, root: Path) -> None:
    got = xr.open_dataset(f"{url}/rotpole", engine="dstp")
    assert {"lat", "lon"} <= set(got.coords) and got.lat.dims == ("rlat", "rlon")
    assert got.tas.attrs["grid_mapping"] == "rotated_pole"
    assert got.rotated_pole.attrs["grid_north_pole_latitude"] == 39.25
    import pyproj

    want = pyproj.CRS.from_cf(ROTATED)
    assert pyproj.CRS(got.rotated_pole.attrs["crs_wkt"]).equals(want, ignore_axis_order=True)
    cf = {k: v for k, v in got.rotated_pole.attrs.items() if k != "crs_wkt"}
    assert pyproj.CRS.from_cf(cf).equals(want, ignore_axis_order=True)


def test_undecoded_times_are_the_files_numbers(url: str, root: Path) -> None:
    want = local(root, "ocean", decode_times=False)
    got = xr.open_dataset(f"{url}/ocean", engine="dstp", decode_times=False)
    same(got.time, want.time, "time")
    assert got.time.attrs["units"] == want.time.attrs["units"]
    assert got.time.attrs["calendar"] == want.time.attrs["calendar"]


def test_sel_reads_only_the_slab(url: str, root: Path) -> None:
    want = local(root, "ccm3").temperature.sel(time=slice("1990-06-01", "1990-08-31"), lat=slice(30, 50))
    ds = xr.open_dataset(f"{url}/ccm3", engine="dstp")
    with record_reads() as log:
        got = ds.temperature.sel(time=slice("1990-06-01", "1990-08-31"), lat=slice(30, 50)).load()
    same(got, want, "temperature")
    assert log.queries == 1
    assert log.elements == want.size == 3 * 8 * 4 * 64, log.sql  # that slab, nothing else
    # the engine's default transport is auto: it chose (here the gRPC stream of the Run call)
    assert [(x.transport, x.choice.split(" (")[0]) for x in log.summaries] == [("grpc", "auto: grpc")]
    assert log.rows == want.size
    with record_reads() as log:
        ds.temperature.load()
    assert log.elements == ds.temperature.size  # the whole variable, for scale


@pytest.mark.parametrize("key", [
    {"time": 3, "lev": slice(1, 7, 2), "lat": slice(5, 30, 3)},       # strides not aligned to 0: read by gcd
    {"time": slice(None, None, -2), "lat": slice(20, 2, -4), "lon": 7},  # negative steps
    {"lev": [0, 3, 7], "lon": slice(0, 64, 8)},                          # a list of indices, an aligned stride
])
def test_isel_matches_the_files(url: str, root: Path, key: dict) -> None:
    want = local(root, "ccm3").humidity.isel(key)
    ds = xr.open_dataset(f"{url}/ccm3", engine="dstp")
    with record_reads() as log:
        got = ds.humidity.isel(key).load()
    same(got, want, "humidity")
    assert log.queries == 1
    assert log.elements < 12 * 8 * 32 * 64 // 4, log.sql


def test_descending_latitude_and_an_index_only_dimension(url: str, root: Path) -> None:
    want = local(root, "station")
    ds = xr.open_dataset(f"{url}/station", engine="dstp")
    with record_reads() as log:
        got = ds.t2m.sel(lat=slice(55, 40), lon=slice(-5, 5)).load()
    same(got, want.t2m.sel(lat=slice(55, 40), lon=slice(-5, 5)), "t2m")
    assert log.elements == 40 * 4 * 3
    same(ds.spectrum.isel(band=slice(1, 3)), want.spectrum.isel(band=slice(1, 3)), "spectrum")
    assert float(ds.height) == 2.0
    same(ds.lat_bnds, want.lat_bnds.rename(bnds="bnds"), "lat_bnds")


def test_dask_chunks_of_one_compute_are_read_by_one_query(url: str, root: Path) -> None:
    want = local(root, "ocean")
    ds = xr.open_dataset(f"{url}/ocean", engine="dstp", chunks={"time": 4, "lat": 12})
    assert ds.salinity.chunks == ((4, 4, 4), (6,), (12, 12, 12), (72,))
    with record_reads() as log:
        got = ds.salinity.compute()
    same(got, want.salinity, "salinity")
    assert log.queries == 1  # the 9 chunks tile the variable: one box query (before: 9 queries)
    assert log.elements == ds.salinity.size  # each grid point once
    with record_reads() as log:  # no local dask callback (as under dask.distributed): one query per chunk
        got = ds.salinity.compute(callbacks=())
    same(got, want.salinity, "salinity, chunk by chunk")
    assert log.queries == 9 and log.elements == ds.salinity.size
    with record_reads() as log:
        part = ds.temperature.sel(depth=slice(10, 40), lat=slice(60, -60)).isel(time=slice(2, 7)).compute()
    same(part, want.temperature.sel(depth=slice(10, 40), lat=slice(60, -60)).isel(time=slice(2, 7)), "part")
    # dask reads by chunk (here time 0-3 and 4-7), trimmed to the selection where its optimizer can.
    touched_chunks = 8 * 6 * 36 * 72
    assert part.size <= log.elements <= touched_chunks < ds.temperature.size


def test_a_pickled_dataset_reconnects(url: str, root: Path) -> None:
    ds = xr.open_dataset(f"{url}/ocean", engine="dstp", chunks={"time": 6})
    again = pickle.loads(pickle.dumps(ds))
    same(again.sea_surface_height.isel(time=0), local(root, "ocean").sea_surface_height.isel(time=0), "ssh")


def test_a_query_opens_as_its_grid(url: str) -> None:
    sql = "select time, lat, lon, precipitation from ccm3 where lat > 60"
    got = xr.open_dataset(f"{url}/ccm3", engine="dstp", backend_kwargs={"query": sql})
    with dstp.connect(url.removeprefix("dstp://")) as c:
        want = dstp.to_xarray(c.query(sql))
    xr.testing.assert_identical(got, want)


def test_bad_urls_and_datasets_say_what_is_wrong(url: str) -> None:
    with pytest.raises(ValueError, match="dstp://host:port/<dataset>"):
        xr.open_dataset("dstp://nohost", engine="dstp")
    with pytest.raises(dstp.DatasetNotFoundError, match="ccm3"):
        xr.open_dataset(f"{url}/nosuch", engine="dstp")
    assert math.isnan(float(xr.open_dataset(f"{url}/ccm3", engine="dstp").humidity[0, -1, 0, 0]))


def test_coordinates_are_read_once_per_dataset_version(url: str, root: Path) -> None:
    import dataclasses

    address = url.removeprefix("dstp://")
    xr.open_dataset(f"{url}/ocean", engine="dstp")  # the first open (or an earlier test's) read them
    with record_reads() as log:
        again = xr.open_dataset(f"{url}/ocean", engine="dstp")
    assert log.queries == 0 and log.axes == []  # the Describe answer says nothing changed: no request at all
    want = local(root, "ocean")
    for name in ("time", "depth", "lat", "lon"):
        same(again[name], want[name], name)
    # another version of the dataset (a file grew): its coordinates are asked again, all at once, from the
    # server's memory (one AxisValues call each; before, one query each)
    from dstp.client._backend import Connection, axis_values

    with dstp.connect(address) as client:
        details = client.describe("ocean")
    changed = dataclasses.replace(details, files=(dataclasses.replace(details.files[0], size_bytes=1),
                                                  *details.files[1:]))
    with record_reads() as log:
        values = axis_values(Connection(address), "ocean", changed)
    assert log.queries == 0 and sorted(log.axes) == ["depth", "lat", "lon", "time"] and set(values) == set(log.axes)
    np.testing.assert_array_equal(values["lat"].to_numpy(), want.lat.values)


@pytest.mark.parametrize("dataset", ["ccm3", "ocean", "rotpole"])
@pytest.mark.parametrize("selection", [{}, {"time": slice(1, 3), "lat": slice(2, 9)}, {"time": 1, "lon": slice(9, 2, -2)}])
def test_a_dataset_load_reads_each_grid_once_for_all_its_variables(url: str, root: Path, dataset: str,
                                                                  selection: dict) -> None:
    if dataset == "rotpole":
        selection = {{"lat": "rlat", "lon": "rlon"}.get(d, d): k for d, k in selection.items()}
    want = local(root, dataset).isel(selection)
    full = xr.open_dataset(f"{url}/{dataset}", engine="dstp")
    ds = full.isel(selection)
    # the variables read, by the dimensions they are read on (before the selection drops any)
    lazy = {n: full[n].dims for n, v in ds.variables.items() if n not in full.indexes and full[n].dims}
    grids = {dims for dims in lazy.values() if "bnds" not in dims} | {n for n, d in lazy.items() if "bnds" in d}
    with record_reads() as log:
        ds.load()
    assert log.queries == len(grids), log.sql  # one query per grid (each bounds variable alone)
    for name in ds.data_vars:
        if name in want.variables and "bnds" not in ds[name].dims and ds[name].dims:
            same(ds[name], want[name], name)
    for name in ds.coords:
        if name in want.variables:
            same(ds[name], want[name], name)


_SLAB_VARIABLES = {"ccm3": "temperature", "ocean": "salinity"}


@st.composite
def _slabs(draw: st.DrawFn) -> tuple[str, dict[str, slice]]:
    """A dataset and a slab over some of its dimensions: start, stop and step (negative too) of each."""
    dataset = draw(st.sampled_from(sorted(_SLAB_VARIABLES)))
    dims = {"ccm3": {"time": 12, "lev": 8, "lat": 32, "lon": 64}, "ocean": {"time": 12, "depth": 6, "lat": 36, "lon": 72}}
    key = {}
    for dim, size in dims[dataset].items():
        if draw(st.booleans()):
            start, stop = draw(st.integers(0, size - 1)), draw(st.integers(0, size))
            step = draw(st.sampled_from([1, 1, 2, 3, -1, -2]))
            if step < 0 and not range(size)[start:stop:step]:
                step = -step  # xarray's own lazy indexing fails on an empty reversed slice (local files too)
            key[dim] = slice(start, stop, step)
    return dataset, key


@settings(max_examples=25, deadline=None)
@given(_slabs())
def test_slabs_asked_twice_equal_the_files_both_times(url: str, root: Path, slab: tuple[str, dict]) -> None:
    """The second, equal request reuses the server's prepared query (dstp/service/prepared.py) and its dask
    chunk queries too; both equal xarray on the local files, as does a dask compute of the same slab."""
    dataset, key = slab
    var = _SLAB_VARIABLES[dataset]
    want = _local_cached(root, dataset)[var].isel(key)
    ds = xr.open_dataset(f"{url}/{dataset}", engine="dstp")
    for _ in range(2):
        same(ds[var].isel(key), want, f"{dataset} {key}")
    chunked = xr.open_dataset(f"{url}/{dataset}", engine="dstp", chunks={"time": 4, "lat": 12})
    for _ in range(2):
        same(chunked[var].isel(key).compute(), want, f"{dataset} {key} (dask)")


_LOCAL: dict[tuple[Path, str], xr.Dataset] = {}


def _local_cached(root: Path, dataset: str) -> xr.Dataset:
    if (root, dataset) not in _LOCAL:
        _LOCAL[root, dataset] = local(root, dataset)
    return _LOCAL[root, dataset]


#: Chunk lengths per ocean dimension (size 12, 6, 36, 72): uneven ones, at most 3 × 2 × 4 × 3 chunks.
_CHUNK_LENGTHS = {"time": (4, 12), "depth": (3, 6), "lat": (9, 36), "lon": (24, 72)}


@settings(max_examples=8, deadline=None)
@given(chunks=st.fixed_dictionaries({d: st.integers(*r) for d, r in _CHUNK_LENGTHS.items()}),
       budget=st.sampled_from([None, 400_000, 150_000]))
def test_a_dask_compute_of_several_variables_reads_boxes_equal_to_the_files(url: str, root: Path, chunks: dict,
                                                                            budget: int | None) -> None:
    """Uneven chunks (12 = 5 + 5 + 2 …) of every variable in one compute: values equal xarray on the files; the
    chunks of each grid are read by box queries of at most ``budget`` bytes (one box per grid by default), each
    grid point once."""
    from unittest import mock

    from dstp.client import _chunk_batches

    want = _local_cached(root, "ocean")
    ds = xr.open_dataset(f"{url}/ocean", engine="dstp", chunks=chunks)
    variables = ("salinity", "temperature", "sea_surface_height")
    with mock.patch.object(_chunk_batches, "BOX_BYTES", budget or _chunk_batches.BOX_BYTES), \
            record_reads() as log:
        got = ds.compute()
    for name in variables:
        same(got[name], want[name], name)
    assert log.elements == sum(ds[name].size for name in variables), log.sql  # each grid point once
    def chunks_of(name: str) -> tuple[tuple[int, ...], ...]:
        found = ds[name].chunks
        assert found is not None
        return found

    chunk_reads = sum(int(np.prod([len(c) for c in chunks_of(name)])) for name in variables)  # one query each before
    if budget is None:
        assert log.queries == 2, log.sql  # salinity and temperature in one box query, the sea surface in one
    else:
        assert 2 <= log.queries <= chunk_reads
        for sql, summary in zip(log.sql, log.summaries):  # a box is within the budget, or one chunk
            columns = [name for name in variables if f'"{name}"' in sql]  # float32 values
            biggest_chunk = int(np.prod([max(c) for c in chunks_of(columns[0])]))
            assert summary.rows <= max(budget // (4 * len(columns)), biggest_chunk), sql


def test_a_box_refused_reads_its_chunks_alone_and_says_what_is_wrong(url: str, root: Path) -> None:
    """A box holding a value the backend refuses (an unwritten integer) is not handed out: its chunks read
    alone, the written ones equal the files, the other is refused naming the variable as without dask."""
    want = local(root, "unwritten")
    got = xr.open_dataset(f"{url}/unwritten", engine="dstp", chunks={"lat": 1})
    with record_reads() as log:
        same(got["count"].isel(lat=slice(0, 2)).compute(), want["count"].isel(lat=slice(0, 2)), "written rows")
    assert log.queries == 1
    with pytest.raises(ValueError, match=r"count: the server sent 2 missing value\(s\).*default fill value"):
        got["count"].compute()


def test_two_computes_at_once_each_get_their_own_values(url: str, root: Path) -> None:
    from concurrent.futures import ThreadPoolExecutor

    want = _local_cached(root, "ocean")
    ds = xr.open_dataset(f"{url}/ocean", engine="dstp", chunks={"time": 5, "lat": 7})
    keys = [{"time": slice(1, 11)}, {"lat": slice(3, 30), "lon": slice(None, None, 5)}, {"depth": 2}, {}]
    with ThreadPoolExecutor(2) as pool:
        results = list(pool.map(lambda key: ds.salinity.isel(key).compute(), keys * 2))
    for key, got in zip(keys * 2, results):
        same(got, want.salinity.isel(key), str(key))
