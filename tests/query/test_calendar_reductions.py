"""Time buckets on every CF calendar, against xarray's cftime resampling and datetime accessors.

A 360_day run's 5-day buckets count 360_day days (30 February is a day), a
noleap run's count 365-day years (29 February never is), and the labels come
back in the column's own form (ISO text, or timestamps of the labels). The
oracle is xarray over cftime objects: ``resample(time=…, origin=…)`` for
``time_bucket``, ``resample('MS')``/``('D')`` for ``date_trunc``, the ``.dt``
accessors for ``year``/``month``/``day``/``dayofyear``/``season``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Iterator

import cftime
import numpy as np
import pandas as pd
import pytest
import xarray as xr
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import builders
from in_process import answer_table
from oracle import _times

from dstp.catalog.publish import publish
from dstp.catalog.registry import Catalog
from dstp.errors import QueryError
from dstp.query.execute import prepare_query
from dstp.settings import Settings

CALENDARS = ["standard", "proleptic_gregorian", "noleap", "360_day", "all_leap", "julian"]
SETTINGS = Settings(batch_rows=17)


@pytest.fixture(scope="module")
def series(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Catalog, dict[str, xr.Dataset]]]:
    root = tmp_path_factory.mktemp("calendars")
    oracles = {}
    for k, calendar in enumerate(CALENDARS):
        paths = builders.calendar_series(root / calendar, calendar, seed=k)
        publish(paths, f"s_{calendar}")
        with xr.open_dataset(paths[0], decode_times=xr.coders.CFDatetimeCoder(use_cftime=True)) as ds:
            oracles[calendar] = ds.load()
    catalog = Catalog.scan(root)
    assert not catalog.problems, catalog.problems
    yield catalog, oracles
    catalog.close()


def answer(catalog: Catalog, sql: str) -> pd.DataFrame:
    return answer_table(catalog, sql, SETTINGS).to_pandas()


def labels(times: np.ndarray, calendar: str) -> list[str]:
    """Return times as dstp writes them (ISO text or timestamp), as text, for comparison."""
    return [str(v)[:19].replace(" ", "T") for v in _times(np.asarray(times), calendar)]


def got_labels(values: pd.Series) -> list[str]:
    return [str(v)[:19].replace(" ", "T") for v in values]


def compare(got: pd.DataFrame, want: xr.Dataset, calendar: str) -> None:
    """Compare dstp's buckets (b, mean, n) with xarray's, both without buckets that hold no value of x."""
    got = got[got["n"] > 0]
    mean, count = want["x"].values, want["n"].values
    keep = count > 0
    assert got_labels(got["b"]) == labels(want["time"].values[keep], calendar)
    np.testing.assert_array_equal(got["n"].to_numpy(), count[keep])
    np.testing.assert_allclose(got["mean"].to_numpy(dtype=float), mean[keep], rtol=1e-12)


@settings(max_examples=36, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(calendar=st.sampled_from(CALENDARS), days=st.integers(1, 9), hours=st.sampled_from([0, 6, 13]))
def test_time_bucket_counts_the_calendars_own_days(series, calendar, days, hours) -> None:
    catalog, oracles = series
    width = f"{days} days {hours} hours" if hours else f"{days} days"
    got = answer(catalog, f"select time_bucket(interval '{width}', time) b, avg(x) mean, count(x) n "
                          f"from s_{calendar} group by b order by b")
    ds = oracles[calendar]
    origin = cftime.datetime(2000, 1, 3, calendar=calendar)
    resampled = ds.resample(time=f"{days * 24 + hours}h", origin=origin)
    want = xr.Dataset({"x": resampled.mean()["x"], "n": resampled.count()["x"]})
    compare(got, want, calendar)


@pytest.mark.parametrize("calendar", CALENDARS)
@pytest.mark.parametrize("unit, freq", [("month", "MS"), ("day", "D"), ("year", "YS")])
def test_date_trunc_is_resampling_to_period_starts(series, calendar, unit, freq) -> None:
    catalog, oracles = series
    got = answer(catalog, f"select date_trunc('{unit}', time) b, avg(x) mean, count(x) n from s_{calendar} "
                          "group by b order by b")
    resampled = oracles[calendar].resample(time=freq)
    compare(got, xr.Dataset({"x": resampled.mean()["x"], "n": resampled.count()["x"]}), calendar)


@pytest.mark.parametrize("calendar", CALENDARS)
@pytest.mark.parametrize("months", [1, 2, 3, 12])
def test_month_buckets_start_from_january_2000(series, calendar, months) -> None:
    catalog, oracles = series
    got = answer(catalog, f"select time_bucket(interval '{months} months', time) b, avg(x) mean, count(x) n "
                          f"from s_{calendar} group by b order by b")
    ds = oracles[calendar]
    index = np.array([d.year * 12 + d.month - 1 for d in ds["time"].values])
    start = (index - 2000 * 12) // months * months + 2000 * 12  # the documented rule, on cftime's own fields
    frame = pd.DataFrame({"start": start, "x": ds["x"].values})
    grouped = frame.groupby("start")["x"].agg(["mean", "count"])
    want = [cftime.datetime(s // 12, s % 12 + 1, 1, calendar=calendar) for s in grouped.index]
    assert got_labels(got["b"]) == labels(np.array(want), calendar)
    np.testing.assert_allclose(got["mean"].to_numpy(dtype=float), grouped["mean"].to_numpy(), rtol=1e-12)


@pytest.mark.parametrize("calendar", CALENDARS)
def test_fields_and_seasons_follow_the_calendar(series, calendar) -> None:
    catalog, oracles = series
    got = answer(catalog, f"select time, year(time) y, month(time) m, day(time) d, dayofyear(time) j, "
                          f"season(time) s, quarter(time) q, hour(time) h from s_{calendar}")
    t = oracles[calendar]["time"].dt
    assert got_labels(got["time"]) == labels(oracles[calendar]["time"].values, calendar)
    for column, values in (("y", t.year), ("m", t.month), ("d", t.day), ("j", t.dayofyear), ("h", t.hour),
                           ("q", (t.month - 1) // 3 + 1)):
        np.testing.assert_array_equal(got[column].to_numpy(), values.values, err_msg=column)
    assert list(got["s"]) == list(t.season.values)


@pytest.mark.parametrize("calendar", CALENDARS)
def test_seasonal_means_match_xarray_groupby(series, calendar) -> None:
    catalog, oracles = series
    got = answer(catalog, f"select season(time) season, avg(x) mean from s_{calendar} group by 1 order by 1")
    want = oracles[calendar]["x"].groupby("time.season").mean()
    np.testing.assert_allclose(got["mean"].to_numpy(), want.sel(season=list(got["season"])).values, rtol=1e-12)


def test_time_bucket_origin_is_a_date_of_the_calendar(series) -> None:
    catalog, oracles = series
    got = answer(catalog, "select time_bucket(interval '10 days', time, '2000-02-30') b, count(x) n "
                          "from s_360_day group by b order by b")
    resampled = oracles["360_day"].resample(time="240h", origin=cftime.datetime(2000, 2, 30, calendar="360_day"))
    want = resampled.count()["x"]
    keep = want.values > 0
    assert got_labels(got["b"]) == labels(want["time"].values[keep], "360_day")


@pytest.mark.parametrize("sql, words", [
    ("select date_trunc('week', time) from s_noleap", "noleap"),
    ("select dayofweek(time) from s_360_day", "dayofweek"),
    ("select extract(epoch from time) from s_all_leap", "epoch"),
    ("select time_bucket(interval '5 days', coalesce(time, time)) from s_360_day", "cannot tell the calendar"),
    ("select avg(x) over (order by time range between interval 2 days preceding and current row) from s_noleap",
     "ROWS"),
])
def test_gregorian_only_functions_are_refused_off_the_gregorian_calendar(series, sql, words) -> None:
    catalog, _ = series
    with pytest.raises(QueryError) as info:
        prepare_query(sql, catalog, SETTINGS)
    assert words.lower() in str(info.value).lower()


def test_macros_round_trip_labels_and_days(series) -> None:
    """Labels → model microseconds → labels is the identity, and day counts agree with cftime's differences."""
    import duckdb

    from dstp.query import _calendar

    con = duckdb.connect()
    _calendar.install_macros(con)
    rng = np.random.default_rng(1)
    for calendar, family in (("360_day", "d360"), ("all_leap", "allleap"), ("julian", "julian"), ("noleap", "noleap")):
        # CF's julian calendar has no year 0 and no negative years (cftime warns): fold them onto 1…
        dates = [cftime.datetime(int(y) if calendar != "julian" else abs(int(y)) + 1, int(m), 1, calendar=calendar)
                 for y, m in
                 zip(rng.integers(-400, 3000, 40), rng.integers(1, 13, 40))]
        dates = [d + pd.Timedelta(days=int(k), seconds=int(s)).to_pytimedelta()
                 for d, k, s in zip(dates, rng.integers(0, 27, 40), rng.integers(0, 86400, 40))]
        texts = [f"{d.year:04d}-{d.month:02d}-{d.day:02d}T{d.hour:02d}:{d.minute:02d}:{d.second:02d}" for d in dates]
        origin = cftime.datetime(2000, 1, 1, calendar=calendar)
        for d, text in zip(dates, texts):
            if calendar == "noleap" and (d.year < 1 or d.year > 9999):
                continue  # DuckDB timestamps: years 1…9999 here
            literal = f"'{text}'" if calendar != "noleap" else f"timestamp '{text.replace('T', ' ')}'"
            o = "'2000-01-01T00:00:00'" if calendar != "noleap" else "timestamp '2000-01-01 00:00:00'"
            us, back, o_us = con.sql(f"select __dstp_{family}_us({literal}), __dstp_{family}_label("
                                     f"__dstp_{family}_us({literal})), __dstp_{family}_us({o})").fetchall()[0]
            assert str(back)[:19].replace(" ", "T") == text
            delta = d - origin
            assert us - o_us == (delta.days * 86400 + delta.seconds) * 1_000_000, (calendar, text)
    con.close()
