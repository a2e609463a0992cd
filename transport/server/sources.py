"""What a data channel sends: the messages of a query result or of a file.

A source yields ``(payload, offset)`` pairs, payloads being zero-copy: a
query's IPC messages as their parts (:class:`dstp.transport.wire.ipc.IpcMessage`:
metadata and the batch's own buffers), a file's blocks as slices of one
memory map. Once exhausted it knows its :class:`TransferSummary`. Channels
number the messages and frame them; sources never see a socket.

Sources are made by the service (``DstpService.open_source``), which redeems
a ticket and takes a transfer slot; closing a source gives the slot back.
Each carries what the channel needs to know about its ticket: a label for
logs, the ticket's expiry (a transfer cannot be resumed after it) and the
congestion control negotiated for the channel's sockets.

Each also carries its :class:`Pace`: the slot's view of the consumer. A
source marks itself *blocked* while a message it yielded has not been taken
(the generator is suspended until the channel sends it, or finds room in its
window), and a channel reports what else shows progress (an ACK); a reader
that takes nothing for ``stall_timeout_s`` has its transfer aborted through
:meth:`Pace.on_stall` and its slot given back (dstp/service/admission.py).
"""

from __future__ import annotations

import math
import mmap
import os
import threading
from pathlib import Path
from typing import Any, BinaryIO, Callable, Iterator, Mapping, Protocol, Sequence

import pyarrow as pa

from dstp.errors import DstpError
from dstp.transport import native
from dstp.transport.wire.ipc import BatchEncoder, IpcMessage
from dstp.transport.wire.values import TransferSummary, query_transfer_summary

__all__ = ["DEFAULT_BLOCK", "UNWATCHED", "FileSource", "MessageSource", "Pace", "QueryRun", "QuerySource"]

DEFAULT_BLOCK = 4 * 2**20


class Pace(Protocol):
    """How a transfer's consumer keeps up, as told to whoever watches for stalled readers (a slot)."""

    def blocked(self) -> None:
        """The producer waits on its consumer from now."""

    def unblocked(self) -> None:
        """The consumer took what it was handed."""

    def progressed(self) -> None:
        """The consumer took something while the producer still waits (an ACK): restart the stall timer."""

    def on_stall(self, abort: Callable[[DstpError], None]) -> None:
        """Run ``abort(error)`` if the consumer is declared stalled (or the time limit passes meanwhile)."""

    def count_delivery(self) -> None:
        """From now on, what is counted as sent is what the consumer took (``taken``), not what was produced."""

    def taken(self, rows: int, nbytes: int) -> None:
        """The consumer took (the channel finished handing over) ``rows`` records of ``nbytes`` Arrow bytes."""


class _Unwatched:
    """The pace of a source nobody watches (sources made outside a service, in tests and benchmarks)."""

    def blocked(self) -> None:
        pass

    def unblocked(self) -> None:
        pass

    def progressed(self) -> None:
        pass

    def on_stall(self, abort: Callable[[DstpError], None]) -> None:
        pass

    def count_delivery(self) -> None:
        pass

    def taken(self, rows: int, nbytes: int) -> None:
        pass


UNWATCHED: Pace = _Unwatched()


class MessageSource(Protocol):
    """The messages of one transfer, and what its ticket allows."""

    #: What is sent, for logs: the query's or the file's id.
    label: str
    #: When the ticket expired or expires (wall-clock seconds): no resume after it.
    expires_at: float
    #: TCP congestion control negotiated for the channel's sockets; "" for the kernel default.
    congestion_control: str
    #: How the consumer keeps up (the slot watches it for a stalled reader).
    pace: Pace

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
                 congestion_control: str = "", pace: Pace = UNWATCHED) -> None:
        self.execution = execution
        self.encoder = BatchEncoder(execution.schema, compression)
        self.label = execution.query_id
        self.expires_at = expires_at
        self.congestion_control = congestion_control
        self.pace = pace

    def messages(self) -> Iterator[tuple[Any, int]]:
        pace = self.pace
        pace.count_delivery()  # a message counts as sent once the channel asks for the next one
        schema = self.encoder.schema_message()
        pace.blocked()
        yield IpcMessage((schema,), schema.size), 0
        pace.unblocked()
        for batch in self.execution.batches():
            message = self.encoder.encode(batch)
            pace.blocked()  # until the channel takes it: a reader that stops reading leaves it here
            yield message, 0
            pace.unblocked()
            pace.taken(batch.num_rows, batch.nbytes)

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
        opener: Callable[[Path], BinaryIO] | None = None,
        pace: Pace = UNWATCHED,
        block_crcs: Mapping[int, tuple[int, int]] | None = None,
    ) -> None:
        self.path = path
        self.on_close = on_close
        self.ranges = list(ranges)
        self.block_size = max(4096, block_size)
        self.label = label or path.name
        self.expires_at = expires_at
        self.congestion_control = congestion_control
        self.pace = pace
        #: How the file is opened when sending starts (the service checks it is still the published file).
        self.opener: Callable[[Path], BinaryIO] = opener or (lambda p: open(p, "rb"))
        self._cancel = cancel or threading.Event()
        #: offset -> (length, CRC-32C) of blocks whose checksum is already known (the service computed them
        #: with the whole range's): their frames carry it and the sender does not read them to checksum
        self.block_crcs = dict(block_crcs or {})
        self._sent = 0
        self._blocks = 0
        self._map: mmap.mmap | None = None
        self._file: BinaryIO | None = None
        self._handle: Any = None

    def file_handle(self) -> Any:
        """Return what the native path sends this file's blocks from (transport/native.py), or None.

        A block's frame offset is its offset in the file, so a sender can ``sendfile`` it.
        """
        return self._handle

    def messages(self) -> Iterator[tuple[Any, int]]:
        if not self.ranges:
            return
        # The map outlives this generator: sent blocks stay referenced until acknowledged.
        self._file = self.opener(self.path)
        size = os.fstat(self._file.fileno()).st_size
        if size == 0:
            return
        if native.enabled():
            self._handle = native.file_handle(self._file.fileno())
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
                self.pace.blocked()
                yield view[offset:end], offset
                self.pace.unblocked()

    def known_crc(self, offset: int, length: int) -> int | None:
        """Return the CRC-32C of the block at ``offset`` if the service computed it already, else None."""
        known = self.block_crcs.get(offset)
        return known[1] if known is not None and known[0] == length else None

    def summary(self) -> TransferSummary:
        return TransferSummary(content="file", bytes=self._sent, blocks=self._blocks)

    def cancel(self) -> None:
        self._cancel.set()

    def close(self) -> None:
        self._handle = None  # its descriptor closes once no sender holds it
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
