"""Queries: plan a question and issue its tickets, or run it; a running query is an Execution.

    queries.plan(sql, channels, …)  -> QueryHandle: schema, sizes, offers (nothing read yet)
    queries.run(sql, cancel)        -> Execution, started at once (no ticket: HTTP, gRPC Run)
    queries.start(handle, cancel)   -> Execution of a planned query (a redeemed ticket)

An :class:`Execution` holds a transfer slot from its start until its batches
are consumed or it is closed, and shows adapters what they need — its
``plan``, the ``settings`` it runs under, its typed ``summary`` — without
reaching into the query engine.
"""

from __future__ import annotations

import logging
import math
import threading
from dataclasses import dataclass
from typing import Generator, Sequence

import pyarrow as pa

from dstp.catalog.registry import Catalog
from dstp.query.execute import PreparedQuery, QueryExecution, QuerySummary, prepare_query
from dstp.query.plan import QueryPlan
from dstp.service.admission import Admission
from dstp.service.offers import Offer, Offers
from dstp.settings import Settings
from dstp.transport.sources import QuerySource

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
        known = self.estimated_bytes
        return known if known >= 0 else self.max_rows * row_bytes(self.schema)


class Execution:
    """A running query, holding a transfer slot until its batches are consumed or it is closed."""

    def __init__(self, admission: Admission, handle: QueryHandle, run: QueryExecution) -> None:
        self.handle = handle
        self.query_id = handle.query_id
        #: The engine's run (kept for adapters written before ``plan``/``settings``; use those).
        self.execution = run
        self._admission = admission
        self._released = False
        admission.register(self.query_id, self)

    @property
    def cancel(self) -> threading.Event:
        """Set it to interrupt the query (client gone, server stopping)."""
        return self.execution.cancel

    @property
    def plan(self) -> QueryPlan:
        return self.handle.plan

    @property
    def settings(self) -> Settings:
        return self.execution.settings

    @property
    def schema(self) -> pa.Schema:
        return self.handle.schema

    @property
    def summary(self) -> QuerySummary:
        """Rows, bytes, batches, truncation and reads so far (final once ``batches()`` has ended)."""
        return self.execution.summary

    def batches(self) -> Generator[pa.RecordBatch, None, None]:
        """Yield result batches; the slot is released when this generator ends (or is closed)."""
        try:
            yield from self.execution.batches()
        finally:
            self.close()

    def source(self, compression: str = "none", *, expires_at: float = math.inf,
               congestion_control: str = "") -> QuerySource:
        """Return this query's records as a data channel's messages (Arrow IPC; closing it closes this)."""
        return QuerySource(self, compression, expires_at=expires_at, congestion_control=congestion_control)

    def close(self) -> None:
        """Give the slot back (idempotent); a query still reading is cancelled by its owner first."""
        if not self._released:
            self._released = True
            self._admission.unregister(self.query_id)
            self._admission.release()


class Queries:
    """Planning and starting the queries of one catalog."""

    def __init__(self, catalog: Catalog, settings: Settings, offers: Offers, admission: Admission) -> None:
        self.catalog = catalog
        self.settings = settings
        self.offers = offers
        self.admission = admission

    def prepare(self, sql: str) -> PreparedQuery:
        """Return the validated, planned query (raises QueryError and friends)."""
        return prepare_query(sql, self.catalog, self.settings)

    def plan(
        self,
        sql: str,
        channels: Sequence[str] = (),
        *,
        streams: int = 0,
        compression: str = "none",
        congestion_control: str = "",
    ) -> QueryHandle:
        """Prepare ``sql`` and issue tickets for the requested channels the server has."""
        available = self.offers.available(channels, compression)
        query_id = self.offers.label("q")
        handle = QueryHandle(query_id, self.prepare(sql))
        offers = self.offers.issue(query_id, available, handle, streams=streams, compression=compression,
                                   congestion_control=congestion_control)
        log.info("query %s planned: %s (scan %d grid points)", query_id, sql.strip()[:200], handle.prepared.scan_rows)
        return QueryHandle(query_id, handle.prepared, offers)

    def run(self, sql: str, cancel: threading.Event | None = None) -> Execution:
        """Prepare and start ``sql`` in one step, no ticket: for adapters that answer in the same request."""
        handle = QueryHandle(self.offers.label("q"), self.prepare(sql))
        log.info("query %s (direct): %s", handle.query_id, sql.strip()[:200])
        return self.start(handle, cancel)

    def start(self, handle: QueryHandle, cancel: threading.Event | None = None) -> Execution:
        """Return a running execution of a planned query, holding one slot (LimitExceededError if none is free)."""
        self.admission.acquire("queries")
        try:
            run = QueryExecution(handle.prepared, self.settings, cancel)
        except BaseException:
            self.admission.release()
            raise
        return Execution(self.admission, handle, run)
