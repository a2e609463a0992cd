"""The ERDDAP facade refuses and answers requests as ERDDAP does (issue 32, items 5 and 6).

Each case was seen wrong: a number no time can be was a 500, a selector off the axis was clamped (to the
opposite edge for ``lat[(1e300)]``), a query matching nothing was an empty 200, ``max(time)-7days`` and
``(now-7days)`` were "not a number", ``units("UCUM")`` was refused, ``.dds?var[0:1:1]`` described the
whole dataset. ERDDAP's texts are those of ``EDDGrid.parseAxisBrackets`` and ``Calendar2`` (github.com/ERDDAP/
erddap); the values are checked against netCDF4/xarray reading the files.
"""

from __future__ import annotations

import csv
import datetime as dt
import io
import re
from pathlib import Path
from typing import Iterator

import cftime
import httpx
import netCDF4
import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings, strategies as st, HealthCheck

import dstp
from dstp.catalog.publish import publish
from dstp.erddap.dataset import ErddapDataset, parse_tabledap
from dstp.server import DstpServer
from dstp.settings import Settings

import builders  # tests/ is on sys.path (tests/conftest.py)
from facade_archives import Layout, model_archive, recent_series

STARTED = dt.datetime.now(dt.timezone.utc)


@pytest.fixture(scope="module")
def catalog(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("erddap-requests")
    publish(builders.calendar_series(root / "noleap", "noleap"), "noleap")
    publish(builders.calendar_series(root / "d360", "360_day"), "d360")
    publish(model_archive(root / "grid", Layout(calendar="360_day", lon="east", descending_lat=True)), "grid")
    publish(recent_series(root / "recent", STARTED), "recent")
    return root


@pytest.fixture(scope="module")
def server(catalog: Path) -> Iterator[DstpServer]:
    srv = DstpServer(Settings(catalog_root=catalog, port=0, http_port=0, data_port=-1, udt_port=-1, batch_rows=4096))
    srv.start()
    yield srv
    srv.stop()


@pytest.fixture()
def erddap(server: DstpServer) -> Iterator[httpx.Client]:
    assert server.endpoints is not None
    with httpx.Client(base_url=f"http://{server.endpoints.http}/erddap", timeout=30) as c:
        yield c


def rows(text: str, header_lines: int = 2) -> list[list[str]]:
    return list(csv.reader(io.StringIO(text)))[header_lines:]


def message(r: httpx.Response) -> str:
    m = re.fullmatch(r'Error \{\n    code=(\d+);\n    message="(.*)";\n\}\n', r.text, re.DOTALL)
    assert m is not None, r.text
    assert int(m[1]) == r.status_code
    return m[2].replace('\\"', '"')


def file_axis(catalog: Path, name: str) -> np.ndarray:
    with netCDF4.Dataset(sorted((catalog / "grid").glob("*.nc"))[0]) as nc:
        return np.asarray(nc[name][:], dtype="f8")


# -- item 5: numbers no time or value can be are 400s that name them -------------------------------------------

@pytest.mark.parametrize("query, named", [
    ("tabledap/d360.csv?time,x&time>=1e30", "time>=1e30"),
    ("tabledap/noleap.csv?time,x&time>=1e30", "time>=1e30"),
    ("tabledap/noleap.csv?time,x&time<-1e300", "time<-1e300"),
    ("tabledap/d360.csv?time,x&time>=inf", "time>=inf"),
    ("tabledap/d360.csv?time,x&time=NaN2", "time=NaN2"),
    ("tabledap/d360.csv?time,x&x>1e999", "x>1e999"),
    ("tabledap/d360.csv?time,x&x>inf", "x>inf"),
    ("tabledap/d360.csv?time,x&x<-Infinity", "x<-Infinity"),
    ("tabledap/d360.csv?time,x&x>nan", "x>nan"),
    ("tabledap/grid.csv?lat,tas&lat>1e999", "lat>1e999"),
    ("griddap/grid.csv?tas[0][(nan)][0]", 'Start="nan"'),
    ("griddap/grid.csv?tas[0][(inf)][0]", 'Start="inf"'),
    ("griddap/grid.csv?tas[(1e30)][0][0]", 'Start="1e30"'),
])
def test_numbers_no_value_can_be_are_refused_naming_them(erddap: httpx.Client, query: str, named: str) -> None:
    r = erddap.get("/" + query)
    assert r.status_code in (400, 404), (query, r.status_code, r.text)
    assert named in message(r)


def test_nan_still_tests_for_missing(erddap: httpx.Client, catalog: Path) -> None:
    with netCDF4.Dataset(catalog / "d360" / "series_360_day.nc") as nc:
        missing = int(np.ma.count_masked(nc["x"][:]))
    assert missing > 0
    for spelling in ("NaN", "nan"):
        assert len(rows(erddap.get(f"/tabledap/d360.csv?time,x&x={spelling}").text)) == missing


# -- item 6: selectors off the axis, indices, strides ----------------------------------------------------------

def test_a_value_off_the_axis_is_refused_as_erddap_refuses_it(erddap: httpx.Client, catalog: Path) -> None:
    lat = file_axis(catalog, "lat")  # north to south
    assert lat[0] > lat[-1]
    half = abs(lat[1] - lat[0]) / 2
    for text, role, side in (("1e300", "Start", "greater"), ("-1e300", "Start", "less"),
                             (repr(float(lat.max() + half * 1.5)), "Start", "greater")):
        r = erddap.get(f"/griddap/grid.csv?tas[0][({text})][0]")
        assert r.status_code == 404, r.text
        edge = lat.max() if side == "greater" else lat.min()
        margin = edge + half if side == "greater" else edge - half
        assert message(r) == (
            f'Not Found: Your query produced no matching results. Query error: For variable=tas axis#1=lat '
            f'Constraint="[({text})]": {role}="{text}" is {side} than the axis '
            f'{"maximum" if side == "greater" else "minimum"}={float(edge)!r} (and even {float(margin)!r}).')
    # within half a spacing of the edge: the edge itself, as ERDDAP's destinationCoarseMax allows
    near = float(lat.max() + half * 0.9)
    got = rows(erddap.get(f"/griddap/grid.csv?tas[0][({near!r})][0]").text)
    assert [float(r[1]) for r in got] == [float(lat.max())]
    # a stop off the axis is named as the stop
    r = erddap.get(f"/griddap/grid.csv?tas[0][({float(lat.min())!r}):({float(lat.max() + 100)!r})][0]")
    assert r.status_code == 404 and 'Stop="' in message(r)


def test_of_two_equally_near_values_the_larger_is_taken(erddap: httpx.Client, catalog: Path) -> None:
    lat = file_axis(catalog, "lat")
    middle = float((lat[1] + lat[2]) / 2)
    got = rows(erddap.get(f"/griddap/grid.csv?tas[0][({middle!r})][0]").text)
    assert [float(r[1]) for r in got] == [float(max(lat[1], lat[2]))]


@pytest.mark.parametrize("selector", ["[99]", "[-1]", "[0:1:99]", "[last+1]", "[1.5]"])
def test_an_index_outside_the_axis_is_a_400_naming_it(erddap: httpx.Client, selector: str) -> None:
    r = erddap.get(f"/griddap/grid.csv?tas[0]{selector}[0]")
    assert r.status_code == 400, r.text
    text = message(r)
    assert text.startswith("Bad Request: Query error: For variable=tas axis#1=lat") and "between 0 and 4" in text


def test_stride_and_order_errors_name_the_axis(erddap: httpx.Client) -> None:
    r = erddap.get("/griddap/grid.csv?tas[0][0:0:3][0]")
    assert r.status_code == 400 and "Stride=0 is invalid" in message(r)
    r = erddap.get("/griddap/grid.csv?tas[0][3:1][0]")
    assert r.status_code == 400 and "StartIndex=3 is greater than StopIndex=1" in message(r)


# -- item 6: no match is ERDDAP's 404 -------------------------------------------------------------------------

@pytest.mark.parametrize("ext", ["csv", "csvp", "json", "htmlTable", "nc", "ncCF", "parquet"])
def test_a_query_matching_nothing_is_erddaps_404(erddap: httpx.Client, ext: str) -> None:
    r = erddap.get(f"/tabledap/d360.{ext}?time,x&x>1e6")
    assert r.status_code == 404
    assert r.text == ('Error {\n    code=404;\n    message="Not Found: Your query produced no matching results. '
                      '(nRows = 0)";\n}\n')


# -- item 6: max(), min(), now and their arithmetic -------------------------------------------------------------

def series(catalog: Path, folder: str) -> tuple[np.ndarray, str, str, np.ndarray]:
    (path,) = (catalog / folder).glob("*.nc")
    with netCDF4.Dataset(path) as nc:
        return np.asarray(nc["time"][:], "f8"), nc["time"].units, nc["time"].calendar, nc["x"][:].filled(np.nan)


def labels_of(raw: np.ndarray, units: str, calendar: str) -> list[str]:
    return [d.strftime("%Y-%m-%dT%H:%M:%S") + "Z" for d in cftime.num2date(raw, units, calendar)]


@pytest.mark.parametrize("folder", ["noleap", "d360"])
@pytest.mark.parametrize("amount, unit", [(7, "days"), (1, "day"), (36, "hours"), (90, "minutes"), (2, "weeks")])
def test_max_time_minus_an_amount_selects_what_erddap_selects(erddap: httpx.Client, catalog: Path, folder: str,
                                                             amount: int, unit: str) -> None:
    raw, units, calendar, _ = series(catalog, folder)
    seconds = {"day": 86400, "days": 86400, "hours": 3600, "minutes": 60, "weeks": 7 * 86400}[unit] * amount
    # Both calendars count in hours since a Gregorian-valid date; ERDDAP's numbers keep the elapsed time, so
    # max(time) - n units is the records within that elapsed time of the last one.
    want = [label for label, r in zip(labels_of(raw, units, calendar), raw) if (raw.max() - r) * 3600 <= seconds]
    got = rows(erddap.get(f"/tabledap/{folder}.csv?time&time>=max(time)-{amount}{unit}").text)
    assert [r[0] for r in got] == want and 0 < len(want) < len(raw)


def test_min_and_max_of_a_value_with_a_number(erddap: httpx.Client, catalog: Path) -> None:
    raw, units, calendar, x = series(catalog, "d360")
    low = np.nanmin(x)
    want = sorted(float(v) for v in x[np.isfinite(x)] if v <= low + 1.5)
    got = sorted(float(r[0]) for r in rows(erddap.get("/tabledap/d360.csv?x&x<=min(x)+1.5").text))
    assert got == want and len(want) >= 1
    r = erddap.get("/tabledap/d360.csv?x&x<=min(x)+1.5days")
    assert r.status_code == 400 and 'Invalid "min()" constraint' in message(r)


def test_now_selects_around_the_time_of_the_request(erddap: httpx.Client, catalog: Path) -> None:
    with netCDF4.Dataset(catalog / "recent" / "recent.nc") as nc:
        times = cftime.num2date(nc["time"][:], nc["time"].units, "standard", only_use_cftime_datetimes=False)
    seconds = np.array([t.replace(tzinfo=dt.timezone.utc).timestamp() for t in times])
    before = dt.datetime.now(dt.timezone.utc).timestamp()
    picked = rows(erddap.get("/griddap/recent.csv?level[(now-7days)]").text)
    tail = rows(erddap.get("/tabledap/recent.csv?time&time>=now-2days").text)
    after = dt.datetime.now(dt.timezone.utc).timestamp()
    # ERDDAP's now is the next whole second; the answer is the nearest hour to some instant within the requests.
    candidates = {str(np.datetime64(int(seconds[np.argmin(np.abs(seconds - (t - 7 * 86400)))]), "s")) + "Z"
                  for t in np.linspace(np.floor(before) + 1, np.floor(after) + 1, 50)}
    assert len(picked) == 1 and picked[0][0] in candidates
    low = int(np.sum(seconds >= np.floor(after) + 1 - 2 * 86400))
    high = int(np.sum(seconds >= np.floor(before) + 1 - 2 * 86400))
    assert low <= len(tail) <= high and len(tail) > 24


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(amount=st.integers(0, 400), unit=st.sampled_from(["seconds", "minutes", "hours", "days", "weeks", "months",
                                                           "years", "day", "month", "year"]),
       sign=st.sampled_from(["-", "+"]),
       now=st.datetimes(dt.datetime(1990, 1, 1), dt.datetime(2030, 1, 1), timezones=st.just(dt.timezone.utc)))
def test_now_arithmetic_is_erddaps(server: DstpServer, amount: int, unit: str, sign: str, now: dt.datetime) -> None:
    assert server.endpoints is not None
    with dstp.connect(server.endpoints.grpc) as client:
        ds = ErddapDataset(client.describe("recent"))
    sql = parse_tabledap(f"time&time>=now{sign}{amount}{unit}", ds, now=now).sql
    got = re.search(r"timestamp '([^']+)'", sql)
    assert got is not None, sql
    # ERDDAP: now rounded up to the next second, then whole units added (months and years as calendar months).
    base = pd.Timestamp(now.replace(microsecond=0)) + pd.Timedelta(seconds=1)
    n = amount if sign == "+" else -amount
    offsets = {"seconds": pd.Timedelta(seconds=n), "minutes": pd.Timedelta(minutes=n),
               "hours": pd.Timedelta(hours=n), "days": pd.Timedelta(days=n), "day": pd.Timedelta(days=n),
               "weeks": pd.Timedelta(weeks=n), "months": pd.DateOffset(months=n), "month": pd.DateOffset(months=n),
               "years": pd.DateOffset(years=n), "year": pd.DateOffset(years=n)}
    want = (base + offsets[unit]).tz_convert(None)
    assert pd.Timestamp(got[1]) == want


def test_now_in_a_bad_form_is_erddaps_message(erddap: httpx.Client) -> None:
    r = erddap.get("/tabledap/recent.csv?time&time>=now-7fortnights")
    assert r.status_code == 400
    assert 'Invalid "now" constraint: "now-7fortnights"' in message(r)


# -- item 6: units("UCUM") ------------------------------------------------------------------------------------

def test_units_ucum_writes_the_units_in_ucum(erddap: httpx.Client) -> None:
    plain = erddap.get("/tabledap/grid.csv?lat,lon,tas&lat>=64").text.splitlines()[1]
    ucum = erddap.get('/tabledap/grid.csv?lat,lon,tas&lat>=64&units("UCUM")').text.splitlines()[1]
    assert plain == "degrees_north,degrees_east,K"
    assert ucum == "deg{north},deg{east},K"
    assert erddap.get('/tabledap/grid.csv?lat&lat>=64&units("UDUNITS")').text.splitlines()[1] == "degrees_north"
    r = erddap.get('/tabledap/grid.csv?lat&units("SI")')
    assert r.status_code == 400 and "UDUNITS" in message(r)


# -- item 6: .dds describes what the same query returns --------------------------------------------------------

def test_dds_honours_its_constraint(erddap: httpx.Client) -> None:
    whole = erddap.get("/griddap/grid.dds").text
    assert "Float32 tas[time = 6][lat = 5][lon = 6];" in whole
    part = erddap.get("/griddap/grid.dds?tas[0:1:1][0:2:4][(205.0)]").text
    assert "Float32 tas[time = 2][lat = 3][lon = 1];" in part
    assert "Float64 lat[lat = 3];" in part and "rank" not in part
    axis = erddap.get("/griddap/grid.dds?lat[1:3]").text
    assert axis == "Dataset {\n  Float64 lat[lat = 3];\n} grid;\n"
    table = erddap.get("/tabledap/d360.dds?time,x&x>0").text
    assert table == "Dataset {\n  Sequence {\n    Float64 time;\n    Float64 x;\n  } s;\n} d360;\n"


# -- attribute fidelity: every attribute of the files reaches .das ----------------------------------------------

#: How a file stores values (the answers hold decoded values), and times' own units/calendar (ERDDAP's seconds).
NOT_CARRIED = {"_FillValue", "missing_value", "scale_factor", "add_offset"}


def das_blocks(text: str) -> dict[str, dict[str, str]]:
    blocks: dict[str, dict[str, str]] = {}
    for name, body in re.findall(r"\n +(\w+) \{\n((?: +[A-Z][^\n]*\n)*) +\}", text):
        blocks[name] = {k: v.replace('\\"', '"') for k, v in
                        re.findall(r'(?:String|Float64) (\w+) "?(.*?)"?;$', body, re.MULTILINE)}
    return blocks


def text_of(value: object) -> str:
    array = np.asarray(value)
    if array.ndim and array.size > 1:
        return " ".join(text_of(v) for v in array)
    value = array.item() if array.ndim == 0 or array.size == 1 else value
    return repr(float(value)) if isinstance(value, float) else str(value)


@pytest.mark.parametrize("protocol", ["griddap", "tabledap"])
def test_das_carries_every_attribute_of_the_files(erddap: httpx.Client, catalog: Path, protocol: str) -> None:
    blocks = das_blocks(erddap.get(f"/{protocol}/grid.das").text)
    with netCDF4.Dataset(sorted((catalog / "grid").glob("*.nc"))[0]) as nc:
        expected = {name: {k: text_of(nc[name].getncattr(k)) for k in nc[name].ncattrs() if k not in NOT_CARRIED}
                    for name in ("lat", "lon", "tas", "time")}
        globals_ = {k: text_of(nc.getncattr(k)) for k in nc.ncattrs()}
    for name, attrs in expected.items():
        if name == "time":  # ERDDAP's seconds since 1970 (no calendar): the file's units and calendar do not apply
            attrs = {k: v for k, v in attrs.items() if k not in ("units", "calendar")}
        got = blocks[name]
        assert {k: got.get(k) for k in attrs} == attrs, name
    assert {k: blocks["NC_GLOBAL"].get(k) for k in globals_} == globals_
