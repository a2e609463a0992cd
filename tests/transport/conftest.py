"""A server with its data channels enabled, and a catalog for in-process channels, for the transport tests."""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Iterator

import pytest
from agents import DSTP, agent_env

import dstp
from dstp.agent import AGENT_ENV
from dstp.catalog.registry import Catalog
from dstp.server import DstpServer
from dstp.settings import Settings
from dstp.transport.client.tuning import AutoTuner


@pytest.fixture(scope="session")
def data_server(catalog_root: Path) -> Iterator[DstpServer]:
    settings = Settings(catalog_root=catalog_root, port=0, http_port=-1, data_port=0, udt_port=0,
                        batch_rows=2048, window_bytes=2 * 2**20, block_bytes=256 * 1024)
    with DstpServer(settings) as srv:
        yield srv


@pytest.fixture()
def data_client(data_server: DstpServer, tmp_path: Path) -> Iterator[dstp.Client]:
    tuner = AutoTuner(tmp_path / "tuning.json")
    with dstp.Client(data_server.endpoints.grpc, tuner=tuner) as c:
        yield c


@pytest.fixture(scope="session")
def catalog(catalog_root: Path) -> Iterator[Catalog]:
    """The test catalog, scanned once, for tests that run the service in process (no server)."""
    scanned = Catalog.scan(catalog_root)
    yield scanned
    scanned.close()


@pytest.fixture()
def agent_process(tmp_path: Path) -> Iterator[tuple[Path, subprocess.Popen[str]]]:
    """A ``dstp agent`` process on a socket in ``tmp_path``: (socket, process)."""
    sock = tmp_path / "agent.sock"
    proc = subprocess.Popen([*DSTP, "agent", "--foreground", "--socket", str(sock)], env=agent_env(""),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None
        assert proc.stdout.readline().strip() == f"export {AGENT_ENV}={sock}"
        yield sock, proc
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.communicate(timeout=30)


@pytest.fixture()
def own_server(catalog_root: Path) -> Iterator[DstpServer]:
    """A server of the test's own: a stopped download's transfer keeps its slot for the resume window (60 s),
    which must not show in the shared server's count of running queries (tests/transport/test_auto_run.py)."""
    settings = Settings(catalog_root=catalog_root, port=0, http_port=-1, data_port=0, udt_port=-1,
                        block_bytes=256 * 1024)
    with DstpServer(settings) as srv:
        yield srv
