"""CSV keeps every record: a NULL in a one-column result is `NA`, not a blank line pandas would skip.

Checked with pandas' default `read_csv` on the CLI's stdout (`--format csv`),
its file (`-o x.csv`) and the HTTP API (`format=csv`), against the records
xarray reads from the same file (tests/oracle.py).
"""

from __future__ import annotations

import io
import subprocess
import sys
from pathlib import Path
from typing import Iterator

import httpx
import numpy as np
import pandas as pd
import pyarrow as pa
import pytest

import oracle
from dstp.result_files import csv_header, csv_rows
from dstp.server import DstpServer
from dstp.settings import Settings

SQL = "select t2m from station"  # 1,400 records, about 5 % of them fill values (NULL)


@pytest.fixture(scope="module")
def csv_server(catalog_root: Path) -> Iterator[DstpServer]:
    with DstpServer(Settings(catalog_root=catalog_root, port=0, http_port=0, data_port=-1, udt_port=-1,
                             batch_rows=256)) as srv:
        yield srv


def _check(frame: pd.DataFrame, expected: np.ndarray) -> None:
    assert list(frame.columns) == ["t2m"]
    assert len(frame) == len(expected)  # no record lost to a skipped blank line
    got = frame["t2m"].to_numpy(dtype="float64")
    np.testing.assert_array_equal(np.isnan(got), np.isnan(expected))
    np.testing.assert_allclose(got, expected, rtol=1e-6)  # (NaN at the same places compare equal)


def test_single_column_nulls_survive_pandas(csv_server: DstpServer, catalog_root: Path, tmp_path: Path) -> None:
    expected = oracle.frame(catalog_root, "station", ["t2m"])["t2m"].to_numpy(dtype="float64")
    assert 0 < np.isnan(expected).sum() < len(expected)
    cli = [sys.executable, "-m", "dstp.cli", "query", SQL, "--server", csv_server.endpoints.grpc]
    stdout = subprocess.run([*cli, "--format", "csv"], capture_output=True, text=True, timeout=60)
    assert stdout.returncode == 0, stdout.stderr
    _check(pd.read_csv(io.StringIO(stdout.stdout)), expected)

    out = tmp_path / "t2m.csv"
    saved = subprocess.run([*cli, "-o", str(out)], capture_output=True, text=True, timeout=60)
    assert saved.returncode == 0, saved.stderr
    _check(pd.read_csv(out), expected)
    assert "\n\n" not in out.read_text()

    r = httpx.get(f"http://{csv_server.endpoints.http}/query", params={"sql": SQL, "format": "csv"}, timeout=60)
    assert r.status_code == 200
    _check(pd.read_csv(io.BytesIO(r.content)), expected)
    assert r.content == out.read_bytes()  # one CSV writer behind both


def test_null_spelling_only_changes_where_a_line_would_be_blank() -> None:
    # several columns: NULL stays an empty field; text with line breaks keeps its quotes and NULLs their own line
    two = pa.record_batch({"a": pa.array([1.5, None]), "b": pa.array([None, "x"])})
    assert csv_header(two.schema) + csv_rows(two) == b'"a","b"\n1.5,\n,"x"\n'
    text = pa.record_batch({"s": pa.array([None, "two\n\nlines", None, None, "", "NA"])})
    body = csv_header(text.schema) + csv_rows(text)
    assert body == b'"s"\nNA\n"two\n\nlines"\nNA\nNA\n""\n"NA"\n'
    assert len(pd.read_csv(io.BytesIO(body))) == 6
