"""The map page in a real browser (Debian's Chromium, headless, via Playwright), offline: tiles load, pan, zoom,
the time slider (a 360_day calendar) and the level change the tiles, a click draws the cell's (a station's) time
series, the query builder's records are dots. Screenshots of a rectilinear, a rotated-pole, a polar-stereographic
and a station map are saved as artefacts and checked where Leaflet's own projection (``latLngToContainerPoint``)
puts a place: its pixel has the colour of the file's value there (xarray, matplotlib's colour map), or of the
side of the pattern the file was written from (:func:`map_archives.pattern`)."""

from __future__ import annotations

import io
import math
from urllib.parse import parse_qs, urlencode, urlsplit

import numpy as np
import pytest
import xarray as xr
from PIL import Image

from map_archives import STATIONS, expected_colour, pattern
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
    # cell centres well inside the grid have their cell's colour (xarray's value, matplotlib's viridis)
    with xr.open_dataset(maps_server[0].settings.catalog_root / "rot" / "rot.nc", decode_times=False) as ds:
        tas = ds["tas"].isel(time=0).values.astype(float)
    low, high = float(tas.min()), float(tas.max())
    _range(page, low, high)
    image = _shot(page, artifacts / "map_rotated_pole.png")
    for j, i in [(5, 6), (15, 18), (24, 30), (10, 25)]:
        col, row = _at(page, float(lat[j, i]), float(lon[j, i]))
        assert _close(image[row, col], expected_colour(tas[j, i], low, high)), (j, i, image[row, col])
    page.screenshot(path=str(artifacts / "map_rotated_pole_page.png"), full_page=True)
    assert page.problems == []  # type: ignore[attr-defined]


# -- pixels against the files: Leaflet's own projection says where a place is on screen -------------------------

#: Colour channels a browser may round a tile's pixel by.
TOLERANCE = 3


def _ready(page, loads: int = 0) -> None:  # noqa: F811
    """Wait until the tiles have loaded (more than ``loads`` times) and the map is still."""
    page.wait_for_function("n => window.dstpTilesReady === true && window.dstpMoving === false "
                           "&& window.dstpLoads > n", arg=loads)


def _shot(page, path) -> np.ndarray:  # noqa: F811
    return np.asarray(Image.open(io.BytesIO(page.screenshot(path=str(path)))).convert("RGBA"))


def _at(page, lat: float, lon: float) -> tuple[int, int]:  # noqa: F811
    """Return the viewport pixel (column, row) of a place, by Leaflet's latLngToContainerPoint."""
    x, y = page.evaluate("""([lat, lon]) => {
        const c = dstpMap.getContainer(), r = c.getBoundingClientRect(), p = dstpMap.latLngToContainerPoint([lat, lon]);
        return [r.left + c.clientLeft + p.x, r.top + c.clientTop + p.y]; }""", [lat, lon])
    return int(x), int(y)


def _close(pixel: np.ndarray, colour: np.ndarray) -> bool:
    return bool(np.abs(pixel[:3].astype(int) - colour[:3].astype(int)).max() <= TOLERANCE)


def _range(page, low: float, high: float) -> None:  # noqa: F811
    if (float(page.input_value("#map-vmin")), float(page.input_value("#map-vmax"))) == (low, high):
        return  # drawn with that range already
    loads = page.evaluate("() => window.dstpLoads")
    page.fill("#map-vmin", repr(low))
    page.fill("#map-vmax", repr(high))
    page.dispatch_event("#map-vmax", "change")
    _ready(page, loads)


#: Places at cell centres of ``rect`` (5° cells centred on 2.5 + 5k).
PLACES = [(12.5, 22.5), (12.5, 112.5), (-42.5, 62.5), (-42.5, -117.5), (47.5, 157.5), (-7.5, -2.5), (32.5, 72.5)]


def _check_rect(page, image: np.ndarray, field: xr.DataArray, low: float, high: float) -> int:  # noqa: F811
    checked = 0
    for lat, lon in PLACES:
        col, row = _at(page, lat, lon)
        if not (0 <= col < 1280 and 0 <= row < 900) or not page.evaluate(
                "([lat, lon]) => dstpMap.getBounds().contains([lat, lon])", [lat, lon]):
            continue
        value = float(field.sel(lat=lat, lon=lon % 360))
        assert _close(image[row, col], expected_colour(value, low, high)), (lat, lon, value, image[row, col])
        checked += 1
    return checked


def test_pan_zoom_360_day_time_step_level_and_a_click_against_xarray(page, base_url, maps_server,  # noqa: F811
                                                                      tmp_path, artifacts) -> None:
    root = maps_server[0].settings.catalog_root
    with xr.open_dataset(root / "rect" / "rect.nc") as ds:  # 360_day: xarray decodes with cftime
        fields = [ds["mask"].isel(time=k).sel(lev=850.0).load() for k in range(3)]
        upper = ds["mask"].isel(time=1).sel(lev=500.0).load()
        series = ds["mask"].sel(lev=850.0, lat=12.5, lon=22.5).values.astype(float).tolist()
        dates = [t.isoformat()[:10] for t in ds["time"].values]
    assert dates[1] == "2000-02-01"  # 30 days after 2000-01-01 on the 360_day calendar
    page.goto(base_url + "/datasets/rect/map")
    _ready(page)
    low, high = float(fields[0].min()), float(fields[0].max())
    # the range control starts at the slice's least and greatest values
    assert float(page.input_value("#map-vmin")) == low and float(page.input_value("#map-vmax")) == high
    loads = page.evaluate("() => window.dstpLoads")
    page.evaluate("() => dstpMap.setView([0, 40], 2, {animate: false})")
    _ready(page, loads)
    assert _check_rect(page, _shot(page, tmp_path / "maps-rect.png"), fields[0], low, high) >= 4

    # pan: drag the map 200 px to the right; the places are still coloured by their cells
    before = page.evaluate("() => dstpMap.getCenter().lng")
    box = page.locator("#map").bounding_box()
    loads = page.evaluate("() => window.dstpLoads")
    page.mouse.move(box["x"] + 300, box["y"] + 200)
    page.mouse.down()
    page.mouse.move(box["x"] + 400, box["y"] + 200, steps=5)
    page.mouse.move(box["x"] + 500, box["y"] + 200, steps=5)
    page.mouse.up()
    _ready(page, loads)
    assert page.evaluate("() => dstpMap.getCenter().lng") < before - 10
    assert _check_rect(page, _shot(page, tmp_path / "maps-rect-panned.png"), fields[0], low, high) >= 3

    # zoom in with the control
    zoom = page.evaluate("() => dstpMap.getZoom()")
    loads = page.evaluate("() => window.dstpLoads")
    page.click(".leaflet-control-zoom-in")
    page.wait_for_function("z => dstpMap.getZoom() === z + 1", arg=zoom)
    _ready(page, loads)
    assert _check_rect(page, _shot(page, tmp_path / "maps-rect-zoomed.png"), fields[0], low, high) >= 1
    loads = page.evaluate("() => window.dstpLoads")
    page.evaluate("() => dstpMap.setView([20, 40], 2, {animate: false})")
    _ready(page, loads)

    # a time step: the label is the next date of the 360_day calendar and the tiles draw that time
    loads = page.evaluate("() => window.dstpLoads")
    page.eval_on_selector("#map-time", "e => { e.value = 1; e.dispatchEvent(new Event('change')); }")
    _ready(page, loads)
    assert page.inner_text("#map-time-label").startswith("2000-02-01")
    assert _check_rect(page, _shot(page, tmp_path / "maps-rect-time2.png"), fields[1], low, high) >= 3

    # the level to 500 hPa, with that slice's range: the tiles draw it
    loads = page.evaluate("() => window.dstpLoads")
    page.select_option("#map-level", index=1)
    _ready(page, loads)
    low2, high2 = float(upper.min()), float(upper.max())
    _range(page, low2, high2)
    image = _shot(page, artifacts / "map_rect_500hPa.png")
    assert _check_rect(page, image, upper, low2, high2) >= 3

    # a click on a cell: its series at 500 hPa? no — the series is of the level chosen; back to 850 hPa
    loads = page.evaluate("() => window.dstpLoads")
    page.select_option("#map-level", index=0)
    _ready(page, loads)
    col, row = _at(page, 12.5, 22.5)
    page.mouse.click(col, row)
    page.wait_for_selector("#series-svg path.series-line")
    assert page.eval_on_selector("#series-svg", "s => JSON.parse(s.dataset.values)") == series
    assert [t[:10] for t in page.eval_on_selector("#series-svg", "s => JSON.parse(s.dataset.times)")] == dates
    assert page.problems == []  # type: ignore[attr-defined]


def _pattern_side(page, image: np.ndarray, places: list[tuple[float, float]]) -> int:  # noqa: F811
    """Places the pattern (map_archives.pattern) is the same around must have that side's colour (range 0…11)."""
    low, high = expected_colour(0.5, 0, 11), expected_colour(10.5, 0, 11)
    for lat, lon in places:
        side = bool(pattern(np.array(lat), np.array(lon)) >= 5)
        col, row = _at(page, lat, lon)
        pixel = image[row, col]
        assert pixel[3] == 255
        nearer_high = np.abs(pixel[:3].astype(int) - high[:3]).sum() < np.abs(pixel[:3].astype(int) - low[:3]).sum()
        assert bool(nearer_high) == side, (lat, lon, pixel)
    return len(places)


def test_a_polar_stereographic_grid_is_drawn_where_it_lies(page, base_url, artifacts) -> None:  # noqa: F811
    page.goto(base_url + "/datasets/polar/map")
    _ready(page)
    loads = page.evaluate("() => window.dstpLoads")
    page.evaluate("() => dstpMap.setView([72, 0], 2, {animate: false})")
    _ready(page, loads)
    _range(page, 0.0, 11.0)
    image = _shot(page, artifacts / "map_polar_stereographic.png")
    # Svalbard and the Kara Sea (0…90°E) high; Greenland and Alaska low; all inside the ±3000 km square
    assert _pattern_side(page, image, [(78.0, 16.0), (75.0, 70.0), (72.0, -40.0), (70.0, -150.0)]) == 4
    # far outside the square (the tropics) nothing is drawn: the page's background
    col, row = _at(page, 20.0, 0.0)
    if 0 <= row < 900:
        assert image[row, col][:3].std() < 20, image[row, col]
    assert page.problems == []  # type: ignore[attr-defined]


def test_stations_are_dots_of_their_latest_values_and_a_click_gives_the_series(  # noqa: F811
        page, base_url, maps_server, artifacts) -> None:
    root = maps_server[0].settings.catalog_root
    with xr.open_dataset(root / "stations" / "stations.nc") as ds:
        values = ds["temp"].values.astype(float)
        times = ds["time"].values
        first = np.concatenate([[0], np.cumsum(ds["row_size"].values)])
    latest = [float(values[a:b][np.argmax(times[a:b])]) for a, b in zip(first[:-1], first[1:])]
    page.goto(base_url + "/datasets/stations/map")
    _ready(page)
    low, high = min(latest), max(latest)
    assert float(page.input_value("#map-vmin")) == low and float(page.input_value("#map-vmax")) == high
    image = _shot(page, artifacts / "map_stations.png")
    for k, (name, (lat, lon)) in enumerate(STATIONS.items()):
        col, row = _at(page, lat, lon)
        assert _close(image[row, col], expected_colour(latest[k], low, high)), (name, image[row, col])
    # a click 2 px from Oslo's place: its observations
    col, row = _at(page, *STATIONS["OSLO"])
    page.mouse.click(col + 2, row)
    page.wait_for_selector("#series-svg")
    assert page.eval_on_selector("#series-svg", "s => JSON.parse(s.dataset.values)") == \
        values[first[1]:first[2]].tolist()
    assert page.problems == []  # type: ignore[attr-defined]


def test_the_query_builders_records_are_dots_on_the_map(page, base_url, maps_server, artifacts) -> None:  # noqa: F811
    sql = "select lat, lon, mask from rect where mask > 10.8 and lev = 850"
    with xr.open_dataset(maps_server[0].settings.catalog_root / "rect" / "rect.nc") as ds:
        mask = ds["mask"].sel(lev=850.0)
        kept = mask.where(mask > 10.8).stack(p=("time", "lat", "lon")).dropna("p")
        places = sorted((float(la), float(lo if lo < 180 else lo - 360)) for la, lo in zip(kept.lat.values, kept.lon.values))
    assert 0 < len(places) < 5000
    page.goto(base_url + "/datasets/rect/query?" + urlencode({"sql": sql}))
    page.click("#records-map")
    page.wait_for_function("() => document.body.dataset.records !== undefined")
    assert int(page.evaluate("() => document.body.dataset.records")) == len(places)
    drawn = page.evaluate("""() => Object.values(dstpMap._layers).filter(l => l instanceof L.CircleMarker
                              && l.options.color === '#c2410c').map(l => [l.getLatLng().lat, l.getLatLng().lng])""")
    assert sorted((la, lo) for la, lo in drawn) == places
    assert page.inner_text("#map-records").startswith(f"{len(places)} records of the query on the map")
    page.screenshot(path=str(artifacts / "map_rect_records.png"))
    assert page.problems == []  # type: ignore[attr-defined]
