"""The map page in a real browser (Debian's Chromium, headless, via Playwright), offline: tiles load, the time
slider changes the tiles, a click draws the cell's time series; a screenshot is saved."""

from __future__ import annotations

from urllib.parse import parse_qs, urlsplit

import pytest

from test_web_browser import CHROMIUM, page  # noqa: F401  (the browser fixture)

pytestmark = pytest.mark.skipif(not CHROMIUM.exists(), reason="Debian's chromium is not installed at /usr/bin/chromium")

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
