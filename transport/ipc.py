"""Arrow IPC messages: how record batches are encoded on every data channel.

A result travels as a sequence of Arrow IPC *encapsulated messages*: the
schema first, then one message per record batch. Each message stands alone
(``pyarrow.ipc.read_message``), so channels can frame, stripe and reorder
them freely. Batch bodies may be compressed per message (Arrow's own LZ4
frame or ZSTD buffer compression), negotiated per query.
"""

from __future__ import annotations

import pyarrow as pa

from dstp.errors import IntegrityError

__all__ = ["COMPRESSIONS", "BatchDecoder", "BatchEncoder"]

#: Compression names accepted by dstp, mapped to Arrow's codec names.
COMPRESSIONS: dict[str, str | None] = {"none": None, "lz4": "lz4", "zstd": "zstd"}


class BatchEncoder:
    """Encodes the batches of one result as standalone IPC messages."""

    def __init__(self, schema: pa.Schema, compression: str = "none") -> None:
        if compression not in COMPRESSIONS:
            raise ValueError(f"unknown compression {compression!r}; use one of {', '.join(COMPRESSIONS)}")
        self.schema = schema
        self.codec = COMPRESSIONS[compression]
        self._options = pa.ipc.IpcWriteOptions(compression=self.codec)
        self._schema_message = schema.serialize()

    def schema_message(self) -> pa.Buffer:
        """Return the IPC schema message."""
        return self._schema_message

    def encode(self, batch: pa.RecordBatch) -> pa.Buffer:
        """Return ``batch`` as one IPC record-batch message (a view, not a copy, when uncompressed)."""
        if self.codec is None:
            return batch.serialize()
        # Arrow exposes body compression only through its stream writer: write
        # schema + batch, then slice the batch message out (zero-copy).
        sink = pa.BufferOutputStream()
        with pa.ipc.new_stream(sink, self.schema, options=self._options) as writer:
            writer.write_batch(batch)
        stream = sink.getvalue()
        head = self._schema_message.size
        return stream.slice(head, stream.size - head - 8)  # 8 bytes: end-of-stream marker


class BatchDecoder:
    """Decodes the IPC messages of one result back into record batches."""

    def __init__(self, schema: pa.Schema | None = None) -> None:
        self.schema = schema

    def decode_schema(self, message: pa.Buffer | bytes) -> pa.Schema:
        """Return the schema in an IPC schema message."""
        try:
            self.schema = pa.ipc.read_schema(pa.py_buffer(message) if isinstance(message, (bytes, bytearray, memoryview)) else message)
        except (pa.ArrowInvalid, OSError) as exc:
            raise IntegrityError(f"the result schema could not be decoded: {exc}") from exc
        return self.schema

    def decode(self, message: pa.Buffer | bytes) -> pa.RecordBatch:
        """Return the record batch in an IPC message."""
        if self.schema is None:
            raise IntegrityError("a record batch arrived before the result schema")
        try:
            buf = pa.py_buffer(message) if isinstance(message, (bytes, bytearray, memoryview)) else message
            return pa.ipc.read_record_batch(pa.ipc.read_message(buf), self.schema)
        except (pa.ArrowInvalid, OSError) as exc:
            raise IntegrityError(f"a record batch could not be decoded: {exc}") from exc
