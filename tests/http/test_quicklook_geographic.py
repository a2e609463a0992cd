"""Quicklooks of grids that are not latitude × longitude, and of station tables, drawn where they lie.

A rotated-pole grid's map is drawn on its 2-D latitude/longitude (pcolormesh in
geographic space), and a station table (CF timeSeries, contiguous ragged) as a
map of points. Real server, real HTTP, real PNGs.
"""

from __future__ import annotations

import io
from pathlib import Path
from typing import Iterator

import httpx
import netCDF4
import numpy as np
import pytest

from builders import rotated_pole
from dstp.catalog.publish import publish
from dstp.http.quicklook import map_selection
from dstp.server import DstpServer
from dstp.settings import Settings


def _rotated(folder: Path) -> None:
    folder.mkdir()
    rotated_pole(folder / "rot.nc", "tas", lambda lat, lon: 250 + lat[None] * np.ones((2, 1, 1)),
                 rlat=np.linspace(-10, 10, 30), rlon=np.linspace(-12, 12, 36), times=[0, 1])
    publish([folder / "rot.nc"], "rot")


def _stations(folder: Path) -> None:
    folder.mkdir()
    counts = [3, 1, 4]
    with netCDF4.Dataset(folder / "stations.nc", "w") as nc:
        nc.featureType = "timeSeries"
        nc.createDimension("station", 3)
        nc.createDimension("obs", sum(counts))
        nc.createDimension("name_strlen", 8)
        name = nc.createVariable("station_name", "S1", ("station", "name_strlen"))
        name.cf_role = "timeseries_id"
        name[:] = netCDF4.stringtochar(np.array(["ALERT", "OSLO", "LIMA"], dtype="S8"))
        lat = nc.createVariable("lat", "f4", ("station",))
        lat.standard_name, lat.units = "latitude", "degrees_north"
        lat[:] = [82.5, 59.9, -12.0]
        lon = nc.createVariable("lon", "f4", ("station",))
        lon.standard_name, lon.units = "longitude", "degrees_east"
        lon[:] = [-62.3, 10.7, -77.0]
        row = nc.createVariable("row_size", "i4", ("station",))
        row.sample_dimension = "obs"
        row[:] = counts
        t = nc.createVariable("time", "f8", ("obs",))
        t.units, t.standard_name = "hours since 2021-01-01", "time"
        t[:] = [0, 1, 2, 0, 0, 1, 2, 3]
        temp = nc.createVariable("temp", "f4", ("obs",))
        temp.units, temp.coordinates = "degC", "time lat lon station_name"
        temp[:] = [-30, -31, -29, 2, 20, 21, 22, 23]
    publish([folder / "stations.nc"], "stations")


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[DstpServer]:
    root = tmp_path_factory.mktemp("geo")
    _rotated(root / "rot")
    _stations(root / "stations")
    settings = Settings(catalog_root=root, port=0, http_port=0, data_port=-1, udt_port=-1)
    with DstpServer(settings) as srv:
        assert srv.catalog is not None and not srv.catalog.problems, srv.catalog.problems
        yield srv


def _png(server: DstpServer, dataset: str, attribute: str) -> bytes:
    assert server.endpoints is not None
    r = httpx.get(f"http://{server.endpoints.http}/datasets/{dataset}/quicklook.png",
                  params={"attribute": attribute}, timeout=60)
    assert r.status_code == 200, r.text
    assert r.headers["content-type"] == "image/png" and r.content.startswith(b"\x89PNG")
    return r.content


def _axis_extent(png: bytes) -> tuple[int, int]:
    """Return (coloured pixels, distinct colours) of a PNG: a drawn map has many of both."""
    from matplotlib import image

    pixels = image.imread(io.BytesIO(png), format="png")[..., :3]
    coloured = (pixels.max(axis=2) - pixels.min(axis=2)) > 0.2
    return int(coloured.sum()), len(np.unique((pixels[coloured] * 255).astype(int), axis=0))


def test_a_rotated_grid_is_mapped_on_its_latitudes_and_longitudes(server: DstpServer) -> None:
    assert server.service is not None
    details = server.service.describe("rot")
    selection = map_selection(details, "tas", {}, lambda dim: ["2001-01-01T00:00:00"])
    assert selection.geographic == ("lat", "lon") and selection.kind == "grid"
    assert "lat" in selection.sql and "lon" in selection.sql
    coloured, colours = _axis_extent(_png(server, "rot", "tas"))
    assert coloured > 10_000 and colours > 20


def test_a_station_table_is_a_map_of_points(server: DstpServer) -> None:
    assert server.service is not None
    details = server.service.describe("stations")
    selection = map_selection(details, "temp", {}, lambda dim: [])
    assert selection.kind == "points" and selection.geographic == ("lat", "lon")
    coloured, _ = _axis_extent(_png(server, "stations", "temp"))
    assert coloured > 50  # the dots and the colour bar
    page = httpx.get(f"http://{server.endpoints.http}/datasets/stations.json", timeout=30).json()  # type: ignore[union-attr]
    assert "temp" in page["quicklook"]["map_attributes"]
