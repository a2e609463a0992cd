"""The dstp side of a Dask worker: the catalog, the partitions it holds, and its own data channel.

``dask worker tcp://SCHED:8786 --preload dstp.cluster`` (or a coordinator's
``client.register_plugin(DstpWorkerPlugin(settings))``) gives each worker
process one :class:`WorkerNode`: the catalog scanned from the same root as
the coordinator's (a shared filesystem, or the same files at the same path),
and a striped-TCP :class:`~dstp.transport.server.channel_server.DataChannelServer`
on a port of its own, on the host the worker is reachable at.

A partition task (:func:`run_partition`, submitted by the coordinator) plans
the query's SQL against the worker's catalog, cuts the plan to its piece of
the hyperslab, runs it with the same engine (``QueryExecution``: DuckDB,
limits, time limit) and *keeps* the result on the worker; what goes back to
the coordinator is only where and how to fetch it: the endpoint, a ticket and
its key. A streamed partition's ticket goes back first, as a Dask event, and
the held result is filled as it is computed: a transfer may start at once and
sends each batch as it arrives (:class:`HeldPartition`). Tickets are the server's own (:class:`~dstp.transport.server.tickets.TicketStore`:
single-use, expiring, bound by key — every HELLO proves it), and the result
leaves as :class:`~dstp.transport.server.sources.QuerySource` messages, exactly as a
single server's query does. A held result is dropped once a transfer of it
has sent everything, or when its tickets expire (``ticket_ttl_s``).

:func:`reissue` hands out a fresh ticket for a result still held (a client
whose transfer broke beyond resuming); when the worker is gone the coordinator
runs the partition again elsewhere (dstp/cluster/coordinator.py).
"""

from __future__ import annotations

import dataclasses
import faulthandler
import logging
import os
import threading
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterator
from urllib.parse import urlparse

import pyarrow as pa

from dstp.catalog.dataset import GriddedDataset
from dstp.catalog.registry import Catalog
from dstp.cluster.locality import file_fingerprint, files_read
from dstp.cluster.partitions import (
    DatasetIdentity,
    PartitionSpec,
    check_identities,
    check_identity,
    identity_of,
    partition_prepared,
)
from dstp.errors import CatalogError, DstpError, LimitExceededError, TicketError, TransportError
from dstp.query.execute import PARTIALS, PreparedQuery, QueryExecution, QuerySummary, prepare_query, sql_schema
from dstp.settings import Settings
from dstp.transport.server.channel_server import DataChannelServer
from dstp.transport.server.sources import FileSource, QuerySource
from dstp.transport.server.listeners import TcpListener
from dstp.transport.wire.tcp import allowed_congestion_controls
from dstp.transport.server.tickets import Ticket, TicketStore

__all__ = ["FileShare", "HeldPartition", "PartitionResult", "PartitionStore", "WorkerNode", "adopt_dataset",
           "dataset_identities", "merge_partials", "node_of", "open_file_shares", "published", "reissue", "run_partial", "run_partition",
           "start_node",
           "stop_node"]

log = logging.getLogger("dstp.cluster")

#: The kind of a worker's tickets: redeemable on either of its data channels (striped TCP, UDT), as the
#: coordinator's offer says; the HELLO's proof binds a ticket to its client either way.
DATA_TICKET = "data"

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
    #: The worker's UDT data channel ("" when it runs none); the ticket is good on either channel.
    udt_endpoint: str = ""


@dataclass(frozen=True, slots=True)
class FileShare:
    """What a worker answers for its share of a file download (:func:`open_file_shares`)."""

    worker: str
    endpoint: str
    ticket: bytes
    key: bytes = field(repr=False)
    expires_at_unix_ms: int
    cipher: str
    congestion_control: str
    #: The (offset, length) byte ranges of the file it sends.
    ranges: tuple[tuple[int, int], ...]


@dataclass(frozen=True, slots=True)
class _FileGrant:
    """A file ticket's payload on a worker: which file, which ranges."""

    dataset: str
    path: Path
    ranges: tuple[tuple[int, int], ...]
    congestion_control: str
    block_size: int


class HeldPartition:
    """A partition's result in worker memory; as a QueryRun it replays its batches for one transfer.

    It may still be *filling*: the partition task appends batches as it computes them
    (:meth:`append`), and a transfer that started early sends each one as it arrives, waiting for the
    next until the task finishes (:meth:`finish`) — or fails (:meth:`fail`), which ends every transfer of it with
    that error (the client refetches or fails; it never sees a short partition as whole).
    """

    def __init__(self, label: str, schema: pa.Schema, expires_at: float, on_sent: Callable[[str], None]) -> None:
        self.query_id = label
        self.label = label
        self.schema = schema
        self.held: list[pa.RecordBatch] = []
        self.summary = QuerySummary()
        self.complete = False
        self.error: BaseException | None = None
        self.expires_at = expires_at
        self._on_sent = on_sent
        self._changed = threading.Condition()

    def append(self, batch: pa.RecordBatch) -> None:
        with self._changed:
            self.held.append(batch)
            self._changed.notify_all()

    def finish(self, summary: QuerySummary) -> None:
        """Mark the result whole: transfers send END once they have sent every batch."""
        with self._changed:
            self.summary = summary
            self.complete = True
            self._changed.notify_all()

    def fail(self, error: BaseException) -> None:
        """Mark the result broken: every transfer of it stops with ``error`` instead of END."""
        with self._changed:
            self.error = error
            self._changed.notify_all()

    def wake(self) -> None:
        """Wake the transfers waiting for the next batch (one was cancelled)."""
        with self._changed:
            self._changed.notify_all()

    def next_batch(self, position: int, cancel: threading.Event) -> pa.RecordBatch | None:
        """Return batch ``position`` once computed; None at the end of a whole result or when cancelled."""
        with self._changed:
            while position >= len(self.held) and not self.complete and self.error is None and not cancel.is_set():
                self._changed.wait()
            if cancel.is_set():
                return None
            if position < len(self.held):
                return self.held[position]
            if self.error is not None:
                if isinstance(self.error, DstpError):
                    raise self.error
                raise TransportError(f"partition {self.label} failed on its worker ({self.error}); the coordinator "
                                     "runs it again when asked (Resolve)") from self.error
            return None

    def run(self) -> "_Replay":
        """Return one transfer's view of the result."""
        return _Replay(self)

    @property
    def nbytes(self) -> int:
        return sum(b.nbytes for b in self.held)


class _Cancel(threading.Event):
    """A transfer's cancel flag that also wakes the transfer when it waits for the next batch."""

    def __init__(self, held: HeldPartition) -> None:
        super().__init__()
        self._held = held

    def set(self) -> None:
        super().set()
        self._held.wake()


class _Replay:
    """One transfer of a held partition (the QueryRun a QuerySource sends)."""

    def __init__(self, held: HeldPartition) -> None:
        self.held = held
        self.query_id = held.label
        self.cancel: threading.Event = _Cancel(held)
        self.schema = held.schema
        self._sent = False

    @property
    def summary(self) -> QuerySummary:
        # Read when the transfer ends (its END frame): by then the result is whole.
        return self.held.summary

    def batches(self) -> Iterator[pa.RecordBatch]:
        position = 0
        while (batch := self.held.next_batch(position, self.cancel)) is not None:
            yield batch
            position += 1
        self._sent = self.held.complete and not self.cancel.is_set()

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

    def open(self, label: str, schema: pa.Schema) -> HeldPartition:
        """Return a new, empty partition held under ``label`` (replacing an older one) for its task to fill."""
        with self._lock:
            now = self.clock()
            for stale in [k for k, h in self._held.items() if h.expires_at < now]:
                del self._held[stale]
            held = self._held[label] = HeldPartition(label, schema, now + self.tickets.ttl_s, self._drop)
            return held

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
        return self.tickets.issue(group, DATA_TICKET, (held, compression))

    def summary_of(self, label: str) -> QuerySummary | None:
        """Return the execution summary of a held partition, or None (not held, or still being computed)."""
        with self._lock:
            held = self._held.get(label)
            return held.summary if held is not None and held.complete else None

    def discard(self, held: HeldPartition) -> None:
        """Forget ``held`` (its task failed): no new ticket is issued for it."""
        with self._lock:
            if self._held.get(held.label) is held:
                del self._held[held.label]

    def holds(self) -> list[str]:
        """Return the labels of the partitions held now."""
        with self._lock:
            return sorted(self._held)

    def claim(self, token: bytes, proof: Callable[[bytes], bool]) -> tuple[Ticket, object]:
        """Redeem ``token`` (its HELLO proved the key), on whichever of this worker's channels it arrived;
        return it and its payload."""
        def check(ticket: Ticket, payload: object) -> None:
            if not proof(ticket.key):
                raise TicketError("the ticket's proof is missing or wrong: only the client that asked for the "
                                  "ticket can redeem it (it proves so with the offer's key; proto/README.md)")

        return self.tickets.claim(token, DATA_TICKET, check)

    def open_source(self, token: bytes, kind: str, cancel: threading.Event | None = None, *,
                    proof: Callable[[bytes], bool]) -> tuple[QuerySource, bytes]:
        """Redeem a held partition's ticket; return its messages and the ticket's key (a data channel serving
        partitions only)."""
        ticket, payload = self.claim(token, proof)
        assert isinstance(payload, tuple)
        return self.source_of(ticket, *payload), ticket.key

    def source_of(self, ticket: Ticket, held: HeldPartition, compression: str) -> QuerySource:
        """Return the messages of a held partition whose ticket was claimed."""
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
                                    chunk_cache_bytes=settings.chunk_cache_bytes, direct_chunks=settings.direct_chunks)
        if self.catalog.handles.chunks is not None:
            self.catalog.handles.chunks.start()
        self.store = PartitionStore(settings.ticket_ttl_s)
        #: The coordinator's datasets this worker holds only some files of (:func:`adopt_dataset`), by
        #: (dataset, identity digest): the dataset over this worker's paths, and the indices of its files held here.
        self.adopted: dict[tuple[str, str], tuple[GriddedDataset, frozenset[int]]] = {}
        self._adopt_lock = threading.Lock()
        #: Pieces of reductions this node has reduced (:func:`run_partial`).
        self.partials = 0
        #: Inner nodes of reduction trees this node has merged (:func:`merge_partials`).
        self.merges = 0
        host = urlparse(address).hostname or settings.host
        #: Bytes of files sent from this node (shares of downloads; :func:`open_file_shares`).
        self.file_bytes_sent = 0
        self._file_lock = threading.Lock()
        self.channel = DataChannelServer(
            "striped", TcpListener(host, 0), self.open_source, window_bytes=settings.window_bytes,
            sealed=sealed, hello_timeout=settings.hello_timeout_s,
            max_pending_per_address=settings.max_pending_per_address,
        )
        self.channel.start()
        #: The UDT data channel (None: disabled by udt_port -1, or libudt not built).
        self.udt = self._udt_channel(host, settings, sealed)
        self.congestion_controls = allowed_congestion_controls()
        log.info("dstp worker %s: %d datasets from %s, data channel %s%s", address, len(self.catalog), root,
                 self.channel.endpoint, f", UDT {self.udt.endpoint}" if self.udt is not None else "")

    def _udt_channel(self, host: str, settings: Settings, sealed: bool) -> DataChannelServer | None:
        if settings.udt_port < 0:
            return None
        from dstp.transport.server import udt_listener
        from dstp.transport.wire import udt

        if not udt.available():
            log.warning("dstp worker: no UDT data channel: %s", udt.unavailable_reason())
            return None
        channel = DataChannelServer(
            "udt", udt_listener.UdtChannelListener(host, 0), self.open_source, window_bytes=settings.window_bytes,
            sealed=sealed, hello_timeout=settings.hello_timeout_s,
            max_pending_per_address=settings.max_pending_per_address,
        )
        channel.start()
        return channel

    @property
    def endpoint(self) -> str:
        return self.channel.endpoint

    def dataset_for(self, want: DatasetIdentity) -> tuple[GriddedDataset, frozenset[int] | None] | None:
        """Return this worker's dataset of identity ``want`` — its own copy (None: every file held), or the
        coordinator's adopted one with the files held here — or None when it has neither."""
        if want.dataset in self.catalog and self.catalog.get(want.dataset).identity == want.digest:
            return self.catalog.get(want.dataset), None
        with self._adopt_lock:
            return self.adopted.get((want.dataset, want.digest))

    def catalog_for(self, expect: tuple[DatasetIdentity, ...]) -> tuple[Catalog, dict[str, frozenset[int]]]:
        """Return the catalog a piece planned against ``expect`` runs on — the worker's own, with the
        adopted datasets in place of its differing copies — and the files held of each adopted one."""
        swap: dict[str, GriddedDataset] = {}
        held: dict[str, frozenset[int]] = {}
        for want in expect:
            found = self.dataset_for(want)
            if found is not None and found[1] is not None:
                swap[want.dataset], held[want.dataset] = found[0], found[1]
        if not swap:
            return self.catalog, held
        own = {ds.id: ds for ds in self.catalog}
        return Catalog(self.catalog.root, {**own, **swap}, [], self.catalog.remotes, self.catalog.handles), held

    @property
    def udt_endpoint(self) -> str:
        return self.udt.endpoint if self.udt is not None else ""

    def open_source(self, token: bytes, kind: str, cancel: threading.Event | None = None, *,
                    proof: Callable[[bytes], bool]) -> tuple[QuerySource | FileSource, bytes]:
        """The data channel's callback: redeem ``token`` for a held partition or a share of a file; return its
        messages and the ticket's key."""
        ticket, payload = self.store.claim(token, proof)
        if isinstance(payload, _FileGrant):
            return self._file_source(ticket, payload, cancel), ticket.key
        assert isinstance(payload, tuple)
        return self.store.source_of(ticket, *payload), ticket.key

    def _file_source(self, ticket: Ticket, grant: _FileGrant, cancel: threading.Event | None) -> FileSource:
        handles = self.catalog.handles

        def sent() -> None:
            with self._file_lock:
                self.file_bytes_sent += source.summary().bytes

        source = FileSource(grant.path, grant.ranges, grant.block_size, on_close=sent,
                            label=ticket.query_id, expires_at=ticket.expires_at,
                            congestion_control=grant.congestion_control, cancel=cancel,
                            opener=lambda path: os.fdopen(handles.open_raw(path), "rb"))
        return source

    def close(self) -> None:
        self.channel.stop()
        if self.udt is not None:
            self.udt.stop()
        self.catalog.close()


def start_node(worker: Any, settings: Settings, *, sealed: bool = False) -> WorkerNode:
    """Return the worker's node, starting it if it has none yet (a preload and a plugin may both ask).

    It also has a crash inside netCDF-C, HDF5, DuckDB or Arrow print every thread's Python stack to the
    worker's stderr (faulthandler), as ``dstp serve`` does, unless the worker already set that up.
    """
    if not faulthandler.is_enabled():
        try:
            faulthandler.enable(all_threads=True)
        except (RuntimeError, ValueError, OSError):  # a worker whose stderr is no file: it runs without
            pass
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
            summary: QuerySummary | None) -> PartitionResult:
    """Return how to fetch ``label``; ``summary`` None: still being computed (rows and bytes -1)."""
    known = summary or QuerySummary()
    return PartitionResult(
        label=label, index=index, worker=node.address, endpoint=node.endpoint, ticket=ticket.token, key=ticket.key,
        expires_at_unix_ms=ticket.expires_at_unix_ms, cipher="aes-256-gcm" if node.sealed else "",
        compression=compression, rows=-1 if summary is None else known.rows,
        bytes=-1 if summary is None else known.bytes, hyperslabs_read=known.stats.hyperslabs,
        elements_read=known.stats.elements, bytes_read=known.stats.bytes, truncated=known.truncated,
        seconds=known.seconds, start=spec.start, stop=spec.stop, udt_endpoint=node.udt_endpoint,
    )


def published(message: dict[str, Any]) -> PartitionResult:
    """Return the PartitionResult a streaming partition task published as an event (:func:`run_partition`)."""
    return PartitionResult(**message)


def _piece(node: WorkerNode, sql: str, spec: PartitionSpec, expect: tuple[DatasetIdentity, ...],
           where: str) -> PreparedQuery:
    """Return ``sql`` planned on this worker and cut to piece ``spec``; CatalogError when this worker's
    data is not the coordinator's (``expect``) or it does not hold a file the piece reads."""
    catalog, held = node.catalog_for(expect)
    planned = prepare_query(sql, catalog, node.settings)
    check_identities(planned, expect, where)
    if held:
        ds = planned.plan.scans[0].dataset
        missing = sorted(files_read(planned, spec) - held.get(ds.id, frozenset(range(len(ds.files)))))
        if missing:
            raise CatalogError(f"{where} does not hold {', '.join(ds.files[k].path.name for k in missing[:3])} "
                               f"of dataset {ds.id!r}, which piece {spec.index} reads; it was not run")
    return partition_prepared(planned, spec)


def run_partition(label: str, sql: str, spec: PartitionSpec, compression: str = "none",
                  publish: str = "", expect: tuple[DatasetIdentity, ...] = ()) -> PartitionResult:
    """Dask task: run piece ``spec`` of ``sql`` on this worker, keep its result, return how to fetch it.

    ``publish``: a Dask event topic the coordinator listens on. The task then issues the ticket before
    computing and logs it there (rows and bytes -1: still computing), and fills the held result batch by
    batch, so the client's transfer starts at once and sends while the piece is computed. The return
    value is the finished partition's counts either way. ``expect``: the coordinator's identities of the
    datasets read; a worker whose copy differs raises CatalogError before issuing anything.
    """
    from distributed import get_worker

    worker = get_worker()
    node = node_of(worker)
    prepared = _piece(node, sql, spec, expect, f"cluster worker {worker.address}")
    execution = QueryExecution(prepared, node.settings)
    held = node.store.open(label, prepared.schema)
    ticket: Ticket | None = None
    try:
        if publish:
            ticket = node.store.issue(label, compression)
            assert ticket is not None
            worker.log_event(publish, dataclasses.asdict(_result(node, label, spec.index, spec, ticket, compression,
                                                                 None)))
        for batch in execution.batches():
            held.append(batch)
        held.finish(execution.summary)
    except BaseException as exc:
        held.fail(exc)
        node.store.discard(held)
        raise
    if ticket is None:
        ticket = node.store.issue(label, compression)
        assert ticket is not None
    return _result(node, label, spec.index, spec, ticket, compression, execution.summary)


def run_partial(sql: str, spec: PartitionSpec, partial_sql: str, expect: tuple[DatasetIdentity, ...] = ()
                ) -> tuple[bytes, int, int, int]:
    """Dask task: the partial aggregates of piece ``spec`` of ``sql`` (see :mod:`.reduce`), as an Arrow IPC
    stream, with the read statistics (hyperslabs, elements, bytes). The piece's groups are few (at most
    the result's rows), so they travel back as the task's result rather than over a data channel."""
    from distributed import get_worker

    worker = get_worker()
    node = node_of(worker)
    piece = _piece(node, sql, spec, expect, f"cluster worker {worker.address}")
    plan = dataclasses.replace(piece.plan, sql=partial_sql)
    prepared = dataclasses.replace(piece, plan=plan, schema=sql_schema(plan, node.settings, partial_sql))
    execution = QueryExecution(prepared, node.settings)
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, prepared.schema) as writer:
        for batch in execution.batches():
            writer.write_batch(batch)
    summary = execution.summary
    if summary.truncated:
        raise LimitExceededError(f"a piece of this reduction has more groups than the result may have "
                                 f"({summary.truncated_reason}); reduce to fewer groups")
    stats = summary.stats
    node.partials += 1
    return sink.getvalue().to_pybytes(), stats.hyperslabs, stats.elements, stats.bytes


def merge_partials(merge_sql: str, *pieces: tuple[bytes, int, int, int]) -> tuple[bytes, int, int, int]:
    """Dask task, an inner node of a reduction's tree: the pieces' partial rows (Arrow IPC, as
    :func:`run_partial` returns them) merged by ``merge_sql`` into partial rows of the same schema,
    with the pieces' read statistics added up."""
    import duckdb
    from distributed import get_worker

    table = pa.concat_tables([pa.ipc.open_stream(ipc).read_all() for ipc, *_ in pieces])
    con = duckdb.connect()
    try:
        con.execute("SET threads = 1")
        con.register(PARTIALS, table)
        merged = con.sql(merge_sql).to_arrow_table()
    finally:
        con.close()
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, merged.schema) as writer:
        writer.write_table(merged)
    node_of(get_worker()).merges += 1
    return (sink.getvalue().to_pybytes(), sum(p[1] for p in pieces), sum(p[2] for p in pieces),
            sum(p[3] for p in pieces))


def reissue(label: str, spec: PartitionSpec, compression: str = "none", dask_worker: Any = None) -> PartitionResult | None:
    """``client.run`` on the worker that holds ``label``: a fresh ticket for it (rows -1 while it is still
    being computed), or None if it is not held."""
    node = node_of(dask_worker)
    ticket = node.store.issue(label, compression)
    if ticket is None:
        return None
    return _result(node, label, spec.index, spec, ticket, compression, node.store.summary_of(label))


def open_file_shares(dataset: str, name: str, size: int, shares: dict[str, list[tuple[int, int]]],
                     expect: DatasetIdentity, congestion_control: str = "", block_size: int = 0,
                     dask_worker: Any = None) -> FileShare:
    """``client.run`` on the workers chosen for a download: a ticket for this worker's share of file
    ``name`` of ``dataset`` (``shares[its address]``: byte ranges) on its data channel, sent in blocks of
    ``block_size`` (the coordinator's, which its OpenFile answer announced; 0: this worker's own).

    Refuses (CatalogError) when its copy of the dataset is not the coordinator's (``expect``) or the
    file's size differs: the client checks the whole file's CRC-32C in the end, but a share from a
    differing copy is refused before a byte is sent.
    """
    node = node_of(dask_worker)
    where = f"cluster worker {dask_worker.address}"
    catalog, held = node.catalog_for((expect,))
    ds = catalog.get(dataset)
    check_identity(identity_of(ds), expect, where, "its share of the file would be other bytes, so it was not sent")
    path = catalog.published_file(dataset, name)
    if dataset in held and [f.path for f in ds.files].index(path) not in held[dataset]:
        raise CatalogError(f"{where} does not hold {name} of dataset {dataset!r}; its share was not sent")
    fd = node.catalog.handles.open_raw(path)
    try:
        here = os.fstat(fd).st_size
    finally:
        os.close(fd)
    if here != size:
        raise CatalogError(f"{where}: its copy of {name} has {here:,} bytes, the coordinator's {size:,}; "
                           "make the worker see the same files (DSTP_CATALOG_ROOT) and restart it")
    cc = congestion_control if congestion_control in node.congestion_controls else ""
    ranges = tuple((int(o), int(n)) for o, n in shares[dask_worker.address])
    grant = _FileGrant(dataset, path, ranges, cc, block_size or node.settings.block_bytes)
    ticket = node.store.tickets.issue(f"file-{uuid.uuid4().hex[:12]}", DATA_TICKET, grant)
    return FileShare(worker=node.address, endpoint=node.endpoint, ticket=ticket.token, key=ticket.key,
                     expires_at_unix_ms=ticket.expires_at_unix_ms, cipher="aes-256-gcm" if node.sealed else "",
                     congestion_control=cc, ranges=ranges)


def adopt_dataset(blob: bytes, root: str, fingerprints: list[str], dask_worker: Any = None) -> list[bool]:
    """``client.run`` on a worker whose copy of a dataset is not the coordinator's: which of the coordinator's
    files (``blob``: its pickled dataset, paths under ``root``) this worker holds — the same path under its
    own root, the same size and the same :func:`~.locality.file_fingerprint` (``fingerprints``, in file
    order). When it holds any, it keeps the dataset over its own paths (:meth:`WorkerNode.dataset_for`) and
    runs pieces that read only those files."""
    import pickle

    node = node_of(dask_worker)
    theirs: GriddedDataset = pickle.loads(blob)  # noqa: S301 - from the coordinator, over Dask's comms
    mine = node.catalog.root
    # its own copies: the coordinator's file versions (inode, times) are not this host's
    files = tuple(dataclasses.replace(f, path=mine / f.path.relative_to(root), identity=None) for f in theirs.files)
    agg = theirs.descriptor.aggregate
    coordinate = theirs.dimensions[agg].coordinate if agg else None
    variable = coordinate.spec.variable if coordinate is not None else None
    held: list[bool] = []
    for f, want in zip(files, fingerprints):
        try:
            ok = f.path.is_file() and f.path.stat().st_size == f.size and \
                file_fingerprint(node.catalog.handles, f.path, variable) == want
        except (OSError, DstpError) as exc:
            log.info("dstp worker %s: %s of %s not usable here: %s", node.address, f.path.name, theirs.id, exc)
            ok = False
        held.append(ok)
    if any(held):
        ds = dataclasses.replace(theirs, files=files, handles=node.catalog.handles)
        ds.__dict__["identity"] = theirs.identity  # the coordinator's, computed over the same content
        with node._adopt_lock:
            node.adopted[(theirs.id, theirs.identity)] = (ds, frozenset(k for k, ok in enumerate(held) if ok))
        log.info("dstp worker %s holds %d of the %d files of %s; it runs pieces that read only those",
                 node.address, sum(held), len(held), theirs.id)
    return held


def dataset_identities(datasets: list[str], dask_worker: Any = None) -> dict[str, str]:
    """``client.run``: this worker's identity of each dataset (see ``GriddedDataset.identity``); "" for one
    its catalog does not serve. Its catalog is scanned once, so the answer holds for the worker's life."""
    node = node_of(dask_worker)
    out: dict[str, str] = {}
    for name in datasets:
        try:
            out[name] = node.catalog.get(name).identity
        except DstpError:
            out[name] = ""
    return out


def node_report(dask_worker: Any = None) -> dict[str, Any]:
    """``client.run``: what this worker's node serves (endpoint, bytes sent, partitions held)."""
    node = _NODES.get(dask_worker.address)
    if node is None:
        return {"running": False}
    return {"running": True, "endpoint": node.endpoint, "udt_endpoint": node.udt_endpoint,
            "bytes_sent": node.store.bytes_sent,
            "held": node.store.holds(), "partials": node.partials, "merges": node.merges, "file_bytes_sent": node.file_bytes_sent,
            "adopted": {ds: len(held) for (ds, _), (_, held) in node.adopted.items()}}
