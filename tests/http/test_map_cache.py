"""Map caches: concurrent requests for one slice read it once, slices and PNGs are bounded in bytes
(``map_cache_bytes``), and the OGC API – Tiles tileset points at the tiles."""

from __future__ import annotations

import threading
from typing import Any

import numpy as np
import pyarrow as pa
import pytest
import xarray as xr

from dstp.auth import ANONYMOUS
from dstp.http.maps import Lru, MapSource
from dstp.http.pages import CatalogView
from maps_fixtures import client, maps_server, rgba  # noqa: F401


class GatedView(CatalogView):
    """A CatalogView whose first table() waits until the test lets it go, counting every call."""

    def __init__(self, service: Any) -> None:
        super().__init__(service)
        self.calls: list[str] = []
        self.started, self.release = threading.Event(), threading.Event()

    def table(self, sql: str, principal: Any) -> pa.Table:
        self.calls.append(sql)
        if len(self.calls) == 1:
            self.started.set()
            assert self.release.wait(60), "the test never released the first read"
        return super().table(sql, principal)


def test_a_second_request_for_a_slice_being_read_waits_for_that_read(maps_server) -> None:
    srv, _ = maps_server
    view = GatedView(srv.service)
    source = MapSource(view)
    progress = threading.Event()  # the second request is waiting for the first read, or has read on its own
    source.on_wait = progress.set
    got: dict[str, Any] = {}

    def ask(name: str) -> None:
        try:
            got[name] = source.slab("ccm3", "temperature", {"time": "1990-03-16"}, ANONYMOUS)
        finally:
            if name == "second":
                progress.set()

    first = threading.Thread(target=ask, args=("first",))
    first.start()
    assert view.started.wait(60)
    second = threading.Thread(target=ask, args=("second",))
    second.start()
    assert progress.wait(60)
    view.release.set()
    first.join(60)
    second.join(60)
    assert len(view.calls) == 1, view.calls  # one read, through the service
    assert got["first"] is got["second"] and source.reads == 1
    # the read holds no lock: a request for another slice goes through while one is being read
    assert source.slab("ccm3", "temperature", {"time": "1990-06-16"}, ANONYMOUS) is not got["first"]


def test_a_failed_read_fails_its_waiters_and_the_next_request_reads_again(maps_server) -> None:
    srv, _ = maps_server

    class Failing(GatedView):
        def table(self, sql: str, principal: Any) -> pa.Table:
            self.calls.append(sql)
            if len(self.calls) == 1:
                raise RuntimeError("disk gone")
            return CatalogView.table(self, sql, principal)

    view = Failing(srv.service)
    source = MapSource(view)
    with pytest.raises(RuntimeError, match="disk gone"):
        source.slab("ccm3", "temperature", {}, ANONYMOUS)
    with xr.open_dataset(srv.settings.catalog_root / "ccm3" / "ccm3_1990-01.nc") as ds:
        shape = (ds.sizes["lat"], ds.sizes["lon"])
    assert source.slab("ccm3", "temperature", {}, ANONYMOUS).slab.values.shape == shape
    assert len(view.calls) == 2


def test_the_caches_are_bounded_in_bytes_least_recently_used_first() -> None:
    cache: Lru[str, bytes] = Lru(10, len)
    cache.put("a", b"1234")
    cache.put("b", b"5678")
    assert cache.get("a") == b"1234"  # a is now the most recently used
    cache.put("c", b"90ab")  # 12 bytes: b goes
    assert (cache.get("a"), cache.get("b"), cache.get("c")) == (b"1234", None, b"90ab")
    assert cache.held == 8
    cache.put("big", b"x" * 11)  # larger than the whole cache: not kept, nothing dropped for it
    assert cache.get("big") is None and cache.held == 8


def test_map_cache_bytes_bounds_the_slices_kept(maps_server) -> None:
    srv, _ = maps_server
    small = MapSource(CatalogView(srv.service), cache_bytes=2 * 10_000)  # a ccm3 slice takes 16.9 kB
    for _ in range(2):
        small.slab("ccm3", "temperature", {}, ANONYMOUS)
    assert small.reads == 2
    roomy = MapSource(CatalogView(srv.service), cache_bytes=2 * 40_000)
    for _ in range(2):
        roomy.slab("ccm3", "temperature", {}, ANONYMOUS)
    assert roomy.reads == 1


def test_the_tileset_names_webmercatorquad_and_its_template_gives_the_tile(maps_server) -> None:
    srv, tokens = maps_server
    with client(srv) as http:
        tileset = http.get("/tiles/ccm3/temperature/tileset.json")
        assert tileset.status_code == 200, tileset.text
        body = tileset.json()
        assert body["tileMatrixSetURI"] == "http://www.opengis.net/def/tilematrixset/OGC/1.0/WebMercatorQuad"
        assert body["crs"] == "http://www.opengis.net/def/crs/EPSG/0/3857"
        assert len(body["dimensions"]["time"]) == 12 and body["dimensions"]["time"][0].startswith("1990-01")
        (item,) = [link for link in body["links"] if link["rel"] == "item"]
        url = item["href"].format(tileMatrix=2, tileCol=2, tileRow=1)
        via_template = http.get(url)
        direct = http.get("/tiles/ccm3/temperature/2/2/1.png")
        assert via_template.status_code == direct.status_code == 200
        assert np.array_equal(rgba(via_template.content), rgba(direct.content))
        limits = {row["tileMatrix"]: row for row in body["tileMatrixSetLimits"]}
        assert limits["3"]["maxTileCol"] == 7 and limits["3"]["maxTileRow"] == 7
        hidden = http.get("/tiles/ocean/temperature/tileset.json")
    assert hidden.status_code == 404 and "ocean" in hidden.json()["error"]["message"]
    with client(srv, tokens["alice"]) as http:
        assert http.get("/tiles/ocean/temperature/tileset.json").status_code == 200
