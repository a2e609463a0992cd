"""Scans read ahead on threads (scan_threads) and still give the sequential scan's batches, in its order.

Real sample files, the real planner and scan; the fault is injected through
the file itself (it changes on disk mid-scan), never by replacing our code.
"""

from __future__ import annotations

import shutil
import threading
from pathlib import Path

import pyarrow as pa
import pytest

from dstp.catalog.registry import Catalog
from dstp.errors import CancelledError, DataFileError
from dstp.query.execute import QueryExecution, prepare_query
from dstp.query.scan import GridScan
from dstp.settings import Settings

QUERIES = [
    "select * from ccm3",
    "select temperature, humidity, lat, lon, time from ccm3 where lat between -30 and 45 and lon > 100",
    "select * from ccm3 tablesample 7 percent repeatable (11)",
    "select * from ocean",
    "select * from ocean where depth < 300",
]


@pytest.fixture(scope="module")
def catalog(catalog_root: Path) -> Catalog:
    return Catalog.scan(catalog_root)


def scan_of(catalog: Catalog, sql: str, threads: int, batch_rows: int = 3000,
            cancel: threading.Event | None = None) -> GridScan:
    plan = prepare_query(sql, catalog, Settings(catalog_root=catalog.root)).plan
    [scan] = plan.scans
    return GridScan(scan.dataset, scan.hyperslab, scan.columns, batch_rows=batch_rows,
                    sampling=scan.ref.sampling, cancel=cancel, threads=threads)


def scan_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name.startswith("dstp-scan")]


@pytest.mark.parametrize("sql", QUERIES)
def test_read_ahead_gives_the_sequential_batches_in_order(catalog: Catalog, sql: str) -> None:
    one = list(scan_of(catalog, sql, 1).batches())
    for threads in (2, 4):
        many = list(scan_of(catalog, sql, threads).batches())
        assert len(many) == len(one) > 3
        assert all(a.equals(b) for a, b in zip(one, many)), (sql, threads)
    assert not scan_threads()


@pytest.mark.parametrize("threads", [1, 3])
def test_a_query_answers_the_same_with_any_scan_threads(catalog: Catalog, threads: int) -> None:
    sql = "select lat, avg(temperature) as t, count(*) as n from ccm3 where humidity > 50 group by lat order by lat"
    results = []
    for t in (1, threads):
        settings = Settings(catalog_root=catalog.root, scan_threads=t, batch_rows=2000)
        execution = QueryExecution(prepare_query(sql, catalog, settings), settings)
        results.append(pa.Table.from_batches(list(execution.batches())))
    assert results[0].num_rows > 0 and results[0].equals(results[1])


def test_closing_a_scan_early_stops_its_threads(catalog: Catalog) -> None:
    batches = scan_of(catalog, "select * from ccm3", 3, batch_rows=500).batches()
    first = next(batches)
    assert first.num_rows > 0 and scan_threads()
    batches.close()  # what DuckDB does when a LIMIT is reached
    assert not scan_threads()


def test_a_cancel_stops_the_read_ahead_with_cancelled(catalog: Catalog) -> None:
    cancel = threading.Event()
    scan = scan_of(catalog, "select * from ccm3", 3, batch_rows=500, cancel=cancel)
    batches = scan.batches()
    next(batches)
    cancel.set()
    with pytest.raises(CancelledError):
        for _ in batches:
            pass
    assert isinstance(scan.error, CancelledError) and not scan_threads()


def test_a_file_that_changes_mid_scan_fails_in_order_after_the_batches_before_it(
        catalog_root: Path, tmp_path: Path) -> None:
    root = tmp_path / "catalog"
    shutil.copytree(catalog_root / "ccm3", root / "ccm3")
    catalog = Catalog.scan(root)
    sql = "select * from ccm3"
    whole = list(scan_of(catalog, sql, 1).batches())
    scan = scan_of(catalog, sql, 3)
    got = []
    last = sorted((root / "ccm3").glob("ccm3_*.nc"))[-1]
    with pytest.raises(DataFileError, match="changed on disk"):
        for batch in scan.batches():
            got.append(batch)
            if len(got) == 1:
                with open(last, "ab") as f:  # the last month's file grows: its blocks must fail
                    f.write(b"\0" * 1024)
    assert 1 <= len(got) < len(whole) and all(a.equals(b) for a, b in zip(got, whole))
    assert not scan_threads()
    catalog.close() if hasattr(catalog, "close") else None
