"""The map page in a real browser (Debian's Chromium, headless, via Playwright), offline: tiles load, the time
slider changes the tiles, a click draws the cell's time series; a screenshot is saved."""

from __future__ import annotations

from urllib.parse import parse_qs, urlsplit

import math

import pytest
import xarray as xr

from maps_fixtures import maps_server  # noqa: F401
from test_web_browser import CHROMIUM, page  # noqa: F401  (the browser fixture)

pytestmark = pytest.mark.skipif(not CHROMIUM.exists(), reason="Debian's chromium is not installed at /usr/bin/chromium")



@pytest.fixture(scope="module")
def base_url(maps_server) -> str:  # noqa: F811  (the browser fixture's server: ccm3 and a rotated-pole grid)
    srv, _ = maps_server
    return f"http://{srv.endpoints.http}"


LOADED_TILES = ("() => [...document.querySelectorAll('#map img.leaflet-tile-loaded')]"
                ".filter(i => i.complete && i.naturalWidth > 0).map(i => i.src)")


def test_map_page_tiles_time_slider_and_click_for_a_series(page, base_url, tmp_path, artifacts) -> None:  # noqa: F811
    page.goto(base_url + "/datasets/ccm3")
    page.click("#map-link")
    page.wait_for_url(base_url + "/datasets/ccm3/map")
    page.wait_for_function(f"() => ({LOADED_TILES})().length > 0")
    first = page.evaluate(LOADED_TILES)
    assert all("/tiles/ccm3/temperature/" in src for src in first)
    times = page.evaluate("() => JSON.parse(document.getElementById('map-data').textContent).times")
    assert len(times) == 12 and parse_qs(urlsplit(first[0]).query)["time"] == [times[0]]
    assert page.inner_text("#map-units") == "K"
    assert page.eval_on_selector("#map-legend", "i => i.naturalWidth") == 80

    # time step: the tiles are asked again for the new time
    page.eval_on_selector("#map-time", "e => { e.value = 5; e.dispatchEvent(new Event('change')); }")
    page.wait_for_function(f"t => ({LOADED_TILES})().some(s => new URL(s).searchParams.get('time') === t)",
                           arg=times[5])
    assert page.inner_text("#map-time-label") == times[5]

    # click the map's centre: the cell's series over all 12 times, as an SVG line
    box = page.locator("#map").bounding_box()
    assert box is not None
    page.mouse.click(box["x"] + box["width"] / 2, box["y"] + box["height"] / 2)
    page.wait_for_selector("#series-svg path.series-line")
    path = page.get_attribute("#series-svg path.series-line", "d")
    assert path is not None and path.count("L") == 11  # 12 points, none missing
    assert "temperature at lat" in page.text_content("#series-svg")
    page.screenshot(path=str(tmp_path / "map.png"), full_page=True)
    page.screenshot(path=str(artifacts / "map_ccm3.png"), full_page=True)
    assert (tmp_path / "map.png").stat().st_size > 10_000
    assert page.problems == []  # type: ignore[attr-defined]


OPAQUE = ("() => Object.fromEntries([...document.querySelectorAll('#map img.leaflet-tile-loaded')].map(i => {"
          "const c = document.createElement('canvas'); c.width = i.naturalWidth; c.height = i.naturalHeight;"
          "const g = c.getContext('2d'); g.drawImage(i, 0, 0);"
          "const d = g.getImageData(0, 0, c.width, c.height).data; let n = 0;"
          "for (let k = 3; k < d.length; k += 4) if (d[k] > 0) n++;"
          "return [new URL(i.src).pathname.split('/').slice(-3).join('/'), n]; }))")


def test_a_rotated_pole_grid_is_drawn_over_europe_only(page, base_url, maps_server, artifacts) -> None:  # noqa: F811
    page.goto(base_url + "/datasets/rot/map")
    page.wait_for_function(f"() => ({LOADED_TILES})().length >= 4")
    opaque = page.evaluate(OPAQUE)  # tile z/x/y.png -> pixels drawn
    with xr.open_dataset(maps_server[0].settings.catalog_root / "rot" / "rot.nc", decode_times=False) as ds:
        lat, lon = ds["lat"].values, ds["lon"].values
    margin = 1.0  # degrees: more than a cell (0.7°), so a cell whose centre is outside cannot reach in
    assert len(opaque) >= 4
    for tile, drawn in opaque.items():
        z, x, y = (int(v) for v in tile.removesuffix(".png").split("/"))
        n = 2**z
        west, east = x / n * 360 - 180, (x + 1) / n * 360 - 180
        north, south = (math.degrees(math.atan(math.sinh(math.pi * (1 - 2 * v / n)))) for v in (y, y + 1))
        inside = ((lon >= west) & (lon < east) & (lat >= south) & (lat < north)).sum()
        near = ((lon >= west - margin) & (lon < east + margin) & (lat >= south - margin) & (lat < north + margin)).sum()
        if inside:
            assert drawn > 0, tile
        if not near:
            assert drawn == 0, tile
    assert sum(opaque.values()) > 10_000
    page.screenshot(path=str(artifacts / "map_rotated_pole.png"), full_page=True)
    assert page.problems == []  # type: ignore[attr-defined]
