"""The dstp side of a Dask worker: the catalog, the partitions it holds, and its own data channel.

``dask worker tcp://SCHED:8786 --preload dstp.cluster`` (or a coordinator's
``client.register_plugin(DstpWorkerPlugin(settings))``) gives each worker
process one :class:`WorkerNode`: the catalog scanned from the same root as
the coordinator's (a shared filesystem, or the same files at the same path),
and a striped-TCP :class:`~dstp.transport.channel_server.DataChannelServer`
on a port of its own, on the host the worker is reachable at.

A partition task (:func:`run_partition`, submitted by the coordinator) plans
the query's SQL against the worker's catalog, cuts the plan to its piece of
the hyperslab, runs it with the same engine (``QueryExecution``: DuckDB,
limits, time limit) and *keeps* the result on the worker; what goes back to
the coordinator is only where and how to fetch it: the endpoint, a ticket and
its key. Tickets are the server's own (:class:`~dstp.transport.tickets.TicketStore`:
single-use, expiring, bound by key — every HELLO proves it), and the result
leaves as :class:`~dstp.transport.sources.QuerySource` messages, exactly as a
single server's query does. A held result is dropped once a transfer of it
has sent everything, or when its tickets expire (``ticket_ttl_s``).

:func:`reissue` hands out a fresh ticket for a result still held (a client
whose transfer broke beyond resuming); when the worker is gone the coordinator
runs the partition again elsewhere (dstp/cluster/coordinator.py).
"""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterator
from urllib.parse import urlparse

import pyarrow as pa

from dstp.catalog.registry import Catalog
from dstp.cluster.partitions import PartitionSpec, partition_prepared
from dstp.errors import TicketError
from dstp.query.execute import QueryExecution, QuerySummary, prepare_query
from dstp.settings import Settings
from dstp.transport.channel_server import DataChannelServer
from dstp.transport.sources import QuerySource
from dstp.transport.tcp import TcpListener, allowed_congestion_controls
from dstp.transport.tickets import Ticket, TicketStore

__all__ = ["HeldPartition", "PartitionResult", "PartitionStore", "WorkerNode", "node_of", "reissue",
           "run_partition", "start_node", "stop_node"]

log = logging.getLogger("dstp.cluster")

#: The one WorkerNode of each worker in this process, by worker address (a process may run several
#: threaded workers; each Dask process worker has its own process and so its own table).
_NODES: dict[str, "WorkerNode"] = {}
_NODES_LOCK = threading.Lock()


@dataclass(frozen=True, slots=True)
class PartitionResult:
    """What a partition task returns to the coordinator: where its result is held and how to fetch it."""

    label: str
    index: int
    worker: str
    endpoint: str
    ticket: bytes
    key: bytes = field(repr=False)
    expires_at_unix_ms: int
    cipher: str
    compression: str
    rows: int
    bytes: int
    hyperslabs_read: int
    elements_read: int
    bytes_read: int
    truncated: bool
    seconds: float
    #: The piece of the outermost dimension, in positions of the query's own range.
    start: int
    stop: int


class HeldPartition:
    """A computed partition kept in worker memory; as a QueryRun it replays its batches for one transfer."""

    def __init__(self, label: str, schema: pa.Schema, batches: list[pa.RecordBatch], summary: QuerySummary,
                 expires_at: float, on_sent: Callable[[str], None]) -> None:
        self.query_id = label
        self.label = label
        self.schema = schema
        self.held = batches
        self.summary = summary
        self.expires_at = expires_at
        self._on_sent = on_sent

    def run(self) -> "_Replay":
        """Return one transfer's view of the result."""
        return _Replay(self)

    @property
    def nbytes(self) -> int:
        return sum(b.nbytes for b in self.held)


class _Replay:
    """One transfer of a held partition (the QueryRun a QuerySource sends)."""

    def __init__(self, held: HeldPartition) -> None:
        self.held = held
        self.query_id = held.label
        self.cancel = threading.Event()
        self.schema = held.schema
        self.summary = held.summary
        self._sent = False

    def batches(self) -> Iterator[pa.RecordBatch]:
        for batch in self.held.held:
            if self.cancel.is_set():
                return
            yield batch
        self._sent = True

    def close(self) -> None:
        if self._sent:  # everything went out: the worker's memory is given back
            self.held._on_sent(self.held.label)


class PartitionStore:
    """The partitions one worker holds, and their tickets."""

    def __init__(self, ttl_s: float, clock: Callable[[], float] = time.time) -> None:
        self.tickets = TicketStore(ttl_s, clock)
        self.clock = clock
        self._lock = threading.Lock()
        self._held: dict[str, HeldPartition] = {}
        self._issued = 0
        #: Arrow bytes sent from held partitions (bench/cluster.py reports it per worker).
        self.bytes_sent = 0

    def hold(self, label: str, schema: pa.Schema, batches: list[pa.RecordBatch], summary: QuerySummary) -> None:
        """Keep a computed partition until it has been sent or its tickets have expired."""
        with self._lock:
            now = self.clock()
            for stale in [k for k, h in self._held.items() if h.expires_at < now]:
                del self._held[stale]
            self._held[label] = HeldPartition(label, schema, batches, summary, now + self.tickets.ttl_s, self._drop)

    def _drop(self, label: str) -> None:
        with self._lock:
            held = self._held.pop(label, None)
            if held is not None:
                self.bytes_sent += held.summary.bytes

    def issue(self, label: str, compression: str) -> Ticket | None:
        """Return a new ticket for a held partition (its own group: redeeming it voids no other), or None."""
        with self._lock:
            held = self._held.get(label)
            if held is None:
                return None
            self._issued += 1
            group = f"{label}#{self._issued}"
            held.expires_at = self.clock() + self.tickets.ttl_s
        return self.tickets.issue(group, "striped", (held, compression))

    def summary_of(self, label: str) -> QuerySummary | None:
        """Return the execution summary of a held partition, or None."""
        with self._lock:
            held = self._held.get(label)
            return held.summary if held is not None else None

    def holds(self) -> list[str]:
        """Return the labels of the partitions held now."""
        with self._lock:
            return sorted(self._held)

    def open_source(self, token: bytes, kind: str, cancel: threading.Event | None = None, *,
                    proof: Callable[[bytes], bool]) -> QuerySource:
        """Redeem ``token`` (its HELLO proved the key) and return the held partition's messages."""
        def check(ticket: Ticket, payload: object) -> None:
            if not proof(ticket.key):
                raise TicketError("the ticket's proof is missing or wrong: only the client that asked for the "
                                  "ticket can redeem it (it proves so with the offer's key; proto/README.md)")

        ticket, (held, compression) = self.tickets.claim(token, kind, check)
        assert isinstance(held, HeldPartition)
        with self._lock:
            if self._held.get(held.label) is not held:
                raise TicketError("this worker no longer holds that partition; ask the coordinator to resolve it "
                                  "again (Resolve)")
        # The channel server stops a transfer through QuerySource.cancel(), which sets the replay's event.
        return QuerySource(held.run(), compression, expires_at=ticket.expires_at)


class WorkerNode:
    """One worker's dstp: catalog, held partitions, data channel."""

    def __init__(self, address: str, settings: Settings, *, sealed: bool = False) -> None:
        self.address = address
        self.settings = settings
        self.sealed = sealed
        root = settings.catalog_root
        if root is None:
            raise ValueError("a dstp worker needs the catalog root: DSTP_CATALOG_ROOT, or a coordinator's settings")
        self.catalog = Catalog.scan(Path(root), open_files=settings.open_files,
                                    chunk_cache_bytes=settings.chunk_cache_bytes)
        self.store = PartitionStore(settings.ticket_ttl_s)
        host = urlparse(address).hostname or settings.host
        self.channel = DataChannelServer(
            "striped", TcpListener(host, 0), self.store.open_source, window_bytes=settings.window_bytes,
            sealed=sealed, hello_timeout=settings.hello_timeout_s,
            max_pending_per_address=settings.max_pending_per_address,
        )
        self.channel.start()
        self.congestion_controls = allowed_congestion_controls()
        log.info("dstp worker %s: %d datasets from %s, data channel %s", address, len(self.catalog), root,
                 self.channel.endpoint)

    @property
    def endpoint(self) -> str:
        return self.channel.endpoint

    def close(self) -> None:
        self.channel.stop()
        self.catalog.close()


def start_node(worker: Any, settings: Settings, *, sealed: bool = False) -> WorkerNode:
    """Return the worker's node, starting it if it has none yet (a preload and a plugin may both ask)."""
    with _NODES_LOCK:
        node = _NODES.get(worker.address)
        if node is None:
            node = _NODES[worker.address] = WorkerNode(worker.address, settings, sealed=sealed)
        return node


def stop_node(worker: Any) -> None:
    """Stop the worker's node, if it has one."""
    with _NODES_LOCK:
        node = _NODES.pop(worker.address, None)
    if node is not None:
        node.close()


def node_of(worker: Any) -> WorkerNode:
    """Return the node of ``worker`` (RuntimeError naming the fix when the worker was started without dstp)."""
    node = _NODES.get(worker.address)
    if node is None:
        raise RuntimeError(f"Dask worker {worker.address} runs no dstp node: start it with "
                           "`--preload dstp.cluster` or let the coordinator register its plugin")
    return node


def _result(node: WorkerNode, label: str, index: int, spec: PartitionSpec, ticket: Ticket, compression: str,
            summary: QuerySummary) -> PartitionResult:
    return PartitionResult(
        label=label, index=index, worker=node.address, endpoint=node.endpoint, ticket=ticket.token, key=ticket.key,
        expires_at_unix_ms=ticket.expires_at_unix_ms, cipher="aes-256-gcm" if node.sealed else "",
        compression=compression, rows=summary.rows, bytes=summary.bytes, hyperslabs_read=summary.stats.hyperslabs,
        elements_read=summary.stats.elements, bytes_read=summary.stats.bytes, truncated=summary.truncated,
        seconds=summary.seconds, start=spec.start, stop=spec.stop,
    )


def run_partition(label: str, sql: str, spec: PartitionSpec, compression: str = "none") -> PartitionResult:
    """Dask task: run piece ``spec`` of ``sql`` on this worker, keep its result, return how to fetch it."""
    from distributed import get_worker

    node = node_of(get_worker())
    prepared = partition_prepared(prepare_query(sql, node.catalog, node.settings), spec)
    execution = QueryExecution(prepared, node.settings)
    batches = list(execution.batches())
    node.store.hold(label, prepared.schema, batches, execution.summary)
    ticket = node.store.issue(label, compression)
    assert ticket is not None
    return _result(node, label, spec.index, spec, ticket, compression, execution.summary)


def reissue(label: str, spec: PartitionSpec, compression: str = "none", dask_worker: Any = None) -> PartitionResult | None:
    """``client.run`` on the worker that holds ``label``: a fresh ticket for it, or None if it is not held."""
    node = node_of(dask_worker)
    ticket = node.store.issue(label, compression)
    if ticket is None:
        return None
    summary = node.store.summary_of(label) or QuerySummary()
    return _result(node, label, spec.index, spec, ticket, compression, summary)


def node_report(dask_worker: Any = None) -> dict[str, Any]:
    """``client.run``: what this worker's node serves (endpoint, bytes sent, partitions held)."""
    node = _NODES.get(dask_worker.address)
    if node is None:
        return {"running": False}
    return {"running": True, "endpoint": node.endpoint, "bytes_sent": node.store.bytes_sent,
            "held": node.store.holds()}
