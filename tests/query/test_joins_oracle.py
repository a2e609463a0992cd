"""Joins and matchups on correlation keys, against pandas ``merge``/``merge_asof`` and xarray ``sel(method="nearest")``.

The two grids hold the same places and dates written differently — longitudes
0…360 against −180…180, levels in hPa against Pa, times in days since each
year on the noleap calendar against hours since each year on the standard
one — so an exact join only works if dstp reconciles the keys. The oracles
read each file with xarray on its own and normalise the keys themselves.
"""

from __future__ import annotations

from pathlib import Path
from typing import Iterator

import numpy as np
import pandas as pd
import pytest
import xarray as xr

import builders
from in_process import answer_table

from dstp.catalog.publish import publish
from dstp.catalog.registry import Catalog
from dstp.errors import QueryError
from dstp.settings import Settings

SETTINGS = Settings(batch_rows=1000, duckdb_threads=2)
CFTIME = xr.coders.CFDatetimeCoder(use_cftime=True)


@pytest.fixture(scope="module")
def catalog(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Catalog, Path]]:
    root = tmp_path_factory.mktemp("joins")
    publish(builders.model_grid(root / "grid_e"), "grid_e")
    publish(builders.model_grid(root / "grid_w", calendar="standard", lon_west=True, time_unit="hours",
                                lev_units="Pa", seed=8), "grid_w")
    publish(builders.model_grid(root / "grid360", calendar="360_day", seed=9), "grid360")
    publish(builders.buoys(root / "buoys", start="2000-01-01", days=1000), "buoys")
    publish(builders.calendar_series(root / "series", "standard", start="1999-12-01", steps=200), "series")
    cat = Catalog.scan(root)
    assert not cat.problems, cat.problems
    yield cat, root
    cat.close()


def answer(catalog: Catalog, sql: str) -> pd.DataFrame:
    return answer_table(catalog, sql, SETTINGS).to_pandas()


def labels(times: np.ndarray) -> pd.DatetimeIndex:
    """Return cftime dates as timestamps of their labels (how dstp shows standard and noleap times)."""
    return pd.DatetimeIndex([pd.Timestamp(t.isoformat()) for t in times])


def open_grid(folder: Path) -> xr.Dataset:
    parts = []
    for path in sorted(folder.glob("*.nc")):
        with xr.open_dataset(path, decode_times=CFTIME) as ds:
            parts.append(ds.load())
    ds = xr.concat(parts, dim="time")
    return ds.assign_coords(time=labels(ds["time"].values))


def open_buoys(root: Path) -> pd.DataFrame:
    """Return the buoy observations with their station's position (the ragged array expanded by hand)."""
    with xr.open_dataset(root / "buoys" / "buoys.nc", decode_times=CFTIME) as ds:
        ds = ds.load()
    station = np.repeat(np.arange(ds.sizes["station"]), ds["row_size"].values)
    return pd.DataFrame({
        "station_name": [n.decode().strip() for n in ds["station_name"].values[station]],
        "time": labels(ds["time"].values).as_unit("us"),
        "lat": ds["lat"].values[station], "lon": ds["lon"].values[station],
        "sst": ds["sst"].values.astype("f8"),
    })


def test_exact_join_reconciles_longitude_levels_and_time_units(catalog) -> None:
    cat, root = catalog
    got = answer(cat, "select e.time, e.lev, e.lat, e.lon, e.ta as a, w.ta as b from grid_e e join grid_w w "
                      "on e.time = w.time and e.lat = w.lat and e.lon = w.lon and e.lev = w.lev")
    east = open_grid(root / "grid_e")["ta"].to_dataframe().reset_index()
    west = open_grid(root / "grid_w")["ta"].to_dataframe().reset_index()
    west["lon"] = np.mod(west["lon"], 360.0)  # the oracle's own normalisation: −180…180 → 0…360
    west["lev"] = west["lev"] / 100.0  # Pa → hPa
    want = east.merge(west, on=["time", "lev", "lat", "lon"], suffixes=("_a", "_b"), validate="one_to_one")
    assert len(want) == len(east) == len(west)
    keys = ["time", "lev", "lat", "lon"]
    got = got.sort_values(keys).reset_index(drop=True)
    want = want.sort_values(keys).reset_index(drop=True)
    assert len(got) == len(want)
    for key in keys:
        np.testing.assert_array_equal(got[key].to_numpy(), want[key].to_numpy(), err_msg=key)
    np.testing.assert_array_equal(got["a"].to_numpy(dtype=float), want["ta_a"].to_numpy())
    np.testing.assert_array_equal(got["b"].to_numpy(dtype=float), want["ta_b"].to_numpy())


def test_join_with_a_range_on_one_side_is_pandas_merge(catalog) -> None:
    cat, root = catalog
    got = answer(cat, "select w.lon as wlon, e.lon, e.lat, avg(e.ta - w.ta) as d, count(*) as n from grid_e e "
                      "join grid_w w on e.time = w.time and e.lat = w.lat and e.lon = w.lon and e.lev = w.lev "
                      "where w.lon between -100 and -10 and e.time >= '2001-01-01' group by all order by e.lon, e.lat")
    east = open_grid(root / "grid_e")["ta"].to_dataframe().reset_index()
    west = open_grid(root / "grid_w")["ta"].to_dataframe().reset_index()
    west = west[(west["lon"] >= -100) & (west["lon"] <= -10)].rename(columns={"lon": "wlon"})
    west["lon"], west["lev"] = np.mod(west["wlon"], 360.0), west["lev"] / 100.0
    east = east[east["time"] >= "2001-01-01"]
    merged = east.merge(west, on=["time", "lev", "lat", "lon"])
    merged["d"] = merged["ta_x"] - merged["ta_y"]
    want = merged.groupby(["lon", "lat", "wlon"]).agg(d=("d", "mean"), n=("d", "size")).reset_index()
    assert sorted(set(want["wlon"])) == [-90.0, -45.0]
    np.testing.assert_array_equal(got["wlon"].to_numpy(), want["wlon"].to_numpy())
    np.testing.assert_array_equal(got["n"].to_numpy(), want["n"].to_numpy())
    np.testing.assert_allclose(got["d"].to_numpy(), want["d"].to_numpy(), rtol=1e-12)


def test_asof_join_is_pandas_merge_asof(catalog) -> None:
    cat, root = catalog
    got = answer(cat, "select b.station_name, b.time, b.sst, s.time as series_time, s.x from buoys b "
                      "asof join series s on b.time >= s.time")
    buoys = open_buoys(root)
    with xr.open_dataset(root / "series" / "series_standard.nc", decode_times=CFTIME) as ds:
        series = pd.DataFrame({"series_time": labels(ds["time"].values).as_unit("us"),
                               "x": ds["x"].values})
    want = pd.merge_asof(buoys.sort_values("time"), series.assign(time=series["series_time"]), on="time",
                         direction="backward", allow_exact_matches=True).dropna(subset=["series_time"])
    assert len(want) and want["series_time"].nunique() > 10
    keys = ["station_name", "time"]
    got = got.sort_values(keys).reset_index(drop=True)
    want = want.sort_values(keys).reset_index(drop=True)
    assert len(got) == len(want)
    assert list(got["station_name"]) == list(want["station_name"])
    np.testing.assert_array_equal(got["series_time"].to_numpy(), want["series_time"].to_numpy())
    np.testing.assert_array_equal(got["x"].to_numpy(dtype=float), want["x"].to_numpy(dtype=float))


def nearest_cells(root: Path, buoys: pd.DataFrame, tolerance: pd.Timedelta | None, level: float) -> pd.DataFrame:
    """Return, per buoy record, the grid cell xarray's ``sel(method="nearest", tolerance=…)`` picks (NaN: none)."""
    ds = open_grid(root / "grid_e").sel(lev=level)
    # A global grid wraps: the first meridian again at +360, so 359° is nearest to 0°, as on the globe.
    wrapped = xr.concat([ds, ds.isel(lon=[0]).assign_coords(lon=ds["lon"].values[:1] + 360.0)], dim="lon")
    rows = []
    for rec in buoys.itertuples():
        try:
            cell = wrapped.sel(time=rec.time, method="nearest", tolerance=tolerance)
        except KeyError:
            rows.append((np.nan, pd.NaT, np.nan, np.nan))
            continue
        cell = cell.sel(lat=rec.lat, lon=np.mod(rec.lon, 360.0), method="nearest")
        rows.append((float(cell["ta"]), pd.Timestamp(cell["time"].values), float(cell["lat"]),
                     float(np.mod(cell["lon"], 360.0))))
    return pd.DataFrame(rows, columns=["ta", "mt", "mlat", "mlon"], index=buoys.index)


@pytest.mark.parametrize("tolerance", [None, "5 days"])
def test_matchup_is_xarray_sel_nearest_with_tolerance(catalog, tolerance) -> None:
    cat, root = catalog
    option = f", time => interval '{tolerance}'" if tolerance else ""
    got = answer(cat, "select b.station_name, b.time, m.ta, m.time as mt, m.lat as mlat, m.lon as mlon, m.lev "
                      f"from matchup(buoys as b, grid_e as m{option}) as mu")
    buoys = open_buoys(root)
    want = buoys.join(nearest_cells(root, buoys, pd.Timedelta(tolerance) if tolerance else None, 500.0))
    if tolerance:
        assert 0 < want["mt"].isna().sum() < len(want)  # some records have no model time within 5 days
    # Each matched record once per level; an unmatched one once, with NULLs.
    assert len(got) == 3 * want["mt"].notna().sum() + want["mt"].isna().sum()
    at500 = got[got["lev"] == 500].sort_values(["station_name", "time"]).reset_index(drop=True)
    matched = want[want["mt"].notna()].sort_values(["station_name", "time"]).reset_index(drop=True)
    assert len(at500) == len(matched)
    assert list(at500["station_name"]) == list(matched["station_name"])
    np.testing.assert_array_equal(at500["time"].to_numpy(), matched["time"].to_numpy())
    np.testing.assert_array_equal(at500["mt"].to_numpy(), matched["mt"].to_numpy())
    np.testing.assert_array_equal(at500["mlat"].to_numpy(), matched["mlat"].to_numpy())
    np.testing.assert_array_equal(at500["mlon"].to_numpy(), matched["mlon"].to_numpy())
    np.testing.assert_array_equal(at500["ta"].to_numpy(dtype=float), matched["ta"].to_numpy())
    unmatched = got[got["mt"].isna()]
    assert unmatched["ta"].isna().all() and len(unmatched) == want["mt"].isna().sum()


def test_matchup_within_a_distance(catalog) -> None:
    cat, root = catalog
    got = answer(cat, "select b.station_name, b.time, b.lat, b.lon, m.ta, m.lat as mlat, m.lon as mlon from "
                      "matchup(buoys as b, grid_e as m, position => '1500 km') as mu where m.lev = 850 or m.lev is null")
    buoys = open_buoys(root)
    want = buoys.join(nearest_cells(root, buoys, None, 850.0))
    p1, p2 = np.deg2rad(want["lat"]), np.deg2rad(want["mlat"])
    dl = np.deg2rad(want["mlon"] - want["lon"])
    km = 2 * 6371.0088 * np.arcsin(np.sqrt(np.sin((p2 - p1) / 2) ** 2 + np.cos(p1) * np.cos(p2) * np.sin(dl / 2) ** 2))
    near = km <= 1500
    assert 0 < near.sum() < len(want)
    assert len(got) == len(want)
    assert int(got["mlat"].notna().sum()) == int(near.sum())
    close = want[near]
    hit = got[got["mlat"].notna()]
    assert set(zip(hit["station_name"], hit["time"])) == set(zip(close["station_name"], close["time"]))
    hit = hit.sort_values(["station_name", "time"]).reset_index(drop=True)
    close = close.sort_values(["station_name", "time"]).reset_index(drop=True)
    np.testing.assert_array_equal(hit["ta"].to_numpy(dtype=float), close["ta"].to_numpy())


@pytest.mark.parametrize("sql, words", [
    ("select e.ta from grid_e e join grid360 o on e.time = o.time", ["noleap", "360_day"]),
    ("select b.sst from matchup(buoys as b, grid360 as m)", ["standard", "360_day"]),
    ("select e.ta from grid_e e join buoys b on e.lev = b.sst", None),
])
def test_incompatible_keys_are_refused_with_the_reason(catalog, sql, words) -> None:
    cat, _ = catalog
    if words is None:  # not keys of one kind: an ordinary comparison, not refused
        answer(cat, sql)
        return
    with pytest.raises(QueryError) as info:
        answer(cat, sql)
    for word in words:
        assert word in str(info.value)


def test_noleap_and_standard_times_join_by_their_labels(catalog) -> None:
    cat, root = catalog
    got = answer(cat, "select e.time, count(*) as n from grid_e e join grid_w w on e.time = w.time "
                      "and e.lat = w.lat and e.lon = w.lon and e.lev = w.lev group by e.time order by e.time")
    east = open_grid(root / "grid_e")
    assert list(got["time"]) == list(east["time"].to_index())
    assert set(got["n"]) == {3 * 6 * 8}


def test_a_matchup_with_a_curvilinear_grid_refuses_rather_than_dropping_position(tmp_path: Path) -> None:
    # The grid's latitude/longitude are 2-D (a rotated pole): matching on time alone would pair every buoy
    # record with every cell at its time. The default position => 'nearest' must say so, not do that.
    publish(builders.buoys(tmp_path / "buoys", start="2001-01-01", days=20), "buoys")
    (tmp_path / "cordex").mkdir()
    path = builders.rotated_pole(tmp_path / "cordex" / "tas.nc", "tas", lambda lat, lon: np.stack([lat] * 3),
                                 rlat=np.linspace(-10, 10, 11), rlon=np.linspace(-12, 12, 13), times=[0, 1, 2])
    publish([path], "cordex")
    cat = Catalog.scan(tmp_path)
    try:
        with pytest.raises(QueryError, match=r"matchup on position: m's latitude is lat, a 2-D coordinate.*"
                                             r"position => 'none'"):
            answer(cat, "select b.sst, m.tas from matchup(buoys as b, cordex as m)")
        # Said outright, pairing on time alone is what the user asked for: every cell at each record's time.
        got = answer(cat, "select b.time, m.tas from matchup(buoys as b, cordex as m, position => 'none') "
                          "where b.time < '2001-01-04'")
        buoys = open_buoys(tmp_path)
        assert len(got) == int((buoys["time"] < pd.Timestamp("2001-01-04")).sum()) * 11 * 13
    finally:
        cat.close()


def test_count_star_of_a_matchup_counts_its_records(catalog) -> None:
    # Each buoy record appears once per level of the grid (its other dimension): count(*) must say so,
    # as count(m.ta) and select * do.
    cat, root = catalog
    levels = open_grid(root / "grid_e").sizes["lev"]
    records = len(open_buoys(root))
    n = answer(cat, "select count(*) as n from matchup(buoys as b, grid_e as m)")["n"][0]
    everything = answer(cat, "select * from matchup(buoys as b, grid_e as m)")
    assert int(n) == len(everything) == records * levels
