"""Helpers the tests of dstp/http import by name (a conftest's fixtures need no import; these do)."""

from __future__ import annotations

import contextlib
from pathlib import Path
from typing import Iterator

import httpx

from dstp.server import DstpServer
from dstp.settings import Settings


def web_settings(root: Path, **changes: object) -> Settings:
    """Return settings serving ``root`` on free loopback ports, HTTP on, data channels off."""
    return Settings(catalog_root=root, port=0, http_port=0, data_port=-1, udt_port=-1, batch_rows=4096).replace(
        **changes
    )


@contextlib.contextmanager
def anonymous_http(root: Path) -> Iterator[httpx.Client]:
    """Yield an HTTP client of a server of ``root`` that lets anonymous users read (gRPC on, data channels off)."""
    with DstpServer(Settings(catalog_root=root, port=0, http_port=0, data_port=-1, udt_port=-1,
                             allow_anonymous="true")) as srv:
        assert srv.endpoints is not None
        with httpx.Client(base_url=f"http://{srv.endpoints.http}", timeout=120) as client:
            yield client
