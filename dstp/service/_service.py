"""DstpService: one catalog under one set of settings, for every adapter."""

from __future__ import annotations

import threading
import time
from typing import Callable, Sequence

from dstp.catalog.registry import Catalog
from dstp.errors import TicketError
from dstp.metadata import DatasetDetails, DatasetSummary, dataset_details, dataset_summary
from dstp.query.execute import PreparedQuery
from dstp.service.admission import Admission
from dstp.service.files import FileHandle, FileRequest, Files
from dstp.service.offers import ChannelInfo, Offers
from dstp.service.queries import Execution, Queries, QueryHandle
from dstp.settings import Settings
from dstp.transport.sources import MessageSource
from dstp.transport.tickets import TicketStore

__all__ = ["DstpService"]


class DstpService:
    """Serves one catalog under one set of settings.

    ``clock`` gives wall-clock seconds: tickets are issued and expire by it
    (a test advances it instead of sleeping out ``ticket_ttl_s``).
    """

    def __init__(self, catalog: Catalog, settings: Settings, *, clock: Callable[[], float] = time.time) -> None:
        self.catalog = catalog
        self.settings = settings
        self.clock = clock
        self.tickets = TicketStore(settings.ticket_ttl_s, clock)
        self.offers = Offers(self.tickets)
        self.admission = Admission(settings.max_concurrent_queries)
        self.queries = Queries(catalog, settings, self.offers, self.admission)
        self.files = Files(catalog, settings, self.offers, self.admission)

    # -- channels -----------------------------------------------------------------------

    @property
    def channels(self) -> dict[str, ChannelInfo]:
        """The channels offered now, by kind."""
        return self.offers.channels

    def register_channel(self, info: ChannelInfo) -> None:
        """Offer a data channel from now on."""
        self.offers.register(info)

    # -- discovery ----------------------------------------------------------------------

    def datasets(self) -> list[DatasetSummary]:
        """Return the summaries of all published datasets, by id."""
        return sorted((dataset_summary(ds) for ds in self.catalog), key=lambda s: s.id)

    def describe(self, dataset_id: str) -> DatasetDetails:
        """Return the full description of one dataset."""
        return dataset_details(self.catalog.get(dataset_id))

    # -- queries and files --------------------------------------------------------------

    def prepare(self, sql: str) -> PreparedQuery:
        """Return the validated, planned query (raises QueryError and friends)."""
        return self.queries.prepare(sql)

    def query(
        self,
        sql: str,
        channels: Sequence[str] = (),
        *,
        streams: int = 0,
        compression: str = "none",
        congestion_control: str = "",
    ) -> QueryHandle:
        """Plan ``sql`` and issue tickets for the requested channels the server has."""
        return self.queries.plan(sql, channels, streams=streams, compression=compression,
                                 congestion_control=congestion_control)

    def run(self, sql: str, cancel: threading.Event | None = None) -> Execution:
        """Plan and start ``sql`` at once, no ticket (HTTP, gRPC Run); the execution holds a slot."""
        return self.queries.run(sql, cancel)

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
        return self.files.open(dataset_id, name, offset, length, missing, channels, streams=streams,
                               congestion_control=congestion_control)

    def open_source(self, token: bytes, kind: str, cancel: threading.Event | None = None) -> MessageSource:
        """Redeem ``token`` on channel ``kind``; return what to send: a query's records or a file's blocks.

        The one way a ticket becomes data, for every channel (gRPC Fetch and
        FetchFile, striped TCP, UDT). It takes a transfer slot (LimitExceededError
        if none is free), given back when the source is closed; ``cancel``
        interrupts it. TicketError or TicketExpiredError for a bad ticket.
        """
        ticket, grant = self.offers.claim(token, kind)
        subject = grant.subject
        if isinstance(subject, QueryHandle):
            execution = self.queries.start(subject, cancel)
            return execution.source(grant.compression, expires_at=ticket.expires_at,
                                    congestion_control=grant.congestion_control)
        if isinstance(subject, FileRequest):
            return self.files.source(subject, label=ticket.query_id, expires_at=ticket.expires_at,
                                     congestion_control=grant.congestion_control, cancel=cancel)
        raise TicketError("this ticket refers to nothing this server can send")

    # -- what runs now ------------------------------------------------------------------

    def running(self) -> list[str]:
        """Return the ids of the queries executing now."""
        return self.admission.running()

    def execution(self, query_id: str) -> Execution | None:
        """Return the execution of ``query_id`` while it runs, else None."""
        found = self.admission.get(query_id)
        return found if isinstance(found, Execution) else None

    def cancel_all(self) -> None:
        """Interrupt every running query (server shutdown)."""
        self.admission.cancel_all()

    def wait_idle(self, timeout: float = 5.0) -> bool:
        """Wait until no transfer holds a slot; False if ``timeout`` seconds passed first."""
        return self.admission.wait_idle(timeout)
