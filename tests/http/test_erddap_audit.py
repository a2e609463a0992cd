"""The ERDDAP facade's numbers and texts, checked against the source files and erddapy's own conversions.

Two findings of an audit, each checked end to end on a server of its own:

* a time has ONE number in every answer (docs/erddap.md, "Times"): on noleap the seconds since 1970 of the
  date's label as erddapy (``parse_dates``) counts them, so a number read from a tabledap ``.nc`` finds its
  record again as a constraint or a griddap selector; on 360_day the axis's own units and calendar, as
  ``.das`` says. The oracle is cftime on the source file and erddapy's conversion, never our output.
* a missing (NULL) text is an empty cell and a real text ``NaN`` stays a text in ``.csv``/``.csvp``/
  ``.htmlTable`` (``.json`` has ``null``), while a missing number is ``NaN`` as ERDDAP writes it. The oracle
  is the source file read with netCDF4 (an empty text is a missing one, ERDDAP's convention too), and the
  answers are parsed with Python's csv module and pandas.
"""

from __future__ import annotations

import csv
import html
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
import xarray as xr

import erddapy
from erddapy.core.url import parse_dates
from dstp.catalog.publish import publish
from dstp.server import DstpServer
from dstp.settings import Settings

import builders  # tests/ is on sys.path (tests/conftest.py)

#: Texts of the text dataset, one per station; "" is a missing text (dstp reads it as NULL, ERDDAP as missing).
LABELS = ["NaN", "plain", "a,b", "", 'q"t', "nan"]
#: A number per station, NaN where missing.
VALUES = [1.5, np.nan, 2.25, np.nan, -3.0, 4.0]


def _text_dataset(folder: Path) -> list[Path]:
    """One variable-length text, ``label``, with a real ``NaN``, a missing text and texts CSV must quote."""
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "texts.nc"
    with netCDF4.Dataset(path, "w", format="NETCDF4") as nc:
        nc.title = "Texts that look like missing values"
        nc.createDimension("station", len(LABELS))
        s = nc.createVariable("station", "i4", ("station",))
        s[:] = np.arange(len(LABELS))
        label = nc.createVariable("label", str, ("station",))
        for i, text in enumerate(LABELS):
            label[i] = text
        x = nc.createVariable("x", "f8", ("station",), fill_value=-999.0)
        x.units = "K"
        x[:] = np.where(np.isnan(VALUES), -999.0, VALUES)
    return [path]


@pytest.fixture(scope="module")
def audit_catalog(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("erddap-audit")
    publish(builders.calendar_series(root / "noleap", "noleap"), "noleap")  # crosses 28 February 2000
    publish(builders.calendar_series(root / "d360", "360_day"), "d360")  # crosses 30 February 2000
    publish(_text_dataset(root / "texts"), "texts")
    return root


@pytest.fixture(scope="module")
def audit_url(audit_catalog: Path) -> Iterator[str]:
    settings = Settings(catalog_root=audit_catalog, port=0, http_port=0, data_port=-1, udt_port=-1, batch_rows=4096)
    srv = DstpServer(settings)
    srv.start()
    assert srv.endpoints is not None and srv.endpoints.http
    yield f"http://{srv.endpoints.http}/erddap"
    srv.stop()


@pytest.fixture()
def erddap(audit_url: str) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=audit_url, timeout=30) as c:
        yield c


def source_times(folder: Path) -> tuple[np.ndarray, str, str, list[str]]:
    """Return a series file's raw times, units, calendar, and the dates' labels as cftime decodes them."""
    (path,) = folder.glob("*.nc")
    with netCDF4.Dataset(path) as nc:
        t = nc["time"]
        raw, units, calendar = np.asarray(t[:], dtype="f8"), t.units, t.calendar
    labels = [d.strftime("%Y-%m-%dT%H:%M:%S") for d in cftime.num2date(raw, units, calendar)]
    return raw, units, calendar, labels


def das_time(text: str) -> tuple[str, str, list[float]]:
    """Return the units, calendar (or "") and actual_range of ``time`` in a tabledap .das."""
    block = re.search(r"\n    time \{\n(.*?)\n    \}", text, re.DOTALL)
    assert block is not None, text
    attrs = dict(re.findall(r'(?:String|Float64) (\w+) "?([^";]*)"?;', block[1]))
    return attrs["units"], attrs.get("calendar", ""), [float(v) for v in attrs["actual_range"].split(",")]


def nc_times(content: bytes) -> tuple[np.ndarray, str, str]:
    """Return the raw numbers, units and calendar of ``time`` in a netCDF answer (no decoding)."""
    with netCDF4.Dataset("answer.nc", memory=content) as nc:
        t = nc["time"]
        t.set_auto_mask(False)
        return np.asarray(t[:], dtype="f8"), t.units, t.getncattr("calendar")


def csv_rows(text: str, header_lines: int = 2) -> list[list[str]]:
    return list(csv.reader(io.StringIO(text)))[header_lines:]


# -- one number per time ------------------------------------------------------------------------------------

def test_noleap_times_have_erddapys_numbers_in_every_answer(erddap: httpx.Client, audit_catalog: Path,
                                                            audit_url: str) -> None:
    _, _, calendar, labels = source_times(audit_catalog / "noleap")
    assert calendar == "noleap" and any(l.startswith("2000-02-28") for l in labels)
    # What erddapy sends for each label (pandas' seconds since 1970): the one number a time has here.
    numbers = np.array([parse_dates(label + "Z") for label in labels])

    _, das_calendar, actual_range = das_time(erddap.get("/tabledap/noleap.das").text)
    assert actual_range == [numbers.min(), numbers.max()] and das_calendar == ""

    for ext in ("nc", "ncCF"):
        answer = erddap.get(f"/tabledap/noleap.{ext}?time,x")
        assert answer.status_code == 200, answer.text
        raw, units, nc_calendar = nc_times(answer.content)
        np.testing.assert_array_equal(raw, numbers, err_msg=f".{ext} stores other numbers than .das and erddapy "
                                      f"(units {units!r}, calendar {nc_calendar!r})")
        # …and still decodes to the dates' labels, with cftime and with xarray.
        decoded = cftime.num2date(raw, units, nc_calendar)
        assert [d.strftime("%Y-%m-%dT%H:%M:%S") for d in decoded] == labels
        ds = xr.open_dataset(xr.backends.NetCDF4DataStore(netCDF4.Dataset("answer.nc", memory=answer.content)))
        try:
            assert [str(v)[:19] for v in ds["time"].values] == labels
        finally:
            ds.close()

    # A number read from the .nc, used as a constraint and as a griddap selector, finds its record again:
    # the first record of March, after the leap day noleap has not got.
    i = next(k for k, label in enumerate(labels) if label >= "2000-03-01")
    raw, _, _ = nc_times(erddap.get("/tabledap/noleap.nc?time").content)
    rows = csv_rows(erddap.get(f"/tabledap/noleap.csv?time&time={float(raw[i])!r}").text)
    assert rows == [[labels[i] + "Z"]], f"time={float(raw[i])!r} (read from the .nc) found {rows}"
    picked = csv_rows(erddap.get(f"/griddap/noleap.csv?x[({float(raw[i])!r})]").text)
    assert [r[0] for r in picked] == [labels[i] + "Z"]

    # erddapy turns text constraints into these numbers itself, and reads the .ncCF back.
    e = erddapy.ERDDAP(server=audit_url, protocol="tabledap")
    e.dataset_id, e.variables = "noleap", ["time", "x"]
    e.constraints = {"time>=": "2000-02-28T00:00:00Z", "time<=": "2000-03-03T00:00:00Z"}
    want = [label for label in labels if "2000-02-28" <= label <= "2000-03-03"]
    assert [str(v)[:19] for v in e.to_xarray()["time"].values] == want
    assert [v.rstrip("Z") for v in e.to_pandas()["time (UTC)"]] == want


def erddap_seconds(raw: np.ndarray, units: str) -> np.ndarray:
    """ERDDAP's numbers of a file's raw times, as ``Calendar2.unitsSinceToEpochSeconds`` computes them.

    The reference date of ``units`` counted on the Gregorian calendar, plus the raw number times the unit's
    seconds, rounded to the millisecond (ERDDAP reads no ``calendar``). Written from ERDDAP's rule with pandas,
    independently of dstp's code.
    """
    unit, since = units.split(" since ")
    base = pd.Timestamp(since, tz="UTC").timestamp()
    factor = {"seconds": 1, "minutes": 60, "hours": 3600, "days": 86400}[unit]
    return np.round(base + raw * factor, 3)


def test_360_day_times_are_erddaps_seconds_in_every_answer(erddap: httpx.Client, audit_catalog: Path,
                                                            audit_url: str) -> None:
    raw, units, calendar, labels = source_times(audit_catalog / "d360")
    assert calendar == "360_day" and any(label.startswith("2000-02-30") for label in labels)
    numbers = erddap_seconds(raw, units)

    das_units, das_calendar, actual_range = das_time(erddap.get("/tabledap/d360.das").text)
    assert (das_units, das_calendar) == ("seconds since 1970-01-01T00:00:00Z", "")
    assert actual_range == pytest.approx([numbers.min(), numbers.max()], abs=1e-3)

    nc_raw, nc_units, nc_calendar = nc_times(erddap.get("/tabledap/d360.nc?time,x").content)
    assert (nc_units, nc_calendar) == ("seconds since 1970-01-01T00:00:00Z", "proleptic_gregorian")
    np.testing.assert_allclose(nc_raw, numbers, rtol=0, atol=1e-3)

    # A number read from the .nc (or computed by ERDDAP's rule) finds its record, 30 February included,
    # as a constraint and as a griddap selector; the text is the file's own label.
    i = next(k for k, label in enumerate(labels) if label.startswith("2000-02-30"))
    here, after = float(nc_raw[i]), float(nc_raw[i + 1])
    rows = csv_rows(erddap.get(f"/tabledap/d360.csv?time&time={here!r}").text)
    assert rows == [[labels[i] + "Z"]], f"time={here!r} (read from the .nc) found {rows}"
    rows = csv_rows(erddap.get(f"/tabledap/d360.csv?time&time>={here!r}&time<{after!r}").text)
    assert rows == [[labels[i] + "Z"]]
    picked = csv_rows(erddap.get(f"/griddap/d360.csv?x[({here!r})]").text)
    assert [r[0] for r in picked] == [labels[i] + "Z"]
    rows = csv_rows(erddap.get(f"/tabledap/d360.csv?time&time={labels[i]}Z").text)
    assert rows == [[labels[i] + "Z"]], "the text of a 360_day label finds its record"

    # erddapy turns its text constraints into seconds itself: the records are those ERDDAP's numbers select.
    e = erddapy.ERDDAP(server=audit_url, protocol="tabledap")
    e.dataset_id, e.variables = "d360", ["time", "x"]
    low, high = "2000-02-15T00:00:00Z", "2000-03-10T00:00:00Z"
    e.constraints = {"time>=": low, "time<=": high}
    want = [label for label, n in zip(labels, numbers) if parse_dates(low) <= n <= parse_dates(high)]
    assert len(want) > 3
    assert [v.rstrip("Z") for v in e.to_pandas()["time (UTC)"]] == want


# -- missing texts ------------------------------------------------------------------------------------------

def source_texts(folder: Path) -> tuple[list[str | None], list[float]]:
    """Return the labels (None where the file's text is empty: missing) and numbers (NaN where missing)."""
    with netCDF4.Dataset(folder / "texts.nc") as nc:
        labels = [str(v) or None for v in nc["label"][:]]
        x = nc["x"][:]
        values = [float(v) if v is not np.ma.masked else float("nan") for v in x]
    return labels, values


def test_a_missing_text_is_empty_and_a_text_nan_stays_a_text(erddap: httpx.Client, audit_catalog: Path,
                                                             audit_url: str) -> None:
    labels, values = source_texts(audit_catalog / "texts")
    assert "NaN" in labels and None in labels and any(np.isnan(values))
    texts = ["" if v is None else v for v in labels]  # what a CSV reader gives for each label
    numbers = ["NaN" if np.isnan(v) else v for v in values]

    for ext, header_lines in (("csv", 2), ("csvp", 1)):
        answer = erddap.get(f"/tabledap/texts.{ext}?station,label,x&orderBy(\"station\")")
        assert answer.status_code == 200, answer.text
        rows = csv_rows(answer.text, header_lines)
        assert [r[1] for r in rows] == texts, f".{ext}: a missing text is not an empty cell, or a text changed"
        assert [r[2] if r[2] == "NaN" else float(r[2]) for r in rows] == numbers  # missing numbers stay NaN
        # The text NaN is quoted, so no reader takes it for the missing number NaN of ERDDAP's CSV.
        lines = answer.text.splitlines()[header_lines:]
        assert [line.split(",", 1)[1].startswith('"NaN"') for line in lines] == [v == "NaN" for v in labels]

    # pandas (erddapy's to_pandas) keeps them apart once told that only numbers are missing as NaN.
    e = erddapy.ERDDAP(server=audit_url, protocol="tabledap")
    e.dataset_id, e.variables = "texts", ["station", "label", "x"]
    frame = e.to_pandas(keep_default_na=False, na_values={"x (K)": ["NaN"]})
    assert frame["label"].tolist() == texts
    np.testing.assert_array_equal(frame["x (K)"].to_numpy(), np.array(values))
    assert e.to_pandas()["x (K)"].isna().tolist() == list(np.isnan(values))  # pandas' defaults: NaN is missing

    table = erddap.get("/tabledap/texts.json?station,label,x").json()["table"]
    assert [row[1] for row in table["rows"]] == labels
    assert [row[2] for row in table["rows"]] == [None if np.isnan(v) else v for v in values]

    page = erddap.get("/tabledap/texts.htmlTable?station,label,x").text
    cells = [[html.unescape(c) for c in re.findall(r"<td>(.*?)</td>", row)]
             for row in re.findall(r"<tr>(<td>.*?)</tr>", page)]
    assert [row[1] for row in cells] == texts, "htmlTable: texts are shown as they are, a missing one empty"
