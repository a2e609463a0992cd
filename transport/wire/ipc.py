"""Arrow IPC messages: how record batches are encoded on every data channel.

A result travels as a sequence of Arrow IPC *encapsulated messages*: the
schema first, then one message per record batch. Each message stands alone
(``pyarrow.ipc.read_message``), so channels can frame, stripe and reorder
them freely. Batch bodies may be compressed per message (Arrow's own LZ4
frame or ZSTD buffer compression), negotiated per query.

An encoded batch is an :class:`IpcMessage`: its metadata (a few hundred
bytes) and the batch's body buffers themselves, never joined. A data channel
hands those parts to ``sendmsg`` (or UDT's ``sendall_buffers``) and the gRPC
stream frames them with one copy (:func:`dstp.grpc_codec.fetch_response_bytes`);
``RecordBatch.serialize()``, which copies the whole body into a new buffer,
is not on the path. Arrow's stream writer produces the parts: given a Python
sink, it passes body buffers as ``pyarrow.Buffer`` objects over the batch's
own memory, and its bytes are exactly ``serialize()``'s.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pyarrow as pa

from dstp.errors import IntegrityError

__all__ = ["COMPRESSIONS", "BatchDecoder", "BatchEncoder", "IpcMessage"]

#: Compression names accepted by dstp, mapped to Arrow's codec names.
COMPRESSIONS: dict[str, str | None] = {"none": None, "lz4": "lz4", "zstd": "zstd"}


@dataclass(frozen=True, slots=True)
class IpcMessage:
    """One Arrow IPC encapsulated message held as its parts: metadata bytes and body buffers, in order."""

    parts: tuple[Any, ...]
    nbytes: int

    def __len__(self) -> int:
        return self.nbytes

    def to_buffer(self) -> pa.Buffer:
        """Return the message as one buffer (a copy; for readers that need it contiguous)."""
        return pa.py_buffer(b"".join(self.parts))


class _PartsSink:
    """A write-only file for Arrow's IPC writer that keeps what it is given instead of copying it.

    Arrow hands body buffers over as ``pyarrow.Buffer`` (the batch's memory) and
    metadata and padding as small ``bytes``; consecutive small writes are
    gathered into one part so that a message is a handful of iovecs.
    """

    closed = False

    def __init__(self) -> None:
        self.parts: list[Any] = []
        self._small = bytearray()
        self.nbytes = 0

    def write(self, data: Any) -> int:
        if isinstance(data, pa.Buffer):
            self._flush()
            if data.size:
                self.parts.append(data)
            size = data.size
        else:
            size = memoryview(data).nbytes
            self._small += data
        self.nbytes += size
        return size

    def _flush(self) -> None:
        if self._small:
            self.parts.append(bytes(self._small))
            self._small.clear()

    def take(self) -> IpcMessage:
        """Return what was written since the last take() as one message."""
        self._flush()
        message = IpcMessage(tuple(self.parts), self.nbytes)
        self.parts, self.nbytes = [], 0
        return message

    def flush(self) -> None:
        pass

    def close(self) -> None:
        pass


class BatchEncoder:
    """Encodes the batches of one result as standalone IPC messages, without copying their bodies."""

    def __init__(self, schema: pa.Schema, compression: str = "none") -> None:
        if compression not in COMPRESSIONS:
            raise ValueError(f"unknown compression {compression!r}; use one of {', '.join(COMPRESSIONS)}")
        self.schema = schema
        self.codec = COMPRESSIONS[compression]
        self._schema_message = schema.serialize()
        # Dictionary columns would make the stream writer emit dictionary messages in between;
        # dstp results have none, but should one appear it is serialized whole (one copy).
        self._whole = any(pa.types.is_dictionary(f.type) for f in schema)
        self._sink = _PartsSink()
        # Compressed on the calling thread: Arrow's pool spreading a batch's few buffers over the cores cost
        # more than it saved. Table 4's 1 M records in process, producing and encoding, medians of 25
        # interleaved rounds: LZ4 112.5 → 91.6 ms, zstd 125.1 → 118.3 ms. (Encoding on a thread of its own
        # beside the scan was tried too: 104.5–105.8 ms with LZ4, the sink's Python calls contend for the GIL.)
        options = pa.ipc.IpcWriteOptions(compression=self.codec, use_threads=False)
        self._writer = pa.ipc.new_stream(self._sink, schema, options=options)
        # The writer sends the schema with the first batch: send it now, with an empty batch, and drop both.
        self._writer.write_batch(pa.RecordBatch.from_pylist([], schema=schema))
        self._sink.take()

    def schema_message(self) -> pa.Buffer:
        """Return the IPC schema message."""
        return self._schema_message

    def encode(self, batch: pa.RecordBatch) -> IpcMessage:
        """Return ``batch`` as one IPC record-batch message: its metadata, then its body buffers (not copied)."""
        if self._whole:
            whole = batch.serialize()
            return IpcMessage((whole,), whole.size)
        self._writer.write_batch(batch)
        return self._sink.take()


class BatchDecoder:
    """Decodes the IPC messages of one result back into record batches.

    ``compressed``: the result's batches carry compressed bodies (the
    compression its offer names). Those are decoded by a stream reader with
    ``IpcReadOptions(use_threads=False)`` over the schema and the message in
    one buffer (a copy of the compressed bytes): ``pa.ipc.read_record_batch``
    takes no read options and decompresses a batch's few buffers on Arrow's
    thread pool, which cost more than it saved (as on the encoding side).
    Uncompressed batches are views of their message (no copy). The hint only
    picks the faster path: either path decodes either kind of message.
    """

    def __init__(self, schema: pa.Schema | None = None, *, compressed: bool = False) -> None:
        self.schema = schema
        self.compressed = compressed
        self._prefix: tuple[pa.Schema, bytes] | None = None

    def decode_schema(self, message: Any) -> pa.Schema:
        """Return the schema in an IPC schema message (a buffer, bytes or a memoryview)."""
        try:
            self.schema = pa.ipc.read_schema(_buffer(message))
        except (pa.ArrowInvalid, OSError) as exc:
            raise IntegrityError(f"the result schema could not be decoded: {exc}") from exc
        return self.schema

    def decode(self, message: Any) -> pa.RecordBatch:
        """Return the record batch in an IPC message."""
        if self.schema is None:
            raise IntegrityError("a record batch arrived before the result schema")
        try:
            body = _buffer(message)
            if not self.compressed:
                return pa.ipc.read_record_batch(pa.ipc.read_message(body), self.schema)
            if self._prefix is None or self._prefix[0] is not self.schema:
                self._prefix = (self.schema, self.schema.serialize().to_pybytes())
            prefix = self._prefix[1]
            whole = bytearray(len(prefix) + body.size)
            whole[:len(prefix)] = prefix
            whole[len(prefix):] = memoryview(body)
            return pa.ipc.open_stream(pa.py_buffer(whole), options=_READ_OPTIONS).read_next_batch()
        except (pa.ArrowInvalid, OSError, EOFError, StopIteration) as exc:  # EOFError: an empty message
            raise IntegrityError(f"a record batch could not be decoded: {exc or 'the message is empty'}") from exc


_READ_OPTIONS = pa.ipc.IpcReadOptions(use_threads=False)


def _buffer(message: Any) -> pa.Buffer:
    if isinstance(message, pa.Buffer):
        return message
    if isinstance(message, IpcMessage):
        return message.to_buffer()
    return pa.py_buffer(message)
