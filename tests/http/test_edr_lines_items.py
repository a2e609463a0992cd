"""OGC API - EDR corridors, trajectories with Z and M, and station items, against xarray on the files.

Archives: ccm3 (noleap, 4-D with levels, longitudes 0…354.375), a 360_day model (packed int16 with fill
values, latitudes north to south, longitudes 0…337.5) and a CF timeSeries of buoys (contiguous ragged array,
longitudes 0…360). The oracle opens each file with xarray on its own; a corridor's cells are checked against
the line sampled every 2 km along its geodesics (pyproj's Geod, the field's geodesic library): a cell nearer
than half the width to a sample must be in, one farther than half the width + 1 km from every sample must be
out (the samples are at most 1 km from any point of the line).
"""

from __future__ import annotations

import csv
import io
import shutil
from pathlib import Path
from typing import Iterator

import cftime
import httpx
import netCDF4
import numpy as np
import pytest
import xarray as xr
from hypothesis import HealthCheck, Phase, given, settings, strategies as st
from pyproj import Geod

import builders
import oracle
from protocol_archives import SPECS as ARCHIVES
from protocol_archives import model_360_day, open_local
from http_fixtures import anonymous_http

from dstp.catalog.publish import publish

SPECS = {"ccm3": oracle.DATASETS["ccm3"], "model": ARCHIVES["model"],
         "std": {"folder": "std", "glob": "std_*.nc", "agg": "time", "rename": {}}}
GEOD = Geod(ellps="WGS84")


@pytest.fixture(scope="module")
def root(catalog_root: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    here = tmp_path_factory.mktemp("edr_lines")
    shutil.copytree(catalog_root / "ccm3", here / "ccm3")
    model_360_day(here / "model")
    publish(builders.buoys(here / "buoys", stations=12, west=False), "buoys")
    publish(builders.model_grid(here / "std", calendar="standard", lon_west=True, years=(2000, 2001), name="std"),
            "std")
    return here


@pytest.fixture(scope="module")
def http(root: Path) -> Iterator[httpx.Client]:
    with anonymous_http(root) as client:
        yield client


def local(root: Path, dataset: str) -> xr.Dataset:
    return open_local(root, SPECS[dataset])


def _values(cov: dict, name: str) -> np.ndarray:
    r = cov["ranges"][name]
    return np.array([np.nan if v is None else v for v in r["values"]], dtype="f8").reshape(r["shape"])


def _rows(answer: httpx.Response) -> list[dict]:
    assert answer.status_code == 200, answer.text
    return list(csv.DictReader(io.StringIO(answer.text)))


# -- trajectories with Z and M ------------------------------------------------------------------------------

vertex = st.tuples(st.floats(-180, 180), st.floats(-60, 60))


@settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture],
          phases=[Phase.explicit, Phase.generate])
@given(path=st.lists(st.tuples(st.floats(-180, 180), st.floats(-60, 60), st.floats(50, 1100)), min_size=2,
                     max_size=4))
def test_linestring_z_takes_each_vertex_nearest_level(http, root: Path, path: list) -> None:
    ds = local(root, "ccm3")
    line = "LINESTRING Z (" + ", ".join(f"{x!r} {y!r} {z!r}" for x, y, z in path) + ")"
    answer = http.get("/edr/collections/ccm3/trajectory", params={
        "coords": line, "parameter-name": "temperature", "datetime": "1990-01-01/1990-03-31"})
    assert answer.status_code == 200, answer.text
    cov = answer.json()
    assert cov["domain"]["domainType"] == "Trajectory"
    times = ds.time[(ds.time >= cftime.DatetimeNoLeap(1990, 1, 1)) & (ds.time <= cftime.DatetimeNoLeap(1990, 3, 31))]
    want = np.concatenate([ds["temperature"].sel(lon=x % 360, lat=y, lev=z, method="nearest").sel(time=times).values
                           for x, y, z in path])
    np.testing.assert_array_equal(_values(cov, "temperature"), want.astype("f8"))
    tuples = cov["domain"]["axes"]["composite"]["values"]
    levels = [float(ds.lev.sel(lev=z, method="nearest")) for _, _, z in path]
    assert [t[1] for t in tuples] == [pytest.approx(v) for v in np.repeat(levels, times.size)]


@settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture],
          phases=[Phase.explicit, Phase.generate])
@given(path=st.lists(vertex, min_size=2, max_size=4),
       days=st.lists(st.floats(0.0, 89.9), min_size=4, max_size=4))
def test_linestring_m_takes_each_vertex_nearest_time_on_the_360_day_calendar(http, root: Path, path: list,
                                                                               days: list) -> None:
    ds = local(root, "model")
    # M is seconds since 1970-01-01 on the dataset's own calendar (Unix time on a Gregorian one)
    start = cftime.date2num(cftime.Datetime360Day(2000, 1, 1), "seconds since 1970-01-01", calendar="360_day")
    ms = [float(start) + d * 86400.0 for d in days[:len(path)]]
    line = "LINESTRINGM(" + ", ".join(f"{x!r} {y!r} {m!r}" for (x, y), m in zip(path, ms)) + ")"
    answer = http.get("/edr/collections/model/trajectory", params={"coords": line, "parameter-name": "tas"})
    assert answer.status_code == 200, answer.text
    cov = answer.json()
    want = [float(ds["tas"].sel(lon=x % 360, lat=y, method="nearest").sel(
        time=cftime.num2date(m, "seconds since 1970-01-01", calendar="360_day"), method="nearest"))
        for (x, y), m in zip(path, ms)]
    np.testing.assert_array_equal(_values(cov, "tas"), np.array(want, "f8"))
    assert len(cov["domain"]["axes"]["composite"]["values"]) == len(path)


@settings(max_examples=6, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture],
          phases=[Phase.explicit, Phase.generate])
@given(path=st.lists(st.tuples(st.floats(-180, 180), st.floats(-80, 80), st.floats(200, 900),
                               st.floats(946_684_800.0, 1_009_756_800.0)), min_size=2, max_size=4))
def test_linestring_zm_in_unix_seconds_on_a_gregorian_grid_west_of_0(http, root: Path, path: list) -> None:
    ds = local(root, "std")  # standard calendar, longitudes −180…180, levels in hPa
    line = "LINESTRING ZM (" + ", ".join(f"{x!r} {y!r} {z!r} {m!r}" for x, y, z, m in path) + ")"
    answer = http.get("/edr/collections/std/trajectory", params={"coords": line, "parameter-name": "ta"})
    assert answer.status_code == 200, answer.text
    # a request's longitude is taken on the storage's convention (docs/edr.md): on −180…180 storage 180 is −180
    want = [float(ds["ta"].sel(lon=((x + 180.0) % 360.0) - 180.0, lat=y, lev=z, method="nearest").sel(
        time=cftime.num2date(m, "seconds since 1970-01-01", calendar="standard"), method="nearest"))
        for x, y, z, m in path]
    np.testing.assert_array_equal(_values(answer.json(), "ta"), np.array(want, "f8"))


@pytest.mark.parametrize("lon, lat", [(-157.5, 0.0), (-90.0, 30.0), (0.0, -60.0)])
def test_a_point_midway_between_cells_takes_the_larger_value_as_xarray_does(http, root: Path, lon: float,
                                                                             lat: float) -> None:
    ds = local(root, "std")  # latitudes −75, −45, −15, 15, 45, 75 and longitudes −180, −135, …: ties at these
    want = ds["ta"].sel(lon=lon, lat=lat, method="nearest")
    cov = http.get("/edr/collections/std/position", params={"coords": f"POINT({lon} {lat})",
                                                            "parameter-name": "ta"}).json()
    assert (cov["domain"]["axes"]["x"]["values"], cov["domain"]["axes"]["y"]["values"]) == \
        ([float(want.lon)], [float(want.lat)])
    np.testing.assert_array_equal(_values(cov, "ta").reshape(want.shape), want.values)
    track = http.get("/edr/collections/std/trajectory", params={
        "coords": f"LINESTRING Z ({lon} {lat} 675, 10 10 500)", "parameter-name": "ta"}).json()
    level = float(ds.lev.sel(lev=675.0, method="nearest"))  # midway between 850 and 500 hPa too
    assert track["domain"]["axes"]["composite"]["values"][0][1:] == [level, float(want.lon), float(want.lat)]


def test_linestring_zm_and_multilinestring_answer_vertex_by_vertex_in_order(http, root: Path) -> None:
    from owslib.ogcapi.edr import EnvironmentalDataRetrieval

    ds = local(root, "ccm3")
    parts = [[(-20.0, 40.0, 300.0, 1990, 2, 10), (10.0, -30.0, 900.0, 1990, 5, 1)],
             [(170.0, 5.0, 100.0, 1990, 1, 3), (-100.0, -60.0, 1000.0, 1990, 12, 31)]]
    seconds = {v: float(cftime.date2num(cftime.DatetimeNoLeap(*v[3:]), "seconds since 1970-01-01", calendar="noleap"))
               for part in parts for v in part}
    wkt = "MULTILINESTRING ZM (" + ", ".join(
        "(" + ", ".join(f"{x} {y} {z} {seconds[v]!r}" for v in part for x, y, z in [v[:3]]) + ")"
        for part in parts) + ")"
    client = EnvironmentalDataRetrieval(str(http.base_url).rstrip("/") + "/edr")
    answer = client.query_data("ccm3", "trajectory", coords=wkt)  # OWSLib sends no parameter-name: all of them
    # ccm3's parameters are on (time, lat, lon) and (time, lev, lat, lon): one Trajectory for each
    assert answer["type"] == "CoverageCollection"
    cov, = [c for c in answer["coverages"] if "temperature" in c["ranges"]]
    assert "z" in cov["domain"]["axes"]["composite"]["coordinates"]
    want = [float(ds["temperature"].sel(lon=x % 360, lat=y, lev=z, method="nearest").sel(
        time=cftime.DatetimeNoLeap(*v[3:]), method="nearest")) for part in parts for v in part for x, y, z in [v[:3]]]
    np.testing.assert_array_equal(_values(cov, "temperature"), np.array(want, "f8"))


# -- corridors ----------------------------------------------------------------------------------------------

def _distances(line: list[tuple[float, float]], lon2: np.ndarray, lat2: np.ndarray, step: float = 2000.0
               ) -> np.ndarray:
    """The oracle: metres from each cell centre to the nearest of samples every ``step`` metres along the
    geodesics (at most step/2 more than the distance to the line)."""
    samples = []
    for (x0, y0), (x1, y1) in zip(line, line[1:]):
        r = GEOD.inv_intermediate(x0, y0, x1, y1, del_s=step, initial_idx=0, terminus_idx=0,
                                  return_back_azimuth=True)
        samples += list(zip(r.lons, r.lats))
    sx, sy = np.array(samples).T
    best = np.full(lon2.size, np.inf)
    for k in range(0, sx.size, 256):  # 256 samples × every cell at a time
        a, b = np.meshgrid(sx[k:k + 256], lon2.ravel(), indexing="ij")
        c, e = np.meshgrid(sy[k:k + 256], lat2.ravel(), indexing="ij")
        best = np.minimum(best, GEOD.inv(a, c, b, e, return_back_azimuth=True)[2].min(axis=0))
    return best.reshape(lon2.shape)


@settings(max_examples=6, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture],
          phases=[Phase.explicit, Phase.generate])
@given(line=st.lists(st.tuples(st.floats(-180, 180), st.floats(-55, 55)), min_size=2, max_size=3,
                     unique_by=lambda p: (round(p[0]), round(p[1]))),
       km=st.floats(300, 3000), dataset=st.sampled_from(["model", "ccm3"]))
def test_corridor_holds_the_cells_within_half_its_width_with_the_files_values(http, root: Path, line: list,
                                                                              km: float, dataset: str) -> None:
    name = "tas" if dataset == "model" else "temperature"
    ds = local(root, dataset)
    lon2, lat2 = np.meshgrid(((ds.lon.values + 180) % 360) - 180, ds.lat.values)
    d = _distances(line, lon2.astype("f8"), lat2.astype("f8"))
    sure_in, sure_out = d <= km * 500.0, d > km * 500.0 + 1000.0
    params = {"coords": "LINESTRING(" + ", ".join(f"{x!r} {y!r}" for x, y in line) + ")",
              "corridor-width": repr(km), "width-units": "km", "parameter-name": name, "f": "CSV"}
    if dataset == "ccm3":
        params["z"] = "850"
        params["datetime"] = "1990-01-01/1990-02-28"
    answer = http.get(f"/edr/collections/{dataset}/corridor", params=params)
    if not sure_in.any() and answer.status_code == 400:
        assert "no cell centre" in answer.text
        return
    rows = _rows(answer)
    got_cells = {(float(r["lat"]), ((float(r["lon"]) + 180) % 360) - 180) for r in rows}
    cells = set(zip(lat2[sure_in].tolist(), lon2[sure_in].tolist()))
    assert cells <= got_cells
    assert not got_cells & set(zip(lat2[sure_out].tolist(), lon2[sure_out].tolist()))
    # every record is the file's value at its cell, time (and level)
    sel = ds[name]
    if dataset == "ccm3":
        sel = sel.sel(lev=850.0, method="nearest")
        sel = sel.sel(time=(sel.time >= cftime.DatetimeNoLeap(1990, 1, 1)) & (sel.time <= cftime.DatetimeNoLeap(1990, 2, 28)))
    times = {t.isoformat()[:19]: i for i, t in enumerate(sel.time.values)}
    assert len(rows) == len(got_cells) * len(times)
    lat_i = {v: i for i, v in enumerate(ds.lat.values.tolist())}
    lon_i = {v: i for i, v in enumerate(ds.lon.values.tolist())}
    got = np.array([float(r[name]) if r[name] else np.nan for r in rows])
    want = np.array([sel.values[times[r["time"][:19]], lat_i[float(r["lat"])], lon_i[float(r["lon"])]]
                     for r in rows], "f8")
    np.testing.assert_array_equal(got, want)


def test_corridor_as_coveragejson_netcdf_and_parquet_and_through_owslib(http, root: Path, tmp_path: Path) -> None:
    import pyarrow.parquet as pq
    from owslib.ogcapi.edr import EnvironmentalDataRetrieval

    ds = local(root, "model")
    line = [(-30.0, 40.0), (10.0, 0.0), (40.0, -20.0)]
    coords = "LINESTRING(" + ", ".join(f"{x} {y}" for x, y in line) + ")"
    lon2, lat2 = np.meshgrid(((ds.lon.values + 180) % 360) - 180, ds.lat.values)
    d = _distances(line, lon2, lat2)
    assert not ((d > 1_250_000.0) & (d <= 1_251_000.0)).any()  # no cell this close to the edge: all decided
    inside = d <= 1_250_000.0
    client = EnvironmentalDataRetrieval(str(http.base_url).rstrip("/") + "/edr")
    cov = client.query_data("model", "corridor", coords=coords, corridor_width="2500", width_units="km")
    assert cov["domain"]["domainType"] == "Grid"
    grid = _values(cov, "tas")  # (t, y, x) over the cells read, outside null
    ys, xs = cov["domain"]["axes"]["y"]["values"], cov["domain"]["axes"]["x"]["values"]
    lat_i = {v: i for i, v in enumerate(ds.lat.values.tolist())}
    lon_i = {((v + 180) % 360) - 180: i for i, v in enumerate(ds.lon.values.tolist())}
    want = np.full(grid.shape, np.nan)
    for a, y in enumerate(ys):
        for b, x in enumerate(xs):
            if inside[lat_i[y], lon_i[x]]:
                want[:, a, b] = ds["tas"].values[:, lat_i[y], lon_i[x]]
    np.testing.assert_array_equal(grid, want)
    assert sum(inside[lat_i[y], lon_i[x]] for y in ys for x in xs) == int(inside.sum())
    params = {"coords": coords, "corridor-width": "2500", "width-units": "km", "parameter-name": "tas"}
    nc = http.get("/edr/collections/model/corridor", params={**params, "f": "netCDF"})
    assert nc.status_code == 200 and nc.headers["content-type"] == "application/x-netcdf", nc.text
    (tmp_path / "c.nc").write_bytes(nc.content)
    with xr.open_dataset(tmp_path / "c.nc", decode_times=xr.coders.CFDatetimeCoder(use_cftime=True)) as got:
        tas = got["tas"].load()
    full = ds["tas"].sel(lat=tas.lat, lon=tas.lon)
    keep = xr.DataArray(inside, dims=("lat", "lon"), coords={"lat": ds.lat, "lon": ds.lon}).sel(lat=tas.lat,
                                                                                                lon=tas.lon)
    np.testing.assert_array_equal(tas.values, full.where(keep).values.astype("f8"))
    table = pq.read_table(io.BytesIO(http.get("/edr/collections/model/corridor",
                                              params={**params, "f": "Parquet"}).content))
    rows = _rows(http.get("/edr/collections/model/corridor", params={**params, "f": "CSV"}))
    assert table.num_rows == len(rows) == int(inside.sum()) * ds.sizes["time"]
    np.testing.assert_array_equal(table.column("tas").to_numpy(zero_copy_only=False).astype("f8"),
                                  [float(r["tas"]) if r["tas"] else np.nan for r in rows])
    gj = http.get("/edr/collections/model/corridor", params={**params, "f": "GeoJSON"}).json()
    assert len(gj["features"]) == len(rows)


def test_a_cell_116_m_beyond_the_edge_is_out_and_in_once_the_corridor_is_240_m_wider(http, root: Path) -> None:
    ds = local(root, "model")
    line = [(-30.0, 40.0), (10.0, 0.0), (40.0, -20.0)]
    coords = "LINESTRING(" + ", ".join(f"{x} {y}" for x, y in line) + ")"
    lon2, lat2 = np.meshgrid(((ds.lon.values + 180) % 360) - 180, ds.lat.values)
    d = _distances(line, lon2, lat2)
    edge = (d > 1_000_000.0) & (d <= 1_001_000.0)
    assert edge.sum() == 1
    lat, lon = float(lat2[edge][0]), float(lon2[edge][0])
    fine = float(_distances(line, np.array([[lon]]), np.array([[lat]]), step=10.0)[0, 0])
    assert 1_000_100.0 < fine - 5.0 and fine < 1_000_120.0  # 100…120 m beyond 1,000 km, to within 5 m

    def cells(width: str) -> set:
        rows = _rows(http.get("/edr/collections/model/corridor", params={
            "coords": coords, "corridor-width": width, "width-units": "km", "parameter-name": "tas", "f": "CSV"}))
        return {(float(r["lat"]), ((float(r["lon"]) + 180) % 360) - 180) for r in rows}

    assert (lat, lon) not in cells("2000")
    assert (lat, lon) in cells("2000.24")


def test_a_3d_corridor_keeps_each_cells_levels_within_half_the_height_of_the_line_there(http, root: Path,
                                                                                        monkeypatch) -> None:
    ds = local(root, "ccm3")  # levels in hPa
    (x0, y0, z0), (x1, y1, z1) = (-30.0, 40.0, 150.0), (10.0, 0.0, 850.0)
    half_width, half_height = 1_250_000.0, 150.0
    # the oracle: samples every 2 km along the geodesic, each at the height interpolated by distance along it
    r = GEOD.inv_intermediate(x0, y0, x1, y1, del_s=2000.0, initial_idx=0, terminus_idx=0, return_back_azimuth=True)
    sx, sy = np.array(r.lons), np.array(r.lats)
    along = np.concatenate([[0.0], np.cumsum(GEOD.inv(sx[:-1], sy[:-1], sx[1:], sy[1:],
                                                      return_back_azimuth=True)[2])])
    sz = z0 + (z1 - z0) * along / along[-1]
    lon2, lat2 = np.meshgrid(((ds.lon.values + 180) % 360) - 180, ds.lat.values)
    a, b = np.meshgrid(sx, lon2.ravel(), indexing="ij")
    c, e = np.meshgrid(sy, lat2.ravel(), indexing="ij")
    d = GEOD.inv(a, c, b, e, return_back_azimuth=True)[2]
    nearest = d.argmin(axis=0)
    dist, height = d.min(axis=0).reshape(lon2.shape), sz[nearest].reshape(lon2.shape)
    slack = abs(z1 - z0) / along[-1] * 1000.0 + 0.01  # a sample is ≤ 1 km along the line from the nearest point
    params = {"coords": f"LINESTRING Z ({x0} {y0} {z0}, {x1} {y1} {z1})", "corridor-width": "2500",
              "width-units": "km", "corridor-height": "300", "height-units": "hPa", "parameter-name": "temperature"}
    rows = _rows(http.get("/edr/collections/ccm3/corridor", params={**params, "f": "CSV"}))
    from dstp import edr

    monkeypatch.setattr(edr.query, "MAX_VALUES", 10)  # the size told before reading is the answer's
    refused = http.get("/edr/collections/ccm3/corridor", params=params)
    assert refused.status_code == 413 and f"would return {len(rows):,} values" in refused.text
    monkeypatch.undo()
    cov = http.get("/edr/collections/ccm3/corridor", params=params).json()  # a Grid: the same records, others null
    assert cov["domain"]["domainType"] == "Grid"
    assert np.count_nonzero(~np.isnan(_values(cov, "temperature"))) == \
        sum(1 for r in rows if r["temperature"])
    got = {(float(r["lat"]), ((float(r["lon"]) + 180) % 360) - 180, float(r["lev"])) for r in rows}
    must, must_not, undecided = set(), set(), 0
    for i, j in np.ndindex(lon2.shape):
        for lev in ds.lev.values.tolist():
            key = (float(lat2[i, j]), float(lon2[i, j]), lev)
            gap = abs(lev - height[i, j])
            if dist[i, j] <= half_width and gap <= half_height - slack:
                must.add(key)
            elif dist[i, j] > half_width + 1000.0 or gap > half_height + slack:
                must_not.add(key)
            else:
                undecided += 1
    assert undecided <= 2 and len(must) > 20
    assert must <= got and not got & must_not
    # each record is the file's value at its time, level and cell
    times = {t.isoformat()[:19]: k for k, t in enumerate(ds.time.values)}
    lev_i = {v: k for k, v in enumerate(ds.lev.values.tolist())}
    lat_i = {v: k for k, v in enumerate(ds.lat.values.tolist())}
    lon_i = {v: k for k, v in enumerate(ds.lon.values.tolist())}
    assert len(rows) == len(got) * len(times)
    np.testing.assert_array_equal(
        [float(r["temperature"]) if r["temperature"] else np.nan for r in rows],
        [float(ds["temperature"].values[times[r["time"][:19]], lev_i[float(r["lev"])], lat_i[float(r["lat"])],
                                        lon_i[float(r["lon"])]]) for r in rows])


def test_a_multilinestring_corridor_is_the_union_of_its_parts(http) -> None:
    def cells(coords: str) -> set:
        return {(r["lat"], r["lon"]) for r in _rows(http.get("/edr/collections/model/corridor", params={
            "coords": coords, "corridor-width": "1500", "width-units": "km", "parameter-name": "tas", "f": "CSV"}))}

    a, b = cells("LINESTRING(-30 40, 10 0)"), cells("LINESTRING(100 -50, 170 -10)")
    assert a and b and not a & b
    assert cells("MULTILINESTRING((-30 40, 10 0), (100 -50, 170 -10))") == a | b


def test_a_corridor_over_the_limit_is_refused_with_its_size(http, root: Path, monkeypatch) -> None:
    from dstp import edr

    ds = local(root, "model")
    line = [(-30.0, 40.0), (10.0, 0.0), (40.0, -20.0)]
    lon2, lat2 = np.meshgrid(((ds.lon.values + 180) % 360) - 180, ds.lat.values)
    cells = int((_distances(line, lon2, lat2) <= 1_250_000.0).sum())
    monkeypatch.setattr(edr.query, "MAX_VALUES", 10)
    answer = http.get("/edr/collections/model/corridor", params={
        "coords": "LINESTRING(-30 40, 10 0, 40 -20)", "corridor-width": "2500", "width-units": "km",
        "parameter-name": "tas"})
    assert answer.status_code == 413, answer.text
    assert f"would return {cells * ds.sizes['time']:,} values" in answer.text


@pytest.mark.parametrize("path, params, status, words", [
    ("corridor", {"coords": "LINESTRING(0 0, 10 10)"}, 400, "needs corridor-width="),
    ("corridor", {"coords": "LINESTRING(0 0, 10 10)", "corridor-width": "100"}, 400,
     "corridor-width='100' needs width-units="),
    ("corridor", {"coords": "LINESTRING(0 0, 10 10)", "corridor-width": "100", "width-units": "furlong"}, 400,
     "width-units='furlong' is not offered"),
    ("corridor", {"coords": "LINESTRING(0 0, 10 10)", "corridor-width": "wide", "width-units": "km"}, 400,
     "corridor-width='wide' is not a number"),
    ("corridor", {"coords": "POINT(0 0)", "corridor-width": "100", "width-units": "km"}, 400, "takes a LINESTRING"),
    ("corridor", {"coords": "LINESTRING(0 0, 10 10)", "corridor-width": "100", "width-units": "km",
                  "corridor-height": "100", "height-units": "hPa"}, 400, "corridor-height='100'"),
    ("corridor", {"coords": "LINESTRING Z (0 0 1, 10 10 2)", "corridor-width": "100", "width-units": "km"}, 400,
     "a corridor with a height per vertex (LINESTRING Z) needs corridor-height= (its whole height) and "
     "height-units= (hPa)"),
    ("corridor", {"coords": "LINESTRING Z (0 0 1, 10 10 2)", "corridor-width": "100", "width-units": "km",
                  "corridor-height": "100", "height-units": "m"}, 400,
     "height-units='m' is not offered: ccm3's levels (lev) are in hPa; send height-units='hPa'"),
    ("corridor", {"coords": "LINESTRING M (0 0 1, 10 10 2)", "corridor-width": "100", "width-units": "km"}, 400,
     "a corridor with a time per vertex (LINESTRING M) is not answered yet"),
    ("trajectory", {"coords": "LINESTRING Z (0 0 500, 10 10 850)", "z": "850"}, 400,
     "gives each vertex its height (LINESTRING Z) and z='850' gives another"),
    ("trajectory", {"coords": "LINESTRINGM(0 0 0, 10 10 86400)", "datetime": "1990-01-01"}, 400,
     "gives each vertex its time (LINESTRING M, Unix seconds) and datetime='1990-01-01'"),
    ("trajectory", {"coords": "LINESTRING ZM (0 0 500 0, 10 10 850 1)", "datetime": "1990-01-01"}, 400,
     "its time (LINESTRING ZM, Unix seconds) and datetime='1990-01-01' gives another: EDR forbids both"),
    ("items", {}, 400, "ccm3 is a grid: items (stations) are offered for station (CF timeSeries) datasets"),
])
def test_a_bad_line_or_items_query_names_what_to_fix(http, path: str, params: dict, status: int, words: str) -> None:
    answer = http.get(f"/edr/collections/ccm3/{path}", params=params)
    assert answer.status_code == status, answer.text
    assert words in answer.json()["error"]["message"]


def test_a_height_per_vertex_on_a_dataset_without_levels_is_refused_quoting_coords(http) -> None:
    answer = http.get("/edr/collections/model/trajectory", params={"coords": "LINESTRING Z (0 0 500, 10 10 850)"})
    assert answer.status_code == 400
    assert answer.json()["error"]["message"] == (
        "coords 'LINESTRING Z (0 0 500, 10 10 850)' gives each vertex a height (LINESTRING Z), but model has no "
        "vertical axis; send LINESTRING(lon lat, …)")


# -- items of a station dataset -----------------------------------------------------------------------------

def _buoys(root: Path) -> list[dict]:
    """The oracle: each station of the ragged file, with its observations, as xarray and CF say."""
    with xr.open_dataset(root / "buoys" / "buoys.nc") as ds:
        ds = ds.load()
    names = [v.decode().strip() if isinstance(v, bytes) else str(v) for v in ds["station_name"].values]
    counts = ds["row_size"].values
    first = np.concatenate([[0], np.cumsum(counts)[:-1]])
    out = []
    for k, name in enumerate(names):
        obs = slice(int(first[k]), int(first[k] + counts[k]))
        out.append({"id": name, "lat": float(ds.lat[k]), "lon": ((float(ds.lon[k]) + 180) % 360) - 180,
                    "time": ds.time.values[obs], "sst": ds.sst.values[obs].astype("f8")})
    return sorted(out, key=lambda s: s["id"])


def test_items_page_through_the_stations_by_id_with_bbox(http, root: Path) -> None:
    want = _buoys(root)
    collections = {c["id"]: c for c in http.get("/edr/collections").json()["collections"]}
    assert set(collections["buoys"]["data_queries"]) == {"items"}
    assert "items" not in collections["ccm3"]["data_queries"] and "corridor" in collections["ccm3"]["data_queries"]
    assert collections["ccm3"]["data_queries"]["corridor"]["link"]["variables"]["height_units"] == ["hPa"]
    assert collections["model"]["data_queries"]["corridor"]["link"]["variables"]["height_units"] == []
    got, offset = [], 0
    while True:
        page = http.get("/edr/collections/buoys/items", params={"limit": "5", "offset": str(offset)})
        assert page.status_code == 200 and page.headers["content-type"] == "application/geo+json", page.text
        body = page.json()
        assert body["numberMatched"] == len(want)
        got += body["features"]
        if not any(link["rel"] == "next" for link in body["links"]):
            break
        offset += 5
    assert [f["id"] for f in got] == [s["id"] for s in want]
    for f, s in zip(got, want):
        assert f["geometry"]["coordinates"] == [pytest.approx(s["lon"]), pytest.approx(s["lat"])]
        assert f["properties"]["observations"] == len(s["time"])
    box = (-60.0, -40.0, 120.0, 50.0)
    inside = [s["id"] for s in want if box[1] <= s["lat"] <= box[3] and box[0] <= s["lon"] <= box[2]]
    boxed = http.get("/edr/collections/buoys/items", params={"bbox": ",".join(map(str, box)), "limit": "100"}).json()
    assert [f["id"] for f in boxed["features"]] == inside and boxed["numberMatched"] == len(inside)
    assert len(inside) >= 2
    # the next page's link keeps the box
    first = http.get("/edr/collections/buoys/items", params={"bbox": ",".join(map(str, box)), "limit": "1"}).json()
    following = next(link["href"] for link in first["links"] if link["rel"] == "next")
    second = http.get(following).json()
    assert [f["id"] for f in first["features"] + second["features"]] == inside[:2]


def test_items_and_an_item_narrowed_by_datetime_count_the_observations_then(http, root: Path) -> None:
    want = _buoys(root)
    lo, hi = np.datetime64("1990-03-01T00:00:00"), np.datetime64("1990-04-15T12:00:00")
    counts = {s["id"]: int(((s["time"] >= lo) & (s["time"] <= hi)).sum()) for s in want}
    page = http.get("/edr/collections/buoys/items", params={
        "datetime": "1990-03-01T00:00:00Z/1990-04-15T12:00:00Z", "limit": "100"}).json()
    assert {f["id"]: f["properties"]["observations"] for f in page["features"]} == \
        {k: v for k, v in counts.items() if v}
    s = next(s for s in want if counts[s["id"]])
    cov = http.get(f"/edr/collections/buoys/items/{s['id']}", params={
        "datetime": "1990-03-01T00:00:00Z/1990-04-15T12:00:00Z"}).json()
    keep = (s["time"] >= lo) & (s["time"] <= hi)
    np.testing.assert_array_equal(_values(cov, "sst"), s["sst"][keep])


def test_an_item_is_its_stations_observations_in_the_files_order(http, root: Path) -> None:
    from owslib.ogcapi.features import Features

    want = _buoys(root)
    listed = Features(str(http.base_url).rstrip("/") + "/edr").collection_items("buoys", limit=100)
    assert [f["id"] for f in listed["features"]] == [s["id"] for s in want]
    for s in (want[0], want[-1]):
        cov = http.get(f"/edr/collections/buoys/items/{s['id']}").json()
        assert cov["domain"]["domainType"] == "PointSeries"
        np.testing.assert_array_equal(_values(cov, "sst"), s["sst"])
        assert [t[:19] for t in cov["domain"]["axes"]["t"]["values"]] == \
            [str(t.astype("datetime64[s]")) for t in s["time"]]
        rows = _rows(http.get(f"/edr/collections/buoys/items/{s['id']}", params={"f": "CSV"}))
        np.testing.assert_array_equal([float(r["sst"]) if r["sst"] else np.nan for r in rows], s["sst"])
    missing = http.get("/edr/collections/buoys/items/NOPE")
    assert missing.status_code == 404 and "'NOPE' is not a station of buoys" in missing.json()["error"]["message"]
    grid_query = http.get("/edr/collections/buoys/position", params={"coords": "POINT(0 0)"})
    assert grid_query.status_code == 400 and "buoys is a station dataset" in grid_query.text


def test_an_item_over_the_limit_is_refused_with_its_size(http, root: Path, monkeypatch) -> None:
    from dstp import edr

    s = _buoys(root)[0]
    monkeypatch.setattr(edr.query, "MAX_VALUES", 3)
    answer = http.get(f"/edr/collections/buoys/items/{s['id']}")
    assert answer.status_code == 413
    assert answer.json()["error"]["message"].startswith(
        f"station {s['id']!r} would return {len(s['time']):,} values ({len(s['time']):,} observations × 1 parameters)")


def test_conformance_claims_only_what_is_answered(http) -> None:
    claims = http.get("/edr/conformance").json()["conformsTo"]
    # no "queries" class: it needs locations and instances, which are not offered
    assert not any(c.endswith("/conf/queries") for c in claims)
    assert "http://www.opengis.net/spec/ogcapi-edr-1/1.1/conf/collections" in claims
