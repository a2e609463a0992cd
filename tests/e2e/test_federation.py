"""Federation: two real dstp servers on loopback, one naming a dataset of the other with ``<remote>``.

Server B serves a model grid. Server A serves buoy records, a second grid,
an identical local copy of B's grid (``grid_e``), and ``grid_far``: B's grid
declared with ``<remote server="B" dataset="grid_e"/>``. A federated query on
A must equal the same query over the local copy, and A must pull from B only
the key ranges the query needs — checked on what arrived (rows, bytes) and on
what B read from its files for the query A sent it.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Iterator

import numpy as np
import pandas as pd
import pyarrow as pa
import pytest
import xarray as xr

import builders

import dstp
from dstp.catalog.publish import publish
from dstp.catalog.registry import Catalog
from dstp.federation import ClientRemoteSource
from dstp.query.execute import QueryExecution, prepare_query
from dstp.server import DstpServer
from dstp.settings import Settings

REMOTE_XML = """<?xml version="1.0"?>
<dataset xmlns="urn:dstp:descriptor:1" id="grid_far" version="1">
  <title>The model grid, served by the other server</title>
  <remote server="{server}" dataset="grid_e"/>
</dataset>
"""
KEYS = "e.time = w.time and e.lat = w.lat and e.lon = w.lon and e.lev = w.lev"


def _settings(root: Path) -> Settings:
    return Settings(catalog_root=root, port=0, http_port=-1, data_port=-1, udt_port=-1, batch_rows=2000)


def _pressure_obs(folder: Path) -> Path:
    """Write CF point records whose vertical key, pres (hPa, axis Z), only the descriptor names as a key."""
    import netCDF4

    folder.mkdir()
    path = folder / "obs.nc"
    with netCDF4.Dataset(path, "w") as nc:
        nc.featureType = "point"
        nc.createDimension("obs", 4)
        for name, units, std, values in (("time", "days since 2000-01-01", "time", [20.0, 75.0, 300.0, 500.0]),
                                         ("lat", "degrees_north", "latitude", [-40.0, 5.0, 25.0, 60.0]),
                                         ("lon", "degrees_east", "longitude", [10.0, 100.0, 170.0, 300.0]),
                                         ("pres", "hPa", "air_pressure", [950.0, 550.0, 700.0, 300.0])):
            v = nc.createVariable(name, "f8", ("obs",))
            v.units, v.standard_name = units, std
            v[:] = values
        nc["pres"].axis, nc["pres"].positive = "Z", "down"
        val = nc.createVariable("val", "f4", ("obs",))
        val.coordinates = "time lat lon pres"
        val[:] = [1.0, 2.0, 3.0, 4.0]
    return path


@pytest.fixture(scope="module")
def servers(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[DstpServer, DstpServer, Path, Path]]:
    root_b = tmp_path_factory.mktemp("server_b")
    publish(builders.model_grid(root_b / "grid_e", years=(2000, 2001), nlat=12, nlon=16), "grid_e")
    publish(builders.model_grid(root_b / "grid360", calendar="360_day", years=(2000,), nlat=4, nlon=4), "grid360")
    publish([_pressure_obs(root_b / "obs")], "obs")
    server_b = DstpServer(_settings(root_b))
    server_b.start()
    assert server_b.endpoints is not None
    root_a = tmp_path_factory.mktemp("server_a")
    shutil.copytree(root_b / "grid_e", root_a / "grid_e")
    shutil.copytree(root_b / "grid360", root_a / "grid360")
    shutil.copytree(root_b / "obs", root_a / "obs")
    publish(builders.model_grid(root_a / "grid_w", calendar="standard", years=(2000, 2001), nlat=12, nlon=16,
                                lon_west=True, time_unit="hours", lev_units="Pa", seed=8), "grid_w")
    publish(builders.buoys(root_a / "buoys", start="2000-01-01", days=700, stations=20), "buoys")
    (root_a / "grid_far").mkdir()
    (root_a / "grid_far" / "grid_far.dstp.xml").write_text(REMOTE_XML.format(server=server_b.endpoints.grpc))
    (root_a / "obs_far").mkdir()
    (root_a / "obs_far" / "obs_far.dstp.xml").write_text(REMOTE_XML.format(server=server_b.endpoints.grpc).replace(
        'id="grid_far"', 'id="obs_far"').replace('dataset="grid_e"', 'dataset="obs"'))
    (root_a / "far360").mkdir()
    (root_a / "far360" / "far360.dstp.xml").write_text(REMOTE_XML.format(server=server_b.endpoints.grpc).replace(
        'id="grid_far"', 'id="far360"').replace('dataset="grid_e"', 'dataset="grid360"'))
    server_a = DstpServer(_settings(root_a))
    try:
        server_a.start()
        yield server_a, server_b, root_a, root_b
    finally:
        server_a.stop()
        server_b.stop()


@pytest.fixture()
def clients(servers) -> Iterator[tuple[dstp.Client, dstp.Client]]:
    server_a, server_b, _, _ = servers
    assert server_a.endpoints is not None and server_b.endpoints is not None
    with dstp.connect(server_a.endpoints.grpc) as a, dstp.connect(server_b.endpoints.grpc) as b:
        yield a, b


def same_records(got: pa.Table, want: pa.Table) -> None:
    assert got.column_names == want.column_names
    g, w = got.to_pandas(), want.to_pandas()
    keys = list(g.columns)
    g = g.sort_values(keys, na_position="first").reset_index(drop=True)
    w = w.sort_values(keys, na_position="first").reset_index(drop=True)
    pd.testing.assert_frame_equal(g, w, check_dtype=False)


def test_the_remote_dataset_answers_queries(clients) -> None:
    a, _ = clients
    far = a.query("select lat, lon from grid_far where lat > 50")
    assert far.num_rows > 0 and pa.compute.min(far.column("lat")).as_py() > 50


@pytest.mark.parametrize("sql", [
    "select e.time, e.lev, e.lat, e.lon, e.ta as a, w.ta as b from {grid} e join grid_w w on " + KEYS
    + " where w.lat > 40 and e.time >= '2001-03-01'",
    "select w.lon, avg(e.ta - w.ta) as d, count(*) as n from {grid} e join grid_w w on " + KEYS
    + " where e.lev = 500 group by w.lon",
    "select b.station_name, b.time, m.ta, m.time as mt, m.lat as mlat, m.lon as mlon from "
    "matchup(buoys as b, {grid} as m, time => interval '10 days') as mu where m.lev = 850",
    # count(*) counts the default grid's points, whichever server holds the files
    "select count(*) as n from {grid}",
    "select time, count(*) as n from {grid} where lat > 0 group by time",
    "select count(*) as n from stride({grid}, lat = 2)",
])
def test_federated_query_equals_the_single_server_query(clients, sql) -> None:
    a, _ = clients
    federated = a.query(sql.format(grid="grid_far"))
    local = a.query(sql.format(grid="grid_e"))
    assert local.num_rows > 0
    same_records(federated, local)


@pytest.mark.parametrize("sql", [
    "select time, lat, lon, ta from {grid} where month(time) = 2 and day(time) > 10 and lev = 500",
    "select month(time) as m, count(*) as n from {grid} where dayofyear(time) > 300 group by m",
])
def test_calendar_functions_on_a_remote_360_day_grid_equal_the_local_ones(clients, sql) -> None:
    a, _ = clients
    local = a.query(sql.format(grid="grid360"))
    assert local.num_rows > 0
    same_records(a.query(sql.format(grid="far360")), local)


def _run(root: Path, sql: str) -> tuple[pa.Table, QueryExecution]:
    """Run ``sql`` in process over server A's catalog (B reached over loopback), keeping the execution's counters."""
    settings = Settings(batch_rows=2000)
    source = ClientRemoteSource()
    catalog = Catalog.scan(root, remote_source=source)
    try:
        prepared = prepare_query(sql, catalog, settings)
        execution = QueryExecution(prepared, settings)
        table = pa.Table.from_batches(list(execution.batches()), schema=prepared.schema)
        return table, execution
    finally:
        source.close()
        catalog.close()


def test_a_join_pulls_only_the_key_ranges_it_needs(servers, clients) -> None:
    _, _, root_a, root_b = servers
    _, b = clients
    sql = ("select e.time, e.lat, e.lon, e.ta, w.ta from grid_far e join grid_w w on " + KEYS
           + " where w.lat > 40 and e.time >= '2001-03-01' and e.lev = 250")
    table, execution = _run(root_a, sql.replace("e.ta, w.ta", "e.ta as a, w.ta as b"))
    grid = xr.open_mfdataset(sorted((root_b / "grid_e").glob("*.nc")), combine="nested", concat_dim="time",
                             decode_times=xr.coders.CFDatetimeCoder(use_cftime=True))
    times = [t for t in grid["time"].values if (t.year, t.month) >= (2001, 3)]
    lats = [v for v in grid["lat"].values if v > 40]
    needed = len(times) * len(lats) * grid.sizes["lon"]  # one level, the later months, the northern latitudes
    whole = grid["ta"].size
    grid.close()
    assert table.num_rows == needed
    summary = execution.summary
    assert summary.remote_rows == needed < whole / 10
    assert 0 < summary.remote_bytes < needed * 64  # the key columns and ta for those records, not the grid
    [sent] = execution._remote.queries
    b.query(sent)  # what B read from its files for A's query
    assert b.last_summary["elements_read"] <= 2 * needed  # ta and the other columns of the slab: a box, not the grid
    assert b.last_summary["elements_read"] < whole / 10


def test_a_matchup_pulls_only_the_box_its_records_need(servers, clients) -> None:
    _, _, root_a, root_b = servers
    _, b = clients
    sql = ("select b.station_name, b.time, m.ta from matchup(buoys as b, grid_far as m, time => interval '10 days') "
           "as mu where b.lat between 10 and 40 and m.lev = 850")
    table, execution = _run(root_a, sql)
    with xr.open_dataset(root_a / "buoys" / "buoys.nc") as buoys:
        lat = buoys["lat"].values
    grid = xr.open_mfdataset(sorted((root_b / "grid_e").glob("*.nc")), combine="nested", concat_dim="time",
                             decode_times=False)
    whole = grid["ta"].size
    glat = grid["lat"].values
    grid.close()
    near = {int(np.argmin(np.abs(glat - v))) for v in lat if 10 <= v <= 40}
    assert near, "the fixture should put a buoy between 10 and 40 N"
    rows = max(near) - min(near) + 1  # latitude rows of the box
    assert 0 < execution.summary.remote_rows <= rows * 24 * 16  # at most: those rows, every month and longitude
    assert execution.summary.remote_rows < whole / 10
    [sent] = execution._remote.queries
    b.query(sent)
    assert b.last_summary["elements_read"] < whole / 10
    assert table.num_rows > 0


def test_a_remote_records_dataset_keeps_the_correlation_keys_its_server_declares(clients) -> None:
    # pres is the vertical key because B's descriptor says so; through A it must stay one: a matchup gives each
    # record its nearest level, as with the same records served locally, not one row per level.
    a, _ = clients
    sql = "select b.val, m.lev, m.ta from matchup({obs} as b, grid_e as m) as mu order by b.val"
    local = a.query(sql.format(obs="obs"))
    assert local.num_rows == 4
    same_records(a.query(sql.format(obs="obs_far")), local)


class _RefusingSource(ClientRemoteSource):
    """The real source, whose other server refuses every query at once (a fault through the RemoteSource seam)."""

    def stream(self, server: str, sql: str, token: str | None, cancel: object) -> object:
        from dstp.errors import LimitExceededError

        raise LimitExceededError(f"{server} answered: the server is running its maximum of 8 queries")


def test_a_remote_refusal_reaches_the_user_in_the_other_servers_words(servers) -> None:
    _, _, root_a, _ = servers
    source = _RefusingSource()
    catalog = Catalog.scan(root_a, remote_source=source)
    try:
        from dstp.errors import LimitExceededError

        with pytest.raises(LimitExceededError) as info:
            prepared = prepare_query("select lat, ta from grid_far where lat > 50", catalog, Settings())
            list(QueryExecution(prepared, Settings()).batches())
        assert "answered: the server is running its maximum of 8 queries" in str(info.value)
        assert "registered" not in str(info.value) and "Traceback" not in str(info.value)
    finally:
        source.close()
        catalog.close()


def test_a_remote_dataset_published_while_serving_is_reached(servers, tmp_path: Path) -> None:
    """A ``<remote>`` descriptor added after start answers queries: the remote source is the catalog's from its
    scan (before, the server attached one only if remotes existed at start, so this one was refused)."""
    _, server_b, _, root_b = servers
    assert server_b.endpoints is not None
    root_c = tmp_path / "server_c"
    root_c.mkdir()
    now = [1_000.0]  # the scan's clock: a new descriptor settles when it is advanced, not by sleeping
    server_c = DstpServer(_settings(root_c).replace(catalog_watch=False), timer=lambda: now[0])
    server_c.start()
    try:
        assert server_c.catalog is not None and server_c.endpoints is not None
        (root_c / "grid_far").mkdir()
        (root_c / "grid_far" / "grid_far.dstp.xml").write_text(REMOTE_XML.format(server=server_b.endpoints.grpc))
        now[0] += 3_600.0
        server_c.catalog.refresh()
        assert "grid_far" in server_c.catalog.remotes
        sql = "select time, lat, lon, lev, ta from {} where lat > 0 and lev = 500"
        with dstp.connect(server_c.endpoints.grpc) as c:
            got = c.query(sql.format("grid_far"))
        with xr.open_mfdataset(sorted((root_b / "grid_e").glob("*.nc")), combine="by_coords") as ds:
            want = ds["ta"].sel(lev=500.0).where(ds.lat > 0, drop=True).to_dataframe().reset_index()
        assert got.num_rows == len(want) > 0
        assert np.allclose(np.sort(got["ta"].to_numpy(zero_copy_only=False)), np.sort(want["ta"].to_numpy()),
                           equal_nan=True)
    finally:
        server_c.stop()
