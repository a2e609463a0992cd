"""UDT on the workers: a client that asks for ``transport="udt"`` gets each partition from its worker's
own UDT data channel (a real scheduler and 3 worker processes on loopback, libudt on both ends).

The oracle is the session's single server (itself checked against xarray/DuckDB in tests/e2e).
"""

from __future__ import annotations


import pytest

import dstp
import oracle
from cluster.conftest import KillVictimOnDial
from dstp.server import DstpServer
from dstp.transport.wire import udt
from dstp.transport.client.tuning import AutoTuner

pytestmark = pytest.mark.timeout(180)


def _udt_endpoints(coordinator: DstpServer) -> dict[str, str]:
    """Each worker's UDT endpoint, from its own node report."""
    reports = coordinator.coordinator.reports()
    return {r["udt_endpoint"]: w for w, r in reports.items() if r.get("running")}


def test_the_workers_run_udt_channels(coordinator: DstpServer, dask_cluster) -> None:  # type: ignore[no-untyped-def]
    assert udt.available(), f"the UDT channel is {udt.unavailable_reason()}"
    reports = coordinator.coordinator.reports()
    assert set(reports) == set(dask_cluster.workers)
    ends = [r["udt_endpoint"] for r in reports.values()]
    assert all(ends) and len(set(ends)) == 3
    assert not set(ends) & {r["endpoint"] for r in reports.values()}  # its own port, beside striped TCP


@pytest.mark.parametrize("sql, ordered", [
    ("select temperature, time from ccm3 where humidity > 50", False),
    ("select salinity, time, depth, lat, lon from ocean where salinity > 34 order by salinity, time, depth, lat, lon",
     True),
])
def test_partitions_come_over_each_workers_udt_channel(coordinator: DstpServer, cluster_client, client,  # type: ignore[no-untyped-def]
                                                       sql: str, ordered: bool) -> None:
    udt_ends = _udt_endpoints(coordinator)
    stream = cluster_client.query_batches(sql, transport="udt")
    got = stream.read_all()
    assert stream.transport == "udt"
    parts = stream.partitions
    assert len(parts) == 3
    assert {p.endpoint for p in parts} == set(udt_ends)  # every worker's UDT channel, not its striped one
    assert {p.worker for p in parts} == set(udt_ends.values())
    oracle.assert_same_records(got, client.query(sql), ordered=ordered)


def test_a_worker_killed_as_its_udt_partition_is_dialled_is_refetched(coordinator: DstpServer, dask_cluster,  # type: ignore[no-untyped-def]
                                                                     client, tmp_path) -> None:
    udt_ends = _udt_endpoints(coordinator)
    victim = sorted(dask_cluster.workers)[0]
    killer = KillVictimOnDial(dask_cluster, udt_ends, victim)
    sql = "select * from ccm3"
    assert coordinator.endpoints is not None
    with dstp.Client(coordinator.endpoints.grpc, tuner=AutoTuner(tmp_path / "t.json"),
                     wrap_channel=killer.wrap) as c:
        stream = c.query_batches(sql, transport="udt")
        got = stream.read_all()
    assert killer.killed == [victim]
    oracle.assert_same_records(got, client.query(sql))
    lost = [p for p in stream.partitions if p.attempts > 1]
    assert len(lost) == 1 and lost[0].worker != victim and lost[0].endpoint in udt_ends
