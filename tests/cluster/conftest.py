"""A real Dask cluster on loopback for the scale-out tests: one scheduler and three worker processes.

Started here, by the tests themselves (``./dev test`` needs nothing else running): ``dask scheduler``
and ``dask worker --preload dstp.cluster --no-nanny`` subprocesses (no nanny, so a SIGKILLed worker
stays dead), each bounded by a deadline and killed at the end. The coordinator is a DstpServer with
``cluster=`` the scheduler's address; the single-server answers come from the session's plain server.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterator

import pytest

import dstp
from dstp.server import DstpServer
from dstp.settings import Settings
from dstp.transport.client.channels import StripedChannel

DASK = str(Path(sys.executable).parent / "dask")
START_TIMEOUT_S = 90


#: How long a worker or coordinator of these tests lets a query wait for an admission slot (see start_dask).
ADMISSION_WAIT_S = 60.0


@dataclass
class DaskCluster:
    """A scheduler and its worker processes, by worker address."""

    address: str
    scheduler: subprocess.Popen
    workers: dict[str, subprocess.Popen] = field(default_factory=dict)
    log: Any = None

    def kill(self, worker: str) -> None:
        """SIGKILL a worker process and wait (bounded) until it is gone."""
        proc = self.workers[worker]
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=30)


class KillOnConnect(StripedChannel):
    """A client's channel that calls ``kill(host:port)`` as the client connects to that data endpoint."""

    def __init__(self, inner, kill) -> None:  # type: ignore[no-untyped-def]
        super().__init__()
        self.inner, self.kill = inner, kill

    def connect(self, stripe: int):  # type: ignore[no-untyped-def]
        self.kill(f"{self.inner.host}:{self.inner.port}")
        return self.inner.connect(stripe)


class KillVictimOnDial:
    """SIGKILLs worker ``victim`` (a real kill) the first time the client dials one of its endpoints
    (``endpoints``: data endpoint → worker), or — ``victim`` None — the first worker the client dials;
    pass ``wrap`` as the client's ``wrap_channel``."""

    def __init__(self, cluster: "DaskCluster", endpoints: dict[str, str], victim: str | None) -> None:
        self.cluster, self.endpoints, self.victim = cluster, endpoints, victim
        self.killed: list[str] = []
        self._lock = threading.Lock()

    def __call__(self, endpoint: str) -> None:
        with self._lock:
            worker = self.endpoints.get(endpoint)
            if worker is not None and worker == (self.victim or worker) and not self.killed:
                self.cluster.kill(worker)
                self.killed.append(worker)

    def wrap(self, channel: StripedChannel) -> KillOnConnect:
        return KillOnConnect(channel, self)


def _wait_for(predicate, timeout: float, what: str) -> None:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise TimeoutError(f"{what} did not happen within {timeout} s")
        time.sleep(0.05)


def start_dask(catalog_root: Path, tmp: Path, n_workers: int = 3, worker_roots: list[Path] | None = None) -> DaskCluster:
    """Start a scheduler and ``n_workers`` preloaded workers on loopback; return them once all are up.

    ``worker_roots``: each worker's own catalog root (default: all see ``catalog_root``). The scheduler logs
    to ``tmp/dask.log``, worker ``i`` to ``tmp/w{i}.log``."""
    from distributed import Client

    # A worker frees a partition's admission slot once its transfer has closed, after the client has its records;
    # on a loaded 2-core CI machine that took longer than the default 5 s wait, and the next test's partitions were
    # refused ("you are running your maximum of 4 queries at once"). These tests check answers, not admission.
    env = {**os.environ, "DSTP_CATALOG_ROOT": str(catalog_root), "DSTP_BATCH_ROWS": "4096",
           "DSTP_ADMISSION_WAIT_S": str(ADMISSION_WAIT_S), "DASK_DISTRIBUTED__WORKER__DAEMON": "False"}
    sched_file = tmp / "scheduler.json"
    log = open(tmp / "dask.log", "ab")  # noqa: SIM115 - closed with the processes
    scheduler = subprocess.Popen([DASK, "scheduler", "--host", "127.0.0.1", "--port", "0", "--no-dashboard",
                                  "--scheduler-file", str(sched_file)], stdout=log, stderr=log, env=env)
    cluster = DaskCluster("", scheduler, log=log)
    try:
        _wait_for(lambda: sched_file.exists() and sched_file.stat().st_size > 0, START_TIMEOUT_S, "scheduler start")
        cluster.address = json.loads(sched_file.read_text())["address"]
        procs = []
        for i in range(n_workers):
            # Each worker writes its own log: a crash report interleaved with the scheduler's lines is unreadable.
            with open(tmp / f"w{i}.log", "ab") as wlog:
                procs.append(subprocess.Popen(
                    [DASK, "worker", cluster.address, "--host", "127.0.0.1", "--no-nanny", "--nthreads", "1",
                     "--no-dashboard", "--preload", "dstp.cluster", "--name", f"w{i}"], stdout=wlog, stderr=wlog,
                    env={**env, "DSTP_CATALOG_ROOT": str((worker_roots or [catalog_root] * n_workers)[i])}))
        with Client(cluster.address, timeout=30) as client:
            client.wait_for_workers(n_workers, timeout=START_TIMEOUT_S)
            pids = client.run(os.getpid)
        by_pid = {p.pid: p for p in procs}
        cluster.workers = {address: by_pid[pid] for address, pid in pids.items()}
        return cluster
    except BaseException:
        stop_dask(cluster)
        raise


def stop_dask(cluster: DaskCluster) -> None:
    for proc in [*cluster.workers.values(), cluster.scheduler]:
        if proc.poll() is None:
            proc.terminate()
    for proc in [*cluster.workers.values(), cluster.scheduler]:
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=15)
    if cluster.log is not None:
        cluster.log.close()


@pytest.fixture(scope="module")
def dask_cluster(catalog_root: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[DaskCluster]:
    cluster = start_dask(catalog_root, tmp_path_factory.mktemp("dask"))
    yield cluster
    stop_dask(cluster)


@contextlib.contextmanager
def running_coordinator(catalog_root: Path, cluster: DaskCluster, **settings: Any) -> Iterator[DstpServer]:
    """A coordinator (``dstp serve ROOT --cluster``) on loopback over ``cluster``; ``settings`` beyond the
    tests' usual ones (no HTTP, no UDT, 4,096-record batches)."""
    base: dict[str, Any] = dict(catalog_root=catalog_root, port=0, http_port=-1, data_port=0, udt_port=-1,
                                batch_rows=4096, admission_wait_s=ADMISSION_WAIT_S)
    server = DstpServer(Settings(**(base | settings)), cluster=cluster.address)
    server.start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="module")
def coordinator(catalog_root: Path, dask_cluster: DaskCluster) -> Iterator[DstpServer]:
    with running_coordinator(catalog_root, dask_cluster) as server:
        yield server


@pytest.fixture(scope="module")
def cluster_client(coordinator: DstpServer) -> Iterator[dstp.Client]:
    assert coordinator.endpoints is not None
    with dstp.connect(coordinator.endpoints.grpc) as c:
        yield c
