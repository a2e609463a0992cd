"""Placement by file locality: workers that hold only some files of a dataset run the pieces that read them.

Its own cluster (module scope, three workers), each worker with a catalog root of its own that holds two
of ccm3's three monthly files (every file on two workers) and, on w0 only, the whole ocean dataset. A
piece that read a file its worker lacks would fail to open it, so an exact answer is itself proof of
placement; the tests also check each piece's range against its worker's files. The oracle is the
session's single server over the full catalog.

The placement itself (:func:`dstp.cluster.locality.place_by_files`) is checked without a cluster first,
by hypothesis over which workers hold which files and which months a query asks for.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Iterator

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import dstp
import oracle
from cluster.conftest import DaskCluster, KillVictimOnDial, running_coordinator, start_dask, stop_dask
from dstp.catalog.registry import Catalog
from dstp.cluster.locality import Placement, files_read, place_by_files
from dstp.cluster.partitions import PartitionSpec
from dstp.query.execute import PreparedQuery, prepare_query
from dstp.server import DstpServer
from dstp.settings import Settings
from query_cases import CASES

pytestmark = pytest.mark.timeout(180)

#: Which of ccm3's files (in time order) each worker holds: every file on two workers.
HOLDS = {"w0": (0, 1), "w1": (1, 2), "w2": (2, 0)}
BLOCK = 64 * 1024
SETTINGS = Settings(batch_rows=4096)


def _ccm3_files(root: Path) -> list[Path]:
    return sorted((root / "ccm3").glob("ccm3_*.nc"))


@pytest.fixture(scope="module")
def catalog(catalog_root: Path) -> Iterator[Catalog]:
    cat = Catalog.scan(catalog_root)
    yield cat
    cat.close()


def _prepare(catalog: Catalog, sql: str) -> PreparedQuery:
    return prepare_query(sql, catalog, SETTINGS)


def _span(prepared: PreparedQuery, placement: Placement) -> range:
    """The time indices a piece reads."""
    return prepared.plan.scans[0].hyperslab.ranges[0][placement.spec.start:placement.spec.stop]


def _check(prepared: PreparedQuery, placed: tuple[Placement, ...], holdings: dict[str, frozenset[int]]) -> None:
    """Pieces are contiguous, cover the query's range once, and run only where every file they read is."""
    first = prepared.plan.scans[0].hyperslab.ranges[0]
    assert [p.spec.index for p in placed] == list(range(len(placed)))
    assert placed[0].spec.start == 0 and placed[-1].spec.stop == len(first)
    assert all(a.spec.stop == b.spec.start for a, b in zip(placed, placed[1:]))
    assert all(p.spec.stop > p.spec.start for p in placed)
    for p in placed:
        need = files_read(prepared, p.spec)
        assert p.workers and all(need <= holdings[w] for w in p.workers), (p, need)
        assert set(p.workers) == {w for w, held in holdings.items() if need <= held}  # every holder may run it


def test_a_piece_reads_the_files_of_its_months_and_the_first_for_a_static_column(catalog: Catalog) -> None:
    prepared = _prepare(catalog, "select temperature, time from ccm3")
    ds = prepared.plan.scans[0].dataset
    assert [(f.start, f.count) for f in ds.files] == [(0, 4), (4, 4), (8, 4)]
    assert files_read(prepared) == {0, 1, 2}
    assert files_read(prepared, PartitionSpec(0, "time", 4, 8)) == {1}
    assert files_read(prepared, PartitionSpec(0, "time", 3, 5)) == {0, 1}
    # gw(lat) has no time axis: it is read from the first file, whichever months a piece covers.
    static = _prepare(catalog, "select temperature, gw, time from ccm3")
    assert files_read(static, PartitionSpec(0, "time", 8, 12)) == {0, 2}
    # Coordinates are held in memory: a query of coordinates alone reads no file.
    assert files_read(_prepare(catalog, "select time, lat from ccm3")) == frozenset()
    # WHERE on time narrows the scan to the files of those months.
    may = _prepare(catalog, "select temperature from ccm3 where time >= '1990-05-01' and time < '1990-09-01'")
    assert files_read(may) == {1}


def test_pieces_follow_the_files_each_worker_holds(catalog: Catalog) -> None:
    prepared = _prepare(catalog, "select temperature, time from ccm3")
    one_each = {"a": frozenset({0}), "b": frozenset({1}), "c": frozenset({2})}
    placed = place_by_files(prepared, one_each)
    assert not isinstance(placed, str)
    assert [(p.spec.start, p.spec.stop, p.workers) for p in placed] == [(0, 4, ("a",)), (4, 8, ("b",)),
                                                                       (8, 12, ("c",))]
    # Two workers with every file: whole files, never more than an even share (6 of 12 months) a piece.
    shared = {"a": frozenset({0, 1, 2}), "b": frozenset({0, 1, 2})}
    placed = place_by_files(prepared, shared)
    assert not isinstance(placed, str)
    _check(prepared, placed, shared)
    assert [(p.spec.start, p.spec.stop) for p in placed] == [(0, 4), (4, 8), (8, 12)]
    # A file larger than an even share (ocean: 2 files of 6 months, 3 workers) is split between its holders.
    ocean = _prepare(catalog, "select salinity, time from ocean")
    three = {w: frozenset({0, 1}) for w in "abc"}
    placed = place_by_files(ocean, three)
    assert not isinstance(placed, str)
    _check(ocean, placed, three)
    assert [(p.spec.start, p.spec.stop) for p in placed] == [(0, 3), (3, 6), (6, 9), (9, 12)]
    # A file nobody holds: not placed, and the reason names it.
    reason = place_by_files(prepared, {"a": frozenset({0, 1})})
    assert reason == "no cluster worker holds ccm3_1990-09.nc"
    # Each file held, but the static column's file (0) never beside file 2: no worker can read that piece.
    static = _prepare(catalog, "select temperature, gw from ccm3")
    reason = place_by_files(static, {"a": frozenset({0, 1}), "b": frozenset({2})})
    assert reason == "no cluster worker holds all of ccm3_1990-01.nc, ccm3_1990-09.nc, which one piece reads"


@settings(max_examples=150, deadline=None)
@given(held=st.lists(st.sets(st.integers(0, 2)), min_size=1, max_size=4),
       months=st.tuples(st.integers(0, 11), st.integers(1, 12)).filter(lambda m: m[1] > m[0] + 1),
       static=st.booleans(), step=st.integers(1, 3))
def test_placement_never_sends_a_piece_where_a_file_is_missing(catalog: Catalog, held: list[set[int]],
                                                               months: tuple[int, int], static: bool,
                                                               step: int) -> None:
    lo, hi = months
    columns = "temperature, gw" if static else "temperature"
    source = f"stride(ccm3, time = {step})" if step > 1 else "ccm3"
    end = f"1990-{hi + 1:02d}-01" if hi < 12 else "1991-01-01"
    prepared = _prepare(catalog, f"select {columns}, time from {source} "
                                 f"where time >= '1990-{lo + 1:02d}-01' and time < '{end}'")
    first = prepared.plan.scans[0].hyperslab.ranges[0]
    holdings = {f"w{i}": frozenset(h) for i, h in enumerate(held)}
    placed = place_by_files(prepared, holdings)
    if len(first) == 0:
        return
    if isinstance(placed, str):  # refused only when no worker can hold some piece whole
        need_each = [files_read(prepared, PartitionSpec(0, "time", k, k + 1)) for k in range(len(first))]
        assert any(not any(n <= h for h in holdings.values()) for n in need_each), placed
        assert placed.startswith("no cluster worker holds")
        return
    _check(prepared, placed, holdings)


# -- on a cluster --------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def worker_roots(catalog_root: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    files = _ccm3_files(catalog_root)
    roots = {}
    for name, held in HOLDS.items():
        root = tmp_path_factory.mktemp(f"local-{name}")
        (root / "ccm3").mkdir()
        shutil.copy2(catalog_root / "ccm3" / "ccm3.dstp.xml", root / "ccm3")
        for k in held:
            shutil.copy2(files[k], root / "ccm3" / files[k].name)
        if name == "w0":
            shutil.copytree(catalog_root / "ocean", root / "ocean")
        roots[name] = root
    return roots


@pytest.fixture(scope="module")
def dask_cluster(catalog_root: Path, worker_roots: dict[str, Path],
                 tmp_path_factory: pytest.TempPathFactory) -> Iterator[DaskCluster]:
    cluster = start_dask(catalog_root, tmp_path_factory.mktemp("dask"), n_workers=3,
                         worker_roots=[worker_roots[f"w{i}"] for i in range(3)])
    yield cluster
    stop_dask(cluster)


@pytest.fixture(scope="module")
def names(dask_cluster: DaskCluster) -> dict[str, str]:
    """Worker address → its name (w0, w1, w2)."""
    return {w: p.args[-1] for w, p in dask_cluster.workers.items()}  # type: ignore[index] # "--name", "wN"


@pytest.fixture(scope="module")
def coordinator(catalog_root: Path, dask_cluster: DaskCluster) -> Iterator[DstpServer]:
    """This module's coordinator (small blocks, file shares from 1 block); conftest's ``cluster_client`` uses it."""
    with running_coordinator(catalog_root, dask_cluster, block_bytes=BLOCK, cluster_file_min_bytes=BLOCK) as server:
        yield server


def _files_of(stream_partition, files: list[tuple[int, int]]) -> set[int]:  # type: ignore[no-untyped-def]
    start, stop, step = stream_partition.hyperslab["time"]
    return {k for k, (lo, n) in enumerate(files) if any(lo <= t < lo + n for t in range(start, stop, step))}


@pytest.mark.parametrize("sql", ["select temperature, time, lat from ccm3 where humidity > 50",
                                 "select temperature, gw, time from ccm3 where lat > 60",
                                 "select precipitation, time, lon from ccm3 where time >= '1990-04-01' "
                                 "order by precipitation desc, time"])
def test_each_piece_runs_on_a_worker_that_holds_its_files(cluster_client: dstp.Client, client: dstp.Client,
                                                          names: dict[str, str], sql: str) -> None:
    stream = cluster_client.query_batches(sql, transport="striped", streams=2)
    got = stream.read_all()
    want = client.query(sql)
    oracle.assert_same_records(got, want, ordered="order by" in sql)
    parts = stream.partitions
    assert parts and len({p.worker for p in parts}) >= 2  # spread over the holders
    files = [(0, 4), (4, 4), (8, 4)]
    static = {0} if "gw" in sql else set()
    for p in parts:
        assert _files_of(p, files) | static <= set(HOLDS[names[p.worker]]), (p.hyperslab, names[p.worker])


@pytest.mark.parametrize("sql, dataset, attrs, extra, ordered", CASES, ids=[c[0][:70] for c in CASES])
def test_shared_query_set_with_files_spread_over_workers(cluster_client, client, sql, dataset, attrs, extra,
                                                         ordered) -> None:
    got = cluster_client.query_batches(sql, transport="striped", streams=2).read_all()
    want = client.query(sql)
    assert got.schema.equals(want.schema, check_metadata=False)
    oracle.assert_same_records(got, want, ordered=ordered)


def test_a_dataset_on_one_worker_runs_there(cluster_client: dstp.Client, client: dstp.Client,
                                            names: dict[str, str]) -> None:
    sql = "select salinity, time, depth from ocean where salinity > 34"
    stream = cluster_client.query_batches(sql, transport="striped", streams=2)
    oracle.assert_same_records(stream.read_all(), client.query(sql))
    assert {names[p.worker] for p in stream.partitions} == {"w0"}


def test_a_reduction_is_reduced_where_the_files_are(coordinator: DstpServer, cluster_client: dstp.Client,
                                                    client: dstp.Client) -> None:
    sql = "select lev, avg(temperature) as t, count(*) as n from ccm3 where humidity > 40 group by lev"
    before = sum(r["partials"] for r in coordinator.coordinator.reports().values())
    oracle.assert_same_records(cluster_client.query(sql), client.query(sql))
    assert sum(r["partials"] for r in coordinator.coordinator.reports().values()) - before >= 2


def test_a_download_comes_from_the_workers_that_hold_the_file(coordinator: DstpServer, catalog_root: Path,
                                                             names: dict[str, str], tmp_path: Path) -> None:
    files = _ccm3_files(catalog_root)
    for k, source in enumerate(files):
        summary = None
        assert coordinator.endpoints is not None
        with dstp.connect(coordinator.endpoints.grpc) as c:
            summary = c.get("ccm3", source.name, tmp_path / source.name, transport="striped", streams=2)
        assert (tmp_path / source.name).read_bytes() == source.read_bytes()
        holders = {w for w, held in HOLDS.items() if k in held}
        assert {names[s["worker"]] for s in summary["shares"]} == holders
        assert sum(s["bytes"] for s in summary["shares"]) == source.stat().st_size


def test_a_holder_killed_mid_query_leaves_the_other_holder_to_answer(coordinator: DstpServer, client: dstp.Client,
                                                                     dask_cluster: DaskCluster,
                                                                     names: dict[str, str]) -> None:
    sql = "select temperature, humidity, time, lev, lat, lon from ccm3"
    endpoints = {r["endpoint"]: w for w, r in coordinator.coordinator.reports().items()}
    killer = KillVictimOnDial(dask_cluster, endpoints, None)  # whichever worker the client dials first
    assert coordinator.endpoints is not None
    with dstp.Client(coordinator.endpoints.grpc, wrap_channel=killer.wrap) as c:
        stream = c.query_batches(sql, transport="striped", streams=2)
        got = stream.read_all()
    assert len(killer.killed) == 1 and killer.killed[0] not in {p.worker for p in stream.partitions}
    oracle.assert_same_records(got, client.query(sql))
