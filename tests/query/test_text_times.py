"""Times on a non-standard calendar travel as ISO text; the scan builds that column from the coordinate's distinct
values by index (dstp/query/scan.py, ``arrow_text``). Every slab, stride and batch size gives xarray's times and
values (tests/oracle.py: each file decoded on its own), in C order: ``ocean`` has a ``360_day`` calendar and a
descending latitude."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import oracle
from dstp.catalog.registry import Catalog
from dstp.query.execute import QueryExecution, prepare_query
from dstp.settings import Settings


@pytest.fixture(scope="module")
def catalog(catalog_root: Path) -> Catalog:
    return Catalog.scan(catalog_root)


@pytest.fixture(scope="module")
def frame(catalog_root: Path) -> object:
    return oracle.frame(catalog_root, "ocean", ["salinity"])


def _run(catalog: Catalog, sql: str, batch_rows: int) -> pa.Table:
    s = Settings(catalog_root=catalog.root, batch_rows=batch_rows)
    prepared = prepare_query(sql, catalog, s)
    return pa.Table.from_batches(list(QueryExecution(prepared, s).batches()), schema=prepared.schema)


@settings(max_examples=15, deadline=None)
@given(lat=st.integers(-80, 90), months=st.integers(0, 11), stride=st.sampled_from([1, 2, 3]),
       batch_rows=st.sampled_from([500, 4096, 100_000]))
def test_text_times_equal_xarrays_for_every_slab(catalog: Catalog, frame: object, lat: int, months: int,
                                                 stride: int, batch_rows: int) -> None:
    source = "ocean" if stride == 1 else f"stride(ocean, time = {stride})"
    sql = (f"select time, depth, lat, lon, salinity from {source} "
           f"where lat < {lat} and time >= '2000-{1 + months:02d}-01'")
    want_sql = sql.replace(source, "ocean")
    got = _run(catalog, sql, batch_rows)
    want = oracle.run_sql(frame, want_sql, "ocean")  # type: ignore[arg-type]
    assert want.num_rows > 0  # ocean's times are the 12 months of 2000, its latitudes reach below -80
    if stride > 1:
        times = sorted(set(oracle.run_sql(frame, "select distinct time from ocean", "ocean")  # type: ignore[arg-type]
                           .column("time").to_pylist()))[::stride]
        want = want.filter(pa.compute.is_in(want.column("time"), pa.array(times)))
    assert got.schema.field("time").type == pa.string()
    oracle.assert_same_records(got, want, ordered=False)
