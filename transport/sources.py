"""What a data channel sends: the messages of a query result or of a file.

A source yields ``(payload, offset)`` pairs, payloads being zero-copy: a
query's IPC messages as their parts (:class:`dstp.transport.ipc.IpcMessage`:
metadata and the batch's own buffers), a file's blocks as slices of one
memory map. Once exhausted it knows its :class:`TransferSummary`. Channels
number the messages and frame them; sources never see a socket.

Sources are made by the service (``DstpService.open_source``), which redeems
a ticket and takes a transfer slot; closing a source gives the slot back.
Each carries what the channel needs to know about its ticket: a label for
logs, the ticket's expiry (a transfer cannot be resumed after it) and the
congestion control negotiated for the channel's sockets.
"""

from __future__ import annotations

import math
import mmap
import os
import threading
from pathlib import Path
from typing import Any, BinaryIO, Callable, Iterator, Protocol, Sequence

import pyarrow as pa

from dstp.transport.codec import TransferSummary, query_transfer_summary
from dstp.transport.ipc import BatchEncoder, IpcMessage

__all__ = ["DEFAULT_BLOCK", "FileSource", "MessageSource", "QueryRun", "QuerySource"]

DEFAULT_BLOCK = 4 * 2**20


class MessageSource(Protocol):
    """The messages of one transfer, and what its ticket allows."""

    #: What is sent, for logs: the query's or the file's id.
    label: str
    #: When the ticket expired or expires (wall-clock seconds): no resume after it.
    expires_at: float
    #: TCP congestion control negotiated for the channel's sockets; "" for the kernel default.
    congestion_control: str

    def messages(self) -> Iterator[tuple[Any, int]]:
        """Yield (payload, offset) for each message, in order."""

    def summary(self) -> TransferSummary:
        """Return what was sent (valid after ``messages`` is exhausted)."""

    def cancel(self) -> None:
        """Stop producing (the transfer was abandoned)."""

    def close(self) -> None:
        """Release resources (and the transfer slot) once no payload is referenced any more."""


class QueryRun(Protocol):
    """A running query as a source needs it (dstp.service.Execution)."""

    query_id: str

    @property
    def cancel(self) -> threading.Event: ...

    @property
    def schema(self) -> pa.Schema: ...

    @property
    def summary(self) -> Any: ...

    def batches(self) -> Iterator[pa.RecordBatch]: ...

    def close(self) -> None: ...


class QuerySource:
    """A query result as Arrow IPC messages: the schema, then one message per batch."""

    def __init__(self, execution: QueryRun, compression: str = "none", *, expires_at: float = math.inf,
                 congestion_control: str = "") -> None:
        self.execution = execution
        self.encoder = BatchEncoder(execution.schema, compression)
        self.label = execution.query_id
        self.expires_at = expires_at
        self.congestion_control = congestion_control

    def messages(self) -> Iterator[tuple[Any, int]]:
        schema = self.encoder.schema_message()
        yield IpcMessage((schema,), schema.size), 0
        for batch in self.execution.batches():
            yield self.encoder.encode(batch), 0

    def summary(self) -> TransferSummary:
        return query_transfer_summary(self.execution.summary)

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
        *,
        label: str = "",
        expires_at: float = math.inf,
        congestion_control: str = "",
        cancel: threading.Event | None = None,
    ) -> None:
        self.path = path
        self.on_close = on_close
        self.ranges = list(ranges)
        self.block_size = max(4096, block_size)
        self.label = label or path.name
        self.expires_at = expires_at
        self.congestion_control = congestion_control
        self._cancel = cancel or threading.Event()
        self._sent = 0
        self._blocks = 0
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
                if self._cancel.is_set():
                    return
                end = min(stop, offset + self.block_size)
                self._sent += end - offset
                self._blocks += 1
                yield view[offset:end], offset

    def summary(self) -> TransferSummary:
        return TransferSummary(content="file", bytes=self._sent, blocks=self._blocks)

    def cancel(self) -> None:
        self._cancel.set()

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
