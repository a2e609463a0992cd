"""Reading ahead of a scan of store-backed files: the chunks of the next blocks in flight while one is decoded.

A scan (:class:`~dstp.query.scan.GridScan`) reads its hyperslab block after block. Over an object store each
block's chunks are ranged GETs; read one block after another, every block pays its round trips (and TCP's slow
start) in turn: 67 blocks of a year of ERA5-like files took 42 s at 80 ms RTT where the bytes alone need a
fraction of that (bench/results/wan_stores.md). With a :class:`ReadAhead` the scan asks, before it reads a
block, for the chunks of the blocks after it (:meth:`GriddedDataset.prefetch
<dstp.catalog.dataset.GriddedDataset.prefetch>` → :meth:`ChunkReader.prefetch
<dstp.catalog.chunks.ChunkReader.prefetch>`): their GETs run on this read-ahead's threads, their chunks are
decoded there and held until the scan reads them. Two bounds:

* **in flight** — compressed bytes asked for and not yet arrived stay under the store's measured
  bandwidth-delay product (:meth:`~dstp.catalog.stores.LinkMeter.window`): enough to keep the path busy, no
  more;
* **held** — decoded bytes read ahead and not yet read by the scan (arrived or not) stay under ``budget``
  (the ``store_read_ahead_bytes`` setting): what one scan may keep in memory ahead of itself.

What it changes is only *when* bytes are fetched, never which: each chunk is the same ranged GET with
``If-Match`` a read makes (a replaced object is refused, never mixed), and a read-ahead that fails (the store
refused, retries ran out, the scan closed first) leaves its chunks to the scan's own read, which fetches them
again and raises what it meets — so a failure read ahead is never an answer, nor a wait without end.
"""

from __future__ import annotations

import logging
import threading
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any, Callable, Sequence

import numpy as np

from dstp.catalog.chunks import ChunkLayout, ChunkReader, chunk_offsets, decode_chunk

__all__ = ["ReadAhead"]

log = logging.getLogger("dstp.catalog")


class ReadAhead:
    """What one scan reads ahead of itself: its budget, bytes in flight and held, and the threads that fetch."""

    def __init__(self, budget: int, window: Callable[[], int], threads: int = 16) -> None:
        #: Most decoded bytes read ahead and not yet read by the scan.
        self.budget = budget
        self._window = window
        self._lock = threading.Lock()
        self._pool = ThreadPoolExecutor(max(1, threads), thread_name_prefix="dstp-read-ahead")
        self.closed = False
        #: Decoded bytes held (or on their way) for the scan, and compressed bytes asked for and not yet arrived.
        self.held = 0
        self.in_flight = 0
        #: Chunks asked for ahead, and those whose read ahead failed (the scan read them itself).
        self.chunks = 0
        self.failed = 0

    def room(self) -> bool:
        """Return whether another block's chunks may be asked for now."""
        window = self._window()
        with self._lock:
            return not self.closed and self.held < self.budget and self.in_flight < window

    def charge(self, decoded: int, compressed: int, chunks: int) -> None:
        """Count chunks asked for: ``decoded`` bytes held until the scan reads them, ``compressed`` in flight."""
        with self._lock:
            self.held += decoded
            self.in_flight += compressed
            self.chunks += chunks

    def arrived(self, compressed: int) -> None:
        """Count bytes no longer in flight (arrived, or their GETs failed)."""
        with self._lock:
            self.in_flight -= compressed

    def release(self, decoded: int, *, failed: bool = False) -> None:
        """Count decoded bytes no longer held (read by the scan, dropped, or never fetched)."""
        with self._lock:
            self.held -= decoded
            self.failed += failed

    def prefetch(self, reader: ChunkReader, path: Path, variable: str, index: Sequence[slice | int],
                 version: Any) -> None:
        """Start fetching the chunks of object ``path`` that ``reader.read(path, variable, index, version)`` will need
        and that are neither cached nor on their way; decoded on these threads, they are held for that read."""
        layout = reader.layout(path, variable, version)
        offsets = None if layout is None else chunk_offsets(layout, index)
        if layout is None or offsets is None:
            return  # netCDF-C reads it
        size = int(np.prod(layout.chunks)) * layout.dtype.itemsize
        futures = reader.claim_ahead(path, version, variable, offsets, self, size)
        if not futures:
            return
        compressed = sum(layout.index[o][1] for o in futures)
        self.charge(size * len(futures), compressed, len(futures))
        if not self.submit(self._fetch, reader, path, version, variable, layout, futures, compressed):
            self.arrived(compressed)
            reader.give_back(path, version, variable, futures)

    def _fetch(self, reader: ChunkReader, path: Path, version: Any, variable: str, layout: ChunkLayout,
               futures: dict[tuple[int, ...], "Future[np.ndarray | None]"], compressed: int) -> None:
        """Fetch and decode chunks read ahead, in one batch of ranged GETs; on any failure (or the scan gone), give
        back those not done: the scan's read fetches them itself, and meets and reports the fault if it lasts."""
        left = dict(futures)
        arrived = False
        try:
            if self.closed or reader.objects is None:
                return
            offsets = sorted(futures)
            spans = [(layout.index[o][0], layout.index[o][0] + layout.index[o][1]) for o in offsets]
            raws = reader.objects.read_ranges(path, version, spans)
            self.arrived(compressed)
            arrived = True
            for offset, raw in zip(offsets, raws):
                _, size, mask = layout.index[offset]
                if len(raw) != size:
                    break
                chunk = decode_chunk(raw, layout, mask)
                reader.hold_ahead((path, version, variable, offset), chunk, self)
                left.pop(offset).set_result(chunk)
        except Exception as exc:  # noqa: BLE001 - the scan's own read meets the fault again and reports it
            log.debug("read-ahead of %s failed (%s); the scan reads its chunks itself", path.name, type(exc).__name__)
        finally:
            if not arrived:
                self.arrived(compressed)
            reader.give_back(path, version, variable, left)

    def submit(self, task: Callable[..., None], *args: Any) -> bool:
        """Run ``task(*args)`` on the read-ahead's threads; return False when closed (nothing runs)."""
        with self._lock:
            if self.closed:
                return False
            try:
                self._pool.submit(task, *args)
            except RuntimeError:  # the pool shut down meanwhile
                return False
        return True

    def close(self, drop: Callable[["ReadAhead"], None]) -> None:
        """Stop reading ahead: ``drop`` lets go of what is held for the scan; GETs in flight end on their own
        (their chunks go to the cache, as any read's) and queued ones give their chunks back unread."""
        with self._lock:
            if self.closed:
                return
            self.closed = True
        drop(self)
        self._pool.shutdown(wait=False)
        if self.failed:
            log.info("read-ahead: %d of %d chunks read ahead failed and were read by the scan itself", self.failed,
                     self.chunks)
