"""Catalog, dataset and builder pages, their JSON twins, and the quicklook PNGs."""

from __future__ import annotations

import io
import re
from urllib.parse import parse_qs, urlsplit

import numpy as np
import pytest

from dstp.http.shapes import details_json, summary_json

PAGES = [
    "/",
    "/datasets",
    "/datasets/ccm3",
    "/datasets/ocean",
    "/datasets/station",
    "/datasets/axes",
    "/datasets/ccm3/query",
    "/datasets/ocean/query?select=temperature&where=depth:<:20",
    "/api",
]


def _twin(path: str) -> str:
    url = urlsplit(path)
    base = "/index" if url.path == "/" else url.path
    return base + ".json" + (f"?{url.query}" if url.query else "")


@pytest.mark.parametrize("path", PAGES)
def test_every_page_renders_and_has_a_json_twin(http, path) -> None:
    page = http.get(path, headers={"Accept": "text/html"})
    assert page.status_code == 200, page.text
    assert page.headers["content-type"].startswith("text/html")
    assert "<html" in page.text
    # every asset is bundled: nothing is fetched from another host
    for ref in re.findall(r'(?:src|href)="([^"]+)"', page.text):
        assert not ref.startswith(("http:", "https:", "//")), ref
    twin = http.get(_twin(path))
    assert twin.status_code == 200
    assert twin.headers["content-type"] == "application/json"
    assert twin.json()


def test_datasets_json_is_the_r_clients_list(http, client) -> None:
    got = http.get("/datasets.json").json()
    assert isinstance(got, list)
    assert got == [summary_json(s) for s in client.datasets()]
    for d in got:
        assert {"id", "title", "summary", "attributes", "default_grid", "default_grid_rows", "time_start",
                "time_end", "bbox", "size_bytes", "keywords"} <= set(d)
    ccm3 = next(d for d in got if d["id"] == "ccm3")
    assert ccm3["default_grid"] == ["time", "lev", "lat", "lon"] and len(ccm3["bbox"]) == 4


def test_dataset_json_mirrors_the_description(http, client) -> None:
    got = http.get("/datasets/ocean.json").json()
    expected = details_json(client.describe("ocean"))
    assert {k: got[k] for k in expected} == expected
    assert got["attributes"][0]["units"] == "degC"
    assert got["dimensions"][2]["order"] == -1  # descending latitude
    assert "<dataset" in got["descriptor_xml"]
    assert got["quicklook"]["values"]["time"][0] == "2000-01-16T00:00:00"
    assert set(got["links"]) >= {"html", "json", "query_builder", "quicklook", "timeseries"}


def test_dataset_page_shows_attributes_with_units_files_and_keys(http) -> None:
    html = http.get("/datasets/ccm3").text
    assert re.search(r'data-name="temperature">.*?<td class="units">K</td>', html, re.S)
    assert re.search(r'data-name="humidity">.*?<td class="units">%</td>', html, re.S)
    assert "ccm3_1990-05.nc" in html and "NETCDF4" in html
    assert "196,608" in html  # row count of the default grid
    assert "air_pressure" in html  # correlation key
    assert "&lt;dataset" in html  # the descriptor XML, escaped


@pytest.mark.parametrize("dataset", ["ccm3", "ocean"])
def test_dataset_page_shows_each_files_range_as_dates(http, client, dataset) -> None:
    """The files table says when each file is, from the catalog's first and last values, not indices."""
    html = http.get(f"/datasets/{dataset}").text
    rows = dict(re.findall(r"<tr><td><code>([^<]+)</code></td>.*?<td class=\"range\">([^<]*)</td>", html))
    files = client.describe(dataset).files
    assert set(rows) == {f.name for f in files}
    for f in files:
        first, last = getattr(f, "first", ""), getattr(f, "last", "")
        assert first and last, "the catalog gives each file's first and last time"
        assert first[:10] in rows[f.name] and last[:10] in rows[f.name], (f.name, rows[f.name])
        assert "index" not in rows[f.name] and "T" not in rows[f.name]


def _point(html: str, name: str) -> str:
    match = re.search(rf'<input name="{name}" id="series-{name}" type="number" step="any" value="([^"]*)"', html)
    assert match, f"no {name} input in the time series form"
    return match.group(1)


@pytest.mark.parametrize("dataset", ["ccm3", "ocean", "station", "axes"])
def test_point_forms_start_at_a_rounded_value_of_the_middle_grid_point(http, dataset) -> None:
    page = http.get(f"/datasets/{dataset}.json").json()
    html = http.get(f"/datasets/{dataset}").text
    if not page["quicklook"]["series_attributes"]:
        pytest.skip(f"{dataset} has no time axis")
    for d in page["dimensions"]:
        values = page["quicklook"]["values"].get(d["name"])
        if d["axis"] not in ("X", "Y") or not values:
            continue
        shown = _point(html, d["name"])
        grid = [float(v) for v in values]
        middle = grid[len(grid) // 2]
        assert len(shown.lstrip("-").replace(".", "")) <= max(4, len(repr(middle))), shown  # no 2.8341935483870913
        nearest = min(grid, key=lambda v: abs(v - float(shown)))
        assert nearest == middle, (d["name"], shown, middle)  # the plot is still drawn at that grid point


def test_quicklook_options_send_exact_values_under_readable_labels(http) -> None:
    page = http.get("/datasets/ccm3.json").json()
    html = http.get("/datasets/ccm3").text
    options = re.findall(r'<select name="lev" id="quicklook-lev">(.*?)</select>', html, re.S)[0]
    pairs = re.findall(r'<option value="([^"]*)">([^<]*)</option>', options)
    assert [value for value, _ in pairs] == page["quicklook"]["values"]["lev"]
    labels = [label for _, label in pairs]
    assert len(set(labels)) == len(labels)
    assert all(label.endswith(" hPa") for label in labels)  # the level's units, as the title says them
    assert all(abs(float(label.removesuffix(" hPa")) - float(value)) < 0.05 for value, label in pairs)
    times = re.findall(r'<select name="time" id="quicklook-time">(.*?)</select>', html, re.S)[0]
    assert "1990-01-16 12:00</option>" in times  # dates as dates, the exact value still sent


@pytest.mark.parametrize("path", ["/datasets/nosuch", "/datasets/nosuch/query", "/datasets/nosuch.json",
                                  "/datasets/nosuch/query.json", "/datasets/nosuch/quicklook.png?attribute=x"])
def test_unknown_dataset_is_404_as_json_or_html(http, path) -> None:
    r = http.get(path)
    assert r.status_code == 404
    assert r.json()["error"]["code"] == "dataset_not_found"
    if not path.endswith((".json", "x")):
        html = http.get(path, headers={"Accept": "text/html,application/xhtml+xml"})
        assert html.status_code == 404 and html.headers["content-type"].startswith("text/html")
        assert "no dataset" in html.text and "ccm3" in html.text


@pytest.mark.parametrize(
    "params, expected",
    [
        ({"q": "salinity"}, ["ocean"]),
        ({"q": "K"}, ["ccm3", "station"]),  # units match whole values
        ({"q": "relative_humidity"}, ["ccm3"]),  # standard names
        ({"q": "sea surface"}, ["axes", "ocean"]),
        ({"q": "climate model"}, ["ccm3"]),  # keywords
        ({"q": "nothing-like-this"}, []),
        ({"attribute": "air_temperature"}, ["ccm3", "station"]),
        ({"attribute": ["air_temperature", "dew_point_temperature"]}, ["station"]),
        ({"start": "1990-06", "end": "1990-07"}, ["ccm3"]),
        ({"start": "2000"}, ["ocean", "station"]),
        ({"end": "1900"}, ["axes"]),
        ({"bbox": "40,50,-5,5"}, ["ccm3", "ocean", "station"]),  # lon -5..5 overlaps 0..355
        ({"bbox": "40,50,100,120"}, ["ccm3", "ocean"]),
        ({"q": "temperature", "bbox": "-20,20,0,10"}, ["ccm3", "ocean"]),  # axes is in km: no lat/lon box
    ],
)
def test_catalog_search_and_facets(http, params, expected) -> None:
    page = http.get("/index.json", params=params).json()
    assert sorted(d["id"] for d in page["datasets"]) == expected
    assert page["count"] == len(expected)
    assert all(len(d["matches"]) == len(set(d["matches"])) for d in page["datasets"])
    assert sorted(d["id"] for d in http.get("/datasets.json", params=params).json()) == expected
    html = http.get("/", params=params).text
    assert sorted(re.findall(r'class="dataset-card" data-id="([^"]+)"', html)) == expected


def test_facets_count_hits_and_toggle(http) -> None:
    page = http.get("/index.json", params={"q": "temperature"}).json()
    facets = {f["value"]: f for f in page["facets"]["attribute"]}
    assert facets["air_temperature"]["count"] == 2 and not facets["air_temperature"]["selected"]
    narrowed = http.get(facets["air_temperature"]["href"].replace("/", "/index.json", 1)).json()
    assert sorted(d["id"] for d in narrowed["datasets"]) == ["ccm3", "station"]
    selected = {f["value"]: f for f in narrowed["facets"]["attribute"]}["air_temperature"]
    assert selected["selected"]
    assert parse_qs(urlsplit(selected["href"]).query) == {"q": ["temperature"]}  # toggles off


@pytest.mark.parametrize("params", [{"bbox": "1,2,3"}, {"bbox": "95,100,0,1"}, {"start": "June 1990"}])
def test_bad_facet_values_are_400(http, params) -> None:
    r = http.get("/index.json", params=params)
    assert r.status_code == 400 and r.json()["error"]["code"] == "invalid_query"


def test_builder_json_turns_the_form_into_sql_and_snippets(http, base_url) -> None:
    params = {"select": ["temperature", "time"], "where": ["humidity:>:50", "lat:between:30,40",
                                                          "time:>=:1990-06-01"], "limit": "10"}
    page = http.get("/datasets/ccm3/query.json", params=params).json()
    sql = ("select temperature, time from ccm3 where humidity > 50 and lat between 30 and 40 "
           "and time >= '1990-06-01' limit 10")
    assert page["sql"] == sql
    assert page["state"]["where"] == params["where"]
    assert f"dstp.connect('127.0.0.1:" in page["snippets"]["python"] and repr(sql) in page["snippets"]["python"]
    assert f'dstp_connect("{base_url}")' in page["snippets"]["r"]
    assert "dstp_query(con, " in page["snippets"]["r"] and base_url + "/query" in page["snippets"]["curl"]
    assert [d["format"] for d in page["downloads"]] == ["csv", "json", "ndjson", "parquet", "arrow", "nc"]
    csv = http.get(page["downloads"][0]["url"])
    assert csv.status_code == 200 and len(csv.text.splitlines()) == 11
    assert http.get(page["preview_url"]).status_code == 200
    custom = http.get("/datasets/ccm3/query.json", params={"sql": "select lat from ccm3"}).json()
    assert custom["sql"] == "select lat from ccm3"


@pytest.mark.parametrize("where, code", [("humidity:>:abc", "invalid_query"), ("nosuch:=:1", "unknown_column"),
                                         ("humidity:like:5", "invalid_query")])
def test_builder_rejects_bad_conditions(http, where, code) -> None:
    r = http.get("/datasets/ccm3/query.json", params={"where": where})
    assert r.status_code == 400 and r.json()["error"]["code"] == code


def _assert_drawn(data: bytes) -> None:
    from PIL import Image  # matplotlib depends on pillow

    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    image = np.asarray(Image.open(io.BytesIO(data)).convert("RGB"), dtype=np.float64)
    assert image.shape[0] > 200 and image.shape[1] > 400
    assert image.std() > 20  # not blank
    rgb = image.astype(np.int64)
    colours = np.unique((rgb[..., 0] << 16) | (rgb[..., 1] << 8) | rgb[..., 2])
    assert len(colours) > 50  # a colour map or a curve with antialiasing, not two flat colours


@pytest.mark.parametrize(
    "dataset, params, fixed",
    [
        ("ccm3", {"attribute": "temperature", "time": "1990-07-16", "lev": "850"},
         {"time": "1990-07-16T12:00:00", "lev": "846.7"}),
        ("ocean", {"attribute": "temperature", "time": "2000-02-28", "depth": "25"},
         {"time": "2000-02-16T00:00:00", "depth": "25.0"}),
        ("ocean", {"attribute": "sea_surface_height", "time": "2000-02-30"}, {"time": "2000-02-16T00:00:00"}),
        ("station", {"attribute": "t2m", "time": "2001-01-05 06:00"}, {"time": "2001-01-05T06:00:00"}),
        ("axes", {"attribute": "sst", "step": "1850-03-16"}, {"step": "1850-03-16T00:00:00"}),
        ("ocean", {"attribute": "salinity"}, {"time": "2000-01-16T00:00:00", "depth": "5.0"}),  # defaults
    ],
)
def test_quicklook_map_is_a_drawn_png(http, dataset, params, fixed) -> None:
    r = http.get(f"/datasets/{dataset}/quicklook.png", params=params)
    assert r.status_code == 200, r.text
    assert r.headers["content-type"] == "image/png"
    assert parse_qs(r.headers["x-dstp-fixed"]) == {k: [v] for k, v in fixed.items()}
    _assert_drawn(r.content)


@pytest.mark.parametrize(
    "dataset, params",
    [
        ("ccm3", {"attribute": "temperature", "lat": "41.9", "lon": "12.5", "lev": "500"}),
        ("ocean", {"attribute": "salinity", "lat": "-30", "lon": "200"}),  # 360_day text times
        ("station", {"attribute": "d2m", "lat": "45", "lon": "0"}),
    ],
)
def test_timeseries_is_a_drawn_png(http, dataset, params) -> None:
    r = http.get(f"/datasets/{dataset}/timeseries.png", params=params)
    assert r.status_code == 200, r.text
    _assert_drawn(r.content)


@pytest.mark.parametrize(
    "path, params, code",
    [
        ("/datasets/ccm3/quicklook.png", {"attribute": "gw"}, "invalid_query"),  # on lat only
        ("/datasets/ccm3/quicklook.png", {"attribute": "nosuch"}, "unknown_column"),
        ("/datasets/ccm3/quicklook.png", {"attribute": "temperature", "lev": "high"}, "invalid_query"),
        ("/datasets/ccm3/quicklook.png", {"attribute": "temperature", "time": "next week"}, "invalid_query"),
        ("/datasets/ccm3/quicklook.png", {}, "invalid_query"),
        ("/datasets/ccm3/timeseries.png", {"attribute": "gw"}, "invalid_query"),
    ],
)
def test_quicklook_errors_are_4xx_json(http, path, params, code) -> None:
    r = http.get(path, params=params)
    assert 400 <= r.status_code < 500
    assert r.json()["error"]["code"] == code


def test_dataset_page_shows_coverage_gaps_missing_variables_and_grid_mappings(tmp_path) -> None:
    import netCDF4
    import numpy as np

    import httpx

    from dstp.catalog.publish import publish
    from dstp.server import DstpServer
    from dstp.settings import Settings

    folder = tmp_path / "era"
    folder.mkdir()
    for month, days in ((1, 31), (2, 28), (4, 30)):  # March is missing; April lacks humidity
        with netCDF4.Dataset(folder / f"era_2021-{month:02d}.nc", "w") as nc:
            nc.createDimension("time", None)
            nc.createDimension("lat", 2)
            t = nc.createVariable("time", "i4", ("time",))
            t.units = f"hours since 2021-{month:02d}-01"
            t[:] = np.arange(days) * 24
            la = nc.createVariable("lat", "f4", ("lat",))
            la.units = "degrees_north"
            la[:] = [0.0, 1.0]
            crs = nc.createVariable("crs", "i4", ())
            crs.grid_mapping_name = "latitude_longitude"
            v = nc.createVariable("t2m", "f4", ("time", "lat"))
            v.units, v.grid_mapping = "K", "crs"
            v[:] = np.ones((days, 2))
            if month != 4:
                nc.createVariable("humidity", "f4", ("time", "lat"))[:] = np.ones((days, 2))
    publish(sorted(folder.glob("*.nc")), "era")
    settings = Settings(catalog_root=tmp_path, port=0, http_port=0, data_port=-1, udt_port=-1)
    with DstpServer(settings) as srv:
        assert srv.endpoints is not None
        page = httpx.get(f"http://{srv.endpoints.http}/datasets/era", timeout=30).text
        described = httpx.get(f"http://{srv.endpoints.http}/datasets/era.json", timeout=30).json()
    assert "2021-01-01" in page and "2021-02-28" in page and "2021-04-01" in page and "1 gap)" in page
    assert 'id="warnings"' in page and "1 gap(s) along" in page
    assert "NULL in era_2021-04.nc" in page
    assert 'id="grid-mappings"' in page and "latitude_longitude" in page
    assert [r["start"] for r in described["coverage"]] == [0, 59]
    humidity = next(a for a in described["attributes"] if a["name"] == "humidity")
    assert humidity["missing_from"] == ["era_2021-04.nc"]
