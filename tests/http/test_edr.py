"""OGC API - EDR: position, area and cube answers equal xarray's nearest cell / box on the files.

The oracle opens each file with xarray on its own (concatenated along time)
and selects with ``sel(method="nearest")`` for a position and by coordinate
bounds for a box; the server's CoverageJSON and CSV must hold the same values.
Archives: ccm3 (noleap, 4-D, longitudes 0…354.375) and a 360_day model
(packed int16 with fill values, latitudes north to south).
"""

from __future__ import annotations

import csv
import io
import json
import shutil
from pathlib import Path
from typing import Iterator

import httpx
import numpy as np
import pyarrow as pa
import pytest
import xarray as xr
from hypothesis import HealthCheck, Phase, example, given, settings, strategies as st

import oracle
from protocol_archives import SPECS as ARCHIVES
from protocol_archives import model_360_day, open_local, restricted_copy
from dstp.auth import TokenStore
from dstp.server import DstpServer
from dstp.settings import Settings

SPECS = {"ccm3": oracle.DATASETS["ccm3"], "model": ARCHIVES["model"]}


@pytest.fixture(scope="module")
def root(catalog_root: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    here = tmp_path_factory.mktemp("edr")
    shutil.copytree(catalog_root / "ccm3", here / "ccm3")
    model_360_day(here / "model")
    restricted_copy(catalog_root / "ccm3", here / "secret", "ccm3", "secret")
    return here


@pytest.fixture(scope="module")
def served(root: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[httpx.Client, dict[str, str]]]:
    store = tmp_path_factory.mktemp("tokens") / "tokens.json"
    tokens = TokenStore(store)
    issued = {"alice": tokens.create("alice", ["polar"]).secret, "bob": tokens.create("bob").secret}
    with DstpServer(Settings(catalog_root=root, port=0, http_port=0, data_port=-1, udt_port=-1, token_store=store,
                             allow_anonymous="true")) as srv:
        assert srv.endpoints is not None
        with httpx.Client(base_url=f"http://{srv.endpoints.http}", timeout=60) as http:
            yield http, issued


def local(root: Path, dataset: str) -> xr.Dataset:
    return open_local(root, SPECS[dataset])


def _lon(ds: xr.Dataset, lon: float) -> float:
    return lon % 360.0 if float(ds.lon.max()) > 180.0 else lon


def _values(cov: dict, name: str) -> np.ndarray:
    r = cov["ranges"][name]
    return np.array([np.nan if v is None else v for v in r["values"]], dtype="f8").reshape(r["shape"])


@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(lon=st.floats(-180, 180), lat=st.floats(-60, 60), dataset=st.sampled_from(["ccm3", "model"]))
def test_position_is_the_nearest_cell_as_xarray_selects_it(served, root: Path, lon: float, lat: float,
                                                           dataset: str) -> None:
    http, _ = served
    name = "temperature" if dataset == "ccm3" else "tas"
    ds = local(root, dataset)
    want = ds[name].sel(lat=lat, lon=_lon(ds, lon), method="nearest")
    answer = http.get(f"/edr/collections/{dataset}/position",
                      params={"coords": f"POINT({lon!r} {lat!r})", "parameter-name": name})
    assert answer.status_code == 200, answer.text
    cov = answer.json()
    assert cov["domain"]["domainType"] == "PointSeries"
    assert cov["domain"]["axes"]["y"]["values"] == [pytest.approx(float(want.lat))]
    got = _values(cov, name)
    expected = want.transpose(*[d for d in ("time", "lev") if d in want.dims]).values
    np.testing.assert_array_equal(got.reshape(expected.shape), expected.astype("f8"))


@pytest.mark.parametrize("dataset, box, z", [
    ("ccm3", (-30.0, 20.0, 15.0, 50.0), "500/1000"),   # across 0° on 0…360 storage
    ("model", (10.0, -25.0, 80.0, 35.0), None),         # latitudes stored north to south
])
def test_cube_holds_the_cells_in_the_box_as_the_files_do(served, root: Path, dataset: str,
                                                         box: tuple[float, ...], z: str | None) -> None:
    http, _ = served
    name = "temperature" if dataset == "ccm3" else "tas"
    ds = local(root, dataset)
    w, s, e, n = box
    lon = ((ds.lon + 180.0) % 360.0) - 180.0
    sel = ds[name].where((lon >= w) & (lon <= e), drop=True).where((ds.lat >= s) & (ds.lat <= n), drop=True)
    params = {"bbox": ",".join(map(str, box)), "parameter-name": name, "f": "CSV"}
    if z:
        params["z"] = z
        lo, hi = map(float, z.split("/"))
        sel = sel.where((ds.lev >= lo) & (ds.lev <= hi), drop=True)
    answer = http.get(f"/edr/collections/{dataset}/cube", params=params)
    assert answer.status_code == 200, answer.text
    rows = list(csv.DictReader(io.StringIO(answer.text)))
    want = sel.to_dataframe().reset_index()
    assert len(rows) == len(want)
    got = sorted((float(r["lat"]), float(r["lon"]), r["time"][:19], float(r[name]) if r[name] else np.nan)
                 for r in rows)
    expected = sorted((float(r.lat), float(r.lon), r.time.isoformat()[:19], float(getattr(r, name)))
                      for r in want.itertuples())
    assert [g[:3] for g in got] == [x[:3] for x in expected]
    np.testing.assert_array_equal([g[3] for g in got], [x[3] for x in expected])
    cube = http.get(f"/edr/collections/{dataset}/cube", params={**params, "f": "CoverageJSON"}).json()
    assert np.count_nonzero(~np.isnan(_values(cube, name))) == int(np.count_nonzero(~np.isnan(sel.values)))


def test_cube_coveragejson_holds_each_value_of_the_files_and_null_where_missing(served, root: Path) -> None:
    """The whole model grid as CoverageJSON: strict JSON (no NaN or Infinity literals), every value the float64 of
    xarray's on the files, ``null`` exactly where a packed value is the fill value (about 5 % of cells)."""
    http, _ = served
    ds = local(root, "model")
    answer = http.get("/edr/collections/model/cube", params={"bbox": "-180,-90,180,90", "parameter-name": "tas"})
    assert answer.status_code == 200, answer.text

    def not_json(literal: str) -> None:
        raise AssertionError(f"{literal} is not JSON")

    cov = json.loads(answer.text, parse_constant=not_json)
    rng = cov["ranges"]["tas"]
    assert rng["axisNames"] == ["t", "y", "x"]
    axes = cov["domain"]["axes"]
    lon180 = ((ds.lon.values.astype("f8") + 180.0) % 360.0) - 180.0
    xs = [axes["x"]["values"].index(float(v)) for v in lon180]
    ys = [axes["y"]["values"].index(float(v)) for v in ds.lat.values.astype("f8")]
    assert len(axes["t"]["values"]) == ds.sizes["time"]
    got = np.array([np.nan if v is None else v for v in rng["values"]], dtype="f8").reshape(rng["shape"])
    want = ds["tas"].transpose("time", "lat", "lon").values.astype("f8")
    assert 0 < np.isnan(want).sum() < want.size
    np.testing.assert_array_equal(got[:, ys][:, :, xs], want)
    assert [v is None for v in rng["values"]].count(True) == int(np.isnan(want).sum())


def test_area_keeps_the_cells_inside_the_polygon(served, root: Path) -> None:
    http, _ = served
    ds = local(root, "model")
    from shapely import Polygon, contains_xy, intersects_xy

    poly = Polygon([(0, -20), (60, -20), (0, 40)])
    answer = http.get("/edr/collections/model/area", params={"coords": poly.wkt, "parameter-name": "tas", "f": "CSV"})
    assert answer.status_code == 200, answer.text
    rows = list(csv.DictReader(io.StringIO(answer.text)))
    lon2, lat2 = np.meshgrid(((ds.lon.values + 180) % 360) - 180, ds.lat.values)
    inside = contains_xy(poly, lon2, lat2) | intersects_xy(poly, lon2, lat2)
    assert len(rows) == int(inside.sum()) * ds.sizes["time"]
    assert {(float(r["lat"]), ((float(r["lon"]) + 180) % 360) - 180) for r in rows} == \
        set(zip(lat2[inside].tolist(), lon2[inside].tolist()))


def test_collections_describe_parameters_and_queries_and_hide_what_the_caller_cannot_read(served) -> None:
    http, tokens = served
    landing = http.get("/edr").json()
    assert any(link["rel"] == "conformance" for link in landing["links"])
    assert "http://www.opengis.net/spec/ogcapi-edr-1/1.1/conf/core" in http.get("/edr/conformance").json()["conformsTo"]
    ids = {c["id"] for c in http.get("/edr/collections").json()["collections"]}
    assert ids == {"ccm3", "model"}
    alice = {"Authorization": f"Bearer {tokens['alice']}"}
    assert "secret" in {c["id"] for c in http.get("/edr/collections", headers=alice).json()["collections"]}
    assert http.get("/edr/collections/secret/position", params={"coords": "POINT(0 0)"}).status_code == 404
    model = http.get("/edr/collections/model").json()
    assert set(model["data_queries"]) == {"position", "radius", "area", "cube", "trajectory", "corridor"}
    assert model["data_queries"]["corridor"]["link"]["variables"]["width_units"] == ["km", "m", "mi", "nmi"]
    assert model["parameter_names"]["tas"]["unit"]["symbol"] == "K"


@pytest.mark.parametrize("path, params, status, words", [
    ("position", {"coords": "POINT(0)"}, 400, "well-known text"),
    ("position", {"coords": "POLYGON((0 0, 1 0, 1 1, 0 0))"}, 400, "takes a POINT"),
    ("cube", {"bbox": "10,50,20"}, 400, "four numbers"),
    ("cube", {"bbox": "-180,-90,180,90", "parameter-name": "temperature,humidity,cloud,pressure,precipitation"},
     200, ""),
    ("position", {"coords": "POINT(0 0)", "parameter-name": "nosuch"}, 400, "'nosuch' is not a parameter"),
    ("position", {"coords": "POINT(0 0)", "datetime": "soon"}, 400, "not an ISO 8601 instant"),
    ("corridor", {"coords": "LINESTRING(0 0, 1 1)"}, 400, "needs corridor-width="),
    ("locations", {"coords": "POINT(0 0)"}, 400, "'locations' is not offered"),
    ("radius", {"coords": "POINT(0 0)"}, 400, "needs within="),
    ("trajectory", {"coords": "POINT(0 0)"}, 400, "takes a LINESTRING"),
    ("trajectory", {"coords": "LINESTRING M (0 0 1, 10 10 2)", "datetime": "1990-01-01"}, 400,
     "'LINESTRING M (0 0 1, 10 10 2)' gives each vertex its time"),
    ("trajectory", {"coords": "LINESTRING ZM (0 0 1 2, 1 1 2 3)", "z": "500"}, 400, "EDR forbids both; drop z="),
    ("position", {"coords": "MULTIPOINT EMPTY"}, 400, "takes a POINT"),
    ("cube", {"bbox": "0,40,10,50", "z": "R2/x/1"}, 400, "Rn/first/step"),
    ("position", {"coords": "POINT(0 0)", "f": "GRIB"}, 400, "f='GRIB' is not offered"),
])
def test_a_bad_query_names_what_to_fix(served, path: str, params: dict, status: int, words: str) -> None:
    http, _ = served
    answer = http.get(f"/edr/collections/ccm3/{path}", params=params)
    assert answer.status_code == status, answer.text
    assert words in answer.text


def test_an_answer_over_the_limit_is_refused_with_its_size_before_anything_is_read(served, root: Path,
                                                                                  monkeypatch) -> None:
    http, _ = served
    size = local(root, "ccm3")["temperature"].size
    from dstp import edr

    monkeypatch.setattr(edr.query, "MAX_VALUES", 1000)
    answer = http.get("/edr/collections/ccm3/cube", params={"bbox": "-180,-90,180,90", "parameter-name": "temperature"})
    assert answer.status_code == 413
    assert f"would return {size:,} values" in answer.text  # the whole variable, counted before it is read


@settings(max_examples=10, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(lon=st.floats(-180, 180), lat=st.floats(-50, 50), km=st.floats(50, 3000))
def test_radius_holds_the_cells_within_the_distance(served, root: Path, lon: float, lat: float, km: float) -> None:
    http, _ = served
    ds = local(root, "model")
    # the oracle's own haversine (not dstp's): cell centres within km of the point
    lon2, lat2 = np.meshgrid(((ds.lon.values + 180) % 360) - 180, ds.lat.values)
    p0, p = np.radians(lat), np.radians(lat2)
    h = np.sin((p - p0) / 2) ** 2 + np.cos(p0) * np.cos(p) * np.sin(np.radians(lon2 - lon) / 2) ** 2
    within = 2 * 6371.0088 * np.arcsin(np.sqrt(h)) <= km
    answer = http.get("/edr/collections/model/radius", params={
        "coords": f"POINT({lon!r} {lat!r})", "within": repr(km), "within-units": "km", "parameter-name": "tas",
        "f": "CSV"})
    assert answer.status_code == 200, answer.text
    rows = list(csv.DictReader(io.StringIO(answer.text)))
    assert {(float(r["lat"]), ((float(r["lon"]) + 180) % 360) - 180) for r in rows} == \
        set(zip(lat2[within].tolist(), lon2[within].tolist()))
    assert len(rows) == int(within.sum()) * ds.sizes["time"]


def test_trajectory_is_each_vertex_nearest_cell_in_order(served, root: Path) -> None:
    http, _ = served
    ds = local(root, "model")
    path = [(-170.0, 50.0), (-20.0, 10.0), (5.0, -5.0), (100.0, -40.0)]
    line = "LINESTRING(" + ", ".join(f"{x} {y}" for x, y in path) + ")"
    answer = http.get("/edr/collections/model/trajectory", params={
        "coords": line, "parameter-name": "tas", "datetime": "2000-02-01/2000-02-03"})
    assert answer.status_code == 200, answer.text
    cov = answer.json()
    assert cov["domain"]["domainType"] == "Trajectory"
    import cftime

    lo, hi = (cftime.Datetime360Day(2000, 2, 1), cftime.Datetime360Day(2000, 2, 3))  # the instants, not whole days
    times = ds.time[(ds.time >= lo) & (ds.time <= hi)]
    want = np.concatenate([ds["tas"].sel(lon=lon % 360, lat=lat, method="nearest").sel(time=times).values
                           for lon, lat in path])
    np.testing.assert_array_equal(_values(cov, "tas"), want.astype("f8"))
    assert len(cov["domain"]["axes"]["composite"]["values"]) == len(path) * times.size


@pytest.mark.parametrize("dataset, box, z", [
    ("ccm3", (-30.0, 20.0, 15.0, 50.0), "500/1000"),   # across 0° on 0…360 storage
    ("model", (10.0, -25.0, 80.0, 35.0), None),         # 360_day, latitudes north to south, packed int16
])
def test_a_netcdf_cube_opens_in_xarray_equal_to_the_files(served, root: Path, tmp_path: Path, dataset: str,
                                                           box: tuple[float, ...], z: str | None) -> None:
    http, _ = served
    name = "temperature" if dataset == "ccm3" else "tas"
    ds = local(root, dataset)
    w, s, e, n = box
    lon = ((ds.lon + 180.0) % 360.0) - 180.0
    want = ds[name].where((lon >= w) & (lon <= e), drop=True).where((ds.lat >= s) & (ds.lat <= n), drop=True)
    params = {"bbox": ",".join(map(str, box)), "parameter-name": name, "f": "netCDF"}
    if z:
        params["z"] = z
        lo, hi = map(float, z.split("/"))
        want = want.where((ds.lev >= lo) & (ds.lev <= hi), drop=True)
    answer = http.get(f"/edr/collections/{dataset}/cube", params=params)
    assert answer.status_code == 200, answer.text
    assert answer.headers["content-type"] == "application/x-netcdf"
    (tmp_path / "cube.nc").write_bytes(answer.content)
    with xr.open_dataset(tmp_path / "cube.nc", decode_times=xr.coders.CFDatetimeCoder(use_cftime=True)) as got:
        got_v = got[name].load()
    assert got.attrs["Conventions"].startswith("CF-")
    assert got_v.dims == want.dims
    # the same cells in the files' order (north to south stays north to south), times on the files' calendar
    for d in want.dims:
        np.testing.assert_array_equal(got_v[d].values, want[d].values)
    np.testing.assert_array_equal(got_v.values, want.values.astype("f8"))
    assert got_v.attrs.get("units") == want.attrs.get("units")


def test_area_as_geojson_and_radius_as_parquet_hold_the_csv_records(served, root: Path) -> None:
    import pyarrow.parquet as pq
    from shapely import Polygon, contains_xy, intersects_xy

    http, _ = served
    ds = local(root, "model")
    lon2, lat2 = np.meshgrid(((ds.lon.values + 180) % 360) - 180, ds.lat.values)
    poly = Polygon([(0, -20), (60, -20), (0, 40)])
    inside = contains_xy(poly, lon2, lat2) | intersects_xy(poly, lon2, lat2)
    gj = http.get("/edr/collections/model/area", params={"coords": poly.wkt, "parameter-name": "tas",
                                                        "f": "GeoJSON"})
    assert gj.status_code == 200 and gj.headers["content-type"] == "application/geo+json", gj.text
    features = gj.json()["features"]
    assert len(features) == int(inside.sum()) * ds.sizes["time"]
    assert {tuple(f["geometry"]["coordinates"][::-1]) for f in features} == \
        set(zip(lat2[inside].tolist(), lon2[inside].tolist()))
    # each feature's value is the file's at that cell and time (the oracle: xarray, each file on its own)
    tas = ds["tas"]
    times = {t.isoformat()[:19]: i for i, t in enumerate(ds.time.values)}
    lat_i = {v: i for i, v in enumerate(ds.lat.values.tolist())}
    lon_i = {((v + 180) % 360) - 180: i for i, v in enumerate(ds.lon.values.tolist())}
    got = np.array([np.nan if f["properties"]["tas"] is None else f["properties"]["tas"] for f in features])
    want = np.array([tas.values[times[f["properties"]["time"][:19]], lat_i[f["geometry"]["coordinates"][1]],
                                lon_i[f["geometry"]["coordinates"][0]]] for f in features], "f8")
    np.testing.assert_array_equal(got, want)
    params = {"coords": "POINT(20 10)", "within": "2000", "within-units": "km", "parameter-name": "tas"}
    table = pq.read_table(io.BytesIO(http.get("/edr/collections/model/radius",
                                              params={**params, "f": "Parquet"}).content))
    rows = list(csv.DictReader(io.StringIO(http.get("/edr/collections/model/radius",
                                                    params={**params, "f": "CSV"}).text)))
    assert table.num_rows == len(rows) > 0
    np.testing.assert_array_equal(table.column("tas").to_numpy(zero_copy_only=False).astype("f8"),
                                  [float(r["tas"]) if r["tas"] else np.nan for r in rows])


@settings(max_examples=10, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture],
          phases=[Phase.explicit, Phase.generate])  # shrinking a list of floats against a server takes minutes
@example(pts=[(34.27, 18.09), (152.7, -0.99999), (49.94, 0.25), (-179.0, -30.96)], dataset="model")  # cells read
# all east of 0 and west of 180 on 0…360 storage: -179° is still 181°, as the whole axis says
@given(pts=st.lists(st.tuples(st.floats(-180, 180), st.floats(-60, 60)), min_size=2, max_size=4),
       dataset=st.sampled_from(["ccm3", "model"]))
def test_multipoint_answers_each_point_with_its_nearest_cell_in_order(served, root: Path, pts: list,
                                                                      dataset: str) -> None:
    http, _ = served
    name = "temperature" if dataset == "ccm3" else "tas"
    ds = local(root, dataset)
    coords = "MULTIPOINT(" + ", ".join(f"({lon!r} {lat!r})" for lon, lat in pts) + ")"
    answer = http.get(f"/edr/collections/{dataset}/position", params={"coords": coords, "parameter-name": name})
    assert answer.status_code == 200, answer.text
    coverages = answer.json()["coverages"]
    assert len(coverages) == len(pts)
    rows = list(csv.DictReader(io.StringIO(http.get(f"/edr/collections/{dataset}/position", params={
        "coords": coords, "parameter-name": name, "f": "CSV"}).text)))
    at = 0
    for (lon, lat), cov in zip(pts, coverages):
        want = ds[name].sel(lat=lat, lon=_lon(ds, lon), method="nearest")
        expected = want.transpose(*[d for d in ("time", "lev") if d in want.dims]).values.astype("f8")
        assert cov["domain"]["axes"]["y"]["values"] == [pytest.approx(float(want.lat))]
        np.testing.assert_array_equal(_values(cov, name).reshape(expected.shape), expected)
        mine = rows[at:at + expected.size]  # CSV: point by point, in the order asked
        at += expected.size
        assert {float(r["lat"]) for r in mine} == {float(want.lat)}
        np.testing.assert_array_equal(np.sort([float(r[name]) if r[name] else np.nan for r in mine]),
                                      np.sort(expected.reshape(-1)))
    assert at == len(rows)


def test_z_as_rn_first_step_is_the_list_of_its_levels(served, root: Path) -> None:
    http, _ = served
    ds = local(root, "ccm3")
    levels = ds.lev.values
    first, step = float(levels[0]), float(levels[2] - levels[0])
    params = {"bbox": "0,40,10,50", "parameter-name": "temperature", "f": "CSV"}
    rn = http.get("/edr/collections/ccm3/cube", params={**params, "z": f"R3/{first!r}/{step!r}"})
    assert rn.status_code == 200, rn.text
    got = {float(r["lev"]) for r in csv.DictReader(io.StringIO(rn.text))}
    assert got == {float(v) for v in ds.lev.sel(lev=[first + i * step for i in range(3)], method="nearest").values}
    listed = http.get("/edr/collections/ccm3/cube",
                      params={**params, "z": ",".join(repr(first + i * step) for i in range(3))})
    assert rn.text == listed.text
    bad = http.get("/edr/collections/ccm3/cube", params={**params, "z": "R0/1/1"})
    assert bad.status_code == 400 and "R0/1/1" in bad.text


def test_owslib_lists_collections_and_its_position_query_equals_the_files(served, root: Path) -> None:
    from owslib.ogcapi.edr import EnvironmentalDataRetrieval

    http, _ = served
    client = EnvironmentalDataRetrieval(str(http.base_url).rstrip("/") + "/edr")
    assert {"ccm3", "model"} <= {c["id"] for c in client.collections()["collections"]}
    cov = client.query_data("model", "position", coords="POINT(-15 -31)", parameter_names=["tas"])
    ds = local(root, "model")
    want = ds["tas"].sel(lat=-31.0, lon=345.0, method="nearest").values.astype("f8")
    np.testing.assert_array_equal(_values(cov, "tas").reshape(want.shape), want)


@settings(max_examples=300, deadline=None)
@given(values=st.lists(st.sampled_from([0.0, -0.0, 1.5, float("nan"), -3.0, 1e300]), min_size=1, max_size=40),
       chunks=st.integers(1, 3))
def test_axis_places_follow_the_order_values_first_appear(values: list[float], chunks: int) -> None:
    """A cube's axis lists each value once, in the order of the records (the files' order); 0.0 and -0.0 are one
    value, and every NaN one (as ``np.unique`` has them); each record's place is its value's index there."""
    from dstp.edr.answers import _axis_places

    def same(a: float, b: float) -> bool:
        return a == b or (a != a and b != b)

    axis: list[int] = []  # the record where each value first appears
    want = []
    for i, v in enumerate(values):
        at = next((k for k, j in enumerate(axis) if same(values[j], v)), None)
        if at is None:
            axis.append(i)
            at = len(axis) - 1
        want.append(at)
    column = pa.chunked_array([pa.array(p, pa.float64()) for p in np.array_split(np.array(values), chunks)])
    place, ordered = _axis_places(column)
    assert place.tolist() == want
    expected = np.array(values)[axis]
    np.testing.assert_array_equal(ordered, expected)
    assert np.signbit(ordered).tolist() == np.signbit(expected).tolist()  # -0.0 stays -0.0 where it came first
