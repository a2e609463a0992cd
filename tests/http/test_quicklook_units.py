"""Quicklooks of levels in pascals read as numbers with units: "plev = 85000 Pa", options "100000 Pa", ticks 101325.

CMIP files give pressure levels in Pa (``plev = 100000, 85000, …``): the page's level menu said ``1e+05``, the
map's title ``plev = 100000.0`` with no units, and a colour bar of surface pressure labelled its ticks with an
offset (``+1e5``). What is drawn is read back from the figure (its title and tick texts), and a real browser
screenshot of the page is saved to test-artifacts/http/quicklook-pa.png.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Iterator

import httpx
import netCDF4
import numpy as np
import pytest

import dstp
from dstp.catalog.publish import publish
from dstp.http.quicklook import _DRAW_LOCK, map_figure, map_selection, series_figure, series_selection
from dstp.server import DstpServer
from http_fixtures import web_settings
from test_web_browser import CHROMIUM, page  # noqa: F401 - the browser fixture

LEVELS = [100000.0, 85000.0, 50000.0, 25000.0]


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[DstpServer]:
    root = tmp_path_factory.mktemp("plev")
    path = root / "cmip" / "ta_Amon_2000.nc"
    path.parent.mkdir(parents=True)
    rng = np.random.default_rng(3)
    with netCDF4.Dataset(path, "w") as nc:
        nc.title = "CMIP-like air temperature on pressure levels"
        for name, size in (("time", 3), ("plev", 4), ("lat", 5), ("lon", 8)):
            nc.createDimension(name, size)
        t = nc.createVariable("time", "f8", ("time",))
        t.units, t.calendar, t.standard_name, t.axis = "days since 2000-01-01", "noleap", "time", "T"
        t[:] = [15.5, 45.0, 74.5]
        plev = nc.createVariable("plev", "f8", ("plev",))
        plev.units, plev.standard_name, plev.axis, plev.positive = "Pa", "air_pressure", "Z", "down"
        plev[:] = LEVELS
        lat = nc.createVariable("lat", "f8", ("lat",))
        lat.units, lat.standard_name = "degrees_north", "latitude"
        lat[:] = np.linspace(-60, 60, 5)
        lon = nc.createVariable("lon", "f8", ("lon",))
        lon.units, lon.standard_name = "degrees_east", "longitude"
        lon[:] = np.arange(0, 360, 45)
        ta = nc.createVariable("ta", "f4", ("time", "plev", "lat", "lon"))
        ta.units, ta.long_name = "K", "Air Temperature"
        ta[:] = rng.uniform(200, 300, (3, 4, 5, 8))
        ps = nc.createVariable("ps", "f4", ("time", "lat", "lon"))
        ps.units, ps.long_name = "Pa", "Surface Air Pressure"
        ps[:] = rng.uniform(96000, 103000, (3, 5, 8))
    publish([path], "cmip")
    with DstpServer(web_settings(root)) as srv:
        yield srv


@pytest.fixture(scope="module")
def client(server: DstpServer) -> Iterator[dstp.Client]:
    assert server.endpoints is not None
    with dstp.connect(server.endpoints.grpc) as c:
        yield c


@pytest.fixture(scope="module")
def base_url(server: DstpServer) -> str:
    assert server.endpoints is not None
    return f"http://{server.endpoints.http}"


def _ticks(axis: object) -> list[str]:
    return [t.get_text() for t in axis.get_ticklabels() if t.get_text()]  # type: ignore[attr-defined]


def test_the_level_menu_reads_pascals_as_numbers_with_units(base_url: str) -> None:
    page = httpx.get(f"{base_url}/datasets/cmip.json", timeout=30).json()
    assert page["quicklook"]["labels"]["plev"] == ["100000 Pa", "85000 Pa", "50000 Pa", "25000 Pa"]
    assert [float(v) for v in page["quicklook"]["values"]["plev"]] == LEVELS  # what is sent stays exact
    html = httpx.get(f"{base_url}/datasets/cmip", timeout=30).text
    assert '<option value="85000.0">85000 Pa</option>' in html and "e+05" not in html


def test_the_map_title_and_ticks_read_as_numbers_with_units(base_url: str, client: dstp.Client) -> None:
    details = client.describe("cmip")
    values = {k: [float(v) if k != "time" else v for v in vs]
              for k, vs in httpx.get(f"{base_url}/datasets/cmip.json", timeout=30).json()["quicklook"]["values"].items()}
    s = map_selection(details, "ta", {"plev": "85000"}, values.__getitem__)
    assert dict(s.fixed)["plev"] == "85000.0"  # exact, as the X-Dstp-Fixed header sends it
    with _DRAW_LOCK:
        fig = map_figure(client.query(s.sql), "cmip", s)
        fig.canvas.draw()
        title = fig.axes[0].get_title()
        assert "plev = 85000 Pa" in title and "85000.0" not in title, title
    ps = map_selection(details, "ps", {}, values.__getitem__)
    with _DRAW_LOCK:
        fig = map_figure(client.query(ps.sql), "cmip", ps)
        fig.canvas.draw()
        bar = fig.axes[1].yaxis
        ticks = _ticks(bar)
        assert ticks and all(re.fullmatch(r"\d{5,6}", t.replace(",", "")) for t in ticks), ticks
        assert bar.get_offset_text().get_text() == ""  # no "+1e5" above the bar
    header = httpx.get(f"{base_url}/datasets/cmip/quicklook.png", params={"attribute": "ta", "plev": "85000"},
                       timeout=30).headers["X-Dstp-Fixed"]
    assert "plev=85000.0" in header


def test_a_time_series_of_pascals_has_plain_ticks(base_url: str, client: dstp.Client) -> None:
    details = client.describe("cmip")
    values = {k: [float(v) if k != "time" else v for v in vs]
              for k, vs in httpx.get(f"{base_url}/datasets/cmip.json", timeout=30).json()["quicklook"]["values"].items()}
    s = series_selection(details, "ps", {"lat": "0", "lon": "90"}, values.__getitem__)
    with _DRAW_LOCK:
        fig = series_figure(client.query(s.sql), "cmip", s)
        fig.canvas.draw()
        ax = fig.axes[0]
        assert "lat = 0 degrees_north" in ax.get_title() and "lon = 90 degrees_east" in ax.get_title()
        assert all(re.fullmatch(r"\d{5,6}", t) for t in _ticks(ax.yaxis)), _ticks(ax.yaxis)
        assert ax.yaxis.get_offset_text().get_text() == ""


@pytest.mark.skipif(not CHROMIUM.exists(), reason="Debian's chromium is not installed at /usr/bin/chromium")
def test_screenshot_of_the_quicklook_on_pascal_levels(page, base_url: str, artifacts: Path) -> None:  # noqa: F811
    page.goto(base_url + "/datasets/cmip")
    page.select_option("#quicklook-plev", "85000.0")
    page.click("#quicklook-form button[type=submit]")
    page.wait_for_function("() => document.querySelector('#quicklook-img').src.includes('plev=85000.0')")
    page.wait_for_function("() => { const i = document.querySelector('#quicklook-img'); "
                           "return i.complete && i.naturalWidth > 0; }")
    assert page.locator("#quicklook-plev option:checked").inner_text() == "85000 Pa"
    page.locator("#quicklook").screenshot(path=str(artifacts / "quicklook-pa.png"))
    assert not page.problems  # type: ignore[attr-defined]
