"""The coordinator's list of live workers is the scheduler's, every time it is asked.

Dask's ``Client.scheduler_info`` returns a cache that the client's periodic
refresh (which fetches no workers) may overwrite between the fetch and the
read; a coordinator that trusted it saw an empty cluster now and then and
refused a reduction. The refresh interval is Dask's own setting: made 5 ms
here, so a refresh lands inside most of the calls below.
"""

from __future__ import annotations

from pathlib import Path

import dask

from cluster.conftest import DaskCluster
from dstp.cluster.coordinator import Coordinator
from dstp.settings import Settings

CALLS = 400


def test_every_call_sees_every_worker(catalog_root: Path, dask_cluster: DaskCluster) -> None:
    with dask.config.set({"distributed.client.scheduler-info-interval": "5ms"}):
        coordinator = Coordinator(Settings(catalog_root=catalog_root), address=dask_cluster.address).start()
    try:
        seen = [coordinator.workers() for _ in range(CALLS)]
    finally:
        coordinator.stop()
    expected = sorted(dask_cluster.workers)
    assert [s for s in seen if s != expected] == []
