"""ERDDAP advanced search (issue 35, item 5): every parameter ERDDAP takes, against an oracle read from the files.

Before, ``/erddap/search/advanced.csv`` honoured only searchFor, protocol, page and itemsPerPage and silently
ignored the rest, so ``minLon=…&maxLon=…`` or ``standard_name=…`` listed datasets with no data there: a wrong
answer. The oracle here opens each dataset's files with xarray (each file on its own, decoded), takes the
least and greatest value of each coordinate and the attributes, and applies ERDDAP's rule
(``Erddap.doAdvancedSearch``): a dataset is left out when a min bound lies past its greatest value or a max
bound before its least, or when it has no such axis; a category value must be one of the dataset's, both
made lower case and file-name safe.
"""

from __future__ import annotations

import datetime as dt
import io
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

import cftime
import httpx
import netCDF4
import numpy as np
import pandas as pd
import pytest
import xarray as xr
from hypothesis import HealthCheck, given, settings, strategies as st

import erddapy
from dstp.catalog.publish import publish
from dstp.errors import QueryError
from dstp.http.erddap_search import parse_search
from dstp.server import DstpServer

from builders import buoys
from http_fixtures import web_settings

# -- the catalog: grids on 0…360 and −180…180, descending latitudes, three calendars, no time, no lat/lon --------


def grid(folder: Path, *, lon: np.ndarray, lat: np.ndarray, times: list[str] | None, calendar: str = "standard",
         variables: dict[str, dict[str, str]], attrs: dict[str, str]) -> list[Path]:
    """Write one file of ``variables(time, lat, lon)``, without the axes whose values are not given."""
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{folder.name}.nc"
    with netCDF4.Dataset(path, "w", format="NETCDF4") as nc:
        nc.setncatts({"Conventions": "CF-1.8", "title": f"Advanced search case {folder.name}", **attrs})
        dims: list[str] = []
        if times is not None:
            nc.createDimension("time", len(times))
            t = nc.createVariable("time", "f8", ("time",))
            t.units, t.calendar, t.standard_name, t.axis = "days since 1990-01-01", calendar, "time", "T"
            t[:] = cftime.date2num([cftime.datetime.strptime(x, "%Y-%m-%d", calendar=calendar) for x in times],
                                   t.units, calendar)
            dims.append("time")
        if lat.size:
            nc.createDimension("lat", lat.size)
            y = nc.createVariable("lat", "f8", ("lat",))
            y.units, y.standard_name, y.axis = "degrees_north", "latitude", "Y"
            y[:] = lat
            dims.append("lat")
        if lon.size:
            nc.createDimension("lon", lon.size)
            x = nc.createVariable("lon", "f8", ("lon",))
            x.units, x.standard_name, x.axis = "degrees_east", "longitude", "X"
            x[:] = lon
            dims.append("lon")
        shape = tuple(len(nc.dimensions[d]) for d in dims)
        for name, var_attrs in variables.items():
            v = nc.createVariable(name, "f4", tuple(dims))
            v.setncatts({"units": "K", **var_attrs})
            v[:] = np.arange(int(np.prod(shape)), dtype="f4").reshape(shape)
    return [path]


def _catalog(root: Path) -> None:
    sst = {"standard_name": "sea_surface_temperature", "long_name": "Sea Surface Temperature",
           "ioos_category": "Temperature"}
    publish(grid(root / "pacific_east", lon=np.arange(200.0, 215.0, 2.5), lat=np.arange(60.0, 50.0, -2.0),
                 times=["2000-02-27", "2000-02-30", "2000-03-02"], calendar="360_day",
                 variables={"sst": sst}, attrs={"institution": "NOAA NCEI", "keywords":
                                                "Earth Science > Oceans > Ocean Temperature, sst"}),
            "pacific_east")
    publish(grid(root / "pacific_west", lon=np.arange(-160.0, -145.0, 2.5), lat=np.arange(-20.0, -10.0, 2.0),
                 times=["1995-06-01", "1995-12-31"], calendar="standard",
                 variables={"tas": {"standard_name": "air_temperature", "long_name": "Near-Surface Air Temperature",
                                    "ioos_category": "Meteorology"}},
                 attrs={"institution": "Met Office", "keywords": "air temperature, climate"}), "pacific_west")
    publish(grid(root / "atlantic", lon=np.arange(-40.0, -10.0, 5.0), lat=np.arange(30.0, 60.0, 5.0),
                 times=["2010-01-01", "2011-02-28", "2012-12-31"], calendar="noleap",
                 variables={"sst": sst, "sss": {"standard_name": "sea_surface_salinity",
                                                "long_name": "Sea Surface Salinity", "ioos_category": "Salinity"}},
                 attrs={"institution": "NOAA NCEI", "keywords": "sst, salinity"}), "atlantic")
    publish(grid(root / "bathymetry", lon=np.arange(0.0, 360.0, 30.0), lat=np.arange(80.0, -90.0, -20.0),
                 times=None, variables={"depth": {"standard_name": "sea_floor_depth_below_geoid",
                                                  "long_name": "Depth", "ioos_category": "Bathymetry"}},
                 attrs={"institution": "GEBCO"}), "bathymetry")
    publish(grid(root / "gauge", lon=np.empty(0), lat=np.empty(0), times=["2005-01-01", "2005-01-31"],
                 variables={"level": {"long_name": "Water Level", "standard_name": "sea_surface_height"}},
                 attrs={"institution": "Met Office"}), "gauge")
    publish(grid(root / "zonal", lon=np.empty(0), lat=np.arange(85.0, -90.0, -10.0), times=["1998-01-16", "1998-12-16"],
                 calendar="noleap", variables={"ua": {"standard_name": "eastward_wind",
                                                      "long_name": "Zonal Mean Eastward Wind"}},
                 attrs={"institution": "Met Office"}), "zonal")  # a zonal mean: latitudes, no longitudes
    publish(buoys(root / "buoys", stations=4, per_station=6, start="1990-01-01", days=330.0), "buoys")


@dataclass(frozen=True)
class Truth:
    """What the files of one dataset hold, read by xarray: extents, (year, …, second) labels, category values."""

    lon: tuple[float, float] | None
    lat: tuple[float, float] | None
    time: tuple[tuple[int, ...], tuple[int, ...]] | None
    facets: dict[str, set[str]]


def safe(text: str) -> str:
    """ERDDAP's category form, written from its definition (String2.modifyToBeFileNameSafe + toLowerCase)."""
    return re.sub("_+", "_", "".join(c if re.fullmatch(r"[A-Za-z0-9_.\-]", c) else "_" for c in text)).lower()


def _label(value: object) -> tuple[int, ...]:
    if isinstance(value, np.datetime64):
        value = pd.Timestamp(value).to_pydatetime()
    return tuple(getattr(value, k) for k in ("year", "month", "day", "hour", "minute", "second"))


def truth(folder: Path) -> Truth:
    lon = lat = time = None
    facets: dict[str, set[str]] = {k: set() for k in ("cdm_data_type", "institution", "ioos_category", "keywords",
                                                      "long_name", "standard_name", "variableName")}
    for path in sorted(folder.glob("*.nc")):
        with xr.open_dataset(path, decode_times=xr.coders.CFDatetimeCoder(use_cftime=True)) as ds:
            for name, var in ds.variables.items():
                std = var.attrs.get("standard_name", "")
                values = var.values.reshape(-1)
                if std == "longitude":
                    lon = (float(np.nanmin(values)), float(np.nanmax(values)))
                elif std == "latitude":
                    lat = (float(np.nanmin(values)), float(np.nanmax(values)))
                elif std == "time":
                    labels = sorted(_label(v) for v in values)
                    time = (labels[0], labels[-1])
                facets["variableName"].add(str(name))
                for key in ("ioos_category", "long_name", "standard_name"):
                    if var.attrs.get(key):
                        facets[key].add(safe(var.attrs[key]))
            feature = ds.attrs.get("featureType", "")
            facets["cdm_data_type"].add(safe(feature) if feature else "grid")
            if ds.attrs.get("institution"):
                facets["institution"].add(safe(ds.attrs["institution"]))
            for k in ds.attrs.get("keywords", "").split(","):
                k = k.strip().lower()
                if k:
                    facets["keywords"].add(safe(k.removeprefix("earth science > ")))
    return Truth(lon, lat, time, facets)


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, dict[str, Truth]]]:
    root = tmp_path_factory.mktemp("advanced-search")
    _catalog(root)
    truths = {p.name: truth(p) for p in sorted(root.iterdir()) if p.is_dir()}
    srv = DstpServer(web_settings(root))
    srv.start()
    assert srv.endpoints is not None
    yield f"http://{srv.endpoints.http}", truths
    srv.stop()


# -- the oracle ---------------------------------------------------------------------------------------------------


def _instant(text: str) -> tuple[int, ...]:
    if re.fullmatch(r"-?\d+(\.\d*)?", text):  # seconds since 1970-01-01T00:00:00Z
        when = dt.datetime.fromtimestamp(float(text), dt.timezone.utc)
    else:
        when = dt.datetime.fromisoformat(text.replace("Z", "+00:00"))
    when = when.replace(tzinfo=dt.timezone.utc) if when.tzinfo is None else when.astimezone(dt.timezone.utc)
    return (when.year, when.month, when.day, when.hour, when.minute, when.second)


def expected(truths: dict[str, Truth], query: dict[str, str]) -> set[str]:
    def keep(t: Truth) -> bool:
        for axis, low, high in (("lon", "minLon", "maxLon"), ("lat", "minLat", "maxLat"),
                                ("time", "minTime", "maxTime")):
            lo, hi = query.get(low), query.get(high)
            if lo is None and hi is None:
                continue
            extent = getattr(t, axis)
            if extent is None:
                return False
            convert = _instant if axis == "time" else float
            if lo is not None and convert(lo) > extent[1]:
                return False
            if hi is not None and convert(hi) < extent[0]:
                return False
        return all(safe(query[k]) in t.facets[k] for k in t.facets if k in query)

    return {name for name, t in truths.items() if keep(t)}


def found(base: str, query: dict[str, str]) -> set[str] | None:
    """Return the ids a search lists, None for ERDDAP's 'no matching results' (404)."""
    answer = httpx.get(f"{base}/erddap/search/advanced.csv", params={"page": "1", "itemsPerPage": "1000", **query},
                       timeout=30)
    if answer.status_code == 404:
        assert "Your query produced no matching results" in answer.text
        return None
    assert answer.status_code == 200, answer.text
    return set(pd.read_csv(io.StringIO(answer.text))["Dataset ID"])


def check(base: str, truths: dict[str, Truth], query: dict[str, str]) -> None:
    want = expected(truths, query)
    assert found(base, query) == (want or None), query


# -- the tests ----------------------------------------------------------------------------------------------------


def test_the_catalog_is_what_the_cases_need(served: tuple[str, dict[str, Truth]]) -> None:
    _, truths = served
    assert truths["pacific_east"].lon == (200.0, 212.5) and truths["pacific_west"].lon == (-160.0, -147.5)
    assert truths["bathymetry"].time is None and truths["gauge"].lat is None and truths["gauge"].time is not None
    assert truths["zonal"].lon is None and truths["zonal"].lat == (-85.0, 85.0)
    assert truths["pacific_east"].time == ((2000, 2, 27, 0, 0, 0), (2000, 3, 2, 0, 0, 0))  # 360_day: 02-30 inside


CASES = [
    {"minLon": "-170", "maxLon": "-150"},  # ERDDAP compares the numbers: pacific_east (200…212.5) is not found
    {"minLon": "190", "maxLon": "205"},  # pacific_east and the 0…330 bathymetry
    {"minLon": "-180", "maxLon": "360"},  # ERDDAP's advice: every dataset with longitudes
    {"minLat": "55"},  # open bound
    {"maxLat": "-15", "minLat": "-85"},  # descending latitudes
    {"minTime": "2000-02-29", "maxTime": "2000-03-01"},  # 360_day 02-30 lies between
    {"minTime": "2011-03-01T00:00:00Z"},  # noleap atlantic
    {"maxTime": "1990-06-01"},  # buoys only; bathymetry (no time) left out
    {"minTime": "946684800", "maxTime": "1104537600"},  # seconds since 1970: 2000-01-01 … 2005-01-01
    {"standard_name": "sea_surface_temperature"},
    {"long_name": "Sea Surface Temperature"},  # ERDDAP's file-name-safe form matches the words too
    {"ioos_category": "temperature", "institution": "noaa_ncei"},
    {"keywords": "oceans > ocean temperature"},
    {"keywords": "climate", "minLon": "-150"},
    {"variableName": "sss"},
    {"cdm_data_type": "TimeSeries"},
    {"cdm_data_type": "grid", "minTime": "2000-01-01", "maxTime": "2006-01-01"},
    {"institution": "Met Office", "minLat": "-30"},  # gauge has no latitude: left out; zonal has one
    {"minLat": "-30", "maxLat": "-25"},  # zonal (latitudes only) and the global ones
    {"minLat": "-30", "minLon": "-170"},  # zonal has no longitude: left out
    {"standard_name": "no_such_name"},
]


@pytest.mark.parametrize("query", CASES, ids=lambda q: "&".join(f"{k}={v}" for k, v in q.items()))
def test_advanced_search_lists_what_the_files_hold(served: tuple[str, dict[str, Truth]], query: dict[str, str]) -> None:
    base, truths = served
    check(base, truths, query)


_LON = st.one_of(st.none(), st.sampled_from([-200.0, -180.0, -160.0, -150.0, -147.5, -100.0, -40.0, -10.0, 0.0, 10.0,
                                              150.0, 200.0, 212.5, 213.0, 330.0, 360.0]), st.floats(-200, 400))
_LAT = st.one_of(st.none(), st.sampled_from([-90.0, -80.0, -20.0, -12.0, 0.0, 30.0, 52.0, 60.0, 80.0]),
                 st.floats(-90, 90))
_TIME = st.one_of(st.none(), st.dates(dt.date(1985, 1, 1), dt.date(2015, 1, 1)).map(dt.date.isoformat),
                  st.sampled_from(["2000-02-27", "2000-03-02", "1995-12-31", "2012-12-31", "1990-11-26"]))


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(lon=st.tuples(_LON, _LON), lat=st.tuples(_LAT, _LAT), time=st.tuples(_TIME, _TIME))
def test_any_box_lists_the_datasets_whose_extent_overlaps_it(served: tuple[str, dict[str, Truth]],
                                                            lon: tuple[float | None, float | None],
                                                            lat: tuple[float | None, float | None],
                                                            time: tuple[str | None, str | None]) -> None:
    base, truths = served
    query: dict[str, str] = {}
    for (low, high), (a, b), form in ((("minLon", "maxLon"), lon, repr), (("minLat", "maxLat"), lat, repr),
                                      (("minTime", "maxTime"), time, str)):
        if a is not None and b is not None:
            a, b = sorted((a, b))  # type: ignore[type-var]
        if a is not None:
            query[low] = form(a)
        if b is not None:
            query[high] = form(b)
    check(base, truths, query)


def test_erddapy_advanced_search_returns_exactly_the_matching_ids(served: tuple[str, dict[str, Truth]]) -> None:
    base, truths = served
    e = erddapy.ERDDAP(server=f"{base}/erddap", protocol="tabledap")
    url = e.get_search_url(response="csv", min_lon=-60.0, max_lon=-5.0, min_lat=20.0, max_lat=70.0,
                           min_time="2011-01-01T00:00:00Z", max_time="2011-12-31T00:00:00Z",
                           standard_name="sea_surface_temperature")
    assert "minLon=-60.0" in url and "minTime=1293840000.0" in url and "maxLat=70.0" in url
    assert set(pd.read_csv(url)["Dataset ID"]) == expected(truths, {
        "minLon": "-60", "maxLon": "-5", "minLat": "20", "maxLat": "70", "minTime": "2011-01-01T00:00:00Z",
        "maxTime": "2011-12-31T00:00:00Z", "standard_name": "sea_surface_temperature"}) == {"atlantic"}
    # what erddapy sends for every parameter it is not given, (ANY), is no constraint
    everything = pd.read_csv(e.get_search_url(response="csv"))
    assert set(everything["Dataset ID"]) == set(truths)
    west = pd.read_csv(e.get_search_url(response="csv", search_for="temperature", min_lon=-170, max_lon=-150,
                                        institution="Met_Office"))  # ERDDAP's category form
    assert set(west["Dataset ID"]) == {"pacific_west"}


def test_now_relative_times_count_from_the_request(served: tuple[str, dict[str, Truth]]) -> None:
    base, truths = served
    now = dt.datetime.now(dt.timezone.utc)
    newest = max(t.time[1] for t in truths.values() if t.time is not None)
    days = (now.date() - dt.date(*newest[:3])).days  # every dataset ends before today
    for n in (days - 2, days + 2, days + 400):  # two days either side of the newest end: no clock race
        since = (now - dt.timedelta(days=n)).isoformat()
        want = expected(truths, {"minTime": since})
        assert found(base, {"minTime": f"now-{n}days"}) == (want or None)
        assert found(base, {"minTime": f"now-{n}day"}) == (want or None)  # ERDDAP takes singular units too
    assert expected(truths, {"minTime": (now - dt.timedelta(days=days + 2)).isoformat()}) == {"atlantic"}
    assert found(base, {"maxTime": "now", "minTime": "1990-01-01"}) == {n for n, t in truths.items() if t.time}


@pytest.mark.parametrize("query, words", [
    ({"minlon": "10"}, ["'minlon'", "search/advanced has no parameter"]),
    ({"bbox": "0,0,10,10"}, ["'bbox'"]),
    ({"minLon": "ten"}, ["minLon='ten'", "not a number"]),
    ({"maxLat": "nan"}, ["maxLat='nan'"]),
    ({"minLon": "20", "maxLon": "10"}, ["minLon='20' > maxLon='10'"]),
    ({"minTime": "2000-13-01"}, ["minTime='2000-13-01'", "is not a time"]),
    ({"maxTime": "yesterday"}, ["maxTime='yesterday'"]),
    ({"minTime": "now-7fortnights"}, ["minTime='now-7fortnights'"]),
    ({"minTime": "2001-01-01", "maxTime": "2000-01-01"}, ["minTime='2001-01-01' is after maxTime='2000-01-01'"]),
    ({"protocol": "WMS"}, ["protocol='WMS'"]),
])
def test_unknown_parameters_and_malformed_values_are_refused(served: tuple[str, dict[str, Truth]],
                                                             query: dict[str, str], words: list[str]) -> None:
    base, _ = served
    answer = httpx.get(f"{base}/erddap/search/advanced.csv", params=query, timeout=30)
    assert answer.status_code == 400 and answer.text.startswith("Error {\n    code=400;"), answer.text
    assert all(w in answer.text for w in words), answer.text


def test_the_simple_search_refuses_advanced_parameters(served: tuple[str, dict[str, Truth]]) -> None:
    base, _ = served
    answer = httpx.get(f"{base}/erddap/search/index.csv", params={"searchFor": "sst", "minLon": "0"}, timeout=30)
    assert answer.status_code == 400 and "ask search/advanced for minLon" in answer.text
    twice = httpx.get(f"{base}/erddap/search/advanced.csv?minLon=0&minLon=5", timeout=30)
    assert twice.status_code == 400 and "minLon is given twice" in twice.text


def test_paging_still_pages_the_matches(served: tuple[str, dict[str, Truth]]) -> None:
    base, truths = served
    query = {"minLon": "-180", "maxLon": "360"}
    want = sorted(expected(truths, query))
    pages = []
    for page in (1, 2, 3):
        answer = httpx.get(f"{base}/erddap/search/advanced.csv", params={**query, "page": page, "itemsPerPage": 2},
                           timeout=30)
        pages.append(list(pd.read_csv(io.StringIO(answer.text))["Dataset ID"]) if answer.status_code == 200 else [])
    assert sorted(sum(pages, [])) == want and [len(p) for p in pages] == [2, 2, len(want) - 4]


# ERDDAP's Calendar2.nowStringToZdt: "now" is the next whole second; months and years are calendar steps
# (java.time plusMonths keeps the day, or the month's last day), the others fixed lengths; "+" may come as " ".
NOW = dt.datetime(2024, 3, 31, 10, 0, 0, 500_000, tzinfo=dt.timezone.utc)


@pytest.mark.parametrize("text, want", [
    ("now", (2024, 3, 31, 10, 0, 1, 0)),
    ("NOW-7Days", (2024, 3, 24, 10, 0, 1, 0)),
    ("now-1month", (2024, 2, 29, 10, 0, 1, 0)),  # 31 March less a month: the last day of a leap February
    ("now-13months", (2023, 2, 28, 10, 0, 1, 0)),
    ("now-1year", (2023, 3, 31, 10, 0, 1, 0)),
    ("now+2hours", (2024, 3, 31, 12, 0, 1, 0)),
    ("now 3days", (2024, 4, 3, 10, 0, 1, 0)),  # an unencoded "+" arrives as a space
    ("now-90", (2024, 3, 31, 9, 58, 31, 0)),  # no units: seconds
    ("now-days", (2024, 3, 30, 10, 0, 1, 0)),  # no number: one
    ("2000-01-01T00:00:00+02:00", (1999, 12, 31, 22, 0, 0, 0)),
    ("2000-02-01", (2000, 2, 1, 0, 0, 0, 0)),
    ("951782400", (2000, 2, 29, 0, 0, 0, 0)),
    ("-86400.5", (1969, 12, 30, 23, 59, 59, 500_000)),
])
def test_time_bounds_are_read_as_erddap_reads_them(text: str, want: tuple[int, ...]) -> None:
    assert parse_search([("minTime", text)], "advanced", NOW).time == (want, None)


@pytest.mark.parametrize("text", ["now-", "now-7fortnights", "now*2days", "2000-02-30", "2000-1-1", "1e999", ""])
def test_malformed_time_bounds_are_refused(text: str) -> None:
    if not text:  # empty is no bound, as (ANY) is
        assert parse_search([("maxTime", text), ("minTime", "(any)")], "advanced", NOW).time == (None, None)
        return
    with pytest.raises(QueryError, match=re.escape(f"maxTime={text!r} is not a time")):
        parse_search([("maxTime", text)], "advanced", NOW)
