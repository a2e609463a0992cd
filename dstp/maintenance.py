"""What ``dstp catalog reload`` does: ask the server serving a catalog to look at it again now, and wait.

The server that serves a catalog root is the process writing its index (it
holds the index's ``flock``, and its process id is in the lock file:
:func:`~dstp.catalog.index.writer_pid`). :func:`reload_server` sends it
``SIGHUP`` — the same as ``kill -HUP`` — and waits until the index says a
rescan finished after the signal, then reads the changes it published.
"""

from __future__ import annotations

import os
import signal
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from dstp.catalog.changes import Change
from dstp.catalog.index import CatalogIndex, writer_pid
from dstp.errors import CatalogError
from dstp.settings import Settings

__all__ = ["Reloaded", "reload_server"]


@dataclass(frozen=True, slots=True)
class Reloaded:
    """What a reload published."""

    pid: int
    #: The catalog version before and after.
    before: int
    version: int
    changes: tuple[Change, ...]


def reload_server(settings: Settings, root: Path, *, timeout_s: float = 120.0,
                  pause: Callable[[float], None] = time.sleep) -> Reloaded:
    """Make the server serving ``root`` rescan it now; return what changed (CatalogError if none serves it, or
    it did not finish within ``timeout_s``)."""
    from dstp.server import catalog_index_file

    root = Path(root).resolve()
    path = catalog_index_file(settings, root)
    if path is None:
        raise CatalogError("catalog_index is off (DSTP_CATALOG_INDEX=false): `dstp catalog reload` finds its server "
                           "through the index; send SIGHUP to the server process instead (kill -HUP PID)")
    pid = writer_pid(path)
    if pid is None:
        raise CatalogError(f"no dstp server is serving {root} with the index {path} (is it running with another "
                           "state_dir, DSTP_STATE_DIR?); a server started now reads the catalog as it is")
    index = CatalogIndex.open(path, root)
    try:
        refreshed, before = index.refreshed(), index.version
        try:
            os.kill(pid, signal.SIGHUP)
        except ProcessLookupError:
            raise CatalogError(f"the server that kept {path} (process {pid}) is gone") from None
        except PermissionError:
            raise CatalogError(f"the server serving {root} (process {pid}) runs as another user; ask it to reload "
                               "as that user") from None
        deadline = time.monotonic() + timeout_s
        while index.refreshed() == refreshed:
            if time.monotonic() > deadline:
                raise CatalogError(f"the server (process {pid}) did not finish looking at {root} within "
                                   f"{timeout_s:g} s; it goes on — see its log")
            pause(0.1)
        feed = index.changes(before)
        return Reloaded(pid, before, feed.version, feed.changes)
    finally:
        index.close()
