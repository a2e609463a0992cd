"""The STAC facade, validated with pystac (core schemas, shipped with it) and read with its datacube extension."""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest
import pystac.validation

import dstp
from dstp.server import DstpServer

import pystac


@pytest.fixture(scope="module")
def native(web_server: DstpServer) -> dstp.Client:
    assert web_server.endpoints is not None
    with dstp.connect(web_server.endpoints.grpc) as c:
        yield c


def test_landing_page_and_conformance(http: httpx.Client, base_url: str, native: dstp.Client) -> None:
    landing = http.get("/stac").json()
    assert "https://api.stacspec.org/v1.0.0/core" in landing["conformsTo"]
    assert http.get("/stac/conformance").json()["conformsTo"] == landing["conformsTo"]
    catalog = pystac.Catalog.from_dict(landing)
    assert pystac.validation.validate_dict(landing, extensions=[]) is not None
    children = {link.href.rsplit("/", 1)[-1] for link in catalog.links if link.rel == "child"}
    assert children == {s.id for s in native.datasets()}
    assert next(link for link in catalog.links if link.rel == "data").href == f"{base_url}/stac/collections"


def test_every_collection_validates_and_describes_its_cube(http: httpx.Client, native: dstp.Client) -> None:
    from pystac.extensions.datacube import DatacubeExtension, DimensionType

    body = http.get("/stac/collections").json()
    assert {c["id"] for c in body["collections"]} == {s.id for s in native.datasets()}
    for raw in body["collections"]:
        pystac.validation.validate_dict(raw, extensions=[])  # core Collection schema; raises if invalid
        collection = pystac.Collection.from_dict(raw)
        cube = DatacubeExtension.ext(collection)
        details = native.describe(collection.id)
        assert set(cube.dimensions) == {d.name for d in details.dimensions}
        assert {a.name for a in details.attributes} <= set(cube.variables)
        for a in details.attributes:
            assert cube.variables[a.name].dimensions == list(a.dimensions)
            assert (cube.variables[a.name].unit or "") == a.units
        time = next((d for d in details.dimensions if d.axis == "T" and d.calendar), None)
        if time is not None:
            assert cube.dimensions[time.name].dim_type == DimensionType.TEMPORAL
            start = collection.extent.temporal.intervals[0][0]
            assert start is not None and start.isoformat().startswith(time.min[:10])
        assert "xarray" in collection.assets and collection.assets["xarray"].href.endswith("/" + collection.id)


def test_a_collection_by_id_and_its_items(http: httpx.Client, catalog_root: Path) -> None:
    ccm3 = http.get("/stac/collections/ccm3").json()
    dims = ccm3["cube:dimensions"]
    assert dims["lat"] == {"type": "spatial", "axis": "y", "extent": [-87.86, 87.86], "reference_system": 4326,
                           "unit": "degrees_north", "description": "latitude (32 values)"}
    assert ccm3["extent"]["spatial"]["bbox"] == [[-180.0, -87.86, 180.0, 87.86]]
    assert ccm3["assets"]["erddap-griddap"]["href"].endswith("/erddap/griddap/ccm3.html")
    items = http.get("/stac/collections/ccm3/items")
    assert items.status_code == 200
    files = sorted(p.name for p in (catalog_root / "ccm3").glob("*.nc"))  # an item per file, in file order
    assert [f["id"] for f in items.json()["features"]] == [f"ccm3/{name}" for name in files][:10]
    missing = http.get("/stac/collections/nosuch")
    assert missing.status_code == 404 and missing.json()["error"]["code"] == "dataset_not_found"


def test_openapi_is_served_and_the_docs_page_works_offline(http: httpx.Client) -> None:
    spec = http.get("/openapi.json").json()
    for path in ("/erddap/griddap/{name}", "/erddap/tabledap/{name}", "/stac/collections", "/docs"):
        assert path in spec["paths"], path
    page = http.get("/docs")
    assert page.status_code == 200 and page.headers["content-type"].startswith("text/html")
    assert "curl -s" in page.text and "/erddap/griddap/ccm3.csv" in page.text
    assert "<script" not in page.text and "<link" not in page.text  # nothing loaded from anywhere
    example = page.text.split("curl -s '", 1)[1].split("'", 1)[0].replace("&amp;", "&")
    assert http.get(example.replace(str(http.base_url).rstrip("/"), "")).status_code == 200
