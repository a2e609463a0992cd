"""The executor is the service's: a coordinator's reductions run on its workers whichever door the query took.

Before issue 34 scale-out was wired into the gRPC adapter (``ClusterServicer`` subclassed the servicer) and the
service knew of the coordinator only as a bare reduction hook (``rewrite=``). Now the server assembly hands the
coordinator to the service's constructor as its executor, and every door — gRPC, HTTP, Arrow Flight — asks the
service. Each answer is checked against a single server's; the workers' reports say who computed it.
"""

from __future__ import annotations

import io
from pathlib import Path
from typing import Iterator

import httpx
import pyarrow as pa
import pyarrow.flight as fl
import pytest

import dstp
from cluster.conftest import DaskCluster, running_coordinator
from dstp.server import DstpServer
from dstp.service import LocalExecutor

pytestmark = pytest.mark.timeout(180)

SQL = "select lev, month(time) as month, avg(temperature) as t, count(temperature) as n from ccm3 group by lev, month"


@pytest.fixture(scope="module")
def doors(catalog_root: Path, dask_cluster: DaskCluster) -> Iterator[DstpServer]:
    with running_coordinator(catalog_root, dask_cluster, http_port=0, flight_port=0) as server:
        yield server


def _partials(server: DstpServer) -> dict[str, int]:
    assert server.coordinator is not None
    return {w: r.get("partials", 0) for w, r in server.coordinator.reports().items()}


def _sorted(table: pa.Table) -> list[tuple]:
    return sorted(zip(*(table.column(n).to_pylist() for n in ("lev", "month", "n"))),
                  key=lambda r: (r[0], r[1]))


def _grpc(server: DstpServer) -> pa.Table:
    assert server.endpoints is not None
    with dstp.connect(server.endpoints.grpc) as c:
        return c.query(SQL, transport="grpc")


def _http(server: DstpServer) -> pa.Table:
    assert server.endpoints is not None
    r = httpx.get(f"http://{server.endpoints.http}/query", params={"sql": SQL, "format": "arrow"}, timeout=120)
    assert r.status_code == 200, r.text
    return pa.ipc.open_stream(io.BytesIO(r.content)).read_all()


def _flight(server: DstpServer) -> pa.Table:
    assert server.endpoints is not None
    with fl.connect(f"grpc://{server.endpoints.flight}") as c:
        info = c.get_flight_info(fl.FlightDescriptor.for_command(SQL))
        return c.do_get(info.endpoints[0].ticket).read_all()


@pytest.mark.parametrize("door", ["grpc", "http", "flight"])
def test_a_reduction_runs_on_every_worker_through_every_door(doors: DstpServer, client: dstp.Client,
                                                              door: str) -> None:
    assert doors.service is not None and doors.service.executor is doors.coordinator
    before = _partials(doors)
    got = {"grpc": _grpc, "http": _http, "flight": _flight}[door](doors)
    after = _partials(doors)
    assert len(after) == 3 and all(after[w] == before[w] + 1 for w in after), (before, after)  # one piece each
    want = client.query(SQL)  # a single server
    assert _sorted(got) == _sorted(want)
    means = dict(zip(zip(got["lev"].to_pylist(), got["month"].to_pylist()), got["t"].to_pylist()))
    for lev, month, t in zip(want["lev"].to_pylist(), want["month"].to_pylist(), want["t"].to_pylist()):
        assert means[(lev, month)] == pytest.approx(t, rel=1e-12)


def test_a_single_server_runs_its_queries_itself(client: dstp.Client) -> None:
    assert client.query(SQL).num_rows > 0
    assert LocalExecutor().partitioned is False
