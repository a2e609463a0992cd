"""The Dask worker plugin that starts a dstp node on every worker (current and joining)."""

from __future__ import annotations

from typing import Any

from distributed.diagnostics.plugin import WorkerPlugin

from dstp.cluster.worker import start_node, stop_node
from dstp.settings import Settings

__all__ = ["DstpWorkerPlugin"]


class DstpWorkerPlugin(WorkerPlugin):
    """Gives each worker the catalog under ``settings.catalog_root`` and a striped data channel.

    ``sealed``: the coordinator speaks TLS, so the workers' transfers are sealed (AES-256-GCM keyed per
    ticket), as a single server's are. A worker that already runs a node (``--preload dstp.cluster``,
    possibly with its own local path to the files) keeps it.
    """

    name = "dstp"

    def __init__(self, settings: Settings, *, sealed: bool = False) -> None:
        self.settings = settings
        self.sealed = sealed

    def setup(self, worker: Any) -> None:
        start_node(worker, self.settings, sealed=self.sealed)

    def teardown(self, worker: Any) -> None:
        stop_node(worker)
