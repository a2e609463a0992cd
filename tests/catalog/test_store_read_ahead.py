"""The read-ahead of scans over object stores (dstp.catalog.readahead): the chunks of the next blocks are fetched
while one is read, and of every file a block spans at once — and that changes when bytes come, never which: answers
equal xarray's on the local files, a replaced object is refused or answered whole from its old version, a store
that fails is retried or refused, and nothing stays held or pending after a scan."""

from __future__ import annotations

from pathlib import Path
from typing import Callable, Iterator

import pyarrow as pa
import pytest

from in_process import answer_table
from oracle import assert_same_records, frame, run_sql
from store_servers import RangeHTTPServer, S3Server
from test_store_catalog import s3_store, store_catalog

from dstp.catalog.registry import Catalog
from dstp.catalog.stores import StoreConfig
from dstp.errors import DataFileError, StoreUnavailableError
from dstp.query.execute import QueryExecution, prepare_query
from dstp.settings import Settings

#: Small blocks: a scan of ccm3 is many blocks, so that most are read ahead of the one being read.
SETTINGS = Settings(batch_rows=512, store_read_ahead_bytes=2 * 2**20)
SCAN = "select temperature, humidity, time, lev, lat, lon from ccm3"


@pytest.fixture(scope="module")
def http(samples: Path) -> Iterator[RangeHTTPServer]:
    (samples / "manifest.txt").write_text("\n".join(p.relative_to(samples).as_posix()
                                                    for p in sorted(samples.rglob("*.nc"))) + "\n")
    server = RangeHTTPServer(samples)
    yield server
    server.stop()


def _chunks_by_ranges(catalog: Catalog) -> None:
    """Make the next reads fetch their chunks from the store: no decoded chunk left from the catalog's build (the
    headers' images stay: the chunk listings need no request)."""
    chunks = catalog.handles.chunks
    assert chunks is not None
    chunks.close()


@pytest.mark.parametrize("threads", [1, 4])
def test_a_full_scan_read_ahead_equals_xarray_on_the_local_files(samples: Path, s3: S3Server, tmp_path: Path,
                                                                 threads: int) -> None:
    """Also with blocks decoded on threads (scan_threads): the read-ahead runs on the thread that hands out blocks."""
    catalog = store_catalog(samples, tmp_path / "root", [s3_store(s3)], datasets=("ccm3",))
    try:
        assert not catalog.problems
        _chunks_by_ranges(catalog)
        chunks = catalog.handles.chunks
        assert chunks is not None
        got = answer_table(catalog, SCAN, Settings(batch_rows=512, store_read_ahead_bytes=2 * 2**20,
                                                   scan_threads=threads))
        want = run_sql(frame(samples, "ccm3", ["temperature", "humidity"]), SCAN, "ccm3")
        assert_same_records(got, want)
        assert chunks.read_ahead > 0  # the scan read chunks its read-ahead fetched
        assert chunks.held_ahead() == 0  # nothing held once the scan ended
    finally:
        catalog.close()


def test_a_point_series_fetches_every_file_s_chunk_at_once(samples: Path, http: RangeHTTPServer,
                                                           tmp_path: Path) -> None:
    """A point across the monthly files: one chunk per file, all asked for side by side. The server holds the GETs
    until one per file waits at once (before: one file after another, so the gate was never met)."""
    catalog = store_catalog(samples, tmp_path / "root", [StoreConfig("models", http.url, manifest="manifest.txt")],
                            datasets=("ccm3",))
    try:
        assert not catalog.problems
        _chunks_by_ranges(catalog)
        files = len(list((samples / "ccm3").glob("*.nc")))
        assert files >= 3
        ds = catalog.resolve("ccm3")
        assert ds is not None
        near = []  # one grid point: each coordinate between its neighbours
        for name, i in (("lat", 3), ("lon", 5), ("lev", 2)):
            values = [float(v) for v in ds.coordinates[name].values[i - 1:i + 2]]
            near.append(f"{name} > {(values[0] + values[1]) / 2!r} and {name} < {(values[1] + values[2]) / 2!r}")
        sql = "select time, temperature from ccm3 where " + " and ".join(near)
        gate = http.hold_gets(files)
        try:
            got = answer_table(catalog, sql, SETTINGS)
        finally:
            http.gate = None
        assert not gate.timed_out, f"the first GET waited out the gate: the {files} files' GETs were not sent at once"
        assert_same_records(got, run_sql(frame(samples, "ccm3", ["temperature"]), sql, "ccm3"))
        assert got.num_rows > files
    finally:
        catalog.close()


def _scan_with_a_replacement(catalog: Catalog, replace: Callable[[], None]) -> pa.Table:
    """Return a scan's whole answer, the store's object replaced after its first batch."""
    settings = Settings(batch_rows=512, store_read_ahead_bytes=64 * 2**10)
    execution = QueryExecution(prepare_query(SCAN, catalog, settings), settings)
    batches = execution.batches()
    first = [next(batches)]
    replace()
    return pa.Table.from_batches(first + list(batches))


def test_an_object_replaced_mid_scan_is_refused_or_answered_whole_from_the_old_version(
        samples: Path, s3: S3Server, tmp_path: Path) -> None:
    """Chunks read ahead before the replacement are of the old version (If-Match); those after are refused: the
    scan either fails naming the file or answers exactly the old files' records — never a mixture."""
    catalog = store_catalog(samples, tmp_path / "root", [s3_store(s3)], datasets=("ccm3",))
    names = sorted(p.name for p in (samples / "ccm3").glob("*.nc"))
    target, source = names[-1], names[0]
    key = f"cmip/samples/ccm3/{target}"
    try:
        assert not catalog.problems
        _chunks_by_ranges(catalog)
        want = run_sql(frame(samples, "ccm3", ["temperature", "humidity"]), SCAN, "ccm3")
        try:
            got = _scan_with_a_replacement(
                catalog, lambda: s3.client().upload_file(str(samples / "ccm3" / source), "archive", key))
        except DataFileError as exc:
            assert target in str(exc) and "replaced" in str(exc)
        else:
            assert_same_records(got, want)  # the old version whole: its chunks were all read ahead in time
        chunks = catalog.handles.chunks
        assert chunks is not None and chunks.held_ahead() == 0
    finally:
        s3.client().upload_file(str(samples / "ccm3" / target), "archive", key)
        catalog.close()


@pytest.mark.parametrize("failures", [2, 6, 20, 10_000])
def test_a_failing_store_is_retried_or_refused_never_answered_wrongly(samples: Path, http: RangeHTTPServer,
                                                                      tmp_path: Path, failures: int) -> None:
    """503s met by the read-ahead leave its chunks to the scan's own read (retried again, or refused naming the
    store); the scan ends either way, holds nothing after, and the next query answers right."""
    catalog = store_catalog(samples, tmp_path / "root", [StoreConfig("models", http.url, manifest="manifest.txt")],
                            datasets=("ccm3",))
    try:
        assert not catalog.problems
        _chunks_by_ranges(catalog)
        want = run_sql(frame(samples, "ccm3", ["temperature", "humidity"]), SCAN, "ccm3")
        http.fail_next(failures, 503)
        try:
            got = answer_table(catalog, SCAN, SETTINGS)
        except StoreUnavailableError as exc:
            assert str(exc).startswith("store 'models' (http://127.0.0.1:") and "HTTP 503 after retries" in str(exc)
            # a chunk is refused only after 4 tries read ahead and 4 of the scan's own: fewer 503s never refuse
            assert failures >= 8
        else:
            assert failures < 10_000  # every request refused: no answer can be made
            assert_same_records(got, want)
        finally:
            failed = http.failed
            http.fail_next(0, 503)
        chunks = catalog.handles.chunks
        assert chunks is not None and chunks.held_ahead() == 0
        assert 0 < failed <= failures
        assert_same_records(answer_table(catalog, SCAN, SETTINGS), want)  # nothing left pending: no hang, right
    finally:
        catalog.close()


def test_read_ahead_off_reads_as_before(samples: Path, s3: S3Server, tmp_path: Path) -> None:
    catalog = store_catalog(samples, tmp_path / "root", [s3_store(s3)], datasets=("ccm3",))
    try:
        _chunks_by_ranges(catalog)
        off = Settings(batch_rows=512, store_read_ahead_bytes=0)
        assert_same_records(answer_table(catalog, SCAN, off),
                            run_sql(frame(samples, "ccm3", ["temperature", "humidity"]), SCAN, "ccm3"))
        chunks = catalog.handles.chunks
        assert chunks is not None and chunks.read_ahead == 0
    finally:
        catalog.close()


def test_the_store_s_link_is_measured_from_its_gets(samples: Path, s3: S3Server, tmp_path: Path) -> None:
    catalog = store_catalog(samples, tmp_path / "root", [s3_store(s3)], datasets=("ccm3",))
    try:
        objects = catalog.handles.objects
        assert objects is not None
        link = objects.stores["models"].link
        assert link.latency_s is not None and link.latency_s > 0 and link.get_s is not None  # the headers' GETs
        assert link.window() >= 32 * 2**20
    finally:
        catalog.close()
