"""The one question of Table 4, as dstp SQL."""

from __future__ import annotations

#: Paper 003 §5.3's query on the ccm3 dataset (the paper's "test data").
SQL = "select temperature, time from ccm3 where humidity > 50"


def table4_sql(limit: int | None) -> str:
    """Return the Table 4 query returning the first ``limit`` matching records in grid order (None: all)."""
    return SQL if limit is None else f"{SQL} limit {int(limit)}"
