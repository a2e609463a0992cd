"""Fixtures of the tests of dstp/http: a real dstp server with its HTTP interface on a free loopback port."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Iterator

import httpx
import pytest

from http_fixtures import web_settings

from dstp.server import DstpServer

ARTIFACTS = Path(__file__).resolve().parents[2] / "test-artifacts" / "http"


@pytest.fixture(scope="session")
def web_server(catalog_root: Path) -> Iterator[DstpServer]:
    srv = DstpServer(web_settings(catalog_root))
    srv.start()
    yield srv
    srv.stop()


@pytest.fixture(scope="session")
def base_url(web_server: DstpServer) -> str:
    assert web_server.endpoints is not None and web_server.endpoints.http
    return f"http://{web_server.endpoints.http}"


@pytest.fixture()
def http(base_url: str) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=base_url, timeout=30) as c:
        yield c


@pytest.fixture()
def private_catalog(tmp_path: Path, catalog_root: Path) -> Path:
    """A catalog holding a copy of ccm3 only, for tests that damage files."""
    root = tmp_path / "catalog"
    shutil.copytree(catalog_root / "ccm3", root / "ccm3")
    return root


@pytest.fixture()
def private_server(private_catalog: Path) -> Iterator[DstpServer]:
    """A server of its own over ``private_catalog``."""
    srv = DstpServer(web_settings(private_catalog))
    srv.start()
    yield srv
    srv.stop()


@pytest.fixture(scope="session")
def artifacts() -> Path:
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    return ARTIFACTS
