"""Reductions on a real Dask cluster: partial aggregates on every worker, combined by the coordinator.

The oracle is the session's single server (itself checked against xarray and pandas in
tests/query/test_reductions_oracle.py). Keys, counts, minima and maxima must be equal exactly; sums
and means of floating-point values within 1e-12 relative (the pieces add in another order, as DuckDB's
own parallel aggregation does). Each worker's report counts the pieces it reduced, which proves where
the work ran; reductions that cannot be split are answered by the coordinator and count nothing.
A second coordinator on the same cluster merges the pieces in a tree (fan-in 2: two pieces merged on
a worker, the third beside them), which the workers' reports count.
"""

from __future__ import annotations

from pathlib import Path
from typing import Iterator

import numpy as np
import pyarrow as pa
import pytest

import dstp
from dstp.server import DstpServer
from dstp.settings import Settings

pytestmark = pytest.mark.timeout(180)

SPLIT = [
    ("select lev, month(time) as month, avg(temperature) from ccm3 group by lev, month", False),
    ("select avg(temperature), count(*), min(time), max(time), count(humidity), sum(humidity), min(humidity) "
     "from ccm3 where lat > 0", False),
    ("select time, max(salinity) as m, min(salinity), count(salinity), avg(temperature) from ocean group by 1 "
     "order by m desc, time limit 5", True),  # time breaks ties of m: compared in order
    ("select month(time), avg(temperature) from ccm3 group by month(time) order by 1", True),
    ("select lev, sum(temperature), count(*) from ccm3 group by lev order by 2 desc, 1 offset 3", True),
    ("select lat, avg(humidity), count(humidity), count(*) from ccm3 where humidity is null or lat < -80 "
     "group by lat", False),
    ("select count(*), avg(temperature), sum(temperature), max(lat) from ccm3 where lat > 1000", False),
    ("select depth, avg(sea_surface_height) as ssh, count(sea_surface_height) from ocean group by depth", False),
]
NOT_SPLIT = [
    "select lev, median(temperature) from ccm3 group by lev",
    "select lev, avg(temperature) from ccm3 group by lev having avg(temperature) > 250",
    "select count(distinct lev) from ccm3",
    "select lev, avg(temperature) - 273.15 as celsius from ccm3 group by lev",
]


def _partials(coordinator: DstpServer) -> dict[str, int]:
    return {w: r.get("partials", 0) for w, r in coordinator.coordinator.reports().items()}


def _sorted(table: pa.Table) -> pa.Table:
    """Sorted by every column, the group keys first (each query here lists its keys first)."""
    return table.sort_by([(n, "ascending") for n in table.column_names])


def _same(got: pa.Table, want: pa.Table, ordered: bool, sql: str) -> None:
    assert got.schema.equals(want.schema, check_metadata=False), (sql, got.schema, want.schema)
    assert got.num_rows == want.num_rows, sql
    if not ordered:
        got, want = _sorted(got), _sorted(want)
    for name, t in zip(want.column_names, want.schema.types):
        a, b = got[name], want[name]
        assert a.is_null().to_pylist() == b.is_null().to_pylist(), (sql, name)
        if pa.types.is_floating(t) and ("avg" in name.lower() or "sum" in name.lower() or name == "ssh"):
            np.testing.assert_allclose(a.to_numpy(zero_copy_only=False), b.to_numpy(zero_copy_only=False),
                                       rtol=1e-12, err_msg=f"{sql}: {name}")
        else:
            assert a.to_pylist() == b.to_pylist(), (sql, name)


@pytest.mark.parametrize("sql, ordered", SPLIT, ids=[s[:60] for s, _ in SPLIT])
def test_split_reductions_run_on_every_worker_and_equal_the_single_server(coordinator, cluster_client, client,
                                                                          sql, ordered) -> None:
    before = _partials(coordinator)
    got = cluster_client.query(sql, transport="striped", streams=2)
    after = _partials(coordinator)
    assert set(after) == set(before) and len(after) == 3
    assert all(after[w] == before[w] + 1 for w in after), (before, after)  # one piece per worker
    _same(got, client.query(sql), ordered, sql)
    # Every transport goes through the same execution: gRPC from the coordinator too.
    _same(cluster_client.query(sql, transport="grpc"), client.query(sql), ordered, sql)


@pytest.mark.parametrize("sql", NOT_SPLIT)
def test_reductions_that_do_not_split_are_answered_by_the_coordinator(coordinator, cluster_client, client,
                                                                      sql) -> None:
    before = _partials(coordinator)
    got = cluster_client.query(sql, transport="striped", streams=2)
    assert _partials(coordinator) == before
    _same(got, client.query(sql), False, sql)


def test_a_reduction_reads_as_much_on_the_workers_as_one_server_reads(cluster_client, client) -> None:
    sql = "select lev, avg(temperature), count(*) from ccm3 where lat > 0 group by lev"
    cluster_client.query(sql)
    single = client.query_batches(sql, transport="grpc")
    single.read_all()
    spread = cluster_client.query_batches(sql, transport="grpc")
    spread.read_all()
    assert spread.summary.elements_read == single.summary.elements_read > 0


@pytest.fixture(scope="module")
def tree_coordinator(catalog_root: Path, dask_cluster) -> Iterator[DstpServer]:  # type: ignore[no-untyped-def]
    settings = Settings(catalog_root=catalog_root, port=0, http_port=-1, data_port=0, udt_port=-1, batch_rows=4096,
                        cluster_reduce_fan_in=2)
    server = DstpServer(settings, cluster=dask_cluster.address)
    server.start()
    yield server
    server.stop()


def _merges(coordinator: DstpServer) -> int:
    return sum(r.get("merges", 0) for r in coordinator.coordinator.reports().values())


@pytest.mark.parametrize("sql, ordered", SPLIT, ids=[s[:60] for s, _ in SPLIT])
def test_pieces_merged_in_a_tree_on_the_workers_equal_the_single_server(tree_coordinator, client, sql,  # type: ignore[no-untyped-def]
                                                                        ordered) -> None:
    before, partials = _merges(tree_coordinator), _partials(tree_coordinator)
    assert tree_coordinator.endpoints is not None
    with dstp.connect(tree_coordinator.endpoints.grpc) as c:
        got = c.query(sql, transport="grpc")
    assert sum(_partials(tree_coordinator).values()) == sum(partials.values()) + 3  # three pieces
    assert _merges(tree_coordinator) == before + 1  # fan-in 2: one merge of two pieces, the third beside it
    _same(got, client.query(sql), ordered, sql)
