"""Fetching a planned result over each data channel, as a stream of RecordBatches."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any, Callable, Iterator

import grpc

from dstp.errors import IntegrityError
from dstp.transport.frames import Conn
from dstp.transport.receiver import StripedReceiver

if TYPE_CHECKING:  # pyarrow loads on the first query, so `dstp get` starts faster
    import pyarrow as pa

__all__ = ["endpoint_address", "fetch_grpc", "fetch_stripes"]


def endpoint_address(endpoint: str, control_target: str) -> tuple[str, int]:
    """Return (host, port) of an offer's endpoint; a wildcard host means the control host."""
    host, _, port = endpoint.rpartition(":")
    host = host.strip("[]")
    if host in ("", "0.0.0.0", "::"):
        host = control_target.rpartition(":")[0].strip("[]") or "127.0.0.1"
    return host, int(port)


def fetch_grpc(call: Any, schema: pa.Schema, report: Callable[[int, int, int], None],
               on_summary: Callable[[dict[str, Any]], None]) -> Iterator[pa.RecordBatch]:
    """Yield the batches of an open Fetch (or Run, past its plan) call; raises grpc.RpcError for the caller."""
    from dstp.transport.ipc import BatchDecoder

    decoder = BatchDecoder(schema)
    rows = nbytes = batches = 0
    schema_seen = False
    try:
        for msg in call:
            if msg.HasField("summary"):
                s = msg.summary
                if s.rows != rows:
                    raise IntegrityError(f"the server sent {s.rows} rows but {rows} arrived")
                on_summary({
                    "rows": s.rows, "bytes": s.bytes, "batches": s.batches, "truncated": s.truncated,
                    "truncated_reason": s.truncated_reason, "server_seconds": s.seconds,
                    "hyperslabs_read": s.hyperslabs_read, "elements_read": s.elements_read,
                    "bytes_read": s.bytes_read, "wire_bytes": nbytes,
                })
                return
            if not schema_seen:
                if not decoder.decode_schema(msg.ipc_message).equals(schema):
                    raise IntegrityError("the fetched schema differs from the planned one")
                decoder.schema = schema  # keep the plan's field metadata (units, calendars)
                schema_seen = True
                continue
            batch = decoder.decode(msg.ipc_message)
            rows += batch.num_rows
            nbytes += len(msg.ipc_message)
            batches += 1
            report(rows, nbytes, batches)
            yield batch
    finally:
        call.cancel()
    raise IntegrityError("the result stream ended without its summary; the transfer is incomplete")


def fetch_stripes(ticket: bytes, streams: int, dial: Callable[[int], Conn], schema: pa.Schema,
                  report: Callable[[int, int, int], None], on_summary: Callable[[dict[str, Any]], None],
                  fault: Any = None) -> Iterator[pa.RecordBatch]:
    """Yield the batches of a striped (TCP or UDT) ticket, reassembled in order."""
    from dstp.transport.ipc import BatchDecoder

    receiver = StripedReceiver(ticket, streams, dial, fault=fault)
    receiver.start()
    decoder = BatchDecoder(schema)
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
    summary = dict(receiver.summary or {})
    if summary.get("rows", rows) != rows:
        raise IntegrityError(f"the server sent {summary.get('rows')} rows but {rows} arrived")
    summary.update({"wire_bytes": receiver.stats.bytes, "reconnects": receiver.stats.reconnects,
                    "corrupted_frames": receiver.stats.corrupted, "streams": streams,
                    "per_stripe_bytes": dict(receiver.stats.per_stripe_bytes),
                    "transfer_seconds": time.perf_counter() - started})
    on_summary(summary)
