"""A result cut at max_result_rows/max_result_bytes is never silent: Python, CLI and HTTP on a real server.

The server here caps results at 5,000 records and 30,000 Arrow bytes, in
batches of 1,024 records. `select temperature` (4 bytes a record) is cut by
the row cap; `select lat, temperature` (12 bytes) by the byte cap first.
"""

from __future__ import annotations

import io
import json
import subprocess
import sys
from pathlib import Path
from typing import Iterator

import httpx
import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import dstp
import oracle
from dstp.server import DstpServer
from dstp.settings import Settings
from dstp.transport.client.tuning import AutoTuner

ROWS_CUT = "select temperature from ccm3"  # 196,608 records: cut at max_result_rows=5000
BYTES_CUT = "select lat, temperature from ccm3"  # cut at max_result_bytes=30000 first
MAYBE_CUT = "select temperature from ccm3 where temperature > 0"  # the row count is unknown before running
UNDER = "select temperature from ccm3 limit 5000"  # exactly at the cap: complete


@pytest.fixture(scope="module")
def capped(catalog_root: Path) -> Iterator[DstpServer]:
    settings = Settings(catalog_root=catalog_root, port=0, http_port=0, data_port=0, udt_port=0, batch_rows=1024,
                        max_result_rows=5000, max_result_bytes=30_000)
    with DstpServer(settings) as srv:
        yield srv


@pytest.fixture()
def capped_client(capped: DstpServer, tmp_path: Path) -> Iterator[dstp.Client]:
    with dstp.Client(capped.endpoints.grpc, tuner=AutoTuner(tmp_path / "tuning.json")) as c:
        yield c


@pytest.fixture()
def capped_http(capped: DstpServer) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=f"http://{capped.endpoints.http}", timeout=30) as c:
        yield c


# -- Python ---------------------------------------------------------------------------------


@pytest.mark.parametrize("transport", ["grpc", "striped", "udt"])
def test_query_raises_unless_truncation_is_allowed(capped_client: dstp.Client, transport: str) -> None:
    with pytest.raises(dstp.TruncatedResultError, match=r"after 5,000 records \(result cut at max_result_rows=5000\)"
                       r".*allow_truncated=True") as info:
        capped_client.query(ROWS_CUT, transport=transport)
    assert isinstance(info.value, dstp.LimitExceededError) and info.value.code == "truncated"
    assert info.value.summary is not None and info.value.summary["rows"] == 5000

    with pytest.warns(dstp.DstpTruncationWarning, match="max_result_rows=5000"):
        table = capped_client.query(ROWS_CUT, transport=transport, allow_truncated=True)
    assert table.num_rows == 5000
    meta = table.schema.metadata
    assert meta[b"dstp:truncated"] == b"true"
    assert meta[b"dstp:truncated_reason"] == b"result cut at max_result_rows=5000"
    assert meta[b"dstp:dataset"] == b"ccm3"  # the result's own metadata is kept


def test_byte_cap_is_named_and_batches_raise_at_the_end(capped_client: dstp.Client) -> None:
    stream = capped_client.query_batches(BYTES_CUT)
    rows = 0
    with pytest.raises(dstp.TruncatedResultError, match="max_result_bytes=30000"):
        for batch in stream:
            rows += batch.num_rows  # every batch that arrived is yielded before the error
    assert 0 < rows < 5000 and rows == stream.summary["rows"]
    with pytest.warns(dstp.DstpTruncationWarning, match="max_result_bytes=30000"):
        frame = capped_client.query_pandas(BYTES_CUT, allow_truncated=True)
    assert len(frame) == rows and frame.attrs["dstp:truncated_reason"].endswith("max_result_bytes=30000")
    with pytest.warns(dstp.DstpTruncationWarning):
        assert sum(b.num_rows for b in capped_client.query_batches(BYTES_CUT, allow_truncated=True)) == rows


def test_complete_results_are_not_flagged(capped_client: dstp.Client) -> None:
    table = capped_client.query(UNDER)  # warnings are errors here: none may be issued
    assert table.num_rows == 5000 and b"dstp:truncated" not in table.schema.metadata
    assert capped_client.query("select temperature from ccm3 where lat > 100").num_rows == 0


# -- CLI ------------------------------------------------------------------------------------


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "dstp.cli", *args], capture_output=True, text=True, timeout=60)


def test_cli_exits_3_and_writes_nothing_unless_allowed(capped: DstpServer, tmp_path: Path) -> None:
    server = ("--server", capped.endpoints.grpc)
    shown = _cli("query", ROWS_CUT, *server, "--max-rows", "6000")
    assert shown.returncode == 3, shown.stderr
    assert "warning: the result is incomplete" in shown.stderr and "max_result_rows=5000" in shown.stderr
    assert len(shown.stdout.strip().splitlines()) == 5001  # the header and the 5000 records that came were shown
    # A preview that stops the query after the rows it shows never reaches the cut: it says there is more.
    preview = _cli("query", ROWS_CUT, *server, "--max-rows", "3")
    assert preview.returncode == 0 and "more records than the 3 shown" in preview.stderr
    assert len(preview.stdout.strip().splitlines()) == 4

    out = tmp_path / "cut.parquet"
    refused = _cli("query", ROWS_CUT, *server, "-o", str(out))
    assert refused.returncode == 3, refused.stderr
    assert "max_result_rows=5000" in refused.stderr and "--allow-truncated" in refused.stderr
    assert f"{out} was not written" in refused.stderr and "Traceback" not in refused.stderr
    assert list(tmp_path.iterdir()) == []

    kept = _cli("query", ROWS_CUT, *server, "-o", str(out), "--allow-truncated")
    assert kept.returncode == 0, kept.stderr
    assert "warning: the result is incomplete" in kept.stderr
    assert pq.read_table(out).num_rows == 5000
    assert pq.read_metadata(out).metadata[b"dstp:truncated_reason"] == b"result cut at max_result_rows=5000"

    complete = _cli("query", UNDER, *server, "--format", "csv")
    assert complete.returncode == 0 and "warning" not in complete.stderr
    assert len(complete.stdout.splitlines()) == 5001


def _arrow_file_batches(path: Path) -> list[pa.RecordBatchWithMetadata]:
    with pa.ipc.open_file(path) as reader:
        return [reader.get_batch_with_custom_metadata(i) for i in range(reader.num_record_batches)]


def _arrow_stream_batches(body: bytes) -> list[pa.RecordBatchWithMetadata]:
    with pa.ipc.open_stream(body) as reader:
        return list(reader.iter_batches_with_custom_metadata())


@pytest.mark.parametrize("sql, reason", [(ROWS_CUT, "result cut at max_result_rows=5000"),
                                         (BYTES_CUT, "result cut at max_result_bytes=30000")])
def test_cli_csv_and_arrow_files_carry_the_http_truncation_marks(capped: DstpServer, capped_http: httpx.Client,
                                                                 catalog_root: Path, tmp_path: Path, sql: str,
                                                                 reason: str) -> None:
    """An accepted cut result saved as CSV or Arrow says so in the file, with the HTTP API's own marks."""
    csv_out, arrow_out = tmp_path / "cut.csv", tmp_path / "cut.arrow"
    for out in (csv_out, arrow_out):
        kept = _cli("query", sql, "--server", capped.endpoints.grpc, "-o", str(out), "--allow-truncated")
        assert kept.returncode == 0, kept.stderr
        assert reason in kept.stderr

    # CSV: the last line is the HTTP body's trailer, byte for byte; a reader skipping comments gets the records.
    http_csv = _body(capped_http, sql, "csv").content
    trailer = http_csv[http_csv.rindex(b"\n# dstp-truncated: ") + 1:]
    saved = csv_out.read_bytes()
    assert saved.endswith(trailer), saved[-200:]
    rows = json.loads(trailer[len(b"# dstp-truncated: "):])["truncated"]["rows"]
    assert saved.count(b"dstp-truncated") == 1
    frame = pd.read_csv(csv_out, comment="#")

    # Arrow: a last, empty batch with the custom metadata of the HTTP stream's last batch.
    batches = _arrow_file_batches(arrow_out)
    http_last = _arrow_stream_batches(_body(capped_http, sql, "arrow").content)[-1]
    last = batches[-1]
    assert last.batch.num_rows == 0 and http_last.batch.num_rows == 0
    assert last.custom_metadata is not None, "the Arrow file does not say it was cut"
    assert dict(last.custom_metadata) == dict(http_last.custom_metadata)
    assert last.custom_metadata[b"dstp:truncated_reason"] == reason.encode()
    assert int(last.custom_metadata[b"dstp:truncated_rows"]) == rows
    assert all(b.custom_metadata is None for b in batches[:-1])
    table = pa.Table.from_batches([b.batch for b in batches])

    # The records that did arrive are the first of the grid, as xarray reads them from the files.
    want = oracle.open_dataset(catalog_root, "ccm3").temperature.values.ravel()[:rows]
    assert len(frame) == table.num_rows == rows > 0
    np.testing.assert_array_equal(table.column("temperature").to_numpy(), want)
    np.testing.assert_array_equal(frame["temperature"].to_numpy(np.float32), want)


def test_cli_complete_csv_and_arrow_files_carry_no_mark(capped: DstpServer, tmp_path: Path) -> None:
    for out in (tmp_path / "whole.csv", tmp_path / "whole.arrow"):
        done = _cli("query", UNDER, "--server", capped.endpoints.grpc, "-o", str(out), "--allow-truncated")
        assert done.returncode == 0 and "warning" not in done.stderr, done.stderr
    assert b"dstp-truncated" not in (tmp_path / "whole.csv").read_bytes()
    assert len((tmp_path / "whole.csv").read_bytes().splitlines()) == 5001
    batches = _arrow_file_batches(tmp_path / "whole.arrow")
    assert sum(b.batch.num_rows for b in batches) == 5000
    assert all(b.custom_metadata is None for b in batches)


# -- HTTP -----------------------------------------------------------------------------------


def _body(http: httpx.Client, sql: str, fmt: str, **params: object) -> httpx.Response:
    r = http.get("/query", params={"sql": sql, "format": fmt, **params})
    assert r.status_code == 200, r.text
    return r


def _last_line(r: httpx.Response) -> str:
    return r.text.rstrip("\n").rsplit("\n", 1)[-1]


@pytest.mark.parametrize("sql, header", [(ROWS_CUT, "true"), (MAYBE_CUT, "unknown")])
def test_http_text_formats_end_with_the_truncation_trailer(capped_http: httpx.Client, sql: str, header: str) -> None:
    notice = {"truncated": {"reason": "result cut at max_result_rows=5000", "rows": 5000}}
    csv = _body(capped_http, sql, "csv")
    assert csv.headers["x-dstp-truncated"] == header
    assert ("max_result_rows=5000" in csv.headers.get("x-dstp-truncated-reason", "")) is (header == "true")
    lines = csv.text.splitlines()
    assert len(lines) == 1 + 5000 + 1
    assert lines[-1].startswith("# dstp-truncated: ") and json.loads(lines[-1][len("# dstp-truncated: "):]) == notice

    nd = _body(capped_http, sql, "ndjson")
    assert nd.headers["x-dstp-truncated"] == header
    assert json.loads(_last_line(nd)) == notice and len(nd.text.splitlines()) == 5001

    js = _body(capped_http, sql, "json")
    assert js.headers["x-dstp-truncated"] == header
    with pytest.raises(json.JSONDecodeError, match="Extra data"):  # no JSON parser takes it for a whole result
        json.loads(js.text)
    records, end = json.JSONDecoder().raw_decode(js.text)
    assert len(records) == 5000 and json.loads(js.text[end:]) == notice


def test_http_arrow_ends_with_a_marked_batch_and_no_end_marker(capped_http: httpx.Client) -> None:
    r = _body(capped_http, BYTES_CUT, "arrow")
    assert r.headers["x-dstp-truncated"] == "true" and "max_result_bytes" in r.headers["x-dstp-truncated-reason"]
    assert not r.content.endswith(b"\xff\xff\xff\xff\x00\x00\x00\x00")
    reader = pa.ipc.open_stream(r.content)
    batches = []
    while True:
        try:
            batches.append(reader.read_next_batch_with_custom_metadata())
        except StopIteration:
            break
    last = batches[-1]
    assert last.batch.num_rows == 0
    assert last.custom_metadata[b"dstp:truncated"] == b"true"
    assert last.custom_metadata[b"dstp:truncated_reason"] == b"result cut at max_result_bytes=30000"
    assert int(last.custom_metadata[b"dstp:truncated_rows"]) == sum(b.batch.num_rows for b in batches) > 0


def test_http_assembled_formats_say_it_in_the_header_and_the_file(capped_http: httpx.Client) -> None:
    r = _body(capped_http, ROWS_CUT, "parquet")
    assert r.headers["x-dstp-truncated"] == "true"
    assert r.headers["x-dstp-truncated-reason"] == "result cut at max_result_rows=5000"
    assert r.headers["x-dstp-truncated-rows"] == "5000"
    assert pq.read_table(io.BytesIO(r.content)).num_rows == 5000
    assert pq.read_metadata(io.BytesIO(r.content)).metadata[b"dstp:truncated"] == b"true"
    whole = _body(capped_http, ROWS_CUT, "parquet", limit=100)  # the request's own limit is not truncation
    assert whole.headers["x-dstp-truncated"] == "false"
    assert b"dstp:truncated" not in pq.read_metadata(io.BytesIO(whole.content)).metadata


@pytest.mark.parametrize("sql, params, header", [
    (UNDER, {}, "false"),                                      # LIMIT within the caps
    (ROWS_CUT, {"limit": 4000}, "false"),                      # the request's limit within the caps
    ("select temperature from ccm3 where temperature > 1000", {}, "unknown"),  # might have been cut, was not
])
def test_http_complete_results_have_no_trailer(capped_http: httpx.Client, sql: str, params: dict, header: str) -> None:
    for fmt in ("csv", "ndjson", "json"):
        r = _body(capped_http, sql, fmt, **params)
        assert r.headers["x-dstp-truncated"] == header
        assert "truncated" not in _last_line(r)
    arrow = _body(capped_http, sql, "arrow", **params)
    assert arrow.content.endswith(b"\xff\xff\xff\xff\x00\x00\x00\x00")


def test_cli_csv_on_stdout_ends_with_the_truncation_line(capped: DstpServer, capped_http: httpx.Client) -> None:
    shown = _cli("query", ROWS_CUT, "--server", capped.endpoints.grpc, "--format", "csv")
    assert shown.returncode == 3, shown.stderr
    lines = shown.stdout.splitlines()
    assert len(lines) == 1 + 5000 + 1
    assert lines[-1] == _last_line(_body(capped_http, ROWS_CUT, "csv"))  # the HTTP API's trailer, byte for byte
