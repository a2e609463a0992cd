"""Reductions (group by, having, distinct, CTEs, union all, windows) against xarray and pandas on the same files.

The oracles never run dstp's reader: xarray opens each file on its own
(:mod:`oracle`, and :func:`open_grid` below) and concatenates; pandas groups
the records xarray's ``to_dataframe`` gives; xarray's ``groupby``,
``resample`` and ``weighted`` reduce the grids. dstp runs with two DuckDB
threads and small batches, so partial aggregates really are combined.
"""

from __future__ import annotations

from pathlib import Path
from typing import Callable, Iterator

import numpy as np
import pandas as pd
import pytest
import shutil
import xarray as xr
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import builders
from in_process import answer_table
import oracle

from dstp.catalog.publish import publish
from dstp.catalog.registry import Catalog
from dstp.settings import Settings

SETTINGS = Settings(batch_rows=5000, duckdb_threads=2)
CFTIME = xr.coders.CFDatetimeCoder(use_cftime=True)


@pytest.fixture(scope="module")
def catalog(catalog_root: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Catalog, Path]]:
    """The small ccm3 and ocean samples, plus three-year grids (one file per year, each with its own epoch)."""
    root = tmp_path_factory.mktemp("reductions")
    for dataset in ("ccm3", "ocean"):
        shutil.copytree(catalog_root / dataset, root / dataset)
    publish(builders.model_grid(root / "clim", calendar="noleap"), "clim")
    publish(builders.model_grid(root / "clim360", calendar="360_day", seed=9), "clim360")
    cat = Catalog.scan(root)
    assert not cat.problems, cat.problems
    yield cat, root
    cat.close()


def answer(catalog: Catalog, sql: str) -> pd.DataFrame:
    return answer_table(catalog, sql, SETTINGS).to_pandas()


def open_grid(folder: Path) -> xr.Dataset:
    """Return xarray's view of a grid written by builders.model_grid: each file decoded alone, then concatenated."""
    parts = []
    for path in sorted(folder.glob("*.nc")):
        with xr.open_dataset(path, decode_times=CFTIME) as ds:
            parts.append(ds.load())
    return xr.concat(parts, dim="time")


def ccm3_frame(root: Path, *attrs: str) -> pd.DataFrame:
    df = oracle.frame(root, "ccm3", list(attrs) or ["temperature"])
    for a in attrs:
        df[a] = df[a].astype("float64")
    return df


SEASONS = {12: "DJF", 1: "DJF", 2: "DJF", 3: "MAM", 4: "MAM", 5: "MAM", 6: "JJA", 7: "JJA", 8: "JJA",
           9: "SON", 10: "SON", 11: "SON"}

#: SQL aggregate -> the same reduction of a pandas Series (NULLs skipped, as SQL does).
REDUCTIONS: dict[str, Callable[[pd.Series], float]] = {
    "count({x})": lambda s: s.count(),
    "count(*)": lambda s: len(s),
    "sum({x})": lambda s: s.sum(min_count=1),
    "avg({x})": lambda s: s.mean(),
    "mean({x})": lambda s: s.mean(),
    "min({x})": lambda s: s.min(),
    "max({x})": lambda s: s.max(),
    "stddev({x})": lambda s: s.std(ddof=1),
    "stddev_pop({x})": lambda s: s.std(ddof=0),
    "var({x})": lambda s: s.var(ddof=1),
    "variance({x})": lambda s: s.var(ddof=1),
    "median({x})": lambda s: s.median(),
    "quantile_cont({x}, 0.9)": lambda s: s.quantile(0.9, interpolation="linear"),
    "quantile_cont({x}, 0.25)": lambda s: s.quantile(0.25, interpolation="linear"),
    "count(distinct {x})": lambda s: s.nunique(),
}

#: SQL group key -> (output name, how pandas computes it from the records).
KEYS: dict[str, Callable[[pd.DataFrame], pd.Series]] = {
    "lev": lambda df: df["lev"],
    "lat": lambda df: df["lat"],
    "month(time)": lambda df: df["time"].dt.month,
    "year(time)": lambda df: df["time"].dt.year,
    "season(time)": lambda df: df["time"].dt.month.map(SEASONS),
    "date_trunc('month', time)": lambda df: df["time"].dt.to_period("M").dt.to_timestamp(),
}
WHERES = {
    "": lambda df: df,
    "where lat between -30 and 30": lambda df: df[(df["lat"] >= -30) & (df["lat"] <= 30)],
    "where humidity > 50": lambda df: df[df["humidity"] > 50],
    "where time >= '1990-06-01' and lev < 500": lambda df: df[(df["time"] >= "1990-06-01") & (df["lev"] < 500)],
}


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(aggs=st.lists(st.sampled_from(sorted(REDUCTIONS)), min_size=1, max_size=3, unique=True),
       keys=st.lists(st.sampled_from(sorted(KEYS)), min_size=0, max_size=2, unique=True),
       where=st.sampled_from(sorted(WHERES)), x=st.sampled_from(["temperature", "humidity", "cloud"]))
def test_grouped_reductions_match_pandas(catalog, aggs, keys, where, x) -> None:
    cat, catalog_root = catalog
    records = WHERES[where](ccm3_frame(catalog_root, "temperature", "humidity", "cloud"))
    key_sql = [f"{k} as k{i}" for i, k in enumerate(keys)]
    agg_sql = [a.format(x=x) + f" as a{i}" for i, a in enumerate(aggs)]
    group = f" group by {', '.join(f'k{i}' for i in range(len(keys)))}" if keys else ""
    got = answer(cat, f"select {', '.join(key_sql + agg_sql)} from ccm3 {where}{group}")
    if keys:
        frame = pd.DataFrame({f"k{i}": KEYS[k](records) for i, k in enumerate(keys)})
        frame["x"] = records[x]
        grouped = frame.groupby([f"k{i}" for i in range(len(keys))], sort=True)["x"]
        want = pd.DataFrame({f"a{i}": grouped.agg(REDUCTIONS[a]) for i, a in enumerate(aggs)}).reset_index()
        got = got.sort_values([f"k{i}" for i in range(len(keys))]).reset_index(drop=True)
        assert len(got) == len(want)
        for i in range(len(keys)):
            assert list(got[f"k{i}"]) == list(want[f"k{i}"]), keys[i]
    else:
        want = pd.DataFrame({f"a{i}": [REDUCTIONS[a](records[x])] for i, a in enumerate(aggs)})
        assert len(got) == 1
    for i, a in enumerate(aggs):
        # median and quantile_cont of a float32 column interpolate in float32 (DuckDB's type): half an ulp
        rtol = 1.2e-7 if a.startswith(("median", "quantile")) else 1e-9
        np.testing.assert_allclose(got[f"a{i}"].to_numpy(dtype=float), want[f"a{i}"].to_numpy(dtype=float),
                                   rtol=rtol, err_msg=a)


def test_monthly_mean_per_level_is_xarray_groupby(catalog) -> None:
    cat, catalog_root = catalog
    got = answer(cat, "select lev, month(time) as month, avg(temperature) as t from ccm3 group by lev, month "
                      "order by lev, month")
    ds = oracle.open_dataset(catalog_root, "ccm3")
    want = ds["temperature"].astype("f8").groupby("time.month").mean(["time", "lat", "lon"])
    want = want.transpose("lev", "month")
    assert list(got["lev"]) == list(np.repeat(want["lev"].values, want.sizes["month"]))
    assert list(got["month"]) == list(np.tile(want["month"].values, want.sizes["lev"]))
    np.testing.assert_allclose(got["t"].to_numpy(), want.values.reshape(-1), rtol=1e-12)


@pytest.mark.parametrize("dataset", ["clim", "clim360"])
def test_date_trunc_month_is_xarray_resample_on_the_calendar(catalog, dataset) -> None:
    cat, root = catalog
    catalog_root = root
    got = answer(cat, f"select date_trunc('month', time) as m, lev, avg(ta) as t, count(ta) as n from {dataset} "
                      "group by m, lev order by m, lev")
    ds = open_grid(root / dataset)
    resampled = ds["ta"].resample(time="MS")
    mean = resampled.mean(["time", "lat", "lon"]).transpose("time", "lev").sortby("lev")
    count = resampled.count(["time", "lat", "lon"]).transpose("time", "lev").sortby("lev")
    calendar = ds["time"].values[0].calendar
    assert [str(v)[:10] for v in got["m"]] == [str(d)[:10] for d in oracle._times(np.repeat(
        mean["time"].values, 3), calendar)]
    np.testing.assert_array_equal(got["n"].to_numpy(), count.values.reshape(-1))
    np.testing.assert_allclose(got["t"].to_numpy(), mean.values.reshape(-1), rtol=1e-12)


@pytest.mark.parametrize("dataset, variable, where", [
    ("ccm3", "temperature", "lev = 992.6"),
    ("ocean", "temperature", "depth = 5"),  # land cells are missing: their weights must not count
    ("clim", "ta", "lev = 500"),
])
def test_weighted_avg_is_xarray_weighted_by_cos_lat(catalog, dataset, variable, where) -> None:
    cat, root = catalog
    catalog_root = root
    got = answer(cat, f"select time, weighted_avg({variable}, area_weight) as w, avg({variable}) as plain "
                      f"from {dataset} where {where} group by time order by time")
    ds = open_grid(root / dataset) if dataset == "clim" else oracle.open_dataset(catalog_root, dataset)
    name, level = where.split(" = ")
    field = ds[variable].sel({name: float(level)}).astype("f8")
    weights = np.cos(np.deg2rad(ds["lat"].astype("f8")))
    want = field.weighted(weights).mean(["lat", "lon"])
    np.testing.assert_allclose(got["w"].to_numpy(), want.values, rtol=1e-12)
    assert not np.allclose(got["w"].to_numpy(), got["plain"].to_numpy())  # the weights change the answer


def test_area_weight_is_cos_latitude(catalog) -> None:
    cat, catalog_root = catalog
    got = answer(cat, "select distinct lat, area_weight from ccm3 order by lat")
    lat = oracle.open_dataset(catalog_root, "ccm3")["lat"].values
    np.testing.assert_allclose(got["lat"].to_numpy(), np.sort(lat))
    np.testing.assert_allclose(got["area_weight"].to_numpy(), np.cos(np.deg2rad(np.sort(lat))), rtol=1e-15)


def test_having_distinct_and_count_distinct(catalog) -> None:
    cat, catalog_root = catalog
    records = ccm3_frame(catalog_root, "temperature", "humidity")
    got = answer(cat, "select lat, count(distinct lev) as levels, max(humidity) as h from ccm3 where humidity > 80 "
                      "group by lat having count(*) > 100 order by lat")
    wet = records[records["humidity"] > 80]
    grouped = wet.groupby("lat")
    want = pd.DataFrame({"levels": grouped["lev"].nunique(), "h": grouped["humidity"].max(),
                         "n": grouped.size()})
    want = want[want["n"] > 100].reset_index()
    assert len(want) and len(want) < records["lat"].nunique()  # HAVING keeps some latitudes, not all
    np.testing.assert_array_equal(got["lat"].to_numpy(), want["lat"].to_numpy())
    np.testing.assert_array_equal(got["levels"].to_numpy(), want["levels"].to_numpy())
    np.testing.assert_allclose(got["h"].to_numpy(), want["h"].to_numpy())
    distinct = answer(cat, "select distinct lev, floor(humidity / 25) as band from ccm3 where lat > 60")
    cold = records[records["lat"] > 60]
    want_pairs = pd.DataFrame({"lev": cold["lev"], "band": np.floor(cold["humidity"].astype("f4") / np.float32(25))})
    want_pairs = want_pairs.drop_duplicates()

    def rows(df: pd.DataFrame) -> list[tuple]:
        return sorted((float(a), -1.0 if pd.isna(b) else float(b)) for a, b in zip(df["lev"], df["band"]))

    assert rows(distinct) == rows(want_pairs)
    assert len(distinct) < len(cold)


def test_cte_of_monthly_means(catalog) -> None:
    cat, catalog_root = catalog
    got = answer(cat, "with monthly as (select lev, month(time) as m, avg(temperature) as t from ccm3 "
                      "group by lev, m), spread as (select lev, max(t) - min(t) as r from monthly group by lev) "
                      "select lev, r from spread where r > 0 order by lev")
    ds = oracle.open_dataset(catalog_root, "ccm3")
    monthly = ds["temperature"].astype("f8").groupby("time.month").mean(["time", "lat", "lon"])
    want = monthly.max("month") - monthly.min("month")
    np.testing.assert_array_equal(got["lev"].to_numpy(), want["lev"].values)
    np.testing.assert_allclose(got["r"].to_numpy(), want.values, rtol=1e-9)


def test_union_all_of_two_datasets(catalog) -> None:
    cat, catalog_root = catalog
    got = answer(cat, "select 'ccm3' as source, min(temperature) as lo, avg(temperature) as mean from ccm3 "
                      "union all select 'ocean', min(temperature), avg(temperature) from ocean "
                      "union all select 'ocean', min(salinity), avg(salinity) from ocean order by 1, 2")
    want = []
    for dataset, variable in (("ccm3", "temperature"), ("ocean", "temperature"), ("ocean", "salinity")):
        v = oracle.open_dataset(catalog_root, dataset)[variable].astype("f8")
        want.append((dataset, float(v.min()), float(v.mean())))
    want.sort()
    assert list(got["source"]) == [w[0] for w in want]
    np.testing.assert_allclose(got["lo"].to_numpy(), [w[1] for w in want], rtol=1e-6)
    np.testing.assert_allclose(got["mean"].to_numpy(), [w[2] for w in want], rtol=1e-9)


def test_running_mean_window_is_pandas_rolling(catalog) -> None:
    cat, root = catalog
    catalog_root = root
    got = answer(cat, "select time, lat, lon, avg(ta) over (partition by lat, lon order by time "
                      "rows between 2 preceding and current row) as rm from clim where lev = 850")
    ds = open_grid(root / "clim")
    df = ds["ta"].sel(lev=850.0).to_dataframe().reset_index()
    df["time"] = oracle._times(df["time"].to_numpy(), "noleap")
    df = df.sort_values(["lat", "lon", "time"])
    df["rm"] = df.groupby(["lat", "lon"])["ta"].transform(lambda s: s.rolling(3, min_periods=1).mean())
    merged = got.merge(df, on=["time", "lat", "lon"], how="outer", validate="one_to_one")
    assert len(merged) == len(df) == len(got) == 36 * 6 * 8
    np.testing.assert_allclose(merged["rm_x"].to_numpy(dtype=float), merged["rm_y"].to_numpy(dtype=float),
                               rtol=1e-12)


@pytest.mark.parametrize("dataset", ["clim", "clim360"])
def test_anomaly_against_monthly_climatology_is_xarray_groupby(catalog, dataset) -> None:
    cat, root = catalog
    catalog_root = root
    got = answer(cat, f"select time, lat, lon, ta - avg(ta) over (partition by month(time), lat, lon) as anom "
                      f"from {dataset} where lev = 250 order by time, lat, lon")
    ds = open_grid(root / dataset)
    field = ds["ta"].sel(lev=250.0)
    want = (field.groupby("time.month") - field.groupby("time.month").mean("time")).transpose("time", "lat", "lon")
    np.testing.assert_allclose(got["anom"].to_numpy(dtype=float), want.values.reshape(-1), rtol=1e-9, atol=1e-9)
    assert np.nanmax(np.abs(want.values)) > 0.5  # three years: anomalies are not all zero


def test_first_and_last_are_in_grid_order(catalog) -> None:
    """first/last: the first and last non-NULL value of each group in grid order (pandas' first/last)."""
    cat, catalog_root = catalog
    got = answer(cat, "select lev, first(humidity) as f, last(humidity) as l from ccm3 where lat > 0 "
                      "group by lev order by lev")
    records = ccm3_frame(catalog_root, "humidity")
    records = records[records["lat"] > 0].sort_values(["time", "lev", "lat", "lon"])
    grouped = records.groupby("lev")["humidity"]
    np.testing.assert_array_equal(got["f"].to_numpy(dtype=float), grouped.first().to_numpy())
    np.testing.assert_array_equal(got["l"].to_numpy(dtype=float), grouped.last().to_numpy())


def test_approx_quantile_is_within_one_percent_in_rank(catalog) -> None:
    cat, catalog_root = catalog
    got = answer(cat, "select lev, approx_quantile(temperature, 0.5) as q5, approx_quantile(temperature, 0.9) as q9 "
                      "from ccm3 group by lev order by lev")
    records = ccm3_frame(catalog_root, "temperature")
    for (lev, values), (_, row) in zip(records.groupby("lev")["temperature"], got.iterrows()):
        assert row["lev"] == lev
        v = np.sort(values.dropna().to_numpy())
        for q, col in ((0.5, "q5"), (0.9, "q9")):
            rank = np.searchsorted(v, row[col]) / v.size
            assert abs(rank - q) < 0.01, (lev, q, rank)
