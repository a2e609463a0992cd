"""Station and mesh maps: dots at their places in their values' colours, and a click that answers the place.

Oracles: xarray on each file (a station's latest observation, a node's value at the time asked and its
series), pyproj for the Web Mercator position of a place, matplotlib for colours.
"""

from __future__ import annotations

import numpy as np
import pyproj
import pytest
import xarray as xr

from map_archives import STATIONS
from maps_fixtures import client, maps_server, oracle_colour, rgba  # noqa: F401

pytestmark = pytest.mark.filterwarnings("ignore::xarray.SerializationWarning")


def _stations(root) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """Return each station's observation times and values, from the contiguous ragged array."""
    with xr.open_dataset(root / "stations" / "stations.nc") as ds:
        names = [n.decode().strip() if isinstance(n, bytes) else str(n).strip() for n in ds["station_name"].values]
        first = np.concatenate([[0], np.cumsum(ds["row_size"].values)])
        return {name: (ds["time"].values[first[k]:first[k + 1]], ds["temp"].values[first[k]:first[k + 1]])
                for k, name in enumerate(names)}


def _mercator_pixel(lon: float, lat: float, z: int, x: int, y: int) -> tuple[int, int]:
    to_mercator = pyproj.Transformer.from_crs("EPSG:4326", "EPSG:3857", always_xy=True)
    edge = to_mercator.transform(180.0, 0.0)[0]
    mx, my = to_mercator.transform(lon, lat)
    span = 2 * edge / 2**z
    return int((mx + edge - x * span) / span * 256), int((edge - my - y * span) / span * 256)


def test_each_station_is_a_dot_in_the_colour_of_its_latest_observation(maps_server) -> None:
    srv, _ = maps_server
    observed = _stations(srv.settings.catalog_root)
    with client(srv) as http:
        answer = http.get("/tiles/stations/temp/0/0/0.png", params={"vmin": -40, "vmax": 30})
    assert answer.status_code == 200, answer.text
    image = rgba(answer.content)
    for name, (lat, lon) in STATIONS.items():
        times, values = observed[name]
        latest = float(values[np.argmax(times)])
        col, row = _mercator_pixel(lon, lat, 0, 0, 0)
        assert tuple(image[row, col]) == tuple(oracle_colour(np.array([latest]), "viridis", -40, 30)[0]), name
    assert image[128, 200][3] == 0  # the Indian Ocean: no station
    assert 0 < int((image[..., 3] > 0).sum()) < 3 * 130  # three discs of radius 5 with their outlines


def test_a_click_on_a_station_answers_its_observations_and_elsewhere_says_to_click_a_dot(maps_server) -> None:
    srv, _ = maps_server
    times, values = _stations(srv.settings.catalog_root)["OSLO"]
    lat, lon = STATIONS["OSLO"]
    with client(srv) as http:
        got = http.get("/datasets/stations/series.json", params={"variable": "temp", "lat": lat + 0.3,
                                                                 "lon": lon - 0.3, "within": 1})
        far = http.get("/datasets/stations/series.json", params={"variable": "temp", "lat": -12, "lon": -74,
                                                                 "within": 1})
    assert got.status_code == 200, got.text
    body = got.json()
    want = sorted((str(t).replace("T", " ")[:19], float(v)) for t, v in zip(times, values))
    assert [(t.replace("T", " ")[:19], v) for t, v in zip(body["time"], body["values"])] == want
    assert body["cell"] == {"lat": float(np.float32(lat)), "lon": float(np.float32(lon))}
    assert far.status_code == 400
    assert far.json()["error"]["message"] == \
        "stations.temp has no station within 1° of (-12°N, -74°E): click on a dot"


def test_wms_feature_info_on_a_station_map_answers_the_dot_under_the_pixel(maps_server) -> None:
    srv, _ = maps_server
    observed = _stations(srv.settings.catalog_root)
    lat, lon = STATIONS["LIMA"]
    times, values = observed["LIMA"]
    base = {"SERVICE": "WMS", "VERSION": "1.3.0", "REQUEST": "GetFeatureInfo", "QUERY_LAYERS": "stations/temp",
            "LAYERS": "stations/temp", "CRS": "CRS:84", "BBOX": "-180,-90,180,90", "WIDTH": 360, "HEIGHT": 180,
            "INFO_FORMAT": "application/json", "STYLES": "", "FORMAT": "image/png"}
    with client(srv) as http:
        on = http.get("/wms", params=base | {"I": int(lon + 180), "J": int(90 - lat)}).json()
        off = http.get("/wms", params=base | {"I": int(lon + 180) + 20, "J": int(90 - lat)}).json()
    assert on["value"] == float(values[np.argmax(times)])
    assert off["value"] is None and off["cell"] is None


def _mesh(root) -> tuple[np.ndarray, np.ndarray, np.ndarray, list[str]]:
    with xr.open_dataset(root / "mesh" / "grid.nc") as grid:
        lon, lat = grid["Mesh2_node_x"].values, grid["Mesh2_node_y"].values
    with xr.open_dataset(root / "mesh" / "v1.nc") as data:
        values = data["v1"].values.astype(np.float64)
        times = [t.isoformat() for t in data.indexes["time"]]
    return lon, lat, values, times


def test_a_mesh_is_drawn_as_its_nodes_at_the_time_asked(maps_server) -> None:
    srv, _ = maps_server
    lon, lat, values, times = _mesh(srv.settings.catalog_root)
    vmin, vmax = float(values.min()), float(values.max())
    params = {"SERVICE": "WMS", "VERSION": "1.3.0", "REQUEST": "GetMap", "LAYERS": "mesh/v1", "STYLES": "",
              "CRS": "CRS:84", "BBOX": "-1,-1,21,21", "WIDTH": 440, "HEIGHT": 440, "FORMAT": "image/png",
              "TIME": times[1], "COLORSCALERANGE": f"{vmin},{vmax}"}
    with client(srv) as http:
        answer = http.get("/wms", params=params)
    assert answer.status_code == 200, answer.text
    image = rgba(answer.content)
    apart = [k for k in range(len(lon)) if min(np.hypot(lon[k] - lon[m], lat[k] - lat[m])
                                               for m in range(len(lon)) if m != k) > 0.6]
    assert len(apart) >= 3
    for k in apart:  # 20 px a degree: a node more than 0.6° from the others has its own dot
        col, row = int((lon[k] + 1) * 20), int((21 - lat[k]) * 20)
        assert tuple(image[row, col]) == tuple(oracle_colour(values[1, k:k + 1], "viridis", vmin, vmax)[0]), k
    assert image[5, 435][3] == 0


def test_a_click_on_a_mesh_node_answers_its_series(maps_server) -> None:
    srv, _ = maps_server
    lon, lat, values, times = _mesh(srv.settings.catalog_root)
    k = 2
    with client(srv) as http:
        got = http.get("/datasets/mesh/series.json", params={"variable": "v1", "lat": lat[k] + 0.05,
                                                             "lon": lon[k] - 0.05, "within": 0.1})
    if min(np.hypot(lon[k] - lon[m], lat[k] - lat[m]) for m in range(len(lon)) if m != k) < 0.3:
        pytest.fail("the generated mesh has a node within 0.3° of node 2: pick another")
    assert got.status_code == 200, got.text
    body = got.json()
    assert body["cell"] == {"lat": float(lat[k]), "lon": float(lon[k])}
    assert [t.replace("T", " ")[:19] for t in body["time"]] == [t.replace("T", " ")[:19] for t in times]
    assert body["values"] == [float(v) for v in values[:, k]]
