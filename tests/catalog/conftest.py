"""Catalog tests read the catalog's warnings (caplog): no server's repeat limiter may hide them.

The store tests share two module fixtures: ``samples`` (the small samples, written once per module) and
``s3`` (them uploaded to an S3 server of the module's own under ``s3://archive/cmip/samples``; a module
that needs a fresh server per test defines its own).

A server running in this process (a session fixture of another folder) puts a
:class:`dstp.log_limits.RepeatLimiter` on ``dstp.catalog`` until it stops; the
same warning logged by earlier tests within its window would be dropped here.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Iterator

import pytest
from store_servers import S3Server

from dstp.samples import generate_samples


@pytest.fixture(autouse=True)
def _catalog_warnings_unlimited() -> Iterator[None]:
    logger = logging.getLogger("dstp.catalog")
    kept = list(logger.filters)
    for f in kept:
        logger.removeFilter(f)
    yield
    for f in kept:
        logger.addFilter(f)


@pytest.fixture(scope="module")
def samples(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The small bundled samples, written once per test module (the store tests upload them)."""
    root = tmp_path_factory.mktemp("samples")
    generate_samples(root, "small")
    return root


@pytest.fixture(scope="module")
def s3(samples: Path) -> Iterator[S3Server]:
    """An S3 server (moto) of the module's own holding ``samples`` under ``s3://archive/cmip/samples``."""
    server = S3Server()
    server.client().create_bucket(Bucket="archive")
    server.upload_tree("archive", samples, "cmip/samples")
    yield server
    server.stop()
