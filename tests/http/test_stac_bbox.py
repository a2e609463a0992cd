"""STAC bboxes of datasets on 0…360 and −180…180 longitudes (issue 32, item 9).

A regional dataset stored on 0…360 had the global bbox [-180, …, 180, …]. STAC (Item/Collection spec,
"bbox"): west, south, east, north on WGS 84 longitudes, west > east for a box across the antimeridian.
The oracle is the definition: the box holds every longitude of the files and no longer stretch of the
circle than they span.
"""

from __future__ import annotations

from pathlib import Path
from typing import Iterator

import httpx
import netCDF4
import numpy as np
import pystac
import pystac.validation
import pytest
from hypothesis import given, settings, strategies as st

from dstp.catalog.publish import publish
from dstp.metadata import longitude_extent
from dstp.server import DstpServer
from dstp.settings import Settings

from facade_archives import Layout, model_archive


def inside(lon: float, west: float, east: float) -> bool:
    lon = ((lon + 180.0) % 360.0) - 180.0
    return west - 1e-9 <= lon <= east + 1e-9 if west <= east else lon >= west - 1e-9 or lon <= east + 1e-9


def stretch(west: float, east: float) -> float:
    return east - west if west <= east else 360.0 - (west - east)


@settings(max_examples=200, deadline=None)
@given(first=st.floats(-360.0, 360.0, allow_nan=False), spacing=st.sampled_from([0.25, 1.0, 2.5, 7.5]),
       count=st.integers(1, 60), convention=st.sampled_from(["east", "west", "as given"]))
def test_the_extent_holds_every_longitude_and_no_more(first: float, spacing: float, count: int,
                                                      convention: str) -> None:
    lons = first + spacing * np.arange(count)
    if convention == "east":
        lons = lons % 360.0
    elif convention == "west":
        lons = ((lons + 180.0) % 360.0) - 180.0
    extent = longitude_extent(np.sort(lons))
    assert extent is not None
    west, east = extent
    assert -180.0 <= west <= 180.0 and -180.0 <= east <= 180.0
    assert all(inside(float(x), west, east) for x in lons)
    span = spacing * (count - 1)
    if span + spacing < 360.0 - 2 * spacing:  # a region: never more of the circle than the data span
        assert stretch(west, east) == pytest.approx(span, abs=1e-6)
    else:
        assert (west, east) == (-180.0, 180.0) or stretch(west, east) == pytest.approx(span, abs=1e-6)


@pytest.fixture(scope="module")
def stac(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[httpx.Client, Path]]:
    root = tmp_path_factory.mktemp("stac-bbox")
    publish(model_archive(root / "east", Layout(lon="east", lon0=200.0)), "east")
    publish(model_archive(root / "across", Layout(lon="east", lon0=172.5, nlon=8)), "across")
    publish(model_archive(root / "west", Layout(lon="west", lon0=200.0)), "west")
    publish(model_archive(root / "world", Layout(lon="east", lon0=0.0, dlon=30.0, nlon=12)), "world")
    srv = DstpServer(Settings(catalog_root=root, port=0, http_port=0, data_port=-1, udt_port=-1))
    srv.start()
    assert srv.endpoints is not None
    with httpx.Client(base_url=f"http://{srv.endpoints.http}", timeout=30) as c:
        yield c, root
    srv.stop()


@pytest.mark.parametrize("dataset, want", [("east", (-160.0, -147.5)), ("across", (172.5, -170.0)),
                                           ("west", (-160.0, -147.5)), ("world", (-180.0, 180.0))])
def test_collection_bbox_is_the_files_extent(stac: tuple[httpx.Client, Path], dataset: str,
                                             want: tuple[float, float]) -> None:
    http, root = stac
    raw = http.get(f"/stac/collections/{dataset}").json()
    pystac.validation.validate_dict(raw, extensions=[])
    box = pystac.Collection.from_dict(raw).extent.spatial.bboxes[0]
    with netCDF4.Dataset(sorted((root / dataset).glob("*.nc"))[0]) as nc:
        lon, lat = np.asarray(nc["lon"][:]), np.asarray(nc["lat"][:])
    assert (box[0], box[2]) == want
    assert all(inside(float(x), box[0], box[2]) for x in lon)
    assert (box[1], box[3]) == (float(lat.min()), float(lat.max()))
