"""The dstp service: catalog, queries, tickets and channels, without any wire protocol.

Every adapter (gRPC, HTTP, the data channels) calls this one object, so
limits, errors and tickets behave the same whichever way a request arrives.

    service.query(sql, channels=[...])  -> QueryHandle (schema, estimates, offers)
    service.start(ticket, kind)         -> QueryExecution (claims the ticket)
"""

from __future__ import annotations

import itertools
import logging
import threading
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Generator, Sequence

import pyarrow as pa

from dstp.catalog.registry import Catalog
from dstp.errors import LimitExceededError, QueryError, TicketError, TransportUnavailableError
from dstp.metadata import DatasetDetails, DatasetSummary, dataset_details, dataset_summary
from dstp.query.execute import PreparedQuery, QueryExecution, prepare_query
from dstp.settings import Settings
from dstp.transport.files import crc32c_of_file
from dstp.transport.ipc import COMPRESSIONS
from dstp.transport.tickets import Ticket, TicketStore

__all__ = ["CHANNELS", "ChannelInfo", "DstpService", "FileHandle", "FileRequest", "Offer", "QueryHandle"]

log = logging.getLogger("dstp.service")

#: Channel kinds, in the order a server prefers them when a client has no preference.
CHANNELS = ("grpc", "striped", "udt")


@dataclass(frozen=True, slots=True)
class ChannelInfo:
    """A data channel the server runs: its kind, where to reach it, what it allows."""

    kind: str
    endpoint: str = ""
    max_streams: int = 1
    congestion_controls: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class Offer:
    """How to fetch one query's records on one channel."""

    kind: str
    ticket: Ticket
    endpoint: str
    streams: int
    compression: str
    congestion_control: str


@dataclass(frozen=True, slots=True)
class QueryHandle:
    """The answer to Query: what the result will look like and how to fetch it."""

    query_id: str
    prepared: PreparedQuery
    offers: tuple[Offer, ...]

    @property
    def schema(self) -> pa.Schema:
        return self.prepared.schema


@dataclass(frozen=True, slots=True)
class FileRequest:
    """A checked bulk-file request: the file, the range, what is still missing, its checksum."""

    path: Path
    size: int
    mtime_ns: int
    offset: int
    length: int
    missing: tuple[tuple[int, int], ...]
    crc32c: int


@dataclass(frozen=True, slots=True)
class FileHandle:
    """The answer to OpenFile."""

    file_id: str
    request: FileRequest
    offers: tuple[Offer, ...]
    block_size: int


@dataclass(slots=True)
class _Pending:
    """What a ticket refers to: a prepared query, or a file request."""

    prepared: PreparedQuery | None
    offer_kind: str
    streams: int
    compression: str
    congestion_control: str
    query_id: str
    expires_at: float = 0.0
    file: FileRequest | None = None


@dataclass
class DstpService:
    """Serves one catalog under one set of settings."""

    catalog: Catalog
    settings: Settings
    tickets: TicketStore = field(init=False)
    channels: dict[str, ChannelInfo] = field(init=False)

    def __post_init__(self) -> None:
        self.tickets = TicketStore(self.settings.ticket_ttl_s)
        self.channels = {"grpc": ChannelInfo("grpc")}
        self._slots = threading.BoundedSemaphore(max(1, self.settings.max_concurrent_queries))
        self._counter = itertools.count(1)
        self._running: dict[str, QueryExecution] = {}
        self._lock = threading.Lock()
        self._checksums: dict[tuple[str, int, int, int, int], int] = {}

    # -- channels -----------------------------------------------------------------------

    def register_channel(self, info: ChannelInfo) -> None:
        """Offer a data channel from now on."""
        self.channels[info.kind] = info

    # -- discovery ----------------------------------------------------------------------

    def datasets(self) -> list[DatasetSummary]:
        """Return the summaries of all published datasets, by id."""
        return sorted((dataset_summary(ds) for ds in self.catalog), key=lambda s: s.id)

    def describe(self, dataset_id: str) -> DatasetDetails:
        """Return the full description of one dataset."""
        return dataset_details(self.catalog.get(dataset_id))

    # -- queries ------------------------------------------------------------------------

    def prepare(self, sql: str) -> PreparedQuery:
        """Return the validated, planned query (raises QueryError and friends)."""
        return prepare_query(sql, self.catalog, self.settings)

    def _available(self, channels: Sequence[str], compression: str) -> list[str]:
        """Return the requested channels the server runs; refuse, never downgrade, if none."""
        if compression not in COMPRESSIONS:
            raise TransportUnavailableError(
                f"compression {compression!r} is not offered; choose from {', '.join(COMPRESSIONS)}"
            )
        wanted = list(channels or CHANNELS)
        for c in wanted:
            if c not in CHANNELS:
                raise TransportUnavailableError(f"unknown channel {c!r}; channels are {', '.join(CHANNELS)}")
        available = [c for c in wanted if c in self.channels]
        if not available:
            offered = ", ".join(k for k in CHANNELS if k in self.channels)
            hint = " (the server was built without libudt; install libudt-dev and reinstall dstp)" \
                if "udt" in wanted and "udt" not in self.channels else ""
            raise TransportUnavailableError(
                f"this server does not offer {', '.join(wanted)}{hint}; it offers: {offered}"
            )
        return available

    def _offers(
        self,
        label: str,
        available: Sequence[str],
        streams: int,
        compression: str,
        congestion_control: str,
        make: Callable[[str, int, str], "_Pending"],
    ) -> tuple[Offer, ...]:
        """Issue one ticket per available channel (all of a request's tickets form one group)."""
        offers = []
        for kind in available:
            info = self.channels[kind]
            granted = 1 if kind != "striped" else max(1, min(streams or 4, info.max_streams))
            cc = ""
            if congestion_control and kind == "striped":
                if congestion_control not in info.congestion_controls:
                    raise TransportUnavailableError(
                        f"congestion control {congestion_control!r} is not allowed on this server "
                        f"(allowed: {', '.join(info.congestion_controls) or 'kernel default only'})"
                    )
                cc = congestion_control
            pending = make(kind, granted, cc)
            ticket = self.tickets.issue(label, kind, pending)
            pending.expires_at = ticket.expires_at
            offers.append(Offer(kind, ticket, info.endpoint, granted, compression, cc))
        return tuple(offers)

    def query(
        self,
        sql: str,
        channels: Sequence[str] = (),
        *,
        streams: int = 0,
        compression: str = "none",
        congestion_control: str = "",
    ) -> QueryHandle:
        """Prepare ``sql`` and issue tickets for the requested channels the server has."""
        available = self._available(channels, compression)
        prepared = self.prepare(sql)
        query_id = f"q{next(self._counter):06d}-{uuid.uuid4().hex[:8]}"
        offers = self._offers(
            query_id, available, streams, compression, congestion_control,
            lambda kind, granted, cc: _Pending(prepared, kind, granted, compression, cc, query_id),
        )
        log.info("query %s planned: %s (scan %d grid points)", query_id, sql.strip()[:200], prepared.scan_rows)
        return QueryHandle(query_id, prepared, offers)

    def open_file(
        self,
        dataset_id: str,
        name: str,
        offset: int = 0,
        length: int = -1,
        missing: Sequence[tuple[int, int]] = (),
        channels: Sequence[str] = (),
        *,
        streams: int = 0,
        congestion_control: str = "",
    ) -> FileHandle:
        """Check a bulk-file request, checksum its range and issue tickets for it."""
        available = self._available(channels, "none")
        path = self.catalog.published_file(dataset_id, name)
        st = path.stat()
        if length < 0:
            length = st.st_size - offset
        if not 0 <= offset <= st.st_size or length < 0 or offset + length > st.st_size:
            raise QueryError(
                f"the range {offset}+{length} lies outside {name} ({st.st_size} bytes)"
            )
        parts = tuple(missing) or ((offset, length),)
        for start, size in parts:
            if start < offset or size < 0 or start + size > offset + length:
                raise QueryError(f"missing range {start}+{size} lies outside the requested {offset}+{length}")
        request = FileRequest(path, st.st_size, st.st_mtime_ns, offset, length, parts,
                              self._range_checksum(path, st.st_size, st.st_mtime_ns, offset, length))
        file_id = f"f{next(self._counter):06d}-{uuid.uuid4().hex[:8]}"
        offers = self._offers(
            file_id, available, streams, "none", congestion_control,
            lambda kind, granted, cc: _Pending(None, kind, granted, "none", cc, file_id, file=request),
        )
        log.info("file %s opened: %s/%s %d+%d (%d parts)", file_id, dataset_id, name, offset, length, len(parts))
        return FileHandle(file_id, request, offers, self.settings.block_bytes)

    def _range_checksum(self, path: Path, size: int, mtime_ns: int, offset: int, length: int) -> int:
        key = (str(path), size, mtime_ns, offset, length)
        with self._lock:
            if key in self._checksums:
                return self._checksums[key]
        value = crc32c_of_file(path, offset, length)
        with self._lock:
            self._checksums[key] = value
            while len(self._checksums) > 256:
                self._checksums.pop(next(iter(self._checksums)))
        return value

    def redeem(self, token: bytes, kind: str) -> _Pending:
        """Claim a ticket for channel ``kind``; return what it refers to."""
        _, pending = self.tickets.claim(token, kind)
        return pending

    def acquire_slot(self) -> None:
        """Take one of the ``max_concurrent_queries`` slots or raise LimitExceededError."""
        if not self._slots.acquire(blocking=False):
            raise LimitExceededError(
                f"the server is running its maximum of {self.settings.max_concurrent_queries} transfers; "
                "try again in a moment"
            )

    def release_slot(self) -> None:
        self._slots.release()

    def execute(self, pending: _Pending, cancel: threading.Event | None = None) -> "Execution":
        """Return a running execution of a redeemed query, holding one query slot."""
        if pending.prepared is None:
            raise TicketError("this ticket is for a file; fetch it with FetchFile or `dstp get`")
        if not self._slots.acquire(blocking=False):
            raise LimitExceededError(
                f"the server is running its maximum of {self.settings.max_concurrent_queries} queries; "
                "try again in a moment"
            )
        try:
            execution = QueryExecution(pending.prepared, self.settings, cancel)
        except BaseException:
            self._slots.release()
            raise
        return Execution(self, pending, execution)

    def run(self, sql: str, cancel: threading.Event | None = None) -> "Execution":
        """Prepare and start ``sql`` in one step, for adapters that answer in the same request (HTTP)."""
        prepared = self.prepare(sql)
        query_id = f"q{next(self._counter):06d}-{uuid.uuid4().hex[:8]}"
        log.info("query %s (direct): %s", query_id, sql.strip()[:200])
        return self.execute(_Pending(prepared, "direct", 1, "none", "", query_id), cancel)

    def start(self, token: bytes, kind: str, cancel: threading.Event | None = None) -> "Execution":
        """Claim ``token`` and start its query (the common path for one-connection channels)."""
        return self.execute(self.redeem(token, kind), cancel)

    def _finished(self, execution: "Execution") -> None:
        with self._lock:
            self._running.pop(execution.query_id, None)
        self._slots.release()

    def running(self) -> list[str]:
        """Return the ids of the queries executing now."""
        with self._lock:
            return list(self._running)

    def cancel_all(self) -> None:
        """Interrupt every running query (server shutdown)."""
        with self._lock:
            running = list(self._running.values())
        for ex in running:
            ex.cancel.set()


class Execution:
    """A query holding a slot until its batches are consumed or abandoned."""

    def __init__(self, service: DstpService, pending: _Pending, execution: QueryExecution) -> None:
        self.service = service
        self.pending = pending
        self.execution = execution
        self.query_id = pending.query_id
        self._released = False
        with service._lock:
            service._running[self.query_id] = execution

    @property
    def cancel(self) -> threading.Event:
        return self.execution.cancel

    @property
    def summary(self):  # type: ignore[no-untyped-def]
        return self.execution.summary

    @property
    def schema(self) -> pa.Schema:
        assert self.pending.prepared is not None  # execute() only accepts query tickets
        return self.pending.prepared.schema

    def batches(self) -> Generator[pa.RecordBatch, None, None]:
        """Yield result batches; the query slot is released when this generator ends (or is closed)."""
        try:
            yield from self.execution.batches()
        finally:
            self.close()

    def close(self) -> None:
        if not self._released:
            self._released = True
            self.service._finished(self)
