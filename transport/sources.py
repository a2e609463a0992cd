"""What a data channel sends: the messages of a query result or of a file.

A source yields ``(payload, offset)`` pairs, payloads being zero-copy views
(Arrow buffers, slices of a memory-mapped file), and knows its summary once
exhausted. Channels number the messages and frame them; sources never see a
socket.
"""

from __future__ import annotations

import mmap
import os
from pathlib import Path
from typing import Any, BinaryIO, Callable, Iterator, Protocol, Sequence

from dstp.transport.ipc import BatchEncoder

__all__ = ["FileSource", "MessageSource", "QuerySource", "DEFAULT_BLOCK"]

DEFAULT_BLOCK = 4 * 2**20


class MessageSource(Protocol):
    """The messages of one transfer."""

    def messages(self) -> Iterator[tuple[Any, int]]:
        """Yield (payload, offset) for each message, in order."""

    def summary(self) -> dict[str, Any]:
        """Return what was sent (valid after ``messages`` is exhausted)."""

    def cancel(self) -> None:
        """Stop producing (the transfer was abandoned)."""

    def close(self) -> None:
        """Release resources once no payload is referenced any more."""


class QuerySource:
    """A query result as Arrow IPC messages: the schema, then one message per batch."""

    def __init__(self, execution: Any, compression: str = "none") -> None:
        self.execution = execution
        self.encoder = BatchEncoder(execution.schema, compression)

    def messages(self) -> Iterator[tuple[Any, int]]:
        yield self.encoder.schema_message(), 0
        for batch in self.execution.batches():
            yield self.encoder.encode(batch), 0

    def summary(self) -> dict[str, Any]:
        s = self.execution.summary
        return {
            "rows": s.rows, "bytes": s.bytes, "batches": s.batches, "truncated": s.truncated,
            "truncated_reason": s.truncated_reason, "server_seconds": s.seconds,
            "hyperslabs_read": s.stats.hyperslabs, "elements_read": s.stats.elements, "bytes_read": s.stats.bytes,
        }

    def cancel(self) -> None:
        self.execution.cancel.set()

    def close(self) -> None:
        self.execution.close()


class FileSource:
    """Byte ranges of a published file as blocks, each a slice of one memory map."""

    def __init__(
        self,
        path: Path,
        ranges: Sequence[tuple[int, int]],
        block_size: int = DEFAULT_BLOCK,
        on_close: Callable[[], None] | None = None,
    ) -> None:
        self.path = path
        self.on_close = on_close
        self.ranges = list(ranges)
        self.block_size = max(4096, block_size)
        self._sent = 0
        self._blocks = 0
        self._cancelled = False
        self._map: mmap.mmap | None = None
        self._file: BinaryIO | None = None

    def messages(self) -> Iterator[tuple[Any, int]]:
        size = os.path.getsize(self.path)
        if size == 0 or not self.ranges:
            return
        # The map outlives this generator: sent blocks stay referenced until acknowledged.
        self._file = open(self.path, "rb")
        self._map = mmap.mmap(self._file.fileno(), 0, access=mmap.ACCESS_READ)
        view = memoryview(self._map)
        for start, length in self.ranges:
            stop = min(size, start + length)
            for offset in range(start, stop, self.block_size):
                if self._cancelled:
                    return
                end = min(stop, offset + self.block_size)
                self._sent += end - offset
                self._blocks += 1
                yield view[offset:end], offset

    def summary(self) -> dict[str, Any]:
        return {"bytes": self._sent, "blocks": self._blocks}

    def cancel(self) -> None:
        self._cancelled = True

    def close(self) -> None:
        mapped, self._map = self._map, None
        if mapped is not None:
            try:
                mapped.close()
            except BufferError:
                pass  # a view is still referenced somewhere; the map closes when it is collected
        handle, self._file = self._file, None
        if handle is not None:
            handle.close()
        callback, self.on_close = self.on_close, None
        if callback is not None:
            callback()
