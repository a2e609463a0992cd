"""Receiving a planned result as RecordBatches: from the gRPC stream or from a data channel."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any, Callable, Iterator

from dstp.errors import IntegrityError
from dstp.proto import dstp_pb2 as pb
from dstp.client import _codec as codec
from dstp.transport.wire.values import TransferSummary
from dstp.transport.client.receiver import StripedReceiver

if TYPE_CHECKING:  # pyarrow loads on the first query, so `dstp get` starts faster
    import pyarrow as pa

__all__ = ["receive_grpc", "receive_stripes"]

#: Called with (rows, bytes, batches) after each batch.
Report = Callable[[int, int, int], None]


def receive_grpc(call: Any, schema: pa.Schema, report: Report, on_summary: Callable[[TransferSummary], None],
                 compression: str = "none") -> Iterator[pa.RecordBatch]:
    """Yield the batches of an open Fetch (or Run, past its plan) call; raises grpc.RpcError for the caller.

    ``compression``: what the offer says the batches carry (picks the decoder's faster path).

    The call's responses are IPC messages (views of the received bytes) and,
    last, a FetchResponse with the summary.
    """
    from dstp.transport.wire.ipc import BatchDecoder

    decoder = BatchDecoder(schema, compressed=compression != "none")
    rows = nbytes = batches = 0
    schema_seen = False
    try:
        for msg in call:
            if isinstance(msg, pb.FetchResponse):
                if not msg.HasField("summary"):
                    raise IntegrityError("the result stream carried a message other than records and a summary")
                summary = codec.transfer_summary_from_pb(msg.summary)
                if summary.rows != rows:
                    raise IntegrityError(f"the server sent {summary.rows} rows but {rows} arrived")
                on_summary(summary.replace(wire_bytes=nbytes))
                return
            if not schema_seen:
                if not decoder.decode_schema(msg).equals(schema):
                    raise IntegrityError("the fetched schema differs from the planned one")
                decoder.schema = schema  # keep the plan's field metadata (units, calendars)
                schema_seen = True
                continue
            batch = decoder.decode(msg)
            rows += batch.num_rows
            nbytes += msg.nbytes
            batches += 1
            report(rows, nbytes, batches)
            yield batch
    finally:
        call.cancel()
    raise IntegrityError("the result stream ended without its summary; the transfer is incomplete")


def receive_stripes(receiver: StripedReceiver, schema: pa.Schema, report: Report,
                    on_summary: Callable[[TransferSummary], None],
                    compression: str = "none") -> Iterator[pa.RecordBatch]:
    """Yield the batches of an opened data-channel transfer (TCP, UDT, in memory), reassembled in order.

    ``compression``: what the offer says the batches carry (picks the decoder's faster path)."""
    from dstp.transport.wire.ipc import BatchDecoder

    decoder = BatchDecoder(schema, compressed=compression != "none")
    rows = batches = 0
    started = time.perf_counter()
    try:
        for seq, _, payload in receiver.messages():
            if seq == 0:
                if not decoder.decode_schema(payload).equals(schema):
                    raise IntegrityError("the fetched schema differs from the planned one")
                decoder.schema = schema
                continue
            batch = decoder.decode(payload)
            rows += batch.num_rows
            batches += 1
            report(rows, receiver.stats.bytes, batches)
            yield batch
    finally:
        receiver.close()
    summary = receiver.summary().replace(transfer_seconds=time.perf_counter() - started)
    if receiver.end is not None and summary.rows != rows:
        raise IntegrityError(f"the server sent {summary.rows} rows but {rows} arrived")
    on_summary(summary)
