"""A query that only picks columns streams from the scan without DuckDB, and answers exactly as DuckDB does.

Every dataset of the test catalog (gridded, packed, with fill values, stations, odd axes) is asked
plain projections both ways — ``plain_projections`` on, and off (DuckDB runs it) — and the two results
must be the same table, schema and metadata included; queries that filter, compute, sort or sample rows
must never take the short path.
"""

from __future__ import annotations

import time
from pathlib import Path

import pyarrow as pa
import pytest

from dstp.catalog.registry import Catalog
from dstp.errors import CancelledError, QueryTimeoutError
from dstp.query.execute import QueryExecution, plain_projection, prepare_query
from dstp.settings import Settings


@pytest.fixture(scope="module")
def catalog(catalog_root: Path) -> Catalog:
    return Catalog.scan(catalog_root)


def answer(catalog: Catalog, sql: str, plain: bool) -> tuple[pa.Table, bool]:
    settings = Settings(catalog_root=catalog.root, batch_rows=1500, plain_projections=plain)
    prepared = prepare_query(sql, catalog, settings)
    execution = QueryExecution(prepared, settings)
    table = pa.Table.from_batches(list(execution.batches()), schema=prepared.schema)
    return table, plain_projection(prepared.plan, prepared.schema) is not None


def test_every_dataset_s_plain_projections_answer_as_duckdb_does(catalog: Catalog) -> None:
    asked = 0
    for ds in catalog:
        name = ds.descriptor.id
        for sql in (f"select * from {name}", f"select * from {name} limit 2000", f"select * from {name} limit 0",
                    f"select * from {name} tablesample 30 percent repeatable (5)"):
            short, took = answer(catalog, sql, True)
            full, _ = answer(catalog, sql, False)
            assert took, sql
            assert short.equals(full, check_metadata=True), sql
            asked += 1
    assert asked >= 8


@pytest.mark.parametrize("sql", [
    "select temperature, time from ccm3",
    "select humidity as h, lat, lon as longitude from ccm3 limit 5000",
    "select salinity, depth from ocean",
])
def test_picked_renamed_and_reordered_columns_answer_as_duckdb_does(catalog: Catalog, sql: str) -> None:
    short, took = answer(catalog, sql, True)
    full, _ = answer(catalog, sql, False)
    assert took and short.num_rows > 0 and short.equals(full, check_metadata=True)


@pytest.mark.parametrize("sql", [
    "select temperature from ccm3 where lat > 10",  # proven on every record read: a plain projection
    "select temperature, time from ccm3 where time <= timestamp '1990-03-16 12:00:00' and lat < 0 and lat > -60",
])
def test_a_where_the_hyperslab_proves_leaves_a_plain_projection_answering_as_duckdb_does(
        catalog: Catalog, sql: str) -> None:
    short, took = answer(catalog, sql, True)
    full, _ = answer(catalog, sql, False)
    assert took and short.num_rows > 0 and short.equals(full, check_metadata=True)


@pytest.mark.parametrize("sql", [
    "select temperature from ccm3 where temperature > 250",
    "select temperature from ccm3 where lat > 10 or lon < 20",
    "select temperature * 2 as t from ccm3",
    "select * from ccm3 order by time, lev, lat, lon limit 3",  # a total order: ties of time have none
    "select distinct lat from ccm3",
    "select * from ccm3 tablesample 100 rows repeatable (3)",
    "select count(*) as n from ccm3",
    "select * from ccm3 limit 10 offset 5",
])
def test_queries_that_do_more_than_pick_columns_run_in_duckdb(catalog: Catalog, sql: str) -> None:
    short, took = answer(catalog, sql, True)
    full, _ = answer(catalog, sql, False)
    in_order = [(name, "ascending") for name in short.column_names]  # DISTINCT's order is DuckDB's choice
    assert not took and short.sort_by(in_order).equals(full.sort_by(in_order), check_metadata=True)


def test_a_plain_projection_past_its_time_limit_times_out_and_a_cancel_cancels(catalog: Catalog) -> None:
    settings = Settings(catalog_root=catalog.root, batch_rows=500, query_time_limit_s=5)
    prepared = prepare_query("select * from ccm3", catalog, settings)
    assert plain_projection(prepared.plan, prepared.schema) is not None
    late = QueryExecution(prepared, settings, started=time.monotonic() - 10)  # its 5 s were up long ago
    with pytest.raises(QueryTimeoutError, match="longer than 5 s"):
        for _ in late.batches():
            pass
    cancelled = QueryExecution(prepared, settings)
    cancelled.cancel.set()
    with pytest.raises(CancelledError):
        for _ in cancelled.batches():
            pass
