"""Saving a result (`dstp query -o`): written on a thread beside the receive, Parquet in large row groups.

A real server and client (the shared `server`/`client` fixtures); the records of every saved file are
compared with the gRPC stream's, and Parquet's row groups are counted.
"""

from __future__ import annotations

import threading
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from dstp.client import _output
from dstp.client._output import save_result

SQL = "select time, lev, lat, lon, temperature, humidity from ccm3"  # 196,608 records, many batches


def _sorted(table: pa.Table) -> pa.Table:
    return table.sort_by([(n, "ascending") for n in table.column_names])


def test_parquet_row_groups_hold_many_batches_and_the_records_are_the_streams(client, tmp_path: Path,
                                                                             monkeypatch) -> None:
    want = client.query(SQL, transport="grpc")
    batches = len(client.query_batches(SQL, transport="grpc").read_all().to_batches())
    assert batches > 4
    group_bytes = want.nbytes // 3 + 1
    monkeypatch.setattr(_output, "PARQUET_ROW_GROUP_BYTES", group_bytes, raising=False)
    out = tmp_path / "r.parquet"
    assert save_result(client.query_batches(SQL), out) == want.num_rows
    meta = pq.ParquetFile(out).metadata
    assert 3 <= meta.num_row_groups <= 4 < batches  # was one row group per batch
    assert _sorted(pq.read_table(out)).equals(_sorted(want))
    numeric = [c for c in range(meta.num_columns)]
    encodings = {e for c in numeric for e in meta.row_group(0).column(c).encodings}
    assert "RLE_DICTIONARY" not in encodings and "PLAIN_DICTIONARY" not in encodings  # numbers: no dictionary


def test_text_columns_keep_their_dictionary() -> None:
    schema = pa.schema([("time", pa.string()), ("t", pa.float32()), ("n", pa.int64())])
    assert _output.parquet_writer_options(schema) == {"compression": "snappy", "use_dictionary": ["time"]}
    assert _output.parquet_writer_options(pa.schema([("t", pa.float32())]))["use_dictionary"] is False


@pytest.mark.parametrize("suffix", [".arrow", ".csv", ".nc"])
def test_the_other_formats_hold_the_streams_records(client, tmp_path: Path, suffix: str) -> None:
    sql = "select time, lev, lat, lon, temperature from ccm3 where lat > 60"
    out = tmp_path / f"r{suffix}"
    rows = save_result(client.query_batches(sql), out)
    assert rows == client.query(sql, transport="grpc").num_rows > 0
    assert out.stat().st_size > 0 and not list(tmp_path.glob(".*dstp-partial*"))


class _Pages:
    """A write function that records what it got, fails at ``fail_at``, and can be held at an event."""

    def __init__(self, fail_at: int | None = None) -> None:
        self.got: list[int] = []
        self.fail_at = fail_at
        self.go = threading.Event()
        self.go.set()
        self.entered = threading.Event()

    def __call__(self, batch: pa.RecordBatch) -> None:
        self.entered.set()
        self.go.wait(10)
        if self.fail_at is not None and len(self.got) == self.fail_at:
            raise OSError(28, "No space left on device")
        self.got.append(batch.column(0)[0].as_py())


def _batch(i: int) -> pa.RecordBatch:
    return pa.record_batch([pa.array([i] * 1000)], names=["i"])


def test_the_writer_thread_writes_every_batch_in_order() -> None:
    pages = _Pages()
    beside = _output._WriteAhead(pages, limit=3 * _batch(0).nbytes)
    for i in range(50):
        beside.put(_batch(i))
    beside.finish()
    assert pages.got == list(range(50))


def test_a_failed_write_is_raised_in_the_receiving_thread() -> None:
    pages = _Pages(fail_at=5)
    beside = _output._WriteAhead(pages, limit=2 * _batch(0).nbytes)
    with pytest.raises(OSError, match="No space left"):
        for i in range(100):  # the receive stops once the writer failed (put raises), or finish raises
            beside.put(_batch(i))
        beside.finish()
    assert pages.got == [0, 1, 2, 3, 4]


def test_an_abort_drops_what_waits() -> None:
    pages = _Pages()
    pages.go.clear()  # the writer holds at its first batch
    beside = _output._WriteAhead(pages, limit=100 * _batch(0).nbytes)
    for i in range(10):
        beside.put(_batch(i))
    assert pages.entered.wait(10)
    stopping = threading.Thread(target=beside.abort)
    stopping.start()
    with beside._cond:  # the abort has dropped the nine waiting batches
        assert beside._cond.wait_for(lambda: not beside._waiting, timeout=10)
    pages.go.set()
    stopping.join(10)
    assert pages.got == [0]  # only the batch it held
