"""Scale-out on Dask distributed: one catalog, many workers, one endpoint and ticket per worker.

    dask scheduler
    DSTP_CATALOG_ROOT=/data/catalog dask worker tcp://SCHED:8786 --preload dstp.cluster
    dstp serve /data/catalog --cluster tcp://SCHED:8786        # or --local-cluster 3 while developing

The coordinator (:mod:`.coordinator`) keeps the control plane — gRPC, HTTP,
access policy, admission — and plans each select-where query into partitions
(:mod:`.partitions`: pieces of the hyperslab along its outermost dimension,
at file boundaries) that run as Dask tasks on the workers (:mod:`.worker`).
Each worker keeps its partition's result and serves it on its own striped
data channel; the Query answer lists one endpoint and ticket per partition,
and the client fetches them in parallel. docs/scale-out.md has the whole
story: deployment, faults, what the coordinator answers itself.

This package is the only place that imports ``distributed``; the catalog,
the query engine and the service know nothing of it.
"""

from __future__ import annotations

from typing import Any

__all__ = ["dask_setup", "dask_teardown"]


def dask_setup(worker: Any) -> None:
    """``dask worker --preload dstp.cluster``: start this worker's dstp node from ``DSTP_*`` settings
    (``DSTP_CATALOG_ROOT``: where this host sees the catalog)."""
    from dstp.cluster.worker import start_node
    from dstp.settings import Settings

    start_node(worker, Settings.from_env())


def dask_teardown(worker: Any) -> None:
    """Stop the worker's dstp node (the preload's counterpart)."""
    from dstp.cluster.worker import stop_node

    stop_node(worker)
