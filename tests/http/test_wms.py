"""WMS 1.3.0 read by OWSLib: capabilities list the layers and the dataset's own times; GetMap's pixels at
cell centres have the colour of the value xarray reads there; GetFeatureInfo gives that value; errors are
ServiceExceptionReports; access holds."""

from __future__ import annotations

import xml.etree.ElementTree as ET

import numpy as np
import pytest
import xarray as xr
from owslib.util import ServiceException
from owslib.wms import WebMapService

from maps_fixtures import client, maps_server, oracle_colour, rgba  # noqa: F401

pytestmark = pytest.mark.filterwarnings("ignore::xarray.SerializationWarning")
OGC = "{http://www.opengis.net/ogc}"


def _url(srv) -> str:  # type: ignore[no-untyped-def]
    return f"http://{srv.endpoints.http}"


def _ccm3(root, t: int, k: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, str, float]:  # type: ignore[no-untyped-def]
    with xr.open_dataset(root / "ccm3" / "ccm3_1990-01.nc", decode_times=False) as ds:
        field = ds["T"].isel(time=t, lev=k).values.astype(np.float64)
        time = xr.decode_cf(ds[["time"]]).time.values[t].isoformat()
        return field, ds.lat.values, ds.lon.values, time, float(ds.lev.values[k])


def test_capabilities_list_the_readable_layers_with_their_own_times(maps_server, catalog_root) -> None:
    srv, tokens = maps_server
    anonymous = WebMapService(_url(srv) + "/wms", version="1.3.0")
    assert {"ccm3/temperature", "ccm3/pressure", "rot/tas"} <= set(anonymous.contents)
    assert not any(name.startswith("ocean/") for name in anonymous.contents)
    alice = WebMapService(_url(srv) + "/wms", version="1.3.0", headers={"Authorization": f"Bearer {tokens['alice']}"})
    assert "ocean/salinity" in alice.contents
    times = []
    for path in sorted((catalog_root / "ccm3").glob("*.nc")):
        with xr.open_dataset(path) as ds:  # each file decoded on its own
            times += [t.isoformat().replace(" ", "T") + "Z" for t in ds.time.values]
    layer = anonymous.contents["ccm3/temperature"]
    assert layer.timepositions == sorted(times)
    assert {"viridis", "plasma"} <= set(layer.styles)
    assert {"CRS:84", "EPSG:4326", "EPSG:3857"} <= set(layer.crsOptions)
    one = WebMapService(_url(srv) + "/erddap/wms/ccm3/request", version="1.3.0")
    assert set(one.contents) == {n for n in anonymous.contents if n.startswith("ccm3/")}


def test_getmap_pixels_at_cell_centres_have_the_colour_of_the_oracle_value(maps_server, catalog_root) -> None:
    srv, _ = maps_server
    field, lats, lons, time, level = _ccm3(catalog_root, 1, 2)
    wms = WebMapService(_url(srv) + "/wms", version="1.3.0")
    # OWSLib takes the bbox lon-first and sends EPSG:4326's lat-first order itself
    answer = wms.getmap(layers=["ccm3/temperature"], styles=["plasma"], srs="EPSG:4326",
                        bbox=(-180, -90, 180, 90), size=(720, 360), format="image/png", time=time + "Z",
                        elevation=str(level))
    image = rgba(answer.read())
    assert image.shape == (360, 720, 4)
    vmin, vmax = float(np.nanmin(field)), float(np.nanmax(field))
    checked = 0
    for i in range(0, len(lats), 3):
        for j in range(0, len(lons), 5):
            lon = (lons[j] + 180) % 360 - 180
            px, py = int((lon + 180) / 0.5), int((90 - lats[i]) / 0.5)
            assert image[py, px].tolist() == oracle_colour(field[i, j], "plasma", vmin, vmax).tolist(), (i, j)
            checked += 1
    assert checked > 100
    # the same map asked in CRS:84 (lon first) by hand is the same image
    with client(srv) as http:
        same = http.get("/wms", params={"SERVICE": "WMS", "VERSION": "1.3.0", "REQUEST": "GetMap",
                                        "LAYERS": "ccm3/temperature", "STYLES": "plasma", "CRS": "CRS:84",
                                        "BBOX": "-180,-90,180,90", "WIDTH": "720", "HEIGHT": "360",
                                        "FORMAT": "image/png", "TIME": time, "ELEVATION": str(level)})
    assert (rgba(same.content) == image).all()


def test_getmap_in_web_mercator_is_the_xyz_tile(maps_server) -> None:
    srv, _ = maps_server
    half = 20037508.342789244
    with client(srv) as http:
        tile = http.get("/tiles/ccm3/temperature/1/0/0.png")
        wms = http.get("/erddap/wms/ccm3/request", params={
            "SERVICE": "WMS", "VERSION": "1.3.0", "REQUEST": "GetMap", "LAYERS": "ccm3:temperature", "STYLES": "",
            "CRS": "EPSG:3857", "BBOX": f"{-half},0,0,{half}", "WIDTH": "256", "HEIGHT": "256", "FORMAT": "image/png"})
    assert wms.status_code == 200, wms.text
    assert (rgba(wms.content) == rgba(tile.content)).all()


@pytest.mark.parametrize("info_format", ["application/json", "text/plain"])
def test_getfeatureinfo_gives_the_value_of_the_cell(maps_server, catalog_root, info_format) -> None:
    srv, _ = maps_server
    field, lats, lons, time, level = _ccm3(catalog_root, 1, 2)
    wms = WebMapService(_url(srv) + "/wms", version="1.3.0")
    i, j = 20, 40
    lon = (lons[j] + 180) % 360 - 180
    px, py = int((lon + 180) / 0.5), int((90 - lats[i]) / 0.5)
    answer = wms.getfeatureinfo(layers=["ccm3/temperature"], styles=[""], srs="EPSG:4326", bbox=(-180, -90, 180, 90),
                                size=(720, 360), format="image/png", query_layers=["ccm3/temperature"],
                                info_format=info_format, xy=(px, py), time=time, elevation=str(level)).read()
    if info_format == "application/json":
        import json

        got = json.loads(answer)
        assert got["value"] == float(field[i, j]) and got["units"] == "K"
        assert got["cell"] == {"lat": float(lats[i]), "lon": float(lons[j])}
    else:
        assert f"value = {float(field[i, j])!r} K" in answer.decode()


def test_legend_is_a_png(maps_server) -> None:
    srv, _ = maps_server
    with client(srv) as http:
        answer = http.get("/wms", params={"SERVICE": "WMS", "REQUEST": "GetLegendGraphic",
                                          "LAYER": "ccm3/temperature", "STYLE": "magma", "FORMAT": "image/png"})
    assert answer.status_code == 200 and rgba(answer.content).shape == (260, 80, 4)


@pytest.mark.parametrize("who, status", [("alice", 200), ("bob", 404), ("", 404)])
def test_a_restricted_dataset_is_not_a_layer_for_others(maps_server, who, status) -> None:
    srv, tokens = maps_server
    with client(srv, tokens.get(who, "")) as http:
        answer = http.get("/wms", params={"SERVICE": "WMS", "VERSION": "1.3.0", "REQUEST": "GetMap",
                                          "LAYERS": "ocean/salinity", "STYLES": "", "CRS": "CRS:84",
                                          "BBOX": "-180,-90,180,90", "WIDTH": "64", "HEIGHT": "32",
                                          "FORMAT": "image/png"})
    assert answer.status_code == status
    if status == 404:
        report = ET.fromstring(answer.content)
        assert report.find(f"{OGC}ServiceException").get("code") == "LayerNotDefined"
        assert "ocean" in report.find(f"{OGC}ServiceException").text


GETMAP = {"SERVICE": "WMS", "VERSION": "1.3.0", "REQUEST": "GetMap", "LAYERS": "ccm3/temperature", "STYLES": "",
          "CRS": "CRS:84", "BBOX": "-180,-90,180,90", "WIDTH": "64", "HEIGHT": "32", "FORMAT": "image/png"}


@pytest.mark.parametrize("change, code, words", [
    ({"CRS": "EPSG:27700"}, "InvalidCRS", "CRS=EPSG:27700 is not offered"),
    ({"STYLES": "rainbow"}, "StyleNotDefined", "STYLES=rainbow is not a style"),
    ({"FORMAT": "image/jpeg"}, "InvalidFormat", "FORMAT=image/jpeg is not offered"),
    ({"BBOX": "1,2,3"}, "InvalidParameterValue", "BBOX=1,2,3 is not four numbers"),
    ({"REQUEST": "GetTile"}, "OperationNotSupported", "REQUEST=GetTile is not a WMS operation"),
    ({"LAYERS": "temperature"}, "LayerNotDefined", "layers are named dataset/variable"),
    ({"WIDTH": "9000"}, "InvalidParameterValue", "each side must be 1 to 4096"),
    ({"LAYERS": "ccm3/nothing"}, "InvalidParameterValue", "no attribute 'nothing'"),
])
def test_bad_requests_are_service_exception_reports(maps_server, change, code, words) -> None:
    srv, _ = maps_server
    with client(srv) as http:
        answer = http.get("/wms", params=GETMAP | change)
    assert answer.status_code == 400
    report = ET.fromstring(answer.content)
    assert report.tag == f"{OGC}ServiceExceptionReport"
    exc = report.find(f"{OGC}ServiceException")
    assert exc.get("code") == code and words in exc.text


def test_owslib_raises_the_servers_message(maps_server) -> None:
    srv, _ = maps_server
    wms = WebMapService(_url(srv) + "/wms", version="1.3.0")
    with pytest.raises(ServiceException, match="not a style"):
        wms.getmap(layers=["ccm3/temperature"], styles=["nope"], srs="CRS:84", bbox=(-180, -90, 180, 90),
                   size=(64, 32), format="image/png")
