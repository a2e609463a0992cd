"""dstp.Client keeps its striped connections to a server warm between queries.

A real server on loopback with its striped channel, and the public client: the
second query to the same server rides the first one's TCP connections (the
same local ports, no new connection), pre-dials what it lacks while the Query
rpc is in flight, and returns the records the gRPC stream returns.
"""

from __future__ import annotations

from pathlib import Path
from typing import Iterator

import psutil
import pytest

import dstp
from dstp.server import DstpServer
from dstp.settings import Settings
from dstp.transport.client.tuning import AutoTuner

SQL = "select time, lev, lat, lon, temperature from ccm3 where humidity > 50"


@pytest.fixture(scope="module")
def striped_server(catalog_root: Path) -> Iterator[DstpServer]:
    settings = Settings(catalog_root=catalog_root, port=0, http_port=-1, data_port=0, udt_port=-1,
                        batch_rows=2048, window_bytes=2 * 2**20)
    with DstpServer(settings) as srv:
        yield srv


@pytest.fixture()
def client(striped_server: DstpServer, tmp_path: Path) -> Iterator[dstp.Client]:
    assert striped_server.endpoints is not None
    with dstp.Client(striped_server.endpoints.grpc, tuner=AutoTuner(tmp_path / "tuning.json")) as c:
        yield c


def _stripe_ports(server: DstpServer) -> set[int]:
    """Return the local ports of this process's connections to the server's striped data port."""
    assert server.endpoints is not None and server.endpoints.data
    data_port = int(server.endpoints.data.rsplit(":", 1)[1])
    return {c.laddr.port for c in psutil.Process().net_connections(kind="tcp")
            if c.raddr and c.raddr.port == data_port and c.status == psutil.CONN_ESTABLISHED}


def test_the_second_query_rides_the_first_ones_connections(striped_server: DstpServer, client: dstp.Client) -> None:
    reference = client.query(SQL, transport="grpc")
    assert _stripe_ports(striped_server) == set()
    first = client.query(SQL, transport="striped", streams=4)
    pool = client.policy.pool
    assert pool is not None and pool.settle(10.0)
    ports = _stripe_ports(striped_server)
    assert len(ports) == 4  # kept open after the query
    second = client.query(SQL, transport="striped", streams=4)
    assert pool.settle(10.0)
    assert _stripe_ports(striped_server) == ports and pool.stats.reused == 4
    summary = client.last_summary
    assert summary is not None and summary.reconnects == 0
    assert first.equals(reference) and second.equals(reference)
    client.close()
    assert _stripe_ports(striped_server) == set()  # closing the client closes its kept connections


def test_stripes_the_pool_lacks_are_dialed_while_the_query_is_planned(client: dstp.Client) -> None:
    reference = client.query(SQL, transport="grpc")
    client.query(SQL, transport="striped", streams=2)
    pool = client.policy.pool
    assert pool is not None and pool.settle(10.0)
    table = client.query(SQL, transport="striped", streams=4)  # two kept, two pre-dialed during Query
    assert pool.stats.reused == 2 and pool.stats.predialed == 2
    assert table.equals(reference)

