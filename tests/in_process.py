"""What dstp answers in process: the planner and executor over a catalog, no server (the oracle tests' other side)."""

from __future__ import annotations

import pyarrow as pa

from dstp.catalog.registry import Catalog
from dstp.query.execute import QueryExecution, prepare_query
from dstp.settings import Settings


def answer_table(catalog: Catalog, sql: str, settings: Settings) -> pa.Table:
    """Return the whole result of ``sql`` as one table with the result schema."""
    prepared = prepare_query(sql, catalog, settings)
    return pa.Table.from_batches(list(QueryExecution(prepared, settings).batches()), schema=prepared.schema)
