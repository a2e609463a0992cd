"""One reduction and one matchup through every surface: gRPC (Python client), HTTP in each format, the CLI,
the query builder's aggregate and group-by controls, and ``--explain``; each answer against pandas/xarray."""

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
import xarray as xr

import oracle

from dstp.server import DstpServer
from dstp.settings import Settings

SQL = ("select lev, month(time) as month, avg(temperature) as t, count(temperature) as n from ccm3 "
       "where lat > 0 group by lev, month order by lev, month")


@pytest.fixture(scope="module")
def web(catalog_root: Path) -> Iterator[DstpServer]:
    srv = DstpServer(Settings(catalog_root=catalog_root, port=0, http_port=0, data_port=-1, udt_port=-1))
    srv.start()
    yield srv
    srv.stop()


@pytest.fixture(scope="module")
def want(catalog_root: Path) -> pd.DataFrame:
    ds = oracle.open_dataset(catalog_root, "ccm3")
    north = ds["temperature"].where(ds["lat"] > 0, drop=True).astype("f8")
    mean = north.groupby("time.month").mean(["time", "lat", "lon"]).transpose("lev", "month")
    count = north.groupby("time.month").count(["time", "lat", "lon"]).transpose("lev", "month")
    return pd.DataFrame({"lev": np.repeat(mean["lev"].values, 12), "month": np.tile(mean["month"].values, 8),
                         "t": mean.values.reshape(-1), "n": count.values.reshape(-1)})


def check(got: pd.DataFrame, want: pd.DataFrame, rtol: float = 1e-12) -> None:
    assert list(got.columns) == ["lev", "month", "t", "n"]
    np.testing.assert_allclose(got["lev"].to_numpy(dtype=float), want["lev"].to_numpy())
    np.testing.assert_array_equal(got["month"].to_numpy(dtype=int), want["month"].to_numpy())
    np.testing.assert_array_equal(got["n"].to_numpy(dtype=int), want["n"].to_numpy())
    np.testing.assert_allclose(got["t"].to_numpy(dtype=float), want["t"].to_numpy(), rtol=rtol)


def test_grpc_python_client(web, want) -> None:
    import dstp

    assert web.endpoints is not None
    with dstp.connect(web.endpoints.grpc) as c:
        check(c.query(SQL).to_pandas(), want)
        check(c.query_pandas(SQL), want)
        batches = list(c.query_batches(SQL))
        check(pa.Table.from_batches(batches).to_pandas(), want)


@pytest.mark.parametrize("fmt", ["csv", "json", "parquet", "nc"])
def test_http_formats(web, want, fmt, tmp_path: Path) -> None:
    assert web.endpoints is not None and web.endpoints.http
    r = httpx.get(f"http://{web.endpoints.http}/query", params={"sql": SQL, "format": fmt}, timeout=60)
    assert r.status_code == 200, r.text[:300]
    if fmt == "csv":
        got = pd.read_csv(io.StringIO(r.text), comment="#")
    elif fmt == "json":
        body = json.loads(r.text)
        rows = body["records"] if isinstance(body, dict) and "records" in body else body
        got = pd.DataFrame(rows)[["lev", "month", "t", "n"]] if isinstance(rows, list) else pd.DataFrame(rows)
    elif fmt == "parquet":
        got = pq.read_table(io.BytesIO(r.content)).to_pandas()
    else:
        (tmp_path / "r.nc").write_bytes(r.content)
        with xr.open_dataset(tmp_path / "r.nc") as ds:
            got = ds.to_dataframe().reset_index()[["lev", "month", "t", "n"]].sort_values(["lev", "month"])
            got = got.reset_index(drop=True)
    check(got, want, rtol=1e-9 if fmt in ("csv", "json") else 1e-12)


def test_cli_query_and_explain(web, want, tmp_path: Path) -> None:
    assert web.endpoints is not None
    cli = [sys.executable, "-m", "dstp.cli"]
    out = tmp_path / "monthly.parquet"
    subprocess.run([*cli, "query", SQL, "--server", web.endpoints.grpc, "-o", str(out)], check=True,
                   capture_output=True, text=True, timeout=120)
    check(pq.read_table(out).to_pandas(), want)
    explained = subprocess.run([*cli, "query", SQL, "--server", web.endpoints.grpc, "--explain"], check=True,
                               capture_output=True, text=True, timeout=120).stdout
    assert "ccm3" in explained and "hyperslab" in explained.lower()
    assert "16" in explained  # lat > 0 is pushed down: 16 of the 32 latitudes are read
    assert "group" in explained.lower() or "aggregate" in explained.lower()


def test_builder_aggregate_controls_produce_valid_sql(web, want) -> None:
    assert web.endpoints is not None and web.endpoints.http
    base = f"http://{web.endpoints.http}/datasets/ccm3/query"
    params = [("group", "lev"), ("group", "month(time)"), ("agg", "avg:temperature"), ("agg", "count:temperature"),
              ("where", "lat:>:0")]
    page = httpx.get(base, params=params, timeout=60)
    assert page.status_code == 200
    assert 'name="group" value="month(time)" checked' in page.text and "agg-function" in page.text
    state = httpx.get(base + ".json", params=params, timeout=60).json()
    sql = state["sql"]
    assert "group by" in sql.lower()
    r = httpx.get(f"http://{web.endpoints.http}/query", params={"sql": sql, "format": "parquet"}, timeout=60)
    assert r.status_code == 200, r.text[:300]
    got = pq.read_table(io.BytesIO(r.content)).to_pandas()
    got.columns = ["lev", "month", "t", "n"]
    check(got, want)
