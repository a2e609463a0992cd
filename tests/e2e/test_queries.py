"""End-to-end queries through a live server, each checked against the xarray/DuckDB oracle."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

import oracle

from query_cases import CASES, ORACLE_SQL  # noqa: E402


@pytest.mark.parametrize("sql, dataset, attrs, extra, ordered", CASES, ids=[c[0][:70] for c in CASES])
def test_query_matches_oracle(client, catalog_root: Path, sql, dataset, attrs, extra, ordered) -> None:
    got = client.query(sql)
    want = oracle.run_sql(oracle.frame(catalog_root, dataset, attrs, extra), ORACLE_SQL.get(sql, sql), dataset)
    oracle.assert_same_records(got, want, ordered=ordered)
    for f_got, f_want in zip(got.schema, want.schema):
        if pa.types.is_floating(f_want.type) or pa.types.is_integer(f_want.type):
            assert f_got.type == f_want.type, (f_got, f_want)


def test_seed_query_returns_rows_in_grid_order(client, catalog_root: Path) -> None:
    got = client.query("select time, lev, lat, lon, temperature from ccm3 where humidity > 50")
    df = got.to_pandas()
    key = list(zip(df["time"], df["lev"], df["lat"], df["lon"]))
    assert key == sorted(key), "records must come in C order over (time, lev, lat, lon)"
    want = oracle.run_sql(oracle.frame(catalog_root, "ccm3", ["temperature", "humidity"]),
                          "select time, lev, lat, lon, temperature from ccm3 where humidity > 50", "ccm3")
    oracle.assert_same_records(got, want, ordered=True)


@pytest.mark.parametrize(
    "dataset, columns, attrs",
    [
        ("ccm3", ["time", "lev", "lat", "lon", "temperature", "humidity", "cloud"], ["temperature", "humidity", "cloud"]),
        ("ocean", ["time", "depth", "lat", "lon", "temperature", "salinity"], ["temperature", "salinity"]),
        ("station", ["time", "lat", "lon", "height", "t2m", "d2m"], ["t2m", "d2m"]),
    ],
)
def test_select_star_is_the_default_grid(client, catalog_root: Path, dataset, columns, attrs) -> None:
    got = client.query(f"select * from {dataset}")
    assert got.column_names == columns
    want = oracle.run_sql(oracle.frame(catalog_root, dataset, attrs), f"select {', '.join(columns)} from {dataset}",
                          dataset)
    oracle.assert_same_records(got, want, ordered=True)


def test_time_types_follow_the_calendar(client) -> None:
    assert client.query("select time from ccm3 limit 1").schema.field("time").type == pa.timestamp("us")
    assert client.query("select time from station limit 1").schema.field("time").type == pa.timestamp("us")
    ocean = client.query("select time from ocean limit 1").schema.field("time")
    assert ocean.type == pa.string() and ocean.metadata[b"calendar"] == b"360_day"


def test_units_travel_in_the_schema(client) -> None:
    schema = client.query("select temperature, humidity, lat from ccm3 limit 1").schema
    assert schema.field("temperature").metadata[b"units"] == b"K"
    assert schema.field("humidity").metadata[b"units"] == b"%"
    assert schema.field("lat").metadata[b"units"] == b"degrees_north"


@pytest.mark.parametrize(
    "where, reads",
    [
        # lat between 30 and 40 keeps 2 of 32 latitudes: 2 variables × 12 × 8 × 2 × 64 elements
        ("lat between 30 and 40", 2 * 12 * 8 * 2 * 64),
        ("lev = 600.5", 2 * 12 * 1 * 32 * 64),
        ("time >= '1990-09-01' and lon < 20", 2 * 4 * 8 * 32 * 4),
        ("lat > 100", 0),
    ],
)
def test_coordinate_predicates_skip_hyperslabs(client, catalog_root: Path, where, reads) -> None:
    sql = f"select temperature, time from ccm3 where humidity > 50 and {where}"
    got = client.query(sql)
    assert client.last_summary["elements_read"] == reads
    want = oracle.run_sql(oracle.frame(catalog_root, "ccm3", ["temperature", "humidity"]), sql, "ccm3")
    oracle.assert_same_records(got, want)


def test_time_pushdown_reads_only_the_file_that_holds_the_range(client) -> None:
    client.query("select temperature from ccm3 where time >= '1990-09-01'")
    summary = client.last_summary
    assert summary["elements_read"] == 4 * 8 * 32 * 64  # the last file's 4 steps, one variable
    assert summary["rows"] == 4 * 8 * 32 * 64


def test_limit_stops_reading_early(client) -> None:
    client.query("select temperature from ccm3 limit 3")
    assert 0 < client.last_summary["elements_read"] < 12 * 8 * 32 * 64


def test_stride_keeps_every_kth_index(client, catalog_root: Path) -> None:
    got = client.query("select temperature, lat, lon, time from stride(ccm3, lat = 4, lon = 8) where lev = 992.6")
    ds = oracle.open_dataset(catalog_root, "ccm3").isel(lat=slice(None, None, 4), lon=slice(None, None, 8))
    sub = ds[["temperature"]].sel(lev=992.6).to_dataframe().reset_index()
    assert got.num_rows == 12 * 8 * 8
    assert sorted(set(got.column("lat").to_pylist())) == sorted(ds["lat"].values.tolist())
    np.testing.assert_array_equal(np.sort(got.column("temperature").to_numpy()), np.sort(sub["temperature"].to_numpy()))


def _keys(df) -> set:
    return set(zip(df["time"].astype("datetime64[us]"), df["lev"], df["lat"], df["lon"]))


def test_percent_sample_is_reproducible_and_drawn_from_the_matches(client, catalog_root: Path) -> None:
    sql = "select time, lev, lat, lon from ccm3 tablesample 10% repeatable (7) where humidity > 80"
    a, b = client.query(sql), client.query(sql)
    assert a.equals(b)
    assert not a.equals(client.query(sql.replace("(7)", "(8)")))
    df = oracle.frame(catalog_root, "ccm3", ["humidity"])
    matches = _keys(df[df["humidity"] > 80])
    got = _keys(a.to_pandas())
    assert len(got) == a.num_rows and got <= matches
    n, p = len(matches), 0.10
    assert abs(a.num_rows - n * p) < 5 * (n * p * (1 - p)) ** 0.5


def test_row_sample_has_exactly_n_matching_rows_in_grid_order(client, catalog_root: Path) -> None:
    sql = "select time, lev, lat, lon, humidity from ccm3 tablesample 100 rows repeatable (3) where humidity > 80"
    a = client.query(sql)
    assert a.num_rows == 100
    assert a.equals(client.query(sql))
    assert min(a.column("humidity").to_pylist()) > 80
    df = a.to_pandas()
    key = list(zip(df["time"], df["lev"], df["lat"], df["lon"]))
    assert key == sorted(key) and len(set(key)) == 100


def test_sample_seed_is_reported_when_not_given(client) -> None:
    info = client.plan("select temperature from ccm3 tablesample 1%")
    assert info.sample_seed is not None
    again = f"select temperature from ccm3 tablesample 1% repeatable ({info.sample_seed})"
    assert client.query(again).num_rows > 0


def test_to_xarray_round_trip(client, catalog_root: Path) -> None:
    import dstp

    table = client.query("select * from ocean where depth < 20")
    ds = dstp.to_xarray(table)
    ref = oracle.open_dataset(catalog_root, "ocean").sel(depth=[5.0, 15.0])
    np.testing.assert_array_equal(ds["temperature"].values, ref["temperature"].values)
    np.testing.assert_array_equal(ds["lat"].values, ref["lat"].values)  # descending kept
    assert ds["temperature"].attrs["units"] == "degC"
