"""OGC API - EDR: a collection advertises exactly the queries it answers, and no query parameter is ignored.

Query parameters: every route refuses one it does not read (400 naming it), and OWSLib's ``parameter_names``
(its name for EDR's ``parameter-name``) picks the parameters it names, each equal to xarray's on the files.

The property is over every dataset of the archive (the suite's catalog and the EDR test archives, plus station
tables without a ``timeseries_id``, a trajectory and Argo profiles, a rotated-pole grid and a grid whose X is
in km): each query a collection's ``data_queries`` lists answers 200 to a request built from the collection's own
metadata (its extent's centre and box, its first time, its first parameter), and each query it does not list
is refused; a dataset that answers none is not an EDR collection (EDR 1.1 /req/edr/rc-data-queries: a
``data_queries`` object SHALL list at least one query). A new kind of dataset in the archive is covered
without a new test.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Iterator

import httpx
import netCDF4
import numpy as np
import pytest
import xarray as xr

import builders
import oracle
from protocol_archives import SPECS as ARCHIVES
from protocol_archives import model_360_day, open_local
from http_fixtures import anonymous_http

from dstp.catalog.publish import publish

QUERIES = ("position", "radius", "area", "cube", "trajectory", "corridor", "items", "locations", "instances")


@pytest.fixture(scope="module")
def root(catalog_root: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    here = tmp_path_factory.mktemp("edr_truth")
    for name in ("ccm3", "ocean", "station", "axes"):  # the suite's catalog (its broken ones are never served)
        shutil.copytree(catalog_root / name, here / name)
    model_360_day(here / "model")
    publish(builders.model_grid(here / "std", calendar="standard", lon_west=True, years=(2000,), name="std"), "std")
    publish(builders.buoys(here / "buoys", stations=6, west=False), "buoys")
    # a timeSeries table without a variable whose cf_role is timeseries_id: no station can be named
    (path,) = builders.buoys(here / "anonymous", stations=4)
    with netCDF4.Dataset(path, "a") as nc:
        nc["station_name"].delncattr("cf_role")
    publish([path], "anonymous")
    (path,) = builders.buoys(here / "ships", stations=3)  # the same table called a trajectory
    with netCDF4.Dataset(path, "a") as nc:
        nc.featureType = "trajectory"
        nc["station_name"].cf_role = "trajectory_id"
    publish([path], "ships")
    (here / "argo").mkdir()
    publish([builders.argo_profiles(here / "argo" / "R6901234_prof.nc")], "argo")
    (here / "rotated").mkdir()
    publish([builders.rotated_pole(here / "rotated" / "tas.nc", "tas", lambda a, b: np.stack([280 + a, 270 + b]),
                                   rlat=np.linspace(-5, 5, 6), rlon=np.linspace(-8, 8, 7), times=[0.0, 1.0])],
            "rotated")
    return here


@pytest.fixture(scope="module")
def http(root: Path) -> Iterator[httpx.Client]:
    with anonymous_http(root) as client:
        yield client


def _request(collection: dict, query: str) -> dict[str, str]:
    """Return the parameters of a request of ``query`` built from the collection's own metadata."""
    extent = collection["extent"]
    params = {"parameter-name": next(iter(collection["parameter_names"]))}
    if "temporal" in extent:
        params["datetime"] = extent["temporal"]["interval"][0][0]
    if query in ("items", "locations", "instances"):
        return {}
    w, s, e, n = extent["spatial"]["bbox"][0]  # a collection with spatial queries says where it is
    x, y = (w + e) / 2, (s + n) / 2
    if query == "cube":
        params["bbox"] = f"{w},{s},{e},{n}"
    elif query == "area":
        params["coords"] = f"POLYGON(({w} {s}, {e} {s}, {e} {n}, {w} {n}, {w} {s}))"
    elif query in ("position", "radius"):
        params["coords"] = f"POINT({x} {y})"
    else:
        params["coords"] = f"LINESTRING({w} {s}, {x} {y}, {e} {n})"
    if query == "radius":
        params |= {"within": "1000", "within-units": "km"}
    if query == "corridor":
        params |= {"corridor-width": "1000", "width-units": "km"}
    return params


def _datasets(http: httpx.Client) -> list[str]:
    return sorted(d["id"] for d in http.get("/datasets.json").json())


def test_every_collection_answers_each_query_it_advertises_and_refuses_the_others(http) -> None:
    datasets = _datasets(http)
    listed = {c["id"]: c for c in http.get("/edr/collections").json()["collections"]}
    assert set(listed) <= set(datasets)
    assert {"ccm3", "model", "buoys"} <= set(listed)  # grids and a station dataset are collections
    failures = []
    for name in datasets:
        one = http.get(f"/edr/collections/{name}")
        if name not in listed:  # not an EDR collection: it answers nothing, and says so
            if one.status_code != 404:
                failures.append(f"{name}: not listed, but /edr/collections/{name} is {one.status_code}")
            for query in QUERIES:
                answer = http.get(f"/edr/collections/{name}/{query}", params={"coords": "POINT(0 0)"})
                if answer.status_code not in (400, 404):
                    failures.append(f"{name}: not listed, but {query} is {answer.status_code}")
            continue
        assert one.status_code == 200 and one.json() == listed[name]
        advertised = listed[name]["data_queries"]
        if not advertised:
            failures.append(f"{name}: listed with no data_queries")
        for query in QUERIES:
            if query not in advertised:
                answer = http.get(f"/edr/collections/{name}/{query}", params={"coords": "POINT(0 0)"})
                if answer.status_code not in (400, 404):
                    failures.append(f"{name}: {query} is not advertised but answers {answer.status_code}")
                continue
            if query not in ("items", "locations", "instances") and "spatial" not in listed[name]["extent"]:
                failures.append(f"{name}: advertises {query} with no spatial extent to ask it in")
                continue
            params = _request(listed[name], query)
            answer = http.get(f"/edr/collections/{name}/{query}", params=params)
            if answer.status_code != 200:
                failures.append(f"{name}: {query} {params} -> {answer.status_code} {answer.text[:300]}")
                continue
            body = answer.json()
            if query == "items":
                if not body["features"]:
                    failures.append(f"{name}: items lists no station")
                    continue
                item = http.get(f"/edr/collections/{name}/items/{body['features'][0]['id']}")
                if item.status_code != 200:
                    failures.append(f"{name}: its first item -> {item.status_code} {item.text[:300]}")
                continue
            ranges = [body] if body["type"] == "Coverage" else body["coverages"]
            if any(list(r["ranges"]) != [params["parameter-name"]] for r in ranges):
                failures.append(f"{name}: {query} does not hold exactly {params['parameter-name']}")
    for name in datasets:  # the STAC collection links the EDR collection exactly when there is one
        stac = http.get(f"/stac/collections/{name}")
        assert stac.status_code == 200, stac.text
        if ("edr" in stac.json()["assets"]) != (name in listed):
            failures.append(f"{name}: STAC's edr asset {'without' if name not in listed else 'missing for'} "
                            "the collection")
    assert not failures, "\n".join(failures)
    # why each is not a collection, in words a scientist can act on
    for name, message in (
            ("rotated", "rotated's X (rlon, degrees) and Y (rlat, degrees) are not longitude and latitude (a projected "
                        "or rotated grid): EDR position queries take CRS84 longitudes and latitudes; it is not an EDR "
                        "collection (its records are at /datasets/rotated)"),
            ("axes", "axes's X (xc, km) and Y (y, degrees_north) are not longitude and latitude"),
            ("anonymous", "anonymous is a timeSeries dataset without a station id (no variable whose cf_role is "
                          "timeseries_id): EDR items name their station; it is not an EDR collection"),
            ("ships", "ships is a trajectory dataset: items (stations) are offered for station (CF timeSeries) "
                      "datasets; it is not an EDR collection (its records are at /datasets/ships)")):
        assert http.get(f"/edr/collections/{name}").json()["error"]["message"].startswith(message)


def _values(cov: dict, name: str) -> np.ndarray:
    r = cov["ranges"][name]
    return np.array([np.nan if v is None else v for v in r["values"]], dtype="f8").reshape(r["shape"])


def test_owslib_asking_for_parameters_gets_exactly_those_equal_to_the_files(http, root: Path) -> None:
    """OWSLib 0.35's ``query_data(parameter_names=[…])`` sends ``parameter_names=``: the answer holds exactly the
    parameters named (before, every one of ccm3's five came back), each the file's values at the nearest cell."""
    from owslib.ogcapi.edr import EnvironmentalDataRetrieval

    client = EnvironmentalDataRetrieval(str(http.base_url).rstrip("/") + "/edr")
    ds = open_local(root, oracle.DATASETS["ccm3"])
    for names in (["humidity"], ["cloud", "temperature"]):
        cov = client.query_data("ccm3", "position", coords="POINT(-20 40)", parameter_names=names)
        assert list(cov["ranges"]) == names and list(cov["parameters"]) == names
        for name in names:
            want = ds[name].sel(lat=40.0, lon=340.0, method="nearest")
            expected = want.transpose(*[d for d in ("time", "lev") if d in want.dims]).values.astype("f8")
            np.testing.assert_array_equal(_values(cov, name).reshape(expected.shape), expected)
    cube = client.query_data("ccm3", "cube", bbox=[-30, 30, 10, 60], parameter_names=["precipitation"])
    assert list(cube["ranges"]) == ["precipitation"]
    lon = ((ds.lon + 180.0) % 360.0) - 180.0
    box = ds["precipitation"].where((lon >= -30) & (lon <= 10), drop=True).where((ds.lat >= 30) & (ds.lat <= 60),
                                                                                 drop=True)
    got = _values(cube, "precipitation")
    assert got.size == box.size and np.count_nonzero(~np.isnan(got)) == int(np.count_nonzero(~np.isnan(box.values)))
    np.testing.assert_array_equal(np.sort(got[~np.isnan(got)]), np.sort(box.values[~np.isnan(box.values)]
                                                                         .astype("f8")))


@pytest.mark.parametrize("path, params, message", [
    ("position", {"coords": "POINT(0 0)", "datetme": "1990-01-16"},
     "query parameter 'datetme' (did you mean datetime?) is not read by a position query, which takes coords, "
     "datetime, z, parameter-name, crs, f"),
    ("position", {"coords": "POINT(0 0)", "bbox": "0,0,1,1"},
     "query parameter 'bbox' is not read by a position query, which takes coords, datetime, z, parameter-name, "
     "crs, f"),
    ("radius", {"coords": "POINT(0 0)", "within": "500", "within_units": "mi"},
     "query parameter 'within_units' (did you mean within-units?) is not read by a radius query"),
    ("area", {"coords": "POLYGON((0 0, 10 0, 0 10, 0 0))", "parameter_name": "cloud"},
     "query parameter 'parameter_name' (did you mean parameter-name?) is not read by an area query"),
    ("cube", {"bbox": "0,0,10,10", "coords": "POINT(0 0)"}, "query parameter 'coords' is not read by a cube query"),
    ("trajectory", {"coords": "LINESTRING(0 0, 10 10)", "parameter-names": "cloud"},
     "query parameter 'parameter-names' (did you mean parameter-name?) is not read by a trajectory query"),
    ("corridor", {"coords": "LINESTRING(0 0, 10 10)", "corridor-width": "100", "width-units": "km",
                  "corridor_height": "100"},
     "query parameter 'corridor_height' (did you mean corridor-height?) is not read by a corridor query"),
    ("position", {"coords": "POINT(0 0)", "parameter-name": "cloud", "parameter_names": "humidity"},
     "parameter-name and parameter_names give 'cloud' and 'humidity': send one parameter-name (a list is a,b)"),
    ("position", {"coords": "POINT(0 0)", "crs": "EPSG:3857"},
     "crs 'EPSG:3857' is not offered: coordinates are longitude, latitude on WGS84; send crs=OGC:CRS84 or no crs"),
])
def test_a_query_parameter_a_route_does_not_read_is_refused_naming_it(http, path: str, params: dict,
                                                                       message: str) -> None:
    answer = http.get(f"/edr/collections/ccm3/{path}", params=params)
    assert answer.status_code == 400, answer.text
    assert answer.json()["error"]["message"].startswith(message)


def test_items_and_an_item_refuse_a_misspelt_parameter_and_read_parameter_names_only_on_an_item(http) -> None:
    listed = http.get("/edr/collections/buoys/items", params={"limt": "5"})
    assert listed.status_code == 400
    assert listed.json()["error"]["message"] == (
        "query parameter 'limt' (did you mean limit?) is not read by items, which takes bbox, datetime, limit, "
        "offset, f")
    station = http.get("/edr/collections/buoys/items", params={"limit": "1"}).json()["features"][0]["id"]
    typo = http.get(f"/edr/collections/buoys/items/{station}", params={"datetim": "1990-03-01"})
    assert typo.status_code == 400 and typo.json()["error"]["message"].startswith(
        "query parameter 'datetim' (did you mean datetime?) is not read by an item")
    assert http.get(f"/edr/collections/buoys/items/{station}", params={"parameter_names": "sst"}).status_code == 200
    for params, words in (({"parameter_names": "sst"}, "query parameter 'parameter_names' is not read by items"),
                          ({"f": "html"}, "f='html' is not offered for items: they are GeoJSON (f=GeoJSON)")):
        refused = http.get("/edr/collections/buoys/items", params=params)
        assert refused.status_code == 400 and refused.json()["error"]["message"].startswith(words)
    assert http.get("/edr/collections/buoys/items", params={"f": "GeoJSON"}).status_code == 200


def test_the_same_parameter_twice_is_refused_unless_it_says_the_same(http) -> None:
    twice = http.get("/edr/collections/ccm3/position", params=[("coords", "POINT(0 0)"), ("z", "500"), ("z", "850")])
    assert twice.status_code == 400
    assert twice.json()["error"]["message"] == "z twice gives '500' and '850': send one z (a list is a,b)"
    same = [("coords", "POINT(0 0)"), ("parameter-name", "cloud"), ("parameter_names", "cloud"), ("crs", "OGC:CRS84")]
    answer = http.get("/edr/collections/ccm3/position", params=same)
    assert answer.status_code == 200, answer.text
    assert list(answer.json()["ranges"]) == ["cloud"]


def test_the_api_description_lists_what_each_route_reads_and_nothing_else_is_read(http) -> None:
    """Each query parameter /openapi.json declares for the EDR routes is read by the routes it names, and refused
    (as not read) by the others: the description and the server agree, as Features Part 1 asks."""
    spec = http.get("/openapi.json").json()["paths"]
    routes = {"/edr/collections/{dataset_id}/{query_type}": ("ccm3", ["position", "radius", "area", "cube",
                                                                      "trajectory", "corridor"]),
              "/edr/collections/{dataset_id}/items": ("buoys", ["items"])}
    checked = 0
    for path, (dataset, kinds) in routes.items():
        declared = [p for p in spec[path]["get"]["parameters"] if p["in"] == "query"]
        assert declared
        for p in declared:
            for kind in kinds:
                url = f"/edr/collections/{dataset}/{kind}" if kind != "items" else f"/edr/collections/{dataset}/items"
                message = http.get(url, params={p["name"]: "1"}).text
                reads = kind in p["description"].partition("read by ")[2].split(";")[0].split(", ")
                assert ("is not read by" not in message) == reads, (p, kind, message)
                checked += 1
    assert checked == 89  # 14 names × 6 queries, 5 names × items
