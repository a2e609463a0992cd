"""A worker whose copy of a dataset differs from the coordinator's never answers from other data.

Pieces are cut by index along the grid, so a worker that sees a different set of files (one month not
copied yet) or a file packed differently would answer from other records without noticing. Each task
carries the coordinator's dataset identity (files, sizes, coordinates, per-file decodings). A worker
whose identity is the coordinator's runs any piece; one whose copy differs runs only pieces that read
files it holds exactly (same path, size and fingerprint: tests/cluster/test_locality.py), through the
coordinator's decodings; any other piece that reaches it raises CatalogError naming what differs — the
query fails clearly.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Iterator

import netCDF4
import numpy as np
import pytest

import dstp
import oracle
from cluster.conftest import DaskCluster, start_dask, stop_dask
from dstp.catalog.registry import Catalog
from dstp.cluster.partitions import DatasetIdentity, check_identities, identities
from dstp.errors import CatalogError
from dstp.query.execute import prepare_query
from dstp.server import DstpServer
from dstp.settings import Settings

pytestmark = pytest.mark.timeout(180)

SETTINGS = Settings(batch_rows=4096)
SQL = "select humidity, time, lev, lat, lon from ccm3 where lat > 0"


def _copy(src: Path, dst: Path) -> Path:
    """Copy the ccm3 and ocean samples of the session's catalog (not its deliberately broken datasets)."""
    for name in ("ccm3", "ocean"):
        shutil.copytree(src / name, dst / name)
    return dst


def _repack(root: Path) -> Path:
    """Change the packing (add_offset) of humidity in one ccm3 file, in place."""
    path = sorted((root / "ccm3").glob("*.nc"))[1]
    with netCDF4.Dataset(path, "r+") as f:
        f["RELHUM"].setncattr("add_offset", np.float32(51.0))
    return path


def _identities(root: Path, sql: str = SQL) -> tuple[DatasetIdentity, ...]:
    cat = Catalog.scan(root)
    try:
        return identities(prepare_query(sql, cat, SETTINGS))
    finally:
        cat.close()


def _check(root: Path, expected: tuple[DatasetIdentity, ...]) -> None:
    cat = Catalog.scan(root)
    try:
        check_identities(prepare_query(SQL, cat, SETTINGS), expected, "worker w1")
    finally:
        cat.close()


def test_a_copy_elsewhere_has_the_same_identity(catalog_root: Path, tmp_path: Path) -> None:
    want = _identities(catalog_root)
    assert [i.dataset for i in want] == ["ccm3"]
    assert _identities(_copy(catalog_root, tmp_path / "copy")) == want
    _check(tmp_path / "copy", want)  # returns: nothing differs


def test_a_missing_file_is_named(catalog_root: Path, tmp_path: Path) -> None:
    want = _identities(catalog_root)
    root = _copy(catalog_root, tmp_path / "short")
    gone = sorted((root / "ccm3").glob("*.nc"))[-1]
    gone.unlink()
    with pytest.raises(CatalogError, match=rf"worker w1: its copy of dataset 'ccm3' is not the coordinator's "
                                           rf"\({gone.name} missing here\)"):
        _check(root, want)


def test_a_file_packed_differently_is_refused(catalog_root: Path, tmp_path: Path) -> None:
    want = _identities(catalog_root)
    root = _copy(catalog_root, tmp_path / "repacked")
    path = _repack(root)
    same_size = path.stat().st_size == (catalog_root / "ccm3" / path.name).stat().st_size
    detail = "the same file names and sizes, but" if same_size else f"{path.name} has"
    with pytest.raises(CatalogError, match=f"dataset 'ccm3' is not the coordinator's \\({detail}"):
        _check(root, want)


@pytest.fixture(scope="module")
def mixed_cluster(catalog_root: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[DaskCluster]:
    """Two workers: w0 on the coordinator's catalog, w1 on a copy whose ccm3 has one file repacked."""
    tmp = tmp_path_factory.mktemp("mixed")
    stale = _copy(catalog_root, tmp / "stale")
    _repack(stale)
    cluster = start_dask(catalog_root, tmp, n_workers=2, worker_roots=[catalog_root, stale])
    yield cluster
    stop_dask(cluster)


def _pieces(root: Path) -> tuple[list, tuple[DatasetIdentity, ...]]:  # type: ignore[type-arg]
    """The coordinator's 2-worker pieces of SQL and its identities."""
    from dstp.cluster.partitions import plan_partitions

    cat = Catalog.scan(root)
    try:
        prepared = prepare_query(SQL, cat, SETTINGS)
        return list(plan_partitions(prepared, 2)), identities(prepared)
    finally:
        cat.close()


def test_a_stale_worker_runs_only_what_its_matching_files_hold_and_refuses_the_rest(
        catalog_root: Path, mixed_cluster: DaskCluster, client: dstp.Client) -> None:
    from distributed import Client

    from dstp.cluster.worker import run_partition

    by_name = {p.args[-1]: w for w, p in mixed_cluster.workers.items()}  # type: ignore[index] # "--name", "wN"
    good, stale = by_name["w0"], by_name["w1"]  # w1 runs on the copy with a repacked ccm3 file (the 2nd)
    specs, expect = _pieces(catalog_root)
    with Client(mixed_cluster.address, timeout=30) as dask_client:
        # Before the coordinator has asked it which files it holds, a piece reaching it is refused whole.
        future = dask_client.submit(run_partition, "identity-probe", SQL, specs[0], "none", "", expect,
                                    workers=[stale], allow_other_workers=False, pure=False)
        with pytest.raises(CatalogError, match=rf"cluster worker {stale}: its copy of dataset 'ccm3' is not the "
                                               "coordinator's .*DSTP_CATALOG_ROOT"):
            future.result(timeout=60)
    settings = Settings(catalog_root=catalog_root, port=0, http_port=-1, data_port=0, udt_port=-1, batch_rows=4096)
    server = DstpServer(settings, cluster=mixed_cluster.address)
    server.start()
    try:
        assert server.endpoints is not None
        with dstp.connect(server.endpoints.grpc) as c:
            # ccm3 differs on the stale worker in one file: pieces reading that file (time 4..7) run on the
            # other worker; the stale one may run the rest; the answer is exact.
            stream = c.query_batches(SQL, transport="striped", streams=2)
            got = stream.read_all()
            oracle.assert_same_records(got, client.query(SQL))
            for p in stream.partitions:
                start, stop, step = p.hyperslab["time"]
                if p.worker == stale:
                    assert not any(4 <= t < 8 for t in range(start, stop, step)), p.hyperslab
            held = server.coordinator.holdings([good, stale], server.service.catalog.get("ccm3"))
            assert held == {good: frozenset({0, 1, 2}), stale: frozenset({0, 2})}
            # ocean is the same on both: its pieces still run on both workers.
            sql = "select salinity, time, depth from ocean where salinity > 34"
            stream = c.query_batches(sql, transport="striped", streams=2)
            got = stream.read_all()
            assert {p.worker for p in stream.partitions} == {good, stale}
            oracle.assert_same_records(got, client.query(sql))
    finally:
        server.stop()
    # Now it knows which files it holds: a piece reading the repacked file, sent to it anyway (a worker
    # replaced between planning and running), is refused, naming the file.
    reads_it = next(s for s in specs if s.start <= 4 < s.stop)
    with Client(mixed_cluster.address, timeout=30) as dask_client:
        future = dask_client.submit(run_partition, "identity-probe-2", SQL, reads_it, "none", "", expect,
                                    workers=[stale], allow_other_workers=False, pure=False)
        with pytest.raises(CatalogError, match=rf"cluster worker {stale} does not hold ccm3_1990-05.nc of dataset "
                                               f"'ccm3', which piece {reads_it.index} reads; it was not run"):
            future.result(timeout=60)
