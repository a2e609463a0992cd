"""A server with its data channels enabled, and a catalog for in-process channels, for the transport tests."""

from __future__ import annotations

from pathlib import Path
from typing import Iterator

import pytest

import dstp
from dstp.catalog.registry import Catalog
from dstp.server import DstpServer
from dstp.settings import Settings
from dstp.transport.tuning import AutoTuner


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

