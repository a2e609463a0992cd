"""DstpService: one catalog under one set of settings, for every adapter."""

from __future__ import annotations

import threading
import time
from typing import Any, Callable, Sequence

import numpy as np
import pyarrow as pa

from dstp.auth import ANONYMOUS, Principal
from dstp.catalog.registry import Catalog, CatalogPage
from dstp.errors import QueryError, TicketError
from dstp.metadata import DatasetDetails, DatasetSummary, dataset_details, dataset_summary
from dstp.query.execute import PreparedQuery
from dstp.query.scan import arrow_values
from dstp.service.access import Access
from dstp.service.admission import Admission
from dstp.service.audit import AuditLog
from dstp.service.chunks import StoredChunks
from dstp.service.executor import Executor, LocalExecutor
from dstp.service.feed import Feed, FeedPage
from dstp.service.files import FileHandle, FileRequest, Files
from dstp.service.offers import ChannelInfo, Offers
from dstp.service.queries import Execution, Queries, QueryHandle
from dstp.service.quotas import Quota, Quotas, Usage
from dstp.settings import Settings
from dstp.transport.server.sources import MessageSource
from dstp.transport.server.tickets import Ticket, TicketStore

__all__ = ["DstpService"]


class DstpService:
    """Serves one catalog under one set of settings.

    ``clock`` gives wall-clock seconds: tickets are issued and expire by it
    (a test advances it instead of sleeping out ``ticket_ttl_s``), and
    embargoes end by it.

    Its collaborators arrive here and nowhere else: the catalog and settings, the ``clock``, ``revalidate``
    (the authenticator's check that a ticket's credential still holds) and the ``executor`` (where queries
    run: :class:`~dstp.service.executor.LocalExecutor` by default, a cluster coordinator when scaled out).

    Every call takes the :class:`~dstp.auth.Principal` the adapter
    authenticated (``ANONYMOUS`` when none is given) and answers only about
    the datasets it may read (:class:`~dstp.service.access.Access`, the one
    place :func:`~dstp.auth.can_read` is asked); its tickets are bound to it.
    """

    def __init__(self, catalog: Catalog, settings: Settings, *, clock: Callable[[], float] = time.time,
                 revalidate: Callable[[Principal], None] | None = None, executor: Executor | None = None) -> None:
        self.catalog = catalog
        self.settings = settings
        self.clock = clock
        self.tickets = TicketStore(settings.ticket_ttl_s, clock)
        self.offers = Offers(self.tickets)
        quotas = Quotas(Quota(settings.quota_concurrent_queries, settings.quota_bytes_per_day),
                        settings.max_concurrent_queries, clock)
        self.admission = Admission(settings.max_concurrent_queries, quotas=quotas, wait_s=settings.admission_wait_s,
                                   max_waiting=settings.max_waiting, stall_timeout_s=settings.stall_timeout_s,
                                   clock=clock)
        #: One line per query and download (dstp/service/audit.py; the ``audit_log`` setting).
        self.audit = AuditLog(clock)
        self.access = Access(catalog, clock)
        #: Where queries run: here (LocalExecutor) or partitioned over a cluster (dstp.cluster.Coordinator); every
        #: prepared query passes through its ``prepare`` (a coordinator sends reductions to its workers).
        self.executor: Executor = executor if executor is not None else LocalExecutor()
        self.queries = Queries(catalog, settings, self.offers, self.admission, self.access, self.audit,
                               self.executor.prepare)
        self.files = Files(catalog, settings, self.offers, self.admission, self.access, self.audit)
        #: Variables as their files store them, chunk by chunk (the Zarr door passes them through unchanged).
        self.chunks = StoredChunks(catalog, self.access, self.admission, self.audit)
        #: The change feed and paged listings, as each principal may see them (dstp/service/feed.py).
        self.feed = Feed(catalog, clock)
        #: Checks that the credential a principal was verified from still holds (revoked, expired): the server
        #: assembly passes the authenticator's, so a ticket stops working with its token (AuthenticationError).
        self.revalidate: Callable[[Principal], None] = revalidate or (lambda principal: None)

    # -- channels -----------------------------------------------------------------------

    @property
    def channels(self) -> dict[str, ChannelInfo]:
        """The channels offered now, by kind."""
        return self.offers.channels

    def register_channel(self, info: ChannelInfo) -> None:
        """Offer a data channel from now on."""
        self.offers.register(info)

    # -- discovery ----------------------------------------------------------------------

    def datasets(self, principal: Principal = ANONYMOUS) -> list[DatasetSummary]:
        """Return the summaries of the published datasets ``principal`` may read, by id."""
        return sorted((dataset_summary(ds) for ds in self.access.catalog_for(principal)), key=lambda s: s.id)

    def page(self, offset: int = 0, limit: int = 100, q: str = "", principal: Principal = ANONYMOUS) -> CatalogPage:
        """Return one page of the datasets ``principal`` may read, by id, matching every word of ``q``."""
        return self.feed.page(principal, offset, limit, q)

    def changes(self, since: int = 0, epoch: str | None = None, limit: int = 1_000,
                principal: Principal = ANONYMOUS) -> FeedPage:
        """Return what changed after catalog version ``since`` in the datasets ``principal`` may read."""
        return self.feed.changes(principal, since, epoch, limit)

    def describe(self, dataset_id: str, principal: Principal = ANONYMOUS) -> DatasetDetails:
        """Return the full description of one dataset (DatasetNotFoundError if ``principal`` may not read it)."""
        # One dataset's policy is asked, not every dataset's: a page of 100 descriptions at 10,000 datasets built
        # the principal's whole catalog 100 times (0.4 s).
        self.access.require(principal, dataset_id)
        return dataset_details(self.catalog.snapshot().get(dataset_id))

    def axis_values(self, dataset_id: str, dimension: str, principal: Principal = ANONYMOUS) -> pa.Array:
        """Return the values of ``dimension``'s coordinate in ``dataset_id``, decoded, in index order.

        Served from the values the catalog decoded when it opened the dataset: no query runs and no admission
        slot is taken. The array is the column ``select <coordinate> from <dataset>`` returns (its Arrow type:
        times as timestamps, or ISO text for a non-standard calendar); a dimension without a coordinate
        variable gives its indices 0 … n-1. DatasetNotFoundError when ``principal`` may not read the dataset
        (as for one that does not exist); QueryError naming the dimensions when it has no such dimension.
        """
        self.access.require(principal, dataset_id)
        ds = self.catalog.snapshot().get(dataset_id)
        if dimension not in ds.dimensions:
            raise QueryError(f"dataset {dataset_id!r} has no dimension {dimension!r}; "
                             f"its dimensions are {', '.join(ds.dimensions)}")
        return _axis_array(ds, dimension)

    def axes(self, dataset_id: str, dimensions: Sequence[str] | None = None,
             principal: Principal = ANONYMOUS) -> dict[str, pa.Array]:
        """Return :meth:`axis_values` of several dimensions (all, by default) under one access check and one
        lookup; a named dimension the dataset lacks is left out (a page asks for the axes it may show)."""
        self.access.require(principal, dataset_id)
        ds = self.catalog.snapshot().get(dataset_id)
        wanted = ds.dimensions if dimensions is None else [d for d in dimensions if d in ds.dimensions]
        return {d: _axis_array(ds, d) for d in wanted}

    def can_read(self, principal: Principal, dataset_id: str) -> bool:
        """Return whether ``principal`` may read ``dataset_id`` now (adapters' caches ask before answering)."""
        return self.access.can_read(principal, dataset_id)

    def require(self, principal: Principal, dataset_id: str) -> None:
        """Raise DatasetNotFoundError, as for a dataset that does not exist, unless ``principal`` may read it."""
        self.access.require(principal, dataset_id)

    # -- tickets (queries and files are asked of ``queries`` and ``files`` themselves) ------------------

    def open_source(self, token: bytes, kind: str, cancel: threading.Event | None = None, *,
                    proof: Callable[[bytes], bool], principal: Principal | None = None) -> tuple[MessageSource, bytes]:
        """Redeem ``token`` on channel ``kind``; return what to send (a query's records or a file's blocks) and
        the ticket's key, the one ``proof`` was checked against.

        The one way a ticket becomes data, for every channel (gRPC Fetch and
        FetchFile, striped TCP, UDT). ``proof(ticket key)`` says whether the
        redeemer proved it holds the ticket's key (an HMAC over the ticket,
        transport/server/tickets.py); ``principal``, when the channel authenticates its
        caller (gRPC), must be the one the ticket was issued to. Either failing
        leaves the ticket to its owner (TicketError). It takes a transfer slot
        (LimitExceededError if none is free), given back when the source is
        closed; ``cancel`` interrupts it. TicketError or TicketExpiredError for
        a bad ticket.
        """
        def check(ticket: Ticket, grant: object) -> None:
            owner = getattr(grant, "principal", ANONYMOUS)
            if principal is not None and principal.key != owner.key:
                raise TicketError("this ticket was issued to another client: only the client that asked for it "
                                  "can redeem it; run the query yourself")
            if not proof(ticket.key):
                raise TicketError("the ticket's proof is missing or wrong: only the client that asked for the "
                                  "ticket can redeem it (it proves so with the offer's key; proto/README.md)")

        ticket, grant = self.offers.claim(token, kind, check)
        # A data channel carries no credential: the one the ticket was issued for must still be valid now.
        self.revalidate(grant.principal)
        subject = grant.subject
        # Checked again where the data leaves, for the principal the ticket was issued to.
        dataset_ids = subject.prepared.query.dataset_ids if isinstance(subject, QueryHandle) \
            else (subject.dataset_id,) if isinstance(subject, FileRequest) else ()
        for dataset_id in dataset_ids:
            self.access.require(grant.principal, dataset_id)
        if isinstance(subject, QueryHandle):
            execution = self.queries.start(subject, cancel, channel=kind)
            return execution.source(grant.compression, expires_at=ticket.expires_at,
                                    congestion_control=grant.congestion_control), ticket.key
        if isinstance(subject, FileRequest):
            return self.files.source(subject, label=ticket.query_id, expires_at=ticket.expires_at,
                                     congestion_control=grant.congestion_control, cancel=cancel,
                                     principal=grant.principal, channel=kind), ticket.key
        raise TicketError("this ticket refers to nothing this server can send")

    # -- what runs now ------------------------------------------------------------------

    def running(self) -> list[str]:
        """Return the ids of the queries executing now."""
        return self.admission.running()

    def execution(self, query_id: str) -> Execution | None:
        """Return the execution of ``query_id`` while it runs, else None."""
        found = self.admission.get(query_id)
        return found if isinstance(found, Execution) else None

    def usage(self, principal: Principal = ANONYMOUS) -> Usage:
        """Return what ``principal`` runs now and fetched today, against its quotas."""
        return self.admission.usage(principal.share_key, principal.name)

    def cancel_all(self) -> None:
        """Interrupt every running query and end every stream following the change feed (server shutdown)."""
        self.feed.close()
        self.admission.cancel_all()

    def close(self) -> None:
        """Stop the service's own thread (the watcher of stalled readers); the server is stopping."""
        self.admission.close()

    def wait_idle(self, timeout: float = 5.0) -> bool:
        """Wait until no transfer holds a slot; False if ``timeout`` seconds passed first."""
        return self.admission.wait_idle(timeout)


def _axis_array(ds: Any, dimension: str) -> pa.Array:
    """Return the decoded values of ``dimension``'s coordinate in ``ds`` (its indices when it has none)."""
    coordinate = next((c for c in ds.coordinates.values() if c.dimension == dimension), None)
    if coordinate is None:
        return pa.array(np.arange(ds.dimensions[dimension].size, dtype=np.int64))
    return arrow_values(coordinate.values, None, coordinate.arrow_type)
