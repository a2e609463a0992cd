"""Bulk files from the workers: a download cut into shares, one per worker, m workers × n stripes.

Its own cluster (module scope, three workers): w0 and w1 see the session's catalog, w2 a copy in which
one ocean file holds other data values in the same bytes (same names, sizes, coordinates and packing:
the dataset identity cannot tell). Checked against the files' own bytes: every worker sends its share;
a plain client (no ``accept_parts``) and a small file get no shares; an interrupted download resumes with
shares of only what is missing; the copy with other bytes fails the coordinator's CRC-32C and the download
is done again from the coordinator alone; a worker SIGKILLed as the client dials it loses nothing.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path
from typing import Iterator

import grpc
import netCDF4
import numpy as np
import pytest

import dstp
from cluster.conftest import DaskCluster, KillVictimOnDial, running_coordinator, start_dask, stop_dask
from dstp.proto import dstp_pb2 as pb
from dstp.proto import dstp_pb2_grpc as pb_grpc
from dstp.server import DstpServer
from dstp.transport.client.files import STATE_SUFFIX
from dstp.transport.wire.ranges import merge_ranges
from dstp.transport.client.tuning import AutoTuner

pytestmark = pytest.mark.timeout(180)

BLOCK = 64 * 1024


def _altered_copy(root: Path, dst: Path) -> Path:
    """Copy ccm3 and ocean; in the copy, change the salinity values of one ocean file in place; return it."""
    for name in ("ccm3", "ocean"):
        shutil.copytree(root / name, dst / name)
    path = sorted((dst / "ocean").glob("*.nc"))[0]
    size = path.stat().st_size
    with netCDF4.Dataset(path, "r+") as f:
        var = f["so"]
        var.set_auto_maskandscale(False)
        values = np.asarray(var[:])
        values[values < 1e19] += 1  # salinity one unit higher; the land mask (missing_value) kept
        var[:] = values
    assert path.stat().st_size == size
    return path


@pytest.fixture(scope="module")
def altered(catalog_root: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    return _altered_copy(catalog_root, tmp_path_factory.mktemp("altered"))


@pytest.fixture(scope="module")
def dask_cluster(catalog_root: Path, altered: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[DaskCluster]:
    copy_root = altered.parents[1]
    cluster = start_dask(catalog_root, tmp_path_factory.mktemp("dask"), n_workers=3,
                         worker_roots=[catalog_root, catalog_root, copy_root])
    yield cluster
    stop_dask(cluster)


@pytest.fixture(scope="module")
def coordinator(catalog_root: Path, dask_cluster: DaskCluster) -> Iterator[DstpServer]:
    with running_coordinator(catalog_root, dask_cluster, block_bytes=BLOCK, cluster_file_min_bytes=BLOCK) as server:
        yield server


def _largest(catalog_root: Path, dataset: str) -> Path:
    return max((catalog_root / dataset).glob("*.nc"), key=lambda p: p.stat().st_size)


def _sent(coordinator: DstpServer) -> dict[str, int]:
    return {w: r["file_bytes_sent"] for w, r in coordinator.coordinator.reports().items()}


def _connect(coordinator: DstpServer, tmp_path: Path, **kwargs) -> dstp.Client:  # type: ignore[no-untyped-def]
    assert coordinator.endpoints is not None
    return dstp.Client(coordinator.endpoints.grpc, tuner=AutoTuner(tmp_path / "tuner.json"), **kwargs)


def test_a_download_comes_in_shares_from_every_worker(coordinator: DstpServer, dask_cluster: DaskCluster,
                                                      catalog_root: Path, tmp_path: Path) -> None:
    source = _largest(catalog_root, "ccm3")
    before = _sent(coordinator)
    with _connect(coordinator, tmp_path) as c:
        summary = c.get("ccm3", source.name, tmp_path / "out.nc", transport="striped", streams=2)
    assert (tmp_path / "out.nc").read_bytes() == source.read_bytes()
    shares = summary["shares"]
    assert {s["worker"] for s in shares} == set(dask_cluster.workers)
    assert sum(s["bytes"] for s in shares) == summary["bytes"] == source.stat().st_size
    after = _sent(coordinator)
    for s in shares:  # each worker's own count of what it sent
        assert after[s["worker"]] - before[s["worker"]] == s["bytes"]
    assert "retried" not in summary


def test_dstp_get_says_which_workers_sent_what(coordinator: DstpServer, dask_cluster: DaskCluster,
                                              catalog_root: Path, tmp_path: Path) -> None:
    source = _largest(catalog_root, "ccm3")
    assert coordinator.endpoints is not None
    before = _sent(coordinator)
    out = tmp_path / "copy.nc"
    proc = subprocess.run([sys.executable, "-m", "dstp.cli", "get", "ccm3", source.name, "-o", str(out),
                           "--transport", "striped", "--no-progress", "--server", coordinator.endpoints.grpc],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert out.read_bytes() == source.read_bytes()
    after = _sent(coordinator)
    line = next(x for x in proc.stderr.splitlines() if x.startswith("in shares from "))
    assert line.startswith("in shares from 3 cluster sources: "), line
    endpoints = {w: r["endpoint"] for w, r in coordinator.coordinator.reports().items()}
    for worker, endpoint in endpoints.items():  # each worker's endpoint with the bytes that worker counted
        assert f"{endpoint} {after[worker] - before[worker]:,} bytes" in line, (line, worker)
    assert sum(after.values()) - sum(before.values()) == source.stat().st_size


def test_plain_clients_and_small_files_get_no_shares(coordinator: DstpServer, dask_cluster: DaskCluster,
                                                     catalog_root: Path) -> None:
    source = _largest(catalog_root, "ccm3")
    size = source.stat().st_size
    assert coordinator.endpoints is not None
    striped = [pb.CHANNEL_KIND_STRIPED_TCP]
    with grpc.insecure_channel(coordinator.endpoints.grpc) as channel:
        stub = pb_grpc.DstpStub(channel)
        plain = stub.OpenFile(pb.OpenFileRequest(dataset="ccm3", file=source.name, channels=striped))
        assert list(plain.parts) == [] and len(plain.offers) == 1
        cut = stub.OpenFile(pb.OpenFileRequest(dataset="ccm3", file=source.name, channels=striped, accept_parts=True))
        assert len(cut.parts) == 3 and len({p.worker for p in cut.parts}) == 3
        ranges = [(r.offset, r.offset + r.length) for p in cut.parts for r in p.ranges]
        assert merge_ranges(ranges) == [(0, size)] and sum(e - s for s, e in ranges) == size  # no overlap, no gap
        assert all(p.offer.endpoint and p.offer.ticket and p.offer.key for p in cut.parts)
        assert all(r.length % BLOCK == 0 for p in cut.parts[:-1] for r in p.ranges)
        lengths = [sum(r.length for r in p.ranges) for p in cut.parts]
        assert max(lengths) - min(lengths) <= len(lengths) * BLOCK  # equal shares, to a 64 KiB grain
        small = stub.OpenFile(pb.OpenFileRequest(dataset="ccm3", file=source.name, channels=striped,
                                                 range=pb.ByteRange(offset=0, length=BLOCK - 1), accept_parts=True))
        assert list(small.parts) == []
        grpc_only = stub.OpenFile(pb.OpenFileRequest(dataset="ccm3", file=source.name, accept_parts=True,
                                                     channels=[pb.CHANNEL_KIND_GRPC_STREAM]))
        assert list(grpc_only.parts) == []


def test_an_interrupted_download_resumes_with_shares_of_what_is_missing(coordinator: DstpServer, catalog_root: Path,
                                                                        tmp_path: Path) -> None:
    source = _largest(catalog_root, "ccm3")
    out = tmp_path / "resume.nc"
    reports: list[int] = []

    def interrupt(progress) -> None:  # type: ignore[no-untyped-def]
        reports.append(progress.bytes)
        raise KeyboardInterrupt  # Ctrl-C as the first block of each share is on disk

    with _connect(coordinator, tmp_path) as c:
        with pytest.raises(KeyboardInterrupt):
            c.get("ccm3", source.name, out, transport="striped", streams=1, progress=interrupt)
        assert (tmp_path / ("resume.nc" + STATE_SUFFIX)).exists() and not out.exists()
        summary = c.get("ccm3", source.name, out, transport="striped", streams=2)
    size = source.stat().st_size
    assert 0 < summary["resumed_from"] <= 3 * BLOCK < size  # at most a block per share was on disk
    assert sum(s["bytes"] for s in summary["shares"]) == summary["bytes"] == size - summary["resumed_from"]
    assert out.read_bytes() == source.read_bytes()


def test_a_copy_with_other_bytes_fails_the_checksum_and_the_coordinator_sends_it(
        coordinator: DstpServer, dask_cluster: DaskCluster, catalog_root: Path, altered: Path, tmp_path: Path) -> None:
    source = catalog_root / "ocean" / altered.name
    assert altered.read_bytes() != source.read_bytes()
    before = _sent(coordinator)
    with _connect(coordinator, tmp_path) as c:
        summary = c.get("ocean", source.name, tmp_path / "ocean.nc", transport="striped", streams=2)
    assert (tmp_path / "ocean.nc").read_bytes() == source.read_bytes()
    assert "does not match the server's" in summary["retried"]
    assert "shares" not in summary  # the second attempt: every byte from the coordinator
    assert sum(_sent(coordinator).values()) > sum(before.values())  # the first attempt did come from the workers


def test_a_worker_killed_as_its_share_starts_loses_nothing(coordinator: DstpServer, dask_cluster: DaskCluster,
                                                           catalog_root: Path, tmp_path: Path) -> None:
    source = _largest(catalog_root, "ccm3")
    endpoints = {r["endpoint"]: w for w, r in coordinator.coordinator.reports().items()}
    victim = sorted(dask_cluster.workers)[0]
    killer = KillVictimOnDial(dask_cluster, endpoints, victim)
    with _connect(coordinator, tmp_path, wrap_channel=killer.wrap) as c:
        summary = c.get("ccm3", source.name, tmp_path / "out.nc", transport="striped", streams=2)
    assert killer.killed == [victim]
    assert (tmp_path / "out.nc").read_bytes() == source.read_bytes()
    shares = summary["shares"]
    assert victim not in {s["worker"] for s in shares}
    assert any(s["attempt"] == 2 for s in shares)  # what the victim should have sent was asked for again
    assert sum(s["bytes"] for s in shares) == source.stat().st_size
