"""Catalog tests read the catalog's warnings (caplog): no server's repeat limiter may hide them.

A server running in this process (a session fixture of another folder) puts a
:class:`dstp.log_limits.RepeatLimiter` on ``dstp.catalog`` until it stops; the
same warning logged by earlier tests within its window would be dropped here.
"""

from __future__ import annotations

import logging
from typing import Iterator

import pytest


@pytest.fixture(autouse=True)
def _catalog_warnings_unlimited() -> Iterator[None]:
    logger = logging.getLogger("dstp.catalog")
    kept = list(logger.filters)
    for f in kept:
        logger.removeFilter(f)
    yield
    for f in kept:
        logger.addFilter(f)
