"""Queries: plan a question and issue its tickets, or run it; a running query is an Execution.

    queries.plan(sql, channels, …)  -> QueryHandle: schema, sizes, offers (nothing read yet)
    queries.run(sql, cancel)        -> Execution, started at once (no ticket: HTTP, gRPC Run)
    queries.run_or_offer(sql, channels, inline_max_bytes, …)
                                    -> Execution when the result is small, else a QueryHandle (gRPC Run, auto)
    queries.start(handle, cancel)   -> Execution of a planned query (a redeemed ticket)

Every step that costs something holds a slot of :mod:`.admission`, taken
*before* the SQL is even parsed: planning (``plan``: released once the
tickets are issued; ``run``: kept for the execution) and execution. A
refused request costs nothing, and planning runs under the time limit.

An :class:`Execution` holds a transfer slot from its start until its batches
are consumed or it is closed, and shows adapters what they need — its
``plan``, the ``settings`` it runs under, its typed ``summary``, its
``slot`` (the pace of its reader) — without reaching into the query engine.
When it ends it writes its audit line (:mod:`.audit`).
"""

from __future__ import annotations

import logging
import math
import threading
import time
from dataclasses import dataclass
from typing import Callable, Generator, Sequence

import pyarrow as pa

from dstp.auth import ANONYMOUS, Principal
from dstp.catalog.registry import Catalog
from dstp.errors import DstpError
from dstp.incidents import is_incident, mint
from dstp.query.execute import PreparedQuery, QueryExecution, QuerySummary, prepare_query
from dstp.query.plan import QueryPlan
from dstp.service.access import Access
from dstp.service.admission import Admission, Slot
from dstp.service.audit import AuditLog
from dstp.service.prepared import PreparedQueries
from dstp.service.offers import Offer, Offers
from dstp.settings import Settings
from dstp.transport.server.sources import QuerySource

__all__ = ["Execution", "Queries", "QueryHandle", "row_bytes"]

log = logging.getLogger("dstp.service")

#: Bytes assumed for one value of a variable-width column (text: ISO times).
TEXT_BYTES = 24


def row_bytes(schema: pa.Schema) -> int:
    """Return the Arrow bytes of one result row as the size estimates count it (text: 24 bytes a value)."""
    width = 0
    for f in schema:
        try:
            width += max(1, f.type.bit_width // 8)
        except ValueError:  # variable width
            width += TEXT_BYTES
    return max(1, width)


@dataclass(frozen=True, slots=True)
class QueryHandle:
    """The answer to Query: what the result will look like, how big it can be, how to fetch it."""

    query_id: str
    prepared: PreparedQuery
    offers: tuple[Offer, ...] = ()
    #: Who asked (its tickets are bound to it; admission and the audit log count by it).
    principal: Principal = ANONYMOUS

    @property
    def schema(self) -> pa.Schema:
        return self.prepared.schema

    @property
    def plan(self) -> QueryPlan:
        return self.prepared.plan

    @property
    def estimated_rows(self) -> int:
        """Rows of the result when known without scanning, else -1."""
        return self.prepared.estimated_rows()

    @property
    def estimated_bytes(self) -> int:
        """Arrow bytes of the result when its rows are known, else -1."""
        rows = self.estimated_rows
        return rows * row_bytes(self.schema) if rows >= 0 else -1

    @property
    def max_rows(self) -> int:
        """Most rows the result can have (scan capped by LIMIT and sampling)."""
        return self.plan.max_rows()

    @property
    def max_bytes(self) -> int:
        """Most Arrow bytes the result can have: what a client sizes its channel by."""
        return max_result_bytes(self.prepared)


def max_result_bytes(prepared: PreparedQuery) -> int:
    """Most Arrow bytes the result of ``prepared`` can have: its known size, else most rows × row width."""
    rows, width = prepared.estimated_rows(), row_bytes(prepared.schema)
    return rows * width if rows >= 0 else prepared.plan.max_rows() * width


def _dataset_ids(prepared: PreparedQuery) -> tuple[str, ...]:
    query = prepared.query
    return tuple(getattr(query, "dataset_ids", None) or (query.dataset.id,))


class Execution:
    """A running query, holding a transfer slot until its batches are consumed or it is closed."""

    def __init__(self, admission: Admission, handle: QueryHandle, run: QueryExecution, slot: Slot | None = None,
                 *, audit: AuditLog | None = None, channel: str = "") -> None:
        self.handle = handle
        self.query_id = handle.query_id
        self._run = run  # the engine's run; adapters ask this object's plan, settings, summary and batches
        #: The slot it holds: producers mark on it when they wait on the reader (a stalled one loses it).
        self.slot = slot if slot is not None else admission.acquire(handle.principal.share_key, "queries", handle.query_id)
        self.slot.deadline = self.slot.started + run.settings.query_time_limit_s
        self.slot.on_stall(lambda error: self.cancel.set())
        self.channel = channel
        self._admission = admission
        self._audit = audit
        self._outcome = ""
        self._incident = ""
        self._released = False
        admission.register(self.query_id, self)

    @property
    def cancel(self) -> threading.Event:
        """Set it to interrupt the query (client gone, server stopping)."""
        return self._run.cancel

    @property
    def plan(self) -> QueryPlan:
        return self.handle.plan

    @property
    def settings(self) -> Settings:
        return self._run.settings

    @property
    def schema(self) -> pa.Schema:
        return self.handle.schema

    @property
    def summary(self) -> QuerySummary:
        """Rows, bytes, batches, truncation and reads so far (final once ``batches()`` has ended)."""
        return self._run.summary

    def batches(self) -> Generator[pa.RecordBatch, None, None]:
        """Yield result batches; the slot is released when this generator ends (or is closed)."""
        try:
            yield from self._run.batches()
            self._outcome = "truncated" if self.summary.truncated else "ok"
        except DstpError as exc:
            self._outcome = exc.code
            if is_incident(exc):  # the id the door logs it under, in the audit line too
                self._incident = mint(exc)
            raise
        finally:
            self.close()

    def source(self, compression: str = "none", *, expires_at: float = math.inf,
               congestion_control: str = "") -> QuerySource:
        """Return this query's records as a data channel's messages (Arrow IPC; closing it closes this)."""
        return QuerySource(self, compression, expires_at=expires_at, congestion_control=congestion_control,
                           pace=self.slot)

    @property
    def outcome(self) -> str:
        """How it ended, as the audit log says: ``ok``, ``truncated``, ``stalled``, an error code, or
        ``client_closed`` (the reader stopped before the end: gone, or its own row limit); "" while running."""
        reclaimed = self.slot.reclaimed
        if reclaimed is not None:
            return "stalled" if reclaimed.code == "cancelled" else reclaimed.code
        return self._outcome or ("client_closed" if self._released else "")

    def close(self) -> None:
        """Give the slot back (idempotent); a query still reading is cancelled by its owner first."""
        if not self._released:
            self._released = True
            self._admission.unregister(self.query_id)
            summary = self.summary
            slot = self.slot
            # What the client's channel took, when it counts that (a stalled reader never took its last batch).
            rows, sent = (slot.delivered_rows, slot.delivered_bytes) if slot.counts_delivery else \
                (summary.rows, summary.bytes)
            slot.release(sent)
            if self._audit is not None:
                handle = self.handle
                self._audit.record("query", self.query_id, principal=handle.principal.name,
                                   credential=handle.principal.key, channel=self.channel,
                                   datasets=_dataset_ids(handle.prepared), outcome=self.outcome,
                                   rows=rows, sent=sent,
                                   seconds=self._admission.clock() - self.slot.started, sql=handle.prepared.query.sql,
                                   **({"incident": self._incident} if self._incident else {}))


class Queries:
    """Planning and starting the queries of one catalog."""

    def __init__(self, catalog: Catalog, settings: Settings, offers: Offers, admission: Admission,
                 access: Access | None = None, audit: AuditLog | None = None,
                 prepare: Callable[[PreparedQuery], PreparedQuery] | None = None) -> None:
        self.catalog = catalog
        self.settings = settings
        self.offers = offers
        self.admission = admission
        self.access = access or Access(catalog)
        self.audit = audit or AuditLog(admission.clock)
        #: Applied to every prepared query: the executor's (a scale-out coordinator sends reductions to its workers).
        self._prepare = prepare
        #: Prepared queries by exact text, reused while their datasets and the caller's view are unchanged.
        self.prepared = PreparedQueries()

    def prepare(self, sql: str, principal: Principal = ANONYMOUS, *, started: float | None = None,
                cancel: threading.Event | None = None) -> PreparedQuery:
        """Return the validated, planned query (raises QueryError and friends).

        It is planned against the catalog ``principal`` sees, and every dataset it reads is
        checked again: a dataset it may not read is DatasetNotFoundError, as if it did not exist.
        Planning counts against the time limit from ``started`` (``time.monotonic()``; default now).
        """
        view = self.access.catalog_for(principal)
        key = self.prepared.key(sql, view)
        prepared = self.prepared.get(key, view, self.settings)
        if prepared is None:
            prepared = prepare_query(sql, view, self.settings, started=started, cancel=cancel)
            self.prepared.put(key, view, self.settings, prepared)
        self.access.check_query(principal, prepared)
        return prepared if self._prepare is None else self._prepare(prepared)

    def _admit(self, principal: Principal, query_id: str, sql: str, channel: str) -> Slot:
        """Return a slot for planning or running ``sql``, taken before anything is parsed; a refusal is audited."""
        try:
            return self.admission.acquire(principal.share_key, "queries", query_id)
        except DstpError as exc:
            self._audit_failure(principal, query_id, sql, channel, exc)
            raise

    def _audit_failure(self, principal: Principal, query_id: str, sql: str, channel: str, exc: DstpError,
                       seconds: float = 0.0) -> None:
        self.audit.record("query", query_id, principal=principal.name, credential=principal.key, channel=channel,
                          datasets=(), outcome=exc.code, seconds=seconds, sql=sql)

    def plan(
        self,
        sql: str,
        channels: Sequence[str] = (),
        *,
        streams: int = 0,
        compression: str = "none",
        congestion_control: str = "",
        principal: Principal = ANONYMOUS,
    ) -> QueryHandle:
        """Prepare ``sql`` and issue tickets, bound to ``principal``, for the requested channels the server has."""
        available = self.offers.available(channels, compression)
        query_id = self.offers.label("q")
        slot = self._admit(principal, query_id, sql, "plan")
        started = time.monotonic()
        try:
            handle = QueryHandle(query_id, self.prepare(sql, principal, started=started), principal=principal)
        except DstpError as exc:
            self._audit_failure(principal, query_id, sql, "plan", exc, time.monotonic() - started)
            raise
        finally:
            slot.release()
        offers = self.offers.issue(query_id, available, handle, streams=streams, compression=compression,
                                   congestion_control=congestion_control, principal=principal)
        log.info("query %s planned for %s: %s (scan %d grid points)", query_id, principal.describe(),
                 sql.strip()[:200], handle.prepared.scan_rows)
        return QueryHandle(query_id, handle.prepared, offers, principal)

    def run(self, sql: str, cancel: threading.Event | None = None, principal: Principal = ANONYMOUS, *,
            channel: str = "direct") -> Execution:
        """Prepare and start ``sql`` in one step, no ticket: for adapters that answer in the same request.

        One slot, taken before planning, serves planning and execution; the time limit counts from then.
        """
        outcome = self._run_or_offer(sql, cancel, principal, channel, lambda handle: None)
        assert isinstance(outcome, Execution)
        return outcome

    def run_or_offer(
        self,
        sql: str,
        channels: Sequence[str],
        inline_max_bytes: int,
        cancel: threading.Event | None = None,
        principal: Principal = ANONYMOUS,
        *,
        streams: int = 0,
        compression: str = "none",
        congestion_control: str = "",
        channel: str = "grpc",
    ) -> Execution | QueryHandle:
        """Start ``sql`` at once when its result is small, else answer as :meth:`plan` (gRPC Run for ``auto``).

        Small: the result's ``max_bytes`` is known and below ``inline_max_bytes``, or no data channel
        among ``channels`` is available — then an Execution to stream on the asking connection, as
        :meth:`run`. Otherwise the QueryHandle with one offer (ticket) per available channel, as
        :meth:`plan`. One round trip either way; the planning slot is kept only for the execution.
        """
        available = self.offers.available(channels, compression)

        def offers(handle: QueryHandle) -> tuple[Offer, ...] | None:
            if 0 <= handle.max_bytes < inline_max_bytes or all(k == "grpc" for k in available):
                return None
            return self.offers.issue(handle.query_id, available, handle, streams=streams, compression=compression,
                                     congestion_control=congestion_control, principal=principal)

        return self._run_or_offer(sql, cancel, principal, channel, offers)

    def _run_or_offer(self, sql: str, cancel: threading.Event | None, principal: Principal, channel: str,
                      offers: Callable[[QueryHandle], tuple[Offer, ...] | None]) -> Execution | QueryHandle:
        """Prepare ``sql`` under one slot; ``offers(handle)`` None starts it (keeping the slot), else plans it."""
        query_id = self.offers.label("q")
        slot = self._admit(principal, query_id, sql, channel)
        started = time.monotonic()
        try:
            handle = QueryHandle(query_id, self.prepare(sql, principal, started=started, cancel=cancel),
                                 principal=principal)
            issued = offers(handle)
            if issued is None:
                run = QueryExecution(handle.prepared, self.settings, cancel, started=started)
        except BaseException as exc:
            slot.release()
            if isinstance(exc, DstpError):
                self._audit_failure(principal, query_id, sql, channel, exc, time.monotonic() - started)
            raise
        if issued is not None:
            slot.release()
            log.info("query %s planned for %s: %s (scan %d grid points; offers instead of inline)", query_id,
                     principal.describe(), sql.strip()[:200], handle.prepared.scan_rows)
            return QueryHandle(query_id, handle.prepared, issued, principal)
        log.info("query %s (direct): %s", handle.query_id, sql.strip()[:200])
        return Execution(self.admission, handle, run, slot, audit=self.audit, channel=channel)

    def start(self, handle: QueryHandle, cancel: threading.Event | None = None, *, channel: str = "") -> Execution:
        """Return a running execution of a planned query, holding one slot (LimitExceededError if none is free)."""
        slot = self._admit(handle.principal, handle.query_id, handle.prepared.query.sql, channel)
        try:
            run = QueryExecution(handle.prepared, self.settings, cancel)
        except BaseException:
            slot.release()
            raise
        return Execution(self.admission, handle, run, slot, audit=self.audit, channel=channel)
