"""Fetching a partitioned (scale-out) result: every worker's partition at once, re-resolved on failure.

A coordinator answers a partitionable query with one partition per worker
(``QueryInfo.partitions``), each a striped-TCP (or, when asked for, UDT) offer at that worker's own
data channel. They are fetched in parallel, one thread per partition. A
partition is delivered only once all of it has arrived: if its fetch fails
(the worker died, the transfer broke beyond resuming), what arrived of it is
dropped, the coordinator is asked where it is now (``Resolve``: a fresh
ticket, or the piece run again on another worker) and it is fetched again
from its start — so a failure can never leave a gap or a duplicate, only a
clear error after ``ATTEMPTS`` tries. A partition may still be being computed
when the answer arrives (``rows`` -1): its worker sends the batches as they
are computed and END only once the piece is whole, so the fetch simply runs
alongside the computation.

Partitions are yielded in the order they complete (the union is the
result; records inside a partition keep grid order); a query with ORDER BY
is merged: the partitions, each sorted by the server, are concatenated in
partition order and stably sorted by the order keys.
"""

from __future__ import annotations

import time
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable, Iterator, Mapping

from dstp.client._channels import receive_stripes
from dstp.client._stream import QueryStream
from dstp.errors import DstpError, TicketError, TransportError
from dstp.transport.wire.values import PartitionInfo, QueryInfo, TransferSummary

if TYPE_CHECKING:
    import pyarrow as pa

__all__ = ["ATTEMPTS", "PartitionFetched", "fetch_partitions"]

#: Tries per partition (the first fetch and re-resolved ones) before the query fails.
ATTEMPTS = 3
#: Most partitions fetched at once.
MAX_PARALLEL = 16


@dataclass(frozen=True, slots=True)
class PartitionFetched:
    """What one partition's fetch took: which worker served it, in how many tries, and which index ranges
    of the grid it covers ({dimension: (start, stop, step)})."""

    index: int
    worker: str
    endpoint: str
    rows: int
    wire_bytes: int
    attempts: int
    hyperslab: Mapping[str, tuple[int, int, int]] = field(default_factory=dict)


def fetch_partitions(rpc: Any, policy: Any, choice: Any, info: QueryInfo, target: str, *,
                     allow_truncated: bool = False,
                     report: Callable[[int, int, int], None] | None = None) -> QueryStream:
    """Return a stream of the partitions' batches (fetched in parallel); ``stream.partitions`` lists, once
    it has ended, a :class:`PartitionFetched` per partition."""
    stream = QueryStream(info, iter(()), info.partitions[0].offer.kind if info.partitions else "striped",
                         allow_truncated)
    stream.choice = f"{len(info.partitions)} partitions on cluster workers, fetched in parallel"
    stream.partitions = []  # type: ignore[attr-defined]
    stream._batches = _batches(rpc, policy, choice, info, target, stream, report)
    return stream


def _fetch_one(rpc: Any, policy: Any, choice: Any, info: QueryInfo, target: str,
               part: PartitionInfo) -> tuple[PartitionFetched, list[pa.RecordBatch], TransferSummary]:
    """Return one partition whole, re-resolving it after a failure; raise the last error after ATTEMPTS."""
    error: DstpError | None = None
    for attempt in range(1, ATTEMPTS + 1):
        if attempt > 1:
            part = rpc.resolve(info.query_id, part.index)
        summaries: list[TransferSummary] = []
        offer = part.offer
        try:
            transfer = policy.open(choice, offer, target).open(offer.ticket, max(1, offer.streams), key=offer.key,
                                                                cipher=offer.cipher)
            batches = list(receive_stripes(transfer, info.schema, lambda *_: None, summaries.append,
                                           offer.compression))
        except (TransportError, TicketError) as exc:
            error = exc
            continue
        summary = summaries[0] if summaries else TransferSummary()
        rows = sum(b.num_rows for b in batches)
        # rows -1: the partition was still being computed when the answer was made; receive_stripes has
        # checked the arrived rows against its END, which the worker sends only once the piece is whole.
        if part.rows >= 0 and rows != part.rows:
            error = TransportError(f"partition {part.index} from {part.worker} held {part.rows} records but "
                                   f"{rows} arrived")
            continue
        return PartitionFetched(part.index, part.worker, offer.endpoint, rows, summary.wire_bytes, attempt,
                                dict(part.hyperslab)), \
            batches, summary
    assert error is not None
    raise type(error)(f"partition {part.index} of query {info.query_id} could not be fetched after {ATTEMPTS} "
                      f"tries (last from {part.worker}): {error}; the result would be incomplete") from error


def _merge_order(info: QueryInfo, parts: dict[int, list[pa.RecordBatch]]) -> Iterator[pa.RecordBatch]:
    import pyarrow as pa

    batches = [b for i in sorted(parts) for b in parts[i]]
    table = pa.Table.from_batches(batches, schema=info.schema)
    # Arrow's sort is stable: ties keep partition (grid) order. NaN sorts with NULLs here, above every
    # number in DuckDB: only a DESC key over NaN values orders differently (docs/scale-out.md).
    keys = [(k.column, "descending" if k.descending else "ascending", "at_start" if k.nulls_first else "at_end")
            for k in info.order]
    yield from table.sort_by(keys).combine_chunks().to_batches()


def _batches(rpc: Any, policy: Any, choice: Any, info: QueryInfo, target: str, stream: QueryStream,
             report: Callable[[int, int, int], None] | None) -> Iterator[pa.RecordBatch]:
    started = time.perf_counter()
    parts = info.partitions
    held: dict[int, list[pa.RecordBatch]] = {}
    totals = {"rows": 0, "bytes": 0, "batches": 0, "wire": 0, "elements": 0}
    summaries: list[TransferSummary] = []
    pool = ThreadPoolExecutor(max_workers=max(1, min(MAX_PARALLEL, len(parts))), thread_name_prefix="dstp-part")
    try:
        pending: set[Future[Any]] = {pool.submit(_fetch_one, rpc, policy, choice, info, target, p) for p in parts}
        while pending:
            done, pending = wait(pending, return_when=FIRST_COMPLETED)
            for future in done:
                fetched, batches, summary = future.result()
                stream.partitions.append(fetched)  # type: ignore[attr-defined]
                summaries.append(summary)
                totals["rows"] += fetched.rows
                totals["wire"] += fetched.wire_bytes
                if info.order:
                    held[fetched.index] = batches
                    continue
                for batch in batches:
                    totals["bytes"] += batch.nbytes
                    totals["batches"] += 1
                    if report is not None:
                        report(totals["rows"], totals["wire"], totals["batches"])
                    yield batch
        if info.order:
            for batch in _merge_order(info, held):
                totals["bytes"] += batch.nbytes
                totals["batches"] += 1
                yield batch
    finally:
        pool.shutdown(wait=True, cancel_futures=True)
    stream.summary = TransferSummary(
        rows=sum(s.rows for s in summaries), bytes=sum(s.bytes for s in summaries), batches=totals["batches"],
        server_seconds=max((s.server_seconds for s in summaries), default=0.0),
        hyperslabs_read=sum(s.hyperslabs_read for s in summaries),
        elements_read=sum(s.elements_read for s in summaries), bytes_read=sum(s.bytes_read for s in summaries),
        wire_bytes=totals["wire"], reconnects=sum(s.reconnects for s in summaries),
        streams=sum(s.streams for s in summaries), transport="striped", seconds=time.perf_counter() - started,
        choice=stream.choice or "",
    )
